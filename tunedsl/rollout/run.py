"""The one rollout: workflow -> judge -> a scored result (a ``@group_judge`` scores the
rollouts of a task together, after them: `tunedsl.rollout.group`).

Every backend (Trinity's workflow runners, the local CPU trainer), eval and the
test kit call `run_rollout`, so a workflow behaves the same everywhere: the same
arguments reach it, the same return values are accepted, the same errors name
the user's function and the fix.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import inspect
import io
import logging
import math
import numbers
import reprlib
import sys
import weakref
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from ..dsl.decorators import FunctionSpec, is_group_judge, spec_of, where
from ..dsl.outputs import JudgeOutput, WorkflowOutput
from ..dsl.turns import LARGEST_REWARD, Turn, TurnMarks
from ..errors import (
    RolloutError,
    described,
    did_you_mean,
    exception_text,
    raised_outside_tunedsl,
    shortened,
    user_traceback,
)
from ..models.agentscope import adapt, agent_stopped_waiting
from ..models.lifetime import EndsWithRollout, begin_rollout, leave_rollout
from ..text import holds_a_lone_surrogate
from .loop import as_exit_in_task
from .output import captured, kept, own_stderr
from .tasks import rollout_code
from .watchdog import RolloutBlocked, TimedOut, Watchdog, within

if TYPE_CHECKING:
    from ..config.graph import ExperimentGraph

#: Rollouts in flight at once unless told otherwise (``eval``, model selection and prompt
#: tuning; ``--concurrency``).
DEFAULT_CONCURRENCY = 16


def freeze(value: Any) -> Any:
    """A read-only view of plain data: mappings become MappingProxyType, lists tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


@attrs.frozen(kw_only=True)
class Agent:
    """The user's functions and experiment parameters, ready to roll out."""

    workflow: Callable[..., Any]
    judge: Callable[..., Any] | None = None
    params: Mapping[str, Any] = attrs.field(factory=dict, converter=freeze)

    @classmethod
    def from_graph(cls, graph: ExperimentGraph) -> Agent:
        """The live functions of an `ExperimentGraph` (imported by their refs)."""
        from ..config.graph import load_function

        judge = load_function(graph.judge) if graph.judge is not None else None
        return cls(workflow=load_function(graph.workflow), judge=judge, params=graph.params)


@attrs.frozen(kw_only=True)
class RolloutResult:
    """One scored rollout of one task.

    Attributes:
        response: What the workflow returned as its response.
        reward: The judge's reward, or the workflow's own when there is no judge.
        metrics: Workflow metrics updated with the judge's.
        replaced_reward: A reward the workflow returned that the judge's replaced (the
            judge wins, as in AgentScope's tuner), for `check` to say; else None.
    """

    response: Any
    reward: float
    metrics: dict[str, float]
    replaced_reward: Any = None
    #: The workflow's own metrics (``metrics`` without the judge's): rescore, judging a
    #: saved response again, keeps them and replaces the judge's.
    workflow_metrics: dict[str, float] = attrs.field(factory=dict)
    #: What the workflow and judge printed (`tunedsl.rollout.output`), or None.
    output: str | None = None
    #: The turns the workflow marked on the trained model (``model.end_turn``), their
    #: ``calls`` counted from the rollout's first call.
    turns: tuple[Turn, ...] = ()
    #: The experiment's judge is a ``@group_judge`` that has not scored it yet: its reward
    #: is NaN until `tunedsl.rollout.group.judge_group` scores its group.
    awaiting_group: bool = False


def label_of(fn: Callable[..., Any]) -> str:
    """How errors name a workflow or judge: ``@workflow solve (file.py:12)``."""
    spec: FunctionSpec | None = spec_of(fn)
    if spec is None:
        return getattr(fn, "__qualname__", repr(fn))
    return f"@{spec.kind} {spec.qualname} ({spec.where})"


def _optional_arguments(fn: Callable[..., Any], auxiliary_models: Mapping[str, Any],
                        params: Mapping[str, Any]) -> dict[str, Any]:
    spec: FunctionSpec | None = spec_of(fn)
    if spec is None or not spec.optional_params:
        return {}
    wanted = spec.optional_params
    arguments: dict[str, Any] = {}
    if "auxiliary_models" in wanted:
        arguments["auxiliary_models"] = adapt(fn, "auxiliary_models", auxiliary_models)
    if "params" in wanted:
        arguments["params"] = params
    if "logger" in wanted:
        arguments["logger"] = logging.getLogger(f"tunedsl.user.{fn.__name__}")
    return arguments


def _raised_by_user(exc: BaseException) -> bool:
    """Whether a BaseException came from the user's code rather than from outside it:
    Ctrl-C always stops the run, and a cancellation only fails the rollout when nobody
    cancelled the task (a timeout or shutdown must go on; Python 3.11+ can tell). A
    GeneratorExit is the coroutine being closed when no task runs it (garbage collected);
    inside a running task nothing closes it, so the user's code raised it."""
    if isinstance(exc, KeyboardInterrupt):
        return False
    if isinstance(exc, GeneratorExit):
        return asyncio.current_task() is not None
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        cancelling = getattr(task, "cancelling", None)
        return cancelling is not None and cancelling() == 0
    return True


async def _call(fn: Callable[..., Any], stage: str, *, replying: Any = None,
                **kwargs: Any) -> Any:
    """``fn(**kwargs)``, what it raises said as its `RolloutError`; ``replying``: the models
    it drives (by name), whose reply function (a test's `ScriptedModel`) is named when the
    loop was held there, not in ``fn``."""
    try:
        return await fn(**kwargs)
    except BaseException as exc:  # SystemExit, CancelledError ... from user code too
        if not _raised_by_user(exc):
            raise
        script = _held_by_a_reply_function(exc, replying)
        if script is not None:
            assert isinstance(exc, RolloutBlocked)
            raise RolloutError(
                f"{script}, called by {label_of(fn)}'s model, {exc.held()}: a scripted "
                f"model's reply function runs on the event loop, where a served model's reply "
                f"never waits; return the reply at once, or give rollout_timeout more",
                stage=stage, user_traceback=user_traceback(exc)) from exc
        said = as_exit_in_task(exc)  # (an exit that left the loop from a task it awaited)
        leaf = _first_of_group(said)
        inner = "" if leaf is said else (f"; the first: {type(leaf).__name__}: "
                                         f"{shortened(exception_text(leaf), IN_TRACEBACK)}")
        raise RolloutError(
            f"{label_of(fn)} raised {type(said).__name__}{_text_of(said)}{inner}"
            f"{_hint(leaf)}",
            stage=stage, user_traceback=user_traceback(exc),
        ) from exc


def _held_by_a_reply_function(exc: BaseException, model: Any) -> str | None:
    """``the ScriptedModel's reply function NAME (file:line)`` when ``exc`` is the watchdog's
    `RolloutBlocked` raised inside that function: a test's slow model, simulated with
    ``time.sleep``, was blamed on the workflow (sweep 48 B-W6); else None."""
    import functools

    from ..models.scripted import ScriptedModel

    models = list(model.values()) if isinstance(model, Mapping) else [model]
    if not isinstance(exc, RolloutBlocked):
        return None
    for scripted in models:
        if not isinstance(scripted, ScriptedModel) or scripted.reply_function is None:
            continue
        function: Any = scripted.reply_function
        while isinstance(function, functools.partial):  # (a delay given by partial)
            function = function.func
        if not inspect.isfunction(function) and not inspect.ismethod(function):
            function = vars(type(function)).get("__call__")  # (an object that answers)
        # The user's own function under its decorators (functools.wraps' __wrapped__),
        # innermost first: a decorated one was named by the decorator's wrapper (sweep 50).
        wrapped = [function]
        while hasattr(wrapped[-1], "__wrapped__") and len(wrapped) < 32:
            wrapped.append(wrapped[-1].__wrapped__)
        frames = set()
        traceback = exc.__traceback__
        while traceback is not None:
            frames.add(traceback.tb_frame.f_code)
            traceback = traceback.tb_next
        for candidate in reversed(wrapped):
            code = getattr(candidate, "__code__", None)
            if code is not None and code in frames:
                named = f" (the model {scripted.name!r})" if scripted.name != "scripted" \
                    else ""
                return (f"the ScriptedModel's reply function {code.co_name} "
                        f"({where(candidate)}){named}")
    return None


def _text_of(exc: BaseException) -> str:
    """``: TEXT`` (shortened), or nothing for an exception without text (a bare ``raise
    GeneratorExit`` read "raised GeneratorExit: ;" before the next clause)."""
    text = exception_text(exc)
    cause = exc.__cause__
    if type(exc).__module__.split(".")[0] == "openai" and cause is not None and \
            text == "Connection error." and exception_text(cause):
        # (the openai package says every failure to reach a server in those words alone;
        # what happened is its cause's: "Server disconnected", "Connection refused")
        text = f"{text[:-1]}: {exception_text(cause)}"
    return f": {shortened(text, IN_TRACEBACK)}" if text else ""


def _first_of_group(exc: BaseException) -> BaseException:
    """The first exception an exception group holds, however deep (a ``TaskGroup``'s
    "unhandled errors in a TaskGroup (1 sub-exception)" says nothing of what failed);
    ``exc`` itself when it is no group."""
    group = getattr(builtins, "BaseExceptionGroup", None)  # (Python 3.11+)
    while group is not None and isinstance(exc, group) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


#: tunedsl's model classes, as an agent framework that calls its model names them.
_MODEL_CLASSES = ("OpenAIChatModel", "ScriptedModel", "LocalChatModel")


def _hint(exc: BaseException) -> str:
    """The fix for a workflow's common mistake that Python's words leave unsaid, else
    ``""``: an AgentScope agent handed tunedsl's model itself (the workflow's ``model`` not
    annotated ``ChatModelBase``), a model call not awaited, ``params`` edited in place, a
    signal handler added off the main thread, an endpoint's status its error leaves out."""
    said = exception_text(exc)  # (an exception whose str() raises, too)
    if isinstance(exc, TypeError) and "agentscope" in sys.modules and any(
            said == f"'{name}' object is not callable" for name in _MODEL_CLASSES):
        return ("; an AgentScope agent calls its model: annotate the parameter (model: "
                "ChatModelBase) to be handed an AgentScope model, or give the agent "
                "tunedsl.as_agentscope(model)")
    if isinstance(exc, AttributeError) and said.startswith("'coroutine' object has no "):
        return ("; a call such as model.chat(...) was not awaited: write reply = await "
                "model.chat(...)")
    if isinstance(exc, RuntimeError) and said.startswith("set_wakeup_fd only works in main "
                                                         "thread"):
        return ("; asyncio adds a signal handler (loop.add_signal_handler) only in a "
                "process's main thread, and a rollout may run in another: check runs it in a "
                "thread of its own, and Ray runs a Trinity rollout worker's event loop in one; "
                "guard the call (except RuntimeError), or leave it out")
    if isinstance(exc, TypeError) and said == ("'mappingproxy' object does not support item "
                                               "assignment"):
        return ("; params are read-only, shared by every rollout: copy them first, "
                "p = dict(params)")
    return _output_field_said(exc, said) or _status_said(exc, said)


def _output_field_said(exc: BaseException, said: str) -> str:
    """``; WorkflowOutput takes response, reward, metrics (did you mean 'reward'?)`` for a
    field of tunedsl's outputs misspelt (Python names the word, not the choices), else
    ``""``."""
    import re

    match = re.fullmatch(r"(\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'",
                         said)
    outputs = {cls.__name__: cls for cls in (WorkflowOutput, JudgeOutput)}
    if not isinstance(exc, TypeError) or match is None or match[1] not in outputs:
        return ""
    fields = [field.name for field in attrs.fields(outputs[match[1]])]
    return f"; {match[1]} takes {', '.join(fields)}{did_you_mean(match[2], fields)}"


def _status_said(exc: BaseException, said: str) -> str:
    """``; POST URL answered HTTP 503`` for an openai client's error whose text leaves out
    the status (a plain-text body, "busy", is all it says), else ``""``."""
    openai = sys.modules.get("openai")
    if openai is None or not isinstance(exc, openai.APIStatusError) or \
            str(exc.status_code) in said:
        return ""
    url = exc.request.url  # (without its query: nothing of a key's in the line)
    return f"; {exc.request.method} {url.scheme}://{url.netloc.decode()}{url.path} answered " \
           f"HTTP {exc.status_code}"


#: Where the rest of a shortened exception message is kept.
IN_TRACEBACK = "in the rollout's traceback"


#: Why rollouts ended cancelled with no interrupt: code inside one cancelled its own task
#: (asyncio counts that as a cancellation from outside, which must go on stopping them).
CANCELLED_INSIDE = ("the workflow or judge (or a library it calls) cancelled the task its "
                    "rollout runs in (asyncio.current_task().cancel()) without taking it "
                    "back, which stops every rollout; raise an exception to fail one rollout")
#: What a command says when the user's code stopped the event loop its rollouts share.
LOOP_STOPPED = ("the workflow or judge (or a library it calls) stopped the event loop "
                "(loop.stop()), which ends every rollout; raise an exception to fail one "
                "rollout, or return to end it")


def stopped_the_loop(error: BaseException) -> bool:
    """Whether ``error`` is what ``asyncio.run`` raises when code it ran called
    ``loop.stop()`` (an internal error otherwise)."""
    return isinstance(error, RuntimeError) and \
        str(error) == "Event loop stopped before Future completed."




def _is_number(value: Any) -> bool:
    """A real number, NumPy's scalars included (a bool is refused: see `_reward`)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, _numpy_bools()))


def _numpy_bools() -> tuple[type, ...]:
    """NumPy's bool scalar type, when NumPy is already imported (it is not imported here)."""
    numpy = sys.modules.get("numpy")
    return (numpy.bool_,) if numpy is not None else ()


def _short_repr() -> reprlib.Repr:
    """repr() cut to a line: a value shown in a message (a 100k-character string, a dict of
    thousands of metrics, a 400-digit number) must not become the message."""
    short = reprlib.Repr()
    short.maxstring = short.maxother = 60
    short.maxlong = 40
    return short


_SHORT = _short_repr()
#: How a message shows a value the user returned (`_short_repr`).
shown_value = _SHORT.repr


def _too_large_for_float(value: Any) -> bool:
    """An exact number (an int, a Fraction) beyond float's range, such as 10**400."""
    try:
        float(value)
    except OverflowError:
        return True
    return False


def _reward(value: Any, fn: Callable[..., Any], stage: str) -> float:
    # A bool is an int to Python, but True as a reward is almost always a forgotten float().
    if isinstance(value, (bool, *_numpy_bools())):
        raise RolloutError(f"{label_of(fn)} returned the reward {value!r}, a bool; a reward must "
                           f"be a finite number: write float({value!r}) or 1.0 / 0.0",
                           stage=stage)
    number = _is_number(value) and not _too_large_for_float(value)
    if number and math.isfinite(value) and abs(value) <= LARGEST_REWARD:
        return float(value)
    if inspect.iscoroutine(value):
        value.close()  # never awaited: say so here, not in a RuntimeWarning later
        raise RolloutError(f"{label_of(fn)} returned a coroutine as its reward: a call was not "
                           f"awaited; write reward=await ...", stage=stage)
    if _is_number(value) and (not number or math.isfinite(value)):
        shown = repr(float(value)) if number else shown_value(value)
        raise RolloutError(f"{label_of(fn)} returned the reward {shown}; a reward must "
                           f"be at most {LARGEST_REWARD:g} in size (larger ones overflow the "
                           f"group's statistics): scale it down", stage=stage)
    # A NumPy number is shown as the float it is (its repr names its type).
    if number:
        shown, fix = repr(float(value)), ""
    else:
        shown, fix = described(value, shown_value(value)), ""
        if not isinstance(value, (str, bytes)) and _converts(value):
            # A 0-d tensor or array, a Decimal: a number, in a type the trainer cannot take.
            fix = ": convert it with float(...)"
    raise RolloutError(f"{label_of(fn)} returned the reward {shown}; a reward must be a "
                       f"finite number{fix}", stage=stage)


def _converts(value: Any) -> bool:
    """Whether float(value) gives a finite number (a 0-d tensor or array, a Decimal)."""
    import warnings

    try:
        with warnings.catch_warnings():  # torch warns converting a tensor that needs grad
            warnings.simplefilter("ignore")
            return math.isfinite(float(value))
    except Exception:  # noqa: BLE001 - any object's __float__ may raise anything
        return False


def _response(value: Any, fn: Callable[..., Any]) -> Any:
    """The workflow's response; a coroutine there is a model call that was not awaited."""
    if inspect.iscoroutine(value):
        value.close()  # never awaited: say so here, not in a RuntimeWarning later
        raise RolloutError(f"{label_of(fn)} returned a coroutine as its response: a call such "
                           f"as model.chat(...) was not awaited; write reply = await "
                           f"model.chat(...)", stage="workflow")
    problem = agent_stopped_waiting(value)
    if problem is not None:
        raise RolloutError(f"{label_of(fn)} returned {problem}", stage="workflow")
    return value


T = TypeVar("T")


def _inspected(check: Callable[[], T], value: Any, fn: Callable[..., Any], stage: str,
               what: str) -> T:
    """``check()`` of a value the user's code returned, whose own methods it calls (a str
    subclass's ``strip``, a mapping's ``items``): what they raise fails this rollout,
    naming the value, rather than ending the command as tunedsl's own error."""
    try:
        return check()
    except RolloutError:
        raise
    except Exception as exc:
        if not raised_outside_tunedsl(exc):
            raise
        raise RolloutError(
            f"{label_of(fn)} returned {what} (a {type(value).__name__}) whose own code raised "
            f"{type(exc).__name__}: {shortened(exception_text(exc), IN_TRACEBACK)}",
            stage=stage, user_traceback=user_traceback(exc)) from exc


def _metrics(value: Any, fn: Callable[..., Any], stage: str) -> dict[str, float]:
    if value is None:
        return {}
    wrong = None
    if isinstance(value, Mapping):
        wrong = next(((k, v) for k, v in value.items() if not isinstance(k, str)
                      or not _is_number(v) or _too_large_for_float(v)), None)
        unwritable = next((k for k in value if isinstance(k, str)
                           and holds_a_lone_surrogate(k)), None)
        if unwritable is not None:  # (eval escapes it; a run's TensorBoard writer crashed)
            raise RolloutError(f"{label_of(fn)} returned a metric named {unwritable!r}, which "
                               f"holds a lone surrogate (a \\ud800-\\udfff code point "
                               f"without its pair) no log or chart can hold as text; name it "
                               f"in plain text", stage=stage)
        unnamed = next((k for k in value if isinstance(k, str) and (
            not k.strip() or not k.isprintable())), None)
        if unnamed is not None:  # (logged as "rollout//mean", or a name over two lines)
            raise RolloutError(f"{label_of(fn)} returned a metric named {unnamed!r}, which no "
                               f"chart or log shows as a name (blank, or holding a line "
                               f"break or another control character); name it in plain text",
                               stage=stage)
        if wrong is None:
            metrics = {k: float(v) for k, v in value.items()}
            endless = next((k for k, v in metrics.items() if not math.isfinite(v)), None)
            if endless is None:
                return metrics
            # no results line or metrics file holds it (JSON): it was saved as null
            raise RolloutError(f"{label_of(fn)} returned the metric {endless!r} = "
                               f"{metrics[endless]}; a metric must be a finite number (leave "
                               f"out one that has no value)", stage=stage)
    shown = shown_value(value)
    if wrong is not None and len(value) > _SHORT.maxdict:  # shown in part: name it
        shown += f" (among them {shown_value(wrong[0])}: {shown_value(wrong[1])})"
    flag = "" if wrong is None or not isinstance(wrong[1], bool) else \
        f" ({shown_value(wrong[0])} is a bool; write float({wrong[1]!r}))"
    raise RolloutError(f"{label_of(fn)} returned metrics {shown}; metrics must map names to "
                       f"numbers{flag}", stage=stage)


def _own_copy(task: Mapping[str, Any]) -> Any:
    """A copy of ``task`` no other rollout shares (a row of plain values, as most are, needs
    no deep copy: strings and numbers cannot change)."""
    if isinstance(task, dict) and all(isinstance(value, (str, int, float, bool, type(None)))
                                      for value in task.values()):
        return dict(task)
    try:
        return copy.deepcopy(task)
    except RecursionError:  # a row JSON readers take, nested past Python's copy
        raise RolloutError("the task is nested too deep for tunedsl to copy it for the "
                           "rollout (hundreds of levels); flatten that row of the data",
                           stage="workflow") from None


def _changed_keys(given: Mapping[str, Any], task: Any) -> list[str] | None:
    """The keys of the data's task ``given`` whose value the workflow changed in its copy
    ``task`` (or added, or removed); None when that cannot be told (a value whose ``==``
    fails, or answers no truth value: an array's)."""
    try:
        if task == given:  # (the rows of plain values most tasks are, at once)
            return []
    except Exception:  # noqa: BLE001 - an array's == answers no truth value: key by key
        pass
    try:
        keys = [*given, *(key for key in task if key not in given)]
        return [str(key) for key in keys if key not in task or key not in given
                or not _same(task[key], given[key])]
    except Exception:  # noqa: BLE001 - values that cannot be compared
        return None


def _same(one: Any, other: Any) -> bool:
    """``one == other`` as one truth value: an array's elementwise answer is whether every
    element is equal (and shapes match); a value that is itself (a NaN) is the same."""
    if one is other:
        return True
    if getattr(one, "shape", None) != getattr(other, "shape", None):
        return False  # (arrays of other shapes: no elementwise answer)
    equal = one == other
    if isinstance(equal, bool):
        return equal
    return bool(equal.all()) if hasattr(equal, "all") else bool(equal)


#: The workflows said to change their task (once each in a process; weakly held: an id
#: would be another function's once this one is gone).
_CHANGED_TASKS: weakref.WeakSet[Any] = weakref.WeakSet()


def say_metrics_both_give(workflow: Any, judge: Any, own: Mapping[str, float],
                          judged: Mapping[str, float]) -> None:
    """Say once per judge that it and the workflow give metrics of one name with other
    values: the judge's is kept (as its reward replaces the workflow's), which was not said
    (sweep 47 B-W2)."""
    both = sorted(name for name in set(own) & set(judged) if own[name] != judged[name])
    if not both or not _first_time(judge, _BOTH_GIVE):
        return
    print(f"note: {label_of(workflow)} and {label_of(judge)} both give the metric "
          f"{_a_few(both)}; the judge's is kept, as its reward is: give one of them another "
          f"name to keep both", file=own_stderr())


#: The judges `say_metrics_both_give` has said so of.
_BOTH_GIVE: weakref.WeakSet[Any] = weakref.WeakSet()


def _first_time(function: Any, said: weakref.WeakSet[Any]) -> bool:
    """Whether a note about ``function`` is said now: not yet in ``said`` (and now in it);
    one that takes no weak reference is said each time."""
    with contextlib.suppress(TypeError):
        if function in said:
            return False
        said.add(function)
    return True


def _a_few(names: list[str]) -> str:
    """The first three ``names`` quoted, and `` ...`` for more."""
    return ", ".join(repr(name) for name in names[:3]) + (" ..." if len(names) > 3 else "")


def _say_task_changed(workflow: Any, keys: list[str]) -> None:
    """Say once per workflow that it changed its task, which its judge does not see: the
    results keep the data's task, and rescore judges against that (a reward judged on a
    changed answer was kept beside the unchanged one, and rescored otherwise)."""
    if not _first_time(workflow, _CHANGED_TASKS):
        return
    print(f"warning: {label_of(workflow)} changed its task ({_a_few(keys)}); the judge is "
          f"given the task as the data holds it, as the results keep it and rescore judges "
          f"it: pass what the judge needs in the response", file=own_stderr())


@attrs.define
class SoFar:
    """What a rollout has reached as it goes, for whoever stops it from outside (a
    timeout): the function running (the workflow, then the judge appended as it starts),
    the buffer what its code prints goes to, and the workflow's response and own metrics
    once it finished (which a judge stopped keeps with its failure)."""

    running: list[Callable[..., Any]] = attrs.Factory(list)
    printed: list[io.StringIO] = attrs.Factory(list)
    finished: tuple[Any, dict[str, float]] | None = None


async def run_rollout(
    agent: Agent,
    task: Mapping[str, Any],
    model: Any,
    auxiliary_models: Mapping[str, Any] | None = None,
    *,
    so_far: SoFar | None = None,
    ends_model: bool = False,
    holds_model: bool = False,
) -> RolloutResult:
    """Run the workflow on one task with ``model``, then score it with the judge.

    Args:
        agent: The workflow, judge and parameters.
        task: One row of the dataset.
        model: The `ChatModel` the workflow drives (handed over as an AgentScope chat
            model bound to it when the workflow's ``model`` is annotated with AgentScope's
            ``ChatModelBase``; likewise ``auxiliary_models``).
        auxiliary_models: Frozen `ChatModel` s by name, for the workflow and the judge.
        so_far: Gets what the rollout reaches as it goes (`SoFar`), for whoever stops it
            from outside (a timeout).
        ends_model: ``model`` was made for this rollout alone: it is ended with it
            (`end_model`), so that a workflow keeping it for later rollouts fails in words.
        holds_model: ``model`` is this rollout's while it runs, not ended after (the test
            kit, which leaves a model the user hands it usable): a model kept from another
            rollout and called in this one's task fails as with ``ends_model``.

    Raises:
        RolloutError: the workflow or judge raised or returned an unusable value.
    """
    marks = _marks(model)
    start = marks.position() if marks is not None else (0, 0)
    owner = begin_rollout(model) if (ends_model or holds_model) and \
        isinstance(model, EndsWithRollout) else None
    with captured() as buffer, rollout_code():  # what it prints is kept with it, not shown
        so_far = SoFar() if so_far is None else so_far
        so_far.printed.append(buffer)
        try:
            result = await _scored(agent, task, model, auxiliary_models, so_far)
        except RolloutError as error:
            error.output = kept(buffer)
            if error.stage == "judge" and error.finished_workflow is None:
                error.finished_workflow = so_far.finished
            raise
        finally:
            if owner is not None:
                leave_rollout(owner)
            if ends_model:
                end_model(model)
    return attrs.evolve(result, output=kept(buffer),
                        turns=marks.since(*start) if marks is not None else ())


def end_model(model: Any) -> None:
    """End ``model`` with the rollout it was made for: its later calls fail (tunedsl's
    models; a model of the user's own is left as it is)."""
    if isinstance(model, EndsWithRollout):
        model.end_rollout()


def _turns_ended(auxiliary_models: Mapping[str, Any]) -> dict[str, int]:
    return {name: len(found.turns) for name, helper in auxiliary_models.items()
            if (found := _marks(helper)) is not None}


def _refuse_helper_turns(auxiliary_models: Mapping[str, Any], before: dict[str, int],
                         fn: Callable[..., Any], stage: str) -> None:
    """Turns are the trained model's: one ended on an auxiliary model, by the workflow or
    the judge, is named with the function that ended it."""
    for name, turns in _turns_ended(auxiliary_models).items():
        if turns > before[name]:
            raise RolloutError(
                f"{label_of(fn)} ended a turn on the auxiliary model {name!r}; turns are the "
                f"trained model's (its calls are what trains): call model.end_turn(...)"
                + (" in the workflow" if stage == "judge" else ""), stage=stage)


def _marks(model: Any) -> TurnMarks | None:
    """The turns a model records (tunedsl's models do; a model of the user's own may not)."""
    marks = getattr(model, "turns", None)
    return marks if isinstance(marks, TurnMarks) else None


async def _scored(agent: Agent, task: Mapping[str, Any], model: Any,
                  auxiliary_models: Mapping[str, Any] | None,
                  so_far: SoFar) -> RolloutResult:
    """`run_rollout` without the capture of what the code prints."""
    # Each rollout gets its own copy of the task, as on Trinity (where tasks travel through
    # Ray): a workflow that appends to task["messages"] must not leak into its group.
    given, task = task, _own_copy(task)
    auxiliary_models = MappingProxyType(dict(auxiliary_models or {}))
    helper_turns = _turns_ended(auxiliary_models)
    output = await _call(agent.workflow, "workflow", task=task,
                         replying={"": model, **auxiliary_models},
                         model=adapt(agent.workflow, "model", model),
                         **_optional_arguments(agent.workflow, auxiliary_models, agent.params))
    _refuse_helper_turns(auxiliary_models, helper_turns, agent.workflow, "workflow")
    if not isinstance(output, WorkflowOutput):
        _unawaited(output, agent.workflow, "workflow")
        raise RolloutError(f"{label_of(agent.workflow)} returned {type(output).__name__}; return "
                           f"WorkflowOutput(response=...)", stage="workflow")
    _inspected(lambda: _response(output.response, agent.workflow), output.response,
               agent.workflow, "workflow", "a response")
    metrics = _inspected(lambda: _metrics(output.metrics, agent.workflow, "workflow"),
                         output.metrics, agent.workflow, "workflow", "metrics")
    own = dict(metrics)  # (the judge's are added to metrics)
    if is_group_judge(agent.judge):  # scored with its group (`rollout.group`)
        return RolloutResult(response=output.response, metrics=metrics, reward=math.nan,
                             replaced_reward=output.reward, awaiting_group=True,
                             workflow_metrics=own)
    if agent.judge is None:
        if output.reward is None:
            raise RolloutError(
                f"{label_of(agent.workflow)} returned no reward and the experiment has no judge; "
                f"return WorkflowOutput(reward=...) or add a @judge", stage="workflow")
        return RolloutResult(response=output.response, metrics=metrics,
                             reward=_inspected(
                                 lambda: _reward(output.reward, agent.workflow, "workflow"),
                                 output.reward, agent.workflow, "workflow", "a reward"),
                             workflow_metrics=own)
    so_far.finished = (output.response, own)  # (kept if the judge fails: sweep 48 B-L1)
    so_far.running.append(agent.judge)
    changed = _changed_keys(given, task)
    if changed:  # (said; the judge scores against the data's task, as rescore does, even
        # when what changed cannot be told: a column of arrays)
        _say_task_changed(agent.workflow, changed)
    if changed is None or changed:
        task = _own_copy(given)
    verdict = await _call(agent.judge, "judge", task=task, response=output.response,
                          replying=auxiliary_models,
                          **_optional_arguments(agent.judge, auxiliary_models, agent.params))
    _refuse_helper_turns(auxiliary_models, helper_turns, agent.judge, "judge")
    if not isinstance(verdict, JudgeOutput):
        _unawaited(verdict, agent.judge, "judge")
        raise RolloutError(f"{label_of(agent.judge)} returned {type(verdict).__name__}; return "
                           f"JudgeOutput(reward=...)", stage="judge")
    judge = agent.judge
    judged = _inspected(lambda: _metrics(verdict.metrics, judge, "judge"),
                        verdict.metrics, judge, "judge", "metrics")
    say_metrics_both_give(agent.workflow, judge, own, judged)
    metrics.update(judged)
    return RolloutResult(response=output.response, metrics=metrics,
                         reward=_inspected(lambda: _reward(verdict.reward, judge, "judge"),
                                           verdict.reward, judge, "judge", "a reward"),
                         replaced_reward=output.reward, workflow_metrics=own)


async def run_bounded_rollout(
    agent: Agent,
    task: Mapping[str, Any],
    model: Any,
    auxiliary_models: Mapping[str, Any] | None = None,
    *,
    seconds: float,
    watchdog: Watchdog | None = None,
    ends_model: bool = False,
) -> RolloutResult:
    """`run_rollout` within ``rollout_timeout`` = ``seconds`` (`within`), which holds
    even for code that catches the cancellation, and for code that blocks the event loop
    when a ``watchdog`` watches it: every backend and eval bound their rollouts so.

    Raises:
        RolloutError: as `run_rollout`, or the rollout ran past ``seconds`` (what it
            returned after that is no result: it timed out).

    With ``ends_model``, ``model`` is ended with the rollout, as `run_rollout` does, and
    also when the rollout is given up past its deadline while it still runs.
    """
    so_far = SoFar(running=[agent.workflow])
    running, printed = so_far.running, so_far.printed
    at_deadline: list[Callable[..., Any]] = []  # what was running then
    try:
        return await within(seconds, lambda: run_rollout(agent, task, model, auxiliary_models,
                                                         so_far=so_far,
                                                         ends_model=ends_model),
                            watchdog, at_deadline=lambda: at_deadline.extend(running))
    except (asyncio.TimeoutError, RolloutBlocked) as error:
        said = f"timed out after {seconds:g}s (rollout_timeout); make it faster or raise " \
            f"rollout_timeout" if isinstance(error, asyncio.TimeoutError) else str(error)
        if isinstance(error, TimedOut) and error.caught:  # it ran on after being cancelled
            said += f"; {error}"
            running = at_deadline or running  # what caught it, not a judge it then ran
        stopped = RolloutError(f"{label_of(running[-1])} {said}", stage=_stage(running))
        # what it printed before it stopped (or so far, when abandoned still running)
        stopped.output = kept(printed[-1]) if printed else None
        if stopped.stage == "judge":  # (the judge's time ran out, not the workflow's:
            stopped.finished_workflow = so_far.finished  # its response is kept)
        raise stopped from error
    finally:
        if ends_model:
            end_model(model)


def _unawaited(value: Any, fn: Callable[..., Any], stage: str) -> None:
    """A coroutine returned where a result belongs: an ``await`` is missing. It is closed
    (Python's "never awaited" warning pointed into tunedsl, three lines before the error)
    and said so."""
    if inspect.iscoroutine(value):
        name = getattr(value, "__name__", "a coroutine")
        value.close()
        raise RolloutError(f"{label_of(fn)} returned the coroutine {name}() unawaited; write "
                           f"return await {name}(...)", stage=stage)


def _stage(running: list[Callable[..., Any]]) -> str:
    return "judge" if len(running) > 1 else "workflow"
