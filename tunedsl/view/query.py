"""Filters, pages and comparisons over a `Source`'s rollouts: what the page asks for.

The page's own script applies the same rules to the rollouts a ``--out`` file embeds
(``page/app.js``, ``matches``), so a shared report filters as the served page does:

- ``step``: that step only; ``min``/``max``: the reward within the bounds (a rollout
  without a reward is left out once a bound is set); ``errors``: failed rollouts only;
- ``q``: case-insensitive text search over every string of the rollout (task fields,
  messages, replies, reasoning, tool calls, error).
"""

from __future__ import annotations

import functools
import json
import statistics
from collections.abc import Iterator
from typing import Any

import attrs

from .sources import Entry, Source

#: Rollouts (or compared tasks) per page; the page reads it from the meta answer.
PAGE_SIZE = 50


@attrs.frozen
class Filters:
    """What the page's filter bar asks for (None: no condition)."""

    step: int | None = None
    min: float | None = None
    max: float | None = None
    errors: bool = False
    q: str = ""

    def keeps(self, entry: Entry) -> bool:
        """Whether ``entry`` passes every condition the index can decide."""
        if self.step is not None and entry.step != self.step:
            return False
        if self.errors and not entry.error:
            return False
        if self.min is not None or self.max is not None:
            if entry.reward is None:
                return False
            if self.min is not None and entry.reward < self.min:
                return False
            if self.max is not None and entry.reward > self.max:
                return False
        return True


def strings(value: Any) -> Iterator[str]:
    """Every string inside ``value`` (a view record), keys excepted."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def mentions(source: Source, index: int, needle: str) -> bool:
    """Whether rollout ``index`` has a string containing ``needle`` (lower-cased)."""
    # Quick refusal on the stored line: a plain needle inside a string appears verbatim
    # in its JSON text (tunedsl writes non-ASCII as is), so most rollouts are never parsed.
    raw = source.raw(index)
    plain = not any(ch in needle for ch in '"\\') and all(ch >= " " for ch in needle)
    if plain and "\\u" not in raw and needle not in raw.lower():
        return False
    return any(needle in text.lower() for text in strings(source.record(index)))


class Query:
    """Filtered pages of one source, remembering recent selections so that paging
    through a search reads the file once."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self._selected = functools.lru_cache(maxsize=16)(self._select)

    def _select(self, filters: Filters, version: object) -> tuple[int, ...]:
        chosen = [i for i, entry in enumerate(self.source.entries) if filters.keeps(entry)]
        needle = filters.q.strip().lower()
        if needle:
            chosen = [i for i in chosen if mentions(self.source, i, needle)]
        return tuple(chosen)

    def page(self, filters: Filters, offset: int = 0, limit: int = PAGE_SIZE) -> dict[str, Any]:
        """``{"total", "offset", "items"}``: the view records of one page."""
        chosen = self._selected(filters, self.source.version)
        offset = max(0, min(offset, len(chosen)))
        items = [self.source.record(i) for i in chosen[offset:offset + max(1, limit)]]
        return {"total": len(chosen), "offset": offset, "items": items}


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def compare_rows(before: Source, after: Source) -> list[dict[str, Any]]:
    """One row per task of either eval: its rollouts on each side, their mean rewards
    (a failed rollout counts 0) and the change, regressions first.

    Tasks only one side ran sort after those both ran, by their one mean.
    """
    sides: dict[int, dict[str, list[int]]] = {}
    for name, source in (("before", before), ("after", after)):
        for index, entry in enumerate(source.entries):
            if entry.task_index is not None:
                sides.setdefault(entry.task_index, {"before": [], "after": []})[name].append(index)
    rows = []
    for task_index, ids in sides.items():
        means = {name: _mean([before_or_after.entries[i].reward or 0.0 for i in ids[name]])
                 for name, before_or_after in (("before", before), ("after", after))}
        both = means["before"] is not None and means["after"] is not None
        rows.append({"task_index": task_index, "before": ids["before"], "after": ids["after"],
                     "before_mean": means["before"], "after_mean": means["after"],
                     "delta": means["after"] - means["before"] if both else None})  # type: ignore[operator]
    rows.sort(key=lambda row: (row["delta"] is None, row["delta"] if row["delta"] is not None
                               else (row["after_mean"] or row["before_mean"] or 0.0),
                               row["task_index"]))
    return rows


def task_text(source: Source, index: int, width: int = 160) -> str:
    """A rollout's task as one short line of JSON, for a table cell."""
    text = json.dumps(source.record(index).get("task"), ensure_ascii=False, default=str)
    return text if len(text) <= width else text[:width - 1] + "…"
