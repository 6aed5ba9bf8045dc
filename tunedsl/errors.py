"""Every error tunedsl raises on purpose, under one base class, and the helpers that word them.

Each class also subclasses the builtin a caller would naturally catch, so
``except ValueError`` keeps working for code that does not know tunedsl.
The CLI prints these as ``Error: <message>`` and exits 2 (1 for `RunError`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import attrs


class TunedslError(Exception):
    """Base class of all tunedsl errors.

    Attributes:
        user_traceback: The traceback of the user's own code behind this error (an
            exception raised while importing their module, or inside their workflow),
            which the CLI prints before the message; None when tunedsl found the problem.
    """

    def __init__(self, *args: object, user_traceback: str | None = None) -> None:
        super().__init__(*args)
        self.user_traceback = user_traceback

    def __reduce__(self) -> tuple[object, ...]:
        # Rebuilt from its message and attributes, not by calling __init__ again (whose
        # arguments differ by class): a worker process's error reaches its parent whole.
        return (_rebuilt, (type(self), self.args, self.__dict__))


def _rebuilt(cls: type[TunedslError], args: tuple[object, ...],
             state: dict[str, object]) -> TunedslError:
    """A pickled tunedsl error, as it was."""
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class SignatureError(TunedslError, TypeError):
    """A decorated function or class does not have the shape tunedsl needs."""


class ArgumentError(TunedslError, TypeError):
    """A Python function of tunedsl's was handed an argument of the wrong kind (a task that
    is not a mapping, a script that is not a list of replies): the one-line message names
    the argument and what it takes."""


@attrs.frozen
class Problem:
    """One thing wrong with what a user gave, as data: where it was given, the setting it
    concerns, what is wrong and the fix. ``str()`` words it as one line, as the CLI prints
    it (``where: what; fix``); a caller can filter problems by ``setting`` or word them
    its own way.

    Attributes:
        what: What is wrong (with the fix, for a problem not split further).
        where: The layer, file or object that gave the value: ``"tunedsl.toml"``,
            ``"--set"`` (``"overrides"`` in Python), ``"Arith (exp.py:14)"``; empty when
            ``what`` says it.
        setting: The dotted setting concerned (``"algorithm.group_size"``), or empty.
        fix: How to fix it, when given apart from ``what``.
    """

    what: str
    where: str = ""
    setting: str = ""
    fix: str = ""

    def __str__(self) -> str:
        line = f"{self.where}: {self.what}" if self.where else self.what
        return f"{line}; {self.fix}" if self.fix else line


class ConfigError(TunedslError, ValueError):
    """Settings are invalid; ``problems`` holds one line per problem found, and
    ``details`` the same problems as `Problem` records.

    All problems of a configuration are gathered before raising, so a user fixes
    them in one pass rather than one run at a time.
    """

    def __init__(self, problems: str | Problem | Iterable[str | Problem], *,
                 user_traceback: str | None = None) -> None:
        given = (problems,) if isinstance(problems, (str, Problem)) else tuple(problems)
        self.details: tuple[Problem, ...] = tuple(
            item if isinstance(item, Problem) else Problem(item) for item in given)
        self.problems: tuple[str, ...] = tuple(str(item) for item in self.details)
        super().__init__("\n".join(self.problems), user_traceback=user_traceback)


class FieldProblem(ConfigError):
    """A value a record field's validator refused.

    Attributes:
        field: The field's name.
        detail: What is wrong, worded to read after the field's name.
    """

    def __init__(self, field: str, detail: str) -> None:
        self.field, self.detail = field, detail
        super().__init__(f"{field} {detail}")


class PreflightFailed(ConfigError):
    """The workflow failed on the first task before training; its log is kept."""


class ExperimentImportError(TunedslError, ImportError):
    """An import string such as ``pkg.mod:Attr`` could not be resolved."""


class DatasetError(TunedslError, ValueError):
    """A dataset is missing, empty, or lacks a key the experiment uses."""


class RolloutError(TunedslError, RuntimeError):
    """A workflow or judge raised, or returned something tunedsl cannot use.

    Attributes:
        stage: ``"workflow"`` or ``"judge"``.
        output: What the rollout's code printed before it failed, or None.
        finished_workflow: When the judge failed after the workflow finished: the
            workflow's response and its own metrics, which eval keeps so that rescore can
            judge them again (the model's replies were lost with the judge); else None.
    """

    def __init__(self, message: str, *, stage: str, user_traceback: str | None = None) -> None:
        super().__init__(message, user_traceback=user_traceback)
        self.stage = stage
        self.output: str | None = None
        self.finished_workflow: tuple[Any, dict[str, float]] | None = None

    def after(self, response: Any, workflow_metrics: dict[str, float]) -> RolloutError:
        """A copy of this judge's failure for a rollout whose workflow finished with
        ``response`` (a group judge fails every member, each with a response of its own)."""
        import copy

        failure = copy.copy(self)
        failure.finished_workflow = (response, dict(workflow_metrics))
        return failure


class RunError(TunedslError, RuntimeError):
    """A run failed after it started (CLI exit code 1)."""


class RunInterrupted(RunError):
    """A run was stopped (Ctrl-C) after saving a checkpoint it can resume from (exit 130).

    Attributes:
        run_dir: The run directory to give to ``--resume``.
    """

    def __init__(self, message: str, run_dir: str | None = None) -> None:
        super().__init__(message)
        self.run_dir = run_dir


_PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")  # tunedsl/


#: How much of an exception's text an error line holds (a 10 MB message was printed whole
#: as a command's one-line error, in its summary and in the traceback above it).
MESSAGE_SHOWN = 2000


def shortened(text: str, rest: str = "not shown") -> str:
    """``text`` up to `MESSAGE_SHOWN` characters, saying how much more there is and
    where (``rest``)."""
    if len(text) <= MESSAGE_SHOWN:
        return text
    return f"{text[:MESSAGE_SHOWN]}... ({len(text) - MESSAGE_SHOWN} characters more, {rest})"


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, or what Python's own traceback shows when the exception's ``__str__``
    itself raises (user code can define one that does)."""
    try:
        return str(exc)
    except Exception:
        return "<exception str() failed>"


def raised_outside_tunedsl(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by code that is not tunedsl's (its innermost frame): a
    user's object's own method, called on it by tunedsl."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return not tb.tb_frame.f_code.co_filename.startswith(_PACKAGE)


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` from the first frame that is not tunedsl's or importlib's:
    what the user needs to see of an exception their code raised."""
    import importlib
    import traceback

    skipped = (_PACKAGE, os.path.join(os.path.dirname(importlib.__file__), ""),
               "<frozen importlib")
    # the standard library's frames that lead to it too (asyncio's, running a rollout)
    standard = os.path.join(os.path.dirname(os.__file__), "")

    def leading(filename: str) -> bool:
        return filename.startswith(skipped) or (filename.startswith(standard)
                                                and "site-packages" not in filename)

    def users(filename: str) -> bool:  # (not tunedsl's, a library's or Python's)
        return not leading(filename) and "site-packages" not in filename

    tb = exc.__traceback__
    while tb is not None and leading(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    frames = traceback.extract_tb(tb)
    ours = next((index for index, frame in enumerate(frames)
                 if index and frame.filename.startswith(_PACKAGE)), None)
    if ours is not None and not any(users(frame.filename) for frame in frames[ours:]):
        # Raised on the user's call into tunedsl (model.chat with a typo; an endpoint's
        # error the openai package raised beneath it): the user's line is the place to
        # fix, and the frames below it, tunedsl's and the libraries' it calls, are not
        # shown (sweep 46 B-W3)
        return "".join(["Traceback (most recent call last):\n",
                        *traceback.format_list(frames[:ours]),
                        *traceback.format_exception_only(type(exc), exc)])
    return "".join(traceback.format_exception(type(exc), exc, tb))


def display_path(path: str) -> str:
    """``path`` as a user would type it: relative to the current directory when inside it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if relative.startswith("..") else relative


#: Names other libraries use for a setting, which spelling alone does not lead to.
_OTHER_NAMES = {"lr": "learning_rate", "n": "group_size", "num_generations": "group_size",
                "rollout_n": "group_size", "repeat_times": "group_size",
                "max_length": "max_model_len", "max_new_tokens": "max_tokens",
                "max_grad_norm": "grad_clip", "clip_grad": "grad_clip",
                "per_device_train_batch_size": "batch_size"}


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice (or the one another
    library's name stands for: ``lr`` for ``learning_rate``), or ``""``."""
    import difflib  # only for a refused name: keeps `import tunedsl` light

    choices = list(choices)
    if _OTHER_NAMES.get(word) in choices:
        return f" (did you mean '{_OTHER_NAMES[word]}'?)"
    same = [choice for choice in choices if choice.lower() == word.lower()]
    if same:  # ALGORITHM for algorithm
        return f" (did you mean '{same[0]}'?)"
    swapped = [choice for choice in choices if len(choice) == len(word) and sorted(
        choice.lower()) == sorted(word.lower()) and sum(
        a != b for a, b in zip(choice.lower(), word.lower())) == 2]
    if swapped:  # two letters swapped: gpro is grpo (gspo was said: sweep 49 A-W13)
        return f" (did you mean '{swapped[0]}'?)"
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_name_message(kind: str, value: object, choices: Iterable[str]) -> str:
    """The one-line message for a value that is not one of ``choices``."""
    choices = sorted(choices)
    hint = did_you_mean(str(value), choices)
    return f"{value!r} is not a known {kind}{hint}; choose one of: {', '.join(choices)}"


__all__ = [
    "ArgumentError",
    "ConfigError",
    "DatasetError",
    "ExperimentImportError",
    "FieldProblem",
    "PreflightFailed",
    "RolloutError",
    "RunError",
    "RunInterrupted",
    "SignatureError",
    "TunedslError",
    "did_you_mean",
    "display_path",
    "unknown_name_message",
    "user_traceback",
]


def described(value: object, shown: str | None = None) -> str:
    """``value`` as a message shows what was given: its repr (or ``shown``) and its type,
    ``2 (an int)``."""
    kind = type(value).__name__
    return f"{shown or repr(value)} ({'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind})"
