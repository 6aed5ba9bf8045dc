"""The experiment graph as a Trinity-RFT 0.6.0 config (a dict, and YAML text).

No Trinity import happens here: the YAML is plain data, so ``tunedsl config``
works without Trinity installed, and real Trinity validates it in ``check``.

With a base Trinity YAML (``trinity_config``) the result is layered like every
other setting: tunedsl's defaults and the values no layer set explicitly sit
*under* the base file, the values a user set explicitly sit over it, and the
``[trinity]`` table goes on top. Without a base, everything is simply written.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import yaml

from ...checks.futile import phase_steps
from ...config.environment import EnvValue, omegaconf_text
from ...config.graph import ExperimentGraph
from ...config.nested import deep_merge, get_path, set_path
from ...config.trinity_base import read_base_config, resolve_as_trinity
from ...data.conversations import MESSAGES_KEY
from ...data.quality import MAX_ROWS
from ...dsl.algorithms import (
    ALGORITHMS,
    ARGUMENT_TABLES,
    CONVERSATION_ALGORITHMS,
    ResolvedAlgorithm,
    resolve,
    teacher_name,
)
from ...dsl.records import Model
from ...dsl.settings_table import (
    ALGORITHM_MAP,
    AUXILIARY_MAP,
    FIELD_MAP,
    LORA_MAP,
    TASKSET_MAP,
    TINKER_MAP,
)
from ...dsl.trinity_fields import (
    AUXILIARY_MODELS,
    EVAL_TASKSET,
    EVAL_TASKSETS,
    LORA_CONFIGS,
    ROLLOUT_MODEL,
    RUN_NAME,
    TASKSET,
    TINKER,
    TURN_KEYS,
)
from ...errors import ConfigError
from ...models.endpoint import request_sampling
from ...runs.run_files import WARMUP_DIR
from ...runs.rundir import run_name
from .bounds import EXPERIENCE_BUFFER, time_bounds
from .cluster import shape_as_table

#: The Trinity Workflow class tunedsl ships; Trinity imports dotted registry keys itself.
WORKFLOW_CLASS = "tunedsl.backends.trinity.workflow.TunedslWorkflow"
#: The one for an experiment judged by a ``@group_judge``: a task's group is one run.
GROUP_WORKFLOW_CLASS = "tunedsl.backends.trinity.workflow.TunedslGroupWorkflow"
#: How many of a task's repeats one runner takes (Trinity splits a task into sub-tasks of
#: this many): null keeps a group whole, as a group judge needs.
REPEATS_PER_RUNNER = "explorer.max_repeat_times_per_runner"


def judged_as_groups(graph: ExperimentGraph) -> bool:
    """Whether the experiment's judge is a ``@group_judge``."""
    return graph.judge is not None and graph.judge.kind == "group_judge"


def group_split_problem(graph: ExperimentGraph, config: Mapping[str, Any]) -> str | None:
    """Why ``config`` would split a group judge's groups over runners, or None."""
    judge = graph.judge
    if judge is None or not judged_as_groups(graph):
        return None
    found, per_runner = get_path(config, REPEATS_PER_RUNNER)
    if not found or per_runner is None or not isinstance(per_runner, int) \
            or per_runner >= graph.algorithm.group_size:
        return None
    return (f"trinity.{REPEATS_PER_RUNNER} = {per_runner} splits each task's group of "
            f"{graph.algorithm.group_size} over runners, and @group_judge {judge.qualname} "
            f"({judge.where}) must see the group whole; remove it (tunedsl writes null for a "
            f"group judge)")


def workflow_class(graph: ExperimentGraph) -> str:
    """The Trinity Workflow class that runs the experiment's rollouts."""
    return GROUP_WORKFLOW_CLASS if judged_as_groups(graph) else WORKFLOW_CLASS
TRAIN_TASKSET = "train"
#: Where Trinity passes verl's attention implementation (``trainer.trainer_config`` is merged
#: into the verl config ``trinity/trainer/verl/config.py`` builds; verl reads
#: ``model.override_config.attn_implementation``, default ``flash_attention_2``,
#: ``verl/workers/config/model.py``). tunedsl writes ``sdpa``: torch's own kernels, so verl
#: needs no flash-attn kernel for the GPU (transformers masks packed sequences from their
#: position ids for sdpa, ``transformers/masking_utils.py``); a base YAML or ``[trinity]``
#: may set ``flash_attention_2``.
ATTN_IMPLEMENTATION = "trainer.trainer_config.model.override_config.attn_implementation"
#: The stages of a run with a warm-up, in order (Trinity names each stage's folder
#: ``<run>/<stage>``: the RL stage's checkpoints are in ``<run>/rl``).
WARMUP_STAGE, RL_STAGE = WARMUP_DIR, "rl"

#: Values AgentScope's tuner also uses for agent workloads (long rollouts, one
#: repeat per runner, weights pushed to the explorer every step).
_DEFAULTS: dict[str, Any] = {
    "mode": "both",
    "explorer": {"runner_per_model": 16, "max_repeat_times_per_runner": 1},
    "synchronizer": {"sync_style": "dynamic_by_explorer", "sync_method": "nccl",
                     "sync_interval": 1},  # sync_timeout: bounds.py
}  # fmt: skip


class _Layers:
    """Collects Trinity keys into the layer below or above a base YAML."""

    def __init__(self, explicit: frozenset[str]) -> None:
        self.low: dict[str, Any] = {}
        self.high: dict[str, Any] = {}
        self.written: dict[str, Any] = {}  # everything, in the order it was put
        self.explicit = explicit

    def put(self, path: str, value: Any, setting: str | None = None) -> None:
        """Set ``path``; ``setting`` names the tunedsl field it comes from (None: always
        tunedsl's own, e.g. the workflow class)."""
        layer = self.high if setting is None or setting in self.explicit else self.low
        set_path(layer, path, value)
        set_path(self.written, path, value)

    def default(self, path: str, value: Any) -> None:
        """Set ``path`` to a value of tunedsl's choosing that a base YAML may change."""
        set_path(self.low, path, value)
        set_path(self.written, path, value)


def _resolved(graph: ExperimentGraph) -> ResolvedAlgorithm | None:
    """The algorithm both backends run, or None for Trinity's others (its defaults)."""
    return resolve(graph.algorithm) if graph.algorithm.algorithm_type in ALGORITHMS else None


def _workflow_args(graph: ExperimentGraph) -> dict[str, Any]:
    # The workflow class enforces the rollout bound itself: Trinity's explorer.max_timeout
    # bounds whole steps (see bounds.py).
    args: dict[str, Any] = {"workflow": graph.workflow.ref,
                            "rollout_timeout": graph.rollout_timeout}
    if graph.source is not None:
        args["experiment"] = graph.source
    if graph.judge is not None:
        args["judge"] = graph.judge.ref
    if graph.params:
        args["params"] = graph.params
    endpoints = endpoint_specs(graph)
    if endpoints:
        args["endpoints"] = endpoints
    algorithm = _resolved(graph)
    if algorithm is not None:
        failed = algorithm.on_failed_rollout
        if failed != "drop":  # the workflow scores it 0, or marks its group for dropping
            args["on_failed_rollout"] = failed
        keys = {name: algorithm.advantage_args.get(name, default)
                for name, default in TURN_KEYS.items()}
        if algorithm.advantage_fn == "gigpo" and keys != TURN_KEYS:
            args["turn_keys"] = keys  # where the workflow puts each turn's reward and state
    teacher = teacher_name(graph.algorithm, graph.auxiliary_models)
    if teacher is not None:  # the workflow scores each experience with it
        args["teacher"] = teacher
    return args


def endpoint_specs(graph: ExperimentGraph) -> dict[str, dict[str, Any]]:
    """The auxiliary models served by an endpoint, for the workflow class to call itself:
    Trinity's runner gets every auxiliary model from a Ray actor, which an external engine
    never has, so these are not in ``explorer.auxiliary_models`` (and count no GPU)."""
    return {
        name: {"model": model.model_path, "base_url": model.base_url,
               "api_key_env": model.api_key_env,
               "sampling": {key: value for key, value in request_sampling(model).items()
                            if value is not None}}
        for name, model in graph.auxiliary_models.items() if model.base_url is not None
    }


def _setting(graph: ExperimentGraph, dotted: str) -> Any:
    value: Any = graph
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _taskset(graph: ExperimentGraph, out: _Layers, path: str, section: str, name: str) -> None:
    out.put(f"{path}.name", name)
    out.put(f"{path}.storage_type", "file")
    dataset = getattr(graph, section)
    for field, key in TASKSET_MAP:
        if getattr(dataset, field) is not None:
            out.put(f"{path}.{key}", getattr(dataset, field), f"{section}.{field}")
    if section == "train_dataset":  # a seeded shuffle per epoch, as the local backend reads
        out.default(f"{path}.data_selector.selector_type", "shuffle")
        out.put(f"{path}.data_selector.seed", graph.algorithm.seed, "algorithm.seed")
    out.put(f"{path}.default_workflow_type", workflow_class(graph))
    out.put(f"{path}.workflow_args", _workflow_args(graph))
    # The workflow runner hands these to the model as the per-call sampling defaults (each
    # key is also the `Model` field that sets it).
    for key, value in request_sampling(graph.model).items():
        if value is not None:
            out.put(f"{path}.rollout_args.{key}", value, f"model.{key}")


def _conversations(graph: ExperimentGraph, section: str) -> dict[str, Any]:
    """A dataset of conversations as Trinity's SFT experience buffer: a file its trainer
    reads in order of the same seeded shuffle as the local backend's (`Schedule`)."""
    dataset = getattr(graph, section)
    entry: dict[str, Any] = {"name": section, "storage_type": "file"}
    for field, key in TASKSET_MAP:
        if getattr(dataset, field) is not None:
            entry[key] = getattr(dataset, field)
    phase = graph.warmup if section == "warmup_dataset" else graph.algorithm
    assert phase is not None  # a warm-up dataset is only written with its warm-up
    seed = phase.seed
    entry["format"] = {"prompt_type": "messages", "messages_key": MESSAGES_KEY}
    entry["data_selector"] = {"selector_type": "shuffle", "seed": seed}
    return entry


def _conversation_buffer(graph: ExperimentGraph, section: str, batch_size: int) -> dict[str, Any]:
    """The ``buffer`` keys of SFT on ``section``: its conversations, steps a batch of
    ``batch_size`` conversations (Trinity requires ``train_batch_size`` for SFT)."""
    dataset = getattr(graph, section)
    buffer: dict[str, Any] = {"batch_size": batch_size, "train_batch_size": batch_size,
                              "total_epochs": dataset.total_epochs}
    if dataset.total_steps is not None:
        buffer["total_steps"] = dataset.total_steps
    set_path(buffer, EXPERIENCE_BUFFER.removeprefix("buffer."),
             _conversations(graph, section))
    return buffer


def warmup_stages(graph: ExperimentGraph) -> list[dict[str, Any]]:
    """Trinity's ``stages`` for a warm-up: SFT in mode ``train`` on the warm-up's
    conversations, with the warm-up record's ``algorithm`` keys and buffer, then the run's
    own RL (a stage that keeps the top-level sections). Trinity's launcher starts the
    second stage from the first one's last Hugging Face checkpoint."""
    warmup = graph.warmup
    assert warmup is not None
    algorithm: dict[str, Any] = {}
    for field, key in ALGORITHM_MAP:
        value = getattr(warmup, field)
        if key.startswith("algorithm.") and value is not None and value != {}:
            set_path(algorithm, key.removeprefix("algorithm."), value)
    algorithm.update(resolve(warmup).trinity_section())
    return [{"stage_name": WARMUP_STAGE, "mode": "train", "algorithm": algorithm,
             "buffer": _conversation_buffer(graph, "warmup_dataset", warmup.batch_size)},
            {"stage_name": RL_STAGE}]


def lora_entry(graph: ExperimentGraph) -> dict[str, Any]:
    """The model's `LoRA` as Trinity's ``LoRAConfig``: Trinity's ``target_modules`` is one
    string, so a list of module names becomes the regular expression peft matches the
    same modules with (a dotted name that is, or ends with ``.``, one of the names)."""
    lora = graph.model.lora
    assert lora is not None
    entry: dict[str, Any] = {"name": graph.name}
    for field, key in LORA_MAP:
        entry[key] = getattr(lora, field)
    if not isinstance(lora.target_modules, str):
        names = "|".join(re.escape(name) for name in lora.target_modules)
        entry["target_modules"] = rf"(.*\.)?({names})"
    return entry


def _inference_entry(out: _Layers, path: str, model: Model, setting: str) -> None:
    """What tunedsl adds to an inference-model entry beyond the field map."""
    out.put(f"{path}.enable_openai_api", True)
    out.put(f"{path}.enable_auto_tool_choice", model.tool_call_parser is not None,
            f"{setting}.tool_call_parser")
    for key, value in model.trinity.items():
        out.put(f"{path}.{key}", value, f"{setting}.trinity")


def explorer_steps(graph: ExperimentGraph, rows: Mapping[str, int | None]) -> int | None:
    """The explorer's steps, as Trinity's task scheduler counts them (``total_steps``, else
    ``total_epochs x rows // batch_size``); None when the training rows are not counted."""
    return phase_steps(graph, rows)["algorithm"]


def _collect(graph: ExperimentGraph, name: str, eval_name: str,
             rows: Mapping[str, int | None]) -> _Layers:
    out = _Layers(graph.explicit)
    out.put(RUN_NAME, name)
    sft = graph.algorithm.algorithm_type in CONVERSATION_ALGORITHMS
    for setting, key in FIELD_MAP:
        value = _setting(graph, setting)
        if sft and key.startswith(f"{TASKSET}."):  # conversations: see below
            continue
        if value is not None:
            out.put(key, value, setting)
    algorithm = _resolved(graph)
    if algorithm is not None:
        # Every part and argument written out: Trinity fills a part's arguments only when
        # none are given, and the local backend trains with this same resolution.
        for key, value in algorithm.trinity_section().items():
            out.default(f"algorithm.{key}", value)
    else:  # Trinity's other algorithms: the tables as given (Trinity fills in the rest)
        for table, key in ARGUMENT_TABLES.items():
            for argument, value in getattr(graph.algorithm, table).items():
                out.put(f"{key}.{argument}", value, f"algorithm.{table}")
    steps = explorer_steps(graph, rows)
    if graph.algorithm.lr_scheduler == "cosine" and steps is not None:
        # verl decays over trainer.total_steps (else sys.maxsize: never); each explorer step
        # is one trainer step for a workflow that calls the model once (checks.py).
        out.default("trainer.total_steps", steps)
    if sft:
        # The trainer alone reads the conversations; with no explorer there is no eval
        # (the checks say so) and no taskset.
        out.put("mode", "train")
        for key, value in _conversation_buffer(graph, "train_dataset",
                                               graph.algorithm.batch_size).items():
            out.put(f"buffer.{key}", value, "train_dataset")
    else:
        out.put("buffer.explorer_input.default_workflow_type", workflow_class(graph))
        if judged_as_groups(graph):  # a task's group on one runner, whole
            out.put(REPEATS_PER_RUNNER, None)
        _taskset(graph, out, TASKSET, "train_dataset", TRAIN_TASKSET)
        if graph.eval_dataset is not None:
            _taskset(graph, out, f"{EVAL_TASKSETS}.{eval_name}", "eval_dataset",
                     eval_name)
    if graph.warmup is not None:
        out.put("stages", warmup_stages(graph), "warmup")
    if graph.tinker is None:  # verl trains: see ATTN_IMPLEMENTATION
        out.default(ATTN_IMPLEMENTATION, "sdpa")
    if graph.tinker is not None:  # Trinity then makes its trainer and engines Tinker's
        out.put(f"{TINKER}.enable", True, "tinker")
        for field, key in TINKER_MAP:
            if getattr(graph.tinker, field) is not None:
                out.put(key, getattr(graph.tinker, field), f"tinker.{field}")
    if graph.model.lora is not None:
        out.put(LORA_CONFIGS, [lora_entry(graph)], "model.lora")
    rollout = ROLLOUT_MODEL
    _inference_entry(out, rollout, graph.model, "model")
    # Needed by the workflow's OpenAI client and by multi-turn experience extraction.
    out.put(f"{rollout}.enable_history", True)
    for alias, model in graph.auxiliary_models.items():
        if model.base_url is not None:  # an endpoint: see endpoint_specs
            continue
        path, setting = f"{AUXILIARY_MODELS}.{alias}", f"auxiliary_models.{alias}"
        out.put(f"{path}.name", alias)
        for field, key in AUXILIARY_MAP:
            if getattr(model, field) is not None:
                out.put(f"{path}.{key}", getattr(model, field), f"{setting}.{field}")
        _inference_entry(out, path, model, setting)
    return out


# Trinity keeps auxiliary models and eval tasksets in lists; tunedsl merges their
# entries by name (as dicts keyed by name), never appending a second twin.
_NAMED_LISTS = (AUXILIARY_MODELS, EVAL_TASKSETS)


def _lists_by_name(given: Mapping[str, Any], source: str) -> dict[str, Any]:
    config = copy.deepcopy(dict(given))
    for path in _NAMED_LISTS:
        found, entries = get_path(config, path)
        if found and isinstance(entries, Mapping):  # [trinity.<path>.NAME] tables
            set_path(config, path, _tables_by_name(entries, path, source))
            continue
        if not found or not isinstance(entries, list):
            continue
        by_name = {}
        for index, entry in enumerate(entries):
            if not isinstance(entry, Mapping) or not entry.get("name"):
                raise ConfigError(f"{source}: {path}[{index}] needs a name, so tunedsl can "
                                  f"merge it with the experiment's own entries")
            if entry["name"] in by_name:  # the first was read, the second would be run
                raise ConfigError(f"{source}: {path}[{index}] is named {entry['name']!r}, as "
                                  f"an entry before it is; give each entry a name of its own")
            by_name[entry["name"]] = dict(entry)
        set_path(config, path, by_name)
    return config


def _tables_by_name(entries: Mapping[str, Any], path: str, source: str) -> dict[str, Any]:
    """Entries given as tables keyed by name (``[trinity.<path>.hard]``, ``--set
    trinity.<path>.hard.path=...``): each named by its key, as a list entry names itself
    (the key was dropped, and Trinity got a nameless entry tunedsl never checked)."""
    by_name = {}
    for key, entry in entries.items():
        if str(key).isdigit():
            raise ConfigError(f"{source}: {path}.{key}: entries are named, not numbered; "
                              f"write {path}.NAME.FIELD, NAME being the entry's name")
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{source}: {path}.{key} must be a table of the entry's fields "
                              f"(got {entry!r})")
        if entry.get("name", key) != key:
            raise ConfigError(f"{source}: {path}.{key} has name = {entry['name']!r}; an "
                              f"entry given as a table is named by its key: drop name")
        by_name[key] = {**entry, "name": key}
    return by_name


def _lists_as_lists(config: dict[str, Any]) -> dict[str, Any]:
    for path in _NAMED_LISTS:
        found, entries = get_path(config, path)
        if found and isinstance(entries, Mapping):
            set_path(config, path, list(entries.values()))
    return config


#: Trinity's own order of top-level sections, so the YAML reads like Trinity's examples.
_TOP_LEVEL_ORDER = ("mode", "project", "group", "name", "checkpoint_root_dir", "algorithm",
                    "model", "cluster", "buffer", "explorer", "trainer", "monitor",
                    "synchronizer")


def _ordered(config: Mapping[str, Any], reference: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with keys in ``reference``'s order first (recursively), then the rest."""
    keys = [k for k in reference if k in config] + [k for k in config if k not in reference]
    return {
        key: _ordered(config[key], reference.get(key, {}))
        if isinstance(config[key], Mapping) and isinstance(reference.get(key), Mapping)
        else config[key]
        for key in keys
    }


#: Trinity's experience operator that drops experiences without a finite reward: the
#: workflow's placeholder for a rollout that made no model call (workflow.py) is one.
INVALID_REWARD_FILTER: dict[str, Any] = {"name": "invalid_reward_filter"}
#: tunedsl's operator that counts failed rollouts, drops what ``on_failed_rollout`` says
#: and ends a run whose step failed whole (``operators.py``).
FAILED_ROLLOUTS = "tunedsl.backends.trinity.operators.FailedRollouts"
#: Trinity's operator that takes truncated replies out of the loss.
MASK_TRUNCATED = {"name": "mask_response_truncated"}
_OPERATORS = "data_processor.experience_pipeline.operators"


def _tunedsl_operators_first(config: dict[str, Any], graph: ExperimentGraph) -> None:
    """Put tunedsl's operators first in the experience pipeline (once each), so no other
    operator, and no advantage function, sees a placeholder experience or a truncated
    reply it should not: the failed rollouts' operator, `INVALID_REWARD_FILTER`, then the
    truncated replies' mask, as the experiment's algorithm asks."""
    ours = [INVALID_REWARD_FILTER]
    algorithm = _resolved(graph)
    if algorithm is not None:
        ours.insert(0, {"name": FAILED_ROLLOUTS,
                        "args": {"policy": algorithm.on_failed_rollout}})
        if algorithm.on_truncated_reply == "mask":
            ours.append(MASK_TRUNCATED)
    _, operators = get_path(config, _OPERATORS)
    # A base YAML's (or an earlier tunedsl's) entry of an operator of ours is replaced.
    operators = [op for op in operators or () if op not in ours and not str(
        (op or {}).get("name", "")).startswith("tunedsl.backends.trinity.operators.")]
    set_path(config, _OPERATORS, [*map(dict, ours), *operators])


#: The keys a fit to the cluster writes (`tunedsl.backends.trinity.cluster.fit_to_cluster`).
FITTED_KEYS = ("mode", "cluster.node_num", "cluster.gpu_per_node", f"{ROLLOUT_MODEL}.engine_num")
#: The keys `time_bounds` writes, which depend on the engine count.
BOUND_KEYS = ("explorer.max_timeout", f"{EXPERIENCE_BUFFER}.max_read_timeout")


def _picked(config: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The nested dict of ``config``'s values at ``keys`` (those it has)."""
    picked: dict[str, Any] = {}
    for key in keys:
        found, value = get_path(config, key)
        if found:
            set_path(picked, key, value)
    return picked


#: verl's older layout of ``trainer.trainer_config``: Trinity reads this ``model`` table, when
#: given, in place of a flat ``model`` (``_normalize_trainer_config``,
#: ``trinity/trainer/verl/config.py``), which it then drops whole.
_WRAPPED_MODEL = "trainer.trainer_config.actor_rollout_ref.model"


def _attention_where_read(config: dict[str, Any], upper: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with tunedsl's flat ``trainer_config.model`` table (`ATTN_IMPLEMENTATION`)
    moved under ``actor_rollout_ref.model`` where the user's layers (``upper``) give that
    table and no flat one: Trinity would drop tunedsl's, and the check took it for the
    user's model table given twice (sweep 51 A-W1). The user's values win the merge."""
    flat = ATTN_IMPLEMENTATION.removesuffix(".override_config.attn_implementation")
    found, wrapped = get_path(config, _WRAPPED_MODEL)
    has_ours, ours = get_path(config, flat)
    if not found or not has_ours or get_path(upper, flat)[0]:
        return config
    given = config["trainer"]["trainer_config"]
    wrapper = given["actor_rollout_ref"]
    if isinstance(wrapped, Mapping):  # (a value there is verl_overrides' to refuse)
        wrapper = {**wrapper, "model": deep_merge(ours, wrapped)}
    given = {**{key: value for key, value in given.items() if key != "model"},
             "actor_rollout_ref": wrapper}
    return {**config, "trainer": {**config["trainer"], "trainer_config": given}}


def trinity_config(graph: ExperimentGraph, *, name: str | None = None,
                   rows: Mapping[str, int | None] | None = None,
                   fitted: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Trinity-RFT config for ``graph`` as a dict.

    Args:
        graph: The experiment graph.
        name: The run name; defaults to a fresh `run_name`.
        rows: Each dataset section's row count, where the preflight counted it (None:
            too many to count). With it, a cosine schedule gets its trainer steps and the
            step bound covers the eval dataset (`tunedsl.backends.trinity.bounds`).
        fitted: A config fitted to a cluster: its cluster, mode and engine count
            (`FITTED_KEYS`) are written, and the step bounds computed for them.
    """
    rows = rows or {}
    base: dict[str, Any] = {}
    if graph.trinity_config is not None:
        base = _lists_by_name(read_base_config(graph.trinity_config), graph.trinity_config)
    # The eval dataset is the base's first eval taskset (the graph read it from there).
    _, base_evals = get_path(base, EVAL_TASKSETS)
    eval_name = next(iter(base_evals or {}), EVAL_TASKSET)
    layers = _collect(graph, name or run_name(graph), eval_name, rows)
    # (its name is read back as tunedsl's name, and written as every run's is, timed)
    trinity = _lists_by_name({key: value for key, value in shape_as_table(graph.trinity).items()
                              if key != RUN_NAME}, "[trinity]")
    upper = deep_merge(deep_merge(base, layers.high), trinity)
    if fitted is not None:
        upper = deep_merge(upper, _picked(fitted, FITTED_KEYS))
    lower = deep_merge(_DEFAULTS, layers.low)
    counted_eval = rows.get("eval_dataset", 0)  # None: more rows than the preflight reads
    eval_tasks = MAX_ROWS if counted_eval is None else counted_eval
    # SFT's trainer reads a file, with no explorer to wait for: nothing to bound.
    derived = {} if graph.algorithm.algorithm_type in CONVERSATION_ALGORITHMS else \
        time_bounds(deep_merge(lower, upper), graph.rollout_timeout, eval_tasks,
                    grouped=judged_as_groups(graph))
    config = _attention_where_read(deep_merge(deep_merge(lower, derived), upper), upper)
    problem = group_split_problem(graph, config)
    if problem is not None:
        raise ConfigError(problem)
    if get_path(config, LORA_CONFIGS) == (True, []):  # Trinity reads lora_configs[0]
        raise ConfigError(f"{LORA_CONFIGS} is an empty list (in the base YAML or [trinity]), "
                          f"of which Trinity-RFT reads the first entry; give one LoRA config "
                          f"(or set model.lora), or remove the key")
    _tunedsl_operators_first(config, graph)
    reference: dict[str, Any] = {key: {} for key in _TOP_LEVEL_ORDER}
    reference = deep_merge(reference, deep_merge(deep_merge(layers.written, _DEFAULTS), derived))
    return _lists_as_lists(_ordered(config, reference))


def with_bounds(graph: ExperimentGraph, given: Mapping[str, Any],
                rows: Mapping[str, int | None] | None = None) -> dict[str, Any]:
    """``given`` (``graph``'s config, fitted to a cluster) with Trinity's step bounds for
    the engine count it now has: a step runs in waves of ``engine_num x runner_per_model``
    rollouts (`tunedsl.backends.trinity.bounds`), so bounds computed before the fit, for one
    engine, are too long by the engine count."""
    fresh = trinity_config(graph, name=given.get("name"), rows=rows, fitted=given)
    config = copy.deepcopy(dict(given))
    for key in BOUND_KEYS:
        found, value = get_path(fresh, key)
        if found:
            set_path(config, key, value)
    return config


class _Dumper(yaml.SafeDumper):
    """Writes environment-derived strings back as OmegaConf ``${oc.env:...}`` references."""

    def represent_mapping(self, tag: str, mapping: Any, flow_style: Any = None) -> Any:
        # OmegaConf reads a key as written (no interpolation, no escape taken back): a
        # params key holding ${ reached Trinity's workflow as \${...} (sweep 34 A-S6)
        if isinstance(mapping, Mapping):
            mapping = {_Key(key) if type(key) is str else key: value
                       for key, value in mapping.items()}
        return super().represent_mapping(tag, mapping, flow_style)


class _Key(str):
    """A mapping's key, written as its text."""


_Dumper.add_representer(EnvValue, lambda dumper, value: dumper.represent_str(value.template))
# Any other string is text: OmegaConf would read its ${...} as an interpolation.
_Dumper.add_representer(str, lambda dumper, value: _text(dumper, omegaconf_text(value)))
_Dumper.add_representer(_Key, lambda dumper, value: _text(dumper, str(value)))

#: Characters YAML reads as line breaks, which a plain or single-quoted scalar folds away.
_YAML_BREAKS = ("\x85", "\u2028", "\u2029")


def _text(dumper: Any, text: str) -> Any:
    """A string as YAML that reads back as itself: double-quoted (its escapes kept) when it
    holds a character YAML takes as a line break (NEL, U+2028, U+2029)."""
    if any(mark in text for mark in _YAML_BREAKS):
        return dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"')
    return dumper.represent_str(text)


def to_yaml(config: Mapping[str, Any], allow_unicode: bool = True) -> str:
    """YAML text for a Trinity config dict, keys in the order tunedsl wrote them; without
    ``allow_unicode``, ASCII (text past it in YAML's escapes, read back the same)."""
    resolve_as_trinity(_Dumper)  # text OmegaConf reads as a number is written quoted
    return yaml.dump(dict(config), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=allow_unicode)
