"""A function's code as a digest: what a resume compares to tell an edited workflow or judge
from the one that scored what it resumes (an eval's results, a tuning's candidates, a
run's rewards)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..data.json_text import digest


def code_digest(fn: Any) -> str:
    """``name@digest``: a function by its name and a digest of what it computes with (its
    name alone when its source cannot be read, as for a function defined at a prompt), so
    an edited judge is told from the one that scored a results file: its source, the
    source of the user's own functions and classes it uses (in any of the project's
    modules, and theirs in turn), and the plain values (numbers, text) of the globals and
    closure variables it reads."""
    import inspect

    function = inspect.unwrap(fn)
    try:
        inspect.getsource(function)
    except (OSError, TypeError):
        return function.__qualname__
    return f"{function.__qualname__}@{digest(''.join(_code_parts(function, set())))}"


def _names(code: Any) -> set[str]:
    """The global and attribute names a code object and the code nested in it use."""
    found = set(code.co_names)
    for constant in code.co_consts:
        if hasattr(constant, "co_names"):
            found |= _names(constant)
    return found


def _plain(value: Any) -> bool:
    """A value whose repr is the same in every process: numbers, text, None, and tuples of
    them."""
    if isinstance(value, tuple):
        return all(map(_plain, value))
    return value is None or isinstance(value, (bool, int, float, complex, str, bytes))


def _users_own(value: Any) -> bool:
    """A function or class of the user's code: defined in a file outside the Python
    installation, its packages and tunedsl."""
    import inspect

    try:
        return users_file(inspect.getsourcefile(value) or "")
    except TypeError:
        return False


def users_file(file: str) -> bool:
    """Whether the source file ``file`` is the user's: outside the Python installation, its
    packages and tunedsl."""
    import sysconfig

    path = os.path.realpath(file) if file else ""
    installed = {os.path.realpath(sysconfig.get_path(name))
                 for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    tunedsl_dir = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    return bool(path) and not any(path.startswith(folder + os.sep)
                                  for folder in (*installed, tunedsl_dir))


def _code_parts(function: Any, seen: set[int]) -> Iterator[str]:
    """The texts `code_digest` hashes for ``function``, each function or class once."""
    import inspect

    seen.add(id(function))
    yield inspect.getsource(function)
    code, scope = function.__code__, function.__globals__
    names = _names(code)
    values = [(name, scope[name]) for name in sorted(names) if name in scope]
    for name, cell in zip(code.co_freevars, function.__closure__ or ()):
        try:
            values.append((name, cell.cell_contents))
        except ValueError:  # a cell not yet filled
            continue
    # attributes of the user's modules it reads by name (helpers.score(...))
    values += [(f"{name}.{attribute}", getattr(value, attribute))
               for name, value in list(values) if inspect.ismodule(value)
               for attribute in sorted(names) if hasattr(value, attribute)]
    for name, value in values:
        if not _plain(value) and not inspect.ismodule(value) and not inspect.isfunction(value) \
                and not inspect.isclass(value) and _users_own(type(value)):
            value = type(value)  # an instance of the user's class (G = Grader(): G.score)
            # is as its class's code is (an edited method was believed the same: sweep 49)
        if _plain(value):
            yield f"\n{name} = {value!r}"
        elif id(value) in seen or not (inspect.isfunction(value) or inspect.isclass(value)) \
                or not _users_own(value):
            continue
        elif inspect.isfunction(value):
            try:
                yield from _code_parts(inspect.unwrap(value), seen)
            except (OSError, TypeError):
                seen.add(id(value))
        else:
            seen.add(id(value))
            try:
                yield inspect.getsource(value)
            except (OSError, TypeError):
                continue
