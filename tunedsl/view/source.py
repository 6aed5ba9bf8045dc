"""The shape every ``tunedsl view`` source shares: `Source`, its index `Entry`, the view
record (`ViewRollout`), the training-run summary rows (`run_summary`) and which curves
are rewards (`reward_curves`).

Kept apart from `sources` so a source in its own module (`trinity_run`) can build on it
while `sources.open_source` imports that module: neither imports the other.
"""

from __future__ import annotations

import json
import math
import re
import string
from pathlib import Path
from typing import Any

import attrs

from ..dsl.trinity_fields import EVAL_METRIC, TRAIN_REWARD_METRIC


def name_pattern(template: str, **fields: str) -> re.Pattern[str]:
    """A `str.format` name ``template`` as a regular expression: each field matches its
    pattern in ``fields``, the rest of the template itself."""
    parts = []
    for text, field, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(text))
        if field is not None:
            parts.append(fields[field])
    return re.compile("".join(parts))


#: An eval reward curve's name: `EVAL_METRIC` of the reward, any taskset and repeats.
EVAL_REWARD_CURVE = name_pattern(EVAL_METRIC, taskset=".+", name="reward", repeats=r"\d+")


def reward_curves(curves: dict[str, Any]) -> list[str]:
    """The names of the reward curves in ``curves`` (the page draws them together):
    the training reward first, then each eval's in the order logged."""
    return ([name for name in curves if name == TRAIN_REWARD_METRIC]
            + [name for name in curves if EVAL_REWARD_CURVE.fullmatch(name)])


@attrs.frozen
class Entry:
    """One rollout in a source's index: what filters and paging read."""

    step: int | None
    task_index: int | None
    run: int | None
    reward: float | None
    error: bool


class Source:
    """A run or an eval's rollouts, metrics and summary, read-only.

    Attributes:
        kind: ``"run"`` (local run directory), ``"trinity"`` (Trinity run directory) or
            ``"eval"`` (eval results file).
        what: What it is, for a message (``a run directory``).
        path: What the user named.
        curves: Metric name -> ``[(step, value), ...]`` in step order.
        summary: ``(label, value)`` rows for the page's summary table.
        entries: The rollouts' index, in display order; an entry's place is its id.
    """

    kind: str = ""
    what: str = "a run directory"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.curves: dict[str, list[tuple[int, float]]] = {}
        self.summary: list[tuple[str, str]] = []
        self.entries: list[Entry] = []
        #: Changes whenever `entries` does (a cache of selections keys on it).
        self.version: Any = 0

    def refresh(self) -> None:
        """Read what was written since the source was opened (a run or eval still going);
        a source that cannot grow does nothing."""

    def record(self, index: int) -> dict[str, Any]:
        """Rollout ``index`` as a view record."""
        raise NotImplementedError

    def raw(self, index: int) -> str:
        """Rollout ``index``'s text as stored (JSON), for a quick search pre-check: every
        string of the view record appears in it verbatim unless JSON escaped it."""
        return json.dumps(self.record(index), ensure_ascii=False)

    def meta(self) -> dict[str, Any]:
        """What the page shows before any rollout: kind, title, curves (the reward curves
        named), summary, steps."""
        if getattr(self, "_steps", (None, None))[0] != self.version:  # once per change
            steps: dict[int, int] = {}
            for entry in self.entries:
                if entry.step is not None:
                    steps[entry.step] = steps.get(entry.step, 0) + 1
            self._steps = (self.version, sorted(steps.items()))
        return {"kind": self.kind, "path": str(self.path), "title": self.path.name,
                "curves": {name: [[s, v] for s, v in points]
                           for name, points in self.curves.items()},
                "reward_curves": reward_curves(self.curves),
                "summary": [list(row) for row in self.summary],
                "steps": self._steps[1], "rollouts": len(self.entries)}


@attrs.frozen(kw_only=True)
class ViewRollout:
    """A rollout in the one shape the page reads (see the module docstring); `as_json`
    gives it to the page."""

    id: int
    step: int | None
    task_index: int | None
    group: int | None
    run: int | None
    task: Any
    calls: list[dict[str, Any]]
    reward: Any
    advantages: list[float] | None = None
    metrics: dict[str, Any] | None = None
    error: str | None = None
    seconds: float | None = None
    traceback: str | None = None
    #: What the rollout's code printed (kept with it, not shown during the run).
    output: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The record as the page reads it (no advantages or metrics: empty ones)."""
        return {**attrs.asdict(self, recurse=False), "advantages": self.advantages or [],
                "metrics": self.metrics or {}}


def number_or_none(value: Any) -> float | None:
    """A finite reward as a float; anything else (None, NaN, text) as None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def run_summary(curves: dict[str, list[tuple[int, float]]],
                entries: list[Entry]) -> list[tuple[str, str]]:
    """Summary rows of a training run: steps, rollouts kept, train and eval reward."""
    rows = []
    train = curves.get(TRAIN_REWARD_METRIC, [])
    if train:
        rows.append(("steps", str(train[-1][0])))
        rows.append(("train reward", f"{train[0][1]:.4f} (step {train[0][0]}) -> "
                                     f"{train[-1][1]:.4f} (step {train[-1][0]})"))
    for name, points in curves.items():
        if name.startswith("eval/") and "/reward/mean" in name and points:
            rows.append((name, f"{points[0][1]:.4f} (step {points[0][0]}) -> "
                               f"{points[-1][1]:.4f} (step {points[-1][0]})"))
    errors = sum(entry.error for entry in entries)
    rows.append(("rollouts kept", f"{len(entries)} ({errors} errors)"))
    return rows
