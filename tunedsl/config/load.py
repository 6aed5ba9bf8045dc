"""`load_experiment`: an ``@experiment`` (or its import string) to its checked graph."""

from __future__ import annotations

import os
import types
from collections.abc import Iterable

from ..dsl.decorators import experiment_spec, import_string_of, is_experiment
from ..errors import ConfigError, ExperimentImportError
from .graph import ExperimentGraph, build_graph
from .importer import load_object
from .paths import home


def load_experiment(
    target: str | type,
    *,
    settings: str | os.PathLike[str] | None = None,
    overrides: Iterable[str] = (),
) -> ExperimentGraph:
    """Load an ``@experiment`` and build its experiment graph.

    Args:
        target: ``"pkg.mod:Attr"``, ``"path/to/file.py:Attr"``, or the class itself.
        settings: A TOML file to use instead of the discovered one.
        overrides: ``"dotted.key=value"`` items, applied last (like ``--set``).

    Raises:
        ExperimentImportError: the import string cannot be resolved.
        ConfigError: the settings are invalid (every problem, one line each).
    """
    if settings is not None and (not isinstance(settings, (str, os.PathLike))
                                 or not os.fspath(settings).strip()):
        raise ConfigError(f"settings={settings!r}: give the path of a TOML settings file (a "
                          f"str or a pathlib.Path)")
    if isinstance(target, (os.PathLike, bytes, bytearray, memoryview)):  # a path, not a spec
        path = os.fsdecode(bytes(target) if isinstance(target, (bytearray, memoryview))
                           else target)
        spec = path if ":" in os.path.basename(path) else f"{path}:ClassName"
        shown = f"{type(target).__name__}({path!r})" if isinstance(
            target, (bytearray, memoryview)) else repr(target)
        raise ExperimentImportError(
            f"{shown} is a path; give the experiment as a string naming the file and the "
            f'class in it, e.g. "{spec}", or the class itself')
    obj = load_object(target, candidates=is_experiment) if isinstance(target, str) else target
    if not is_experiment(obj) and is_experiment(type(obj)):
        raise ExperimentImportError(
            f"{type(obj).__qualname__}(...) is an instance of the @experiment class "
            f"{type(obj).__qualname__}; pass the class itself: {type(obj).__qualname__}, "
            f"without ()")
    if not is_experiment(obj):
        where = f'"{target}"' if isinstance(target, str) else repr(target)
        module = target.rpartition(":")[0] if isinstance(target, str) else ""
        if isinstance(obj, types.ModuleType):  # pkg.sub:mod for pkg.sub.mod:E
            module = obj.__name__
        found = _experiments_in(module) if module else []
        fix = (f"the module defines {', '.join(found)}: give " +
               " or ".join(f'"{module}:{name}"' for name in found)
               if found else "decorate the class with @experiment")
        raise ExperimentImportError(
            f"{where} is not an @experiment class (got {type(obj).__name__}); {fix}")
    return build_graph(experiment_spec(obj), source=import_string_of(obj),
                       settings_file=None if settings is None else home(os.fspath(settings)),
                       overrides=overrides)


def _experiments_in(module_name: str) -> list[str]:
    """The @experiment classes the module ``module_name`` defines, by name (imported
    already: `load_object` has)."""
    from .importer import import_module

    try:
        module = import_module(module_name)
    except Exception:  # noqa: BLE001 - (imported a moment ago; if not, no suggestion)
        return []
    return [name for name, value in vars(module).items()
            if is_experiment(value) and getattr(value, "__module__", None) == module.__name__]
