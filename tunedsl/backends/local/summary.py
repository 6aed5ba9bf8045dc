"""The end of a local run: its `RunSummary`, and the summary printed on the terminal."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import attrs

from ...runs.run_files import REWARD_CURVE_PNG, ROLLOUTS_JSONL, TENSORBOARD_DIR


@attrs.frozen(kw_only=True)
class RunSummary:
    """The outcome of a local run."""

    run_dir: Path
    steps: int
    seconds: float
    rewards: tuple[float, ...]  # mean training reward per step, the whole run's
    eval_rewards: tuple[tuple[int, float], ...]
    checkpoint: Path
    sft_losses: tuple[float, ...] = ()  # SFT steps' loss (alone, or a warm-up), in order
    first_step: int = 0  # the step this session began after (a resume's checkpoint)

    def print(self) -> None:
        """Print the end-of-run summary to stdout."""
        print_summary(self)


def _window_mean(values: list[float], first: bool) -> float:
    size = max(1, len(values) // 10)
    part = values[:size] if first else values[-size:]
    part = [v for v in part if not math.isnan(v)]
    return sum(part) / len(part) if part else float("nan")


def print_summary(summary: RunSummary, out: Any = None) -> None:
    """The end-of-run summary on the terminal (stdout as it is at the call)."""
    out = out or sys.stdout
    rewards = list(summary.rewards)
    print(f"run directory  {summary.run_dir}", file=out)
    session = (f" ({summary.steps - summary.first_step} this session, resumed after step "
               f"{summary.first_step})" if summary.first_step else "")
    print(f"steps          {summary.steps}{session} in {summary.seconds:.1f} s", file=out)
    losses = list(summary.sft_losses)
    if losses:
        print(f"sft loss       {_window_mean(losses, True):.3f} (first steps) -> "
              f"{_window_mean(losses, False):.3f} (last steps)", file=out)
    if rewards:
        print(f"train reward   {_window_mean(rewards, True):.3f} (first steps) -> "
              f"{_window_mean(rewards, False):.3f} (last steps)", file=out)
    if summary.eval_rewards:
        (first_step, first), (last_step, last) = summary.eval_rewards[0], summary.eval_rewards[-1]
        print(f"eval reward    {first:.3f} at step {first_step} -> {last:.3f} at step "
              f"{last_step}", file=out)
    print(f"checkpoint     {summary.checkpoint}", file=out)
    curve = summary.run_dir / REWARD_CURVE_PNG
    if curve.exists():
        print(f"reward curve   {curve}", file=out)
    tensorboard = summary.run_dir / TENSORBOARD_DIR
    if tensorboard.exists():
        print(f"tensorboard    tensorboard --logdir {tensorboard}", file=out)
    if (summary.run_dir / ROLLOUTS_JSONL).exists():
        print(f"rollouts       tunedsl view {summary.run_dir}", file=out)
