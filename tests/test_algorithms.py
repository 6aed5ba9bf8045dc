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
        f"Arith (tests/fixtures/local/agents.py:0): {message}"]


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
])
def test_what_trinitys_constructors_refuse_the_rules_refuse(registry, part, arguments):
    """Where Trinity's part checks a value when it is built, it refuses what tunedsl
    refuses before the run (so a run fails at no later point on it)."""
    defaults = {**algorithms.POLICY_LOSS_ARGS, **algorithms.ADVANTAGE_ARGS}[part]
    with pytest.raises((ValueError, AssertionError)):
        registry.get(part)(**{**defaults, **arguments})
    refused = [key for key, value in arguments.items()
               if algorithms.ARGUMENT_RULES[key](value) is not None]
    assert refused or part == "sapo"  # sapo's pair is checked together (below)


@pytest.mark.parametrize("overrides, message", [
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
    (["algorithm.algorithm_type=sapo", "algorithm.policy_loss_args.tau_pos=2.0"],
     "algorithm.policy_loss_args.tau_neg: sapo's policy loss needs tau_neg >= tau_pos "
     "(Trinity's SAPOPolicyLossFn asserts it)"),
])
def test_an_argument_value_no_part_takes_is_refused(overrides, message, tmp_path):
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, *overrides)
    assert str(caught.value).splitlines() == [
        f"Arith (tests/fixtures/local/agents.py:0): {message}"]


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


def test_readme_says_what_each_algorithm_is_for():
    """README's algorithms table has a row per algorithm, with its purpose and parts as
    `tunedsl.dsl.algorithms` states them."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for name, parts in algorithms.ALGORITHMS.items():
        row = (f"| `{name}` | {parts.purpose} | `{parts.advantage_fn or 'none'}` / "
               f"`{parts.policy_loss_fn}` / `{parts.kl_loss_fn}` |")
        assert row in readme, name


def test_a_trinity_config_cannot_swap_the_algorithms_parts(tmp_path):
    """A base YAML or ``[trinity]`` table that names another policy loss (or advantage,
    entropy loss, reward KL penalty) would run one algorithm on Trinity and another
    locally: refused, naming the file; the algorithm's own part may be restated."""
    base = tmp_path / "base.yaml"
    base.write_text("algorithm:\n  policy_loss_fn: gspo\n  advantage_fn: grpo\n"
                    "  kl_penalty_fn: k3\n")
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, f"trinity_config={base}", "trinity.algorithm.entropy_loss_fn=none")
    assert str(caught.value).splitlines() == [
        f"Arith (tests/fixtures/local/agents.py:0): {base}: algorithm.policy_loss_fn = 'gspo', "
        "but grpo is built with 'ppo' (on both backends); drop the key and choose the "
        "algorithm with algorithm.algorithm_type",
        f"Arith (tests/fixtures/local/agents.py:0): {base}: algorithm.kl_penalty_fn = 'k3', but "
        "grpo is built with 'none' (on both backends); drop the key and choose the algorithm "
        "with algorithm.algorithm_type",
        "Arith (tests/fixtures/local/agents.py:0): [trinity]: algorithm.entropy_loss_fn = "
        "'none', but grpo is built with 'default' (on both backends); drop the key and choose "
        "the algorithm with algorithm.algorithm_type"]
