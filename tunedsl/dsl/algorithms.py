"""Trinity-RFT 0.6.0's algorithms as data: what each one is made of, every function's own
arguments and their defaults, and how an `Algorithm` record resolves into the ``algorithm``
section both backends run.

Trinity builds an algorithm from named parts (``algorithm/algorithm.py``,
``default_config()``): an advantage function, a policy loss, a KL loss against a reference
model and an entropy bonus, each with its own arguments (``default_args()``). The tables
below copy those names and defaults (``tests/test_algorithms.py`` checks them against
Trinity's registries), so the record's checks, the Trinity YAML writer and the local
trainer read one resolution, `resolve`, without importing Trinity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import attrs

from .trinity_fields import TURN_KEYS

#: Trinity's KL functions (``algorithm/kl_fn``), and those the local trainer computes.
KL_LOSS_FNS: tuple[str, ...] = ("none", "k1", "k2", "k3", "low_var_kl", "abs", "corrected_k3")
#: How a loss over tokens becomes one number (``algorithm/utils.py``, ``aggregate_loss``).
LOSS_AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                   "seq-mean-token-sum-norm")
#: What a failed rollout (its workflow or judge raised, or it timed out) becomes.
ON_FAILED_ROLLOUT: tuple[str, ...] = ("drop", "zero", "drop_group")
#: What a reply cut by ``max_tokens`` or the context becomes.
ON_TRUNCATED_REPLY: tuple[str, ...] = ("train", "mask")

#: ``KLFn.default_args()`` and ``EntropyLossFn.default_args()``.
KL_ARGS: Mapping[str, Any] = {"adaptive": False, "kl_coef": 0.001}
ENTROPY_ARGS: Mapping[str, Any] = {"entropy_coef": 0.0}

#: Each policy loss's ``default_args()`` (``algorithm/policy_loss_fn``).
POLICY_LOSS_ARGS: Mapping[str, Mapping[str, Any]] = {
    "ppo": {"clip_range": 0.2, "clip_ratio_c": 3.0, "loss_agg_mode": "token-mean",
            "enable_sequence_masking": False, "delta_sequence_masking": 0.1,
            "fallback_to_policy_gradient": False},
    "gspo": {"clip_range_low": 0.0003, "clip_range_high": 0.0004,
             "loss_agg_mode": "seq-mean-token-mean"},
    "cispo": {"clip_range_low": 1.0, "clip_range_high": 0.28, "enable_mask_clip": False,
              "mask_clip_range_low": 1.0, "mask_clip_range_high": 0.28,
              "loss_agg_mode": "token-mean"},
    "sapo": {"tau_pos": 1.0, "tau_neg": 1.05, "loss_agg_mode": "token-mean"},
    "opmd": {"tau": 1.0, "loss_agg_mode": "token-mean"},
    "topr": {"advantage_threshold": 0.0, "loss_agg_mode": "token-mean"},
    "sft": {"loss_agg_mode": "token-mean"},
    "rec": {"epsilon_low": 0.2, "epsilon_high": 0.2, "epsilon_low_prime": 0.6,
            "epsilon_high_prime": 2, "clip_mode": "none", "weight": "none",
            "regularizer": "none", "regularizer_coef": 0.0, "temp": 1.0},
    "sppo": {"epsilon": 0.3, "loss_agg_mode": "token-mean"},
    "importance_sampling": {"loss_agg_mode": "token-mean"},
    "sft_is": {"loss_agg_mode": "token-mean"},
    "sft_phi": {"loss_agg_mode": "token-mean", "cutoff_prob": 1.0},
    "dpo": {"beta": 0.1, "label_smoothing": 0.0},
    "mix": {"mu": 0.1, "clip_range": 0.2, "loss_agg_mode": "token-mean"},
    "mix_chord": {"mu_warmup_steps": 0, "mu_decay_steps": 0, "mu_peak": 0.1, "mu_valley": 0.1,
                  "clip_range": 0.2, "enable_phi_function": True,
                  "loss_agg_mode": "token-mean"},
}  # fmt: skip
_MIX_EXTRA = ("clip_range_low", "clip_range_high", "use_dynamic_bsz", "ppo_mini_batch_size",
              "ppo_micro_batch_size_per_gpu", "ngpus_trainer", "train_batch_size_usual",
              "train_batch_size_expert", "sft_loss_agg_mode", "grpo_loss_agg_mode")
#: Arguments a policy loss's constructor takes beyond its ``default_args()`` (PPO's and
#: GSPO's clip range may be given as one value or as its two sides).
POLICY_LOSS_EXTRA: Mapping[str, tuple[str, ...]] = {
    "ppo": ("clip_range_low", "clip_range_high"), "gspo": ("clip_range",),
    "mix": _MIX_EXTRA, "mix_chord": _MIX_EXTRA}

#: Each advantage function's ``default_args()`` (``algorithm/advantage_fn``).
ADVANTAGE_ARGS: Mapping[str, Mapping[str, Any]] = {
    "grpo": {"epsilon": 1e-6, "std_threshold": None, "duplicate_experiences": False,
             "rank_penalty": None, "std_cal_level": "group"},
    "step_wise_grpo": {"epsilon": 1e-6, "enable_step_norm": False, "std_threshold": None,
                       "std_cal_level": "group"},
    "rloo": {},
    "reinforceplusplus": {"gamma": 1.0},
    "reinforce": {},
    "opmd": {"opmd_baseline": "mean", "tau": 1.0},
    "on_policy_distill": {"kl_coef": 1.0},
    "gigpo": {"omega": 1.0, "gamma": 1.0, "fnorm": "none", "epsilon": 1e-6,
              **TURN_KEYS},
    "rec": {"epsilon": 1e-6, "std_normalize": False, "drop": None},
    "asymre": {"baseline_shift": -0.1},
    "ppo": {"gamma": 1.0, "lam": 1.0},
    "grpo_verl": {"epsilon": 1e-6},
    "remax": {},
    "opmd_verl": {"opmd_baseline": "mean", "tau": 1.0},
    "asymre_verl": {"baseline_shift": -0.1},
    "jsd": {"lambda_coef": 0.5, "kl_coef": 1.0, "temperature": 1.0, "chunk_size": None},
    "clipb": {"epsilon": 1e-6, "mu": 2.5},
    "clipv": {"epsilon": 1e-6, "mu": 8.5, "max_frac": 1e-4},
}  # fmt: skip

#: Where a part's constructor defaults an argument otherwise than its ``default_args()``:
#: Trinity fills a part's arguments from ``default_args()`` only when a config gives none,
#: and a table that leaves one of these out gets the constructor's value.
CONSTRUCTED_POLICY_LOSS_ARGS: Mapping[str, Mapping[str, Any]] = {
    "rec": {"epsilon_low_prime": 0.4, "epsilon_high_prime": 0.4}}
CONSTRUCTED_ADVANTAGE_ARGS: Mapping[str, Mapping[str, Any]] = {"clipv": {"mu": 2.0}}
#: Trinity's entropy losses (``algorithm/entropy_loss_fn``) and sample strategies
#: (``algorithm/sample_strategy``, ``default_args()`` where they have any).
ENTROPY_LOSS_FNS: tuple[str, ...] = ("default", "mix", "none")
SAMPLE_STRATEGY_ARGS: Mapping[str, Mapping[str, Any]] = {
    "default": {}, "warmup": {}, "staleness_control": {},
    "mix": {"expert_data_ratio": 0.5, "sft_dataset_name": "sft_dataset"}}
#: The advantage functions Trinity computes in its trainer, over a whole batch (the others
#: run in the explorer's experience pipeline as experiences arrive); an algorithm type
#: computes its advantages in one place, so it takes functions of that kind only.
TRAINER_ADVANTAGES: frozenset[str] = frozenset({
    "ppo", "grpo_verl", "reinforceplusplus", "remax", "rloo", "opmd_verl", "asymre_verl",
    "on_policy_distill", "jsd", "clipb", "clipv"})
#: Advantage functions that compare rollouts within the group of one task: a group of one
#: has nothing to compare with.
GROUP_ADVANTAGES: frozenset[str] = frozenset({
    "grpo", "grpo_verl", "step_wise_grpo", "gigpo", "rloo", "opmd", "opmd_verl", "asymre",
    "asymre_verl", "rec"})
#: Policy losses that read more than log-probs, advantages and masks, and what provides it.
LOSS_INPUTS: Mapping[str, str] = {
    "dpo": "chosen and rejected replies in pairs, which only algorithm_type 'dpo' reads",
    "mix": "expert rows, which only sample_strategy 'mix' provides",
    "mix_chord": "expert rows, which only sample_strategy 'mix' provides"}


class TrinityType(NamedTuple):
    """What an algorithm type of Trinity's is built of by default (``default_config()``),
    for every type, including those only the Trinity backend runs (a named tuple: an
    attrs class costs `import tunedsl` milliseconds to build).

    Attributes:
        advantage_fn, policy_loss_fn, sample_strategy: Its default parts.
        reference: Whether Trinity's trainer keeps a reference model for it.
        advantage_in_trainer: Whether it computes advantages in the trainer
            (`TRAINER_ADVANTAGES` are the functions that do).
    """

    advantage_fn: str | None
    policy_loss_fn: str
    reference: bool
    advantage_in_trainer: bool = False
    sample_strategy: str = "default"


def _types() -> dict[str, TrinityType]:
    ppo_family = {name: TrinityType(advantage, loss, True) for name, advantage, loss in (
        ("grpo", "grpo", "ppo"), ("opmd", "opmd", "opmd"), ("topr", "reinforce", "topr"),
        ("cispo", "grpo", "cispo"), ("gspo", "grpo", "gspo"), ("sapo", "grpo", "sapo"),
        ("rec", "rec", "rec"), ("multi_step_grpo", "step_wise_grpo", "ppo"),
        ("gigpo", "gigpo", "ppo"))}
    return {**ppo_family,
            "cpt": TrinityType(None, "sft", False), "sft": TrinityType(None, "sft", False),
            "raft": TrinityType(None, "sft", False), "dpo": TrinityType(None, "dpo", True),
            "dapo": TrinityType("grpo", "ppo", False),
            "asymre": TrinityType("asymre", "opmd", False),
            "sppo": TrinityType("opmd", "sppo", False),
            "ppo": TrinityType("ppo", "ppo", True, True),
            "reinforceplusplus": TrinityType("reinforceplusplus", "ppo", True, True),
            "rloo": TrinityType("rloo", "ppo", True, True),
            "grpo_verl": TrinityType("grpo", "ppo", True, True),
            "on_policy_distill": TrinityType("on_policy_distill", "ppo", False, True),
            "jsd": TrinityType("jsd", "ppo", False, True),
            "mix": TrinityType("grpo", "mix", True, sample_strategy="mix"),
            "mix_chord": TrinityType("grpo", "mix_chord", True, sample_strategy="mix")}


#: Every algorithm type of Trinity 0.6.0, by name (``tests/test_algorithms.py`` checks each
#: against Trinity's ``ALGORITHM_TYPE``).
TRINITY_TYPES: Mapping[str, TrinityType] = _types()


@attrs.frozen(kw_only=True)
class AlgorithmParts:
    """One algorithm: the parts Trinity's ``default_config()`` names, and what it is for.

    Attributes:
        advantage_fn: The advantage function (None: the algorithm learns from no reward,
            as SFT; Trinity fills in a default it never calls).
        policy_loss_fn: The policy loss.
        kl_loss_fn: The KL loss to the reference model (``none``: no reference model).
        reference: Whether Trinity's trainer keeps a reference model for it (the algorithm
            type's ``use_reference``); without one no KL loss can be computed.
        entropy_loss_fn: ``default`` (an entropy bonus, weight ``entropy_coef``) or ``none``.
        purpose: One line for README.
        policy_loss_args: tunedsl's values over the loss's defaults, where the algorithm's
            defining settings are not Trinity's defaults (DAPO's clip; Trinity leaves them
            to its example YAMLs).
        advantage_args: Likewise for the advantage function.
            (DAPO's dynamic sampling is GRPO's ``std_threshold = 0``: a group whose rewards
            all agree is not trained on.)
        truncated: What a reply cut short becomes by default (`ON_TRUNCATED_REPLY`).
    """

    advantage_fn: str | None
    policy_loss_fn: str = "ppo"
    kl_loss_fn: str = "k2"
    reference: bool = True
    entropy_loss_fn: str = "default"
    purpose: str
    policy_loss_args: Mapping[str, Any] = attrs.field(factory=dict)
    advantage_args: Mapping[str, Any] = attrs.field(factory=dict)
    truncated: str = "train"


#: The algorithms both backends run, by Trinity's name. Every part is Trinity 0.6.0's
#: default for that algorithm.
ALGORITHMS: Mapping[str, AlgorithmParts] = {
    "grpo": AlgorithmParts(
        advantage_fn="grpo",
        purpose="Group-relative PPO: each call's advantage is its reward normalised over "
                "the task's group of calls."),
    "multi_step_grpo": AlgorithmParts(
        advantage_fn="step_wise_grpo",
        purpose="GRPO over whole trajectories: every call of a rollout gets the rollout's "
                "normalised advantage (agents that call the model several times)."),
    "dapo": AlgorithmParts(
        advantage_fn="grpo", kl_loss_fn="none", reference=False,
        policy_loss_args={"clip_range_low": 0.2, "clip_range_high": 0.28},
        advantage_args={"std_threshold": 0.0}, truncated="mask",
        purpose="GRPO for long reasoning: a higher upper clip, groups whose rewards all "
                "agree dropped, truncated replies masked, no KL."),
    "gspo": AlgorithmParts(
        advantage_fn="grpo", policy_loss_fn="gspo",
        purpose="Sequence-level importance ratio and clip: steadier on long replies and "
                "mixture-of-experts models."),
    "cispo": AlgorithmParts(
        advantage_fn="grpo", policy_loss_fn="cispo",
        purpose="Clips the importance weight, not the update: every token keeps a gradient."),
    "sapo": AlgorithmParts(
        advantage_fn="grpo", policy_loss_fn="sapo",
        purpose="A smooth, temperature-controlled gate instead of the hard clip."),
    "rloo": AlgorithmParts(
        advantage_fn="rloo",
        purpose="Leave-one-out baseline: each call's reward minus the mean of the others "
                "in its group, unscaled."),
    "reinforceplusplus": AlgorithmParts(
        advantage_fn="reinforceplusplus",
        purpose="REINFORCE++: rewards whitened over the whole batch, no per-group baseline."),
    "opmd": AlgorithmParts(
        advantage_fn="opmd", policy_loss_fn="opmd",
        purpose="Online policy mirror descent: reward minus the group's baseline, a plain "
                "policy gradient regularised towards the current policy."),
    "topr": AlgorithmParts(
        advantage_fn="reinforce", policy_loss_fn="topr",
        purpose="Tapered off-policy REINFORCE: raw rewards, the ratio truncated for "
                "negative ones."),
    "gigpo": AlgorithmParts(
        advantage_fn="gigpo", policy_loss_args={"clip_range_low": 0.2, "clip_range_high": 0.2},
        advantage_args={"omega": 1.0, "gamma": 1.0, "fnorm": "none", "epsilon": 1e-6},
        purpose="Group-in-group PPO for multi-turn agents: a rollout's return against its "
                "group's, plus each turn's return against turns that began in the same "
                "environment state (`model.end_turn`, below; without turns, the "
                "episode-level part alone)."),
    "on_policy_distill": AlgorithmParts(
        advantage_fn="on_policy_distill", kl_loss_fn="none", reference=False,
        entropy_loss_fn="none",
        purpose="Learn from a teacher (an auxiliary model) on the student's own samples: each "
                "token's advantage is the teacher's log-prob minus the student's."),
    "sft": AlgorithmParts(
        advantage_fn=None, policy_loss_fn="sft", kl_loss_fn="none", reference=False,
        entropy_loss_fn="none",
        purpose="Supervised fine-tuning on conversations (the last assistant message), alone "
                "or as a warm-up stage before RL (`warmup`)."),
}  # fmt: skip
#: Algorithms that learn from a dataset of conversations rather than from rollouts.
CONVERSATION_ALGORITHMS = frozenset({"sft"})
#: Algorithms that learn from a teacher: an auxiliary model, named by ``Algorithm.teacher``.
TEACHER_ALGORITHMS = frozenset({"on_policy_distill"})

#: Fields of `Algorithm` that set one argument of a part, and which part's arguments.
FIELD_ARGUMENTS: Mapping[str, tuple[str, str]] = {
    "clip_range": ("policy_loss", "clip_range"),
    "clip_range_low": ("policy_loss", "clip_range_low"),
    "clip_range_high": ("policy_loss", "clip_range_high"),
    "std_threshold": ("advantage", "std_threshold"),
    "epsilon": ("advantage", "epsilon"),
}  # fmt: skip
#: The arguments Trinity reads from elsewhere in its ``algorithm`` section.
_SECTION_ARGUMENTS = {"loss_agg_mode": "algorithm.loss_agg_mode"}


#: The `Algorithm` tables of further arguments, and the Trinity section each is written to.
ARGUMENT_TABLES: Mapping[str, str] = {"policy_loss_args": "algorithm.policy_loss_fn_args",
                                      "advantage_args": "algorithm.advantage_fn_args",
                                      "sample_strategy_args": "algorithm.sample_strategy_args"}
#: The part each table gives arguments to.
TABLE_PARTS: Mapping[str, str] = {"policy_loss_args": "policy_loss",
                                  "advantage_args": "advantage",
                                  "sample_strategy_args": "sample_strategy"}
#: What a sample strategy's constructor reads beyond its ``default_args()`` (it takes any
#: keyword, and ignores the rest).
_SAMPLE_STRATEGY_READS: Mapping[str, tuple[str, ...]] = {"staleness_control": ("max_staleness",)}


def table_arguments(table: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of a Trinity ``*_fn_args`` section that belong in `Algorithm`'s
    ``table``: those no field of their own holds (``clip_range``, ``loss_agg_mode``, ...
    are read into those fields)."""
    part = TABLE_PARTS[table]
    owned = {argument for p, argument in FIELD_ARGUMENTS.values() if p == part}
    return {key: value for key, value in arguments.items()
            if key not in owned and key not in _SECTION_ARGUMENTS}


def part_names(record: Any) -> dict[str, str | None]:
    """The parts an `Algorithm` record trains with, by kind (``policy_loss``,
    ``advantage``, ``sample_strategy``): each one the record names, else its algorithm
    type's own, as Trinity's validator fills them in."""
    kind = TRINITY_TYPES[record.algorithm_type]
    advantage = _value(record, "advantage_fn")
    return {"policy_loss": _value(record, "policy_loss_fn") or kind.policy_loss_fn,
            "advantage": kind.advantage_fn if advantage is None else advantage,
            "sample_strategy": _value(record, "sample_strategy") or kind.sample_strategy}


def _accepted(part: str, name: str | None) -> tuple[str, ...] | None:
    """The arguments the part ``name`` takes; None when tunedsl cannot know them (a class
    Trinity imports by its dotted path)."""
    if name is None:
        return ()
    if part == "policy_loss":
        known = POLICY_LOSS_ARGS.get(name)
        return None if known is None else (*known, *POLICY_LOSS_EXTRA.get(name, ()))
    if part == "sample_strategy":
        known = SAMPLE_STRATEGY_ARGS.get(name)
        return None if known is None else (*known, *_SAMPLE_STRATEGY_READS.get(name, ()))
    known = ADVANTAGE_ARGS.get(name)
    return None if known is None else tuple(known)


@attrs.frozen(kw_only=True)
class ResolvedAlgorithm:
    """What an `Algorithm` record trains with: every part and every argument, defaults
    filled in (the ``algorithm`` keys tunedsl writes for Trinity, and what the local
    trainer computes).

    Attributes:
        name: The algorithm's Trinity name.
        advantage_fn, policy_loss_fn, kl_loss_fn: The parts' Trinity names (no advantage
            function: None).
        advantage_args, policy_loss_args: Their arguments, complete.
        kl_coef: The KL loss's weight (0 with ``kl_loss_fn = "none"``).
        entropy_loss_fn: ``default`` or ``none``.
        entropy_coef: The entropy bonus's weight (0 with ``none``).
        loss_agg_mode: How every loss aggregates over tokens.
        on_failed_rollout, on_truncated_reply: See `Algorithm`.
        sample_strategy, sample_strategy_args: The sample strategy the record names, with
            its arguments (None: Trinity's ``default``, which the YAML leaves unwritten).
    """

    name: str
    advantage_fn: str | None
    advantage_args: Mapping[str, Any]
    policy_loss_fn: str
    policy_loss_args: Mapping[str, Any]
    kl_loss_fn: str
    kl_coef: float
    entropy_loss_fn: str
    entropy_coef: float
    loss_agg_mode: str
    on_failed_rollout: str
    on_truncated_reply: str
    sample_strategy: str | None = None
    sample_strategy_args: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def uses_reference(self) -> bool:
        """Whether a frozen copy of the initial model is needed (for the KL loss)."""
        return self.kl_loss_fn != "none" and self.kl_coef != 0

    def trinity_section(self) -> dict[str, Any]:
        """The keys of Trinity's ``algorithm`` section this resolution writes (the
        algorithm's own name and group size are fields of their own)."""
        advantage = {} if self.advantage_fn is None else {
            "advantage_fn": self.advantage_fn, "advantage_fn_args": dict(self.advantage_args)}
        sampling = {} if self.sample_strategy is None else {
            "sample_strategy": self.sample_strategy,
            "sample_strategy_args": dict(self.sample_strategy_args)}
        return {
            **advantage,
            "policy_loss_fn": self.policy_loss_fn,
            "policy_loss_fn_args": dict(self.policy_loss_args),
            "kl_loss_fn": self.kl_loss_fn,
            "kl_loss_fn_args": {**KL_ARGS, "kl_coef": self.kl_coef},
            "entropy_loss_fn": self.entropy_loss_fn,
            "entropy_loss_fn_args": {"entropy_coef": self.entropy_coef},
            "loss_agg_mode": self.loss_agg_mode,
            **sampling,
        }


def _value(record: Any, field: str) -> Any:
    return getattr(record, field, None)


def _same_place(in_trainer: bool) -> str:
    return ", ".join(sorted(name for name in ADVANTAGE_ARGS
                            if (name in TRAINER_ADVANTAGES) == in_trainer))


def composition_problems(record: Any, path: str = "algorithm") -> list[str]:
    """What in the parts an `Algorithm` record names Trinity would fail on later (in its
    trainer or its experience pipeline, after the cluster is up), one line each: an
    advantage function computed elsewhere than its algorithm type computes advantages, a
    loss whose inputs nothing provides, a KL loss without a reference model."""
    kind = TRINITY_TYPES[record.algorithm_type]
    names = part_names(record)
    problems = []
    advantage = _value(record, "advantage_fn")
    if advantage is not None and kind.advantage_fn is None:
        problems.append(f"{path}.advantage_fn: {record.algorithm_type} learns from no reward, "
                        f"so it has no advantage function; remove it")
    elif advantage in ADVANTAGE_ARGS and \
            (advantage in TRAINER_ADVANTAGES) != kind.advantage_in_trainer:
        where = "in its trainer, over the whole batch" if advantage in TRAINER_ADVANTAGES \
            else "in the explorer, as experiences arrive"
        problems.append(
            f"{path}.advantage_fn = {advantage!r}: Trinity computes it {where}, and "
            f"{record.algorithm_type} computes advantages "
            f"{'in its trainer' if kind.advantage_in_trainer else 'as experiences arrive'}; "
            f"choose one of {_same_place(kind.advantage_in_trainer)}, or another "
            f"algorithm_type")
    if advantage in ("on_policy_distill", "jsd") and record.algorithm_type != advantage:
        problems.append(f"{path}.advantage_fn = {advantage!r} learns from a teacher's "
                        f"log-probs, which only algorithm_type {advantage!r} provides; choose "
                        f"another, or that algorithm_type")
    loss = _value(record, "policy_loss_fn")
    provided = record.algorithm_type == "dpo" if loss == "dpo" else \
        names["sample_strategy"] == "mix"
    if loss in LOSS_INPUTS and not provided:
        # (algorithm_type 'dpo' trains offline, which tunedsl does not set up: not advised)
        fix = "choose another" if loss == "dpo" else "choose another, or set sample_strategy so"
        problems.append(f"{path}.policy_loss_fn = {loss!r} reads {LOSS_INPUTS[loss]}; {fix}")
    if _value(record, "entropy_loss_fn") == "mix" and names["sample_strategy"] != "mix":
        problems.append(f"{path}.entropy_loss_fn = 'mix' reads expert rows, which only "
                        f"sample_strategy 'mix' provides; choose 'default' or 'none', or set "
                        f"sample_strategy so")
    return problems


def algorithm_problems(record: Any, path: str = "algorithm") -> list[str]:
    """What in an `Algorithm` record its algorithm cannot take, one line each: parts that
    do not compose (`composition_problems`), an argument its parts do not have (with a
    did-you-mean), an argument given both as a field and in a table. ``path`` is where the
    record sits in the experiment (``algorithm``, or ``warmup``)."""
    from ..errors import did_you_mean

    problems = composition_problems(record, path)
    names = part_names(record)
    kind = TRINITY_TYPES[record.algorithm_type]
    own = ALGORITHMS.get(record.algorithm_type)
    for field, (part, argument) in FIELD_ARGUMENTS.items():
        accepted = _accepted(part, names[part])
        if _value(record, field) is None or accepted is None:
            continue
        if names[part] is None:
            problems.append(f"{path}.{field}: {record.algorithm_type} learns from no reward, "
                            f"so it has no advantage function to take {argument}; remove it")
        elif argument not in accepted:
            takes = ", ".join(a for a in accepted if a != "loss_agg_mode")
            problems.append(
                f"{path}.{field}: {record.algorithm_type}'s {part.replace('_', ' ')} "
                f"({names[part]}) has no {argument}; it takes {takes or 'no arguments'}")
    kl_loss_fn = _value(record, "kl_loss_fn") or (own.kl_loss_fn if own else None)
    if not kind.reference and kl_loss_fn not in (None, "none"):
        problems.append(f"{path}.kl_loss_fn: {record.algorithm_type} trains without a "
                        f"reference model (Trinity's trainer keeps none for it), so it can "
                        f"have no KL loss; leave kl_loss_fn unset")
    elif kl_loss_fn == "none" and _value(record, "kl_coef"):
        problems.append(f"{path}.kl_coef: {record.algorithm_type} has no KL loss "
                        f"(kl_loss_fn = 'none'); set {path}.kl_loss_fn too, e.g. 'k2'")
    entropy = _value(record, "entropy_loss_fn") or (own.entropy_loss_fn if own else None)
    if entropy == "none" and _value(record, "entropy_coef"):
        problems.append(f"{path}.entropy_coef: {record.algorithm_type} has no entropy "
                        f"bonus (Trinity's entropy_loss_fn 'none'); leave it unset")
    for table, part in TABLE_PARTS.items():
        accepted = _accepted(part, names[part])
        if accepted is None:
            continue
        for key in (_value(record, table) or {}):
            owner = next((f for f, (p, a) in FIELD_ARGUMENTS.items() if (p, a) == (part, key)),
                         None)
            if key in _SECTION_ARGUMENTS:
                problems.append(f"{path}.{table}.{key}: set {path}.{key} instead (Trinity "
                                f"reads it from {_SECTION_ARGUMENTS[key]} for every loss)")
            elif owner is not None and key in accepted:
                problems.append(f"{path}.{table}.{key}: set {path}.{owner} instead")
            elif key not in accepted:
                problems.append(
                    f"{path}.{table}.{key}: {record.algorithm_type}'s "
                    f"{part.replace('_', ' ')} ({names[part]}) has no such argument"
                    f"{did_you_mean(key, accepted)}; it takes "
                    f"{', '.join(a for a in accepted if a != 'loss_agg_mode') or 'none'}")
    return problems or argument_value_problems(record, path)


def _is_number(value: Any) -> bool:
    import math

    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _range(low: float | None = None, high: float | None = None, *, above: bool = False,
           optional: bool = False) -> Any:
    """A rule: a finite number from ``low`` (above it, with ``above``) to ``high``."""
    if low is not None and high is not None:
        need = f"a number from {low:g}{' (excluded)' if above else ''} to {high:g}"
    elif low is not None:
        need = f"a number {'above' if above else 'at least'} {low:g}"
        need += " (1e-30 or more, which float32 keeps)" if above and low == 0 else ""
    else:
        need = "a finite number"
    need += " (or null)" if optional else ""

    def rule(value: Any) -> str | None:
        if value is None and optional:
            return None
        # "above 0" means a value float32 keeps too: the trainers compute in it.
        ok = _is_number(value) and (low is None or (value > low if above else value >= low)) \
            and (high is None or value <= high) and not (above and low == 0 and value < 1e-30)
        return None if ok else need
    return rule


def _one_of(*choices: str) -> Any:
    def rule(value: Any) -> str | None:
        return None if value in choices else f"one of {', '.join(map(repr, choices))}"
    return rule


def _one_of_or_none(*choices: str) -> Any:
    def rule(value: Any) -> str | None:
        return None if value is None or value in choices else \
            f"one of {', '.join(map(repr, choices))} (or null)"
    return rule


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) and value else "a non-empty text"


def _flag(value: Any) -> str | None:
    return None if isinstance(value, bool) else "true or false"


def _steps_or_inf(value: Any) -> str | None:
    """``staleness_control``'s ``max_staleness``: Trinity reads ``float(value)`` (default
    ``"inf"``) and keeps experiences at most that many model versions old."""
    import math

    ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
        and not math.isnan(value) and value >= 0
    return None if ok else "a number of steps, 0 or more (inf, the default: no limit)"


#: What each argument of Trinity 0.6.0's parts may be, read in their source: a value a
#: part's constructor refuses (``std_cal_level``, ``clip_ratio_c``), or that its function
#: fails on or turns into nonsense (a lower clip past 1, an unknown baseline, NaN), is
#: refused before the run by ``check``, ``config`` and ``run`` alike.
ARGUMENT_RULES: Mapping[str, Any] = {
    "std_cal_level": _one_of("group", "batch"),
    "opmd_baseline": _one_of("mean", "logavgexp"),
    "loss_agg_mode": _one_of(*LOSS_AGG_MODES),
    "clip_range": _range(0, 1, above=True),
    "clip_range_low": _range(0, 1),
    "clip_range_high": _range(0),
    "clip_ratio_c": _range(1, above=True),
    "mask_clip_range_low": _range(0, 1),
    "mask_clip_range_high": _range(0),
    "delta_sequence_masking": _range(0),
    "tau": _range(0, above=True),
    "tau_pos": _range(0, above=True),
    "tau_neg": _range(0, above=True),
    "advantage_threshold": _range(),
    "epsilon": _range(0, above=True),
    "std_threshold": _range(0, optional=True),
    "rank_penalty": _range(0, 1, optional=True),
    "gamma": _range(0, 1),
    "kl_coef": _range(0),
    "duplicate_experiences": _flag,
    "enable_step_norm": _flag,
    "enable_sequence_masking": _flag,
    "fallback_to_policy_gradient": _flag,
    "enable_mask_clip": _flag,
    "epsilon_low": _range(0, 1, above=True),
    "epsilon_high": _range(0, above=True),
    "epsilon_low_prime": _range(0, 1, above=True),
    "epsilon_high_prime": _range(0, above=True),
    "clip_mode": _one_of("none", "one-side", "gspo-one-side", "two-side", "ring"),
    "weight": _one_of("none", "importance_sampling", "gspo_importance_sampling", "advantage"),
    "regularizer": _one_of("none", "k2", "forward-kl"),
    "regularizer_coef": _range(0),
    "temp": _range(0, above=True),
    "std_normalize": _flag,
    "drop": _one_of_or_none("balance"),
    "omega": _range(),
    "fnorm": _one_of("std", "none"),
    "step_reward_key": _text,
    "env_state_hash_key": _text,
    "adaptive": _flag,
    "target_kl": _range(0, above=True),
    "horizon": _range(0, above=True),
    "entropy_coef": _range(0),
    "max_staleness": _steps_or_inf,
}  # fmt: skip


def _arguments_written(record: Any) -> Mapping[str, Mapping[str, Any]]:
    """The arguments each part gets, by table: complete for the algorithms both backends
    run (`resolve`); for Trinity's others, those the record gives (Trinity fills the rest)."""
    if record.algorithm_type in ALGORITHMS:
        resolved = resolve(record)
        return {"policy_loss_args": resolved.policy_loss_args,
                "advantage_args": resolved.advantage_args,
                "sample_strategy_args": resolved.sample_strategy_args}
    given = {table: dict(_value(record, table) or {}) for table in TABLE_PARTS}
    for field, (part, argument) in FIELD_ARGUMENTS.items():
        if _value(record, field) is not None:
            given[f"{part}_args"][argument] = _value(record, field)
    return given


def argument_value_problems(record: Any, path: str = "algorithm") -> list[str]:
    """What among the arguments an `Algorithm` record gives its parts (fields and tables,
    which passed `algorithm_problems`) no part can take, one line each, naming where the
    record sets it."""
    names = part_names(record)
    problems = []
    for table, arguments in _arguments_written(record).items():
        part, given = TABLE_PARTS[table], _value(record, table) or {}
        for key, value in arguments.items():
            rule = ARGUMENT_RULES.get(key)
            need = rule(value) if rule is not None else None
            if need is None:
                continue
            field = next((f for f, (p, a) in FIELD_ARGUMENTS.items()
                          if (p, a) == (part, key) and _value(record, f) is not None), None)
            where = (f"{path}.{field}" if field is not None else f"{path}.{table}.{key}"
                     if key in given else f"{path}.{key}")
            problems.append(f"{where} = {value!r}: {key} of {record.algorithm_type}'s "
                            f"{part.replace('_', ' ')} ({names[part]}) must be {need}")
    policy = _arguments_written(record)["policy_loss_args"] if not problems else {}
    if names["policy_loss"] == "sapo" and policy.get("tau_neg", 1.05) < policy.get("tau_pos",
                                                                                    1.0):
        problems.append(f"{path}.policy_loss_args.tau_neg: sapo's policy loss needs tau_neg "
                        f">= tau_pos (Trinity's SAPOPolicyLossFn asserts it)")
    if names["policy_loss"] == "rec" and policy.get("weight") == "gspo_importance_sampling" \
            and policy.get("clip_mode") != "gspo-one-side":
        problems.append(f"{path}.policy_loss_args.weight = 'gspo_importance_sampling' weighs "
                        f"by the sequence ratio, which Trinity's rec loss computes only with "
                        f"clip_mode 'gspo-one-side'; set that clip_mode, or another weight")
    return problems


def _part_arguments(defaults: Mapping[str, Mapping[str, Any]],
                    constructed: Mapping[str, Mapping[str, Any]], name: str | None,
                    own: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """A part's complete arguments: its ``default_args()``, the algorithm's own values
    (``own``, for the algorithm's own part only), and the record's table (``given``), over
    which the part's constructor defaults apply as Trinity applies them to a table."""
    if name is None:
        return {}
    return {**defaults.get(name, {}), **own, **(constructed.get(name, {}) if given else {}),
            **given}


def resolve(record: Any) -> ResolvedAlgorithm:
    """The complete algorithm an `Algorithm` record trains with (it has passed
    `algorithm_problems`; the algorithm is one of `ALGORITHMS`). A part the record names
    replaces the algorithm's own, as in Trinity's validator; the algorithm's own argument
    values (DAPO's clip) go with its own part only."""
    parts = ALGORITHMS[record.algorithm_type]
    names = part_names(record)
    policy_fn, advantage_fn = names["policy_loss"] or parts.policy_loss_fn, names["advantage"]
    policy = _part_arguments(
        POLICY_LOSS_ARGS, CONSTRUCTED_POLICY_LOSS_ARGS, policy_fn,
        parts.policy_loss_args if policy_fn == parts.policy_loss_fn else {},
        _value(record, "policy_loss_args") or {})
    advantage = _part_arguments(
        ADVANTAGE_ARGS, CONSTRUCTED_ADVANTAGE_ARGS, advantage_fn,
        parts.advantage_args if advantage_fn == parts.advantage_fn else {},
        _value(record, "advantage_args") or {})
    if _value(record, "clip_range") is not None:
        # One clip range for both sides: the sides' defaults would win over it in Trinity's
        # losses, so they go (sides the record sets itself come back below).
        policy.pop("clip_range_low", None)
        policy.pop("clip_range_high", None)
    for field, (part, argument) in FIELD_ARGUMENTS.items():
        value = _value(record, field)
        if value is not None:
            (policy if part == "policy_loss" else advantage)[argument] = value
    loss_agg_mode = _value(record, "loss_agg_mode") or policy.get("loss_agg_mode") or \
        "token-mean"
    if "loss_agg_mode" in policy:  # Trinity's validator copies algorithm.loss_agg_mode over
        policy["loss_agg_mode"] = loss_agg_mode  # a loss's own, where it has one (rec: not)
    kl_loss_fn = _value(record, "kl_loss_fn") or parts.kl_loss_fn
    kl_coef = _value(record, "kl_coef")
    entropy_loss_fn = _value(record, "entropy_loss_fn") or parts.entropy_loss_fn
    strategy = _value(record, "sample_strategy")
    return ResolvedAlgorithm(
        name=record.algorithm_type, advantage_fn=advantage_fn, advantage_args=advantage,
        policy_loss_fn=policy_fn, policy_loss_args=policy, kl_loss_fn=kl_loss_fn,
        kl_coef=0.0 if kl_loss_fn == "none" else KL_ARGS["kl_coef"] if kl_coef is None
        else kl_coef,
        entropy_loss_fn=entropy_loss_fn,
        entropy_coef=0.0 if entropy_loss_fn == "none" else
        _value(record, "entropy_coef") or ENTROPY_ARGS["entropy_coef"],
        loss_agg_mode=loss_agg_mode,
        on_failed_rollout=_value(record, "on_failed_rollout") or "drop",
        on_truncated_reply=_value(record, "on_truncated_reply") or parts.truncated,
        sample_strategy=strategy,
        sample_strategy_args=_part_arguments(
            SAMPLE_STRATEGY_ARGS, {}, strategy, {}, _value(record, "sample_strategy_args") or {}))


def teacher_problems(record: Any, auxiliary: Mapping[str, Any]) -> list[str]:
    """What keeps an algorithm's teacher from being found: ``on_policy_distill`` needs an
    auxiliary model to learn from (the one named by ``teacher``, or the only one), run
    locally or served at an endpoint that gives log-probs
    (`tunedsl.models.scoring`)."""
    from ..errors import did_you_mean

    name = _value(record, "teacher")
    if record.algorithm_type not in TEACHER_ALGORITHMS:
        return [] if name is None else [
            f"algorithm.teacher: {record.algorithm_type} learns from no teacher; remove it, or "
            f"use on_policy_distill"]
    if name is None and len(auxiliary) != 1:
        found = f"{len(auxiliary)} auxiliary models ({', '.join(auxiliary)})" if auxiliary \
            else "no auxiliary model"
        return [f"algorithm.algorithm_type = {record.algorithm_type!r} learns from a teacher "
                f"model, and the experiment has {found}; add auxiliary_models.teacher "
                f"(Model(\"path/to/teacher\")) or name one with algorithm.teacher"]
    name = name if name is not None else next(iter(auxiliary))
    if name not in auxiliary:
        return [f"algorithm.teacher = {name!r} is not one of auxiliary_models"
                f"{did_you_mean(name, tuple(auxiliary))}; it has "
                f"{', '.join(auxiliary) or 'none'}"]
    return []


def teacher_name(record: Any, auxiliary: Mapping[str, Any]) -> str | None:
    """The auxiliary model an algorithm learns from (it passed `teacher_problems`), or None."""
    if record.algorithm_type not in TEACHER_ALGORITHMS:
        return None
    return _value(record, "teacher") or next(iter(auxiliary))


#: What Trinity's KL and entropy losses take (``KLFn.__init__``, ``EntropyLossFn``): a
#: Trinity config's tables for them are handed to those constructors as they are.
KL_ACCEPTS = ("adaptive", "kl_coef", "target_kl", "horizon")
ENTROPY_ACCEPTS = ("entropy_coef",)


def part_conflicts(record: Any, label: str, config: Mapping[str, Any]) -> list[str]:
    """What a Trinity config (``label``: the base YAML, or ``[trinity]``) sets in its
    ``algorithm`` section that the run cannot take, one line each: a ``kl_penalty_fn``
    other than ``none`` (a reward penalty Trinity applies only for algorithms that compute
    advantages in its trainer, which the local backend does not compute), and KL or entropy
    arguments their constructors refuse (Trinity's trainer would raise, after the cluster
    is up). The parts themselves are read into the record (``policy_loss_fn`` and the rest)."""
    from ..errors import did_you_mean

    section = config.get("algorithm") if isinstance(config, Mapping) else None
    if not isinstance(section, Mapping):
        return []
    problems = []
    for key, accepts in (("kl_loss_fn_args", KL_ACCEPTS), ("kl_penalty_fn_args", KL_ACCEPTS),
                         ("entropy_loss_fn_args", ENTROPY_ACCEPTS)):
        table = section.get(key)
        if table is None:
            continue
        if not isinstance(table, Mapping):
            problems.append(f"{label}: algorithm.{key} must be a table of arguments (got "
                            f"{table!r})")
            continue
        problems += [f"{label}: algorithm.{key}.{name}: Trinity's {key[:-5].replace('_', ' ')} "
                     f"has no such argument{did_you_mean(str(name), accepts)}; it takes "
                     f"{', '.join(accepts)}" for name in table if name not in accepts]
        problems += [f"{label}: algorithm.{key}.{name} = {value!r}: must be {need}"
                     for name, value in table.items() if name in accepts
                     and (need := ARGUMENT_RULES[name](value)) is not None]
        if table.get("adaptive") is True and (table.get("target_kl") is None
                                              or table.get("horizon") is None):
            problems.append(f"{label}: algorithm.{key}.adaptive = true needs target_kl and "
                            f"horizon too (Trinity's KLFn raises without them); set both, or "
                            f"drop adaptive")
    value = section.get("kl_penalty_fn")
    if record.algorithm_type in ALGORITHMS and value is not None and value != "none":
        problems.append(f"{label}: algorithm.kl_penalty_fn = {value!r}, but "
                        f"{record.algorithm_type} is built with 'none' (on both backends); "
                        f"drop the key, or choose an algorithm_type only Trinity runs")
    return problems
