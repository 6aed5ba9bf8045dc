"""Real Trinity-RFT loads and validates tunedsl's config, and counts the GPUs it needs."""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from ...config.graph import ExperimentGraph
from ...errors import ConfigError
from .config import to_yaml


def gpus_needed(graph: ExperimentGraph) -> int:
    """GPUs a Trinity run of ``graph`` needs: every inference engine plus one trainer."""
    models = [graph.model, *graph.auxiliary_models.values()]
    return sum(m.inference_engine_num * m.tensor_parallel_size for m in models) + 1


@contextlib.contextmanager
def _quiet_logging() -> Iterator[None]:
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
