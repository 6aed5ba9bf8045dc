"""What the Trinity backend cannot run, found from the graph alone: every problem at once.

Each check is a small function over the experiment graph returning its problems, one line
each (as `tunedsl.config.graph.GRAPH_CHECKS`); `TRINITY_CHECKS` lists them. ``tunedsl check
--backend trinity`` and `run_trinity` run them before the preflight, before Ray or a GPU
is asked for. Trinity's own validation of the YAML follows (`validate`). Nothing here
imports Trinity.
"""

from __future__ import annotations

import importlib.util

from ...config.graph import ExperimentGraph

INSTALL_HINT = 'pip install "tunedsl[trinity]"'

#: Why ``model.lora`` cannot train on Trinity-RFT 0.6.0 through tunedsl. Trinity passes the
#: adapter (a vLLM ``LoRARequest``) with its own ``ModelWrapper.chat``/``generate`` calls
#: only; the OpenAI API server it starts for workflows (vllm_patch/api_patch*.py) gets
#: ``--model <path>`` and no ``--lora-modules``, and tunedsl's workflows call that server.
LORA_ON_TRINITY = (
    "model.lora: Trinity-RFT 0.6.0 applies LoRA adapters to its own ModelWrapper.chat calls "
    "only; the OpenAI API server that tunedsl's workflows call is started without them, so "
    "every rollout would sample the base model while the adapters trained; train LoRA with "
    "--backend local, or remove model.lora for Trinity")


def check_installed(graph: ExperimentGraph) -> list[str]:
    """Trinity-RFT is importable (the install command otherwise)."""
    if importlib.util.find_spec("trinity") is None:
        return [f"Trinity-RFT is not installed; install it with: {INSTALL_HINT}"]
    return []


def check_no_lora(graph: ExperimentGraph) -> list[str]:
    """LoRA adapters would never be sampled on Trinity 0.6.0 (`LORA_ON_TRINITY`)."""
    return [LORA_ON_TRINITY] if graph.model.lora is not None else []


TRINITY_CHECKS = (check_installed, check_no_lora)
