"""The test kit: run one rollout of agent code against a `ScriptedModel`, no server needed.

Public through ``tunedsl.testing``. The pytest plugin ``tunedsl.tools.pytest_plugin``
(registered through the ``pytest11`` entry point) adds a ``scripted_model`` fixture::

    def test_solve(scripted_model):
        trajectory = run_rollout(MathAgent, {"question": "1+1", "answer": "2"},
                                 scripted_model(["Answer: 2"]))
        assert trajectory.reward == 1.0
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from typing import Any

import attrs

from ..dsl.chat import ModelCall
from ..dsl.decorators import FunctionSpec, is_experiment, spec_of
from ..errors import RolloutError
from ..runtime.rollout import Agent, RolloutResult
from ..runtime.rollout import label_of
from ..runtime.rollout import run_rollout as _run_rollout
from ..runtime.watchdog import Watchdog, within


@attrs.frozen(kw_only=True)
class Trajectory:
    """What one rollout did: the model calls in order, and its score."""

    calls: tuple[ModelCall, ...]
    response: Any
    reward: float
    metrics: dict[str, float]


def _agent(target: Any, params: Mapping[str, Any] | None) -> Agent:
    if isinstance(target, Agent):
        agent = target
    elif isinstance(target, str) or is_experiment(target):
        from ..config.load import load_experiment

        agent = Agent.from_graph(load_experiment(target))
    elif hasattr(target, "workflow") and isinstance(getattr(target, "workflow"), FunctionSpec):
        agent = Agent.from_graph(target)  # an ExperimentGraph
    elif isinstance(target, tuple):
        workflow, judge = target
        agent = Agent(workflow=workflow, judge=judge)
    elif isinstance(spec_of(target), FunctionSpec):
        agent = Agent(workflow=target)
    else:
        raise TypeError(f"run_rollout takes an @experiment, an import string, a graph, a "
                        f"@workflow function or a (workflow, judge) pair; got {target!r}")
    return agent if params is None else attrs.evolve(agent, params=params)


#: Seconds a test-kit rollout may take unless told otherwise: scripted models answer at
#: once, so a rollout still running then is stuck.
TEST_TIMEOUT = 60.0


async def arun_rollout(
    target: Any,
    task: Mapping[str, Any],
    model: Any,
    auxiliary_models: Mapping[str, Any] | None = None,
    *,
    params: Mapping[str, Any] | None = None,
    timeout: float = TEST_TIMEOUT,
) -> Trajectory:
    """Async `run_rollout`, for tests that already run an event loop."""
    agent = _agent(target, params)
    before = len(getattr(model, "calls", ()))
    try:
        # The watchdog also stops a rollout that blocks the loop (time.sleep, a busy loop).
        with Watchdog(asyncio.get_running_loop()) as watchdog:
            result: RolloutResult = await within(
                timeout, lambda: _run_rollout(agent, task, model, auxiliary_models), watchdog)
    except asyncio.TimeoutError:
        raise RolloutError(f"{label_of(agent.workflow)}: the rollout did not finish within "
                           f"{timeout:g} s (run_rollout's timeout=); a scripted model answers "
                           f"at once, so it waits on something else (a network call, a lock, "
                           f"a sleep)", stage="workflow") from None
    calls = tuple(itertools.islice(getattr(model, "calls", ()), before, None))
    return Trajectory(calls=calls, response=result.response, reward=result.reward,
                      metrics=result.metrics)


def run_rollout(
    target: Any,
    task: Mapping[str, Any],
    model: Any,
    auxiliary_models: Mapping[str, Any] | None = None,
    *,
    params: Mapping[str, Any] | None = None,
    timeout: float = TEST_TIMEOUT,
) -> Trajectory:
    """Run one rollout through the same path training uses, and return its trajectory.

    Args:
        target: An ``@experiment`` class or its import string (its params and judge
            apply), an `ExperimentGraph`, a ``@workflow`` function, or a
            ``(workflow, judge)`` pair.
        task: One task row.
        model: Usually a `ScriptedModel`; any `ChatModel` works.
        auxiliary_models: `ChatModel` s by name.
        params: Replace the experiment's params for this rollout.
        timeout: Seconds the rollout may take (`TEST_TIMEOUT`), even if it blocks.

    Raises:
        RolloutError: the workflow or judge failed, as it would during training, or
            the rollout did not finish within ``timeout``.
        RuntimeError: called inside a running event loop (use ``await arun_rollout``).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("run_rollout() cannot run inside a running event loop (an async "
                           "test or notebook cell); there, write: await arun_rollout(...)")
    return asyncio.run(arun_rollout(target, task, model, auxiliary_models, params=params,
                                    timeout=timeout))

