"""The backend-independent preflight: what fails before any model or GPU is asked for.

It reads each dataset in one streamed pass, checks that every row has the task keys
the workflow and judge read, with one type each, and runs one rollout on a scripted
model, after the chosen backend's checks over the graph (``LOCAL_CHECKS``,
``TRINITY_CHECKS``). ``tunedsl check`` adds Trinity's validation of the YAML.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

from ..config.graph import ExperimentGraph, load_function, refuse_problems
from ..dsl.decorators import FunctionSpec
from ..errors import ConfigError, DatasetError, RolloutError
from .data_quality import scan
from .datasets import first_rows


def task_keys(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The keys a function reads as ``task["key"]``, in order of first use."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return ()
    keys: dict[str, None] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                and node.value.id == "task" and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)):
            keys[node.slice.value] = None
    return tuple(keys)


def _readers(graph: ExperimentGraph) -> list[tuple[FunctionSpec, tuple[str, ...]]]:
    specs = [graph.workflow] + ([graph.judge] if graph.judge else [])
    return [(spec, task_keys(load_function(spec))) for spec in specs]


def check_dataset(graph: ExperimentGraph, section: str) -> str:
    """Read one dataset in one streamed pass (up to `MAX_ROWS`) and check what the workflow
    and judge read from its rows; return a report line."""
    dataset = getattr(graph, section)
    where = f"{dataset.path} (split {dataset.split!r})"
    batch = graph.algorithm.batch_size if section == "train_dataset" else 1
    readers = _readers(graph)
    quality = scan(dataset, [key for _, keys in readers for key in keys], label=section)
    if not quality.rows:
        raise DatasetError(f"{section}: {where} has no rows; point it at a dataset with tasks")
    if quality.rows < batch:
        raise DatasetError(
            f"{section}: {where} has {quality.rows} rows, fewer than algorithm.batch_size = "
            f"{batch}, so not one training step can be filled; lower batch_size or add tasks"
        )
    present = sorted(quality.keys)
    problems = []
    mixed = quality.mixed()
    for spec, keys in readers:
        reader = f"@{spec.kind} {spec.qualname} ({spec.where})"
        for key in keys:
            count, first = quality.missing.get(key, (0, ""))
            if count == quality.rows:
                problems.append(f"{section}: key {key!r} read by {reader} is missing from "
                                f"{where}; its rows have: {', '.join(present)}")
            elif count:
                problems.append(f"{section}: key {key!r} read by {reader} is missing from "
                                f"{count} of {quality.rows} rows of {where}, the first at "
                                f"{first}; add it to every row, or read it with task.get()")
            if key in mixed:
                kinds = ", ".join(f"{kind} (first at {at})" for kind, at in mixed[key].items())
                problems.append(f"{section}: key {key!r} read by {reader} has values of "
                                f"different types across rows of {where}: {kinds}; make them "
                                f"one type")
    if problems:
        raise DatasetError("\n".join(dict.fromkeys(problems)))
    read = f"the first {quality.rows} rows" if quality.truncated else f"{quality.rows} rows"
    notes = "".join(f"; column {key!r} mixes {', '.join(seen)}"
                    for key, seen in mixed.items())
    return f"{section}: {where}: {read} readable, keys {', '.join(present)}{notes}"


#: What the scripted model answers in the preflight rollout.
SCRIPTED_REPLY = "0"


#: Longest the preflight waits for its one rollout (less when rollout_timeout is lower).
PREFLIGHT_SECONDS = 120


def check_rollout(graph: ExperimentGraph) -> str:
    """Run the workflow and judge once, on the first training task, with a scripted model.

    The rollout runs in a thread of its own and is given ``min(rollout_timeout, 120)``
    seconds: a scripted model answers at once, so a rollout still running then is
    waiting on something else, and even one that blocks (``time.sleep``) cannot hang.
    """
    import asyncio
    import threading

    from .models.scripted import ScriptedModel
    from .rollout import Agent, run_rollout

    def scripted(name: str) -> ScriptedModel:
        return ScriptedModel(lambda messages: SCRIPTED_REPLY, name=name)

    task = first_rows(graph.train_dataset, 1, label="train_dataset")[0]
    auxiliary = {name: scripted(name) for name in graph.auxiliary_models}
    agent = Agent.from_graph(graph)
    outcome: dict[str, Any] = {}

    def roll() -> None:
        try:
            outcome["result"] = asyncio.run(run_rollout(agent, task, scripted("policy"),
                                                        auxiliary))
        except Exception as error:  # handed to the caller's thread below
            outcome["error"] = error

    limit = min(graph.rollout_timeout, PREFLIGHT_SECONDS)
    worker = threading.Thread(target=roll, name="tunedsl-preflight-rollout", daemon=True)
    worker.start()
    worker.join(limit)
    where = f"on the first training task, with a scripted model that always replies " \
            f"{SCRIPTED_REPLY!r}"
    if worker.is_alive():
        raise ConfigError(f"rollout: {where}: the workflow and judge did not finish within "
                          f"{limit:g} s; the model answers at once, so the workflow is waiting "
                          f"on something else (a network call, a lock, a sleep)")
    error = outcome.get("error")
    if isinstance(error, RolloutError):
        raise ConfigError(f"rollout: {where}: {error}", user_traceback=error.user_traceback)
    if error is not None:
        raise error
    return (f"rollout: workflow and judge ran on the first training task with a scripted "
            f"model (reward {outcome['result'].reward:g})")


def check_endpoint(name: str, model: Any) -> str:
    """An auxiliary model's endpoint answers ``GET /models`` with its key; a report line."""
    import os

    import httpx

    label = f"auxiliary_models.{name}"
    headers = {}
    if model.api_key_env is not None:
        key = os.environ.get(model.api_key_env)
        if not key:
            raise ConfigError(f"{label}.api_key_env: {model.api_key_env} is not set; export "
                              f"it (the key is read from the environment only)")
        headers["Authorization"] = f"Bearer {key}"
    url = model.base_url.rstrip("/") + "/models"
    try:
        answer = httpx.get(url, headers=headers, timeout=10)
    except httpx.HTTPError as exc:
        raise ConfigError(f"{label}.base_url: {model.base_url} does not answer "
                          f"({type(exc).__name__}: {exc}); check the URL and that it is "
                          f"running") from None
    if answer.status_code in (401, 403):
        raise ConfigError(f"{label}: {model.base_url} refuses the key in "
                          f"{model.api_key_env or '(none given)'} (HTTP {answer.status_code})")
    try:
        served = [entry["id"] for entry in answer.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return f"{label}: {model.base_url} answers (it lists no models)"
    if model.model_path not in served:
        return (f"{label}: {model.base_url} answers, but does not list {model.model_path!r} "
                f"(it lists: {', '.join(served[:10])})")
    return f"{label}: {model.base_url} answers and serves {model.model_path}"


def preflight(graph: ExperimentGraph, backend_checks: Iterable[Callable[..., list[str]]] = ()
              ) -> list[str]:
    """Run the backend's checks over the graph (every problem at once), check the datasets
    and task keys, then run one scripted rollout. Returns report lines; raises on the
    first kind of failure."""
    refuse_problems(graph, backend_checks)
    lines = [f"experiment: {graph.source or graph.name} builds"]
    problems = []
    for section in ("train_dataset", "eval_dataset"):
        if getattr(graph, section) is None:
            continue
        try:
            lines.append(check_dataset(graph, section))
        except DatasetError as exc:
            problems.append(str(exc))
    if problems:
        raise DatasetError("\n".join(problems))
    lines += [check_endpoint(name, model) for name, model in graph.auxiliary_models.items()
              if model.base_url is not None]
    lines.append(check_rollout(graph))
    return lines
