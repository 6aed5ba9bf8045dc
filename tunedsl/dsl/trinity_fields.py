"""What tunedsl knows of Trinity-RFT 0.6.0's config, as pure data: the names Trinity
registers, and where each tunedsl setting lives in a Trinity config.

The DSL's checks, the base-YAML settings layer and the YAML writer all read these
tables, so none of them imports Trinity (``import tunedsl`` stays light). Everything
that imports or runs Trinity lives in ``tunedsl.backends.trinity``.
``tests/test_catalog.py`` checks these tables against Trinity's own classes.
"""

from __future__ import annotations

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
#: Where Trinity keeps its Tinker settings (``enable`` turns them on), and the fields of
#: ``tunedsl.Tinker`` found there under the same names.
TINKER = "model.tinker"
TINKER_FIELDS: tuple[str, ...] = ("rank", "seed", "train_mlp", "train_attn", "train_unembed",
                                  "base_url")
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

#: Where Trinity keeps LoRA settings (a list of ``LoRAConfig``; Trinity 0.6.0 takes one
#: entry), and ``tunedsl.LoRA`` field -> key of that entry.
LORA_CONFIGS = "model.lora_configs"
LORA_MAP: tuple[tuple[str, str], ...] = (
    ("rank", "lora_rank"), ("alpha", "lora_alpha"), ("target_modules", "target_modules"),
)
#: Keys that name a local file or folder (for lists: each entry's key).
PATH_KEYS: tuple[str, ...] = ("model.model_path", f"{ROLLOUT_MODEL}.model_path",
                              f"{TASKSET}.path")
PATH_LIST_KEYS: tuple[tuple[str, str], ...] = ((EVAL_TASKSETS, "path"),
                                                (AUXILIARY_MODELS, "model_path"))

#: (tunedsl setting, Trinity key) pairs that map one value to one value.
FIELD_MAP: tuple[tuple[str, str], ...] = (
    ("project", "project"),
    ("checkpoint_root_dir", "checkpoint_root_dir"),
    ("monitor", "monitor.monitor_type"),
    ("rollout_timeout", "explorer.max_timeout"),
    ("algorithm.algorithm_type", "algorithm.algorithm_type"),
    ("algorithm.group_size", "algorithm.repeat_times"),
    ("algorithm.learning_rate", "algorithm.optimizer.lr"),
    ("algorithm.batch_size", "buffer.batch_size"),
    ("algorithm.save_interval_steps", "trainer.save_interval"),
    ("algorithm.eval_interval_steps", "explorer.eval_interval"),
    ("algorithm.kl_coef", "algorithm.kl_loss_fn_args.kl_coef"),
    ("algorithm.clip_range", "algorithm.policy_loss_fn_args.clip_range"),
    ("algorithm.weight_decay", "algorithm.optimizer.weight_decay"),
    ("algorithm.grad_clip", "trainer.grad_clip"),
    ("algorithm.lr_warmup_steps", "algorithm.optimizer.lr_warmup_steps"),
    ("algorithm.lr_scheduler", "algorithm.optimizer.lr_scheduler_type"),
    ("algorithm.min_lr_ratio", "algorithm.optimizer.min_lr_ratio"),
    ("algorithm.seed", "explorer.rollout_model.seed"),
    ("train_dataset.total_epochs", "buffer.total_epochs"),
    ("train_dataset.total_steps", "buffer.total_steps"),
    ("train_dataset.path", "buffer.explorer_input.taskset.path"),
    ("train_dataset.split", "buffer.explorer_input.taskset.split"),
    ("train_dataset.name", "buffer.explorer_input.taskset.subset_name"),
    ("model.model_path", "model.model_path"),
    ("model.max_model_len", "model.max_model_len"),
    ("model.max_tokens", "model.max_response_tokens"),
    ("model.temperature", "model.temperature"),
    ("model.top_p", "model.top_p"),
    ("model.enable_thinking", "model.enable_thinking"),
    ("model.inference_engine_num", "explorer.rollout_model.engine_num"),
    ("model.tensor_parallel_size", "explorer.rollout_model.tensor_parallel_size"),
    ("model.tool_call_parser", "explorer.rollout_model.tool_call_parser"),
    ("model.reasoning_parser", "explorer.rollout_model.reasoning_parser"),
)

#: ``Model`` field -> key of a Trinity inference-model entry (an auxiliary model).
AUXILIARY_MAP: tuple[tuple[str, str], ...] = (
    ("model_path", "model_path"),
    ("max_model_len", "max_model_len"),
    ("max_tokens", "max_response_tokens"),
    ("temperature", "temperature"),
    ("top_p", "top_p"),
    ("enable_thinking", "enable_thinking"),
    ("inference_engine_num", "engine_num"),
    ("tensor_parallel_size", "tensor_parallel_size"),
    ("tool_call_parser", "tool_call_parser"),
    ("reasoning_parser", "reasoning_parser"),
)

#: ``Dataset`` field -> key of a Trinity taskset.
TASKSET_MAP: tuple[tuple[str, str], ...] = (
    ("path", "path"), ("split", "split"), ("name", "subset_name"),
)
