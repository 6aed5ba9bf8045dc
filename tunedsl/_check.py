"""``tunedsl check``: a preflight that fails before any GPU is asked for.

It loads each dataset (streaming a few rows), checks that the task keys the
workflow and judge read exist in the data, and, when Trinity-RFT is installed,
has real Trinity load and validate the generated config.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import inspect
import logging
import os
import tempfile
import textwrap
from collections.abc import Callable
from typing import Any

from ._decorators import FunctionSpec
from ._graph import ExperimentGraph, load_function
from ._datasets import first_rows
from .errors import ConfigError, DatasetError

#: Rows read per dataset: enough to see its keys, few enough to stay instant.
SAMPLE_ROWS = 20


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
    """Read a few rows of one dataset and check the task keys; return a report line."""
    dataset = getattr(graph, section)
    where = f"{dataset.path} (split {dataset.split!r})"
    batch = graph.algorithm.batch_size if section == "train_dataset" else 1
    rows = first_rows(dataset, max(SAMPLE_ROWS, batch), label=section)
    if not rows:
        raise DatasetError(f"{section}: {where} has no rows; point it at a dataset with tasks")
    if len(rows) < batch:
        raise DatasetError(
            f"{section}: {where} has {len(rows)} rows, fewer than algorithm.batch_size = "
            f"{batch}, so not one training step can be filled; lower batch_size or add tasks"
        )
    present = set().union(*(row.keys() for row in rows))
    problems = [
        f"{section}: key {key!r} read by @{spec.kind} {spec.qualname} ({spec.where}) is missing "
        f"from {where}; its rows have: {', '.join(sorted(present))}"
        for spec, keys in _readers(graph) for key in keys if key not in present
    ]
    if problems:
        raise DatasetError("\n".join(problems))
    return f"{section}: {where}: rows readable, keys {', '.join(sorted(present))}"


def gpus_needed(graph: ExperimentGraph) -> int:
    """GPUs a Trinity run of ``graph`` needs: every inference engine plus one trainer."""
    models = [graph.model, *graph.auxiliary_models.values()]
    return sum(m.inference_engine_num * m.tensor_parallel_size for m in models) + 1


@contextlib.contextmanager
def _quiet_logging():  # noqa: ANN202
    """Silence Trinity's validator logs (it shouts "NO GPU DETECTED" on every CPU machine);
    a rejection still reaches the user as the exception's message."""
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def validate_with_trinity(graph: ExperimentGraph, config: dict[str, Any]) -> str:
    """Have Trinity-RFT load and validate ``config``; return a report line.

    The cluster size is filled in (when the config leaves it unset) so that
    validation needs no running Ray cluster, and checkpoints go to a temporary
    folder because Trinity's validators create them.
    """
    try:
        from trinity.common.config import load_config
    except ImportError:
        return ('trinity: Trinity-RFT is not installed, so the config was not validated; '
                'pip install "tunedsl[trinity]"')
    from .backends.trinity.config import to_yaml

    config = copy.deepcopy(config)
    cluster = config.setdefault("cluster", {})
    if not cluster.get("node_num") or not cluster.get("gpu_per_node"):
        cluster.update(node_num=1, gpu_per_node=gpus_needed(graph))
    with tempfile.TemporaryDirectory(prefix="tunedsl-check-") as folder:
        config["checkpoint_root_dir"] = folder
        path = os.path.join(folder, "config.yaml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(to_yaml(config))
        try:
            with _quiet_logging():
                validated = load_config(path).check_and_update()
        except Exception as exc:  # Trinity raises ValueError, KeyError, AssertionError, ...
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise ConfigError(f"trinity: Trinity-RFT rejects the generated config: {reason}") \
                from None
    return (f"trinity: Trinity-RFT accepts the config (algorithm "
            f"{validated.algorithm.algorithm_type}, advantage {validated.algorithm.advantage_fn}, "
            f"train_batch_size {validated.buffer.train_batch_size}, "
            f"{gpus_needed(graph)} GPUs needed)")


#: What the scripted model answers in the preflight rollout.
SCRIPTED_REPLY = "0"


def check_rollout(graph: ExperimentGraph) -> str:
    """Run the workflow and judge once, on the first training task, with a scripted model."""
    import asyncio

    from .rollout import Agent, RolloutError, run_rollout
    from .testing import ScriptedModel

    def scripted(name: str) -> ScriptedModel:
        return ScriptedModel(lambda messages: SCRIPTED_REPLY, name=name)

    task = first_rows(graph.train_dataset, 1, label="train_dataset")[0]
    auxiliary = {name: scripted(name) for name in graph.auxiliary_models}
    try:
        result = asyncio.run(run_rollout(Agent.from_graph(graph), task, scripted("policy"),
                                         auxiliary))
    except RolloutError as error:
        problem = ConfigError(f"rollout: on the first training task, with a scripted model that "
                              f"always replies {SCRIPTED_REPLY!r}: {error}")
        problem.user_traceback = error.user_traceback  # type: ignore[attr-defined]
        raise problem from None
    return (f"rollout: workflow and judge ran on the first training task with a scripted "
            f"model (reward {result.reward:g})")


def check(graph: ExperimentGraph) -> list[str]:
    """Run every preflight check: datasets and task keys, one scripted rollout, Trinity's
    validation. Returns report lines; raises on the first kind of failure."""
    from .backends.trinity.config import trinity_config

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
    lines.append(check_rollout(graph))
    lines.append(validate_with_trinity(graph, trinity_config(graph)))
    return lines
