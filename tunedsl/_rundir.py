"""Run directories: ``<checkpoint_root_dir>/<project>/<name>-<YYYYmmddHHMMSS>/``.

Every backend writes the same files before it starts: ``experiment.yaml`` (the
resolved experiment graph) and ``config.yaml`` (the Trinity-RFT config; strings
read from the environment stay ``${oc.env:...}`` references, so no secret is
written). A run is resumed only when asked, by naming its directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from ._graph import ExperimentGraph, make_converter
from .errors import ConfigError

_STEP_DIR = re.compile(r"^global_step_(\d+)$")


def create_run_dir(graph: ExperimentGraph, run_name: str) -> Path:
    """Make a fresh run directory; refuse to reuse one (that would mix two runs)."""
    folder = Path(graph.checkpoint_root_dir) / graph.project / run_name
    try:
        folder.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise ConfigError(f"run directory {folder} already exists; resume it with --resume "
                          f"{folder}, or let a new timestamp name a new run") from None
    except OSError as exc:
        raise ConfigError(f"checkpoint_root_dir: cannot create {folder}: {exc.strerror}") \
            from None
    return folder


def write_run_files(folder: Path, graph: ExperimentGraph, trinity: dict[str, Any]) -> None:
    """Record the resolved experiment and its Trinity config in the run directory."""
    from .backends.trinity.config import to_yaml

    experiment = make_converter().unstructure(graph)
    (folder / "experiment.yaml").write_text(
        yaml.safe_dump(plain(experiment), sort_keys=False, allow_unicode=True))
    (folder / "config.yaml").write_text(to_yaml(trinity))


def plain(value: Any) -> Any:
    """Data with EnvValue strings replaced by their ``${oc.env:...}`` templates."""
    template = getattr(value, "template", None)
    if template is not None:
        return template
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def checkpoints(folder: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """The ``global_step_N`` folders of a run, oldest first."""
    found = []
    for child in Path(folder).iterdir() if Path(folder).is_dir() else ():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def resume_dir(path: str | os.PathLike[str]) -> Path:
    """Check that ``path`` is a run directory that can be resumed."""
    folder = Path(path)
    if not (folder / "experiment.yaml").is_file():
        raise ConfigError(f"--resume {path}: not a tunedsl run directory (it has no "
                          f"experiment.yaml); give the folder a run printed when it started")
    return folder
