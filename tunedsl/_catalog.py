"""Names Trinity-RFT 0.6.0 registers, kept here so `import tunedsl` need not import Trinity.

``tests/test_catalog.py`` checks these tables against Trinity's own registries.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: Trinity's ``ALGORITHM_TYPE`` registry keys (trinity/algorithm/__init__.py).
ALGORITHM_TYPES: tuple[str, ...] = (
    "asymre", "cispo", "cpt", "dapo", "dpo", "gigpo", "grpo", "grpo_verl", "gspo", "jsd",
    "mix", "mix_chord", "multi_step_grpo", "on_policy_distill", "opmd", "ppo", "raft",
    "rec", "reinforceplusplus", "rloo", "sapo", "sft", "sppo", "topr",
)  # fmt: skip

#: Algorithms whose default advantage function compares rollouts within a group of the
#: same task (grpo, step_wise_grpo, gigpo, rloo, opmd, asymre, rec): a group of one has
#: nothing to compare with, so these need ``group_size >= 2``.
GROUP_ALGORITHMS: frozenset[str] = frozenset({
    "asymre", "cispo", "dapo", "gigpo", "grpo", "grpo_verl", "gspo", "mix", "mix_chord",
    "multi_step_grpo", "opmd", "rec", "rloo", "sapo", "sppo",
})  # fmt: skip

#: Trinity's monitor types (trinity/utils/monitor.py).
MONITOR_TYPES: tuple[str, ...] = ("mlflow", "swanlab", "tensorboard", "wandb")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_name_message(kind: str, value: object, choices: Iterable[str]) -> str:
    """The one-line message for a value that is not one of ``choices``."""
    choices = sorted(choices)
    hint = did_you_mean(str(value), choices)
    return f"{value!r} is not a known {kind}{hint}; choose one of: {', '.join(choices)}"

#: Fields of Trinity's ``InferenceModelConfig`` (trinity/common/config.py), the entry
#: each model gets under ``explorer.rollout_model`` / ``explorer.auxiliary_models``.
INFERENCE_MODEL_FIELDS: tuple[str, ...] = (
    "model_path", "name", "trust_remote_code", "engine_type", "engine_num",
    "tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
    "enable_expert_parallel", "gpu_per_engine", "extra_engine_args", "use_v1", "enforce_eager",
    "enable_prefix_caching", "enable_chunked_prefill", "gpu_memory_utilization", "dtype", "seed",
    "temperature", "top_p", "top_k", "logprobs", "max_model_len", "max_prompt_tokens",
    "max_response_tokens", "min_response_tokens", "enable_prompt_truncation",
    "repetition_penalty", "ignore_eos", "enable_multimodal", "chat_template", "enable_thinking",
    "enable_history", "enable_openai_api", "enable_log_requests", "base_port", "api_key",
    "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser", "external_model_config",
    "nnodes", "node_rank", "enable_return_routed_experts", "weight_sync_buffer_size",
    "bundle_indices", "engine_id", "ray_namespace", "ray_actor_name", "sync_method",
    "checkpoint_job_dir", "cuda_visible_devices", "enable_lora", "enable_runtime_lora_updating",
    "lora_modules", "lora_kwargs", "rope_scaling", "rope_theta",
)  # fmt: skip

#: Inference-model keys that a tunedsl ``Model`` field (or tunedsl itself) sets; giving
#: them in ``Model(trinity=...)`` would be a second, conflicting place for one value.
OWNED_INFERENCE_KEYS: dict[str, str] = {
    "model_path": "Model(model_path=...)", "name": "the auxiliary_models key",
    "engine_num": "Model(inference_engine_num=...)",
    "tensor_parallel_size": "Model(tensor_parallel_size=...)",
    "temperature": "Model(temperature=...)", "top_p": "Model(top_p=...)",
    "max_model_len": "Model(max_model_len=...)", "max_response_tokens": "Model(max_tokens=...)",
    "enable_thinking": "Model(enable_thinking=...)",
    "tool_call_parser": "Model(tool_call_parser=...)",
    "reasoning_parser": "Model(reasoning_parser=...)",
    "enable_openai_api": "tunedsl (workflows need the OpenAI API)",
    "enable_history": "tunedsl (training reads the call history)",
}  # fmt: skip
