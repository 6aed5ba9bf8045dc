"""Starting a run: pick a backend, then hand the experiment graph to it."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ._graph import ExperimentGraph
from .errors import ConfigError

BACKENDS = ("auto", "local", "trinity")


def _visible_gpus() -> int:
    """GPUs this machine shows (without importing torch when no driver is installed)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    import torch

    return torch.cuda.device_count()


def choose_backend(requested: str) -> tuple[str, str]:
    """The backend to use and why, for ``--backend auto|local|trinity``."""
    if requested not in BACKENDS:
        raise ConfigError(f"--backend {requested}: choose one of {', '.join(BACKENDS)}")
    if requested != "auto":
        return requested, "chosen with --backend"
    if importlib.util.find_spec("trinity") is None:
        return "local", 'Trinity-RFT is not installed (pip install "tunedsl[trinity]")'
    gpus = _visible_gpus()
    if gpus == 0:
        return "local", "no GPU is visible on this machine"
    return "trinity", f"Trinity-RFT is installed and {gpus} GPU(s) are visible"


#: Settings a resumed run may change: how long it goes on, and how often it saves and
#: evaluates. Anything else would make the rest of the run a different experiment.
RESUMABLE_CHANGES = frozenset({
    "train_dataset.total_steps", "train_dataset.total_epochs",
    "algorithm.save_interval_steps", "algorithm.eval_interval_steps",
})  # fmt: skip
#: Graph fields that are code or bookkeeping, not settings (code may be fixed mid-run).
_NOT_SETTINGS = ("source", "workflow", "judge", "explicit")


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def _check_resume(graph: ExperimentGraph, resume: str | Path) -> Path:
    import yaml

    from ._graph import make_converter
    from ._rundir import plain, resume_dir

    folder = resume_dir(resume)
    recorded = yaml.safe_load((folder / "experiment.yaml").read_text()) or {}
    if recorded.get("name") != graph.name:
        raise ConfigError(f"--resume {resume}: that run is of experiment {recorded.get('name')!r}, "
                          f"not {graph.name!r}; resume it with the experiment that started it")
    now = plain(make_converter().unstructure(graph))
    before, after = (_flat({k: v for k, v in d.items() if k not in _NOT_SETTINGS})
                     for d in (recorded, now))
    changed = sorted(key for key in before.keys() | after.keys()
                     if before.get(key) != after.get(key) and key not in RESUMABLE_CHANGES)
    if changed:
        details = ", ".join(f"{key} (run: {before.get(key)!r}, now: {after.get(key)!r})"
                            for key in changed)
        raise ConfigError(f"--resume {resume}: the run was started with other settings: "
                          f"{details}; resume with the --settings/--set it was started with "
                          f"(only total_steps, total_epochs and the save/eval intervals may "
                          f"change), or start a new run")
    return folder


def run(
    target: str | type | ExperimentGraph,
    *,
    backend: str = "auto",
    settings: str | None = None,
    overrides: Iterable[str] = (),
    resume: str | Path | None = None,
    progress: bool = True,
    ray_address: str | None = None,
) -> Any:
    """Run an experiment to the end and return the backend's summary.

    Args:
        target: ``"pkg.mod:Attr"``, ``"path/file.py:Attr"``, the class, or a built graph.
        backend: ``auto`` (Trinity where it is installed and GPUs are visible, else
            local), ``local`` or ``trinity``.
        settings: A TOML file to use instead of the discovered one.
        overrides: ``"dotted.key=value"`` items.
        resume: A run directory to continue (same experiment).
        progress: Show a progress bar.
        ray_address: The Ray cluster for the Trinity backend (else ``RAY_ADDRESS``, a
            running cluster, or a new local one).
    """
    from ._api import load_experiment

    graph = target if isinstance(target, ExperimentGraph) else load_experiment(
        target, settings=settings, overrides=overrides)
    chosen, reason = choose_backend(backend)
    print(f"backend: {chosen} ({reason})", file=sys.stderr)
    folder = _check_resume(graph, resume) if resume is not None else None
    if chosen == "local":
        from .backends.local.run import run_local

        return run_local(graph, resume=folder, progress=progress)
    from .backends.trinity.launch import run_trinity

    return run_trinity(graph, resume=folder, ray_address=ray_address)
