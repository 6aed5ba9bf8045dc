"""How a message names an option: as a flag for the command line, as an argument in Python.

A check in the library says what is wrong and which option fixes it; whom it is said to
decides the spelling. ``tunedsl eval -o r.jsonl`` is told "add --resume to continue it",
``tunedsl.evaluate(..., output="r.jsonl")`` is told "add resume=True to continue it",
from the same line of code: `option` spells a name from `OPTIONS` for the audience of the
moment, which is Python unless the CLI runs the command (`for_the_command_line`).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from typing import Any

#: Each option a message may name: its command-line spelling and its Python one (an
#: argument of the public function, or a field of the record it takes).
OPTIONS: dict[str, tuple[str, str]] = {
    "resume": ("--resume", "resume"),
    "output": ("-o", "output"),
    "output_dir": ("-o", "output_dir"),
    "candidates": ("--candidates", "candidates"),
    "concurrency": ("--concurrency", "concurrency"),
    "budget": ("--budget", "search.budget"),
    "minibatch": ("--minibatch", "search.minibatch"),
    "val_fraction": ("--val-fraction", "search.val_fraction"),
    "perfect_reward": ("--perfect-reward", "search.perfect_reward"),
    "param": ("--param", "params"),
    "reflection_model": ("--reflection-model", "reflection_model"),
    "reflection_key": ("--reflection-api-key-env", "reflection_model.api_key_env"),
    "api_key_env": ("--api-key-env", "api_key_env"),
    "model": ("--model", "model"),
    "base_url": ("--base-url", "base_url"),
    "aux": ("--aux", "auxiliary_models"),
    "settings": ("--settings", "load_experiment(settings=...)"),
    "backend": ("--backend", "backend"),
    "set": ("--set", "overrides item"),
    "checkpoint": ("--checkpoint", "model"),
    "from_good_checkpoint": ("--from-good-checkpoint", "from_good_checkpoint"),
    "ray_address": ("--ray-address", "ray_address"),
    "out": ("-o", "out"),
    "max_rollouts": ("--max-rollouts", "max_rollouts"),
    "host": ("--host", "host"),
    "port": ("--port", "port"),
}

_ON_THE_COMMAND_LINE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "tunedsl_on_the_command_line", default=False)


@contextlib.contextmanager
def for_the_command_line() -> Iterator[None]:
    """Word every message raised inside for the command line (the CLI runs its commands
    in this). Threads and tasks started inside inherit it (asyncio copies the context)."""
    token = _ON_THE_COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _ON_THE_COMMAND_LINE.reset(token)


def on_the_command_line() -> bool:
    """Whether messages are being worded for the command line."""
    return _ON_THE_COMMAND_LINE.get()


_NO_VALUE = object()


def option(name: str, value: Any = _NO_VALUE) -> str:
    """``name`` as the reader writes it: ``--resume`` or ``resume=True`` for a switch
    (``value`` not given), ``--budget 0`` or ``search.budget=0`` with a value (text shown
    as typed on the command line, as a literal in Python)."""
    flag, argument = OPTIONS[name]
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if on_the_command_line():
        if value is _NO_VALUE:
            return flag
        return f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}"
    if value is _NO_VALUE:
        return f"{argument}=True" if name in _SWITCHES else argument
    return f"{argument}={value!r}"


#: Options that are on or off.
_SWITCHES = {"resume", "from_good_checkpoint"}


def options(*named: str | tuple[str, Any]) -> str:
    """Several options together, as one command line's tail (``--candidates c.jsonl
    --resume``) or one call's arguments (``candidates='c.jsonl', resume=True``): each a
    name, or a ``(name, value)`` pair."""
    spelled = [option(*item) if isinstance(item, tuple) else option(item) for item in named]
    return (" " if on_the_command_line() else ", ").join(spelled)


def said(command_line: str, python: str) -> str:
    """One of two wordings of the same words, for where a sentence names options in a way
    `option` cannot spell alike (``--resume r.jsonl`` is ``resume=True`` with
    ``output='r.jsonl'``)."""
    return command_line if on_the_command_line() else python


def default_output() -> str:
    """How a command's default output (no ``-o`` given) is named in its messages: as the
    default, not as an ``-o`` the user never gave (sweep 50 B-W5)."""
    return said("the default output (no -o)", "the default output")


def spelled(label: str) -> str:
    """An option named by its key in `OPTIONS` spelled for the reader; any other label
    (a flag only the command line has, such as ``view --out``) as it is."""
    return option(label) if label in OPTIONS else label


def given(label: str, value: Any) -> str:
    """An option and the value it was given, spelled for the reader (`option`), or ``label
    value`` for a label outside `OPTIONS`."""
    return option(label, value) if label in OPTIONS else f"{label} {value}"


def shown_path(path: Any) -> str:
    """A path as a message shows it: as it is, or quoted when a space (or other blank) at
    either end would be lost to the eye, so "x  is not a folder" reads as what it says."""
    text = str(path)
    return repr(text) if text != text.strip() else text


def printable(line: str) -> str:
    """``line`` with its control characters (NUL, ESC: a terminal acts on them) escaped, as
    an error line or a report may quote an exception's, a file's or a model's text."""
    import re

    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", lambda found: f"\\x{ord(found[0]):02x}",
                  line)


def print_lines(lines: Iterator[str] | list[str], out: Any = None) -> None:
    """Print a report's ``lines`` (to stdout as it is at the call), each printable: a
    tuned prompt or a model's name holding an escape sequence reached the terminal raw."""
    import sys

    for line in lines:
        print(printable(line), file=out or sys.stdout)
