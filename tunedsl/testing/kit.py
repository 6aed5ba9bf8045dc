"""The test kit: run one rollout of agent code against a `ScriptedModel`, no server needed.

Public through ``tunedsl.testing``. The pytest plugin ``tunedsl.testing.pytest_plugin``
(registered through the ``pytest11`` entry point) adds a ``scripted_model`` fixture::

    def test_solve(scripted_model):
        trajectory = run_rollout(MathAgent, {"question": "1+1", "answer": "2"},
                                 scripted_model(["Answer: 2"]))
        assert trajectory.reward == 1.0
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Mapping
from typing import Any

import attrs

from ..dsl.chat import ModelCall
from ..dsl.decorators import FunctionSpec, is_experiment, spec_of
from ..dsl.turns import Turn, per_call
from ..errors import ArgumentError, ConfigError, RolloutError, described
from ..rollout.run import CANCELLED_INSIDE, Agent, RolloutResult, label_of
from ..rollout.run import run_rollout as _run_rollout
from ..rollout.watchdog import Watchdog, within


@attrs.frozen(kw_only=True)
class Trajectory:
    """What one rollout did: the model calls in order, its score, what its code printed
    (``output``: kept with the rollout, not shown; None when nothing was), and the turns
    it marked (``model.end_turn``; `turn_rewards` and `turn_states` say which call of the
    rollout each reward and state lands on, as training reads them)."""

    calls: tuple[ModelCall, ...]
    response: Any
    reward: float
    metrics: dict[str, float]
    output: str | None = None
    turns: tuple[Turn, ...] = ()

    @property
    def turn_rewards(self) -> tuple[float | None, ...] | None:
        """Each call's turn reward (None for a call no turn rewarded), or None when no turn
        gave one."""
        return per_call(self.turns, len(self.calls)).rewards

    @property
    def turn_states(self) -> tuple[str | None, ...] | None:
        """Each call's state key (None for a call that began no turn), or None when no turn
        named one."""
        return per_call(self.turns, len(self.calls)).states


def _kind(fn: Any) -> str | None:
    spec = spec_of(fn)
    return spec.kind if isinstance(spec, FunctionSpec) else None


def _pair(target: tuple[Any, ...]) -> Agent:
    if len(target) != 2:
        raise ArgumentError(f"run_rollout's (workflow, judge) pair has {len(target)} items; give "
                            f"two: (a @workflow function, a @judge function or None)")
    workflow, judge = target
    if _kind(workflow) != "workflow":
        hint = " (the pair is (workflow, judge): swap them)" if _kind(workflow) == "judge" \
            and _kind(judge) == "workflow" else ""
        raise ArgumentError(f"run_rollout's pair starts with {label_of(workflow)}, which is not a "
                            f"@workflow{hint}")
    if judge is not None and _kind(judge) != "judge":
        raise ArgumentError(f"run_rollout's pair ends with {label_of(judge)}, which is not a "
                            f"@judge; give a @judge function, or None for the workflow's reward")
    return Agent(workflow=workflow, judge=judge)


def _agent(target: Any, params: Mapping[str, Any] | None) -> Agent:
    if params is not None and not isinstance(params, Mapping):
        raise ArgumentError(f"run_rollout's params must be a dict of names to values; got "
                            f"{described(params)}")
    if isinstance(target, Agent):
        agent = target
    elif isinstance(target, str) or is_experiment(target):
        from ..config.load import load_experiment

        agent = Agent.from_graph(load_experiment(target))
    elif hasattr(target, "workflow") and isinstance(target.workflow, FunctionSpec):
        agent = Agent.from_graph(target)  # an ExperimentGraph
    elif isinstance(target, tuple):
        agent = _pair(target)
    elif _kind(target) == "workflow":
        agent = Agent(workflow=target)
    elif _kind(target) == "judge":
        raise ArgumentError(f"run_rollout runs a workflow, and {label_of(target)} is a judge; give "
                            f"(your_workflow, {target.__name__}) to judge the workflow's response")
    elif callable(target) and not isinstance(target, type):
        raise ArgumentError(f"run_rollout takes an @experiment, an import string, a graph, a "
                            f"@workflow function or a (workflow, judge) pair; "
                            f"{label_of(target)} is a plain function: decorate it with @workflow")
    else:
        raise ArgumentError(f"run_rollout takes an @experiment, an import string, a graph, a "
                            f"@workflow function or a (workflow, judge) pair; got "
                            f"{described(target)}")
    if params:
        taking = [fn for fn in (agent.workflow, agent.judge) if fn is not None
                  and "params" in inspect.signature(inspect.unwrap(fn)).parameters]
        if not taking:
            names = " nor ".join(label_of(fn) for fn in (agent.workflow, agent.judge)
                                 if fn is not None)
            raise ArgumentError(f"run_rollout's params ({', '.join(sorted(params))}) reach "
                                f"nothing: neither {names} takes a params argument; add one to "
                                f"the function that reads them, or drop params=")
    # Given params go on top of the experiment's, key by key, as every settings layer does
    # (replacing them all dropped the ones not named: a KeyError in the workflow).
    return agent if params is None else attrs.evolve(agent, params={**agent.params, **params})


def _chat_model_problem(model: Any) -> str | None:
    if isinstance(model, type):
        return (f"the class {model.__name__}, not a model; give an instance, e.g. "
                f"{model.__name__}([...])")
    if not callable(getattr(model, "chat", None)):
        return f"{described(model)}, which has no chat method; give a ScriptedModel([...]), say"
    return None


def _check_arguments(task: Any, model: Any, auxiliary_models: Any, timeout: Any) -> None:
    """The kit's arguments, each named with its fix (a wrong one would otherwise fail
    inside the workflow, where it looks like the workflow's fault)."""
    if not isinstance(task, Mapping):
        raise ArgumentError(f"run_rollout's task must be a mapping (one dataset row, as a dict); "
                            f"got {described(task)}")
    problem = _chat_model_problem(model)
    if problem is not None:
        raise ArgumentError(f"run_rollout's model is {problem}")
    if auxiliary_models is not None:
        if not isinstance(auxiliary_models, Mapping):
            raise ArgumentError(f"run_rollout's auxiliary_models must be a dict of names to "
                                f"models, e.g. {{\"judge\": ScriptedModel([...])}}; got "
                                f"{described(auxiliary_models)}")
        for name, helper in auxiliary_models.items():
            problem = _chat_model_problem(helper)
            if problem is not None:
                raise ArgumentError(f"run_rollout's auxiliary_models[{name!r}] is {problem}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ArgumentError(f"run_rollout's timeout is seconds, a number above 0; got "
                            f"{described(timeout)}")
    if not timeout > 0:
        raise ConfigError(f"run_rollout's timeout is seconds, a number above 0; got {timeout!r}")


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
    _check_arguments(task, model, auxiliary_models, timeout)
    before = len(getattr(model, "calls", ()))
    try:
        # The watchdog also stops a rollout that blocks the loop (time.sleep, a busy loop).
        with Watchdog(asyncio.get_running_loop()) as watchdog:
            result: RolloutResult = await within(
                timeout, lambda: _run_rollout(agent, task, model, auxiliary_models), watchdog)
    except asyncio.TimeoutError as error:  # `within` says how the rollout took its stop
        said = f"; {error}" if str(error) else ""
        raise RolloutError(f"{label_of(agent.workflow)}: the rollout did not finish within "
                           f"{timeout:g} s (run_rollout's timeout=); a scripted model answers "
                           f"at once, so it waits on something else (a network call, a lock, "
                           f"a sleep){said}", stage="workflow") from None
    calls = tuple(itertools.islice(getattr(model, "calls", ()), before, None))
    return Trajectory(calls=calls, response=result.response, reward=result.reward,
                      metrics=result.metrics, output=result.output, turns=result.turns)


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
        params: Params for this rollout, over the experiment's key by key (those not
            named keep the experiment's values).
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
        raise ArgumentError("run_rollout() cannot run inside a running event loop (an async "
                            "test or notebook cell); there, write: await arun_rollout(...)")
    try:
        return asyncio.run(arun_rollout(target, task, model, auxiliary_models, params=params,
                                        timeout=timeout))
    except asyncio.CancelledError:  # no Ctrl-C (asyncio.run makes that a KeyboardInterrupt)
        raise RolloutError(CANCELLED_INSIDE, stage="workflow") from None

