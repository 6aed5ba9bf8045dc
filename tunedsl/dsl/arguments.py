"""What a Python caller passes to tunedsl's functions, checked where they are called: one
line naming the argument and what it must be (a `ConfigError`), rather than a TypeError
from deep inside, or a string read one character at a time, after work was done.

The command line checks its own options as argparse reads them; these are the same rules
for `tunedsl.evaluate`, `select_model`, `tune_prompt` and `load_experiment`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError


def outside_an_event_loop(call: str) -> None:
    """Refuse ``call`` (an entry point that runs its own event loop with ``asyncio.run``)
    made where a loop is running (a notebook cell, an async function): asyncio's own
    "cannot be called from a running event loop" named no tunedsl call and no way out."""
    import asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    if getattr(loop, "_nest_patched", False):  # nest_asyncio lets a running loop run again
        return
    raise ConfigError(f"{call}() runs its own event loop, so it cannot be called where one "
                      f"is running (a notebook cell, an async function); there, run it in a "
                      f"thread: await asyncio.to_thread({call}, ...)")


def whole(name: str, value: Any, minimum: int | None = 1, *, optional: bool = False) -> None:
    """``value`` is an int (not a bool) of at least ``minimum`` (None: any; the caller words
    the range itself) or, if ``optional``, None."""
    if value is None and optional:
        return
    least = "" if minimum is None else f" of at least {minimum}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name}={value!r}: give a whole number{least}, not "
                          f"{_kind(value)}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value!r}: give a whole number{least}")


def fraction(name: str, value: Any) -> None:
    """``value`` is a number strictly between 0 and 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 < value < 1:
        raise ConfigError(f"{name}={value!r}: give a number between 0 and 1 (excluded)")


def number(name: str, value: Any) -> None:
    """``value`` is a real number (an int or a float, not a bool); the caller words the
    range itself."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name}={value!r}: give a number, not {_kind(value)}")


def flag(name: str, value: Any) -> None:
    """``value`` is True or False (``resume="false"`` is a non-empty string, which Python
    takes as true: it resumed)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={value!r}: give True or False, not {_kind(value)}")


def text(name: str, value: Any, *, optional: bool = False) -> None:
    """``value`` is a non-empty string (or None, if ``optional``)."""
    if value is None and optional:
        return
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name}={value!r}: give a non-empty string")


def home(path: str) -> str:
    """``path`` with a leading ``~`` or ``~user`` read as that home folder, as a shell reads
    it (Python's file functions would make a folder named ``~``); a user with no home
    folder here is refused."""
    if not path.startswith("~"):
        return path
    expanded = os.path.expanduser(path)
    if expanded == path:
        user = path[1:].split("/", 1)[0]
        raise ConfigError(f"{path}: there is no user {user!r} here, so no home folder "
                          f"{'~' + user}; give the folder itself")
    return expanded


def path(name: str, value: Any, *, optional: bool = True) -> Any:
    """``value`` names a file or folder: a non-empty str or an os.PathLike (or None).
    Returns it with a leading ``~`` read as the home folder, as a shell reads it (Python's
    own file functions would make a folder named ``~``)."""
    if value is None and optional:
        return None
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value).strip():
        raise ConfigError(f"{name}={value!r}: give a file or folder path (a str or a "
                          f"pathlib.Path)")
    text = os.fspath(value)
    return home(text) if text.startswith("~") else value


def texts(name: str, value: Any) -> None:
    """``value`` is a list (or tuple) of strings, not one string read letter by letter."""
    if isinstance(value, str):
        raise ConfigError(f"{name}={value!r}: give a list of strings, not one string; write "
                          f"{name}=[{value!r}]")
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{name}={value!r}: give a list of strings, not {_kind(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise ConfigError(f"{name}={value!r}: give a list of strings; item {index} is "
                              f"{_kind(item)} ({item!r})")


def named(name: str, value: Any) -> None:
    """``value`` is a mapping of names (or None)."""
    if value is not None and (not isinstance(value, Mapping)
                              or not all(isinstance(key, str) for key in value)):
        raise ConfigError(f"{name}={value!r}: give a dict of name -> Model(...), not "
                          f"{_kind(value)}")


def _kind(value: Any) -> str:
    """``a str``, ``an int``: what was given instead."""
    kind = type(value).__name__
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"
