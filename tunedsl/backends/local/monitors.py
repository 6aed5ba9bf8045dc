"""Where a local run's metrics go: ``metrics.jsonl`` always, and the experiment's
``monitor`` (TensorBoard, Weights & Biases, MLflow or SwanLab), as on Trinity.

Each monitor takes the options Trinity's monitor of the same name reads from
``monitor.monitor_args`` (``[trinity.monitor.monitor_args]``), and runs under Trinity's
run name with the ``trainer`` role. Files a monitor writes locally go to the run
directory's ``monitor/`` folder.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ...config.graph import ExperimentGraph
from ...errors import ConfigError
from ...runs.run_files import METRICS_JSONL, MONITOR_DIR, TENSORBOARD_FOLDER
from ...runs.writing import JsonLines
from ...wording import option

ROLE = "trainer"


def monitor_args(graph: ExperimentGraph) -> dict[str, Any]:
    """The experiment's ``[trinity.monitor.monitor_args]``."""
    return dict((graph.trinity.get("monitor") or {}).get("monitor_args") or {})


@attrs.define
class Monitor:
    """Writes each step's metrics to ``metrics.jsonl`` and the experiment's monitor."""

    jsonl: Any
    write: Callable[[int, dict[str, float]], None]
    finish: Callable[[], None]

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record ``metrics`` of ``step`` (NaNs stay out of the monitor, not the JSONL)."""
        self.jsonl.write({"step": step, **metrics})
        finite = {key: value for key, value in metrics.items() if not math.isnan(value)}
        if finite:
            self.write(step, finite)

    def close(self) -> None:
        """Flush and close both."""
        try:
            self.finish()
        finally:
            self.jsonl.close()


def open_monitor(graph: ExperimentGraph, run_dir: Path, config: Mapping[str, Any]) -> Monitor:
    """Start the experiment's monitor for a run; ``config`` is the run's Trinity config
    (recorded with the run, as Trinity records it)."""
    # absolute: a monitor's thread writes while rollouts run, and a workflow may change
    # the working folder then (put back only when they end)
    folder = (run_dir / MONITOR_DIR).absolute()
    opener = {"tensorboard": _tensorboard, "wandb": _wandb, "mlflow": _mlflow,
              "swanlab": _swanlab}[graph.monitor]
    name = f"{config.get('name') or run_dir.name}_{ROLE}"
    try:
        write, finish = opener(graph, folder, name, config, monitor_args(graph))
    except ConfigError:
        raise
    except Exception as exc:  # each library reports a bad login or server its own way
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ConfigError(f"monitor = {graph.monitor!r} did not start: {type(exc).__name__}: "
                          f"{first}; check trinity.monitor.monitor_args, or set monitor = "
                          f"\"tensorboard\"") from None
    return Monitor(JsonLines(run_dir / METRICS_JSONL, label=f"run directory {run_dir}: "
                                                          f"{METRICS_JSONL}",
                             then=f"make room and continue with {option('resume', run_dir)}",
                             chosen=False),
                   write, finish)


_Opened = tuple[Callable[[int, dict[str, float]], None], Callable[[], None]]


def _refuse_unwritable(events: Path, folder: Path) -> None:
    """Refuse a monitor's folder ``events`` (under the run's ``folder``) that cannot take a
    file: tensorboard's writer thread failed on it with a traceback of its own, and the
    line then advised setting monitor = "tensorboard", which it was."""
    from ...errors import display_path
    from ...runs.writing import cannot_take_a_file, reason

    try:
        events.mkdir(parents=True, exist_ok=True)
    except OSError as made:
        exc: OSError | None = made
    else:
        exc = cannot_take_a_file(events)
    if exc is not None:
        shown = display_path(str(folder))
        raise ConfigError(f"{display_path(str(events))}: the monitor's folder cannot be "
                          f"written ({reason(exc, events)}); make it writable (chmod -R u+rwX "
                          f"{shown})") from None


def _tensorboard(graph: ExperimentGraph, folder: Path, name: str, config: Mapping[str, Any],
                 args: Mapping[str, Any]) -> _Opened:
    from torch.utils.tensorboard import SummaryWriter

    events = folder / TENSORBOARD_FOLDER / ROLE
    _refuse_unwritable(events, folder)
    # A roomy queue: with the default of 10 events, logging a step's ~25 scalars waited
    # on the writer thread (0.7 ms a step on the arith example).
    writer = SummaryWriter(str(events), max_queue=1000)

    def write(step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            writer.add_scalar(key, value, step)

    return write, writer.close


def _wandb(graph: ExperimentGraph, folder: Path, name: str, config: Mapping[str, Any],
           args: Mapping[str, Any]) -> _Opened:
    import wandb

    # Trinity's WandbMonitor takes these two from monitor_args into wandb's environment.
    for key, variable in (("base_url", "WANDB_BASE_URL"), ("api_key", "WANDB_API_KEY")):
        if args.get(key):
            os.environ[variable] = str(args[key])
    folder.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project=graph.project, group=config.get("group") or name, name=name,
                     tags=[ROLE], config=dict(config), dir=str(folder), save_code=False,
                     reinit="create_new")
    return (lambda step, metrics: run.log(metrics, step=step)), run.finish


def _mlflow(graph: ExperimentGraph, folder: Path, name: str, config: Mapping[str, Any],
            args: Mapping[str, Any]) -> _Opened:
    import mlflow

    from ...config.nested import flatten

    for key, variable in (("username", "MLFLOW_TRACKING_USERNAME"),
                          ("password", "MLFLOW_TRACKING_PASSWORD")):
        if args.get(key):
            os.environ[variable] = str(args[key])
    # Trinity's default: a tracking server on this machine.
    mlflow.set_tracking_uri(args.get("uri") or "http://localhost:5000")
    mlflow.set_experiment(graph.project)
    run = mlflow.start_run(run_name=name, tags={"group": config.get("group") or "", "role": ROLE})
    mlflow.log_params({key: str(value)[:6000] for key, value in flatten(dict(config)).items()})

    def write(step: int, metrics: dict[str, float]) -> None:
        # MLflow refuses '@' in metric names; Trinity's MlflowMonitor writes it as '_at_'.
        mlflow.log_metrics({key.replace("@", "_at_"): value for key, value in metrics.items()},
                           step=step, run_id=run.info.run_id)

    return write, lambda: mlflow.end_run()


def _swanlab(graph: ExperimentGraph, folder: Path, name: str, config: Mapping[str, Any],
             args: Mapping[str, Any]) -> _Opened:
    import swanlab

    from ...config.nested import flatten

    tags = list(args.get("tags") or [])
    tags += [tag for tag in (ROLE, config.get("group")) if tag and tag not in tags]
    options = {"project": graph.project, "workspace": args.get("workspace"),
               "experiment_name": args.get("experiment_name") or name,
               "description": args.get("description"), "tags": tags,
               "logdir": args.get("logdir") or str(folder / "swanlab"),
               "mode": args.get("mode") or "cloud", "config": flatten(dict(config))}
    run = swanlab.init(**{key: value for key, value in options.items() if value is not None})
    return (lambda step, metrics: swanlab.log(metrics, step=step)), run.finish


def metric_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Every line of a run's ``metrics.jsonl`` (none when it has none yet); a value written
    as null (it was NaN: a statistic of nothing) is read back as NaN."""
    path = run_dir / METRICS_JSONL
    if not path.exists():
        return []
    # Lines end at "\n" only: a metric's name may hold U+2028, where str.splitlines splits.
    rows = [json.loads(line) for line in path.read_bytes().split(b"\n") if line.strip()]
    return [{key: math.nan if value is None else value for key, value in row.items()}
            for row in rows]
