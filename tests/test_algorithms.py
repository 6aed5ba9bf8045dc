"""tunedsl's copy of Trinity-RFT 0.6.0's algorithms (`tunedsl.dsl.algorithms`) is
Trinity's: each algorithm's parts are its ``default_config()``, each part's arguments its
``default_args()``; the YAML tunedsl writes for each algorithm is one Trinity's validator
accepts and leaves as written; arguments an algorithm does not take are refused before
anything runs, naming the fix; and a ``[trinity]`` table's arguments come back as the
experiment's settings."""

from __future__ import annotations

import pytest

pytest.importorskip("trinity.common.config")

from trinity.algorithm import ADVANTAGE_FN, ALGORITHM_TYPE, KL_FN, POLICY_LOSS_FN  # noqa: E402
from trinity.algorithm.entropy_loss_fn.entropy_loss_fn import EntropyLossFn  # noqa: E402
from trinity.algorithm.kl_fn.kl_fn import KLFn  # noqa: E402

import tunedsl  # noqa: E402
from tunedsl.dsl import algorithms  # noqa: E402
from tunedsl.errors import ConfigError  # noqa: E402

from .trinity_support import validate  # noqa: E402


#: What an algorithm needs beyond the fixture experiment: on_policy_distill, a teacher.
NEEDS = {"on_policy_distill": ["auxiliary_models.teacher.model_path=teacher"]}
#: The fixture experiment of an algorithm that needs its own (SFT learns conversations).
EXPERIMENTS = {"sft": "Supervised"}


def load(tmp_path, *overrides, experiment="Arith"):
    return tunedsl.load_experiment(f"tests.fixtures.local.agents:{experiment}", overrides=[
        "model.model_path=tiny", f"checkpoint_root_dir={tmp_path}", *overrides])


def test_the_tables_are_trinitys():
    for name, arguments in algorithms.POLICY_LOSS_ARGS.items():
        assert POLICY_LOSS_FN.get(name).default_args() == arguments, name
    for name, arguments in algorithms.ADVANTAGE_ARGS.items():
        assert ADVANTAGE_FN.get(name).default_args() == arguments, name
    assert KLFn.default_args() == algorithms.KL_ARGS
    assert EntropyLossFn.default_args() == algorithms.ENTROPY_ARGS
    assert set(algorithms.KL_LOSS_FNS) == set(KL_FN._default_mapping)


@pytest.mark.parametrize("name", sorted(algorithms.ALGORITHMS))
def test_each_algorithms_parts_are_its_trinity_defaults(name):
    parts, trinity = algorithms.ALGORITHMS[name], ALGORITHM_TYPE.get(name).default_config()
    # An algorithm that learns from no reward (sft) names no advantage function.
    assert (parts.advantage_fn, parts.policy_loss_fn, parts.kl_loss_fn,
            parts.entropy_loss_fn) == (trinity.get("advantage_fn"), trinity["policy_loss_fn"],
                                       trinity["kl_loss_fn"], trinity["entropy_loss_fn"])
    assert trinity.get("advantage_fn_args", {}).items() <= {
        **algorithms.ADVANTAGE_ARGS.get(parts.advantage_fn, {}),
        **parts.advantage_args}.items()
    assert ALGORITHM_TYPE.get(name).use_reference == parts.reference


@pytest.mark.parametrize("name", sorted(algorithms.ALGORITHMS))
def test_trinitys_validator_keeps_what_tunedsl_writes(name, tmp_path):
    """Trinity fills a part's arguments only when none are given and copies
    ``algorithm.loss_agg_mode`` over the loss's own; tunedsl writes them all, so the
    validated config holds exactly the resolution the local trainer uses."""
    graph = load(tmp_path, f"algorithm.algorithm_type={name}", *NEEDS.get(name, []),
                 experiment=EXPERIMENTS.get(name, "Arith"))
    resolved = algorithms.resolve(graph.algorithm)
    config = validate(graph, tmp_path).algorithm
    for key, value in resolved.trinity_section().items():
        assert getattr(config, key) == value, key


def test_dapo_is_dapo_on_both_backends(tmp_path):
    """DAPO's defining settings, which Trinity leaves to its example YAMLs: the higher upper
    clip, groups whose rewards agree dropped (GRPO's std_threshold 0), truncated replies
    masked (Trinity's operator, after tunedsl's failed rollouts and the placeholder
    filter), no KL."""
    graph = load(tmp_path, "algorithm.algorithm_type=dapo")
    config = validate(graph, tmp_path)
    assert (config.algorithm.policy_loss_fn_args["clip_range_low"],
            config.algorithm.policy_loss_fn_args["clip_range_high"]) == (0.2, 0.28)
    assert config.algorithm.advantage_fn_args["std_threshold"] == 0.0
    assert config.algorithm.kl_loss_fn == "none"
    operators = [op.name for op in config.data_processor.experience_pipeline.operators]
    assert operators == ["tunedsl.backends.trinity.operators.FailedRollouts",
                         "invalid_reward_filter", "mask_response_truncated"]


def test_the_default_algorithm_has_trinitys_kl_on_both_backends(tmp_path):
    """multi_step_grpo, the default: k2 against the initial model, weight 0.001, no entropy
    bonus, token-mean (the local backend had no KL unless kl_coef was set, and then k3)."""
    resolved = algorithms.resolve(load(tmp_path).algorithm)
    assert (resolved.kl_loss_fn, resolved.kl_coef, resolved.entropy_coef,
            resolved.loss_agg_mode, resolved.uses_reference) == ("k2", 0.001, 0.0,
                                                                 "token-mean", True)


def test_one_clip_range_replaces_both_default_sides(tmp_path):
    """Trinity's GSPO (and DAPO's clip) default to two sides, which win over ``clip_range``
    in Trinity's losses; a clip range the user sets replaces them."""
    resolved = algorithms.resolve(load(tmp_path, "algorithm.algorithm_type=dapo",
                                       "algorithm.clip_range=0.1").algorithm)
    assert resolved.policy_loss_args["clip_range"] == 0.1
    assert "clip_range_high" not in resolved.policy_loss_args
    both = algorithms.resolve(load(tmp_path, "algorithm.algorithm_type=gspo",
                                   "algorithm.clip_range=0.1",
                                   "algorithm.clip_range_high=0.2").algorithm)
    assert (both.policy_loss_args["clip_range"], both.policy_loss_args["clip_range_high"]) == (
        0.1, 0.2)
    assert "clip_range_low" not in both.policy_loss_args


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.algorithm_type=cispo", "algorithm.clip_range=0.3"],
     "algorithm.clip_range: cispo's policy loss (cispo) has no clip_range; it takes "
     "clip_range_low, clip_range_high, enable_mask_clip, mask_clip_range_low, "
     "mask_clip_range_high"),
    (["algorithm.algorithm_type=sapo", "algorithm.policy_loss_args.tau_pso=1.2"],
     "algorithm.policy_loss_args.tau_pso: sapo's policy loss (sapo) has no such argument "
     "(did you mean 'tau_pos'?); it takes tau_pos, tau_neg"),
    (["algorithm.algorithm_type=rloo", "algorithm.std_threshold=0.0"],
     "algorithm.std_threshold: rloo's advantage (rloo) has no std_threshold; it takes no "
     "arguments"),
    (["algorithm.policy_loss_args.loss_agg_mode=token-mean"],
     "algorithm.policy_loss_args.loss_agg_mode: set algorithm.loss_agg_mode instead (Trinity "
     "reads it from algorithm.loss_agg_mode for every loss)"),
    (["algorithm.advantage_args.epsilon=0.01"],
     "algorithm.advantage_args.epsilon: set algorithm.epsilon instead"),
    (["algorithm.kl_loss_fn=none", "algorithm.kl_coef=0.01"],
     "algorithm.kl_coef: grpo has no KL loss (kl_loss_fn = 'none'); set "
     "algorithm.kl_loss_fn too, e.g. 'k2'"),
    (["algorithm.algorithm_type=dapo", "algorithm.kl_loss_fn=k2"],
     "algorithm.kl_loss_fn: dapo trains without a reference model (Trinity's trainer keeps "
     "none for it), so it can have no KL loss; leave kl_loss_fn unset"),
    (["algorithm.algorithm_type=on_policy_distill", "algorithm.entropy_coef=0.1",
      "auxiliary_models.teacher.model_path=t"],
     "algorithm.entropy_coef: on_policy_distill has no entropy bonus (Trinity's "
     "entropy_loss_fn 'none'); leave it unset"),
    (["algorithm.algorithm_type=on_policy_distill"],
     "algorithm.algorithm_type = 'on_policy_distill' learns from a teacher model, and the "
     "experiment has no auxiliary model; add auxiliary_models.teacher "
     "(Model(\"path/to/teacher\")) or name one with algorithm.teacher"),
    (["algorithm.algorithm_type=on_policy_distill", "algorithm.teacher=teachr",
      "auxiliary_models.teacher.model_path=t", "auxiliary_models.judge.model_path=j"],
     "algorithm.teacher = 'teachr' is not one of auxiliary_models (did you mean "
     "'teacher'?); it has teacher, judge"),
    (["algorithm.teacher=teacher"],
     "algorithm.teacher: grpo learns from no teacher; remove it, or use "
     "on_policy_distill"),
])
def test_an_argument_the_algorithm_does_not_take_is_refused(overrides, message, tmp_path):
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, *overrides)
    assert str(caught.value).splitlines() == [
        f"overrides: {message}"]  # (the layer that gave the value: sweep 46 A-W5)


def test_every_parts_default_arguments_pass_the_value_rules():
    """Trinity's own defaults are values the rules take, for every part tunedsl names."""
    for table in (algorithms.POLICY_LOSS_ARGS, algorithms.ADVANTAGE_ARGS):
        for name, arguments in table.items():
            for key, value in arguments.items():
                rule = algorithms.ARGUMENT_RULES.get(key)
                assert rule is None or rule(value) is None, (name, key, value)


@pytest.mark.parametrize("registry, part, arguments", [
    (ADVANTAGE_FN, "grpo", {"std_cal_level": "galaxy"}),
    (ADVANTAGE_FN, "step_wise_grpo", {"std_cal_level": "team"}),
    (POLICY_LOSS_FN, "ppo", {"clip_ratio_c": 1.0}),
    (POLICY_LOSS_FN, "sapo", {"tau_pos": 2.0, "tau_neg": 1.0}),
    (POLICY_LOSS_FN, "rec", {"clip_mode": "three-side"}),
    (POLICY_LOSS_FN, "rec", {"epsilon_low": 1.5}),
    (POLICY_LOSS_FN, "rec", {"weight": "confidence"}),
    (POLICY_LOSS_FN, "rec", {"regularizer": "k3"}),
    (POLICY_LOSS_FN, "rec", {"temp": 0.0}),
    (ADVANTAGE_FN, "gigpo", {"fnorm": "max"}),
])
def test_what_trinitys_constructors_refuse_the_rules_refuse(registry, part, arguments):
    """Where Trinity's part checks a value when it is built, it refuses what tunedsl
    refuses before the run (so a run fails at no later point on it)."""
    defaults = (algorithms.POLICY_LOSS_ARGS if registry is POLICY_LOSS_FN
                else algorithms.ADVANTAGE_ARGS)[part]
    with pytest.raises((ValueError, AssertionError)):
        registry.get(part)(**{**defaults, **arguments})
    refused = [key for key, value in arguments.items()
               if algorithms.ARGUMENT_RULES[key](value) is not None]
    assert refused or part == "sapo"  # sapo's pair is checked together (below)


@pytest.mark.parametrize("overrides, message", [
    # staleness_control reads float(max_staleness) when the trainer starts, on the GPUs
    (["algorithm.sample_strategy=staleness_control",
      'algorithm.sample_strategy_args.max_staleness="abc"'],
     "algorithm.sample_strategy_args.max_staleness = 'abc': max_staleness of grpo's sample "
     "strategy (staleness_control) must be a number of steps, 0 or more (inf, the default: "
     "no limit)"),
    (["algorithm.sample_strategy=staleness_control",
      "algorithm.sample_strategy_args.max_staleness=-1"],
     "algorithm.sample_strategy_args.max_staleness = -1: max_staleness of grpo's sample "
     "strategy (staleness_control) must be a number of steps, 0 or more (inf, the default: "
     "no limit)"),
    (["algorithm.advantage_args.std_cal_level=galaxy"],
     "algorithm.advantage_args.std_cal_level = 'galaxy': std_cal_level of grpo's advantage "
     "(grpo) must be one of 'group', 'batch'"),
    (["algorithm.algorithm_type=opmd", "algorithm.advantage_args.opmd_baseline=median"],
     "algorithm.advantage_args.opmd_baseline = 'median': opmd_baseline of opmd's advantage "
     "(opmd) must be one of 'mean', 'logavgexp'"),
    (["algorithm.clip_range_low=1.5"],
     "algorithm.clip_range_low = 1.5: clip_range_low of grpo's policy loss (ppo) must be a "
     "number from 0 to 1"),
    (["algorithm.policy_loss_args.clip_ratio_c=1"],
     "algorithm.policy_loss_args.clip_ratio_c = 1: clip_ratio_c of grpo's policy loss (ppo) "
     "must be a number above 1"),
    (['algorithm.advantage_args.duplicate_experiences="yes"'],
     "algorithm.advantage_args.duplicate_experiences = 'yes': duplicate_experiences of "
     "grpo's advantage (grpo) must be true or false"),
    # (tau_neg, which the line names, is a default: no layer gave it, and the class is said)
    (["algorithm.algorithm_type=sapo", "algorithm.policy_loss_args.tau_pos=2.0"],
     "Arith (tests/fixtures/local/agents.py:0): algorithm.policy_loss_args.tau_neg: sapo's "
     "policy loss needs tau_neg >= tau_pos (Trinity's SAPOPolicyLossFn asserts it)"),
])
def test_an_argument_value_no_part_takes_is_refused(overrides, message, tmp_path):
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, *overrides)
    where = "" if message.startswith("Arith (") else "overrides: "  # (the layer that gave
    assert str(caught.value).splitlines() == [where + message]  # it: sweep 46 A-W5)


def test_a_trinity_tables_arguments_are_the_experiments(tmp_path):
    """``[trinity]`` arguments come back as settings: the shared ones into their fields,
    a loss's own into ``policy_loss_args`` (so the local backend trains with them too)."""
    graph = load(tmp_path, "algorithm.algorithm_type=sapo",
                 "trinity.algorithm.policy_loss_fn_args.tau_pos=0.9",
                 "trinity.algorithm.loss_agg_mode=seq-mean-token-sum",
                 "trinity.algorithm.entropy_loss_fn_args.entropy_coef=0.002")
    assert graph.algorithm.policy_loss_args == {"tau_pos": 0.9}
    assert (graph.algorithm.loss_agg_mode, graph.algorithm.entropy_coef) == (
        "seq-mean-token-sum", 0.002)
    resolved = algorithms.resolve(graph.algorithm)
    assert resolved.policy_loss_args == {"tau_pos": 0.9, "tau_neg": 1.05,
                                         "loss_agg_mode": "seq-mean-token-sum"}


def test_the_algorithms_reference_says_what_each_algorithm_is_for():
    """The documentation's algorithms table has a row per algorithm, with its purpose and
    parts as `tunedsl.dsl.algorithms` states them."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "docs" / "reference" /
              "algorithms.md").read_text()
    for name, parts in algorithms.ALGORITHMS.items():
        row = (f"| `{name}` | {parts.purpose} | `{parts.advantage_fn or 'none'}` / "
               f"`{parts.policy_loss_fn}` / `{parts.kl_loss_fn}` |")
        assert row in readme, name


#: The algorithm section of a config ported from a Trinity-native project (an email
#: search agent's): multi_step_grpo's advantage with the rec policy loss and seven of its
#: arguments (two left to the loss's constructor).
REC_PORT = {"algorithm_type": "multi_step_grpo", "repeat_times": 4, "policy_loss_fn": "rec",
            "policy_loss_fn_args": {"epsilon_low": 0.2, "epsilon_high": 0.2,
                                    "clip_mode": "one-side", "weight": "importance_sampling",
                                    "temp": 1.0, "regularizer": "none",
                                    "regularizer_coef": 0.0},
            "kl_loss_fn": "k2", "kl_loss_fn_args": {"kl_coef": 0.0}}


def built_loss(section) -> dict:
    """The policy loss Trinity's trainer builds from an ``algorithm`` section, as its
    attributes (what it computes with)."""
    return vars(POLICY_LOSS_FN.get(section.policy_loss_fn)(backend="verl",
                                                           **section.policy_loss_fn_args))


@pytest.mark.parametrize("source", ["base YAML", "[trinity] table", "--set"])
def test_a_trinity_config_composing_parts_ports_with_its_algorithm_unchanged(source, tmp_path):
    """A config that pairs an algorithm with another part (multi_step_grpo with rec: it was
    refused as "multi_step_grpo is built with 'ppo'") trains the same objective through
    tunedsl: the loss Trinity builds from tunedsl's YAML is the one it builds from the
    original, whichever layer the parts come from."""
    import yaml
    from trinity.common.config import load_config

    original = tmp_path / "original.yaml"
    original.write_text(yaml.safe_dump({"algorithm": REC_PORT}))
    args = REC_PORT["policy_loss_fn_args"]
    layer = {"base YAML": [f"trinity_config={original}"],
             "[trinity] table": ["trinity.algorithm.policy_loss_fn=rec", *(
                 f"trinity.algorithm.policy_loss_fn_args.{k}={v!r}".replace("'", '"')
                 for k, v in args.items())],
             "--set": ["algorithm.policy_loss_fn=rec", *(
                 f"algorithm.policy_loss_args.{k}={v!r}".replace("'", '"')
                 for k, v in args.items())]}[source]
    graph = load(tmp_path, "algorithm.algorithm_type=multi_step_grpo", *layer)
    assert (graph.algorithm.policy_loss_fn, graph.algorithm.policy_loss_args) == ("rec", args)
    written = validate(graph, tmp_path).algorithm
    trinity = load_config(str(original)).algorithm
    trinity_defaults = ALGORITHM_TYPE.get("multi_step_grpo").default_config()
    assert (written.policy_loss_fn, written.advantage_fn) == (
        "rec", trinity_defaults["advantage_fn"])
    assert built_loss(written) == built_loss(trinity)
    # the two arguments left out take the constructor's values, not default_args()'s
    assert (written.policy_loss_fn_args["epsilon_low_prime"],
            written.policy_loss_fn_args["epsilon_high_prime"]) == (0.4, 0.4)
    assert "loss_agg_mode" not in written.policy_loss_fn_args  # rec has none


def test_every_part_composes_into_a_config_trinity_builds(tmp_path):
    """For each part Trinity registers, an algorithm it composes with (by where its
    advantages are computed and what its loss reads) writes a config whose parts Trinity's
    own classes build, with every argument tunedsl filled in."""
    from trinity.algorithm import ADVANTAGE_FN, POLICY_LOSS_FN

    for name in algorithms.POLICY_LOSS_ARGS:
        if name in algorithms.LOSS_INPUTS:
            continue
        written = validate(load(tmp_path, "algorithm.algorithm_type=grpo",
                                f"algorithm.policy_loss_fn={name}"), tmp_path).algorithm
        POLICY_LOSS_FN.get(name)(backend="verl", **written.policy_loss_fn_args)
    for name in algorithms.ADVANTAGE_ARGS:
        if name in ("on_policy_distill", "jsd"):
            continue
        host = "rloo" if name in algorithms.TRAINER_ADVANTAGES else "multi_step_grpo"
        written = validate(load(tmp_path, f"algorithm.algorithm_type={host}",
                                f"algorithm.advantage_fn={name}"), tmp_path).algorithm
        assert written.advantage_fn == name
        ADVANTAGE_FN.get(name)(**written.advantage_fn_args)


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.policy_loss_fn=recc"],
     "overrides: invalid value @ algorithm.policy_loss_fn: 'recc' is not a known policy loss (did you mean "
     "'rec'?); choose one of Trinity's: cispo, dpo, gspo, importance_sampling, mix, mix_chord, "
     "opmd, ppo, rec, sapo, sft, sft_is, sft_phi, sppo, topr, or a class's dotted import path"),
    (["algorithm.algorithm_type=multi_step_grpo", "algorithm.advantage_fn=rloo"],
     "algorithm.advantage_fn = 'rloo': Trinity computes it in its trainer, over the whole "
     "batch, and multi_step_grpo computes advantages as experiences arrive; choose one of "
     "asymre, gigpo, grpo, opmd, rec, reinforce, step_wise_grpo, or another algorithm_type"),
    (["algorithm.algorithm_type=rloo", "algorithm.advantage_fn=grpo"],
     "algorithm.advantage_fn = 'grpo': Trinity computes it in the explorer, as experiences "
     "arrive, and rloo computes advantages in its trainer; choose one of asymre_verl, clipb, "
     "clipv, grpo_verl, jsd, on_policy_distill, opmd_verl, ppo, reinforceplusplus, remax, "
     "rloo, or another algorithm_type"),
    (["algorithm.algorithm_type=rloo", "algorithm.advantage_fn=jsd"],
     "algorithm.advantage_fn = 'jsd' learns from a teacher's log-probs, which only "
     "algorithm_type 'jsd' provides; choose another, or that algorithm_type"),
    (["algorithm.policy_loss_fn=dpo"],
     "algorithm.policy_loss_fn = 'dpo' reads chosen and rejected replies in pairs, which only "
     "algorithm_type 'dpo' reads; choose another"),
    # refused in Trinity's words, "DPO does not support `both` mode" (sweep 41 A-W6)
    (["algorithm.algorithm_type=dpo"],
     "algorithm.algorithm_type = 'dpo': Trinity trains 'dpo' offline on a dataset of chosen and "
     "rejected replies in pairs, running no workflow, which tunedsl does not set up; learn "
     "from the judge's reward with an RL algorithm (grpo, ...), or from conversations with "
     "sft"),
    (["algorithm.algorithm_type=cpt"],
     "algorithm.algorithm_type = 'cpt': Trinity trains 'cpt' offline on a dataset of plain text "
     "(continued pre-training), running no workflow, which tunedsl does not set up; learn "
     "from the judge's reward with an RL algorithm (grpo, ...), or from conversations with "
     "sft"),
    (["algorithm.policy_loss_fn=mix"],
     "algorithm.policy_loss_fn = 'mix' reads expert rows, which only sample_strategy 'mix' "
     "provides; choose another, or set sample_strategy so"),
    (["algorithm.entropy_loss_fn=mix"],
     "algorithm.entropy_loss_fn = 'mix' reads expert rows, which only sample_strategy 'mix' "
     "provides; choose 'default' or 'none', or set sample_strategy so"),
    (["algorithm.algorithm_type=sft", "algorithm.advantage_fn=grpo"],
     "algorithm.advantage_fn: sft learns from no reward, so it has no advantage function; "
     "remove it"),
    (["algorithm.policy_loss_fn=rec", "algorithm.clip_range=0.3"],
     "algorithm.clip_range: grpo's policy loss (rec) has no clip_range; it takes epsilon_low, "
     "epsilon_high, epsilon_low_prime, epsilon_high_prime, clip_mode, weight, regularizer, "
     "regularizer_coef, temp"),
    (["algorithm.policy_loss_fn=rec", "algorithm.policy_loss_args.clip_mod=ring"],
     "algorithm.policy_loss_args.clip_mod: grpo's policy loss (rec) has no such argument (did "
     "you mean 'clip_mode'?); it takes epsilon_low, epsilon_high, epsilon_low_prime, "
     "epsilon_high_prime, clip_mode, weight, regularizer, regularizer_coef, temp"),
    (["algorithm.policy_loss_fn=rec", "algorithm.policy_loss_args.clip_mode=circle"],
     "algorithm.policy_loss_args.clip_mode = 'circle': clip_mode of grpo's policy loss (rec) "
     "must be one of 'none', 'one-side', 'gspo-one-side', 'two-side', 'ring'"),
    (["algorithm.policy_loss_fn=rec",
      "algorithm.policy_loss_args.weight=gspo_importance_sampling"],
     "algorithm.policy_loss_args.weight = 'gspo_importance_sampling' weighs by the sequence "
     "ratio, which Trinity's rec loss computes only with clip_mode 'gspo-one-side'; set that "
     "clip_mode, or another weight"),
    (["algorithm.algorithm_type=rec", "algorithm.policy_loss_args.clip_mode=circle"],
     "algorithm.policy_loss_args.clip_mode = 'circle': clip_mode of rec's policy loss (rec) "
     "must be one of 'none', 'one-side', 'gspo-one-side', 'two-side', 'ring'"),
    (["algorithm.sample_strategy=staleness_control",
      "algorithm.sample_strategy_args.max_stalenes=2"],
     "algorithm.sample_strategy_args.max_stalenes: grpo's sample strategy (staleness_control) "
     "has no such argument (did you mean 'max_staleness'?); it takes max_staleness"),
])
def test_parts_that_do_not_compose_are_refused_before_the_run(overrides, message, tmp_path):
    """What Trinity would fail on in its trainer or experience pipeline, after the cluster
    is up (a TypeError, an assertion, a NameError in rec's loss), is refused in one line."""
    supervised = "algorithm.algorithm_type=sft" in overrides
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, *overrides, experiment="Supervised" if supervised else "Arith")
    where = "" if message.startswith("overrides:") else "overrides: "  # (its layer)
    assert str(caught.value).splitlines() == [where + message]


def test_a_trinity_only_algorithms_arguments_reach_trinity(tmp_path):
    """An algorithm only Trinity runs (rec) gets the arguments the experiment gives its
    parts (they were left out of the YAML), and a part given by its import path is written
    as given."""
    written = validate(load(tmp_path, "algorithm.algorithm_type=rec",
                            "algorithm.policy_loss_args.clip_mode=ring",
                            "algorithm.advantage_args.std_normalize=true"), tmp_path).algorithm
    assert (written.policy_loss_fn_args, written.advantage_fn_args) == (
        {"clip_mode": "ring"}, {"std_normalize": True})
    graph = load(tmp_path, "algorithm.algorithm_type=rec",
                 "algorithm.policy_loss_fn=my_losses.Custom",
                 "algorithm.policy_loss_args.alpha=2")
    from tunedsl.backends.trinity.config import trinity_config

    section = trinity_config(graph)["algorithm"]
    assert (section["policy_loss_fn"], section["policy_loss_fn_args"]) == (
        "my_losses.Custom", {"alpha": 2})


def test_a_reward_penalty_the_local_backend_does_not_compute_is_refused(tmp_path):
    """A base YAML's ``kl_penalty_fn`` (a reward penalty Trinity applies for algorithms
    that compute advantages in its trainer) would run another objective on Trinity than
    locally; a base YAML's or ``[trinity]`` table's parts compose the algorithm instead."""
    base = tmp_path / "base.yaml"
    base.write_text("algorithm:\n  policy_loss_fn: gspo\n  kl_penalty_fn: k3\n")
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, f"trinity_config={base}", "trinity.algorithm.entropy_loss_fn=none")
    assert str(caught.value).splitlines() == [
        f"Arith (tests/fixtures/local/agents.py:0): {base}: algorithm.kl_penalty_fn = 'k3', but "
        "grpo is built with 'none' (on both backends); drop the key, or choose an "
        "algorithm_type only Trinity runs"]
    base.write_text("algorithm:\n  policy_loss_fn: gspo\n")
    resolved = algorithms.resolve(load(tmp_path, f"trinity_config={base}",
                                       "trinity.algorithm.entropy_loss_fn=none").algorithm)
    assert (resolved.policy_loss_fn, resolved.entropy_loss_fn, resolved.loss_agg_mode) == (
        "gspo", "none", "seq-mean-token-mean")


def test_a_composed_advantage_decides_whether_a_group_is_needed(tmp_path):
    """group_size 1 is refused for an advantage that compares a task's rollouts, whether the
    algorithm's own or one composed in, and taken for one that does not."""
    assert load(tmp_path, "algorithm.algorithm_type=multi_step_grpo",
                "algorithm.advantage_fn=reinforce", "algorithm.group_size=1").algorithm \
        .group_size == 1
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, "algorithm.algorithm_type=topr", "algorithm.advantage_fn=rec",
             "algorithm.group_size=1")
    assert str(caught.value) == (
        "overrides: algorithm.group_size = 1: algorithm.advantage_fn 'rec' "
        "(of topr) compares rollouts of the same task, so it needs group_size >= 2")


def test_a_trinity_configs_kl_and_entropy_arguments_are_checked(tmp_path):
    """kl_loss_fn_args and entropy_loss_fn_args in a base YAML or [trinity] passed check
    and reached Trinity's trainer, whose constructors raise on an unknown key or on an
    adaptive KL without its target; the local backend, whose KL coefficient is constant,
    refuses an adaptive one."""
    from tunedsl.api import check

    base = tmp_path / "base.yaml"
    base.write_text("algorithm:\n  kl_loss_fn_args:\n    kl_coeff: 0.01\n    adaptive: true\n"
                    "  entropy_loss_fn_args:\n    foo: 1\n")
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, f"trinity_config={base}")
    where = "Arith (tests/fixtures/local/agents.py:0)"
    assert str(caught.value).splitlines() == [
        f"{where}: {base}: algorithm.kl_loss_fn_args.kl_coeff: Trinity's kl loss fn has no "
        f"such argument (did you mean 'kl_coef'?); it takes adaptive, kl_coef, target_kl, "
        f"horizon",
        f"{where}: {base}: algorithm.kl_loss_fn_args.adaptive = true needs target_kl and "
        f"horizon too (Trinity's KLFn raises without them); set both, or drop adaptive",
        f"{where}: {base}: algorithm.entropy_loss_fn_args.foo: Trinity's entropy loss fn has "
        f"no such argument; it takes entropy_coef"]
    # values are checked as Trinity's KLFn takes them: a [trinity] table's text is text
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, 'trinity.algorithm.kl_loss_fn_args.adaptive="yes"')
    assert str(caught.value) == (
        f"{where}: [trinity]: algorithm.kl_loss_fn_args.adaptive = 'yes': must be true or false")
    base.write_text("algorithm:\n  kl_loss_fn_args:\n    kl_coef: 1e-3\n")  # a number there
    assert load(tmp_path, f"trinity_config={base}").algorithm.kl_coef == 0.001
    graph = load(tmp_path, "trinity.algorithm.kl_loss_fn_args.adaptive=true",
                 "trinity.algorithm.kl_loss_fn_args.target_kl=0.1",
                 "trinity.algorithm.kl_loss_fn_args.horizon=1000")
    with pytest.raises(ConfigError) as caught:
        check(graph, backend="local")
    assert caught.value.problems[0] == (
        "[trinity]: algorithm.kl_loss_fn_args.adaptive = true: the local backend keeps kl_coef "
        "constant (an adaptive coefficient is Trinity's); use backend='trinity', or drop "
        "adaptive")
