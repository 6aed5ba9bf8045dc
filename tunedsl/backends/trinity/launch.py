"""Run an experiment on Trinity-RFT over Ray: preflight, Ray, run directory, launch.

Everything that can fail does so before anything is asked of a GPU or left on disk:
the preflight and Trinity's validation, the code shipped to the workers
(`shipping`), the Ray cluster (probed before Ray tries it: a wrong address is one line,
not minutes of retries) and its GPUs (counted before a local Ray is started). Only then
is the run directory made; the YAML written there is the whole run (``trinity run
--config <run_dir>/config.yaml`` runs it unchanged). Ray is shut down however the run
ends.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs

from ...checks.preflight import Note, preflight
from ...config.graph import ExperimentGraph
from ...errors import ConfigError, RunInterrupted
from ...runs.run_files import CONFIG_YAML, MONITOR_DIR, STEP_DIR_SHOWN
from ...runs.rundir import run_name, write_run_files
from ...wording import option, options, said
from .checks import TRINITY_CHECKS, TRINITY_REPORT_CHECKS, trinity_notes
from .cluster import explicit_cluster, ray_cluster, shared_run_dir, visible_gpus
from .config import to_yaml, trinity_config, with_bounds
from .ray_head import RayHead, token_auth_as_ray_decides, unreachable
from .resume import rewind_explorer
from .shipping import check_upload_size, ship
from .stages import run_checked, run_stages
from .tasksets import check_added_eval_tasksets
from .unattended import unattended
from .validate import (
    gpus_needed,
    lora_build_limited,
    sized_for,
    validate_with_trinity,
)


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
        print(f"tensorboard    tensorboard --logdir {self.run_dir / MONITOR_DIR}")
        print(f"rollouts       tunedsl view {self.run_dir}")


def relocate(config: dict[str, Any], run_dir: str | Path) -> None:
    """Point a config's ``<root>/<project>/<group>/<name>`` at ``run_dir``, wherever the
    run folder now lives (Trinity finds a run to continue by that path)."""
    folder = Path(run_dir).resolve()
    config["name"] = folder.name
    if config.get("group"):
        config["group"], folder = folder.parent.name, folder.parent
    config["project"] = folder.parent.name
    config["checkpoint_root_dir"] = str(folder.parent.parent)


def _gpu_message(needed: int) -> str:
    return (f"the config needs {needed} GPUs as Trinity-RFT counts them (each engine's data x "
            f"tensor x pipeline parallel size, auxiliary engines, and the trainer's)")


@attrs.frozen
class RayConnection:
    """Where the run's Ray is, how it was reached (a sentence for the terminal), and the
    head tunedsl started for it (None on the user's cluster)."""

    address: str
    how: str
    head: RayHead | None = None

    def connect(self, runtime_env: dict[str, Any], namespace: str) -> None:
        """Connect this process with the run's runtime_env (again after Trinity's
        ``run_stage`` disconnected it with ``ray.shutdown()``)."""
        import ray

        ray.init(address=self.address, runtime_env=runtime_env, namespace=namespace,
                 ignore_reinit_error=True)

    def close(self, namespace: str) -> None:
        """Disconnect; on the user's cluster, first end what the run left there (Trinity's
        detached actors of the run's namespace, its Synchronizer among them: a failed
        run leaves them alive); a head of tunedsl's own is stopped with all it ran."""
        import ray

        if self.head is None:
            try:  # Trinity's run_stage ends with ray.shutdown(): connect again to look
                if not ray.is_initialized():
                    ray.init(address=self.address, namespace=namespace, log_to_driver=False)
                end_named_actors(namespace)
            except Exception as exc:  # the run's outcome stands; say what was left
                print(f"warning  could not end the run's actors on the Ray cluster at "
                      f"{self.address} ({' '.join(str(exc).split())}); list them with "
                      f"'ray list actors --filter namespace={namespace}'", file=sys.stderr)
        ray.shutdown()
        if self.head is not None:
            self.head.stop()


def end_named_actors(namespace: str) -> list[str]:
    """Kill every named actor of ``namespace`` (the run's own); returns their names."""
    import ray

    ended = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry.get("namespace") != namespace:
            continue
        try:
            ray.kill(ray.get_actor(entry["name"], namespace=namespace))
            ended.append(entry["name"])
        except ValueError:  # it ended meanwhile
            pass
    return ended


def running_cluster() -> str:
    """The address of the Ray cluster running on this machine, found as
    ``ray.init(address="auto")`` finds it (Ray's address file, then its GCS processes).

    Raises:
        ConnectionError: none runs, or the one Ray's address file names no longer answers
            (a Ray that crashed or was killed leaves it; ``ray.init`` would retry it for
            minutes).
    """
    from ray._private.services import get_ray_address_from_environment

    found = get_ray_address_from_environment("auto", None)
    if unreachable(found) is not None:
        raise ConnectionError(f"the Ray cluster last started here ({found}) is gone")
    return found


def connect_ray(address: str | None, runtime_env: dict[str, Any], namespace: str,
                needed: int) -> RayConnection:
    """Connect to ``address``, ``RAY_ADDRESS`` or a running cluster; else start a head of
    tunedsl's own (`RayHead`) when this machine has the ``needed`` GPUs."""
    import ray

    source = said(f"--ray-address {address}", f"ray_address={address!r}") if address \
        else f"RAY_ADDRESS {os.environ.get('RAY_ADDRESS')}"
    address = address or os.environ.get("RAY_ADDRESS")
    if address == "auto":  # Ray's word for "the cluster running here", never a new one
        try:
            address = running_cluster()
        except ConnectionError:
            raise ConfigError(f"{source}: no Ray cluster runs on this machine; start one "
                              f"with 'ray start --head', or leave the address out and "
                              f"tunedsl starts one for the run") from None
    if address:
        reason = unreachable(address)
        if reason:
            raise ConfigError(f"{source}: no Ray cluster answers there ({reason}); "
                              f"start one with 'ray start --head', or give its address")
        connection = RayConnection(address, f"connected to the Ray cluster at {address}")
    else:
        try:
            found = running_cluster()
            token_auth_as_ray_decides()  # as ray.init(address="auto") does for it
            ray.init(address=found, runtime_env=runtime_env, namespace=namespace,
                     ignore_reinit_error=True)
            connection = RayConnection(found, "connected to the running Ray cluster")
        except ConnectionError:
            gpus = visible_gpus()
            if gpus < needed:  # say so now, not after starting Ray to find the same
                raise ConfigError(f"{_gpu_message(needed)}, this machine has {gpus} and no "
                                  f"Ray cluster is running") from None
            head = RayHead.start()
            connection = RayConnection(head.address, "no Ray cluster was running, so tunedsl "
                                       "started a Ray head for this run", head)
    try:
        connection.connect(runtime_env, namespace)
    except BaseException:
        if connection.head is not None:
            connection.head.stop()
        raise
    return connection


def check_gpus(needed: int) -> None:
    """The cluster must have the GPUs the config needs before anything is asked of it."""
    import ray

    available = int(ray.cluster_resources().get("GPU", 0))
    if available < needed:
        raise ConfigError(f"{_gpu_message(needed)}, the cluster has {available}")


def _say(*lines: str) -> None:
    """Report lines on stderr: ``note  ...`` for a `Note`, ``ok  ...`` for the rest."""
    for line in lines:
        print(f"{'note' if isinstance(line, Note) else 'ok'}  {line}", file=sys.stderr)


def _validated(config: dict[str, Any], folder: str) -> Any:
    from trinity.common.config import load_config

    path = os.path.join(folder, CONFIG_YAML)
    Path(path).write_text(to_yaml(config))
    try:
        return load_config(path)
    except Exception as exc:  # Trinity raises ValueError with OmegaConf's reason
        raise ConfigError(f"trinity: {' '.join(str(exc).split())}") from None


def _checked(config: dict[str, Any], folder: str, *, quiet: bool = False) -> Any:
    """Trinity's checked config; its validator never waits on a prompt here, nor builds a
    large model for a dummy LoRA adapter (the run's own validation does that)."""
    loaded = _validated(config, folder)
    with unattended(quiet=quiet), lora_build_limited([]):
        return loaded.check_and_update()


def run_trinity(graph: ExperimentGraph, *, resume: str | Path | None = None,
                ray_address: str | None = None) -> TrinityRunSummary:
    """Launch ``graph`` on Trinity-RFT; see the module docstring.

    Raises:
        ConfigError: bad input found before any GPU is asked for (nothing left behind).
        RunError: the run failed (exit code 1).
        RunInterrupted: Ctrl-C; the run directory can be resumed.
    """
    # The backend's checks, datasets, task keys, a scripted rollout, then Trinity's own
    # validation (the YAML is made only once Trinity is known to be installed).
    report = preflight(graph, TRINITY_CHECKS, TRINITY_REPORT_CHECKS)
    name = Path(resume).name if resume is not None else run_name(graph)
    config = trinity_config(graph, name=name, rows=report.rows)
    # The split is said once the run knows its cluster (from Ray, below).
    _say(*report.lines, *check_added_eval_tasksets(graph, config, "trinity"),
         *validate_with_trinity(config, show_split=False),
         *trinity_notes(graph, report, config))
    if resume is not None:
        relocate(config, resume)
    if ray_address:
        config.setdefault("cluster", {})["ray_address"] = ray_address
    runtime_env = ship(config)
    check_upload_size(runtime_env)
    with tempfile.TemporaryDirectory(prefix="tunedsl-") as scratch:
        run_dir = Path(_validated(config, scratch).get_checkpoint_job_dir())
    if resume is None and run_dir.exists():
        raise ConfigError(f"run directory {run_dir} already exists; resume it with "
                          f"{option('resume', run_dir)}")
    needed = gpus_needed(config)
    made = run_dir  # the topmost folder this launch creates, removed if it fails
    while not made.parent.exists():
        made = made.parent
    import ray

    connection: RayConnection | None = None
    try:
        # Trinity sizes the cluster by asking Ray, but Ray must start with Trinity's
        # environment variables (its log folder in the run directory among them): get
        # those from a validation with the size filled in. It makes the run's folders.
        with tempfile.TemporaryDirectory(prefix="tunedsl-") as scratch:
            sized = {**config, "cluster": {**config.get("cluster", {}), "node_num": 1,
                                           "gpu_per_node": needed}}
            runtime_env["env_vars"] = _checked(sized, scratch, quiet=True).get_envs()
        # Auxiliary endpoints' keys reach the workers as they reach Trinity's own external
        # models: in the job's environment, never in a file.
        keys = [spec.api_key_env for spec in graph.auxiliary_models.values()
                if spec.api_key_env] + (["TINKER_API_KEY"] if graph.tinker else [])
        runtime_env["env_vars"].update({key: os.environ[key] for key in keys
                                        if os.environ.get(key)})
        namespace = "/".join(p for p in (config.get("project"), config.get("group"), name) if p)
        connection = connect_ray(ray_address, runtime_env, namespace, needed)
        print(connection.how, file=sys.stderr)
        check_gpus(needed)
        if not graph.tinker:  # the split verl can train on, for the cluster Ray reports
            config, layout = sized_for(config, explicit_cluster(config) or ray_cluster())
            config = with_bounds(graph, config, report.rows)  # for the engines it now runs
            _say(layout.line())
        run_dir.mkdir(parents=True, exist_ok=True)
        if resume is not None:
            config["continue_from_checkpoint"] = True
        write_run_files(run_dir, graph, to_yaml(config))  # before anything starts
        _say(*shared_run_dir(run_dir))  # several nodes: each must see the run directory
        trinity = _checked(config, str(run_dir))
        if resume is not None:
            _say(*filter(None, [rewind_explorer(run_dir, config, trinity)]))
    except BaseException as exc:
        if connection is not None:
            connection.close(namespace)
        else:
            ray.shutdown()
        if resume is None:  # nothing ran: do not leave a run behind
            shutil.rmtree(made, ignore_errors=True)
        if isinstance(exc, ConfigError) or not isinstance(exc, Exception):
            raise
        raise ConfigError(f"trinity: {' '.join(str(exc).split())}") from None
    print(f"run directory  {run_dir}\nlogs           {trinity.log.save_dir}\n"
          f"tensorboard    {trinity.monitor.cache_dir}\ncheckpoints    {run_dir}/{STEP_DIR_SHOWN}",
          file=sys.stderr)
    try:
        if trinity.stages:  # a warm-up, then RL: Trinity's launcher's loop (stages.py)
            loaded = _validated(config, str(run_dir))
            loaded.cluster.ray_address = connection.address
            seconds = run_stages(loaded, run_dir, config, resuming=resume is not None,
                                 before_stage=lambda: connection.connect(runtime_env, namespace),
                                 log_dir=runtime_env["env_vars"]["TRINITY_LOG_DIR"])
        else:
            trinity.cluster.ray_address = connection.address
            seconds = run_checked(trinity, run_dir)
    except KeyboardInterrupt:
        raise RunInterrupted(f"interrupted; resume with "
                             f"{options(('backend', 'trinity'), ('resume', run_dir))}",
                             run_dir=str(run_dir)) from None
    finally:
        connection.close(namespace)
    return TrinityRunSummary(run_dir=run_dir, seconds=seconds)
