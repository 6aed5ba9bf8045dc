"""``rollouts.jsonl``: the rollouts the local backend trained on, one JSON line each.

A line holds the step, the task (its row and index), where the rollout sat in the step
(``group``: the task's place in the batch; ``run``: the rollout's place in its group),
every model call of the trained model (messages, reply, tool calls, reasoning, finish
reason, token counts), the reward, each call's advantage, the metrics, the turns the
workflow marked (``model.end_turn``), and the error with the user's traceback behind it.
Lines are written when their step ends; ``keep_rollouts_every`` and
``keep_rollouts_per_step`` thin them for long runs.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...dsl.turns import turns_json
from ...runs.run_files import ROLLOUTS_JSONL
from ...runs.writing import JsonLines
from ...wording import option
from .steps import Rollout


def rollout_lines(step: int, groups: Sequence[Sequence[Rollout]],
                  rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines of one step's rollouts, in batch order."""
    return [
        {"step": step, "task_index": rollout.task_index, "group": group_index, "run": run,
         "task": rows[rollout.task_index], "calls": [call.to_json() for call in rollout.calls],
         "reward": rollout.result.reward if rollout.result is not None else None,
         "advantages": list(rollout.advantages),
         "metrics": dict(rollout.result.metrics) if rollout.result is not None else {},
         "turns": turns_json(rollout.result.turns) if rollout.result is not None else [],
         "error": rollout.error, "traceback": rollout.traceback, "output": rollout.output}
        for group_index, group in enumerate(groups) for run, rollout in enumerate(group)
    ]  # fmt: skip




class RolloutLog:
    """Appends the kept rollouts of each step to ``run_dir/rollouts.jsonl``.

    Args:
        run_dir: The run directory.
        every: Keep the rollouts of every this many steps.
        per_step: Keep at most this many of a step's rollouts (a sample seeded by the run's
            seed and the step, so a resumed run keeps the same ones); None keeps all.
        seed: The run's seed.
    """

    def __init__(self, run_dir: Path, *, every: int = 1, per_step: int | None = None,
                 seed: int = 0) -> None:
        self.every, self.per_step, self.seed = every, per_step, seed
        self.handle = JsonLines(Path(run_dir) / ROLLOUTS_JSONL,
                                label=f"run directory {run_dir}: {ROLLOUTS_JSONL}",
                                then=f"make room and continue with "
                                     f"{option('resume', run_dir)}", chosen=False)

    def write(self, step: int, groups: Sequence[Sequence[Rollout]],
              rows: Sequence[dict[str, Any]]) -> None:
        """Write step ``step``'s lines (if the step is kept)."""
        if step % self.every:
            return
        lines = rollout_lines(step, groups, rows)
        if self.per_step is not None and len(lines) > self.per_step:
            kept = sorted(random.Random(self.seed * 7919 + step).sample(range(len(lines)),
                                                                         self.per_step))
            lines = [lines[i] for i in kept]
        for line in lines:
            self.handle.write(line)

    def close(self) -> None:
        """Close the file."""
        self.handle.close()
