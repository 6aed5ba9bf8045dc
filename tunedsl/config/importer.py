"""Resolve ``pkg.mod:Attr`` and ``path/to/file.py:Attr`` import strings.

Errors are precise: a malformed string, a module that is not there, a failure
*inside* the user's module (kept with the user's own traceback), and a missing
attribute (listing what the module does define).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, cast

from ..errors import (
    ConfigError,
    ExperimentImportError,
    TunedslError,
    display_path,
    exception_text,
    shortened,
    user_traceback,
)

_FORMAT = '"<module>:<attribute>" or "<path/to/file.py>:<attribute>"'


def split_import_string(target: str) -> tuple[str, str]:
    """Split ``"module:attr"``; raise with the expected format when it is malformed."""
    module, sep, attribute = target.rpartition(":")
    # rpartition keeps Windows drive letters ("C:\\x.py:Attr") in the module part.
    if not sep or not module or not attribute:
        raise ExperimentImportError(f'Import string "{target}" must be in format {_FORMAT}.')
    if ":" in (module[2:] if _DRIVE.match(module) else module):
        raise ExperimentImportError(f'Import string "{target}" has more than one ":"; give '
                                    f'one between the module and the attribute, in format '
                                    f'{_FORMAT}.')
    return module, attribute


_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")  # a Windows path's drive: its one allowed ":"


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tunedsl/
_NOT_USER = (_PACKAGE + os.sep, os.path.dirname(importlib.__file__) + os.sep,
             "<frozen importlib")


def _user_line(exc: BaseException) -> str | None:
    """``file:line`` of the user's innermost frame in ``exc``'s traceback (not tunedsl's,
    the standard library's or an installed package's: a library that wraps ``sys.exit``
    is not where the user called it)."""
    import sysconfig

    libraries = tuple(os.path.join(path, "") for path in {
        sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")})
    found = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        if not frame.f_code.co_filename.startswith(_NOT_USER + libraries):
            found = f"{display_path(frame.f_code.co_filename)}:{line}"
    return found


def _failed_inside(module: str, exc: BaseException) -> TunedslError:
    if isinstance(exc, TunedslError):
        # tunedsl found the problem (a decorator or a record refused the user's code): its
        # own message, at the user's line, says it all; its frames would only bury it.
        where = _user_line(exc)
        # A line that already names that place needs no prefix; a decorator names its own
        # line, which Python 3.10 reports as the def line below it.
        file, _, number = (where or "").rpartition(":")
        named = {where, f"{file}:{int(number) - 1}"} if where else set()
        lines = [line if not where or any(place in line for place in named)
                 else f"{where}: {line}" for line in str(exc).splitlines()]
        if isinstance(exc, ConfigError):
            return ConfigError(lines)
        return type(exc)("\n".join(lines))
    if isinstance(exc, SystemExit):
        call = "os._exit" if isinstance(exc, _ExitedAtImport) else "sys.exit"
        return ExperimentImportError(
            f'module "{module}" called {call}({exc.code!r}) while being imported '
            f"({_user_line(exc) or 'at import'}); keep module level free of exits (guard "
            f"scripts with if __name__ == \"__main__\":)")
    if isinstance(exc, PermissionError) and isinstance(exc.filename, str) and \
            exc.filename.endswith((".py", ".pyc")):  # the module's file, or one it imports
        from ..access import permission_fix

        fix = permission_fix(exc, exc.filename) or "make it readable"
        return ExperimentImportError(f'Could not import module "{module}": {exc.filename} '
                                     f"cannot be read ({exc.strerror}); {fix}")
    text = exception_text(exc)
    said = f": {shortened(text, 'in the traceback above')}" if text else ""  # (its name alone)
    return ExperimentImportError(
        f'Error while importing module "{module}": {type(exc).__name__}{said}',
        user_traceback=user_traceback(exc),
    )


#: Libraries tunedsl and Trinity-RFT import after the user's module, by import name: a file
#: or package of that name in a folder ahead of them on the import path would be imported in
#: their place, and fail far from the cause ("cannot import name 'Dataset' from 'datasets'").
LIBRARIES = frozenset({
    "accelerate", "agentscope", "attrs", "cattrs", "datasets", "httpx", "huggingface_hub",
    "matplotlib", "mlflow", "numpy", "openai", "pandas", "peft", "pyarrow", "ray",
    "safetensors", "sqlalchemy", "swanlab", "tensorboard", "tokenizers", "tomli", "torch",
    "tqdm", "transformers", "trinity", "tunedsl", "verl", "vllm", "wandb", "yaml",
})


#: Python's standard modules a user's module may hide: all but those no library imports.
_STANDARD = frozenset(name for name in sys.stdlib_module_names if not name.startswith("_")) \
    - {"test", "this", "antigravity", "idlelib", "turtle", "turtledemo"}


def check_no_shadowing(folder: str) -> None:
    """Refuse a module in ``folder`` (a folder on the import path, the user's) named like
    a library tunedsl or Trinity-RFT imports, or like one of Python's standard modules
    not imported yet (or imported from there): tunedsl and its libraries import many of
    them only when they need them, and would get the user's."""
    if os.path.realpath(folder) == os.path.realpath(_PACKAGE):  # tunedsl's own modules
        return
    try:
        entries = os.listdir(folder)
    except OSError:  # (a folder that cannot be listed: the import says what is wrong)
        return
    import importlib.machinery

    # (a module's source, a bare .pyc, or an extension module: Python imports each)
    suffixes = sorted(importlib.machinery.all_suffixes(), key=len, reverse=True)
    for entry in sorted(entries):
        found = os.path.join(folder, entry)
        suffix = next((end for end in suffixes if entry.endswith(end)), None)
        if suffix is not None and os.path.isfile(found):
            name, shown = entry[:-len(suffix)], display_path(found)
        elif "." not in entry and os.path.isfile(os.path.join(found, "__init__.py")):
            name, shown = entry, display_path(found)
        else:
            continue
        if os.path.realpath(found) == os.path.realpath(_PACKAGE):
            continue
        if name in LIBRARIES:
            raise ExperimentImportError(
                f"{shown}: its name hides the {name} library, which tunedsl and "
                f"Trinity-RFT import (its folder comes first on Python's import path); "
                f"rename it, e.g. my_{name}")
        loaded = sys.modules.get(name)
        if name in _STANDARD and (loaded is None or os.path.dirname(os.path.realpath(
                getattr(loaded, "__file__", None) or "")) in (os.path.realpath(folder),
                                                              os.path.realpath(found))):
            raise ExperimentImportError(
                f"{shown}: its name hides Python's standard module {name}, which tunedsl and "
                f"the libraries it uses import (its folder comes first on Python's import "
                f"path); rename it, e.g. my_{name}")


def _module_name_for(path: str) -> str:
    stem = os.path.splitext(os.path.basename(path))[0]
    existing = sys.modules.get(stem)
    if existing is None or getattr(existing, "__file__", None) == path:
        return stem
    return f"{stem}_{abs(hash(path)):x}"


#: Endings of Python's files (any case) a module spec may name: ``.py`` is imported, the
#: rest are refused with their source file named.
_PYTHON_ENDINGS = (".py", ".pyc", ".pyo", ".pyw")


#: Endings of files a module spec may name by mistake, none of them a module of Python's
#: (``exp.ipynb`` read as module ``ipynb`` of package ``exp``).
_OTHER_FILES = frozenset({"ipynb", "so", "pyd", "bak", "orig", "old", "txt", "json", "yaml",
                          "yml", "toml", "md", "sh", "cfg", "ini"})


def _spaced_for_a_colon(name: str) -> str:
    """The fix for ``exp.py E``, a space where the colon goes (a module or file there, and a
    name after it), else ``""``."""
    module, space, attribute = name.partition(" ")
    if space and attribute.strip().isidentifier() and (
            os.path.exists(module) or os.path.exists(module.replace(".", "/") + ".py")):
        return f'a space parts the module from the name in it; write "{module}:{attribute.strip()}"'
    return ""


def _import_file(path: str) -> ModuleType:
    resolved = os.path.abspath(path)
    if os.path.isdir(resolved):
        raise ExperimentImportError(f'Could not import module "{path}": that is a folder; name '
                                    f'the .py file in it that defines the experiment')
    stem, ending = os.path.splitext(path)
    source = (stem if ending.lower() in _PYTHON_ENDINGS else path) + ".py"
    if not os.path.isfile(resolved):
        from ..access import looping_link_problem, searchable, unsearchable_folder

        loop = looping_link_problem(path)
        if loop is not None:  # (said to be no such file: sweep 49 A-W5)
            raise ExperimentImportError(f'Could not import module "{path}": {loop}; fix the '
                                        f'link, or give the .py file itself')
        folder = unsearchable_folder(path)
        if folder is not None:  # (said to be no such file)
            raise ExperimentImportError(f'Could not import module "{path}": {folder} cannot '
                                        f'be searched, so nothing in it can be read; '
                                        f'{searchable(folder)}')
        unreached = _unreached_by_its_full_path(path)
        if unreached is not None:
            raise ExperimentImportError(f'Could not import module "{path}": {unreached}')
        head, _, tail = path.rpartition(".")
        spaced = _spaced_for_a_colon(path)
        # pkg.sub.mod.py: a module's dotted name with the file's ending
        dotted = stem.replace(".", os.sep) + ".py" if ending == ".py" and "." in stem and \
            os.sep not in stem and "/" not in stem else ""
        nearby = (f"; {spaced}" if spaced else
                  f'; give the source file, "{source}:NAME"' if os.path.isfile(source) else
                  f'; {head}.py is a file: to name an object in it, write "{head}.py:{tail}"'
                  if head and tail.isidentifier() and os.path.isfile(f"{head}.py") else
                  f'; {dotted} is a file: give "{dotted}:NAME", or the module "{stem}:NAME"'
                  if dotted and os.path.isfile(dotted) else "")
        raise ExperimentImportError(f'Could not import module "{path}": no such file{nearby}.')
    if ending != ".py" and ending.lower() in _PYTHON_ENDINGS:
        fix = (f'give its source file, "{source}:NAME"' if ending.lower() != ".py" else
               f"Python imports only files ending in .py, in lower case: rename it to "
               f"{os.path.basename(source)}")
        raise ExperimentImportError(f'Could not import module "{path}": {fix}.')
    running = sys.modules.get("__main__")
    if os.path.realpath(getattr(running, "__file__", None) or "") == os.path.realpath(resolved):
        # The script running now: its live module, not a second run of its top level (a
        # script calling tunedsl.run without a __main__ guard would train twice).
        return cast(ModuleType, running)
    name = _module_name_for(resolved)
    if getattr(sys.modules.get(name), "__file__", None) == resolved:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:  # a data file, a folder's README, ...
        raise ExperimentImportError(f'Could not import module "{path}": not a Python file '
                                    f'(name the .py file that defines the experiment)')
    module = importlib.util.module_from_spec(spec)
    # How tunedsl.dsl.decorators.import_string_of finds a script's functions again.
    module.__tunedsl_path__ = resolved  # type: ignore[attr-defined]
    # Registered before running so the module's classes and functions resolve by name.
    sys.modules[name] = module
    # Imports of the file's siblings work as they do when it runs as a script.
    folder = os.path.dirname(resolved)
    check_no_shadowing(folder)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        with _importing(resolved):
            spec.loader.exec_module(module)
    except KeyboardInterrupt:
        del sys.modules[name]
        raise
    except BaseException as exc:  # (GeneratorExit or a class of the user's too)
        del sys.modules[name]
        package = _package_of(resolved)
        if isinstance(exc, ImportError) and package is not None and \
                "no known parent package" in str(exc):  # (Python's words for it)
            dotted, root = package
            where = "this folder" if os.path.abspath(root) == os.getcwd() else \
                display_path(root)
            raise ExperimentImportError(
                f'Could not import module "{path}": it is the module {dotted} of a package, '
                f'and its relative imports work only when it is imported as one; give '
                f'"{dotted}:NAME" from {where}, which holds the package') from None
        raise _failed_inside(path, exc) from exc
    return module


def _package_of(file: str) -> tuple[str, str] | None:
    """The dotted name of ``file``, a module inside a package (its folder holds an
    ``__init__.py``), and the folder that holds the top package; None outside one."""
    folder, parts = os.path.dirname(file), [os.path.splitext(os.path.basename(file))[0]]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
    return (".".join(parts), folder) if len(parts) > 1 else None


#: The modules tunedsl is importing now (a file's path or a dotted name), innermost last.
_IMPORTING: list[str] = []


class _ExitedAtImport(SystemExit):
    """``os._exit(code)`` called by the importing thread while tunedsl imports the
    user's module: said as a ``sys.exit`` is, not a process gone without a word."""


@contextlib.contextmanager
def _importing(module: str) -> Iterator[None]:
    _IMPORTING.append(module)
    outermost, real_exit = len(_IMPORTING) == 1, os._exit
    limit, path, streams = sys.getrecursionlimit(), list(sys.path), (sys.stdout, sys.stderr)
    errors = [getattr(stream, "errors", None) for stream in streams]
    hooks = threading.excepthook, sys.excepthook
    exits = [os, sys.modules[os.name]] if os.name in sys.modules else [os]  # (posix._exit)
    if outermost:
        _EXITS_IN_THREADS.clear()
        for owner in exits:
            owner._exit = _exit_said(real_exit)  # type: ignore[attr-defined]
    try:
        yield
        if outermost and _EXITS_IN_THREADS:  # a thread of the module's, joined at import
            raise _ExitedAtImport(_EXITS_IN_THREADS[0])
    finally:
        _IMPORTING.pop()
        if outermost:
            for owner in exits:
                owner._exit = real_exit  # type: ignore[attr-defined]
            # What a module's import changed of the process that tunedsl needs to go on, put
            # back as rollouts put it back: a sys.setrecursionlimit(100) (an internal error
            # in yaml's re.compile), the folders of sys.path it dropped (tunedsl's own next
            # imports failed), standard streams it replaced (check printed nothing at all).
            sys.setrecursionlimit(max(sys.getrecursionlimit(), limit))
            sys.path.extend(folder for folder in path if folder not in sys.path)
            sys.stdout, sys.stderr = (reopened(stream) for stream in streams)
            # and their handling of what they cannot encode: a reconfigure(encoding="ascii")
            # makes it strict, and check's report of a non-ASCII key was an internal error
            for stream, handling in zip((sys.stdout, sys.stderr), errors):
                if handling and getattr(stream, "errors", handling) != handling:
                    with contextlib.suppress(AttributeError, ValueError, OSError):
                        stream.reconfigure(errors=handling)
            # (threading.excepthook = None: every thread's error then failed in its place,
            # transformers' loading threads' too, blamed on the model's weights)
            if not callable(threading.excepthook):
                threading.excepthook = hooks[0]
            if not callable(sys.excepthook):
                sys.excepthook = hooks[1]


def reopened(stream: Any) -> Any:
    """``stream``, or, when it is Python's own standard stream and closed (a module that
    silenced its output so: check's report was an internal error) or detached (``sys.stdout
    = io.TextIOWrapper(sys.stdout.detach(), encoding="utf-8")``, to force UTF-8), a
    stream of its own on the same file descriptor, which Python leaves open."""
    try:
        unusable = bool(getattr(stream, "closed", False))
    except ValueError:  # (detached: its buffer is the module's now)
        unusable = True
    if not unusable:
        return stream
    descriptor = {id(sys.__stdout__): 1, id(sys.__stderr__): 2}.get(id(stream))
    if descriptor is None:  # (another's stream: its descriptor is not known)
        return stream
    try:
        reopened = open(descriptor, "w", encoding=stream.encoding, errors=stream.errors,
                        closefd=False)
        reopened.reconfigure(line_buffering=stream.line_buffering)
    except (AttributeError, OSError, ValueError):  # (the descriptor closed too)
        return stream
    return reopened


#: The codes of ``os._exit`` calls made by other threads while a module was imported.
_EXITS_IN_THREADS: list[Any] = []

#: The exit code of the command that imported the modules, once it is known (`ends_with`).
_COMMAND_CODE: list[int] = []


def ends_with(code: int) -> None:
    """Record the exit code of the command that runs now: an ``os._exit`` the user's
    module arranged at its import to end the process later (``atexit.register(os._exit,
    0)``, to stop threads that hang) ends it with the command's failure, not with 0."""
    _COMMAND_CODE[:] = [code]


def _exit_said(real: Callable[[int], Any]) -> Callable[[int], Any]:
    """``os._exit`` for while a module is imported: it raises `_ExitedAtImport` in the
    importing thread of this process (a module that calls it at its top level would end
    ``check`` with exit 0 and no word); another thread of it ends, and the import fails
    once the module is run. A forked child (multiprocessing's ends with ``os._exit``)
    exits as it always does; so does a call after the import, with the command's failing
    exit code over a 0 (`ends_with`)."""
    import threading

    pid, thread = os.getpid(), threading.get_ident()

    def exit_at_import(code: int) -> Any:
        if os.getpid() == pid and _IMPORTING:
            if threading.get_ident() == thread:
                raise _ExitedAtImport(code)
            _EXITS_IN_THREADS.append(code)
            raise SystemExit(code)  # (ends the thread, without a word of threading's)
        if os.getpid() == pid and _COMMAND_CODE and _COMMAND_CODE[0]:
            return real(_COMMAND_CODE[0])
        return real(code)

    return exit_at_import


def refuse_while_imported(call: str) -> None:
    """Refuse ``call`` (an entry point: ``tunedsl.run``, ...) made at the top level of a
    module tunedsl is importing for its experiment or functions: it would run again on
    every such import (in each Ray worker too), a training inside a training."""
    if _IMPORTING:
        module = _IMPORTING[-1]
        shown = display_path(module) if os.sep in module else f'module "{module}"'
        raise ExperimentImportError(
            f"{call} at module level runs again each time tunedsl imports {shown} for the "
            f"experiment's functions (a call inside itself); put it under "
            f'if __name__ == "__main__":')


def _unreached_by_its_full_path(found: str) -> str | None:
    """Why ``found``, reached from the current folder, cannot be by its full path, which
    Python imports by: a folder above the current one that cannot be searched, and the
    ``chmod`` that lets it; None when nothing stops it."""
    import errno

    from ..access import permission_fix

    try:
        full = os.path.abspath(found)
    except OSError:  # (the current folder removed)
        return None
    if os.path.exists(full) or not os.path.lexists(found):
        return None
    fix = permission_fix(PermissionError(errno.EACCES, "Permission denied"), full)
    if fix is None:
        return None
    return (f"{found} is here, but Python imports it by its full path ({full}), and a folder "
            f"on that path cannot be searched; {fix}")


def _a_folder_that_cannot_be_listed(*packages: str) -> str | None:
    """Why Python finds no module in the folder of a package ``a.b`` (given as its names,
    or ``"."`` for the current folder): the first folder on the way that cannot be listed
    (Python finds modules by listing a folder: ``chmod 311`` hides them all), with the
    ``chmod`` that lets it; None when each can be (sweep 47 A-W3)."""
    from ..access import permission_fix

    for depth in range(1, len(packages) + 1):
        folder = os.path.join(*packages[:depth])
        try:
            os.listdir(folder)
        except PermissionError as exc:
            shown = "the current folder" if folder == "." else folder
            fix = permission_fix(exc, folder) or f"make {shown} readable"
            return f"{shown} cannot be listed ({exc.strerror}), so Python finds no module " \
                   f"in it; {fix}"
        except OSError:
            return None
    return None


def _not_found(name: str) -> str:
    """Why ``name`` cannot be imported, and the fix: a module in the current folder that
    is not on ``sys.path`` (a script puts its own folder there, not the current one) is
    named as the file it is."""
    if os.path.isfile(name) and name.lower().endswith((".zip", ".whl", ".egg")):
        return (f'Could not import module "{name}": an archive is imported from sys.path, '
                f"not named as a module; run with PYTHONPATH={name} and give the module in "
                f'it, e.g. "MODULE:NAME".')
    if os.path.isfile(name):  # exp.ipynb, exp.txt: a file, of no kind Python imports
        return (f'Could not import module "{name}": Python imports only .py files; give the '
                f'experiment in one (a notebook exported as a script), e.g. "exp.py:NAME".')
    spaced = _spaced_for_a_colon(name)
    if spaced:
        return f'Could not import module "{name}": {spaced}.'
    head, _, tail = name.rpartition(".")
    if head and (not tail or tail.lower() in _OTHER_FILES) and not os.path.exists(name):
        # exp.ipynb:E, exp.so:E, exp.:E, with no such file: a file meant, not a module
        module = head if head.endswith(".py") else head.replace(".", "/") + ".py"
        fix = (f'the experiment\'s file is {module}: give "{module}:NAME"'
               if os.path.isfile(module) else 'give the experiment\'s .py file, '
               '"FILE.py:NAME"')
        return f'Could not import module "{name}": there is no file {name} here; {fix}.'
    if head and tail.isidentifier() and tail[:1].isupper() and \
            os.path.isfile(head.replace(".", "/") + ".py"):  # exp.E for exp:E
        return (f'Could not import module "{name}": {head} is a module, and {tail} no '
                f'module of it; to name an object in it, write "{head}:{tail}".')
    top = name.split(".")[0]
    from ..access import looping_link_problem  # (a loop read as no module: sweep 50 A-W4)

    for candidate in (f"{top}.py", name.replace(".", "/") + ".py", name.replace(".", "/")):
        loop = looping_link_problem(candidate)
        if loop is not None:
            return f'Could not import module "{name}": {loop}; fix the link'
    here = [found for found in (f"{top}.py", top) if os.path.exists(found)]
    unreached = (_unreached_by_its_full_path(here[0]) if here else None) or \
        _a_folder_that_cannot_be_listed(".")
    if unreached is None and os.path.isdir(top):
        unreached = _a_folder_that_cannot_be_listed(*name.split(".")[:-1])
    if unreached is not None:
        return f'Could not import module "{name}": {unreached}'
    if here and os.getcwd() not in sys.path and "" not in sys.path:
        as_file = name.replace(".", "/") + ".py"
        return (f'Could not import module "{name}": {here[0]} is in the current folder, '
                f"which is not on sys.path (a script puts its own folder there); give the "
                f'file instead, "{as_file}:NAME", or add the folder to sys.path.')
    return (f'Could not import module "{name}": run from the folder that holds it, or '
            f"install your project (pip install -e .).")


def _import_module(name: str) -> ModuleType:
    if "" in sys.path or os.getcwd() in sys.path:
        check_no_shadowing(os.getcwd())
    try:
        with _importing(name):
            return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if name == missing or name.startswith(missing + "."):
            raise ExperimentImportError(_not_found(name)) from None
        raise _failed_inside(name, exc) from exc
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # (GeneratorExit or a class of the user's too)
        raise _failed_inside(name, exc) from exc


def import_module(module: str) -> ModuleType:
    """Import a dotted module name or a ``.py`` file path."""
    is_file = (os.path.splitext(module)[1].lower() in _PYTHON_ENDINGS or os.sep in module
               or "/" in module)
    return _import_file(module) if is_file else _import_module(module)


def _is_submodule(name: str) -> bool:
    """Whether the dotted ``name`` is a module Python finds (not imported yet)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # (a parent that is no package)
        return False


def _standard_module_imported_instead(module_name: str, module: ModuleType) -> str | None:
    """The working folder's file or package that ``module_name`` meant, shown, when Python
    gave its standard module of that name instead (``random.py``: ``random`` was imported
    before the user's, and `check_no_shadowing` lets an imported one be)."""
    top = module_name.split(".")[0]
    if top not in sys.stdlib_module_names:
        return None
    try:
        folder = os.getcwd()
    except OSError:
        return None
    for meant in (os.path.join(folder, f"{top}.py"), os.path.join(folder, top)):
        if os.path.exists(meant) and not os.path.realpath(
                getattr(module, "__file__", None) or "").startswith(os.path.realpath(meant)):
            return display_path(meant)
    return None


def load_object(target: str, *, candidates: Callable[[Any], bool] | None = None) -> Any:
    """Import ``module:attr`` (``attr`` may be dotted) and return the object.

    Args:
        target: The import string.
        candidates: Which module attributes to list when ``attr`` is missing.
    """
    try:
        module_name, attribute = split_import_string(target)
    except ExperimentImportError as error:
        if candidates is None or ":" in target or not target:
            raise
        # "pkg.mod" alone: say which attributes would do, as "pkg.mod:Name".
        names = [n for n, v in vars(import_module(target)).items() if candidates(v)]
        if not names:
            raise ExperimentImportError(f"{error} Module \"{target}\" defines none of the "
                                        f"expected kind.") from None
        raise ExperimentImportError(f"{error} Found: "
                                    f"{', '.join(f'{target}:{n}' for n in names)}.") from None
    module = import_module(module_name)
    found: Any = module
    for part in attribute.split("."):
        try:
            with _importing(module_name):  # (a module's __getattr__ runs the user's code)
                found = getattr(found, part)
        except AttributeError:
            shadowed = _standard_module_imported_instead(module_name, module)
            if shadowed is not None:
                top = module_name.split(".")[0]
                raise ExperimentImportError(
                    f"{shadowed}: its name is that of Python's standard module {top}, which was "
                    f"imported before it, so \"{module_name}\" is Python's; rename it, e.g. "
                    f"my_{top}, and give \"my_{top}{module_name[len(top):]}:{attribute}\""
                ) from None
            message = f'Attribute "{attribute}" not found in module "{module_name}".'
            if _is_submodule(f"{module_name}.{attribute}"):  # pkg.sub:mod for pkg.sub.mod:E
                raise ExperimentImportError(
                    f'{message} {module_name}.{attribute} is a module of it: give the object '
                    f'in that, e.g. "{module_name}.{attribute}:NAME".') from None
            if candidates is not None:
                names = [n for n, v in vars(module).items() if candidates(v)]
                message += (f" Found: {', '.join(names)}." if names else
                            " It defines none of the expected kind.")
            raise ExperimentImportError(message) from None
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # (GeneratorExit or a class of the user's too)
            raise _failed_inside(module_name, exc) from exc
    return found
