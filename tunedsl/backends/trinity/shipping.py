"""What of the user's code reaches the Ray workers, and a check that it can.

User code reaches workers through the job's ``runtime_env``: the experiment's top-level
package or module as ``py_modules``, or, for a script given by path, its folder as
``working_dir``. Ray honours ``.gitignore`` and ``.rayignore`` there; tunedsl adds the
folders no worker needs (run directories, virtual environments, ``.git``, caches), and
packs the folders once before launch with Ray's own packer, so a package over Ray's
upload limit is refused before anything starts, naming its biggest files.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ...runs.run_files import CHECKPOINT_ROOT_DIR, EVALS_DIR, PROMPTS_DIR

#: Never uploaded (gitignore patterns): runs, environments, caches and version control.
EXCLUDES = (".git", ".venv*", "venv", "env", "__pycache__", "*.pyc", ".pytest_cache",
            ".ruff_cache", ".mypy_cache", "*.egg-info", CHECKPOINT_ROOT_DIR, EVALS_DIR,
            PROMPTS_DIR, "wheels")
_REF_KEYS = ("workflow", "judge", "experiment")


def _is_installed(path: str) -> bool:
    return any(part in ("site-packages", "dist-packages") for part in Path(path).parts)


def code_to_ship(refs: list[str]) -> tuple[list[str], str | None, dict[str, str]]:
    """What the workers need to import the user's code.

    Returns ``(py_modules, working_dir, renamed)``: top-level packages or modules to
    upload, a folder to use as the workers' working directory (for scripts given
    by path), and the import strings rewritten to be found from there.
    """
    modules: list[str] = []
    working_dir = None
    renamed: dict[str, str] = {}
    for ref in refs:
        module, _, attribute = ref.rpartition(":")
        if module.endswith(".py"):
            folder = os.path.dirname(module)
            working_dir = working_dir or folder
            if os.path.dirname(module) == working_dir:
                renamed[ref] = f"{os.path.basename(module)}:{attribute}"
            continue
        spec = importlib.util.find_spec(module.split(".")[0])
        if spec is None:
            continue
        location = (next(iter(spec.submodule_search_locations)) if spec.submodule_search_locations
                    else spec.origin)
        if location and not _is_installed(location) and location not in modules:
            modules.append(location)
    return modules, working_dir, renamed


def _excludes(folder: str, config: dict[str, Any]) -> list[str]:
    """`EXCLUDES`, plus the run's checkpoint root when it lies inside ``folder``."""
    excludes = list(EXCLUDES)
    root = Path(config.get("checkpoint_root_dir") or CHECKPOINT_ROOT_DIR).resolve()
    if root.is_relative_to(Path(folder).resolve()) and root != Path(folder).resolve():
        excludes.append("/" + root.relative_to(Path(folder).resolve()).as_posix())
    return excludes


def ship(config: dict[str, Any]) -> dict[str, Any]:
    """The runtime_env for the user's code; rewrites ``config``'s import strings to match."""
    tasksets = [config["buffer"]["explorer_input"]["taskset"],
                *config["buffer"]["explorer_input"].get("eval_tasksets", [])]
    refs = sorted({ref for taskset in tasksets
                   for key, ref in (taskset.get("workflow_args") or {}).items()
                   if key in _REF_KEYS})
    modules, working_dir, renamed = code_to_ship(refs)
    for taskset in tasksets:
        args = taskset.get("workflow_args") or {}
        for key in _REF_KEYS:
            if key in args:
                args[key] = renamed.get(args[key], args[key])
    env: dict[str, Any] = {}
    if modules:
        env["py_modules"] = modules
    if working_dir:
        env["working_dir"] = working_dir
    folders = [*modules, *([working_dir] if working_dir else [])]
    if folders:
        env["excludes"] = sorted({p for folder in folders for p in _excludes(folder, config)})
    return env


def _biggest_files(folder: str, excludes: list[str], count: int = 5) -> list[tuple[int, str]]:
    from ray._private.runtime_env.packaging import _dir_travel, _get_excludes

    found: list[tuple[int, str]] = []

    def note(path: Path) -> None:
        if path.is_file():
            found.append((path.stat().st_size, str(path)))

    _dir_travel(Path(folder), [_get_excludes(Path(folder), excludes)], note,
                include_gitignore=True)
    return sorted(found, reverse=True)[:count]


def _mib(size: float) -> str:
    return f"{size / 2**20:.1f} MiB"


def check_upload_size(env: dict[str, Any]) -> None:
    """Pack each shipped folder as Ray will, and refuse one over Ray's upload limit."""
    try:
        from ray._private.runtime_env.packaging import GCS_STORAGE_MAX_SIZE, create_package
    except ImportError:  # Ray's packer moved: Ray itself reports an oversized package
        return
    folders = [*env.get("py_modules", ()), *([env["working_dir"]] if "working_dir" in env
                                              else [])]
    excludes = list(env.get("excludes", ()))
    for folder in folders:
        if not os.path.isdir(folder):
            continue
        with tempfile.TemporaryDirectory(prefix="tunedsl-package-") as scratch:
            package = Path(scratch) / "package.zip"
            create_package(folder, package, include_gitignore=True, excludes=excludes,
                           logger=None)
            size = package.stat().st_size
        if size >= GCS_STORAGE_MAX_SIZE:
            biggest = ", ".join(f"{path} ({_mib(n)})"
                                for n, path in _biggest_files(folder, excludes))
            raise ConfigError(
                f"{folder}: the code shipped to the Ray workers packs to {_mib(size)}, over "
                f"Ray's upload limit of {_mib(GCS_STORAGE_MAX_SIZE)}; its biggest files: "
                f"{biggest}; list what the workers do not need in .gitignore or .rayignore")
