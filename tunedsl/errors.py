"""Every error tunedsl raises on purpose, under one base class.

Each class also subclasses the builtin a caller would naturally catch, so
``except ValueError`` keeps working for code that does not know tunedsl.
The CLI prints these as ``Error: <message>`` and exits 2 (1 for `RunError`).
"""

from __future__ import annotations

from collections.abc import Iterable


class TunedslError(Exception):
    """Base class of all tunedsl errors."""


class SignatureError(TunedslError, TypeError):
    """A decorated function or class does not have the shape tunedsl needs."""


class ConfigError(TunedslError, ValueError):
    """Settings are invalid; ``problems`` holds one line per problem found.

    All problems of a configuration are gathered before raising, so a user fixes
    them in one pass rather than one run at a time.
    """

    def __init__(self, problems: str | Iterable[str]) -> None:
        self.problems: tuple[str, ...] = (
            (problems,) if isinstance(problems, str) else tuple(problems)
        )
        super().__init__("\n".join(self.problems))


class ExperimentImportError(TunedslError, ImportError):
    """An import string such as ``pkg.mod:Attr`` could not be resolved."""


class DatasetError(TunedslError, ValueError):
    """A dataset is missing, empty, or lacks a key the experiment uses."""


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


__all__ = [
    "ConfigError",
    "DatasetError",
    "ExperimentImportError",
    "RunError",
    "RunInterrupted",
    "SignatureError",
    "TunedslError",
]
