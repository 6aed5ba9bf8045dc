"""The local backend's advantage functions: Trinity-RFT 0.6.0's, one per ``advantage_fn`` name,
from one training step's groups of trajectories.

On Trinity each model call of a rollout is one experience carrying its rollout's reward;
a task's rollouts form its group, and only rollouts that were scored and made calls leave
experiences. Trinity gives every token of an experience an advantage; for these functions
it is one number per call (a list of numbers, one per reply token, only for
``reinforceplusplus`` with ``gamma`` other than 1). Each function below repeats Trinity's
arithmetic operation by operation in float32 torch, so that both backends agree to the last
bit: float64 would part from Trinity on rewards float32 cannot hold, such as 0.1.

Example:
    >>> groups = [[Trajectory(1.0, (3,)), Trajectory(0.0, (2,)), Trajectory(0.0, (5,))]]
    >>> step_advantages("rloo", {}, groups).advantages
    [[[1.0], [-0.5], [-0.5]]]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import torch

from ...dsl.trinity_fields import TURN_KEYS
from ...errors import ConfigError, unknown_name_message

#: A call's advantage: one number for all its reply tokens, or one number per reply token.
Advantage = float | list[float]
#: Per trajectory of a group, each call's advantage; None for a trajectory of a dropped group.
GroupAdvantages = list[list[Advantage] | None]


def _positive_lengths(_: Any, attribute: attrs.Attribute, lengths: tuple[int, ...]) -> None:
    # Trinity puts the reward on a reply's last token; a reply without tokens would lose it
    # (rloo would then average a 0 into its group): no model call replies with nothing.
    if not lengths or min(lengths) < 1:
        raise ValueError(f"{attribute.name} must hold one positive length per model call "
                         f"(got {lengths!r})")


def _as_lengths(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(values)


def _as_optional_tuple(values: Iterable[Any] | None) -> tuple[Any, ...] | None:
    return None if values is None else tuple(values)


@attrs.frozen
class Trajectory:
    """One valid rollout of a task: scored, and with at least one model call.

    Attributes:
        reward: The rollout's reward, which each of its calls carries.
        response_lengths: The tokens of each model call's reply, in call order.
        step_rewards: Each call's own reward (None for a call given none), or None when
            the rollout rewards no call of its own (Trinity's ``info["step_reward"]``, which
            only ``gigpo`` reads).
        states: Each call's environment state key (None for a call without one), or None
            (Trinity's ``info["env_state_hash"]``: ``gigpo``'s anchor states).
    """

    reward: float
    response_lengths: tuple[int, ...] = attrs.field(converter=_as_lengths,
                                                    validator=_positive_lengths)
    step_rewards: tuple[float | None, ...] | None = attrs.field(
        default=None, converter=_as_optional_tuple)
    states: tuple[Any, ...] | None = attrs.field(default=None, converter=_as_optional_tuple)


@attrs.frozen
class StepAdvantages:
    """The advantages of one step's calls, and what was dropped.

    Attributes:
        advantages: Per group, per trajectory, each call's advantage (`Advantage`); every
            trajectory of a group that was dropped (``std_threshold``) has None instead.
        metrics: ``advantage/filtered_count``, the calls (Trinity's experiences) dropped, and
            ``advantage/skipped_groups``, the groups dropped.
    """

    advantages: list[GroupAdvantages]
    metrics: dict[str, float]


def _call_rewards(group: Sequence[Trajectory]) -> list[float]:
    """Each call's reward (its trajectory's), in call order: the group's experiences."""
    return [trajectory.reward for trajectory in group for _ in trajectory.response_lengths]


def _by_trajectory(group: Sequence[Trajectory], values: Iterable[Advantage]) -> GroupAdvantages:
    """Per-call values, in call order, cut into the group's trajectories (from an iterator,
    the group's share of it: the calls of its trajectories)."""
    flat = iter(values)
    return [[next(flat) for _ in trajectory.response_lengths] for trajectory in group]


def _batch_std(rewards: list[float]) -> torch.Tensor:
    """The std over the whole batch's rewards that ``std_cal_level="batch"`` divides by."""
    if len(rewards) <= 1:
        return torch.tensor(1.0)
    return torch.tensor(rewards, dtype=torch.float32).std()


def _standardised(rewards: list[float], args: Mapping[str, Any],
                  batch_std: torch.Tensor | None) -> list[torch.Tensor] | None:
    """``(r - mean) / (std + epsilon)`` over one group's rewards, as both Trinity GRPOs:
    float32, std with Bessel's correction, a lone reward taken as mean 0 and std 1; ``std``
    is ``batch_std`` when given. None when the group is dropped: ``std_threshold`` is set
    and the std is at or below it, or the reward is alone (Trinity drops a lone one whenever
    a threshold is set, whatever its value)."""
    threshold = args["std_threshold"]
    if len(rewards) == 1:
        mean, std = torch.tensor(0.0), torch.tensor(1.0)
        if threshold is not None:
            return None
    else:
        values = torch.tensor(rewards, dtype=torch.float32)
        mean, std = values.mean(), values.std()
        if threshold is not None and bool(std <= threshold):
            return None
    scale = (std if batch_std is None else batch_std) + args["epsilon"]
    return [(reward - mean) / scale for reward in rewards]


def _check_std_cal_level(name: str, args: Mapping[str, Any]) -> None:
    if args["std_cal_level"] not in ("group", "batch"):
        raise ConfigError(f"{name}'s std_cal_level must be either 'group' or 'batch' "
                          f"(got {args['std_cal_level']!r})")


def _grpo(args: Mapping[str, Any], groups: Sequence[Sequence[Trajectory]]) -> list[GroupAdvantages]:
    """``GRPOGroupedAdvantage``: standardised over the group's calls."""
    _check_std_cal_level("grpo", args)
    if args["rank_penalty"] is not None:
        raise ConfigError("grpo's rank_penalty is not supported by the local backend: it ranks "
                          "a group's calls by their log-probs, which its advantages do not see "
                          f"(got {args['rank_penalty']!r})")
    if args["duplicate_experiences"]:
        raise ConfigError("grpo's duplicate_experiences is not supported by the local backend: "
                          "Trinity refills dropped groups with random copies of kept ones "
                          f"(got {args['duplicate_experiences']!r})")
    batch_std = (_batch_std([r for group in groups for r in _call_rewards(group)])
                 if args["std_cal_level"] == "batch" else None)
    result: list[GroupAdvantages] = []
    for group in groups:
        scores = _standardised(_call_rewards(group), args, batch_std)
        result.append([None] * len(group) if scores is None
                      else _by_trajectory(group, [float(score) for score in scores]))
    return result


def _step_wise_grpo(args: Mapping[str, Any],
                    groups: Sequence[Sequence[Trajectory]]) -> list[GroupAdvantages]:
    """``StepWiseGRPOAdvantageFn``: standardised over the group's trajectories, each call
    taking its trajectory's; ``enable_step_norm`` divides it by the trajectory's calls."""
    _check_std_cal_level("step_wise_grpo", args)
    batch_std = (_batch_std([t.reward for group in groups for t in group])
                 if args["std_cal_level"] == "batch" else None)
    result: list[GroupAdvantages] = []
    for group in groups:
        scores = _standardised([t.reward for t in group], args, batch_std)
        if scores is None:
            result.append([None] * len(group))
            continue
        runs: list[list[Advantage] | None] = []
        for trajectory, score in zip(group, scores):
            calls = len(trajectory.response_lengths)
            # Trinity takes the score out as a Python float, then multiplies the bool action
            # mask by it (float32) and divides that by the call count.
            value = torch.tensor(score.item(), dtype=torch.float32)
            runs.append([float(value / calls if args["enable_step_norm"] else value)] * calls)
        result.append(runs)
    return result


def _rloo(args: Mapping[str, Any], groups: Sequence[Sequence[Trajectory]]) -> list[GroupAdvantages]:
    """``RLOOAdvantageFn``: ``r n/(n-1) - mean n/(n-1)`` over the group's ``n`` calls (each
    call's reward less the mean of the others'); a lone call keeps its reward."""
    result: list[GroupAdvantages] = []
    for group in groups:
        scores = torch.tensor(_call_rewards(group), dtype=torch.float32)
        n = len(scores)
        if n > 1:
            scores = scores * n / (n - 1) - scores.mean() * n / (n - 1)
        result.append(_by_trajectory(group, scores.tolist()))
    return result


def _masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Trinity's ``masked_whiten``: mean and unbiased variance over the masked entries (each
    token counts once, so a long reply weighs more), the same operations in the same order."""
    count = mask.sum()
    if count == 1:
        # Bessel's correction would divide by zero; Trinity raises here too.
        raise ValueError("reinforceplusplus whitens over the step's reply tokens: "
                         "it needs two tokens or more, and the step has one")

    def masked_mean(tensor: torch.Tensor) -> torch.Tensor:
        return (torch.where(mask, tensor, 0.0) * mask).sum() / (count + 1e-8)

    mean = masked_mean(values)
    variance = masked_mean((values - mean) ** 2) * (count / (count - 1))
    return (values - mean) * torch.rsqrt(variance + 1e-8)


def _reinforce_plus_plus(args: Mapping[str, Any],
                         groups: Sequence[Sequence[Trajectory]]) -> list[GroupAdvantages]:
    """``REINFORCEPLUSPLUSAdvantageFn``: each token's discounted return (the reward sits on
    the reply's last token), whitened over every reply token of the step."""
    gamma = args["gamma"]
    calls = [(t.reward, length) for group in groups for t in group
             for length in t.response_lengths]
    # The padded (calls, longest reply) layout of Trinity's batch: the whitening sums over
    # it, so the same layout adds in the same order.
    rewards = torch.zeros(len(calls), max(length for _, length in calls))
    mask = torch.zeros(rewards.shape, dtype=torch.bool)
    for row, (reward, length) in enumerate(calls):
        rewards[row, length - 1] = reward
        mask[row, :length] = True
    returns = torch.zeros_like(rewards)
    running: torch.Tensor | float = 0.0
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
    whitened = _masked_whiten(returns, mask)
    # With gamma 1 every token of a reply has the reply's reward as its return, so one
    # number per call says it all; otherwise each token has its own.
    values: list[Advantage] = [
        float(row[0]) if gamma == 1 else row[:length].tolist()
        for row, (_, length) in zip(whitened, calls)]
    flat = iter(values)
    return [_by_trajectory(group, flat) for group in groups]


def _reinforce(args: Mapping[str, Any],
               groups: Sequence[Sequence[Trajectory]]) -> list[GroupAdvantages]:
    """``REINFORCEGroupAdvantage``: each call's reward itself, as float32."""
    return [_by_trajectory(group, [float(torch.tensor(r, dtype=torch.float32))
                                   for r in _call_rewards(group)]) for group in groups]


def _opmd(args: Mapping[str, Any], groups: Sequence[Sequence[Trajectory]]) -> list[GroupAdvantages]:
    """``OPMDGroupAdvantage``: each call's reward less its group's baseline, the mean or
    ``tau * log(mean(exp(r / tau)))`` of the group's calls' rewards (0 for a lone call)."""
    baseline_kind, tau = args["opmd_baseline"], args["tau"]
    if baseline_kind not in ("mean", "logavgexp"):
        # Trinity would take any other word for logavgexp.
        raise ConfigError(f"opmd's opmd_baseline must be 'mean' or 'logavgexp' "
                          f"(got {baseline_kind!r})")
    result: list[GroupAdvantages] = []
    for group in groups:
        rewards = _call_rewards(group)
        values = torch.tensor(rewards, dtype=torch.float32)
        if len(rewards) == 1:
            baseline = torch.tensor(0.0)
        elif baseline_kind == "mean":
            baseline = values.mean()
        else:
            baseline = tau * (torch.logsumexp(values / tau, dim=-1)
                              - torch.log(torch.tensor(len(rewards))))
        result.append(_by_trajectory(group, [float(r - baseline) for r in rewards]))
    return result


def _gigpo(args: Mapping[str, Any],
           groups: Sequence[Sequence[Trajectory]]) -> list[GroupAdvantages]:
    """``GiGPOAdvantageFn``: an episode-level advantage (each trajectory's summed step
    rewards against its group's) plus ``omega`` times a step-level one (each call's
    discounted return against those of every call of the step, in any group, from the same
    environment state). Without step rewards a trajectory's reward is its last call's, as
    Trinity reads ``exp.reward`` then; a state seen once gives no step-level advantage."""
    if args["fnorm"] not in ("std", "none"):
        raise ConfigError(f"gigpo's fnorm must be 'std' or 'none' (got {args['fnorm']!r})")

    def normalised(values: list[float]) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float32)
        if len(values) == 1:
            mean, denom = torch.tensor(0.0), torch.tensor(1.0)
        else:
            mean = tensor.mean()
            denom = tensor.std() if args["fnorm"] == "std" else torch.tensor(1.0)
        return ((tensor - mean) / (denom + args["epsilon"])).tolist()

    returns: dict[tuple[int, int, int], float] = {}
    episode: list[list[float]] = []
    for g, group in enumerate(groups):
        totals = []
        for t, trajectory in enumerate(group):
            calls = len(trajectory.response_lengths)
            given = trajectory.step_rewards
            rewards = [float(r if r is not None else 0.0) for r in given] \
                if given is not None and any(r is not None for r in given) \
                else [0.0] * (calls - 1) + [float(trajectory.reward)]
            running = 0.0
            for c in range(calls - 1, -1, -1):  # R_t = r_t + gamma R_t+1, in Python floats
                running = rewards[c] + args["gamma"] * running
                returns[(g, t, c)] = running
            totals.append(sum(rewards))
        episode.append(normalised(totals))
    anchors: dict[str, list[tuple[int, int, int]]] = {}
    for g, group in enumerate(groups):
        for t, trajectory in enumerate(group):
            for c, state in enumerate(trajectory.states or ()):
                if state is not None:
                    anchors.setdefault(str(state), []).append((g, t, c))
    step_level: dict[tuple[int, int, int], float] = {}
    for members in anchors.values():
        if len(members) > 1:
            step_level.update(zip(members, normalised([returns[m] for m in members])))
    return [[[float(torch.tensor(episode[g][t] + args["omega"] * step_level.get((g, t, c), 0.0),
                                 dtype=torch.float32))
              for c in range(len(trajectory.response_lengths))]
             for t, trajectory in enumerate(group)] for g, group in enumerate(groups)]


_Compute = Callable[[Mapping[str, Any], Sequence[Sequence[Trajectory]]], list[GroupAdvantages]]

#: Each advantage_fn name: Trinity's default arguments (its class's ``default_args``), and
#: the function computing it.
_FNS: dict[str, tuple[dict[str, Any], _Compute]] = {
    "grpo": ({"epsilon": 1e-6, "std_threshold": None, "duplicate_experiences": False,
              "rank_penalty": None, "std_cal_level": "group"}, _grpo),
    "step_wise_grpo": ({"epsilon": 1e-6, "enable_step_norm": False, "std_threshold": None,
                        "std_cal_level": "group"}, _step_wise_grpo),
    "rloo": ({}, _rloo),
    "reinforceplusplus": ({"gamma": 1.0}, _reinforce_plus_plus),
    "reinforce": ({}, _reinforce),
    "opmd": ({"opmd_baseline": "mean", "tau": 1.0}, _opmd),
    "gigpo": ({"omega": 1.0, "gamma": 1.0, "fnorm": "none", "epsilon": 1e-6, **TURN_KEYS},
              _gigpo),
}

#: The Trinity advantage_fn names the local backend computes.
ADVANTAGE_FNS: frozenset[str] = frozenset(_FNS)


def default_args(name: str) -> dict[str, Any]:
    """Trinity's default arguments of the advantage function ``name``."""
    return dict(_FNS[name][0])


def step_advantages(name: str, args: Mapping[str, Any],
                    groups: Sequence[Sequence[Trajectory]]) -> StepAdvantages:
    """The advantage of every model call of one training step, as Trinity's ``name`` gives
    its experiences.

    Args:
        name: One of `ADVANTAGE_FNS`.
        args: The function's Trinity arguments; missing ones take Trinity's defaults,
            unknown ones are ignored.
        groups: The step's groups, one per task in batch order, each the task's valid
            trajectories (a group may hold one, never none).

    Raises:
        ConfigError: ``name`` is not supported, or ``args`` asks for what the local
            backend cannot compute the same way (each message names the argument).
    """
    if name not in _FNS:
        raise ConfigError(unknown_name_message("advantage_fn", name, ADVANTAGE_FNS))
    empty = [index for index, group in enumerate(groups) if not group]
    if empty:
        raise ValueError(f"every group needs a trajectory; group {empty[0]} has none")
    defaults, compute = _FNS[name]
    advantages = compute({**defaults, **args}, groups) if groups else []
    dropped = [group for group, values in zip(groups, advantages) if values and values[0] is None]
    return StepAdvantages(advantages=advantages, metrics={
        "advantage/filtered_count": float(sum(len(_call_rewards(group)) for group in dropped)),
        "advantage/skipped_groups": float(len(dropped))})
