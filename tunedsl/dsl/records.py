"""The user-facing setting records: `Dataset`, `Model` and `Algorithm`.

Each is a frozen attrs class that also remembers which fields its caller set
explicitly. Settings layers merge field by field (defaults < TOML < class <
``--set``), and only an explicitly set field may hide a lower layer's value:
``Model("x", temperature=1.0)`` overrides a TOML temperature even though 1.0 is
the default, while ``Model("x")`` leaves the TOML value alone.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import sys
from typing import Any, TypeVar

import attrs

from ..errors import ConfigError, FieldProblem, did_you_mean, unknown_name_message
from .trinity_fields import (
    ALGORITHM_TYPES,
    INFERENCE_MODEL_FIELDS,
    LR_SCHEDULERS,
    OWNED_INFERENCE_KEYS,
)

T = TypeVar("T")


def _explicitly_set(cls: type[T]) -> type[T]:
    """Wrap an attrs ``__init__`` so instances record the fields passed to it."""
    generated_init = cls.__init__
    init_names = [a.name for a in attrs.fields(cls) if a.init]

    @functools.wraps(generated_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            generated_init(self, *args, **kwargs)
        except FieldProblem:
            # attrs stops at the first refused field; report them all, to fix in one pass.
            raise ConfigError(_field_problems(cls, dict(zip(init_names, args)) | kwargs)) \
                from None
        # The class is frozen; these bookkeeping slots are set once, right here.
        object.__setattr__(self, "_explicit", frozenset(init_names[: len(args)]) | set(kwargs))
        caller = os.path.dirname(sys._getframe(1).f_code.co_filename)
        object.__setattr__(self, "defined_in", caller if os.path.isdir(caller) else None)

    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


def _field_problems(cls: type, given: dict[str, Any]) -> list[str]:
    """Every given value a field's validator refuses, one line each, in field order."""
    problems = []
    for attribute in attrs.fields(cls):
        if attribute.validator is None or attribute.alias not in given:
            continue
        try:
            attribute.validator(None, attribute, given[attribute.alias])
        except FieldProblem as problem:
            problems.append(f"{cls.__name__}.{problem.field} {problem.detail}")
    return problems


def explicit_fields(record: Any) -> frozenset[str]:
    """The names of the fields a record's constructor was given explicitly."""
    return getattr(record, "_explicit", frozenset())


def _bookkeeping(default: Any = frozenset) -> Any:
    return attrs.field(init=False, default=attrs.Factory(default) if callable(default)
                       else default, eq=False, repr=False, hash=False)


def _number(minimum: float, *, optional: bool = False, integer: bool = True,
            exclusive: bool = False, maximum: float | None = None) -> Any:
    kinds = (int,) if integer else (int, float)

    def check(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, kinds):
            wanted = "an integer" if integer else "a number"
            raise FieldProblem(attribute.name, f"must be {wanted} (got {value!r})")
        if not integer and math.isinf(value):
            raise FieldProblem(attribute.name, f"must be a finite number (got {value!r})")
        too_small = value <= minimum if exclusive else value < minimum
        if too_small or (not integer and math.isnan(value)):
            relation = ">" if exclusive else ">="
            raise FieldProblem(attribute.name, f"must be {relation} {minimum} (got {value!r})")
        if maximum is not None and value > maximum:
            raise FieldProblem(attribute.name, f"must be <= {maximum} (got {value!r})")

    return check


def _choice(choices: tuple[str, ...]) -> Any:
    def check(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None and value not in choices:
            raise FieldProblem(attribute.name, f"must be one of {', '.join(map(repr, choices))} "
                                               f"(got {value!r})")

    return check


def _text(*, optional: bool = False) -> Any:
    def check(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, str) or not value:
            raise FieldProblem(attribute.name, f"must be a non-empty string (got {value!r})")

    return check


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _url(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None or (isinstance(value, str) and "${env:" in value):
        return  # checked once the settings layer has read the environment
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise FieldProblem(attribute.name, f"must be an http(s) URL such as "
                           f"https://api.example.com/v1 (got {value!r})")


def _env_name(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not _ENV_NAME.match(value)):
        raise FieldProblem(attribute.name, f"must name an environment variable, such as "
                           f"OPENAI_API_KEY (got {value!r}); the key itself is never written")


def _flag(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not isinstance(value, bool):
        raise FieldProblem(attribute.name, f"must be true, false or unset (got {value!r})")


def _top_p(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    _number(0.0, integer=False, exclusive=True)(_instance, attribute, value)
    if value > 1:
        raise FieldProblem(attribute.name, f"must be in (0, 1] (got {value!r})")


def _inference_options(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise FieldProblem(attribute.name, f"must be a dict of Trinity options (got {value!r})")
    for key in value:
        if key in OWNED_INFERENCE_KEYS:
            raise FieldProblem(attribute.name, f"sets {key!r}, which belongs to "
                               f"{OWNED_INFERENCE_KEYS[key]}; set it there")
        if key not in INFERENCE_MODEL_FIELDS:
            raise FieldProblem(
                attribute.name, f"has {key!r}, which is not a field of Trinity's "
                f"InferenceModelConfig{did_you_mean(key, INFERENCE_MODEL_FIELDS)}"
            )


#: ``target_modules`` that adapts every linear layer but the output head (peft's name).
ALL_LINEAR = "all-linear"


def _target_modules(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, (list, tuple)):
        if not value or not all(isinstance(name, str) and name for name in value):
            raise FieldProblem(attribute.name, f"must list at least one module name, each a "
                               f"non-empty string (got {list(value)!r})")
        return
    if not isinstance(value, str) or not value:
        raise FieldProblem(attribute.name, f'must be "{ALL_LINEAR}", a list of module names such '
                           f'as ["q_proj", "v_proj"], or a regular expression over module names '
                           f"(got {value!r})")
    try:
        re.compile(value)
    except re.error as exc:
        raise FieldProblem(attribute.name, f"{value!r} is not a valid regular expression ({exc}); "
                           f'give "{ALL_LINEAR}" or a list of module names') from None


def _as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _record(cls: type) -> Any:
    def check(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None and not isinstance(value, cls):
            raise FieldProblem(attribute.name, f"must be a {cls.__name__}(...) or None "
                               f"(got {value!r})")

    return check


def _algorithm_type(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value not in ALGORITHM_TYPES:
        raise FieldProblem(
            attribute.name, unknown_name_message("algorithm type", value, ALGORITHM_TYPES)
        )


@_explicitly_set
@attrs.frozen
class Dataset:
    """A task dataset, read with ``datasets.load_dataset``.

    Args:
        path: A local folder of jsonl/parquet/csv files (split by file name, e.g.
            ``train.jsonl``), a single data file, or a Hugging Face hub id. Relative
            paths are resolved against the file that names them.
        name: The dataset configuration (``load_dataset(name=...)``; Trinity's
            ``subset_name``).
        split: The split to read.
        total_epochs: Passes over the dataset (training only).
        total_steps: Stop after this many steps; overrides ``total_epochs``.
    """

    path: str = attrs.field(validator=_text())
    name: str | None = attrs.field(default=None, validator=_text(optional=True))
    split: str = attrs.field(default="train", validator=_text())
    total_epochs: int = attrs.field(default=1, validator=_number(1))
    total_steps: int | None = attrs.field(default=None, validator=_number(1, optional=True))
    _explicit: frozenset[str] = _bookkeeping()
    #: The folder of the file that constructed the record (its relative paths are meant
    #: from there), or None when it was not constructed in a file.
    defined_in: str | None = _bookkeeping(None)

    def preview(self, n: int = 5) -> list[dict[str, Any]]:
        """Print and return the first ``n`` rows, streaming (never loads it all)."""
        # The seed's DatasetConfig.preview: the one call from the DSL into the runtime,
        # made only when asked, so the records stay plain data.
        from ..runtime.datasets import first_rows

        rows = first_rows(self, n)
        print(json.dumps(rows, indent=2, ensure_ascii=False, default=str))
        return rows


@_explicitly_set
@attrs.frozen
class LoRA:
    """Train low-rank adapters (LoRA) instead of every weight of the trained model.

    The local backend trains them with ``peft`` (the base weights stay frozen); on Trinity
    they become ``model.lora_configs``, which applies to the rollout model only (never to
    auxiliary models). The defaults are Trinity's.

    Args:
        rank: The adapters' rank (peft's ``r``, Trinity's ``lora_rank``).
        alpha: The scale numerator: an adapter's update is scaled by ``alpha / rank``.
        target_modules: The layers that get adapters: ``"all-linear"`` (every linear layer
            but the output head), a list of module names such as ``["q_proj", "v_proj"]``
            (a name matches every module whose dotted name ends with it), or a regular
            expression the whole dotted module name must match.
    """

    rank: int = attrs.field(default=32, validator=_number(1))
    alpha: int = attrs.field(default=32, validator=_number(1))
    target_modules: str | tuple[str, ...] = attrs.field(default=ALL_LINEAR, converter=_as_tuple,
                                                        validator=_target_modules)
    _explicit: frozenset[str] = _bookkeeping()
    #: The folder of the file that constructed the record, or None.
    defined_in: str | None = _bookkeeping(None)


@_explicitly_set
@attrs.frozen
class Model:
    """A chat model: the one being trained, or a frozen auxiliary one.

    Args:
        model_path: A local Hugging Face model folder or a hub id.
        max_model_len: Prompt plus response tokens the engine handles (required for
            the trained model; auxiliary models default to the trained model's).
        temperature: Sampling temperature.
        top_p: Nucleus sampling threshold.
        max_tokens: Most tokens per response; unset lets Trinity use half of
            ``max_model_len``.
        enable_thinking: Qwen3-style thinking switch; unset leaves the model's default.
        tensor_parallel_size: GPUs per inference engine.
        inference_engine_num: Number of inference engines.
        tool_call_parser: vLLM tool-call parser (``hermes`` suits Qwen models).
        reasoning_parser: vLLM reasoning parser, e.g. ``deepseek_r1``.
        base_url: An OpenAI-compatible endpoint that serves this model (auxiliary models
            only: a hosted LLM judge, say). No local engine is started and no GPU counted;
            ``model_path`` is the model name sent with each request. ``${env:NAME}`` keeps
            the URL itself out of every file.
        api_key_env: The environment variable holding the endpoint's API key, read where
            the calls are made and never written to a file.
        trinity: Further Trinity ``InferenceModelConfig`` options for this model's
            engines (``enable_prefix_caching``, ``gpu_memory_utilization``, ``dtype``,
            ``enforce_eager``, ``extra_engine_args``, ...), merged into its entry of
            ``explorer.rollout_model`` or ``explorer.auxiliary_models``.
        lora: Train LoRA adapters (`LoRA`) instead of every weight (the trained model
            only; auxiliary models are frozen).
    """

    model_path: str = attrs.field(validator=_text())
    max_model_len: int | None = attrs.field(default=None, validator=_number(1, optional=True))
    temperature: float = attrs.field(default=1.0, validator=_number(0.0, integer=False))
    top_p: float = attrs.field(default=1.0, validator=_top_p)
    max_tokens: int | None = attrs.field(default=None, validator=_number(1, optional=True))
    enable_thinking: bool | None = attrs.field(default=None, validator=_flag)
    tensor_parallel_size: int = attrs.field(default=1, validator=_number(1))
    inference_engine_num: int = attrs.field(default=1, validator=_number(1))
    tool_call_parser: str | None = attrs.field(default="hermes", validator=_text(optional=True))
    reasoning_parser: str | None = attrs.field(default=None, validator=_text(optional=True))
    base_url: str | None = attrs.field(default=None, validator=_url)
    api_key_env: str | None = attrs.field(default=None, validator=_env_name)
    trinity: dict[str, Any] = attrs.field(factory=dict, validator=_inference_options)
    # metadata["record"]: the settings layers read a [model.lora] table field by field.
    lora: LoRA | None = attrs.field(default=None, validator=_record(LoRA),
                                    metadata={"record": LoRA})
    _explicit: frozenset[str] = _bookkeeping()
    #: The folder of the file that constructed the record (its relative paths are meant
    #: from there), or None when it was not constructed in a file.
    defined_in: str | None = _bookkeeping(None)


@_explicitly_set
@attrs.frozen
class Algorithm:
    """The RL algorithm and its main hyper-parameters.

    Args:
        algorithm_type: A Trinity-RFT algorithm name, e.g. ``grpo`` or
            ``multi_step_grpo`` (every model call of a trajectory is trained on).
        group_size: Rollouts per task; group-relative algorithms need at least 2.
        batch_size: Tasks per training step.
        learning_rate: Optimizer learning rate.
        save_interval_steps: Save a checkpoint every this many steps.
        eval_interval_steps: Evaluate on the eval dataset every this many steps.
        kl_coef: Weight of the KL penalty to the initial model; unset keeps the
            algorithm's own default (none on the local backend).
        clip_range: The policy ratio's clip range (PPO-style losses); unset keeps the
            algorithm's own (0.2 on the local backend).
        weight_decay: AdamW's weight decay; unset keeps Trinity's default, 0.01.
        grad_clip: The gradient norm is clipped to this; unset keeps Trinity's default, 1.0.
        lr_warmup_steps: The learning rate rises linearly from 0 over this many steps
            (Trinity's ``optimizer.lr_warmup_steps``); unset means no warmup.
        lr_scheduler: ``constant`` (Trinity's default) or ``cosine`` decay after warmup
            to ``min_lr_ratio`` times the learning rate at the last step.
        min_lr_ratio: Where ``cosine`` ends, as a share of ``learning_rate``; unset keeps
            Trinity's default, 0.01.
        keep_checkpoints: Keep only the newest this many ``global_step_N`` folders (local
            backend; unset keeps all).
        keep_best_checkpoint: Also keep the saved checkpoint whose step scored the best
            eval reward (local backend; steps that both saved and evaluated count).
        seed: Seeds sampling and data order, for reproducible runs.
    """

    algorithm_type: str = attrs.field(default="multi_step_grpo", validator=_algorithm_type)
    group_size: int = attrs.field(default=8, validator=_number(1))
    batch_size: int = attrs.field(default=32, validator=_number(1))
    learning_rate: float = attrs.field(
        # Above float32's largest number the optimizer cannot even apply the step.
        default=1e-6, validator=_number(0.0, integer=False, exclusive=True, maximum=3.4e38)
    )
    save_interval_steps: int = attrs.field(default=100, validator=_number(1))
    eval_interval_steps: int = attrs.field(default=100, validator=_number(1))
    kl_coef: float | None = attrs.field(
        default=None, validator=_number(0.0, integer=False, optional=True)
    )
    clip_range: float | None = attrs.field(
        default=None, validator=_number(0.0, integer=False, optional=True, exclusive=True)
    )
    weight_decay: float | None = attrs.field(
        default=None, validator=_number(0.0, integer=False, optional=True)
    )
    grad_clip: float | None = attrs.field(
        default=None, validator=_number(0.0, integer=False, optional=True, exclusive=True)
    )
    lr_warmup_steps: int | None = attrs.field(default=None, validator=_number(0, optional=True))
    lr_scheduler: str | None = attrs.field(default=None, validator=_choice(LR_SCHEDULERS))
    min_lr_ratio: float | None = attrs.field(
        default=None, validator=_number(0.0, integer=False, optional=True, maximum=1.0)
    )
    keep_checkpoints: int | None = attrs.field(default=None,
                                               validator=_number(1, optional=True))
    keep_best_checkpoint: bool = attrs.field(default=False, validator=_flag)
    seed: int = attrs.field(default=42, validator=_number(0))
    _explicit: frozenset[str] = _bookkeeping()
    #: The folder of the file that constructed the record (its relative paths are meant
    #: from there), or None when it was not constructed in a file.
    defined_in: str | None = _bookkeeping(None)


@_explicitly_set
@attrs.frozen
class Tinker:
    """Train through Tinker (hosted LoRA training and sampling) instead of local GPUs.

    With it, Trinity's trainer and inference engines become Tinker's, so a run needs no
    local GPU; the model must be one the Tinker service supports (checked by ``check``).
    The API key is read from ``TINKER_API_KEY``, never from a file. Needs Python 3.11+
    and ``pip install "tunedsl[tinker]"``.

    Args:
        rank: The LoRA rank.
        train_mlp: Train the MLP layers.
        train_attn: Train the attention layers.
        train_unembed: Train the unembedding layer.
        seed: Tinker's seed; unset lets Tinker choose.
        base_url: The Tinker service; unset means Tinker's own.
    """

    rank: int = attrs.field(default=16, validator=_number(1))
    train_mlp: bool = attrs.field(default=True, validator=_flag)
    train_attn: bool = attrs.field(default=True, validator=_flag)
    train_unembed: bool = attrs.field(default=True, validator=_flag)
    seed: int | None = attrs.field(default=None, validator=_number(0, optional=True))
    base_url: str | None = attrs.field(default=None, validator=_url)
    _explicit: frozenset[str] = _bookkeeping()
    #: The folder of the file that constructed the record, or None.
    defined_in: str | None = _bookkeeping(None)


#: The seed's (AgentScope ``tuner``) names for the same records.
DatasetConfig = Dataset
TunerModelConfig = Model
AlgorithmConfig = Algorithm
