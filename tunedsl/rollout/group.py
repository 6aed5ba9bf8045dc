"""A task's group of rollouts, scored together by a ``@group_judge``.

A group judge sees the responses of every rollout of one task that did not fail (the
algorithm's ``group_size`` in training, ``--repeat`` in ``eval``) and returns one
`JudgeOutput` each: an LLM ranking the attempts (RULER), or a reward relative to the group.
Each backend, eval, rescore, ``check`` and the test kit run the group's rollouts as they
run any rollout (`tunedsl.rollout.run`), then hand them to `judge_group`, which is the one
place a group is judged: with the same bound, arguments and errors everywhere.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from ..dsl.decorators import is_group_judge
from ..dsl.outputs import JudgeOutput
from ..errors import RolloutError
from .output import captured, kept
from .run import (
    Agent,
    RolloutResult,
    _call,
    _inspected,
    _metrics,
    _optional_arguments,
    _own_copy,
    _refuse_helper_turns,
    _reward,
    _turns_ended,
    _unawaited,
    label_of,
    say_metrics_both_give,
    shown_value,
)
from .watchdog import RolloutBlocked, TimedOut, Watchdog, within

#: A rollout of a group: its result, or why it failed.
Outcome = RolloutResult | RolloutError


async def judge_group(agent: Agent, task: Mapping[str, Any], outcomes: Sequence[Outcome],
                      auxiliary_models: Mapping[str, Any] | None = None, *,
                      seconds: float | None = None,
                      watchdog: Watchdog | None = None) -> list[Outcome]:
    """The ``outcomes`` of one task's rollouts, those that did not fail scored together
    by the experiment's ``@group_judge`` (within ``seconds``, when given, as a rollout is).
    With a per-rollout ``@judge`` (or none) they are returned as they are.

    A judge that fails (raises, times out, returns other than one `JudgeOutput` per
    response) fails every rollout it was to score, with its error.
    """
    if agent.judge is None or not is_group_judge(agent.judge):
        return list(outcomes)
    members = [i for i, outcome in enumerate(outcomes) if isinstance(outcome, RolloutResult)]
    if not members:
        return list(outcomes)
    results = [outcome for outcome in outcomes if isinstance(outcome, RolloutResult)]
    assert all(result.awaiting_group for result in results)
    printed: list[io.StringIO] = []

    async def scored() -> list[tuple[float, dict[str, float]]]:
        with captured() as buffer:
            printed.append(buffer)
            return await _verdicts(agent, task, [r.response for r in results],
                                   auxiliary_models)

    try:
        if seconds:
            verdicts = await within(seconds, scored, watchdog)
        else:
            verdicts = await scored()
    except (asyncio.TimeoutError, RolloutBlocked) as error:
        said = (f"timed out after {seconds:g}s (rollout_timeout) judging {len(results)} "
                f"responses; make it faster or raise rollout_timeout"
                if isinstance(error, asyncio.TimeoutError) else str(error))
        if isinstance(error, TimedOut) and error.caught:
            said += f"; {error}"
        failure = RolloutError(f"{label_of(agent.judge)} {said}", stage="judge")
        failure.output = kept(printed[-1]) if printed else None
        return _failed(outcomes, members, failure)
    except RolloutError as failure:
        failure.output = kept(printed[-1]) if printed else None
        return _failed(outcomes, members, failure)
    judged = list(outcomes)
    judge_printed = kept(printed[-1]) if printed else None
    for i, result, (reward, metrics) in zip(members, results, verdicts):
        say_metrics_both_give(agent.workflow, agent.judge, result.workflow_metrics, metrics)
        judged[i] = attrs.evolve(result, reward=reward, metrics={**result.metrics, **metrics},
                                 awaiting_group=False, output=_joined(result.output, judge_printed))
    return judged


async def _verdicts(agent: Agent, task: Mapping[str, Any], responses: list[Any],
                    auxiliary_models: Mapping[str, Any] | None
                    ) -> list[tuple[float, dict[str, float]]]:
    """Each response's reward and the judge's metrics for it."""
    judge = agent.judge
    assert judge is not None
    auxiliary_models = MappingProxyType(dict(auxiliary_models or {}))
    helper_turns = _turns_ended(auxiliary_models)
    verdicts = await _call(judge, "judge", task=_own_copy(task), responses=list(responses),
                           **_optional_arguments(judge, auxiliary_models, agent.params))
    _refuse_helper_turns(auxiliary_models, helper_turns, judge, "judge")
    _unawaited(verdicts, judge, "judge")
    if not isinstance(verdicts, (list, tuple)):
        raise RolloutError(f"{label_of(judge)} returned {shown_value(verdicts)}; return a "
                           f"list of JudgeOutput(reward=...), one per response", stage="judge")
    strays = [v for v in verdicts if not isinstance(v, JudgeOutput)]  # None among them
    if strays:
        got = f"a {type(verdicts).__name__} holding {shown_value(strays[0])}"
        raise RolloutError(f"{label_of(judge)} returned {got}; return a list of "
                           f"JudgeOutput(reward=...), one per response", stage="judge")
    if len(verdicts) != len(responses):
        raise RolloutError(f"{label_of(judge)} returned {len(verdicts)} JudgeOutputs for "
                           f"{len(responses)} responses; return one per response, in their "
                           f"order", stage="judge")
    return [_scored(verdict, judge) for verdict in verdicts]


def _scored(verdict: JudgeOutput, judge: Callable[..., Any]) -> tuple[float, dict[str, float]]:
    """One verdict's reward and metrics, checked as a lone judge's are."""
    return (_inspected(lambda: _reward(verdict.reward, judge, "judge"), verdict.reward, judge,
                       "judge", "a reward"),
            _inspected(lambda: _metrics(verdict.metrics, judge, "judge"), verdict.metrics,
                       judge, "judge", "metrics"))


def _failed(outcomes: Sequence[Outcome], members: list[int],
            failure: RolloutError) -> list[Outcome]:
    """The group judge's ``failure`` for each member whose workflow finished, each keeping
    its own response (`RolloutError.after`)."""
    return [failure.after(outcome.response, outcome.workflow_metrics)
            if i in members and isinstance(outcome, RolloutResult) else outcome
            for i, outcome in enumerate(outcomes)]


def _joined(first: str | None, second: str | None) -> str | None:
    if not second:
        return first
    return f"{first}{second}" if first else second


async def roll_out_group(roll_out: Callable[[int], Any], size: int, agent: Agent,
                         task: Mapping[str, Any],
                         auxiliary_models: Mapping[str, Any] | None = None, *,
                         seconds: float | None = None,
                         watchdog: Watchdog | None = None) -> list[Outcome]:
    """``size`` rollouts of ``task`` side by side (``roll_out(i)`` runs the i-th and returns
    its `RolloutResult`, or raises `RolloutError`), then `judge_group` over them."""
    from .together import all_or_none

    async def one(index: int) -> Outcome:
        try:
            return await roll_out(index)
        except RolloutError as error:
            return error

    outcomes = await all_or_none(one(i) for i in range(size))
    return await judge_group(agent, task, outcomes, auxiliary_models, seconds=seconds,
                             watchdog=watchdog)
