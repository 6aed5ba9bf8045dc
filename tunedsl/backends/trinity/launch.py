"""Run an experiment on Trinity-RFT over Ray: run directory, preflight, code shipping, launch.

The YAML written into the run directory is the whole run: ``trinity run --config
<run_dir>/config.yaml`` runs it unchanged. User code reaches Ray workers through a
job ``runtime_env``: the experiment's top-level package or module as
``py_modules``, or, for a script given by path, its folder as ``working_dir``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs

from ...config.graph import ExperimentGraph
from ...errors import ConfigError, RunError, RunInterrupted
from ...runtime.preflight import preflight
from ...runtime.rundir import run_name, write_run_files
from .config import to_yaml, trinity_config
from .validate import gpus_needed, validate_with_trinity

INSTALL_HINT = 'pip install "tunedsl[trinity]"'


@attrs.frozen(kw_only=True)
class TrinityRunSummary:
    """The outcome of a Trinity run."""

    run_dir: Path
    seconds: float | None

    def print(self) -> None:
        """Print where the run's outputs are."""
        print(f"run directory  {self.run_dir}")
        if self.seconds is not None:
            print(f"time           {self.seconds:.0f} s")
        print(f"tensorboard    tensorboard --logdir {self.run_dir / 'monitor'}")


def require_trinity() -> None:
    """Fail with the install command when Trinity-RFT is not importable."""
    if importlib.util.find_spec("trinity") is None:
        raise ConfigError(f"Trinity-RFT is not installed; install it with: {INSTALL_HINT}")


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
        location = (list(spec.submodule_search_locations)[0] if spec.submodule_search_locations
                    else spec.origin)
        if location and not _is_installed(location) and location not in modules:
            modules.append(location)
    return modules, working_dir, renamed


def _ship(config: dict[str, Any]) -> dict[str, Any]:
    """The runtime_env for the user's code; rewrites ``config``'s import strings to match."""
    tasksets = [config["buffer"]["explorer_input"]["taskset"],
                *config["buffer"]["explorer_input"].get("eval_tasksets", [])]
    refs = sorted({ref for taskset in tasksets
                   for key, ref in (taskset.get("workflow_args") or {}).items()
                   if key in ("workflow", "judge", "experiment")})
    modules, working_dir, renamed = code_to_ship(refs)
    for taskset in tasksets:
        args = taskset.get("workflow_args") or {}
        for key in ("workflow", "judge", "experiment"):
            if key in args:
                args[key] = renamed.get(args[key], args[key])
    env: dict[str, Any] = {}
    if modules:
        env["py_modules"] = modules
    if working_dir:
        env["working_dir"] = working_dir
    return env


def relocate(config: dict[str, Any], run_dir: str | Path) -> None:
    """Point a config's ``<root>/<project>/<group>/<name>`` at ``run_dir``, wherever the
    run folder now lives (Trinity finds a run to continue by that path)."""
    folder = Path(run_dir).resolve()
    config["name"] = folder.name
    if config.get("group"):
        config["group"], folder = folder.parent.name, folder.parent
    config["project"] = folder.parent.name
    config["checkpoint_root_dir"] = str(folder.parent.parent)


def connect_ray(address: str | None, runtime_env: dict[str, Any], namespace: str) -> str:
    """Connect to ``address``, ``RAY_ADDRESS`` or a running cluster; else start one locally.

    Returns a sentence saying which, for the terminal.
    """
    import ray

    address = address or os.environ.get("RAY_ADDRESS")
    options = {"runtime_env": runtime_env, "namespace": namespace, "ignore_reinit_error": True}
    if address:
        try:
            ray.init(address=address, **options)
        except ConnectionError as exc:
            raise ConfigError(f"Ray cluster at {address} is not reachable: {exc}") from None
        return f"connected to the Ray cluster at {address}"
    try:
        ray.init(address="auto", **options)
        return "connected to the running Ray cluster"
    except ConnectionError:
        ray.init(**options)
        return "no Ray cluster was running, so a local Ray instance was started"


def check_gpus(needed: int) -> None:
    """The cluster must have the GPUs the config needs before anything is asked of it."""
    import ray

    available = int(ray.cluster_resources().get("GPU", 0))
    if available < needed:
        raise ConfigError(f"the config needs {needed} GPUs as Trinity-RFT counts them (each "
                          f"engine's data x tensor x pipeline parallel size, auxiliary engines, "
                          f"and the trainer's), the cluster has {available}")


def _validated(config: dict[str, Any], folder: str) -> Any:
    from trinity.common.config import load_config

    path = os.path.join(folder, "config.yaml")
    Path(path).write_text(to_yaml(config))
    try:
        return load_config(path)
    except Exception as exc:  # Trinity raises ValueError with OmegaConf's reason
        raise ConfigError(f"trinity: {' '.join(str(exc).split())}") from None


def run_trinity(graph: ExperimentGraph, *, resume: str | Path | None = None,
                ray_address: str | None = None) -> TrinityRunSummary:
    """Launch ``graph`` on Trinity-RFT; see the module docstring.

    Raises:
        ConfigError: bad input found before any GPU is asked for.
        RunError: the run failed (exit code 1).
        RunInterrupted: Ctrl-C; the run directory can be resumed.
    """
    require_trinity()
    name = Path(resume).name if resume is not None else run_name(graph)
    config = trinity_config(graph, name=name)
    # Datasets, task keys, a scripted rollout, then Trinity's own validation.
    for line in [*preflight(graph), validate_with_trinity(config)]:
        print(f"ok  {line}", file=sys.stderr)
    if resume is not None:
        relocate(config, resume)
    if ray_address:
        config.setdefault("cluster", {})["ray_address"] = ray_address
    runtime_env = _ship(config)
    with tempfile.TemporaryDirectory(prefix="tunedsl-") as scratch:
        loaded = _validated(config, scratch)
    run_dir = Path(loaded.get_checkpoint_job_dir())
    if resume is None:
        if run_dir.exists():
            raise ConfigError(f"run directory {run_dir} already exists; resume it with "
                              f"--resume {run_dir}")
        run_dir.mkdir(parents=True)
    else:
        config["continue_from_checkpoint"] = True
    write_run_files(run_dir, graph, to_yaml(config))  # before anything starts
    # Trinity sizes the cluster by asking Ray, but Ray must start with Trinity's
    # environment variables: get those from a validation with the size filled in.
    needed = gpus_needed(config)
    with tempfile.TemporaryDirectory(prefix="tunedsl-") as scratch:
        sized = {**config, "cluster": {**config.get("cluster", {}), "node_num": 1,
                                       "gpu_per_node": needed}}
        runtime_env["env_vars"] = _validated(sized, scratch).check_and_update().get_envs()
    namespace = "/".join(p for p in (config.get("project"), config.get("group"), name) if p)
    print(connect_ray(ray_address, runtime_env, namespace), file=sys.stderr)
    try:
        check_gpus(needed)
        trinity = _validated(config, str(run_dir)).check_and_update()
    except Exception as exc:
        import ray

        ray.shutdown()
        if resume is None:  # nothing ran: do not leave an empty run behind
            shutil.rmtree(run_dir, ignore_errors=True)
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"trinity: {' '.join(str(exc).split())}") from None
    print(f"run directory  {run_dir}\nlogs           {trinity.log.save_dir}\n"
          f"tensorboard    {trinity.monitor.cache_dir}\ncheckpoints    {run_dir}/global_step_N",
          file=sys.stderr)
    from trinity.cli.launcher import run_stage

    try:
        status = run_stage(trinity)
    except KeyboardInterrupt:
        import ray

        ray.shutdown()
        raise RunInterrupted(f"interrupted; resume with --backend trinity --resume {run_dir}",
                             run_dir=str(run_dir)) from None
    if not status.success:
        error = status.error
        detail = f"{error.type_name}: {error.message}" if error else "no error reported"
        raise RunError(f"the Trinity run failed ({detail}); logs in {trinity.log.save_dir}")
    return TrinityRunSummary(run_dir=run_dir, seconds=status.total_time_sec)
