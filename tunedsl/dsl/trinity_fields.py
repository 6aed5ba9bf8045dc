"""What tunedsl knows of Trinity-RFT 0.6.0's config, as pure data: the names Trinity
registers, and the config paths the settings table's Trinity keys point into.

Where each tunedsl setting goes is a column of the settings table
(`tunedsl.dsl.settings_table` derives ``FIELD_MAP`` and the other key maps from it).
The DSL's checks, the base-YAML settings layer and the YAML writer read these names,
so none of them imports Trinity (``import tunedsl`` stays light). Everything that
imports or runs Trinity lives in ``tunedsl.backends.trinity``.
``tests/test_trinity_fields.py`` checks these tables against Trinity's own classes.
"""

from __future__ import annotations

#: Trinity's ``ALGORITHM_TYPE`` registry keys (trinity/algorithm/__init__.py).
ALGORITHM_TYPES: tuple[str, ...] = (
    "asymre", "cispo", "cpt", "dapo", "dpo", "gigpo", "grpo", "grpo_verl", "gspo", "jsd",
    "mix", "mix_chord", "multi_step_grpo", "on_policy_distill", "opmd", "ppo", "raft",
    "rec", "reinforceplusplus", "rloo", "sapo", "sft", "sppo", "topr",
)  # fmt: skip

#: Trinity's algorithm types that train offline on a dataset of their own kind (its "train"
#: mode, no explorer: `check_config` refuses them in "both"), which tunedsl writes no
#: config for: what each trains on.
OFFLINE_TYPES: dict[str, str] = {"dpo": "chosen and rejected replies in pairs",
                                 "cpt": "plain text (continued pre-training)"}

#: Algorithms whose default advantage function compares rollouts within a group of the
#: same task (grpo, step_wise_grpo, gigpo, rloo, opmd, asymre, rec): a group of one has
#: nothing to compare with, so these need ``group_size >= 2``.
GROUP_ALGORITHMS: frozenset[str] = frozenset({
    "asymre", "cispo", "dapo", "gigpo", "grpo", "grpo_verl", "gspo", "mix", "mix_chord",
    "multi_step_grpo", "opmd", "rec", "rloo", "sapo", "sppo",
})  # fmt: skip

#: The learning-rate schedules Trinity's trainer (verl) offers.
LR_SCHEDULERS: tuple[str, ...] = ("constant", "cosine")
#: Trinity's monitor types (trinity/utils/monitor.py).
MONITOR_TYPES: tuple[str, ...] = ("mlflow", "swanlab", "tensorboard", "wandb")


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

#: Where a Trinity config keeps the run's name, the training taskset, the eval tasksets
#: and auxiliary models (lists whose entries carry a ``name``), and the rollout model's
#: engine entry.
RUN_NAME = "name"
TASKSET = "buffer.explorer_input.taskset"
EVAL_TASKSETS = "buffer.explorer_input.eval_tasksets"
AUXILIARY_MODELS = "explorer.auxiliary_models"
ROLLOUT_MODEL = "explorer.rollout_model"
#: Where Trinity keeps its Tinker settings (``enable`` turns them on).
TINKER = "model.tinker"
#: The eval taskset's name when the base YAML names none.
EVAL_TASKSET = "eval"
#: Metric names as Trinity's monitors log them, used by every backend where it measures
#: the same thing: the explorer aggregates each rollout's metrics (``reward`` among them)
#: as ``rollout/<name>/mean|max|min``; the trainer logs ``actor/...`` and
#: ``response_length/...``; evaluation logs ``eval/<taskset>/<name>/mean@<repeats>``
#: (trinity/utils/metrics.py).
TRAIN_REWARD_METRIC = "rollout/reward/mean"
ROLLOUT_METRIC = "rollout/{name}/{stat}"
EVAL_METRIC = "eval/{taskset}/{name}/mean@{repeats}"
#: The trainer's policy-gradient loss (``tunedsl view`` charts it first).
POLICY_LOSS_METRIC = "actor/pg_loss"

#: Where Trinity's GiGPO reads each experience's turn reward and state in its ``info``:
#: the advantage's argument names and their defaults (``gigpo_advantage.py``), under which
#: tunedsl's workflow puts what ``model.end_turn`` marked.
TURN_KEYS: dict[str, str] = {"step_reward_key": "step_reward",
                             "env_state_hash_key": "env_state_hash"}

#: The ``info`` key of the placeholder experience tunedsl's workflow returns for a rollout
#: that made no model call (Trinity's runner fails a run without one); its metrics hold
#: the rollout's reward, and Trinity's ``invalid_reward_filter`` keeps it from training.
NO_MODEL_CALL = "tunedsl_no_model_call"
#: The ``info`` key of the placeholder for a failed rollout that is dropped, alone or with
#: its group (``on_failed_rollout``; ``backends/trinity/operators.py``).
FAILED_ROLLOUT = "tunedsl_failed_rollout"
#: The ``info`` key holding a failed rollout's error (its placeholder's, or with
#: ``on_failed_rollout = "zero"`` its experiences'), which tunedsl's operator counts and
#: names when every rollout of a step failed.
ROLLOUT_ERROR = "tunedsl_rollout_error"

#: Where Trinity keeps LoRA settings (a list of ``LoRAConfig``; Trinity 0.6.0 takes one
#: entry); the fields' keys in that entry are the `LoRA` record's rows.
LORA_CONFIGS = "model.lora_configs"
#: Keys that name a local file or folder (for lists: each entry's key).
PATH_KEYS: tuple[str, ...] = ("model.model_path", f"{ROLLOUT_MODEL}.model_path",
                              f"{TASKSET}.path")
PATH_LIST_KEYS: tuple[tuple[str, str], ...] = ((EVAL_TASKSETS, "path"),
                                                (AUXILIARY_MODELS, "model_path"))
