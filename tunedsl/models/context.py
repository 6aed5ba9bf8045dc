"""How long a sequence a local model folder declares it takes, read from its ``config.json``.

vLLM refuses an engine whose ``max_model_len`` is above the length the model config
derives (``_get_and_verify_max_len`` in ``vllm/config``: the smallest of these keys,
scaled by ``rope_scaling``, unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set), and
positions past a model's learned ones are untrained on the local backend too; so both
backends' checks compare ``Model.max_model_len`` against it before a run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config.graph import ExperimentGraph

#: The keys vLLM reads a model's length from (the smallest present wins).
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
               "max_sequence_length", "max_seq_length", "seq_len")


def declared_length(model_path: str) -> int | None:
    """The sequence length a local model folder's ``config.json`` declares, or None when
    it is not a local folder, declares none, or scales it (``rope_scaling``, or
    transformers 5's ``rope_parameters`` of a type other than ``default``: left to the
    engine, which knows each scaling's rule)."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or config.get("rope_scaling"):
        return None
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and rope.get("rope_type") not in (None, "default"):
        return None
    found = [value for key in LENGTH_KEYS if isinstance(value := config.get(key), int)
             and not isinstance(value, bool) and value > 0]
    return min(found) if found else None


def check_model_lengths(graph: ExperimentGraph) -> list[str]:
    """Each model a run serves itself (the trained one, auxiliary ones not at an endpoint)
    asks no longer ``max_model_len`` than its local folder declares, one line each naming
    both and the fix (a hub id or a folder elsewhere is left to the engine)."""
    models = [("model", graph.model), *((f"auxiliary_models.{name}", spec)
                                        for name, spec in graph.auxiliary_models.items()
                                        if spec.base_url is None)]
    return [problem for setting, model in models
            if (problem := length_problem(setting, model.max_model_len, model.model_path))]


def length_problem(setting: str, max_model_len: int | None, folder: str) -> str | None:
    """Why ``max_model_len`` is more than the model in ``folder`` takes, or None (also for
    a hub id or a folder whose config says nothing)."""
    declared = declared_length(folder)
    if max_model_len is None or declared is None or max_model_len <= declared:
        return None
    return (f"{setting}.max_model_len = {max_model_len}: more than {folder} takes "
            f"({declared} positions in its config.json), which vLLM refuses and the local "
            f"backend never trained; set it to {declared} or less")
