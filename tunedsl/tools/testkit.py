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
from ..runtime.rollout import Agent, RolloutResult
from ..runtime.rollout import run_rollout as _run_rollout


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


async def arun_rollout(
    target: Any,
    task: Mapping[str, Any],
    model: Any,
    auxiliary_models: Mapping[str, Any] | None = None,
    *,
    params: Mapping[str, Any] | None = None,
) -> Trajectory:
    """Async `run_rollout`, for tests that already run an event loop."""
    before = len(getattr(model, "calls", ()))
    result: RolloutResult = await _run_rollout(_agent(target, params), task, model,
                                               auxiliary_models)
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

    Raises:
        RolloutError: the workflow or judge failed, as it would during training.
    """
    return asyncio.run(arun_rollout(target, task, model, auxiliary_models, params=params))

