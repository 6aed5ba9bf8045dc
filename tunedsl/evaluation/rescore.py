"""``tunedsl rescore``: re-judge saved eval results with the current judge, calling no model."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from ..config.graph import ExperimentGraph
from ..dsl.decorators import is_group_judge
from ..dsl.outputs import WorkflowOutput
from ..errors import ConfigError, DatasetError, RolloutError, RunError, RunInterrupted
from ..models.reached import AuxiliaryPlan
from ..models.scripted import ScriptedModel
from ..rollout.group import roll_out_group
from ..rollout.loop import run_rollouts
from ..rollout.run import (
    CANCELLED_INSIDE,
    LOOP_STOPPED,
    Agent,
    RolloutResult,
    label_of,
    run_bounded_rollout,
    stopped_the_loop,
)
from ..rollout.watchdog import Watchdog
from ..wording import said
from .evaluate import (
    EXPERIMENT_KEY,
    FUNCTIONS_KEY,
    EvalSummary,
    code_digest,
    open_output,
    read_results,
    refuse_another_kind,
    refuse_unless_a_plain_file,
    summarize,
)
from .responses import decode_response


def rescore(graph: ExperimentGraph, results: str | Path, output: str | Path | None = None,
            *, auxiliary: AuxiliaryPlan | None = None) -> tuple[EvalSummary, EvalSummary]:
    """Re-score saved rollouts with the experiment's current judge, calling no policy
    model.

    Returns the summaries before and after; writes the re-scored lines to ``output``. A
    judge that calls auxiliary models (an LLM judge) reaches them as ``auxiliary`` plans
    (those the experiment serves from an endpoint, and those ``--aux`` points at).
    """
    agent = Agent.from_graph(graph)
    if agent.judge is None:
        raise ConfigError(f"{graph.source or graph.name}: the experiment has no @judge, so "
                          f"there is nothing to rescore with; add judge = <your @judge "
                          f"function>")
    spec = graph.judge
    assert spec is not None  # agent.judge came from it
    # A judge may declare auxiliary_models (AgentScope's tuner's judge signature does); each
    # model the experiment really has must be reachable.
    auxiliary = auxiliary or AuxiliaryPlan()
    missing = [name for name in graph.auxiliary_models if name not in auxiliary.makers]
    if "auxiliary_models" in spec.optional_params and missing:
        example = said(f"--aux {missing[0]}=http://localhost:8001/v1,MODEL",
                       "an auxiliary plan")
        raise ConfigError(f"@judge {spec.qualname} ({spec.where}) takes auxiliary_models, and "
                          f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no "
                          f"endpoint; give each one ({example}), or serve it from the "
                          f"experiment: Model(..., base_url=...)")
    from ..runs.writing import refuse_if_being_written

    # an eval writing it now: its lines so far would be summarised as the evaluation's
    refuse_if_being_written(results, str(results))
    records = read_results(results)
    repeat = max((r["repeat"] for r in records), default=0) + 1
    handle = None
    if output is not None:  # opened first: a file that cannot be written costs no work
        output = Path(output)
        refuse_unless_a_plain_file(output)
        refuse_another_kind(output, "results", "-o")
        if output.exists() and output.stat().st_size:
            raise ConfigError(f"-o {output} already holds results; choose another file (the "
                              f"re-scored results never overwrite a file)")
        handle = open_output(output, "w", then="make room (or fix the folder) and rescore "
                                               "again")
    if not records:
        if handle is not None and output is not None:  # what was made for nothing goes again
            handle.close()
            output.unlink()
        raise ConfigError(f"{results}: holds no results to rescore; give a results file that "
                          f"tunedsl eval wrote")
    _note_metrics_not_kept_apart(records, results)
    unjudged = sum(not _rejudged(record) for record in records)
    if unjudged:  # (their old errors stood in "after" as the new judge's: sweep 49 B-W3)
        print(f"note: {unjudged} of {len(records)} rollouts in {results} failed before a "
              f"judge saw them (in the workflow, or, in a file from before tunedsl kept a "
              f"failed judge's response, in the judge), so they keep no response to judge "
              f"again: their errors stand", file=sys.stderr)
    try:
        with handle or contextlib.nullcontext():
            rescored = [_judged_by(record, graph.name, agent, auxiliary)
                        for record in run_rollouts(_rejudge(agent, records, str(results),
                                                           float(graph.rollout_timeout),
                                                           auxiliary))]
            if handle is not None and output is not None:
                # whole or not at all (renamed into place): a kill -9 while lines were
                # written left a part no later command could tell from a whole file
                from ..data.json_text import dumps
                from ..runs.writing import write_whole

                write_whole(output, "".join(dumps(record) + "\n" for record in rescored),
                            label=f"-o {output}", error=RunError,
                            then="make room (or fix the folder) and rescore again")
    except BaseException as stopped:
        if isinstance(stopped, asyncio.CancelledError):
            stopped = RunError(CANCELLED_INSIDE)
        elif stopped_the_loop(stopped):
            stopped = RunError(LOOP_STOPPED)
        if handle is not None and output is not None:
            # the file it made, empty or cut short by the interrupt (a part would read as
            # the results, and block the command run again: rescore writes whole or not)
            output.unlink(missing_ok=True)
        if isinstance(stopped, KeyboardInterrupt):  # Ctrl-C: say what is (not) kept
            written = f"nothing was written to {output}" if output is not None else \
                "nothing was written"
            raise RunInterrupted(f"interrupted; {written} (rescore writes its lines once "
                                 f"every one is judged): run it again") from None
        if stopped is not sys.exc_info()[1]:
            raise stopped from None
        raise
    judged = sum(map(_rejudged, {(r["task_index"], r["repeat"]): r for r in records}.values()))
    return summarize(records, repeat), attrs.evolve(summarize(rescored, repeat), judged=judged)


def _judged_by(record: dict[str, Any], experiment: str, agent: Agent,
               auxiliary: AuxiliaryPlan) -> dict[str, Any]:
    """A rescored line's settings name the experiment and the judge that scored it now, and
    the auxiliary endpoints it called (a file from before tunedsl kept them stays as it
    was), so an ``eval --resume`` of it continues with this judge, not the one eval ran."""
    kept = record.get("eval_settings")
    if not isinstance(kept, dict) or FUNCTIONS_KEY not in kept or agent.judge is None:
        return record
    functions = {**kept[FUNCTIONS_KEY], "judge": code_digest(agent.judge)}
    endpoints = {"aux": list(auxiliary.kept)} if auxiliary.kept else {}
    return {**record, "eval_settings": {**kept, EXPERIMENT_KEY: experiment,
                                        FUNCTIONS_KEY: functions, **endpoints}}


async def _rejudge(agent: Agent, records: list[dict[str, Any]], source: str,
                   timeout: float, auxiliary: AuxiliaryPlan) -> list[dict[str, Any]]:
    """Each record judged again, within ``rollout_timeout`` as in eval (a judge that hangs
    or blocks fails its record instead of the command)."""
    def given(response: Any, metrics: Any = None) -> Agent:
        # The saved response stands in for the workflow: the judge sees it unchanged, and
        # the workflow's metrics are kept (they were lost: sweep 47 B-S2).
        async def replay(task: Any, model: Any) -> Any:
            return WorkflowOutput(response=response, metrics=metrics or None)

        # named as the workflow whose response and metrics it gives again, where a line
        # names it ("both give the metric"; it was "_rejudge.<locals>...": sweep 48 B-W1)
        replay.__qualname__ = label_of(agent.workflow)
        return attrs.evolve(agent, workflow=replay)

    clients, helpers = auxiliary.made()  # in this loop: a client does not outlive it
    watchdog = Watchdog(asyncio.get_running_loop())
    try:
        with watchdog:
            if is_group_judge(agent.judge):
                return await _rejudge_groups(agent, given, records, source, timeout, watchdog,
                                             helpers)
            return [await _rejudge_one(given, record, f"{source}:{number}", timeout,
                                       watchdog, helpers)
                    for number, record in enumerate(records, start=1)]
    finally:
        await asyncio.gather(*(client.close() for client in clients))


def _saved_response(record: dict[str, Any], where: str) -> Any:
    """The response a record saved, for the judge to see again."""
    if not isinstance(record.get("task"), dict):  # eval writes the row on every line
        raise DatasetError(f"{where}: the line has no task (the row its rollout ran on), so "
                           f"the judge has nothing to judge against; the file was edited or "
                           f"not written by tunedsl eval")
    return decode_response(record, where)


async def _rejudge_one(given: Any, record: dict[str, Any], where: str, timeout: float,
                       watchdog: Watchdog, helpers: Mapping[str, Any]) -> dict[str, Any]:
    """One record judged again (one whose workflow failed in eval stays as it was: it left
    no response; one a judge failed on, in eval or an earlier rescore, is judged again)."""
    if not _rejudged(record):
        return record
    response = _saved_response(record, where)
    try:
        result = await run_bounded_rollout(given(response, _workflow_metrics(record)),
                                           record["task"], ScriptedModel([]),
                                           {name: make() for name, make in helpers.items()},
                                           seconds=timeout, watchdog=watchdog)
    except RolloutError as error:
        return _rescored(record, error)
    return _rescored(record, result)


async def _rejudge_groups(agent: Agent, given: Any, records: list[dict[str, Any]],
                          source: str, timeout: float, watchdog: Watchdog,
                          helpers: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each task's records judged again together by the ``@group_judge``: the last line
    of each of its repeats that did not fail (an earlier line a resume replaced, and a
    failed rollout, stay as they were)."""
    out = list(records)
    latest = {(r["task_index"], r["repeat"]): n for n, r in enumerate(records)}
    groups: dict[Any, list[int]] = {}
    for (task_index, _), n in sorted(latest.items()):
        if _rejudged(records[n]):
            groups.setdefault(task_index, []).append(n)
    for numbers in groups.values():
        responses = [_saved_response(records[n], f"{source}:{n + 1}") for n in numbers]
        kept = [_workflow_metrics(records[n]) for n in numbers]
        task = records[numbers[0]]["task"]

        def roll_out(i: int, responses: list[Any] = responses, kept: list[Any] = kept,
                     task: Any = task) -> Any:
            return run_bounded_rollout(given(responses[i], kept[i]), task, ScriptedModel([]),
                                       {name: make() for name, make in helpers.items()},
                                       seconds=timeout, watchdog=watchdog)

        outcomes = await roll_out_group(roll_out, len(numbers), agent, task,
                                        {name: make() for name, make in helpers.items()},
                                        seconds=timeout, watchdog=watchdog)
        for n, outcome in zip(numbers, outcomes):
            out[n] = _rescored(records[n], outcome)
    return out


def _workflow_metrics(record: dict[str, Any]) -> dict[str, float]:
    """The workflow's own metrics a results line kept (``workflow_metrics``; a file written
    before tunedsl kept them apart: its ``metrics``, which the new judge's then update),
    their finite numbers only."""
    import math

    kept = record.get("workflow_metrics", record.get("metrics"))
    return {name: float(value) for name, value in kept.items()
            if isinstance(name, str) and isinstance(value, (int, float))
            and not isinstance(value, bool) and math.isfinite(value)} \
        if isinstance(kept, dict) else {}


def _note_metrics_not_kept_apart(records: list[dict[str, Any]], results: str | Path) -> None:
    """Say once that a file written before tunedsl kept the workflow's metrics apart
    (``workflow_metrics``) keeps every metric it holds, the old judge's among them, as the
    workflow's: a metric the new judge no longer gives stays with its old value (sweep 48
    B-S1). The rescored lines keep them apart from then on."""
    mixed = [record for record in records if _rejudged(record)
             and "workflow_metrics" not in record and record.get("metrics")]
    if mixed:
        names = sorted({name for record in mixed for name in record["metrics"]})
        print(f"note: {results} was written before tunedsl kept the workflow's metrics apart "
              f"from the judge's, so its metrics ({', '.join(map(str, names[:5]))}"
              f"{', ...' if len(names) > 5 else ''}) are kept as the workflow's, and the new "
              f"judge's replace those it gives; evaluate again to drop the old judge's",
              file=sys.stderr)


def _rejudged(record: dict[str, Any]) -> bool:
    """Whether a record's response is judged again: one eval scored, one whose judge failed
    in eval after the workflow finished (``failed_in`` "judge": the response was kept), or
    one an earlier rescore's judge failed on (it kept the response, and its
    ``previous_reward``); not a rollout whose workflow failed, which left no response."""
    return record.get("error") is None or "previous_reward" in record or \
        record.get("failed_in") == "judge"


def _rescored(record: dict[str, Any], outcome: RolloutResult | RolloutError) -> dict[str, Any]:
    # the last reward a judge gave: an earlier rescore's failure keeps the one before it
    previous = record.get("reward") if record.get("error") is None else \
        record.get("previous_reward")
    own = _workflow_metrics(record)  # (kept apart from now on: an older file's too)
    if isinstance(outcome, RolloutError):
        return {**record, "reward": None, "error": str(outcome), "output": outcome.output,
                "previous_reward": previous, "workflow_metrics": own,
                "failed_in": outcome.stage}
    # what the judge printed this time (eval's output was the workflow's and old judge's)
    return {**record, "reward": outcome.reward, "metrics": outcome.metrics,
            "workflow_metrics": own, "failed_in": None,
            "output": outcome.output, "previous_reward": previous,
            **({"error": None, "traceback": None} if record.get("error") is not None
               else {})}  # (an earlier rescore's failure, judged now)
