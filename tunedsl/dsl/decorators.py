"""``@workflow``, ``@judge``, ``@group_judge`` and ``@experiment``.

The function decorators return the very function they were given, with a
`FunctionSpec` attached, so users keep calling their functions directly in tests.
Everything a signature alone can tell is checked here, at decoration time, with
the function's file:line in the message; graph-wide checks wait for the build.
"""

from __future__ import annotations

import inspect
import os
import sys
import tokenize
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from ..errors import ConfigError, SignatureError, did_you_mean, display_path
from .records import Model
from .setting import FUNCTION, MODELS, RECORD, TABLE
from .settings_table import EXPERIMENT_ATTRIBUTES, SETTINGS_BY_NAME

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)

#: The attribute that carries tunedsl's metadata on a decorated function or class.
SPEC_ATTR = "__tunedsl__"


@attrs.frozen(kw_only=True)
class FunctionSpec:
    """What tunedsl knows about a decorated workflow or judge function.

    ``ref`` is the import string that finds the function again on another process
    or machine (``pkg.mod:func``, or ``/abs/path/file.py:func`` for scripts).
    """

    kind: str
    module: str
    qualname: str
    ref: str
    file: str
    line: int
    optional_params: frozenset[str] = frozenset()

    @property
    def where(self) -> str:
        """``file:line`` of the definition, as a user would open it."""
        return f"{display_path(self.file)}:{self.line}"


@attrs.frozen
class _Shape:
    required: tuple[str, ...]
    optional: tuple[str, ...]

    def example(self, name: str) -> str:
        named = name if name.isidentifier() else "NAME"  # (a lambda's "<lambda>": sweep 49)
        return f"async def {named}({', '.join(self.required)})"


_SHAPES = {
    "workflow": _Shape(("task", "model"), ("auxiliary_models", "params", "logger")),
    "judge": _Shape(("task", "response"), ("auxiliary_models", "params", "logger")),
    "group_judge": _Shape(("task", "responses"), ("auxiliary_models", "params", "logger")),
}
#: What each kind of function returns, as its errors say it.
RETURNS = {"workflow": "WorkflowOutput(...)", "judge": "JudgeOutput(...)",
           "group_judge": "a list of JudgeOutput(...), one per response"}
#: The kinds of function an experiment's ``judge`` may be.
JUDGE_KINDS = ("judge", "group_judge")


def _source_location(obj: Any) -> tuple[str, int]:
    # Read statically: a class whose metaclass answers every attribute (__getattr__) would
    # hand back its answer as the code object.
    code = (obj.__code__ if inspect.isfunction(obj)
            else inspect.getattr_static(obj, "__code__", None))
    if inspect.iscode(code):
        return code.co_filename, code.co_firstlineno
    try:
        return inspect.getsourcefile(obj) or "<unknown>", inspect.getsourcelines(obj)[1]
    # A class from code run with exec() is looked for in a file that may not hold it, or
    # not be Python at all (a README's example): its module stands in.
    except (OSError, TypeError, SyntaxError, tokenize.TokenError):
        return getattr(inspect.getmodule(obj), "__file__", None) or "<unknown>", 0


def where(obj: Any) -> str:
    """``file:line`` of a function or class, relative to the current directory."""
    file, line = _source_location(obj)
    return f"{display_path(file)}:{line}"


def import_string_of(obj: Any) -> str:
    """The import string that finds ``obj`` again (a file path for scripts)."""
    module = sys.modules.get(obj.__module__)
    # tunedsl.config.importer marks modules it loaded from a file path.
    path = getattr(module, "__tunedsl_path__", None)
    if path is None and obj.__module__ == "__main__":
        path = getattr(module, "__file__", None)
    if path is not None:
        return f"{os.path.abspath(path)}:{obj.__qualname__}"
    return f"{obj.__module__}:{obj.__qualname__}"


def spec_of(obj: Any) -> Any:
    """The tunedsl metadata attached to ``obj`` itself (never inherited), or None."""
    try:
        return vars(obj).get(SPEC_ATTR)
    except TypeError:  # objects without __dict__
        return None


def _check_signature(fn: Callable[..., Any], kind: str, label: str) -> frozenset[str]:
    shape = _SHAPES[kind]
    example = shape.example(fn.__name__)
    params = inspect.signature(fn).parameters
    for param in params.values():
        if param.kind is param.POSITIONAL_ONLY:
            raise SignatureError(
                f"{label} makes '{param.name}' positional-only (/); tunedsl passes arguments "
                f"by name, so remove the '/': {example}"
            )
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            star = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise SignatureError(
                f"{label} takes {star}{param.name}; tunedsl passes arguments by name, "
                f"so list them: {example}"
            )
    allowed = shape.required + shape.optional
    if kind == "judge" and "responses" in params:
        raise SignatureError(f"{label} takes 'responses', as a judge of a task's whole group "
                             f"does: decorate it with @group_judge (a @judge scores one "
                             f"response: {example})")
    for name in params:
        if name not in allowed:
            raise SignatureError(
                f"{label} has an unknown parameter '{name}'{did_you_mean(name, allowed)}; "
                f"a {kind} takes {', '.join(shape.required)} and optionally "
                f"{', '.join(shape.optional)}"
            )
    for name in shape.required:
        if name not in params:
            raise SignatureError(f"{label} is missing the parameter '{name}': write {example}")
    return frozenset(name for name in shape.optional if name in params)


def _decorate(fn: Any, kind: str) -> Any:
    example = _SHAPES[kind].example("f")
    if inspect.isclass(fn):
        raise SignatureError(
            f"@{kind} cannot decorate the class {fn.__qualname__} ({where(fn)}); "
            f"decorate a function: {example}"
        )
    if not inspect.isfunction(fn):
        raise SignatureError(f"@{kind} expects a function, got {fn!r}; write {example}")
    label = f"@{kind} {fn.__qualname__} ({where(fn)})"
    existing = spec_of(fn)
    if existing is not None:
        raise SignatureError(
            f"{fn.__qualname__} ({where(fn)}) is already decorated with @{existing.kind}; "
            f"apply one tunedsl decorator, once"
        )
    if inspect.isasyncgenfunction(fn):
        raise SignatureError(f"{label} is an async generator (it yields); a "
                             f"{kind.replace('_', ' ')} returns once: return {RETURNS[kind]} "
                             f"instead of yielding")
    if not inspect.iscoroutinefunction(fn):
        raise SignatureError(
            f"{label} must be async: write {_SHAPES[kind].example(fn.__name__)}"
        )
    optional = _check_signature(fn, kind, label)
    file, line = _source_location(fn)
    setattr(fn, SPEC_ATTR, FunctionSpec(
        kind=kind, module=fn.__module__, qualname=fn.__qualname__,
        ref=import_string_of(fn), file=file, line=line, optional_params=optional,
    ))  # fmt: skip
    return fn


def _called_bare(kind: str) -> SignatureError:
    """The error for ``@workflow()`` / ``@judge()``: called without the function (the
    importer puts the user's line before it)."""
    return SignatureError(f"@{kind}() takes no arguments: write @{kind} without "
                          f"parentheses above {_SHAPES[kind].example('f')}")


def workflow(fn: F | None = None) -> F:
    """Mark an async agent function as the code to tune.

    The function must look like ``async def f(task, model[, auxiliary_models][, params]
    [, logger])`` and return a `WorkflowOutput`. It is returned unchanged
    (``workflow(f) is f``).
    """
    if fn is None:  # @workflow() with parentheses
        raise _called_bare("workflow")
    return _decorate(fn, "workflow")


def judge(fn: F | None = None) -> F:
    """Mark an async reward function that scores a workflow's response.

    The function must look like ``async def f(task, response[, auxiliary_models]
    [, params][, logger])`` and return a `JudgeOutput`. It is returned unchanged
    (``judge(f) is f``).
    """
    if fn is None:  # @judge() with parentheses
        raise _called_bare("judge")
    return _decorate(fn, "judge")


def group_judge(fn: F | None = None) -> F:
    """Mark an async reward function that scores a task's whole group of responses at
    once: an LLM that ranks the attempts (RULER), a reward relative to the group.

    The function must look like ``async def f(task, responses[, auxiliary_models]
    [, params][, logger])``: ``responses`` is the list of the group's responses (the
    rollouts of one task that did not fail), and it returns one `JudgeOutput` per
    response, in their order. It goes where a ``@judge`` goes (``judge = f``); the group
    is the algorithm's ``group_size`` rollouts in training and ``--repeat`` in ``eval``.
    It is returned unchanged (``group_judge(f) is f``).
    """
    if fn is None:  # @group_judge() with parentheses
        raise _called_bare("group_judge")
    return _decorate(fn, "group_judge")


def is_group_judge(fn: Any) -> bool:
    """Whether ``fn`` is a ``@group_judge`` function."""
    spec = spec_of(fn)
    return isinstance(spec, FunctionSpec) and spec.kind == "group_judge"


# ---------------------------------------------------------------------------- experiment

@attrs.frozen(kw_only=True)
class ExperimentSpec:
    """What ``@experiment`` collected from a class: its functions and its settings layer."""

    qualname: str
    module: str
    file: str
    line: int
    workflow: Callable[..., Any]
    judge: Callable[..., Any] | None
    declared: dict[str, Any]
    #: The file of the class that set each declared attribute (a base class's, for one the
    #: experiment inherits), which its relative paths are meant from.
    origins: dict[str, str] = attrs.field(factory=dict)
    #: ``@experiment(name=...)``, which wins over a ``name`` attribute.
    given_name: str | None = None

    @property
    def where(self) -> str:
        """``file:line`` of the class definition."""
        return f"{display_path(self.file)}:{self.line}"


def _declared_attributes(cls: type) -> dict[str, Any]:
    """Attributes in declaration order, base classes first (so subclasses override)."""
    return {key: value for key, (value, _) in _declared_with_owners(cls).items()}


def _declared_with_owners(cls: type) -> dict[str, tuple[Any, type]]:
    """Each attribute, and the class of the MRO that set it."""
    found: dict[str, tuple[Any, type]] = {}
    for klass in reversed(cls.__mro__[:-1]):
        for key, value in vars(klass).items():
            if not key.startswith("_"):
                found[key] = (value, klass)
    return found


def _describe(value: Any) -> str:
    spec = spec_of(value)
    if isinstance(spec, FunctionSpec):
        return f"the @{spec.kind} function {value.__qualname__}"
    if inspect.isfunction(value):
        return f"the undecorated function {value.__qualname__}"
    shown = repr(value)
    if type(value).__repr__ is object.__repr__:  # (its memory address says nothing)
        return f"a {type(value).__name__} object"
    if len(shown) > 80:  # a list of records: its type and length say enough
        shown = f"{shown[:60]}..." if not isinstance(value, (list, tuple, set)) else \
            f"{len(value)} item{'s' if len(value) != 1 else ''}"
    return f"{shown} of type {type(value).__name__}"


def _function_problem(owner: str, key: str, value: Any) -> str | None:
    spec = spec_of(value)
    kinds = JUDGE_KINDS if key == "judge" else (key,)
    if isinstance(spec, FunctionSpec) and spec.kind in kinds:
        return None
    if inspect.iscoroutine(value):  # ``workflow = solve(...)``: called in the class body
        name = value.__qualname__
        value.close()  # (never to run: no "coroutine was never awaited" warnings after)
        return (f"{owner}.{key} is a call of {name}(...), not the function; assign the "
                f"function itself: {key} = {name.rsplit('.', 1)[-1]}")
    wrapped = _decorated_inside(value, kinds)
    fix = (f"put @{wrapped.kind} outermost, above the decorator that wraps "
           f"{wrapped.qualname} ({wrapped.where}), which hides it" if wrapped is not None else
           f"add @{key} above 'async def {value.__name__}'" if inspect.isfunction(value)
           and spec is None else f"assign a function decorated with @{key}")
    if key == "judge":
        fix += " (or @group_judge)"
    return f"{owner}.{key} must be a @{key} function (got {_describe(value)}): {fix}"


def _decorated_inside(value: Any, kinds: tuple[str, ...]) -> Any:
    """The `FunctionSpec` of a decorated function of ``kinds`` that a plain function's
    closure holds (a decorator put above ``@workflow``: its wrapper was told to take
    ``@workflow`` itself, and then refused as defined inside the decorator; sweep 49
    A-W11), or None."""
    import functools

    held_values = []
    for cell in getattr(value, "__closure__", None) or ():
        try:
            held_values.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            continue
    if isinstance(value, functools.partial):
        held_values.append(value.func)
    elif not inspect.isfunction(value) and not inspect.isclass(value):
        # an object wrapping it (class Retry: def __init__(self, fn): self.fn = fn), which
        # was told to "assign a function decorated with @workflow" (sweep 50 A-W8)
        held_values += list(getattr(value, "__dict__", {}).values())
    for held_value in held_values:
        held = spec_of(held_value)
        if isinstance(held, FunctionSpec) and held.kind in kinds:
            return held
    return None


def _value_problem(owner: str, key: str, value: Any) -> str | None:
    """What is wrong with a class attribute, by its row of the settings table: the same
    check the settings layers make of a TOML value (records check their own fields)."""
    row = SETTINGS_BY_NAME[key]
    if row.kind == FUNCTION:
        if value is None and key == "judge":  # none: the workflow sets the reward (and a
            return None  # subclass drops its base's judge)
        return _function_problem(owner, key, value)
    if row.kind == RECORD:
        record = row.record_class
        if value is None and row.default is None:  # none: a subclass drops its base's
            return None
        if not isinstance(value, record):
            article = "an" if record.__name__[0] in "AEIOU" else "a"
            return (f"{owner}.{key} must be {article} {record.__name__}(...) (got "
                    f"{_describe(value)})")
    elif row.kind == MODELS:
        bad_names = [name for name in value if not isinstance(name, str) or not name] \
            if isinstance(value, dict) else []
        if bad_names:  # the name at fault, not every model's repr
            return (f"{owner}.{key} names a model {bad_names[0]!r}; a name must be a non-empty "
                    f"string, such as {{\"judge\": Model(...)}}")
        if not isinstance(value, dict):
            return (f"{owner}.{key} must be a dict of name -> Model(...) "
                    f"(got {_describe(value)})")
        for name, model in value.items():  # the entry at fault, not the whole dict
            if not isinstance(model, Model):
                path = model if isinstance(model, str) and model else "Qwen/Qwen3-0.6B"
                return (f"{owner}.{key}[{name!r}] must be a Model(...) (got "
                        f"{_describe(model)}); write e.g. {{{name!r}: Model({path!r}, "
                        f"max_model_len=4096)}}")
    elif row.kind == TABLE:  # its entries are checked with the other layers' values
        if not isinstance(value, dict):
            return f"{owner}.{key} must be a dict (got {_describe(value)})"
    else:
        if isinstance(value, os.PathLike):  # a pathlib.Path: its text (as Model's and
            value = os.fspath(value)  # Dataset's paths take it)
        problem = row.problem(value)
        if problem is not None:
            return f"{owner}.{key} {problem}"
    return None


def _is_helper(value: Any) -> bool:
    """Methods and properties may live on an experiment class for the user's own use."""
    plain_function = inspect.isfunction(value) and spec_of(value) is None
    return plain_function or isinstance(value, (staticmethod, classmethod, property))


_UNDECLARED = object()


def _answered_by_metaclass(cls: type, owner: str, declared: dict[str, Any]) -> list[str]:
    """Settings a metaclass's ``__getattribute__`` or ``__getattr__`` answers on the class
    otherwise than its body does: ``cls.rollout_timeout`` would say 7 where the experiment
    runs with the body's value (or the default). A metaclass that answers a name no class
    declares answers every name (a config framework's defaults): its answers are not
    settings, and are ignored as a plain class's missing attributes are."""
    hooks = [(meta, hook) for meta in inspect.getmro(type(cls)) if meta not in (type, object)
             for hook in ("__getattribute__", "__getattr__") if hook in vars(meta)]
    if not hooks or _answer(cls, "_tunedsl_no_class_declares_this") is not _UNDECLARED:
        return []
    meta, hook = hooks[0]
    return [f"{owner}.{key} is answered by its metaclass {meta.__qualname__}'s {hook}, which "
            f"an experiment does not read; set {key} in the class body (or a base class)"
            for key in EXPERIMENT_ATTRIBUTES
            if _answer(cls, key) is not declared.get(key, _UNDECLARED)]


def _answer(cls: type, key: str) -> Any:
    try:
        return getattr(cls, key)
    except Exception:  # whatever the metaclass raises, the class does not answer
        return _UNDECLARED


def _collect(cls: type, name: str | None) -> ExperimentSpec:
    owner = f"@experiment {cls.__qualname__} ({where(cls)})"
    declared = _declared_attributes(cls)
    if name is not None:
        declared["name"] = name
    problems = []
    for key, value in declared.items():
        if key in EXPERIMENT_ATTRIBUTES:
            problem = _value_problem(owner, key, value)
        elif _is_helper(value):
            continue
        else:
            problem = (f"{owner} has an unknown attribute '{key}'"
                       f"{did_you_mean(key, EXPERIMENT_ATTRIBUTES)}; an experiment declares "
                       f"{', '.join(EXPERIMENT_ATTRIBUTES)}")
        if problem:
            problems.append(problem)
    for meta in inspect.getmro(type(cls)):
        if meta in (type, object):
            continue
        for key in sorted(set(vars(meta)) & set(EXPERIMENT_ATTRIBUTES) - set(declared)):
            # Python reads it on the class, so the class would seem to set it.
            problems.append(f"{owner}.{key} comes from its metaclass {meta.__qualname__}, which "
                            f"an experiment does not read; set {key} in the class body (or a "
                            f"base class)")
    problems.extend(_answered_by_metaclass(cls, owner, declared))
    if "workflow" not in declared:
        problems.insert(0, f"{owner} has no workflow: add 'workflow = <your @workflow function>'")
    if problems:
        raise ConfigError(problems)
    file, line = _source_location(cls)
    owners = _declared_with_owners(cls)
    return ExperimentSpec(
        qualname=cls.__qualname__, module=cls.__module__, file=file, line=line,
        workflow=declared["workflow"], judge=declared.get("judge"),
        declared={k: v for k, v in declared.items() if k in EXPERIMENT_ATTRIBUTES},
        origins={key: _source_location(owner)[0] for key, (_, owner) in owners.items()
                 if key in EXPERIMENT_ATTRIBUTES and owner is not cls},
        given_name=name,
    )  # fmt: skip


def experiment_spec(cls: type) -> ExperimentSpec:
    """What the ``@experiment`` class ``cls`` declares now, checked as the decorator checks.

    Collected again rather than read from the decorator's snapshot: an attribute assigned to
    the class after the decorator ran (``Base.rollout_timeout = 7`` in a notebook or a test
    helper) is what the class says, so it is what runs, and an unknown one is refused.
    """
    decorated: ExperimentSpec = spec_of(cls)
    return _collect(cls, decorated.given_name)


def experiment(cls: C | None = None, *, name: str | None = None) -> Any:
    """Declare an experiment: a class naming the workflow, judge, data, model and algorithm.

    The class is returned unchanged; its declarations are checked now and become
    the "class" settings layer when the experiment graph is built (see
    `load_experiment`).

    Args:
        cls: The class (when used as bare ``@experiment``).
        name: The run's name; defaults to the class name.
    """

    def wrap(c: C) -> C:
        if not inspect.isclass(c):
            raise SignatureError(
                f"@experiment decorates a class, got {_describe(c)} ({where(c)}); "
                f"write '@experiment class MyExperiment: workflow = ...'"
            )
        if spec_of(c) is not None:
            raise SignatureError(
                f"{c.__qualname__} ({where(c)}) is already decorated with @experiment; "
                f"apply it once"
            )
        setattr(c, SPEC_ATTR, _collect(c, name))
        return c

    return wrap if cls is None else wrap(cls)


def is_experiment(obj: Any) -> bool:
    """Whether ``obj`` is a class decorated with ``@experiment``."""
    return inspect.isclass(obj) and isinstance(spec_of(obj), ExperimentSpec)
