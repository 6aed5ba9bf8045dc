"""What one training step of the local backend produced: its rollouts and its report, with
a metric of many rollouts summarised as Trinity summarises it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs

from ...dsl.chat import ModelCall
from ...rollout.run import RolloutResult


@attrs.define(kw_only=True)
class Rollout:
    """One rollout of a step: what the trainer learns from and ``rollouts.jsonl`` keeps.

    Attributes:
        task_index: The task's row in its dataset.
        result: The scored rollout, or None when it failed.
        calls: The trained model's calls, in order.
        error: Why it failed, if it did.
        traceback: The user's traceback behind the failure, if any.
        output: What the rollout's code printed (kept, not shown), or None.
        advantages: Each call's advantage once the group is scored (empty when the rollout
            failed or made no model call).
    """

    task_index: int
    result: RolloutResult | None
    calls: list[ModelCall]
    error: str | None = None
    traceback: str | None = None
    advantages: list[Any] = attrs.field(factory=list)  # per call: a number, or per token
    output: str | None = None


@attrs.frozen(kw_only=True)
class StepReport:
    """What one training step did: one line of ``metrics.jsonl``, and its rollouts by task."""

    step: int
    metrics: dict[str, float]
    groups: tuple[tuple[Rollout, ...], ...] = ()


def aggregate_stats(key: str, values: Sequence[float], *, empty: float = float("nan"),
                    std: bool = True) -> dict[str, float]:
    """``key`` (with a ``{stat}`` field) for the mean, max and min (and std) of ``values``,
    as Trinity aggregates a metric of many rollouts."""
    if not values:
        return {key.format(stat="mean"): empty}
    mean = sum(values) / len(values)
    stats = {"mean": mean, "max": max(values), "min": min(values)}
    if std:
        stats["std"] = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {key.format(stat=stat): value for stat, value in stats.items()}
