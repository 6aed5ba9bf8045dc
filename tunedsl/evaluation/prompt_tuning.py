"""Prompt tuning: ``tunedsl tune-prompt`` and `tunedsl.tune_prompt`.

The text components tuned are experiment parameters the workflow already reads
(``params = {"system_prompt": "..."}``), so a tuned prompt needs no code change: it is a
``[params]`` TOML file that ``run`` and ``eval`` apply with ``--settings``.

The optimiser is GEPA (the ``gepa`` package): its adapter interface takes exactly what
tunedsl already has, a batch of scored rollouts (rewards, judge metrics, the recorded model
calls) and, from them, a reflective dataset for a reflection model to propose better text.
The training split proposes (minibatches the reflection model reads); the held-out split
(the eval dataset, else a seeded part of the training data) selects: every accepted
candidate is scored on all of it, and the best validation reward wins.

Rollouts go through `scored_record`, the same bounded rollout ``eval`` runs, concurrently on
one event loop held by the calling thread (its watchdog interrupts blocking workflow code,
Ctrl-C reaches it). GEPA is synchronous, so it runs in a worker thread and hands each batch
(and each reflection request) to that loop: no event loop per sample, unlike AgentScope's
``tune_prompt`` (``asyncio.run`` around each judgement).

The candidates file (JSON Lines) keeps every rollout as an eval results line (plus the
candidate and split it belongs to), every reflection exchange, and a ``candidate`` line with
the validation rewards of each candidate scored on the held-out split. ``--resume`` replays
it: GEPA is seeded, so given the same rollouts and reflections it asks for the same ones
again, which are answered from the file; only what the file lacks runs. A rollout that
failed is a failure with reward 0, replayed as such (the optimiser already chose by it), and
a failed reflection is replayed as a failure (GEPA skipped that proposal). What a run stopped
on before anything was chosen by it runs again: the failed validation rollouts of a starting
text that no candidate line follows (every one failed, or Ctrl-C came first), and the failed
reflections after the file's last answered one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import os
import random
import re
import statistics
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import attrs

from ..config.environment import ESCAPED_ENV
from ..data.json_text import digest, dumps, text_digest
from ..errors import ConfigError, DatasetError, RunError, RunInterrupted, did_you_mean
from ..models.reached import Reached
from ..rollout.loop import ExitInCallback, run_rollouts
from ..rollout.together import all_or_none
from ..runs.writing import refuse_unwritable, write_whole
from ..wording import default_output, given, option, options, print_lines, said, spelled
from .execution import Execution

if TYPE_CHECKING:
    from ..config.graph import ExperimentGraph

#: The share of the training data held out for selection when there is no eval dataset.
DEFAULT_VAL_FRACTION = 0.3
#: Training examples the reflection model reads per proposal (GEPA's minibatch).
DEFAULT_MINIBATCH = 3
#: Reflections failing in a row after which tuning stops (every proposal would fail too).
REFLECTION_FAILURES_TO_STOP = 3
#: The reward a candidate gets on an example whose rollout failed: a failure, not a skip.
FAILED_ROLLOUT_REWARD = 0.0
TRAIN, VAL = "train", "val"
_KINDS = ("start", "rollout", "reflection", "candidate")
_log = logging.getLogger("tunedsl.prompt_tuning")


def scoring_minibatch(budget: int, val_size: int) -> int:
    """The largest minibatch with which ``budget`` can score a proposal: the start on the
    validation split, the parent and the proposal on a minibatch each, then the proposal
    on the validation split (0: none can)."""
    return max(0, (budget - 2 * val_size) // 2)


def default_budget(val_size: int) -> int:
    """Rollouts spent when no budget is given: the starting prompt's validation plus room
    for about five accepted candidates (each scored on the whole validation split) and the
    minibatches that find them."""
    return max(100, 6 * val_size + 60)


def candidate_id(candidate: Mapping[str, str]) -> str:
    """A short, stable name for a candidate's text (its params' values)."""
    return digest(dict(sorted(candidate.items())), 12)


class _Stop(BaseException):
    """Ends GEPA's run from inside the adapter: the budget is spent, or ``error`` makes
    going on pointless. A BaseException, so no ``except Exception`` in GEPA's loop takes it
    for one failed proposal and goes on."""

    def __init__(self, error: Exception | None = None) -> None:
        super().__init__()
        self.error = error


class _Bridge:
    """Runs coroutines on the tuning's event loop for GEPA's thread, until `stop`.

    Ctrl-C cancels the event loop's task, not GEPA's thread: `stop` cancels what that thread
    waits for and makes its next call end GEPA's run, so the thread ends before the
    candidates file is closed (and a cancelled request is never recorded as a failure).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.lock = threading.Lock()
        self.stopped = False
        self.pending: set[concurrent.futures.Future[Any]] = set()

    def run(self, coroutine: Any) -> Any:
        """``coroutine``'s result, from GEPA's thread; `_Stop` once stopped."""
        with self.lock:
            if self.stopped:
                coroutine.close()
                raise _Stop()
            future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
            self.pending.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:  # an Exception: GEPA would go on
            raise _Stop() from None
        finally:
            with self.lock:
                self.pending.discard(future)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            for future in self.pending:
                future.cancel()


@attrs.frozen(eq=False)
class Example:
    """One row given to GEPA: which split it is from, its place there, the row."""

    split: str
    index: int
    row: Mapping[str, Any]


# ------------------------------------------------------------------------ checking input


def check_params(graph: ExperimentGraph, names: Sequence[str]) -> None:
    """Refuse, in one line, params that tuning could not change: none given, a name the
    experiment has no param for, or a value that is not text."""
    text = sorted(name for name, value in graph.params.items() if isinstance(value, str))
    if not names:
        raise ConfigError(f"give the text param(s) to tune with "
                          f"{said('--param NAME', 'params=[NAME, ...]')} (the experiment's "
                          f"text params: {', '.join(text) or 'none'}; set one in its params = "
                          f"{{...}})")
    for name in names:
        if name not in graph.params:
            raise ConfigError(f"{_param(name)}: the experiment has no param {name!r}"
                              f"{did_you_mean(name, graph.params)}, so the workflow cannot read "
                              f"it (its params: {', '.join(sorted(graph.params)) or 'none'}); "
                              f"add it to the class's params = {{...}}")
        value = graph.params[name]
        if not isinstance(value, str):
            from ..errors import described
            from ..rollout.run import shown_value

            raise ConfigError(f"{_param(name)}: its value "
                              f"{described(value, shown_value(value))} is not text; only text "
                              f"params can be tuned "
                              f"(text params: {', '.join(text) or 'none'})")
    # (a param the workflow and judge cannot take is refused with the graph: check_params_reach)


def _param(name: str) -> str:
    """A tuned param as the reader named it: ``--param NAME``, or ``params item 'NAME'``."""
    return said(f"--param {name}", f"params item {name!r}")


def split_rows(graph: ExperimentGraph, val_fraction: float | None,
               seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(train, val)`` rows: the training data and the eval dataset, or, without one, the
    training data with a seeded ``val_fraction`` (None: `DEFAULT_VAL_FRACTION`) of it held
    out."""
    from ..data.datasets import rows as read_rows

    if val_fraction is not None and not 0 < val_fraction < 1:
        raise ConfigError(f"{option('val_fraction', val_fraction)}: give a share between 0 "
                          f"and 1, e.g. 0.3")
    # (given at all, not only unlike the default: --val-fraction 0.3 was taken without a
    # word beside an eval_dataset, which 0.4 was refused for; sweep 50's known list)
    if graph.eval_dataset is not None and val_fraction is not None:
        raise ConfigError(f"{option('val_fraction', val_fraction)}: the experiment has an "
                          f"eval_dataset, whose rows are the validation set, so no share of the "
                          f"training data is held out; drop {option('val_fraction')}")
    from ..checks.preflight import check_dataset

    for section in ("train_dataset", "eval_dataset"):  # as check checks them, first
        if getattr(graph, section) is not None:
            check_dataset(graph, section, training=False)
    train = list(read_rows(graph.train_dataset, label="train_dataset"))
    if graph.eval_dataset is not None:
        val = list(read_rows(graph.eval_dataset, label="eval_dataset"))
        if not train or not val:
            empty = "train_dataset" if not train else "eval_dataset"
            raise DatasetError(f"{empty}: it has no rows; tuning needs rows to propose from "
                               f"(train_dataset) and to select by (eval_dataset)")
        return train, val
    if len(train) < 2:
        raise DatasetError(f"train_dataset: {len(train)} row(s); tuning without an "
                           f"eval_dataset holds part of it out to select by, so it needs at "
                           f"least 2 (or give an eval_dataset)")
    order = list(range(len(train)))
    random.Random(seed).shuffle(order)
    share = DEFAULT_VAL_FRACTION if val_fraction is None else val_fraction
    held = min(len(train) - 1, max(1, round(len(train) * share)))
    chosen = set(order[:held])
    return ([row for i, row in enumerate(train) if i not in chosen],
            [row for i, row in enumerate(train) if i in chosen])


def parse_reflection_model(spec: str, base_url: str | None) -> tuple[str, str]:
    """``NAME[@URL]`` as ``(name, url)``; without a URL, the task model's endpoint. Split
    as ``--model`` is (`select.split_model`: a dated name holding ``@`` stays a name)."""
    from ..dsl.records import query_problem
    from ..keys import without_keys
    from .select import split_model

    name, given = split_model(spec, spelled("reflection_model"))
    url = given or base_url or ""
    if not name:
        example = option("reflection_model", "Qwen/Qwen3-32B@http://localhost:8001/v1")
        raise ConfigError(f"{spelled('reflection_model')} {spec!r}: give NAME or NAME@URL, "
                          f"e.g. {example}")
    if not url:
        raise ConfigError(f"{spelled('reflection_model')} {spec}: give its endpoint as "
                          f"NAME@URL, e.g. {spec}@http://localhost:8001/v1 (there is no "
                          f"{said('--base-url', 'endpoint of model')} to share)")
    if given and (problem := query_problem(given, spelled("reflection_key"))):
        # (one check of an endpoint URL however it is given: a key in its path was kept
        # in the candidates file)
        raise ConfigError(f"{spelled('reflection_model')} {without_keys(spec)}: {problem}")
    return name, url


# ------------------------------------------------------------------- the candidates file


class Journal:
    """The candidates file: what it already holds (to replay on resume) and the lines added.

    Lines are written by the event loop's thread (rollouts) and GEPA's (reflections), so
    writing takes a lock. Each line is kept as it reads back from JSON, so a replayed run
    shows the reflection model exactly what the first one did. What the earlier run stopped
    on before the optimiser chose anything by it is not replayed (see the module's
    docstring): failed rollouts when no candidate was scored, trailing failed reflections.
    """

    def __init__(self, path: Path, *, resume: bool, start: dict[str, Any],
                 older: Mapping[str, Any] | None = None,
                 rows: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> None:
        """``start``: the start line of this run; ``older``: its ``tune_settings`` as tunedsl
        kept them before it kept what scores a rollout (see `_compared`), which a file
        written then is checked against; ``rows``: each split's rows, which a resumed
        rollout line must hold as its task."""
        from .evaluate import (
            _check_same_settings,
            open_output,
            refuse_another_kind,
            refuse_unless_a_plain_file,
        )

        self.path = path
        self.rollouts: dict[tuple[str, str, int, int], dict[str, Any]] = {}
        self.reflections: dict[tuple[str, int], dict[str, Any]] = {}
        self.scored: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        refuse_unless_a_plain_file(path, "candidates")
        refuse_another_kind(path, "candidates", "candidates")
        earlier: list[dict[str, Any]] = []
        if resume and path.exists():
            from ..runs.writing import drop_torn_last_line

            drop_torn_last_line(path, option("output", path))  # (what kill -9 leaves)
            earlier = read_candidates(path)
            if earlier and not any(line["kind"] == "start" for line in earlier):
                raise ConfigError(
                    f"{option('candidates', path)}: it has no start line (the line that "
                    f"records the "
                    f"settings a tuning began with), so a resume cannot tell whether it "
                    f"continues the same tuning; restore that line, or start a new file")
            _check_same_settings(path, earlier, _compared(earlier, start, older),
                                 key="tune_settings", option="candidates", what="tunings",
                                 digests=UNTUNED_KEY)
            _check_scores(path, earlier)
            _check_lines_hold_what_they_name(path, earlier, rows or {})
        elif path.exists() and path.stat().st_size:
            raise ConfigError(f"{option('candidates', path)} already holds a tuning run; add "
                              f"{option('resume')} to continue it, or choose another file")
        chosen = any(line["kind"] == "candidate" for line in earlier)
        unanswered: list[tuple[str, int]] = []
        for line in earlier:
            if line["kind"] == "rollout" and (chosen or line.get("error") is None):
                self.rollouts[rollout_key(line)] = line
            elif line["kind"] == "reflection":
                asked = (line["key"], line["occurrence"])
                self.reflections[asked] = line
                unanswered = [*unanswered, asked] if line.get("error") is not None else []
            elif line["kind"] == "candidate":
                self.scored.setdefault(line["candidate"], line)
        for key in unanswered:
            del self.reflections[key]
        self.out = open_output(path, "a", "candidates", then=f"make room (or fix the folder) "
                               f"and continue with {options(('candidates', path), 'resume')}")
        if not any(line["kind"] == "start" for line in earlier):
            self.write(start)

    def write(self, line: dict[str, Any]) -> dict[str, Any]:
        """Append ``line``; return it as it reads back."""
        with self.lock:
            text = self.out.write(line)
        return json.loads(text)

    def close(self) -> None:
        self.out.close()


#: The tune_settings key of the digests of the params not tuned (as eval keeps its params',
#: `evaluate.PARAMS_KEY`). Beside it tune_settings keeps the rest of what eval keeps of what
#: scores a rollout (`evaluate.scoring_settings`: the sampling settings, the experiment's
#: name, the workflow's and judge's code, the time limit, `evaluate.TIMEOUT_KEY`, whose
#: absence marks a start line written before tunedsl kept them).
UNTUNED_KEY = "untuned_params"


def _compared(earlier: list[dict[str, Any]], start: Mapping[str, Any],
              older: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The settings a resume of the lines ``earlier`` compares with theirs: this run's
    (``start``'s), or ``older`` for a file written before tunedsl kept what scores a
    rollout (its start line lacks `TIMEOUT_KEY`): what those were is not known, so they are
    not checked, and the rest is checked as it was then."""
    from .evaluate import TIMEOUT_KEY

    before = next((line.get("tune_settings") for line in earlier
                   if line["kind"] == "start"), None)
    if older is not None and isinstance(before, dict) and TIMEOUT_KEY not in before:
        return older
    return cast(Mapping[str, Any], start["tune_settings"])


def _check_scores(path: Path, lines: list[dict[str, Any]]) -> None:
    """Each candidate line of a file to resume scores what its validation rollouts in the
    file score: a resume believes the file's scores, so one edited by hand (or two runs
    mixed) is refused rather than crowned."""
    rollouts = {rollout_key(line): line for line in lines if line["kind"] == "rollout"}
    for line in lines:
        if line["kind"] != "candidate":
            continue
        cid: Any = line.get("candidate")
        recorded = line.get("val_reward")
        held = [rollouts.get((cid, VAL, index, 0)) for index in range(len(line.get(
            "val_rewards") or ()))]
        scores = [reward_of(record) for record in held if record is not None]
        if len(scores) != len(held) or not scores or not isinstance(recorded, (int, float)) \
                or not math.isclose(recorded, statistics.fmean(scores), abs_tol=1e-9):
            found = (f"{statistics.fmean(scores):.4f}" if scores and len(scores) == len(held)
                     else "rollouts it does not hold")
            raise ConfigError(
                f"{option('candidates', path)}: candidate {line.get('number')}'s val_reward "
                f"{recorded!r} is not what its validation rollouts in the file score "
                f"({found}); the file was edited or mixes two tunings, so it cannot be "
                f"resumed: start a new file")


def _check_lines_hold_what_they_name(path: Path, lines: list[dict[str, Any]],
                                     rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """A candidate line's params are those its id is the digest of, and a rollout line's
    task is its split's row at its task_index: a resume replays both, so one edited by
    hand (a prompt that was never validated, crowned the best) is refused."""
    from ..data.json_text import as_written

    for line in lines:
        if line["kind"] == "candidate":
            params = line.get("params")
            if not isinstance(params, dict) or not all(isinstance(v, str)
                                                       for v in params.values()) \
                    or candidate_id(params) != line["candidate"]:
                raise ConfigError(
                    f"{option('candidates', path)}: candidate {line.get('number')}'s params "
                    f"are not the texts its id {line['candidate']} was made from; the file "
                    f"was edited, so it cannot be resumed: start a new file")
        elif line["kind"] == "rollout" and line.get("split") in rows:
            split = rows[line["split"]]
            index = line["task_index"]
            if index >= len(split) or "task" not in line \
                    or line["task"] != as_written(dict(split[index])):
                raise ConfigError(
                    f"{option('candidates', path)}: its {line['split']} rollout of task_index "
                    f"{index} holds another task than that row; the file was edited, so it "
                    f"cannot be resumed: start a new file")


def rollout_key(line: Mapping[str, Any]) -> tuple[str, str, int, int]:
    """A rollout line's place: its candidate, split, task and occurrence (``repeat``)."""
    return line["candidate"], line["split"], line["task_index"], line["repeat"]


#: What a resume reads of each kind of line but rollouts (checked by `result_problem`),
#: and what each must be.
_FIELDS: dict[str, dict[str, tuple[Callable[[Any], bool], str]]] = {
    "reflection": {"key": (lambda v: isinstance(v, str), "text"),
                   "occurrence": (lambda v: isinstance(v, int) and not isinstance(v, bool),
                                  "a whole number")},
    "candidate": {"candidate": (lambda v: isinstance(v, str), "text"),
                  "params": (lambda v: isinstance(v, dict)
                             and all(isinstance(text, str) for text in v.values()),
                             "an object of text params"),
                  "val_reward": (lambda v: isinstance(v, (int, float))
                                 and not isinstance(v, bool), "a number")},
}


def read_candidates(path: str | Path) -> list[dict[str, Any]]:
    """Read a candidates file; a line that is not one of its kinds is an error naming it."""
    from ..data.json_files import json_lines

    try:
        handle = open(path, "rb")
    except OSError as exc:
        from ..access import permission_fix

        fix = permission_fix(exc, path)
        raise DatasetError(f"{path}: cannot read the candidates file: {exc.strerror}"
                           + (f"; {fix}" if fix else "")) from None
    lines = []
    with handle:
        for number, line in json_lines(handle, str(path)):
            check_candidates_line(path, number, line)
            lines.append(line)
    return lines


def is_candidates_line(line: Any) -> bool:
    """Whether ``line`` is of a kind a candidates file holds (whatever its other fields)."""
    return isinstance(line, dict) and line.get("kind") in _KINDS


def check_candidates_line(path: str | Path, number: int, line: Any) -> None:
    """Raise `DatasetError` naming ``path:number`` when ``line`` is not a candidates line
    (of one of its kinds, with that kind's fields)."""
    from .evaluate import result_problem

    kind = line.get("kind") if isinstance(line, dict) else None
    problem = (None if kind in _KINDS else
               "not a tunedsl candidates line (its kind is none of "
               f"{', '.join(_KINDS)}); was this file written by tunedsl tune-prompt?")
    if kind == "rollout":
        problem = result_problem(line) or next(
            (f"not a tunedsl candidates line: it lacks {key}" for key in
             ("candidate", "split") if not isinstance(line.get(key), str)), None)
    elif kind in _FIELDS:
        problem = next((f"not a tunedsl candidates line: its {key} is not {what}"
                        for key, (test, what) in _FIELDS[kind].items()
                        if not test(line.get(key))), None)
    if problem is not None:
        raise DatasetError(f"{path}:{number}: {problem}")


# ----------------------------------------------------------------------- GEPA's adapter


class _Progress:
    """Counts rollouts against the budget: a bar on stderr, a line per scored candidate."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, disable=not enabled, unit="rollout", file=sys.stderr,
                        desc="tuning")
        self.enabled = enabled

    def say(self, text: str) -> None:
        if self.enabled:
            self.bar.write(text, file=sys.stderr)


@attrs.frozen
class _Live:
    """The working parts of one tuning run the adapter writes and reports through."""

    journal: Journal
    bridge: _Bridge
    watchdog: Any
    progress: _Progress


class TunedslAdapter:
    """GEPA's adapter over tunedsl's rollouts: a candidate is a set of params' texts.

    ``evaluate`` runs the workflow and judge on a batch with the candidate's params (from
    the candidates file when it already holds that rollout), a failed rollout scoring
    `FAILED_ROLLOUT_REWARD`; ``make_reflective_dataset`` turns the rollouts into what the
    reflection model reads: the task, the model calls, the response, the reward with the
    judge's metrics, and the error of a failed rollout.
    """

    propose_new_texts = None  # GEPA's own proposer, with the reflection model

    def __init__(self, *, agent: Any, reached: Reached, live: _Live, timeout: float,
                 concurrency: int, val_size: int, budget: int,
                 perfect_reward: float = 1.0) -> None:
        self.agent, self.reached = agent, reached
        self.journal, self.bridge, self.watchdog = live.journal, live.bridge, live.watchdog
        self.timeout, self.concurrency, self.val_size = timeout, concurrency, val_size
        self.progress = live.progress
        self.occurrences: Counter[tuple[str, str, int]] = Counter()
        self.val_records: dict[str, dict[int, dict[str, Any]]] = {}
        self.budget, self.spent = budget, 0
        self.perfect_reward = perfect_reward
        self.perfect: dict[str, Any] | None = None  # the first candidate scoring it
        self.ran = self.reused = 0

    def _continue_with(self, *more: tuple[str, Any]) -> str:
        """The options that continue this tuning (its candidates file, resumed)."""
        return options(("candidates", self.journal.path), "resume", *more)

    # GEPA calls these from its own thread.
    def evaluate(self, batch: list[Example], candidate: dict[str, str],
                 capture_traces: bool = False) -> Any:
        from gepa.core.adapter import EvaluationBatch

        if self.spent + len(batch) > self.budget or self.perfect is not None:
            # GEPA checks its budget between proposals only; a hard stop here keeps to it
            # exactly (the candidates file, not GEPA's result, holds what was found). A
            # candidate with the perfect reward on every validation task cannot be beaten:
            # GEPA would go on sampling its minibatches, all perfect, proposing nothing.
            raise _Stop()
        self.spent += len(batch)
        cid = candidate_id(candidate)
        keys = []
        for example in batch:  # the n-th request of a rollout replays the file's n-th
            counted = (cid, example.split, example.index)
            keys.append((*counted, self.occurrences[counted]))
            self.occurrences[counted] += 1
        records = self.bridge.run(self._rollouts(candidate, cid, batch, keys))
        above = next((r for r in records if reward_of(r) > self.perfect_reward), None)
        if above is not None:
            raise _Stop(RunError(
                f"a rollout scored {reward_of(above):g}, above "
                f"{option('perfect_reward', self.perfect_reward)} (the reward no rollout can "
                f"beat: GEPA reflects on no minibatch scoring it, and tuning ends at a "
                f"candidate scoring it on every validation task); give the judge's best "
                f"reward: {self._continue_with()}"
                f"{said(' --perfect-reward R', ' with search=PromptSearch(perfect_reward=R)')}"
                f" continues"))
        for key, record in zip(keys, records):
            if key[1] == VAL and key[3] == 0:
                self.val_records.setdefault(cid, {})[key[2]] = record
        self._score(cid, candidate)
        scores = [reward_of(record) for record in records]
        return EvaluationBatch(outputs=records, scores=scores,
                               trajectories=records if capture_traces else None)

    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch: Any,
                                components_to_update: list[str]) -> dict[str, list[dict]]:
        examples = [reflective_example(record) for record in eval_batch.trajectories or ()]
        return {name: examples for name in components_to_update}

    def _score(self, cid: str, candidate: dict[str, str]) -> None:
        """Write a candidate's line once all its validation rollouts are in (a resumed run
        finds it in the file), and end tuning at the first to score the perfect reward."""
        held = self.val_records.get(cid, {})
        if len(held) < self.val_size:
            return
        line = self.journal.scored.get(cid) or self._write_score(cid, candidate, held)
        if line["val_reward"] >= self.perfect_reward and self.perfect is None:
            self.perfect = line
            self.progress.say(f"candidate {line['number']} scores "
                              f"{option('perfect_reward', self.perfect_reward)} on every "
                              f"validation task: tuning ends")

    def _write_score(self, cid: str, candidate: dict[str, str],
                     held: Mapping[int, dict[str, Any]]) -> dict[str, Any]:
        errors = sum(held[i].get("error") is not None for i in range(self.val_size))
        if not self.journal.scored and errors == self.val_size:
            # Every rollout of the starting prompt failed: an endpoint down, a broken
            # workflow; tuning on zeros would spend the budget learning nothing. No
            # candidate line: a resume runs these rollouts again (`Journal`).
            first = next(r["error"] for r in held.values())
            raise _Stop(RunError(f"every validation rollout of the starting prompt failed, so "
                                 f"tuning stopped; the first error: {first.splitlines()[0]}; "
                                 f"once that is fixed, {self._continue_with()} runs them "
                                 f"again"))
        rewards = [reward_of(held[i]) for i in range(self.val_size)]
        line = {"kind": "candidate", "candidate": cid, "params": dict(candidate),
                "val_reward": statistics.fmean(rewards), "val_rewards": rewards,
                "val_errors": errors, "number": len(self.journal.scored)}
        self.journal.scored[cid] = self.journal.write(line)
        best = max(c["val_reward"] for c in self.journal.scored.values())
        self.progress.say(f"candidate {line['number']} ({cid}): validation reward "
                          f"{line['val_reward']:.4f} (best {best:.4f})")
        self.progress.bar.set_postfix(best=f"{best:.4f}")
        return self.journal.scored[cid]

    async def _rollouts(self, candidate: dict[str, str], cid: str, batch: list[Example],
                        keys: list[tuple[str, str, int, int]]) -> list[dict[str, Any]]:
        from .evaluate import scored_record

        agent = attrs.evolve(self.agent, params={**self.agent.params, **candidate})
        records: list[dict[str, Any] | None] = [self.journal.rollouts.get(key) for key in keys]
        reused = sum(record is not None for record in records)
        self.reused += reused
        self.progress.bar.update(reused)
        work = iter([i for i, record in enumerate(records) if record is None])

        async def worker() -> None:
            for i in work:  # one shared iterator: each rollout is taken once
                example = batch[i]
                record = await scored_record(agent, example.row, example.index, keys[i][3],
                                             self.reached, timeout=self.timeout,
                                             watchdog=self.watchdog)
                records[i] = self.journal.write({"kind": "rollout", "candidate": cid,
                                                 "split": example.split, **record})
                self.ran += 1
                self.progress.bar.update(1)

        pending = len(batch) - reused
        await all_or_none(worker() for _ in range(max(0, min(self.concurrency, pending))))
        filled = [record for record in records if record is not None]
        assert len(filled) == len(records)  # every worker filled its slots
        return filled


def reward_of(record: Mapping[str, Any]) -> float:
    """A rollout line's score for the optimiser: its reward, or a failure's."""
    if record.get("error") is not None:
        return FAILED_ROLLOUT_REWARD
    return float(record["reward"])


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts: their text
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return f"{message.get('role', '?')}: {content if content is not None else ''}"


def reflective_example(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the reflection model reads of one rollout: the task, the conversation the
    workflow had (its last model call, which holds the earlier turns), the response, and
    feedback: the reward, the judge's metrics, the error of a failed rollout."""
    calls = record.get("messages") or []
    conversation = ""
    if calls:
        last = calls[-1]
        turns = [*last.get("messages", []), {"role": "assistant",
                                              "content": (last.get("response") or {})
                                              .get("content")}]
        conversation = "\n".join(_message_text(m) for m in turns)
    response = record.get("response_text")
    if response is None:
        response = dumps(record.get("response"))
    if record.get("error") is not None:
        feedback = (f"The rollout failed (reward {FAILED_ROLLOUT_REWARD}): "
                    f"{record['error'].splitlines()[0]}")
    else:
        metrics = ", ".join(f"{k} {v:g}" for k, v in sorted((record.get("metrics") or {})
                                                            .items()))
        feedback = f"Reward {float(record['reward']):g}" + (f"; metrics: {metrics}"
                                                            if metrics else "")
    return {"Task": dumps(record.get("task")), "Conversation": conversation or "(no model call)",
            "Response": str(response), "Feedback": feedback}


# --------------------------------------------------------------------- the reflection model


def _reply_problem(reply: Any) -> str | None:
    """Why a reflection reply (answered now, or kept in the candidates file) can propose no
    text, or None: not text, or text with a lone surrogate, which no model takes as a
    prompt (every rollout of the candidate would fail on it, blamed on the workflow)."""
    if not isinstance(reply, str):
        return f"the reflection reply kept is {type(reply).__name__}, not text"
    from ..text import holds_a_lone_surrogate

    if holds_a_lone_surrogate(reply):
        return ("the reflection model answered text with a lone surrogate (a \\ud800-\\udfff "
                "escape without its pair), which no model can take as a prompt")
    return None


#: A reasoning model's thoughts written into its reply (servers that do not parse them out):
#: ``<think>`` (Qwen, DeepSeek) or ``<thinking>``, in any case.
_THOUGHTS = re.compile(r"<(think|thinking)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_OPENED, _CLOSED = (re.compile(r"<think(?:ing)?>", re.IGNORECASE),
                    re.compile(r"</think(?:ing)?>", re.IGNORECASE))


def _visible(text: str) -> bool:
    """Whether ``text`` shows anything: a character that is not blank space, a format
    mark (a zero-width space, a byte-order mark) or a control character."""
    import unicodedata

    return any(unicodedata.category(character)[0] not in "ZC" for character in text)


def proposal_text(reply: str) -> str:
    """A reflection reply as GEPA is to read it (the new prompt is what its first and last
    ``` fences hold): its thoughts dropped, with what precedes a lone closing tag (a
    template that opened them in the prompt), since thoughts quoting the old prompt
    between fences made a proposal of it, ``</think>`` included.

    Raises:
        ValueError: nothing is left but thoughts (or the reply ends inside them, cut at
            its length), or its fences hold nothing: no proposal to make.
    """
    reply = _THOUGHTS.sub("", reply)
    closing = list(_CLOSED.finditer(reply))
    if closing:
        reply = reply[closing[-1].end():]
    if _OPENED.search(reply):
        raise ValueError("the reflection model's reply ends inside its thoughts (<think> "
                         "without </think>: cut at its length limit?), so it proposes nothing")
    if not reply.strip():
        raise ValueError("the reflection model answered its thoughts only, and no proposal "
                         "after them")
    # What GEPA will take from it, by GEPA's own reading (a lone or unclosed fence too)
    from gepa.strategies.instruction_proposal import InstructionProposalSignature

    proposed = InstructionProposalSignature.output_extractor(reply)["new_instruction"]
    if not _visible(re.sub(r"```\S*", "", proposed)):  # ("  ```text" it reads as itself)
        raise ValueError("the reflection model's fences hold no text, so it proposes an "
                         "empty prompt")
    return reply


class Reflection:
    """GEPA's reflection model (text in, text out) over an OpenAI-compatible endpoint.

    Called from GEPA's thread; the request runs on the tuning's event loop. An exchange the
    candidates file holds is answered from it (the n-th time a prompt is asked, its n-th
    answer, or its failure), so a resumed run proposes what the first run proposed. A failed
    request fails that proposal, which GEPA skips (asking once more for it);
    `REFLECTION_FAILURES_TO_STOP` failures in a row stop the run.
    """

    def __init__(self, client: Any, name: str, url: str, spec: str | None = None,
                 key: tuple[str | None, str] | None = None) -> None:
        self.client, self.name, self.url = client, name, url
        self.key = key  # where its key came from (`OpenAIChatModel`)
        self.spec = spec or name  # as the user gave it, for messages
        self.journal: Journal | None = None
        self.bridge: _Bridge | None = None
        self.occurrences: Counter[str] = Counter()
        self.failures_in_a_row = self.failures = 0
        self.last_error: str | None = None
        self.calls = self.replayed = 0
        self.repeats = 0  # answered proposals that are their parent's text again

    async def ask(self, messages: list[dict[str, Any]], **options: Any) -> str:
        """One chat completion's text (what is not a completion is refused in words, as a
        task model's answer is)."""
        from ..models.endpoint import OpenAIChatModel

        reply = await OpenAIChatModel(self.client, self.name, key=self.key).chat(
            messages, **options)
        if not reply.content.strip() and reply.refusal:
            raise ValueError(f"the reflection model refused: {reply.refusal!r}")
        if not reply.content.strip():  # GEPA would find no text in it and propose nothing
            raise ValueError(f"the reflection model answered no text (finish reason "
                             f"{reply.finish_reason})")
        if reply.finish_reason == "length":  # a proposal cut short is no prompt to score
            # (tunedsl asks for no max_tokens: the limit is the server's; sweep 48 B-W2)
            raise ValueError("the reflection model's reply was cut at its server's limit on "
                             "a reply's length (finish reason length); raise that limit on "
                             "the server (vLLM: --max-model-len), or choose a reflection "
                             "model that allows longer replies")
        proposal_text(reply.content)  # (raises for a reply of thoughts alone)
        problem = _reply_problem(reply.content)
        if problem is not None:
            raise ValueError(problem)
        return reply.content

    async def probe(self) -> None:
        """Refuse a reflection model that does not answer, or answers what is not a chat
        completion (a login page), before any rollout is spent."""
        spec = self.spec
        import openai

        from ..models.endpoint import KeyRefused, OpenAIChatModel, redact_url

        question = [{"role": "user", "content": "Reply with: ok"}]
        try:
            try:  # (no retries: an endpoint that is down is said at once)
                await OpenAIChatModel(self.client.with_options(max_retries=0, timeout=30.0),
                                      self.name, key=self.key).chat(question, max_tokens=5)
            except (openai.RateLimitError, openai.InternalServerError,
                    openai.ConflictError):  # up, and busy: asked again as the tuning would
                await OpenAIChatModel(self.client.with_options(timeout=30.0),
                                      self.name, key=self.key).chat(question, max_tokens=5)
        except Exception as exc:  # noqa: BLE001 - any failure means it cannot reflect

            # Some transports report a refused connection as a timeout: name the cause
            # (under the endpoint model's ConnectionError and openai's error).
            api = exc.__cause__ if isinstance(exc.__cause__, openai.APIConnectionError) else exc
            cause = api.__cause__ if isinstance(api, openai.APIConnectionError) else None
            shown = cause or exc
            reason = (str(shown).splitlines() or [""])[0]
            flag = f"{spelled('reflection_model')} {spec}"
            if isinstance(exc, KeyRefused):  # (it answered: its key is what to check)
                raise ConfigError(f"{flag}: {reason}") from None
            if isinstance(exc, openai.InternalServerError):
                raise ConfigError(f"{flag}: {redact_url(self.url)} still answers with a server "
                                  f"error after openai's retries ({type(shown).__name__}: "
                                  f"{reason}); check that the server behind it is healthy"
                                  ) from None
            if isinstance(exc, openai.RateLimitError):
                raise ConfigError(f"{flag}: {redact_url(self.url)} is still busy after "
                                  f"openai's retries ({type(shown).__name__}: {reason}); try "
                                  f"again later, or give another reflection model") from None
            if cause is None and not isinstance(exc, (openai.APIConnectionError,
                                                      asyncio.TimeoutError)):
                raise ConfigError(f"{flag}: {redact_url(self.url)} answered no chat completion "
                                  f"({type(shown).__name__}: {reason}); check its URL and the "
                                  f"model's name") from None
            raise ConfigError(f"{flag}: {redact_url(self.url)} did not answer "
                              f"({type(shown).__name__}: {reason}); check its URL, and that "
                              f"it is up") from None

    def __call__(self, prompt: str | list[dict[str, Any]]) -> str:
        assert self.journal is not None and self.bridge is not None
        text = prompt if isinstance(prompt, str) else dumps(prompt)
        key = text_digest(text)
        occurrence = self.occurrences[key]
        self.occurrences[key] += 1
        recorded = self.journal.reflections.get((key, occurrence))
        if recorded is not None:
            self.replayed += 1
            if recorded.get("error") is not None:  # failed then: that proposal was skipped
                raise RuntimeError(recorded["error"])
            problem = _reply_problem(recorded.get("reply"))
            if problem is not None:  # kept by an older tunedsl, or edited: skipped now
                raise RuntimeError(problem)
            try:
                return proposal_text(recorded["reply"])
            except ValueError as exc:  # (kept by an older tunedsl: failed now, as live)
                raise RuntimeError(str(exc)) from None
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        line = {"kind": "reflection", "key": key, "occurrence": occurrence, "prompt": text}
        self.calls += 1
        try:
            reply = self.bridge.run(self.ask(messages))
        except Exception as exc:  # GEPA skips a proposal whose reflection raised
            self.failures_in_a_row += 1
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
            self.journal.write({**line, "reply": None, "error": self.last_error})
            if self.failures_in_a_row >= REFLECTION_FAILURES_TO_STOP:
                # Raised here, not left to a GEPA stop callback: GEPA asks twice per
                # proposal and checks its callbacks between proposals only.
                raise _Stop(RunError(
                    f"the reflection model failed {REFLECTION_FAILURES_TO_STOP} times in a "
                    f"row, so tuning stopped; the last error: {self.last_error}; "
                    f"{options(('candidates', self.journal.path), 'resume')} continues when "
                    f"it answers again")) from None
            raise
        self.failures_in_a_row = 0
        self.journal.write({**line, "reply": reply, "error": None})  # as answered
        proposal = proposal_text(reply)
        from gepa.strategies.instruction_proposal import InstructionProposalSignature

        proposed = InstructionProposalSignature.output_extractor(proposal)["new_instruction"]
        if f"```\n{proposed}\n```" in text:  # where GEPA's prompt shows the parent's text
            self.repeats += 1
        return proposal


class _GepaLog:
    """GEPA's log lines, at debug level: the progress bar and candidate lines say enough."""

    def log(self, message: str) -> None:
        _log.debug("%s", message)


# ------------------------------------------------------------------------------- result


@attrs.frozen(kw_only=True)
class TuneResult:
    """What a prompt tuning run found.

    Attributes:
        best: The best candidate's params (name -> text).
        best_reward: Its mean validation reward.
        start: The starting params.
        start_reward: Their mean validation reward.
        candidates: How many candidates were scored on the validation split.
        val_size: Validation tasks each was scored on.
        rollouts: Rollouts run by this call; ``reused``: answered from the candidates file.
        failed: Failed rollouts in the candidates file (each scored as a failure; one that
            a resume ran again counts by its last result); ``first_error``: the first one's.
        reflections: Reflections asked by this call; ``reflection_failures``: how many failed,
            ``reflection_error``: the last failure's.
        candidates_file: The JSON Lines file; ``settings_file``: the ``[params]`` TOML.
        perfect_reward: The reward no rollout can beat, at which tuning stops.
    """

    best: dict[str, str]
    best_reward: float
    start: dict[str, str]
    start_reward: float
    candidates: int
    val_size: int
    rollouts: int
    reused: int
    failed: int
    candidates_file: Path
    settings_file: Path | None = None
    first_error: str | None = None
    reflections: int = 0
    reflection_failures: int = 0
    reflection_error: str | None = None
    perfect_reward: float | None = None
    reflection_repeats: int = 0
    budget: int | None = None
    minibatch: int | None = None

    @property
    def unchanged(self) -> bool:
        """No param's best text differs from the start."""
        return all(text == self.start.get(name) for name, text in self.best.items())

    def lines(self) -> list[str]:
        """The report, one line per row, then the best text of each param."""
        lines = [f"{'candidates':<12} {self.candidates_file} ({self.candidates} scored; "
                 f"{self.rollouts} rollouts run, {self.reused} from the file, "
                 f"{self.failed} failed)",
                 f"{'validation':<12} start {self.start_reward:.4f} -> best "
                 f"{self.best_reward:.4f} ({self.val_size} tasks)"]
        if self.settings_file is not None:
            lines.append(f"{'settings':<12} {self.settings_file} (apply with "
                         f"{option('settings', self.settings_file)})")
        if self.unchanged:
            lines.append(f"{'why':<12} {self.why_unchanged()}")
        for name, text in self.best.items():
            changed = "" if text != self.start.get(name) else " (unchanged)"
            lines += [f"best {name}{changed}:", *(f"    {line}" for line in text.splitlines())]
        return lines

    def why_unchanged(self) -> str:
        """Why the start is still the best: what the reflection model proposed, and how it
        scored."""
        if self.perfect_reward is not None and self.start_reward >= self.perfect_reward:
            return (f"the start already scores the perfect reward ({self.perfect_reward:g}) "
                    f"on every validation task, so there was nothing to improve")
        if self.reflections and self.reflection_failures == self.reflections:
            return (f"every reflection failed ({self.reflections}; the last: "
                    f"{self.reflection_error}), so nothing was proposed")
        proposed = self.candidates - 1
        failed = (f", {self.reflection_failures} of {self.reflections} reflections failed "
                  f"(the last: {self.reflection_error})" if self.reflection_failures else "")
        answered = self.reflections - self.reflection_failures
        if proposed == 0 and answered and self.reflection_repeats == answered:
            return (f"every proposal of the reflection model ({answered}) repeated its "
                    f"parent's text, so none could beat it{failed}; the model does not follow "
                    f"the instruction to write a new one: give another "
                    f"{spelled('reflection_model')}")
        if proposed == 0 and self.budget is not None and self.minibatch is not None and \
                self.minibatch > scoring_minibatch(self.budget, self.val_size):
            most = scoring_minibatch(self.budget, self.val_size)
            fix = (f"give {option('minibatch', most)} or fewer, or a larger "
                   f"{spelled('budget')}" if most else f"give a larger {spelled('budget')}")
            return (f"{option('budget', self.budget)} cannot score a proposal with "
                    f"{option('minibatch', self.minibatch)}: that takes the validation split "
                    f"twice and two minibatches, {2 * self.val_size + 2 * self.minibatch} "
                    f"rollouts{failed}; {fix}")
        if proposed == 0:
            repeated = (f", {self.reflection_repeats} of {answered} proposals repeated their "
                        f"parent's text" if self.reflection_repeats else "")
            return (f"no proposal reached the validation split (a proposal is scored there "
                    f"only when it beats its parent on a training minibatch){failed}"
                    f"{repeated}; a larger {spelled('budget')} tries more")
        return f"none of the {proposed} proposals scored above the start{failed}"

    def failures(self) -> str | None:
        """What to say of rollouts that failed (None when none did)."""
        if not self.failed:
            return None
        return (f"{self.failed} rollouts failed (each scored {FAILED_ROLLOUT_REWARD:g}), so "
                f"the scores compare failures as well as prompts; the first error: "
                f"{self.first_error}")

    def print(self, out: Any = None) -> None:
        """Print the report (to stdout as it is at the call)."""
        print_lines(self.lines(), out)


def params_toml(params: Mapping[str, str], header: Iterable[str] = ()) -> str:
    """``[params]`` TOML holding ``params``: a multi-line text as a literal block when it can
    be one (readable, nothing escaped), anything else as a basic string (JSON's escapes are
    TOML's)."""
    lines = [f"# {line}" for line in header] + ["[params]"]
    for name, tuned in params.items():
        # settings read ${env:NAME} in every string: tuned text saying it is kept as text
        text = tuned.replace("${env:", ESCAPED_ENV)
        key = name if name.replace("_", "").replace("-", "").isalnum() and name.isascii() \
            else json.dumps(name)
        literal = ("\n" in text and "'''" not in text and not text.endswith("'")
                   and all(c in "\n\t" or c >= " " for c in text) and "\x7f" not in text)
        lines.append(f"{key} = '''\n{text}'''" if literal else
                     f"{key} = {json.dumps(text, ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the command


@attrs.frozen(kw_only=True)
class PromptSearch:
    """How GEPA searches for better texts.

    Attributes:
        budget: Rollouts to spend, the starting texts' validation included (at least one
            evaluation of the validation split; default `default_budget`). It is never
            exceeded: a batch that would go past it ends the run, a few rollouts short.
        val_fraction: Without an eval dataset, the share of the training data held out to
            select by (None: `DEFAULT_VAL_FRACTION`); with one, leave it None.
        minibatch: Training examples the reflection model reads per proposal.
        seed: Seeds the held-out split and GEPA's choices (a resume needs the same).
        perfect_reward: The reward no rollout can beat (1.0: a judge scoring 0 to 1). GEPA
            reflects on no minibatch scoring it everywhere, and tuning ends once a candidate
            scores it on every validation task instead of spending the rest of the budget;
            a rollout scoring above it stops the run naming the fix.
    """

    budget: int | None = None
    val_fraction: float | None = None
    minibatch: int = DEFAULT_MINIBATCH
    seed: int = 0
    perfect_reward: float = 1.0


def check_search(search: PromptSearch, execution: Execution) -> None:
    """Refuse search settings no tuning can run with, before anything is made."""
    if execution.concurrency < 1:
        raise ConfigError(f"{option('concurrency', execution.concurrency)}: give at least 1 "
                          f"rollout at a time")
    if search.minibatch < 1:
        raise ConfigError(f"{option('minibatch', search.minibatch)}: give at least 1 "
                          f"training example per proposal")
    if search.budget is not None and search.budget < 1:
        raise ConfigError(f"{option('budget', search.budget)}: give a number of rollouts, at "
                          f"least one evaluation of the validation split")
    if not math.isfinite(search.perfect_reward):
        raise ConfigError(f"{option('perfect_reward', search.perfect_reward)}: give the best "
                          f"reward your judge gives, a finite number (1 for a judge scoring 0 "
                          f"to 1)")


def prompt_files(graph: ExperimentGraph, candidates: str | os.PathLike[str] | None,
                 output: str | os.PathLike[str] | None,
                 settings_file: str | None = None) -> tuple[Path, Path]:
    """The candidates file (default ``prompts/<name>-<time>.jsonl``) and the TOML the best
    candidate is written to (default: the candidates file's name with ``.toml``), each
    refused, before any endpoint is asked, when it would replace a file of the experiment
    (or the other), or a file of another kind."""
    from ..runs.outputs import (
        PARAMS_TOML,
        Input,
        experiment_inputs,
        refuse_misnamed,
        refuse_overwriting,
    )
    from ..runs.run_files import PROMPTS_DIR, claimed_default
    from .evaluate import refuse_another_kind, refuse_unless_a_plain_file

    named = candidates or claimed_default(PROMPTS_DIR, graph.name, ".jsonl")
    kept = Path(named)
    inputs = experiment_inputs(graph, settings_file)
    refuse_overwriting(named, "candidates", inputs)  # as given: a trailing '/' is a folder
    refuse_misnamed(named, "candidates", "tune-prompt keeps its candidates as JSON Lines",
                    (".jsonl",))
    refuse_unless_a_plain_file(kept, "candidates")  # ('.' has no name to give a .toml suffix)
    refuse_another_kind(kept, "candidates", "candidates")
    if output is not None and Path(output).is_dir():  # before the search, not after it
        raise ConfigError(f"{given('output', output)}: that is a folder; give a file in it, "
                          f"e.g. {Path(output) / 'best.toml'}")
    best = Path(output) if output is not None else kept.with_suffix(".toml")
    refuse_overwriting(output if output is not None else best,
                       "output" if output is not None else default_output(),
                       [*inputs, Input("the candidates file", str(kept))],
                       PARAMS_TOML)
    if output is not None:
        refuse_misnamed(output, "output", "tune-prompt writes the best params as TOML",
                        PARAMS_TOML.suffixes)
    # (found after the tuning, its budget spent: sweep 37)
    refuse_unwritable(best, given("output", best) if output is not None else
                      f"{default_output()} {best}")
    return kept, best


def tune_graph(graph: ExperimentGraph, start: Mapping[str, str], reached: Reached,
               reflection: Reflection,
               *, candidates: str | Path, settings_out: str | Path | None = None,
               search: PromptSearch = PromptSearch(),
               execution: Execution = Execution()) -> TuneResult:
    """Tune the params named in ``start`` (by their starting texts) of an experiment graph,
    the rollouts using the models ``reached`` (closed at the end; its ``settings`` are kept
    in the candidates file), ``reflection`` proposing new texts; `tune_prompt` and the CLI
    build them. See `tune_prompt` for the rest."""
    from .evaluate import missing_auxiliary_fix

    params = list(start)
    check_params(graph, params)
    missing = sorted(set(graph.auxiliary_models) - set(reached.auxiliary))
    if missing:
        raise ConfigError(f"the experiment uses auxiliary model(s) {', '.join(missing)}: "
                          f"{missing_auxiliary_fix()}")
    check_search(search, execution)
    concurrency, minibatch, seed = execution.concurrency, search.minibatch, search.seed
    seed_candidate = {name: str(text) for name, text in start.items()}
    train_rows, val_rows = split_rows(graph, search.val_fraction, seed)
    budget = default_budget(len(val_rows)) if search.budget is None else search.budget
    if budget < len(val_rows):
        raise ConfigError(f"{option('budget', budget)}: below one evaluation of the "
                          f"validation split ({len(val_rows)} rollouts); give at least "
                          f"{len(val_rows)}, and room for proposals, e.g. "
                          f"{option('budget', default_budget(len(val_rows)))}")
    # A proposal is scored when the start has run on the validation split, the parent and
    # the proposal on one minibatch each, and the proposal on the validation split (GEPA
    # stops before an iteration its budget has run out for).
    advised = max(1, min(scoring_minibatch(budget, len(val_rows)), len(train_rows)))
    left = budget - len(val_rows)
    if minibatch > left:  # not even the first minibatch: no proposal could ever be made
        fix = (f"give {option('minibatch', advised)} or a larger budget"
               if scoring_minibatch(budget, len(val_rows)) > 0 else
               f"give a larger budget, e.g. {option('budget', default_budget(len(val_rows)))}")
        raise ConfigError(f"{option('minibatch', minibatch)}: more than the {left} rollouts "
                          f"{option('budget', budget)} leaves after the validation split's "
                          f"{len(val_rows)}, so no proposal would ever be made; {fix}")
    train = [Example(TRAIN, i, row) for i, row in enumerate(train_rows)]
    val = [Example(VAL, i, row) for i, row in enumerate(val_rows)]
    from ..models.endpoint import redact_url
    from .evaluate import PARAMS_KEY, SAMPLING_KEY, TASKS_KEY, scoring_settings, tasks_digest

    older = {"params": list(params), "start": seed_candidate, "seed": seed,
             TASKS_KEY: tasks_digest([*train_rows, *val_rows]),
             "train": len(train), "val": len(val), "val_fraction": (
                 DEFAULT_VAL_FRACTION if search.val_fraction is None else search.val_fraction)
             if graph.eval_dataset is None else None, "minibatch": minibatch,
             "reflection_model": reflection.name, **reached.settings,
             "reflection_url": redact_url(reflection.url)}
    # what eval's results keep of what scores a rollout, the tuned params' digests aside
    # (their starting texts are kept whole), and the rollout's time limit
    scoring = scoring_settings(graph, reached.settings.get(SAMPLING_KEY))
    untuned = {name: value for name, value in scoring.pop(PARAMS_KEY).items()
               if name not in seed_candidate}
    tune_settings = {**older, **scoring, UNTUNED_KEY: untuned}
    start_line = {"kind": "start", "experiment": graph.name, "tune_settings": tune_settings}
    import gepa  # deferred: only this command needs it

    from ..rollout.run import Agent
    from ..rollout.watchdog import Watchdog

    agent = Agent.from_graph(graph)
    report = _Progress(budget, execution.progress)
    state: dict[str, Any] = {}
    perfect_reward = search.perfect_reward

    async def main() -> None:
        loop = asyncio.get_running_loop()
        try:
            await reflection.probe()  # before a rollout is spent or a file is made
            journal = Journal(Path(candidates), resume=execution.resume, start=start_line,
                              older=older, rows={TRAIN: train_rows, VAL: val_rows})
            state["journal"] = journal
            bridge = _Bridge(loop)
            reflection.journal, reflection.bridge = journal, bridge
            with Watchdog(loop) as watchdog:
                adapter = TunedslAdapter(agent=agent, reached=reached,
                                         live=_Live(journal, bridge, watchdog, report),
                                         timeout=float(graph.rollout_timeout),
                                         concurrency=concurrency, val_size=len(val),
                                         budget=budget, perfect_reward=perfect_reward)
                state["adapter"] = adapter

                def optimise() -> None:
                    try:
                        gepa.optimize(
                            seed_candidate=seed_candidate, trainset=train, valset=val,
                            adapter=cast(Any, adapter), reflection_lm=reflection,
                            max_metric_calls=budget, reflection_minibatch_size=minibatch,
                            perfect_score=perfect_reward,
                            candidate_selection_strategy="pareto",
                            module_selector="round_robin", logger=_GepaLog(), seed=seed,
                            display_progress_bar=False, raise_on_exception=True)
                    except _Stop as stop:
                        if stop.error is not None:
                            raise stop.error from None

                worker = asyncio.ensure_future(asyncio.to_thread(optimise))
                try:
                    await asyncio.shield(worker)
                except asyncio.CancelledError:  # Ctrl-C: GEPA's thread ends at its next call
                    bridge.stop()
                    await asyncio.wait([worker])
                    raise
        finally:
            if "journal" in state:
                state["journal"].close()
            await asyncio.gather(reached.close(), reflection.client.close())

    try:
        run_rollouts(main())
    except ExitInCallback as stopped:
        raise stopped.then(f"{candidates} keeps every rollout and reflection that finished: "
                           f"continue with {options(('candidates', candidates), 'resume')}"
                           ) from None
    except KeyboardInterrupt:
        if "journal" in state or (execution.resume and Path(candidates).exists()):
            kept = (f"; {candidates} keeps every rollout and reflection that finished: "
                    f"continue with {options(('candidates', candidates), 'resume')}")
        else:  # while the reflection model was probed: no file was made
            kept = (f" before the first rollout, so nothing was written; "
                    f"{said('run the same command', 'call it')} again to start")
        raise RunInterrupted(f"interrupted{kept}") from None
    except RuntimeError as error:
        from ..rollout.run import LOOP_STOPPED, stopped_the_loop

        if not stopped_the_loop(error):
            raise
        raise RunError(f"{LOOP_STOPPED}; {candidates} keeps every rollout and reflection "
                       f"that finished") from None
    finally:
        report.bar.close()
    journal, adapter = state["journal"], state["adapter"]
    scored = sorted(journal.scored.values(), key=lambda line: line["number"])
    start_line_scored = scored[0]
    best = max(scored, key=lambda line: line["val_reward"])  # the first of equals: the start
    failed, first_error = _failed_rollouts(Path(candidates))
    out = Path(settings_out) if settings_out is not None else None
    if out is not None:
        header = [f"tunedsl tune-prompt {graph.name}: validation reward "
                  f"{start_line_scored['val_reward']:.4f} -> {best['val_reward']:.4f} "
                  f"(candidate {best['candidate']} of {candidates})",
                  f"apply with: tunedsl run|eval MODULE:ATTR --settings {out}",
                  "(a file of [params] alone goes on top of the experiment's tunedsl.toml "
                  "or [tool.tunedsl])"]
        from ..runs.outputs import PARAMS_TOML

        write_whole(out, PARAMS_TOML.seal(params_toml(best["params"], header)),
                    label=given("output", out),
                    error=RunError, then=f"{candidates} keeps the tuning: write the result "
                    f"elsewhere with "
                    f"{options(('candidates', candidates), 'resume', ('output', 'FILE'))} "
                    f"(nothing runs again)")
    return TuneResult(best=dict(best["params"]), best_reward=best["val_reward"],
                      start=dict(start_line_scored["params"]),
                      start_reward=start_line_scored["val_reward"], candidates=len(scored),
                      val_size=len(val), rollouts=adapter.ran, reused=adapter.reused,
                      failed=failed, candidates_file=Path(candidates), settings_file=out,
                      first_error=first_error, reflections=reflection.calls,
                      reflection_failures=reflection.failures,
                      reflection_error=reflection.last_error,
                      perfect_reward=search.perfect_reward,
                      reflection_repeats=reflection.repeats, budget=budget,
                      minibatch=search.minibatch)


def _failed_rollouts(path: Path) -> tuple[int, str | None]:
    """Failed rollouts in a candidates file (the last run's and any earlier), each rollout by
    its last line (a failure a resume ran again counts by how that went), and the first
    one's error."""
    latest = {rollout_key(line): line for line in read_candidates(path)
              if line["kind"] == "rollout"}
    errors = [line["error"] for line in latest.values() if line.get("error") is not None]
    return len(errors), (errors[0].splitlines() or [""])[0] if errors else None
