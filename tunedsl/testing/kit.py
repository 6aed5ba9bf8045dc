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
import contextlib
import contextvars
import inspect
import itertools
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from ..dsl.chat import ModelCall
from ..dsl.decorators import JUDGE_KINDS, FunctionSpec, is_experiment, spec_of
from ..dsl.turns import Turn, per_call
from ..errors import ArgumentError, ConfigError, RolloutError, described, did_you_mean
from ..rollout.group import roll_out_group
from ..rollout.loop import run_rollouts
from ..rollout.run import CANCELLED_INSIDE, Agent, RolloutResult, label_of
from ..rollout.run import run_rollout as _run_rollout
from ..rollout.watchdog import Watchdog, within

T = TypeVar("T")

#: The kit function the user called, as its errors name it (``run_group`` runs through
#: the same checks as ``run_rollout``).
_CALLED: contextvars.ContextVar[str] = contextvars.ContextVar("tunedsl_kit_call",
                                                              default="run_rollout")


def _called() -> str:
    return _CALLED.get()


#: The models kit rollouts are running with now, by id: a trajectory's calls are those its
#: model recorded while its rollout ran, so one model serves one rollout at a time.
_RUNNING: set[int] = set()
_RUNNING_LOCK = threading.Lock()


@contextlib.contextmanager
def _one_rollout_each(models: list[Any]) -> Iterator[None]:
    """Hold ``models`` for one rollout each; one already running another is refused."""
    ids = {id(model) for model in models}
    with _RUNNING_LOCK:
        if ids & _RUNNING:
            raise ArgumentError(f"{_called()}: its model is running another rollout now (kit "
                                f"rollouts started together, as with asyncio.gather, share "
                                f"it), and each rollout's trajectory holds the calls its model "
                                f"records; give each rollout a ScriptedModel of its own")
        _RUNNING.update(ids)
    try:
        yield
    finally:
        with _RUNNING_LOCK:
            _RUNNING.difference_update(ids)


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
        raise ArgumentError(f"{_called()}'s (workflow, judge) pair has {len(target)} items; give "
                            f"two: (a @workflow function, a @judge function or None)")
    workflow, judge = target
    if _kind(workflow) != "workflow":
        hint = " (the pair is (workflow, judge): swap them)" if _kind(workflow) == "judge" \
            and _kind(judge) == "workflow" else ""
        raise ArgumentError(f"{_called()}'s pair starts with {label_of(workflow)}, which is not a "
                            f"@workflow{hint}")
    if judge is not None and _kind(judge) not in JUDGE_KINDS:
        raise ArgumentError(f"{_called()}'s pair ends with {label_of(judge)}, which is not a "
                            f"@judge; give a @judge (or @group_judge) function, or None for "
                            f"the workflow's reward")
    return Agent(workflow=workflow, judge=judge)


def _agent(target: Any, params: Mapping[str, Any] | None,
           auxiliary_models: Any = None) -> Agent:
    if params is not None and not isinstance(params, Mapping):
        raise ArgumentError(f"{_called()}'s params must be a dict of names to values; got "
                            f"{described(params)}")
    graph = None
    if isinstance(target, Agent):
        agent = target
    elif isinstance(target, str) or is_experiment(target):
        from ..config.load import load_experiment

        graph = load_experiment(target)
        agent = Agent.from_graph(graph)
    elif hasattr(target, "workflow") and isinstance(target.workflow, FunctionSpec):
        graph = target  # an ExperimentGraph
        agent = Agent.from_graph(graph)
    elif isinstance(target, tuple):
        agent = _pair(target)
    elif _kind(target) == "workflow":
        agent = Agent(workflow=target)
    elif _kind(target) in JUDGE_KINDS:
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
    if graph is not None:
        _check_declared(graph, params, auxiliary_models)
    if params:
        taking = [fn for fn in (agent.workflow, agent.judge) if fn is not None
                  and "params" in inspect.signature(inspect.unwrap(fn)).parameters]
        if not taking:
            names = " nor ".join(label_of(fn) for fn in (agent.workflow, agent.judge)
                                 if fn is not None)
            raise ArgumentError(f"{_called()}'s params ({', '.join(sorted(params))}) reach "
                                f"nothing: neither {names} takes a params argument; add one to "
                                f"the function that reads them, or drop params=")
    # Given params go on top of the experiment's, key by key, as every settings layer does
    # (replacing them all dropped the ones not named: a KeyError in the workflow).
    return agent if params is None else attrs.evolve(agent, params={**agent.params, **params})


def _check_declared(graph: Any, params: Mapping[str, Any] | None,
                    auxiliary_models: Any) -> None:
    """A param or auxiliary model the experiment does not declare reaches no code that reads
    the experiment's (a misspelt param: the workflow reads the class's value)."""
    declared = dict(graph.params)
    for key in params or ():
        if declared and key not in declared:
            raise ArgumentError(f"{_called()}'s params has {key!r}, which is not a param of "
                                f"{graph.name}{did_you_mean(key, declared)}; its params are "
                                f"{', '.join(declared)}")
    names = list(graph.auxiliary_models)
    given = set(auxiliary_models) if isinstance(auxiliary_models, Mapping) else set()
    missing = [name for name in names if name not in given]
    if missing:  # training hands each one over; a KeyError in the user's code blamed it
        shown = ", ".join(f"{name!r}: ScriptedModel([...])" for name in missing)
        raise ArgumentError(f"{graph.name} declares the auxiliary model(s) "
                            f"{', '.join(missing)}, which {_called()} was not given; give "
                            f"auxiliary_models={{{shown}}}")
    for name in auxiliary_models if isinstance(auxiliary_models, Mapping) else ():
        if name not in names:
            having = (f"its auxiliary models are {', '.join(names)}" if names else
                      "it declares no auxiliary models")
            raise ArgumentError(f"{_called()}'s auxiliary_models has {name!r}, which "
                                f"{graph.name} does not declare{did_you_mean(name, names)}; "
                                f"{having}")


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
        raise ArgumentError(f"{_called()}'s task must be a mapping (one dataset row, as a dict); "
                            f"got {described(task)}")
    problem = _chat_model_problem(model)
    if problem is not None:
        raise ArgumentError(f"{_called()}'s model is {problem}")
    if auxiliary_models is not None:
        if not isinstance(auxiliary_models, Mapping):
            raise ArgumentError(f"{_called()}'s auxiliary_models must be a dict of names to "
                                f"models, e.g. {{\"judge\": ScriptedModel([...])}}; got "
                                f"{described(auxiliary_models)}")
        for name, helper in auxiliary_models.items():
            problem = _chat_model_problem(helper)
            if problem is not None:
                raise ArgumentError(f"{_called()}'s auxiliary_models[{name!r}] is {problem}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ArgumentError(f"{_called()}'s timeout is seconds, a number above 0; got "
                            f"{described(timeout)}")
    if not timeout > 0:
        raise ConfigError(f"{_called()}'s timeout is seconds, a number above 0; got {timeout!r}")


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
    [trajectory] = await _trajectories(_agent(target, params, auxiliary_models), task,
                                       [model], auxiliary_models, timeout)
    return trajectory


async def arun_group(
    target: Any,
    task: Mapping[str, Any],
    models: Sequence[Any],
    auxiliary_models: Mapping[str, Any] | None = None,
    *,
    params: Mapping[str, Any] | None = None,
    timeout: float = TEST_TIMEOUT,
) -> list[Trajectory]:
    """Async `run_group`, for tests that already run an event loop."""
    called = _CALLED.set("run_group")  # its errors name it (then back, for a next call)
    try:
        agent = _agent(target, params, auxiliary_models)
        if isinstance(models, (str, bytes, Mapping)) or not isinstance(models, Sequence) \
                or not models:
            raise ArgumentError(f"run_group's models must be a list of models, one per rollout "
                                f"of the group, e.g. [ScriptedModel([...]), "
                                f"ScriptedModel([...])]; got {described(models)}")
        if len({id(model) for model in models}) != len(models):
            raise ArgumentError("run_group's models must be distinct: each rollout records its "
                                "own calls; give one ScriptedModel per rollout")
        return await _trajectories(agent, task, list(models), auxiliary_models, timeout)
    finally:
        _CALLED.reset(called)


async def _trajectories(agent: Agent, task: Mapping[str, Any], models: list[Any],
                        auxiliary_models: Mapping[str, Any] | None,
                        timeout: float) -> list[Trajectory]:
    """One rollout of ``task`` with each of ``models``, side by side, a ``@group_judge``
    scoring them together; each rollout, and the judging, within ``timeout``. The first
    failure is raised."""
    for model in models:
        _check_arguments(task, model, auxiliary_models, timeout)
    with _one_rollout_each(models):
        return await _held_trajectories(agent, task, models, auxiliary_models, timeout)


async def _held_trajectories(agent: Agent, task: Mapping[str, Any], models: list[Any],
                             auxiliary_models: Mapping[str, Any] | None,
                             timeout: float) -> list[Trajectory]:
    """`_trajectories` with each model held for its rollout alone."""
    before = [len(getattr(model, "calls", ())) for model in models]

    async def roll_out(index: int) -> RolloutResult:
        try:
            # (held to its rollout, as eval holds a model: one kept from another rollout
            # and called in this one fails; the user's model is not ended with it)
            return await within(timeout, lambda: _run_rollout(agent, task, models[index],
                                                              auxiliary_models,
                                                              holds_model=True), watchdog)
        except asyncio.TimeoutError as error:  # `within` says how the rollout took its stop
            said = f"; {error}" if str(error) else ""
            raise RolloutError(f"{label_of(agent.workflow)}: the rollout did not finish within "
                               f"{timeout:g} s ({_called()}'s timeout=); a scripted model "
                               f"answers at once, so it waits on something else (a network "
                               f"call, a lock, a sleep){said}", stage="workflow") from None

    # The watchdog also stops a rollout that blocks the loop (time.sleep, a busy loop).
    with Watchdog(asyncio.get_running_loop()) as watchdog:
        outcomes = await roll_out_group(roll_out, len(models), agent, task, auxiliary_models,
                                        seconds=timeout, watchdog=watchdog)
    failed = next((o for o in outcomes if isinstance(o, RolloutError)), None)
    if failed is not None:
        raise failed
    return [Trajectory(calls=tuple(itertools.islice(getattr(model, "calls", ()), start, None)),
                       response=result.response, reward=result.reward,
                       metrics=result.metrics, output=result.output, turns=result.turns)
            for model, start, result in zip(models, before, outcomes)
            if isinstance(result, RolloutResult)]


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
    return _synchronously("run_rollout", lambda: arun_rollout(
        target, task, model, auxiliary_models, params=params, timeout=timeout), timeout)


def run_group(
    target: Any,
    task: Mapping[str, Any],
    models: Sequence[Any],
    auxiliary_models: Mapping[str, Any] | None = None,
    *,
    params: Mapping[str, Any] | None = None,
    timeout: float = TEST_TIMEOUT,
) -> list[Trajectory]:
    """Run a group of rollouts of one task, one with each of ``models``, side by side, and
    score them as training does: a ``@group_judge`` sees every response at once (a
    per-rollout ``@judge`` scores each alone). Returns their trajectories in the order of
    ``models``.

    Args:
        target: As for `run_rollout`.
        task: One task row.
        models: One model per rollout (usually `ScriptedModel` s scripted differently).
        auxiliary_models: `ChatModel` s by name, shared by the group and its judge.
        params: As for `run_rollout`.
        timeout: Seconds the whole group may take, judging included.

    Raises:
        RolloutError: a rollout or the judge failed (the first failure), or the group did
            not finish within ``timeout``.
    """
    return _synchronously("run_group", lambda: arun_group(
        target, task, models, auxiliary_models, params=params, timeout=timeout), timeout)


def _synchronously(name: str, make: Callable[[], Coroutine[Any, Any, T]],
                   timeout: float) -> T:
    """``make()`` run to its end by ``asyncio.run``; ``name`` is the kit's function, which
    cannot run inside an event loop (its async form can)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise ArgumentError(f"{name}() cannot run inside a running event loop (an async test "
                            f"or notebook cell); there, write: await a{name}(...)")
    # (a test never hangs on threads a rollout left; a timeout that is no number is said by
    # the rollout itself, which checks it)
    bound = timeout if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) \
        and timeout > 0 else None
    try:
        return run_rollouts(make(), threads_bound=bound)
    except asyncio.CancelledError:  # no Ctrl-C (asyncio.run makes that a KeyboardInterrupt)
        raise RolloutError(CANCELLED_INSIDE, stage="workflow") from None
