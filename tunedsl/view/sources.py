"""What ``tunedsl view`` reads, each as a `Source` of rollouts in one shape.

A source is a local run directory (``metrics.jsonl``, ``rollouts.jsonl``), an eval
results file (``tunedsl eval -o``), or a Trinity run directory (`trinity_run`). Every
source gives the page the same things: metric curves, summary rows, a light index of its
rollouts (`Entry`: enough to filter and page without reading a rollout) and, on request,
one rollout as a *view record*::

    {"id", "step", "task_index", "group", "run", "task", "calls", "reward",
     "advantages", "metrics", "error", "traceback", "seconds", "output"}

where ``calls`` holds `ModelCall.to_json` dicts, the call record ``rollouts.jsonl`` and
eval results share. A rollout's full text is read from disk only when asked for, so a
run with 100k rollouts costs its index, not its text, in memory.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ..access import where_a_broken_link_leads
from ..data.json_text import is_count
from ..data.jsonl_index import JsonLines
from ..errors import DatasetError
from ..runs.run_files import (
    BUFFER_DIR,
    CHECKPOINT_ROOT_DIR,
    CONFIG_YAML,
    METRICS_JSONL,
    ROLLOUTS_JSONL,
    TENSORBOARD_DIR,
)
from .source import Entry, Source, ViewRollout, number_or_none, run_summary

__all__ = [
    "CandidatesSource",
    "Entry",
    "EvalSource",
    "RunSource",
    "Source",
    "ViewRollout",
    "open_source",
    "read_metrics",
    "run_summary",
]


class RunSource(Source):
    """A local backend's run directory: ``metrics.jsonl`` and ``rollouts.jsonl``."""

    kind = "run"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.lines = JsonLines(path / ROLLOUTS_JSONL)
        self._refreshing = threading.Lock()
        self.refresh()

    def refresh(self) -> None:
        """Read what the run wrote since: new steps' rollouts (or all of them again when
        a resume truncated the file) and the metrics."""
        with self._refreshing:
            lines = self.lines
            if lines.size() < lines.end:  # --resume cut the file back to its checkpoint
                self.lines = lines = JsonLines(lines.path)
                self.entries = []
            if lines.path.is_symlink() and not lines.path.exists():  # (not "0 rollouts")
                raise DatasetError(f"{lines.path}: a symbolic link to "
                                   f"{os.readlink(lines.path)}, "
                                   f"{where_a_broken_link_leads(lines.path)}; point it "
                                   f"at the run's {ROLLOUTS_JSONL}, or remove it")
            if lines.path.exists():
                for number, offset, line in lines.scan(lines.end, lines.lines_read):
                    _check_rollout_line(lines.path, number, line)
                    lines.keep(number, offset)
                    self.entries.append(Entry(
                        step=line["step"], task_index=line.get("task_index"), run=line.get("run"),
                        reward=number_or_none(line.get("reward")),
                        error=line.get("error") is not None))
            self.curves = read_metrics(self.path / METRICS_JSONL)
            self.summary = run_summary(self.curves, self.entries)
            self.version = (id(lines), len(self.entries))

    def record(self, index: int) -> dict[str, Any]:
        line = self.lines.value(index)
        return ViewRollout(id=index, step=line["step"], task_index=line.get("task_index"),
                           group=line.get("group"), run=line.get("run"), task=line.get("task"),
                           calls=line.get("calls") or [], reward=line.get("reward"),
                           advantages=line.get("advantages"), metrics=line.get("metrics"),
                           error=line.get("error"), traceback=line.get("traceback"),
                           output=line.get("output")).as_json()

    def raw(self, index: int) -> str:
        return self.lines.text(index)


def _check_rollout_line(path: Path, number: int, line: Any) -> None:
    """A line of a run's ``rollouts.jsonl`` has the step (and, where given, the task index
    and group) the page sorts and filters by, as whole numbers."""
    if not isinstance(line, dict) or "step" not in line:
        raise DatasetError(f"{path}:{number}: not a rollout line (it needs a step); was it "
                           f"written by tunedsl run?")
    for key in ("step", "task_index", "run"):
        value = line.get(key)
        if (key == "step" or value is not None) and not is_count(value):
            raise DatasetError(f"{path}:{number}: not a rollout line: its {key} is "
                               f"{value!r}, not a whole number >= 0; fix or delete that line")


def read_metrics(path: Path) -> dict[str, list[tuple[int, float]]]:
    """The curves of a ``metrics.jsonl`` (one line per step; eval steps have their own);
    a missing file has none."""
    curves: dict[str, list[tuple[int, float]]] = {}
    if not path.exists():
        return curves
    for _, _, row in JsonLines(path).scan():
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            continue
        for name, value in row.items():
            number = number_or_none(value)
            if name != "step" and number is not None:
                curves.setdefault(name, []).append((row["step"], number))
    for points in curves.values():
        points.sort(key=lambda point: point[0])
    return curves


class EvalSource(Source):
    """An eval results file: one line per rollout; a later line for the same task and
    repeat (a resumed or re-run rollout) replaces the earlier one, as in `summarize`."""

    kind = "eval"
    what = "an eval results file"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._refreshing = threading.Lock()
        self._load()

    def refresh(self) -> None:
        """Read the file again when it changed (an eval still going, or resumed; or a line
        edited in place, the size unchanged)."""
        with self._refreshing:
            if self.lines.size() != self.lines.end or self.lines.stamp() != self.lines.scanned:
                self._load()

    def _load(self) -> None:
        from ..evaluation.evaluate import OneEvaluation, summarize

        path = self.path
        lines = JsonLines(path)
        entries = []
        latest: dict[tuple[int, int], tuple[int, int, dict[str, Any]]] = {}
        one = OneEvaluation(str(path))
        for number, offset, line in lines.scan():
            one.check(number, line)
            light = {key: line.get(key) for key in ("task_index", "repeat", "reward", "error",
                                                    "seconds", "prompt_tokens",
                                                    "completion_tokens")}
            latest[(line["task_index"], line["repeat"])] = (number, offset, light)
        for _, (number, offset, light) in sorted(latest.items()):
            lines.keep(number, offset)
            entries.append(Entry(step=None, task_index=light["task_index"], run=light["repeat"],
                                 reward=number_or_none(light["reward"]),
                                 error=light["error"] is not None))
        lights = [light for _, _, light in latest.values()]
        repeat = max((light["repeat"] for light in lights), default=0) + 1
        # Swapped in together: a page request never sees entries of one load and lines
        # of another.
        self.lines, self.entries = lines, entries
        #: The evaluation's settings (its first line's), the digest of its tasks among them.
        self.settings: dict[str, Any] = dict(one.first[1]) if one.first is not None else {}
        self.summary = summarize(lights, repeat).rows()
        self.version = (id(lines), len(entries))

    def record(self, index: int) -> dict[str, Any]:
        line = self.lines.value(index)
        return ViewRollout(id=index, step=None, task_index=line["task_index"], group=None,
                           run=line["repeat"], task=line.get("task"),
                           calls=line.get("messages") or [], reward=line.get("reward"),
                           metrics=line.get("metrics"), error=line.get("error"),
                           seconds=line.get("seconds"), traceback=line.get("traceback"),
                           output=line.get("output")).as_json()

    def raw(self, index: int) -> str:
        return self.lines.text(index)


class CandidatesSource(Source):
    """A prompt tuning's candidates file (``tunedsl tune-prompt --candidates``), shown as a
    run whose steps are the candidates in the order they were first tried (0: the starting
    text): the curve is each scored candidate's validation reward, a step's rollouts are
    that candidate's (training minibatches and validation), and the summary lists every
    candidate with its score and the best text."""

    kind = "run"
    what = "a tune-prompt candidates file"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._refreshing = threading.Lock()
        self.lines = JsonLines(path)
        self._load()

    def refresh(self) -> None:
        with self._refreshing:
            if self.lines.size() != self.lines.end:  # still tuning, or resumed
                self._load()

    def _load(self) -> None:
        from ..evaluation.prompt_tuning import check_candidates_line

        lines = JsonLines(self.path)  # a half-written last line: a tuning still going
        steps: dict[str, int] = {}
        scored: dict[str, dict[str, Any]] = {}
        entries = []
        first_start: tuple[int, Any] | None = None
        for number, offset, line in lines.scan():
            check_candidates_line(self.path, number, line)  # a bad one named by file:line
            if line["kind"] == "start":  # a second, of another tuning: two files joined
                if first_start is None:
                    first_start = (number, line)
                elif line != first_start[1]:
                    raise DatasetError(f"{self.path}:{number}: its start line differs from "
                                       f"line {first_start[0]}'s, so the file mixes two "
                                       f"tunings and a summary of it would mix them; keep one "
                                       f"tuning's lines per file")
            if line["kind"] == "candidate":
                scored.setdefault(line["candidate"], line)
            if line["kind"] != "rollout":
                continue
            step = steps.setdefault(line["candidate"], len(steps))
            lines.keep(number, offset)
            entries.append(Entry(step=step, task_index=line["task_index"], run=line["repeat"],
                                 reward=number_or_none(line.get("reward")),
                                 error=line.get("error") is not None))
        curve = sorted((steps[cid], line["val_reward"]) for cid, line in scored.items()
                       if cid in steps)
        summary = [("candidates", f"{len(steps)} tried, {len(scored)} scored on the "
                                  f"validation split")]
        if scored:
            start = next(iter(scored.values()))
            best = max(scored.values(), key=lambda line: line["val_reward"])
            summary.append(("validation", f"start {start['val_reward']:.4f} -> best "
                                          f"{best['val_reward']:.4f} (step "
                                          f"{steps.get(best['candidate'])})"))
            summary += [(f"best {name}", text) for name, text in best["params"].items()]
        for cid, step in steps.items():
            line = scored.get(cid)
            shown = (f"validation {line['val_reward']:.4f}: " + "; ".join(
                line["params"].values()) if line is not None else "not better on its minibatch")
            summary.append((f"step {step} ({cid})", shown))
        self.lines, self.entries = lines, entries
        self.curves = {"eval/validation/reward/mean@1": curve} if curve else {}
        self.summary = summary
        self.version = (id(lines), len(entries))

    def record(self, index: int) -> dict[str, Any]:
        line = self.lines.value(index)
        return ViewRollout(id=index, step=self.entries[index].step,
                           task_index=line["task_index"], group=None, run=line["repeat"],
                           task={"split": line["split"], **(line.get("task") or {})},
                           calls=line.get("messages") or [], reward=line.get("reward"),
                           metrics=line.get("metrics"), error=line.get("error"),
                           seconds=line.get("seconds"), traceback=line.get("traceback"),
                           output=line.get("output")).as_json()

    def raw(self, index: int) -> str:
        return self.lines.text(index)


def _first_line(path: Path) -> Any:
    """The JSON of ``path``'s first line (None when it cannot be read or is not JSON: the
    reader then names what is wrong)."""
    import json

    try:
        with path.open("rb") as handle:
            return json.loads(handle.readline() or b"null")
    except (OSError, ValueError, RecursionError):  # deep nesting: the reader names it
        return None


def _is_candidates_file(path: Path) -> bool:
    """Whether ``path`` begins as a tune-prompt candidates file does (a line of one of its
    kinds: the start line, or a later one where the start was cut off)."""
    from ..evaluation.prompt_tuning import is_candidates_line

    return is_candidates_line(_first_line(path))


def _may_be_results(path: Path) -> bool:
    """Whether ``path`` may be something view shows: its first line an eval result, a
    candidates file's, or not JSON at all (what is wrong is then said by its reader); a
    dataset's rows are none of these."""
    first = _first_line(path)
    return first is None or (isinstance(first, dict) and {"task_index", "repeat"} <= first.keys()
                             ) or _is_candidates_file(path)


def open_source(path: str | Path) -> Source:
    """The source at ``path``: a run directory (local or Trinity) or an eval results file.

    Raises:
        DatasetError: nothing tunedsl can show is there, or it cannot be read (one line
            naming ``path``).
    """
    path = Path(path)
    try:
        return _source_at(path)
    except PermissionError as exc:  # (a file or folder without read permission)
        folder = path.is_dir() and not os.access(path, os.R_OK | os.X_OK)  # (its files
        where = path if folder else exc.filename or path  # then cannot be looked at)
        raise DatasetError(f"{where}: cannot read it ({exc.strerror}); make it readable "
                           f"(chmod u+r{'x' if folder else ''} {where}), or view another"
                           ) from None


def _source_at(path: Path) -> Source:
    if path.is_symlink() and not path.exists():
        raise DatasetError(f"{path}: a symbolic link to {os.readlink(path)}, "
                           f"{where_a_broken_link_leads(path)}; fix the link, or give the "
                           f"run directory or results file itself")
    if not path.exists():
        raise DatasetError(f"{path}: no such file or directory; give a run directory "
                           f"({CHECKPOINT_ROOT_DIR}/<project>/<run>) or an eval results file")
    if path.is_dir():
        if (path / METRICS_JSONL).exists() or (path / ROLLOUTS_JSONL).exists():
            return RunSource(path)
        from .trinity_run import TrinityRunSource, is_trinity_run

        if is_trinity_run(path):
            return TrinityRunSource(path)
        files = sorted(entry.name for entry in path.glob("*.jsonl") if entry.is_file())
        results = [name for name in files if _may_be_results(path / name)]
        if files and not results:  # an experiment's data (sweep 45 B-W4)
            raise DatasetError(f"{path}: a folder of data files ({', '.join(files[:5])}"
                               f"{', ...' if len(files) > 5 else ''}), not results; view shows "
                               f"a run directory or an eval's -o file, and tunedsl preview "
                               f"MODULE:EXPERIMENT shows a dataset's rows")
        if results:  # what a model selection (eval with several models) writes
            pair = " ".join(str(path / name) for name in results[:2])
            raise DatasetError(f"{path}: a folder of results files ({', '.join(results[:5])}"
                               f"{', ...' if len(results) > 5 else ''}), not a run directory; "
                               f"view one of them, or two side by side: tunedsl view {pair}")
        raise DatasetError(f"{path}: not a run directory (no {METRICS_JSONL}, {ROLLOUTS_JSONL}, "
                           f"Trinity {TENSORBOARD_DIR}, {BUFFER_DIR}/ experiences or "
                           f"{CONFIG_YAML}); give the folder tunedsl run printed as 'run "
                           f"directory'")
    if not path.is_file():
        raise DatasetError(f"{path}: not a regular file (a device or a link to one); give a "
                           f"run directory or an eval results file")
    if _blank(path):
        raise DatasetError(f"{path}: holds nothing to show (no results); give a results file "
                           f"tunedsl eval wrote, or a run directory")
    if _is_candidates_file(path):
        return CandidatesSource(path)
    return EvalSource(path)


def _blank(path: Path) -> bool:
    """Whether a file holds only whitespace and NUL bytes (what a crash can leave where a
    file's blocks were allocated but never written), read until it does not."""
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 16):
            if chunk.strip(b" \t\r\n\f\v\0"):
                return False
    return True
