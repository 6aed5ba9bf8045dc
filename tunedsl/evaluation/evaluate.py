"""Score an agent without training: ``tunedsl eval``.

Every rollout runs through the shared rollout function, concurrently (a fixed pool
of workers, so memory stays flat however many rollouts there are), and becomes
one JSONL line the moment it finishes: an interrupted eval loses nothing, and
``--resume`` runs only what the file does not hold yet.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from ..config.graph import ExperimentGraph
from ..data.json_text import as_written, digest, is_count
from ..dsl.decorators import is_group_judge
from ..dsl.turns import turns_json
from ..errors import ConfigError, DatasetError, RolloutError, RunError, RunInterrupted, described
from ..models.reached import Reached
from ..rollout.code import code_digest
from ..rollout.group import roll_out_group
from ..rollout.loop import ExitInCallback, run_rollouts
from ..rollout.run import (
    CANCELLED_INSIDE,
    LOOP_STOPPED,
    Agent,
    run_bounded_rollout,
    stopped_the_loop,
)
from ..rollout.together import all_or_none
from ..rollout.watchdog import Watchdog
from ..runs.outputs import JSONL_KINDS, jsonl_kind, refuse_a_compressed_name
from ..runs.run_files import PROMPTS_DIR
from ..runs.writing import JsonLines
from ..wording import given, option, options, print_lines, said, spelled
from .execution import Execution
from .responses import encode_response


def missing_auxiliary_fix() -> str:
    """How to give an auxiliary model the experiment does not serve itself."""
    return said("give each one with --aux NAME=URL,MODEL",
                "give each one in auxiliary_models, a Model(..., base_url=...) by name")


@attrs.frozen(kw_only=True)
class EvalScope:
    """The rollouts an evaluation runs.

    Attributes:
        split: Read this split instead of the dataset's own.
        limit: Only the first ``limit`` tasks.
        repeat: Rollouts per task (pass@k is reported when above 1).
    """

    split: str | None = None
    limit: int | None = None
    repeat: int = 1


@attrs.frozen(kw_only=True)
class EvalSummary:
    """What an eval (or a rescore) measured."""

    rollouts: int
    errors: int
    reward_mean: float
    reward_std: float
    pass_at: dict[int, float]
    latency: dict[str, float]
    prompt_tokens: int
    completion_tokens: int
    error_messages: tuple[str, ...] = ()
    seconds: float | None = None  # wall time of the rollouts (an eval run, not a file)
    #: The mean reward of the rollouts that finished (None: none did); ``reward_mean``
    #: counts a failed one as 0.
    finished_mean: float | None = None
    #: The results file an eval wrote (`tunedsl.evaluate`); None for a summary of a file.
    results: Path | None = None
    #: Of a rescore's summary after: the rollouts whose response the judge saw again (not
    #: those that failed in eval, which kept none); None for any other summary.
    judged: int | None = None
    #: The model calls the rollouts made, and those of them whose reply stopped at
    #: ``max_tokens`` (finish reason ``length``): cut replies score low without a word.
    model_calls: int = 0
    cut_calls: int = 0
    #: The failed rollouts whose judge failed after the workflow finished: their responses
    #: are kept, which rescore judges again once the judge is fixed.
    judge_errors: int = 0

    def rows(self) -> list[tuple[str, str]]:
        """The summary table as ``(label, value)`` rows."""
        reward = f"mean {self.reward_mean:.4f}  std {self.reward_std:.4f}" if self.rollouts \
            else "none yet"
        if self.errors and self.finished_mean is not None:
            reward += (f"  (a failed rollout counts 0; {self.finished_mean:.4f} over the "
                       f"{self.rollouts - self.errors} that finished)")
        rows = [("rollouts", f"{self.rollouts} ({self.errors} errors)"), ("reward", reward)]
        rows += [(f"pass@{k}", f"{value:.4f}") for k, value in sorted(self.pass_at.items())]
        if self.latency:
            rows.append(("latency (s)", "  ".join(f"{k} {v:.3f}" for k, v in self.latency.items())))
        rows.append(("tokens", f"prompt {self.prompt_tokens}  completion "
                               f"{self.completion_tokens}"))
        if self.seconds is not None:
            rows.append(("wall time", f"{self.seconds:.2f} s"))
        rows += [("error", message) for message in self.error_messages]
        return rows

    def lines(self) -> list[str]:
        """The summary table, one row per line."""
        return [f"{name:<12} {value}" for name, value in self.rows()]

    def failures(self) -> str | None:
        """What a summary whose rollouts partly failed says about them (None when none
        or all failed): how many, how they count, and the first error."""
        if not 0 < self.errors < self.rollouts:
            return None
        return (f"{self.errors} of {self.rollouts} rollouts failed (each counted as reward 0); "
                f"the first error: {self.error_messages[0]}")

    def cut_short(self) -> str | None:
        """What a summary says of replies cut at ``max_tokens`` (None when none was)."""
        if not self.cut_calls:
            return None
        every = "all" if self.cut_calls == self.model_calls else str(self.cut_calls)
        return (f"{every} of the model's {self.model_calls} replies stopped at max_tokens "
                f"(finish_reason 'length'), cut short before the model ended it; if answers "
                f"need more room, raise model.max_tokens (--set model.max_tokens=N)")

    def print(self, out: Any = None) -> None:
        """Print the summary table (to stdout as it is at the call)."""
        print_lines(self.lines(), out)


def pass_at_k(samples: int, correct: int, k: int) -> float:
    """The unbiased pass@k estimate for one task: 1 - C(n-c, k) / C(n, k)."""
    if samples - correct < k:
        return 1.0
    return 1.0 - math.comb(samples - correct, k) / math.comb(samples, k)


def summarize(records: list[dict[str, Any]], repeat: int, threshold: float = 1.0) -> EvalSummary:
    """Summarise result lines (the last line for each task and repeat counts). A failed
    rollout counts as reward 0 and as not passed, as model selection ranks it: an agent
    that fails a task has not solved it."""
    latest = list({(r["task_index"], r["repeat"]): r for r in records}.values())
    rewards = [float(r["reward"]) if r.get("error") is None else 0.0 for r in latest]
    finished = [float(r["reward"]) for r in latest if r.get("error") is None]
    by_task: dict[int, list[bool]] = {}
    for record, reward in zip(latest, rewards):
        by_task.setdefault(record["task_index"], []).append(
            record.get("error") is None and reward >= threshold)
    pass_at = {}
    if repeat > 1:
        for k in sorted({1, repeat}):
            values = [pass_at_k(repeat, sum(got), k) for got in by_task.values()]
            pass_at[k] = sum(values) / len(values) if values else 0.0
    seconds = sorted(float(r["seconds"]) for r in latest if r.get("seconds") is not None)
    latency = {}
    if seconds:
        latency = {f"p{q}": seconds[min(len(seconds) - 1, int(len(seconds) * q / 100))]
                   for q in (50, 90, 99)}
    errors = [r["error"] for r in latest if r.get("error") is not None]
    calls = [call for r in latest if isinstance(r.get("messages"), list)
             for call in r["messages"] if isinstance(call, dict)]
    distinct = tuple(dict.fromkeys(e.splitlines()[0] for e in errors))[:3]
    return EvalSummary(
        rollouts=len(latest), errors=len(errors),
        reward_mean=statistics.fmean(rewards) if rewards else float("nan"),
        reward_std=statistics.pstdev(rewards) if rewards else float("nan"),
        finished_mean=statistics.fmean(finished) if finished else None,
        pass_at=pass_at, latency=latency,
        prompt_tokens=sum(int(r.get("prompt_tokens") or 0) for r in latest),
        completion_tokens=sum(int(r.get("completion_tokens") or 0) for r in latest),
        error_messages=distinct, model_calls=len(calls),
        cut_calls=sum(call.get("finish_reason") == "length" for call in calls),
        judge_errors=sum(r.get("error") is not None and r.get("failed_in") == "judge"
                         for r in latest),
    )  # fmt: skip


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def result_problem(record: Any) -> str | None:
    """What keeps one parsed line of a results file from being a tunedsl result (the reason,
    with the fix), or None: every reader of results (``eval --resume``, ``rescore``,
    ``view``) checks each line so, and summing or showing them cannot fail later."""
    if not isinstance(record, dict) or not {"task_index", "repeat"} <= record.keys():
        return _not_a_result(record)
    from ..rollout.run import shown_value

    wrong = [(key, "a whole number >= 0") for key in ("task_index", "repeat")
             if not is_count(record[key])]
    error = record.get("error")
    if error is not None and not isinstance(error, str):
        wrong.append(("error", "text or null"))
    if error is None and not _number(record.get("reward")):
        wrong.append(("reward", "a finite number (a result without an error has one)"))
    wrong += [(key, "a finite number or null") for key in ("seconds", "prompt_tokens",
                                                     "completion_tokens")
              if record.get(key) is not None and not _number(record[key])]
    if record.get("eval_settings") is not None and not isinstance(record["eval_settings"], dict):
        wrong.append(("eval_settings", "a mapping"))
    if not wrong:
        return None
    key, need = wrong[0]
    shown = ("missing" if key not in record else "null" if record[key] is None
             else shown_value(record[key]))  # as JSON names it
    return f"not a tunedsl result: its {key} is {shown}, not {need}; fix or delete that line"


def _not_a_result(record: Any) -> str:
    """Why a line without ``task_index`` and ``repeat`` is no result: what it is, when it
    is a line of another file of tunedsl's."""
    if isinstance(record, dict) and record.get("kind") in ("start", "reflection",
                                                           "candidate"):
        return ("a line of a tune-prompt candidates file (tune-prompt --resume reads it), "
                "not an eval result; give a results file tunedsl eval wrote")
    if isinstance(record, dict) and {"step", "calls"} <= record.keys():
        return ("a line of a run's rollouts.jsonl (scored as they trained: tunedsl view shows "
                "its run directory), not an eval result; give a results file tunedsl eval "
                "wrote")
    if isinstance(record, dict) and "step" in record and all(
            isinstance(value, (int, float)) for value in record.values()):
        return ("a line of a run's metrics.jsonl (tunedsl view shows its run directory, "
                "curves and all), not an eval result; give a results file tunedsl eval wrote")
    return ("not a tunedsl result (it needs task_index and repeat); was this file written "
            "by tunedsl eval?")


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Read a results file; a bad line is an error naming its number."""
    records = []
    try:
        handle = open(path, "rb")  # bytes: a line that is not UTF-8 is named, as any bad one
    except OSError as exc:
        from ..access import looping_link_problem, permission_fix

        loop = looping_link_problem(path)
        if loop is not None:  # ("Too many levels of symbolic links": sweep 49 B-W6)
            raise DatasetError(f"{path}: {loop}; fix the link, or give the results file "
                               f"itself") from None
        fix = permission_fix(exc, path)
        raise DatasetError(f"{path}: cannot read the results file: {exc.strerror}"
                           + (f"; {fix}" if fix else "")) from None
    from ..data.json_files import json_lines

    one = OneEvaluation(str(path))
    with handle:
        try:
            for number, record in json_lines(handle, str(path)):
                one.check(number, record)
                records.append(record)
        except DatasetError as exc:
            from ..runs.writing import torn_last_line

            if torn_last_line(path) is None:
                raise
            last = Path(path).read_bytes().count(b"\n") + 1
            if not str(exc).startswith(f"{path}:{last}: not a JSON line"):
                raise
            raise DatasetError(  # (what kill -9 of eval leaves)
                f"{path}:{last}: the last line was cut short (a command stopped while writing "
                f"it); continue that evaluation with --resume, which drops it and runs its "
                f"rollout again") from None
    return records


class OneEvaluation:
    """The check every reader of a results file makes of each line: a tunedsl result
    (`result_problem`), made with the same eval settings as the file's first line that
    keeps them (two files joined, or an edit, would mix two evaluations in one summary)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.first: tuple[int, Any] | None = None  # the first settings kept, and their line

    def check(self, number: int, record: Any) -> None:
        """Raise a `DatasetError` naming ``path:number`` when the line is not one of this
        evaluation's results."""
        problem = result_problem(record)
        if problem is not None:
            raise DatasetError(f"{self.path}:{number}: {problem}")
        settings = record.get("eval_settings")
        if settings is None:
            return
        if self.first is None:
            self.first = (number, settings)
        elif _comparable(settings) != _comparable(self.first[1]):
            raise DatasetError(f"{self.path}:{number}: its eval_settings differ from line "
                               f"{self.first[0]}'s, so the file mixes two evaluations and a "
                               f"summary of it would mix them; keep one evaluation's lines "
                               f"per file")


def _record(index: int, repeat: int, task: Mapping[str, Any], model: Any, started: float,
            result: Any = None, failure: RolloutError | None = None) -> dict[str, Any]:
    calls = list(getattr(model, "calls", ()))
    # A judge that failed after the workflow finished: its response and metrics are kept
    # (the model's replies were lost with the judge), for rescore to judge again.
    response, own = (result.response, result.workflow_metrics) if result is not None else \
        failure.finished_workflow if failure is not None and failure.finished_workflow else \
        (None, {})

    return {
        "task_index": index, "repeat": repeat, "task": dict(task),
        "messages": [call.to_json() for call in calls],
        **encode_response(response),
        "reward": result.reward if result is not None else None,
        "metrics": dict(result.metrics) if result is not None else {},
        # (the workflow's alone, which rescore keeps as it replaces the judge's)
        "workflow_metrics": dict(own),
        "turns": turns_json(result.turns) if result is not None else [],
        "error": str(failure) if failure is not None else None,
        # "judge": the workflow finished and its response is kept (rescore judges it again)
        "failed_in": failure.stage if failure is not None else None,
        "traceback": failure.user_traceback if failure is not None else None,
        "output": result.output if result is not None else
        failure.output if failure is not None else None,
        "seconds": round(time.perf_counter() - started, 6),
        "prompt_tokens": sum(c.prompt_tokens for c in calls),
        "completion_tokens": sum(c.completion_tokens for c in calls),
    }  # fmt: skip


async def scored_record(agent: Agent, task: Mapping[str, Any], index: int, repeat: int,
                        reached: Reached, *, timeout: float,
                        watchdog: Watchdog | None) -> dict[str, Any]:
    """One bounded rollout of ``task`` as the results line eval writes (a failed rollout is a
    line with its error and traceback, never an exception): eval and prompt tuning share it.
    A ``@group_judge`` scores it as a group of one (prompt tuning runs one rollout a task)."""
    if is_group_judge(agent.judge):
        [record] = await scored_group_records(agent, task, index, [repeat], reached,
                                              timeout=timeout, watchdog=watchdog)
        return record
    chat, started = reached.model(), time.perf_counter()
    helpers = {name: make() for name, make in reached.auxiliary.items()}
    try:
        result = await run_bounded_rollout(agent, task, chat, helpers, seconds=timeout,
                                           watchdog=watchdog, ends_model=True)
        return _record(index, repeat, task, chat, started, result)
    except RolloutError as error:
        return _record(index, repeat, task, chat, started, failure=error)


async def scored_group_records(agent: Agent, task: Mapping[str, Any], index: int,
                               repeats: list[int], reached: Reached, *, timeout: float,
                               watchdog: Watchdog | None) -> list[dict[str, Any]]:
    """The ``repeats`` of ``task`` side by side, scored together by the experiment's
    ``@group_judge`` (`roll_out_group`), as the results lines eval writes."""
    chats, started = [reached.model() for _ in repeats], time.perf_counter()

    async def roll_out(member: int) -> Any:
        helpers = {name: make() for name, make in reached.auxiliary.items()}
        return await run_bounded_rollout(agent, task, chats[member], helpers, seconds=timeout,
                                         watchdog=watchdog, ends_model=True)

    judges = {name: make() for name, make in reached.auxiliary.items()}
    outcomes = await roll_out_group(roll_out, len(repeats), agent, task, judges,
                                    seconds=timeout, watchdog=watchdog)
    return [_record(index, repeat, task, chat, started, failure=outcome)
            if isinstance(outcome, RolloutError) else
            _record(index, repeat, task, chat, started, outcome)
            for repeat, chat, outcome in zip(repeats, chats, outcomes)]


class _Interrupted(Exception):
    """A KeyboardInterrupt raised in an eval worker (by Ctrl-C, or by the user's code),
    carried to `evaluate` as an exception: as a BaseException it leaves asyncio's event loop
    past the task that raised it, whose exception asyncio then logs as never retrieved."""


async def _evaluate(agent: Agent, rows: list[dict[str, Any]],
                    work: Iterator[tuple[int, list[int]]], workers: int, reached: Reached,
                    timeout: float, write: Callable[[dict[str, Any]], None]) -> None:
    """Run the ``work`` (task index, its repeats to run) with ``workers`` in flight, each
    record to ``write`` as it finishes: one rollout at a time per worker, or with a
    ``@group_judge`` a task's repeats side by side, written once they are judged."""
    watchdog = Watchdog(asyncio.get_running_loop())
    grouped = is_group_judge(agent.judge)

    async def worker() -> None:
        try:
            for index, repeats in work:  # one shared iterator: each item is taken once
                if grouped:
                    for record in await scored_group_records(
                            agent, rows[index], index, repeats, reached, timeout=timeout,
                            watchdog=watchdog):
                        write(record)
                    continue
                [repeat] = repeats
                write(await scored_record(agent, rows[index], index, repeat, reached,
                                          timeout=timeout, watchdog=watchdog))
        except KeyboardInterrupt:
            raise _Interrupted from None

    with watchdog:
        await all_or_none(worker() for _ in range(workers))


def _check_same_settings(path: Path, earlier: list[dict[str, Any]],
                         settings: Mapping[str, Any], key: str = "eval_settings",
                         option: str = "output", what: str = "evaluations",
                         digests: str | None = None) -> None:
    """``--resume`` continues an evaluation (or a tuning run, whose lines keep their settings
    under another ``key``) only with the settings that began it. ``digests``: the settings
    key holding the params' digests (default `PARAMS_KEY`), said as ``params.NAME`` (a
    tuning keeps the names it tunes under ``params``, the digests of the others under its
    own key)."""
    before = next((r[key] for r in earlier if key in r), None)
    if before is None:
        return  # written before tunedsl kept its settings: nothing to compare
    if not isinstance(before, dict):
        raise ConfigError(f"{_resuming(path)}: its {key} is {described(before)}, not the "
                          f"settings object tunedsl writes; the file was edited, so a resume "
                          f"cannot tell what it continues: start a new file")
    changed = []
    differ = differing(before, settings)
    if "limit" in differ or "split" in differ:  # the tasks changed with them: said once
        differ = [setting for setting in differ if setting != TASKS_KEY]
    # A key this run keeps that the file's settings lack was removed by hand (one whose
    # value is None here too differed in nothing, and lines with it were appended).
    removed = sorted(setting for setting in settings if setting not in before)
    for setting in differ:
        was, now = before.get(setting), settings.get(setting)
        if setting in removed:
            continue  # said below, unless a setting changed (the first thing to fix)
        elif setting == TASKS_KEY:
            changed.append(f"the tasks (their digest {was} -> {now}: the dataset's rows "
                           f"changed)")
        elif isinstance(was, dict) and isinstance(now, dict):  # params, sampling: by entry
            for name in sorted(set(was) | set(now)):
                if was.get(name) == now.get(name):
                    continue
                if setting == (digests or PARAMS_KEY):  # kept as digests of their values
                    changed.append(f"{PARAMS_KEY}.{name} (its digest {was.get(name)} -> "
                                   f"{now.get(name)})")
                else:
                    changed.append(f"{setting}.{name} {was.get(name)!r} -> {now.get(name)!r}"
                                   f"{CODE_CHANGE if setting == FUNCTIONS_KEY else ''}")
        else:
            changed.append(f"{setting} {was!r} -> {now!r}")
    if changed:
        raise ConfigError(f"{_resuming(path)}: its results were made with other settings "
                          f"({'; '.join(changed)}); merging would mix two {what}, so "
                          f"resume with the same options or write to another "
                          f"{spelled(option)} file")
    if removed:
        raise ConfigError(f"{_resuming(path)}: its {key} keep no {', '.join(removed)} (tunedsl "
                          f"writes them all), so a resume cannot tell whether it continues "
                          f"the same {what[:-1]}; the file was edited: write to another "
                          f"{spelled(option)} file")


def _resuming(path: Path) -> str:
    """How a message about resuming ``path`` begins."""
    return said(f"--resume {path}", f"resuming {path}")


def differing(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The settings keys whose values differ, sorted; a key tunedsl began keeping later
    (`_NEWER_KEYS`) is compared only where ``after`` (what this run would keep) has it:
    model selection checks its files before it reads the rows. One missing from ``before``
    (a file's) differs: it was removed by hand."""
    keys = set(before) | set(after)
    keys -= {key for key in _NEWER_KEYS if key not in after}
    return sorted(key for key in keys
                  if _comparable(before.get(key), key) != _comparable(after.get(key), key))


def _comparable(value: Any, key: str = "") -> Any:
    """A setting as a resume compares it: an endpoint's URL without a trailing ``/`` (the
    same endpoint either way; a resume written with one was refused as another), a
    checkpoint as the folder it names (``ckpt/``, ``./ckpt`` and its absolute path alike)."""
    if key == "checkpoint" and isinstance(value, str):
        return os.path.realpath(value)
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        return value.rstrip("/")
    if isinstance(value, dict):
        return {name: _comparable(item, name) for name, item in value.items()}
    if isinstance(value, list):
        return [_comparable(item) for item in value]
    return value


def refuse_unless_a_plain_file(path: Path, option: str = "output") -> None:
    """A results file named with ``option`` must be a plain file: not a folder (which would
    read as a file that "already holds results"), a device, or a compressed file's name."""
    if path.is_dir():
        # (a results file may go in the folder; a candidates file in a folder of eval
        # results, or of a model selection, would be mistaken for one of them)
        example = path / "results.jsonl" if option == "output" else \
            Path(PROMPTS_DIR, f"{option}.jsonl")
        raise ConfigError(f"{given(option, path)}: that is a folder; give a file, e.g. "
                          f"{example}")
    if path.exists() and not path.is_file():  # /dev/null, a pipe: results read back vanish
        raise ConfigError(f"{given(option, path)}: not a regular file (a device or a pipe), "
                          f"which could not be read back to summarise or resume; give a file")
    refuse_a_compressed_name(path, given(option, path), "plain JSON Lines", "results.jsonl")



def open_output(path: Path, mode: str, label: str = "output",
                then: str | None = None) -> JsonLines:
    """Open a results file (`JsonLines`: each line flushed as it is written), before any
    work is done, or say in one line why it cannot be written (naming it as ``label``, an
    option's key in `wording.OPTIONS`, named it); ``then``: how to go on when a later line
    cannot be written (default: make room and resume)."""
    if then is None:
        then = (f"make room (or fix the folder) and "
                f"{said('run the same command with', 'call again with')} "
                f"{option('resume')} to go on")
    return JsonLines(path, label=given(label, path), then=then, mode=mode)


#: The settings key of the digest of the rows a results file evaluated (`tasks_digest`).
TASKS_KEY = "tasks"


def tasks_digest(rows: list[dict[str, Any]]) -> str:
    """A digest of the task rows, in order: a resume over rows that changed (the dataset
    edited, another split behind the same name) would put other tasks under the same
    ``task_index``."""
    return digest(rows)


#: The settings keys of what the experiment gives every rollout (`scoring_settings`).
PARAMS_KEY, SAMPLING_KEY = "params", "sampling"
#: Keys older results files lack: compared only where both sides have them.
#: The settings key of the experiment's name, and of its workflow's and judge's code (each
#: by its name and a digest of its source): results scored by another experiment or another
#: judge are not results of this one.
EXPERIMENT_KEY, FUNCTIONS_KEY = "experiment", "functions"
#: What a changed code digest may mean beyond an edit of the function (said after it): the
#: digest covers its file, the project's files imported from it, and the environment
#: variables they name (`tunedsl.rollout.code.code_digest`).
CODE_CHANGE = (" (its code: its file, a project file imported from it, an environment "
               "variable they read, or a data file they read by name)")
#: The settings key of the rollouts' time limit: a rollout that timed out under one may
#: finish under another.
TIMEOUT_KEY = "rollout_timeout"
#: The settings key of a local checkpoint's weights (`tunedsl.models.folder.weights_identity`).
WEIGHTS_KEY = "checkpoint_weights"
_NEWER_KEYS = (TASKS_KEY, PARAMS_KEY, SAMPLING_KEY, EXPERIMENT_KEY, FUNCTIONS_KEY, TIMEOUT_KEY,
               WEIGHTS_KEY)


def scoring_settings(graph: ExperimentGraph,
                     sampling: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What of the experiment changes every rollout's score besides the model: its params
    (each by a digest of its value, so a long prompt stays short), the model's sampling
    settings (``sampling``, those the model was asked with of its own, winning), the
    workflow's and judge's code and the rollouts' time limit. A resume with other ones
    would mix two evaluations."""
    from ..dsl.chat import SAMPLING_KEYS

    agent = Agent.from_graph(graph)
    functions = {"workflow": agent.workflow, "judge": agent.judge}
    return {PARAMS_KEY: {name: digest(value) for name, value in graph.params.items()},
            SAMPLING_KEY: {**{key: getattr(graph.model, key)
                              for key in (*SAMPLING_KEYS, "enable_thinking")},
                           **(sampling or {})},
            EXPERIMENT_KEY: graph.name, TIMEOUT_KEY: graph.rollout_timeout,
            FUNCTIONS_KEY: {role: code_digest(fn) for role, fn in functions.items()
                            if fn is not None}}


def run_settings(scope: EvalScope, settings: Mapping[str, Any] | None,
                 graph: ExperimentGraph | None = None) -> dict[str, Any]:
    """The settings every line of a results file keeps (see `evaluate`)."""
    split = scope.split
    own = None if graph is None else graph.eval_dataset or graph.train_dataset
    if own is not None and split == own.split:  # the dataset's own split, asked by name:
        split = None  # the same evaluation as without --split (sweep 47 A-W7)
    kept = {"split": split, "limit": scope.limit, "repeat": scope.repeat,
            **(settings or {})}
    if graph is not None:
        # a candidate of model selection asked with sampling settings of its own: those win
        kept.update(scoring_settings(graph, kept.get(SAMPLING_KEY)))
    return kept


def other_kind(path: Path, wanted: str) -> str | None:
    """What a non-empty JSON Lines ``path`` holds when it is not a file of the ``wanted``
    kind (``"results"`` of eval, ``"candidates"`` of tune-prompt), for a message that
    refuses it (``a tune-prompt candidates file``); None when it is one, or unreadable
    (its reader names what is wrong)."""
    found = jsonl_kind(path)
    if found is None:
        return None
    kind, head = found
    if kind == wanted:
        return None
    return JSONL_KINDS.get(kind or "", f"something else (its first line: {head[:60]!r})")


def refuse_another_kind(path: Path, wanted: str, option: str) -> None:
    """Refuse ``path`` (given as ``option``) when it is a non-empty file of another kind
    than ``wanted`` (see `other_kind`): resuming it or refusing it as "already holds
    results" would both mislead."""
    if path.is_file() and path.stat().st_size:
        other = other_kind(path, wanted)
        if other is not None:
            shown = {"results": "eval results", "candidates": "a candidates file"}[wanted]
            raise ConfigError(f"{given(option, path)} holds {other}, not {shown}; tunedsl "
                              f"never writes over it, so give another file")


def prior_results(output: Path, resume: bool, settings: Mapping[str, Any],
                  rows: list[dict[str, Any]] | None = None, *,
                  grouped: bool = False) -> set[tuple[int, int]]:
    """The ``(task_index, repeat)`` rollouts ``output`` already holds without an error (with
    ``resume``), after refusing a folder, a file made with other settings or holding a
    rollout that is none of the ``rows`` x ``repeat`` of this evaluation (when the ``rows``
    are known: each line must hold its row as the task it ran), or, without ``resume``, a
    file that holds results. Model selection checks every candidate's file so before it
    runs any rollout (and `evaluate` again with the rows). A rollout that succeeded is never
    run again, unless ``grouped`` (a group judge runs a task's repeats again together), so a
    line after it for the same rollout is an edit (two files joined)."""
    refuse_unless_a_plain_file(output)
    refuse_another_kind(output, "results", "output")
    if resume and output.exists():
        from ..runs.writing import drop_torn_last_line

        drop_torn_last_line(output, option("output", output))  # (what kill -9 leaves)
        earlier = read_results(output)
        _refuse_lines_without_settings(output, earlier)
        _check_same_settings(output, earlier, settings)
        tasks = None if rows is None else len(rows)
        repeat = settings["repeat"]
        stray = next((r for r in earlier if not 0 <= r["repeat"] < repeat
                      or (tasks is not None and not 0 <= r["task_index"] < tasks)), None)
        if stray is not None:
            raise ConfigError(f"{_resuming(output)}: it holds task_index "
                              f"{stray['task_index']}, repeat {stray['repeat']}, which is no "
                              f"rollout of this evaluation "
                              f"({tasks if tasks is not None else 'its'} tasks x {repeat} "
                              f"repeats); the file was edited, so resume cannot trust it: "
                              f"write to another {spelled('output')} file")
        if rows is not None:
            _refuse_other_tasks(output, earlier, rows)
        if not grouped:
            _refuse_rollouts_run_twice(output, earlier)
        return {(r["task_index"], r["repeat"]) for r in earlier if r.get("error") is None}
    if output.exists() and output.stat().st_size:
        from ..runs.writing import refuse_if_being_written

        refuse_if_being_written(output, option("output", output))
        raise ConfigError(f"{option('output', output)} already holds results; add "
                          f"{option('resume')} to continue it, or choose another file")
    return set()


def _refuse_lines_without_settings(path: Path, earlier: list[dict[str, Any]]) -> None:
    """Every line tunedsl writes keeps the settings that made it: one without them was
    edited, and a resume could not tell what it continues."""
    bare = next((r for r in earlier if not isinstance(r.get("eval_settings"), dict)), None)
    if bare is not None:
        raise ConfigError(f"{_resuming(path)}: its result for task_index "
                          f"{bare['task_index']}, repeat {bare['repeat']} keeps no "
                          f"eval_settings, so resume cannot tell what made it; the file was "
                          f"edited: write to another {spelled('output')} file")


def _refuse_rollouts_run_twice(path: Path, earlier: list[dict[str, Any]]) -> None:
    """A rollout that succeeded is not run again: a later line for it was added by hand,
    and the summary would count one of the two without a word."""
    succeeded: set[tuple[int, int]] = set()
    for record in earlier:
        key = (record["task_index"], record["repeat"])
        if key in succeeded:
            raise ConfigError(f"{_resuming(path)}: it holds task_index {key[0]}, repeat "
                              f"{key[1]} again after its result; the file was edited (or two "
                              f"joined), so resume cannot tell which to keep: write to "
                              f"another {spelled('output')} file")
        if record.get("error") is None:
            succeeded.add(key)


def _refuse_other_tasks(path: Path, earlier: list[dict[str, Any]],
                        rows: list[dict[str, Any]]) -> None:
    """Each line holds the task it ran: one that is not its ``task_index``'s row (the line
    edited, or the rows changed under a kept digest) would be counted as that task's."""
    written: dict[int, Any] = {}  # each row as its line holds it (key order aside)
    for record in earlier:
        index = record["task_index"]
        if index not in written:
            written[index] = as_written(rows[index])
        if "task" not in record:
            raise ConfigError(f"{_resuming(path)}: its result for task_index {index}, repeat "
                              f"{record['repeat']} holds no task; the file was edited, so "
                              f"resume cannot tell which task it ran: write to another "
                              f"{spelled('output')} file")
        if record["task"] != written[index]:
            raise ConfigError(f"{_resuming(path)}: its result for task_index {index}, repeat "
                              f"{record['repeat']} holds another task than row {index} of "
                              f"the dataset; the file was edited, so resume cannot trust "
                              f"it: write to another {spelled('output')} file")


def eval_rows(graph: ExperimentGraph, scope: EvalScope) -> list[dict[str, Any]]:
    """The tasks an evaluation of ``scope`` runs (its eval dataset, else its training data),
    after refusing what check refuses of the rows the workflow and judge read."""
    from ..checks.preflight import check_dataset
    from ..data.datasets import rows as read_rows

    dataset = graph.eval_dataset or graph.train_dataset
    section = "eval_dataset" if graph.eval_dataset is not None else "train_dataset"
    check_dataset(graph, section, attrs.evolve(dataset, split=scope.split or dataset.split),
                  training=False, limit=scope.limit)
    rows = list(read_rows(dataset, scope.split, label=section, limit=scope.limit))
    if not rows:
        raise DatasetError(f"{section}: {dataset.path} (split "
                           f"{scope.split or dataset.split!r}) has no rows to evaluate")
    return rows


def evaluate(graph: ExperimentGraph, reached: Reached, *, output: str | Path,
             scope: EvalScope = EvalScope(), execution: Execution = Execution()
             ) -> EvalSummary:
    """Run the experiment's workflow and judge over its eval tasks and summarise.

    Args:
        graph: The experiment; its eval dataset (else its train dataset) gives the tasks.
        reached: The models the rollouts use; its ``settings`` (what produced these
            results: model, endpoint) are kept in every line with the scope's, and
            ``execution.resume`` refuses a file made with other settings, since merging
            would mix two evaluations. Its clients are closed at the end.
        output: The JSONL results file (appended to with ``execution.resume``, which skips
            the rollouts it already holds without an error).
        scope: The split, the first tasks and the rollouts per task.
        execution: Rollouts in flight, resume, and the progress bar.
    """
    missing = sorted(set(graph.auxiliary_models) - set(reached.auxiliary))
    if missing:
        raise ConfigError(f"the experiment uses auxiliary model(s) {', '.join(missing)}: "
                          f"{missing_auxiliary_fix()}")
    repeat = scope.repeat
    rows = eval_rows(graph, scope)
    output = Path(output)
    written = output.absolute()  # read back after the rollouts, whose code may chdir
    settings = {**run_settings(scope, reached.settings, graph), TASKS_KEY: tasks_digest(rows)}
    agent = Agent.from_graph(graph)
    done = prior_results(output, execution.resume, settings, rows,
                         grouped=is_group_judge(agent.judge))
    # Pending rollouts are yielded as workers take them, and no more workers start than there
    # are rollouts: a huge --repeat or --concurrency costs nothing up front. A group judge
    # scores a task's repeats together: a task not whole in the file runs them all again
    # (its new lines replace the old, as a failed rollout's do).
    pending: Iterator[tuple[int, list[int]]]
    if is_group_judge(agent.judge):
        whole = {i for i in range(len(rows)) if all((i, k) in done for k in range(repeat))}
        pending = ((i, list(range(repeat))) for i in range(len(rows)) if i not in whole)
        count = (len(rows) - len(whole)) * repeat
        workers = max(1, min(execution.concurrency // repeat, len(rows) - len(whole)))
    else:
        pending = ((i, [k]) for i in range(len(rows)) for k in range(repeat)
                   if (i, k) not in done)
        count = len(rows) * repeat - sum(i < len(rows) and k < repeat for i, k in done)
        workers = max(1, min(execution.concurrency, count))
    from tqdm.auto import tqdm

    out = open_output(output, "a")
    bar = tqdm(total=count, disable=not execution.progress, unit="rollout", file=sys.stderr)
    seconds = None

    def write(record: dict[str, Any]) -> None:
        record["eval_settings"] = dict(settings)
        out.write(record)
        bar.update(1)

    async def main() -> None:
        nonlocal seconds
        started = time.perf_counter()
        try:
            with out:
                await _evaluate(agent, rows, pending, workers, reached,
                                float(graph.rollout_timeout), write)
            seconds = time.perf_counter() - started
        finally:
            await reached.close()

    def kept(go_on: bool = True) -> str:
        """What the results file keeps, said as an evaluation that stopped says it; of an
        empty one (a default file is then removed at exit), that nothing was kept."""
        try:
            empty = written.stat().st_size == 0
        except OSError:
            empty = True
        if empty:  # (it named the default file it was about to remove; sweep 50 B-W1)
            return (f"no rollout had finished, so nothing was kept"
                    f"{': run the same command to start again' if go_on else ''}")
        return (f"{output} keeps every rollout that finished" +
                (f": {said('run the same command with', 'call again with')} "
                 f"{options(('output', output), 'resume')} to go on" if go_on else ""))

    try:
        run_rollouts(main())
        # (a Ctrl-C as the results are read back is said as one during the rollouts: it
        # was a bare "interrupted")
        return attrs.evolve(summarize(read_results(written), repeat), seconds=seconds)
    except ExitInCallback as stopped:
        raise stopped.then(kept()) from None
    except asyncio.CancelledError:  # no Ctrl-C (asyncio.run turns that into one)
        raise RunError(f"{CANCELLED_INSIDE}; {kept(go_on=False)}") from None
    except RuntimeError as error:
        if not stopped_the_loop(error):
            raise
        raise RunError(f"{LOOP_STOPPED}; {kept(go_on=False)}") from None
    except (KeyboardInterrupt, _Interrupted):  # Ctrl-C (or a workflow that raised it)
        raise RunInterrupted(f"interrupted; {kept()}") from None
    finally:
        bar.close()
