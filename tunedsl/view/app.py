"""The viewer's answers, as data: what the page asks the server for, and what a ``--out``
file embeds. One `Viewer` serves a run, an eval, or two evals compared."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

from ..data.json_text import dumps
from ..dsl.trinity_fields import POLICY_LOSS_METRIC
from ..errors import DatasetError
from .query import PAGE_SIZE, Filters, Query, compare_rows, task_text
from .sources import Source

#: The most rollouts a page may ask for.
MAX_PAGE = 500
#: The curve the page's metric chart shows first, when the run logged it.
FIRST_METRIC = POLICY_LOSS_METRIC


class BadRequest(ValueError):
    """A request the page would never send (a hand-typed URL): answered with 400."""


def _number(params: Mapping[str, str], name: str, kind: type = int) -> Any:
    value = params.get(name, "").strip()
    if not value:
        return None
    try:
        return kind(value)
    except ValueError:
        raise BadRequest(f"{name}={value!r} is not a number") from None


class Viewer:
    """The page's data for one or two sources.

    Args:
        sources: One source, or two eval results to compare (before, after).
    """

    def __init__(self, sources: list[Source]) -> None:
        if len(sources) == 2 and any(source.kind != "eval" for source in sources):
            odd = next(source for source in sources if source.kind != "eval")
            raise DatasetError(f"{odd.path}: only two eval results files can be compared (this "
                               f"is {odd.what}); give two tunedsl eval -o files")
        if len(sources) == 2:
            _refuse_other_tasks(*sources)
        self.sources = sources
        self.queries = [Query(source) for source in sources]
        self.mode = "compare" if len(sources) == 2 else sources[0].kind
        self._rows: list[dict[str, Any]] | None = None

    def meta(self) -> dict[str, Any]:
        """Mode, and each source's title, curves, summary and steps, as they are now: a
        run or eval still writing shows what it wrote since (reload the page). With them
        what the page would otherwise restate: its page size and the metric it charts
        first (each source's meta names its reward curves)."""
        for source in self.sources:
            source.refresh()
        if self.mode == "compare":
            self._rows = None
        return {"mode": self.mode, "page_size": PAGE_SIZE, "first_metric": FIRST_METRIC,
                "sources": [source.meta() for source in self.sources]}

    def rollouts(self, params: Mapping[str, str]) -> dict[str, Any]:
        """A filtered page of one source's rollouts (``side`` picks the source)."""
        side = self._side(params)
        filters = Filters(step=_number(params, "step"), min=_number(params, "min", float),
                          max=_number(params, "max", float),
                          errors=params.get("errors", "") in ("1", "true", "on"),
                          q=params.get("q", ""))
        offset = _number(params, "offset") or 0
        limit = min(MAX_PAGE, _number(params, "limit") or PAGE_SIZE)
        return self.queries[side].page(filters, offset, limit)

    def rollout(self, params: Mapping[str, str]) -> dict[str, Any]:
        """One rollout (``side``, ``id``) as a view record."""
        side = self._side(params)
        index = _number(params, "id")
        if index is None or not 0 <= index < len(self.sources[side].entries):
            raise BadRequest(f"id={params.get('id')!r}: no such rollout")
        return self.sources[side].record(index)

    def compare_rows(self) -> list[dict[str, Any]]:
        """Every task of the two evals, regressions first (computed once)."""
        if self._rows is None:
            self._rows = compare_rows(*self.sources)
        return self._rows

    def compare(self, params: Mapping[str, str]) -> dict[str, Any]:
        """A page of the comparison table, each row with its task's text."""
        if self.mode != "compare":
            raise BadRequest("compare needs two eval results")
        rows = self.compare_rows()
        offset = max(0, _number(params, "offset") or 0)
        limit = min(MAX_PAGE, _number(params, "limit") or PAGE_SIZE)
        page = [self._with_task(row) for row in rows[offset:offset + limit]]
        return {"total": len(rows), "offset": offset, "rows": page}

    def _with_task(self, row: dict[str, Any]) -> dict[str, Any]:
        side, ids = (0, row["before"]) if row["before"] else (1, row["after"])
        return {**row, "task": task_text(self.sources[side], ids[0])}

    def _side(self, params: Mapping[str, str]) -> int:
        side = _number(params, "side") or 0
        if not 0 <= side < len(self.sources):
            raise BadRequest(f"side={side}: there are {len(self.sources)} sources")
        return side

    def answer(self, route: str, params: Mapping[str, str]) -> Any:
        """The JSON answer for an API route (``/api/<route>``)."""
        handlers = {"meta": lambda: self.meta(), "rollouts": lambda: self.rollouts(params),
                    "rollout": lambda: self.rollout(params),
                    "compare": lambda: self.compare(params)}
        if route not in handlers:
            raise LookupError(route)
        if route != "meta":  # what the files hold now, as meta shows (a file may have changed)
            for source in self.sources:
                source.refresh()
        return handlers[route]()

    def embedded(self, limit: int) -> dict[str, Any]:
        """Everything a ``--out`` page needs, with at most ``limit`` rollouts in all.

        A run keeps its newest steps' rollouts (what training made of the model); an eval
        keeps its first tasks; a comparison keeps the rollouts of its first rows, so the
        biggest regressions are always in.
        """
        data: dict[str, Any] = {"meta": self.meta(), "records": [[] for _ in self.sources]}
        total = sum(len(source.entries) for source in self.sources)
        if self.mode == "compare":
            rows, budget = [], limit
            for row in self.compare_rows():
                size = len(row["before"]) + len(row["after"])
                if size > budget:
                    break
                budget -= size
                rows.append(self._with_task(row))
                for side, name in enumerate(("before", "after")):
                    data["records"][side] += [self.sources[side].record(i) for i in row[name]]
            data["rows"] = rows
        else:
            source = self.sources[0]
            ids = list(range(min(limit, len(source.entries))))
            if self.mode != "eval":
                ids = _newest_steps(source, limit)
            data["records"][0] = [source.record(i) for i in ids]
        kept = sum(len(records) for records in data["records"])
        data["left_out"] = total - kept
        return data


def _newest_steps(source: Source, limit: int) -> list[int]:
    """The ids of the newest whole steps whose rollouts fit in ``limit`` (or the newest
    step's last ``limit`` rollouts when it alone is larger)."""
    by_step: dict[Any, list[int]] = {}
    for index, entry in enumerate(source.entries):
        by_step.setdefault(entry.step, []).append(index)
    kept: list[int] = []
    for step in sorted(by_step, key=lambda s: (s is not None, s or 0), reverse=True):
        ids = by_step[step]
        if len(kept) + len(ids) > limit:
            if not kept:
                kept = ids[-limit:] if limit else []
            break
        kept = ids + kept
    return sorted(kept)


def page_html(data: dict[str, Any] | None = None) -> str:
    """The page: one HTML document with its style and script inline. With ``data`` (see
    `Viewer.embedded`) it needs no server; without, it asks ``/api/...``."""
    folder = resources.files(__package__) / "page"
    html = (folder / "index.html").read_text(encoding="utf-8")
    # Every "<" as JSON's \u003c: "</" would end the script element early, and "<!--"
    # then "<script" (a scraped page an agent printed) makes the parser skip its end tag.
    blob = "" if data is None else dumps(data).replace("<", "\\u003c")
    return (html.replace("/*STYLE*/", (folder / "app.css").read_text(encoding="utf-8"))
                .replace("/*SCRIPT*/", (folder / "app.js").read_text(encoding="utf-8"))
                .replace("/*DATA*/", blob))


def _refuse_other_tasks(before: Source, after: Source) -> None:
    """Two evals are compared task by task (by index): of other tasks (another dataset or
    split, rows reordered), each pair would set unrelated questions side by side.

    Raises:
        DatasetError: their tasks' digests differ.
    """
    from ..evaluation.evaluate import TASKS_KEY

    digests = [getattr(source, "settings", {}).get(TASKS_KEY) for source in (before, after)]
    if None in digests or digests[0] == digests[1]:
        return
    # Other digests: one may hold a part of the other's tasks (eval -n, rows appended),
    # which pair as they are; a task that differs at one index pairs unrelated questions.
    tasks = [_tasks_by_index(source) for source in (before, after)]
    shared = sorted(tasks[0].keys() & tasks[1].keys())
    differing = [index for index in shared if tasks[0][index] != tasks[1][index]]
    if differing or not shared:
        at = (f"task {differing[0]} is another question in each" if differing else
              "they share no task index")
        raise DatasetError(f"{before.path} and {after.path} evaluated other tasks ({at}: "
                           f"another dataset or split, or rows changed or reordered), and a "
                           f"comparison pairs them task by task; compare two evals of the "
                           f"same tasks")


def _tasks_by_index(source: Source) -> dict[int, str]:
    """Each task index of an eval's rollouts, with its task as JSON text."""
    import json

    found: dict[int, str] = {}
    for place, entry in enumerate(source.entries):
        if entry.task_index is not None and entry.task_index not in found:
            found[entry.task_index] = json.dumps(source.record(place).get("task"),
                                                 sort_keys=True)
    return found

