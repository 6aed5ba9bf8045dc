"""The Python entry points: `load_experiment` and the seed-compatible `tune`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ._decorators import experiment, is_experiment, spec_of
from ._graph import ExperimentGraph, build_graph
from ._importer import import_string_of, load_object
from ._records import Algorithm, Dataset, Model
from .errors import ExperimentImportError


def load_experiment(
    target: str | type,
    *,
    settings: str | None = None,
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
    obj = load_object(target, candidates=is_experiment) if isinstance(target, str) else target
    if not is_experiment(obj):
        where = f'"{target}"' if isinstance(target, str) else repr(target)
        raise ExperimentImportError(
            f"{where} is not an @experiment class (got {type(obj).__name__}); "
            f"decorate the class with @experiment"
        )
    return build_graph(spec_of(obj), source=import_string_of(obj), settings_file=settings,
                       overrides=overrides)


def tune(
    *,
    workflow_func: Callable[..., Any],
    judge_func: Callable[..., Any] | None = None,
    train_dataset: Dataset | None = None,
    eval_dataset: Dataset | None = None,
    model: Model | None = None,
    auxiliary_models: dict[str, Model] | None = None,
    algorithm: Algorithm | None = None,
    project_name: str | None = None,
    experiment_name: str | None = None,
    monitor_type: str | None = None,
    config_path: str | None = None,
    overrides: Iterable[str] = (),
    backend: str = "auto",
    dry_run: bool = False,
) -> Any:
    """The functional entry of AgentScope's ``tuner``: build the graph and run it.

    Undecorated functions are accepted (and decorated) as in the seed. Arguments
    left as None are not set, so ``tunedsl.toml`` beside the workflow's module and
    a ``config_path`` Trinity YAML still apply beneath them.

    Args:
        backend: ``auto``, ``local`` or ``trinity`` (see `run`).
        dry_run: Build and check the graph, and return it, without running.

    Returns:
        The backend's run summary, or the `ExperimentGraph` with ``dry_run``.
    """
    from ._decorators import judge as judge_decorator
    from ._decorators import workflow as workflow_decorator

    if spec_of(workflow_func) is None:
        workflow_func = workflow_decorator(workflow_func)
    if judge_func is not None and spec_of(judge_func) is None:
        judge_func = judge_decorator(judge_func)
    declared = {
        "workflow": workflow_func, "judge": judge_func, "train_dataset": train_dataset,
        "eval_dataset": eval_dataset, "model": model, "auxiliary_models": auxiliary_models,
        "algorithm": algorithm, "project": project_name, "name": experiment_name,
        "monitor": monitor_type, "trinity_config": config_path,
    }  # fmt: skip
    namespace = {k: v for k, v in declared.items() if v is not None}
    namespace["__module__"] = workflow_func.__module__
    cls = type(experiment_name or "Experiment", (), namespace)
    graph = build_graph(spec_of(experiment(cls)), source=None, overrides=overrides)
    if dry_run:
        return graph
    from ._run import run

    return run(graph, backend=backend)
