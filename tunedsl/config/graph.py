"""The experiment graph: one frozen, pure-data record of everything a run needs.

It is built from an ``@experiment`` class and its settings layers, checked as a
whole, and round-trips through cattrs (``unstructure`` then ``structure`` gives an
equal graph), so every backend and the YAML writer read the same data.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ..dsl.algorithms import (
    CONVERSATION_ALGORITHMS,
    GROUP_ADVANTAGES,
    algorithm_problems,
    part_conflicts,
    teacher_problems,
)
from ..dsl.decorators import ExperimentSpec, FunctionSpec, spec_of
from ..dsl.records import Algorithm, Dataset, Model, Tinker, offline_type_problem
from ..dsl.setting import FUNCTION
from ..dsl.settings_table import (
    DATASET_SECTIONS,
    EXPERIMENT_SETTINGS,
    setting_named,
    settings_named,
)
from ..dsl.trinity_fields import GROUP_ALGORITHMS, OFFLINE_TYPES
from ..errors import ConfigError, Problem, did_you_mean
from ..wording import spelled
from .importer import load_object
from .paths import local_path


@attrs.frozen(kw_only=True)
class ExperimentGraph:
    """A fully resolved experiment: one field per setting of the settings table (each
    field's meaning is its row's, as the settings reference gives it).

    The fields are written out so type checkers read them; ``tests/test_graph.py`` checks
    that they are the settings table's rows in graph (`graph_fields`), in its order, with
    its types and defaults, so a row added to the table without its field fails there.

    Attributes:
        source: The import string the experiment was loaded from (``pkg.mod:Attr`` or
            ``path/file.py:Attr``); None when built by `tune` from bare functions.
        explicit: Dotted names of the settings some layer set explicitly.
    """

    source: str | None
    workflow: FunctionSpec
    judge: FunctionSpec | None = None
    train_dataset: Dataset
    eval_dataset: Dataset | None = None
    model: Model
    auxiliary_models: dict[str, Model] = attrs.field(factory=dict)
    algorithm: Algorithm = attrs.field(factory=Algorithm)
    warmup: Algorithm | None = None
    warmup_dataset: Dataset | None = None
    params: dict[str, Any] = attrs.field(factory=dict)
    project: str = "tunedsl"
    name: str
    monitor: str = "tensorboard"
    checkpoint_root_dir: str = "checkpoints"
    rollout_timeout: int = 3600
    keep_rollouts_every: int = 1
    keep_rollouts_per_step: int | None = None
    tinker: Tinker | None = None
    trinity_config: str | None = None
    trinity: dict[str, Any] = attrs.field(factory=dict)
    explicit: frozenset[str] = frozenset()


# cattrs structures by the fields' types: make them types, not this module's annotation text.
attrs.resolve_types(ExperimentGraph)


def graph_fields() -> list[tuple[str, Any, Any]]:
    """What the settings table says the graph's fields are: ``(name, type, default)``
    for each row in the graph, in order (a factory's default as ``attrs.Factory``)."""
    fields = []
    for row in EXPERIMENT_SETTINGS:
        if not row.in_graph:
            continue
        if row.kind == FUNCTION:  # the graph holds the function's spec, to find it again
            python_type = FunctionSpec if row.required else FunctionSpec | None
        else:
            python_type = row.python_type
        default = (attrs.NOTHING if row.required else
                   attrs.Factory(row.default) if row.factory else row.default)
        fields.append((row.name, python_type, default))
    return fields


def make_converter() -> Any:
    """A cattrs converter for the graph: strict about unknown keys, sets as sorted lists."""
    import cattrs  # deferred: building a graph needs it, importing tunedsl does not

    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_unstructure_hook_func(
        lambda t: t is frozenset or getattr(t, "__origin__", None) is frozenset, sorted
    )
    # Keep str subclasses: an EnvValue must reach the YAML writer with its template.
    converter.register_structure_hook(str, lambda value, _: value if isinstance(value, str)
                                      else str(value))
    # LoRA.target_modules: "all-linear" or a regular expression as text, else module names.
    converter.register_structure_hook(str | tuple[str, ...], lambda value, _: value
                                      if isinstance(value, str) else tuple(value))
    return converter


def _spec_dict(fn: Any) -> dict[str, Any] | None:
    return None if fn is None else make_converter().unstructure(spec_of(fn))


def _refuse_overrides_the_table_beats(overrides: Any, table: Any,
                                      layers: Sequence[Any]) -> None:
    """Refuse a ``--set`` of a setting that a ``[trinity]`` key of a settings file also sets:
    the table is merged over everything (its value is the run's), so the command line's
    value was dropped without a word, though ``--set`` is applied last."""
    from .settings import explicit_keys

    if not overrides.values or not table.values:
        return
    beaten = sorted(explicit_keys({key: value for key, value in overrides.values.items()
                                   if key != "trinity"})
                    & explicit_keys({key: value for key, value in table.values.items()
                                     if key != "trinity"}))
    if not beaten:
        return
    sources = ", ".join(layer.source for layer in layers[:-1] if layer.values.get("trinity"))
    if not sources:  # a --set trinity.KEY=... of the same command line: its key wins
        raise ConfigError(f"--set {beaten[0]}: a --set trinity.KEY=... of the command line sets "
                          f"it too, through its Trinity key, which is merged over everything "
                          f"(its value would be the run's); give one of the two")
    raise ConfigError(f"--set {beaten[0]}: the [trinity] table of "
                      f"{sources} sets it too, through its Trinity key, and "
                      f"that table is merged over everything (its value would be the run's); "
                      f"set it in one place: remove that [trinity] key, or give --set "
                      f"trinity.KEY=VALUE")


def _required_problems(label: str, merged: dict[str, Any]) -> list[Problem]:
    needed = [
        ("train_dataset", "path", 'train_dataset = Dataset("path/to/data")', "[train_dataset]"),
        ("model", "model_path", 'model = Model("org/model", max_model_len=4096)', "[model]"),
        ("model", "max_model_len", "Model(..., max_model_len=4096)", "[model]"),
    ]
    # An optional dataset is needed whole once any layer sets one of its fields (a
    # --set eval_dataset.split=test, or a [warmup_dataset] table without its path).
    needed += [(section, "path", f'{section} = Dataset("path/to/data")', f"[{section}]")
               for section in ("eval_dataset", "warmup_dataset")
               if isinstance(merged.get(section), dict)]
    problems = []
    for section, field, python, table in needed:
        if field not in (merged.get(section) or {}):
            problems.append(Problem(
                f"required field missing @ {section}.{field}", where=label,
                setting=f"{section}.{field}",
                fix=f"set {python} on the class, {field} = ... under {table} in "
                    f"tunedsl.toml, or {spelled('set')} {section}.{field}=..."))
    for name, model in merged.get("auxiliary_models", {}).items():
        if "model_path" not in model:
            problems.append(Problem(
                f"required field missing @ auxiliary_models.{name}.model_path", where=label,
                setting=f"auxiliary_models.{name}.model_path",
                fix=f"set it in Model(...) or under [auxiliary_models.{name}]"))
    return problems


# Graph-wide checks: each returns the problems it finds, one line each.
def check_group_size(graph: ExperimentGraph) -> list[str]:
    """Group-relative algorithms need at least two rollouts per task."""
    algorithm = graph.algorithm
    composed = algorithm.advantage_fn
    compares = algorithm.algorithm_type in GROUP_ALGORITHMS if composed is None \
        else composed in GROUP_ADVANTAGES
    if not compares or algorithm.group_size >= 2:
        return []
    # (the setting that chose the comparing advantage is named with its path, so that the
    # line names the layer that gave it too)
    named = f"algorithm.algorithm_type {algorithm.algorithm_type!r}" if composed is None \
        else f"algorithm.advantage_fn {composed!r} (of {algorithm.algorithm_type})"
    return [f"algorithm.group_size = {algorithm.group_size}: {named} compares rollouts of "
            f"the same task, so it needs group_size >= 2"]


def check_algorithm_arguments(graph: ExperimentGraph) -> list[str]:
    """Every algorithm argument set is one the chosen algorithm's parts take, an algorithm
    that learns from a teacher finds it among the auxiliary models, and no Trinity config
    swaps one of the algorithm's parts for another."""
    from .trinity_base import as_omegaconf_reads, read_base_config

    problems = algorithm_problems(graph.algorithm)
    problems += teacher_problems(graph.algorithm, graph.auxiliary_models)
    if graph.trinity_config is not None:
        problems += part_conflicts(graph.algorithm, graph.trinity_config,
                                   as_omegaconf_reads(read_base_config(graph.trinity_config)))
    return problems + part_conflicts(graph.algorithm, "[trinity]", graph.trinity)


#: `Algorithm` fields that shape rollouts or the run, which SFT (alone: rollouts; as a
#: warm-up stage: both) has no use for. A warm-up stage takes only Trinity's ``algorithm``
#: section and its batch size; the run's checkpoints and evaluation are the RL stage's.
_ROLLOUT_FIELDS = ("group_size", "on_failed_rollout", "on_truncated_reply")
_RUN_FIELDS = ("save_interval_steps", "eval_interval_steps", "keep_checkpoints",
               "keep_best_checkpoint")


def check_conversation_training(graph: ExperimentGraph) -> list[str]:
    """SFT, alone or as a warm-up before RL: what it trains on, and no setting it ignores;
    an algorithm that trains offline on other data, which tunedsl does not run."""
    problems = []
    algorithm, warmup = graph.algorithm, graph.warmup
    kind = algorithm.algorithm_type
    if kind in OFFLINE_TYPES:  # (refused in Trinity's words, "DPO does not support `both`
        # mode", and by the local backend as an algorithm only Trinity runs)
        problems.append(f"algorithm.algorithm_type = {kind!r}: {offline_type_problem(kind)}")
    sft = algorithm.algorithm_type in CONVERSATION_ALGORITHMS
    if sft:
        problems += [f"algorithm.{field}: {algorithm.algorithm_type} trains on train_dataset's "
                     f"conversations, not on rollouts; remove it"
                     for field in _ROLLOUT_FIELDS if f"algorithm.{field}" in graph.explicit]
    if warmup is None:
        if graph.warmup_dataset is not None:
            problems.append('warmup_dataset is set without warmup; add warmup = '
                            'Algorithm("sft", learning_rate=1e-5) to train on it before RL')
        return problems
    if warmup.algorithm_type not in CONVERSATION_ALGORITHMS:
        problems.append(f"warmup.algorithm_type = {warmup.algorithm_type!r}: a warm-up is "
                        f"supervised fine-tuning before RL; use Algorithm(\"sft\", ...)")
    elif sft:
        problems.append(f"warmup: the experiment's algorithm is {algorithm.algorithm_type} "
                        f"already; remove warmup, or choose an RL algorithm to follow it")
    else:
        problems += algorithm_problems(warmup, "warmup")
    for field in (*_ROLLOUT_FIELDS, *_RUN_FIELDS, "teacher"):
        if f"warmup.{field}" not in graph.explicit:
            continue
        if field in _RUN_FIELDS:
            problems.append(f"warmup.{field}: the warm-up saves and evaluates as the run "
                            f"does; set algorithm.{field}")
        else:
            problems.append(f"warmup.{field}: the warm-up runs no rollouts; remove it")
    if graph.warmup_dataset is None:
        problems.append('warmup: no warmup_dataset to learn from; add warmup_dataset = '
                        'Dataset("path/to/conversations")')
    if graph.model.lora is not None:
        problems.append("warmup: model.lora trains adapters, and a warm-up's adapters would "
                        "have to be merged before RL adds its own; warm up without LoRA, or "
                        "run the SFT as an experiment of its own")
    return problems


def check_response_budget(graph: ExperimentGraph) -> list[str]:
    """A response budget must leave room for the prompt within the model length."""
    problems = []
    models = {"model": graph.model} | {
        f"auxiliary_models.{name}": model for name, model in graph.auxiliary_models.items()
    }
    for path, model in models.items():
        inherits = path != "model" and model.max_model_len is None
        if inherits and model.base_url is not None:
            continue  # an endpoint's context is its server's; the trained model's says nothing
        length = model.max_model_len or graph.model.max_model_len
        if model.max_tokens is not None and length is not None and model.max_tokens >= length:
            # (both settings by their paths: the line names the layers that gave each)
            problems.append(
                f"{path}.max_tokens = {model.max_tokens} leaves no room for the prompt in "
                f"{path}.max_model_len = {length}; lower max_tokens or raise max_model_len"
                if not inherits else
                f"{path}.max_tokens = {model.max_tokens} leaves no room for the prompt in "
                f"model.max_model_len = {length}, the trained model's, which it inherits; "
                f"lower max_tokens or set {path}.max_model_len"
            )
    return problems


def check_endpoints(graph: ExperimentGraph) -> list[str]:
    """An endpoint serves auxiliary models only: the trained model needs a local engine."""
    problems = []
    if graph.model.base_url is not None:
        problems.append("model.base_url: the trained model runs on a local engine, which "
                        "training updates; an endpoint can serve auxiliary models only")
    elif graph.model.api_key_env is not None:  # (the field given, not one that was not)
        problems.append("model.api_key_env: the trained model runs on a local engine, which "
                        "training updates and which takes no key; remove it (an endpoint "
                        "and its key can serve auxiliary models only)")
    for name, model in graph.auxiliary_models.items():
        if model.api_key_env is not None and model.base_url is None:
            problems.append(f"auxiliary_models.{name}.api_key_env is set without base_url; "
                            f"give the endpoint's URL too")
    return problems


def check_importable(graph: ExperimentGraph) -> list[str]:
    """Every backend finds the workflow and judge again by import string (Trinity's workers
    in other processes): a function defined inside another one has none."""
    problems = []
    for spec in (graph.workflow, graph.judge):
        if spec is not None and "<locals>" in spec.qualname:
            outer = spec.qualname.split(".<locals>")[0]
            # (a decorator's wrapper, j = judge(plain(fn)), is defined inside plain(): its
            # fix is the decorators stacked on fn, the wrapper under functools.wraps)
            wrapper = _calls_its_outer_argument(spec, spec.qualname.rsplit(".<locals>", 1)[0])
            fix = (f"in {outer}(), decorate the wrapper with @functools.wraps(...) of the "
                   f"function it wraps, so that it is found by that module-level function's "
                   f"name" if wrapper else "define it at module level")
            problems.append(f"@{spec.kind} {spec.qualname.rsplit('.', 1)[-1]} ({spec.where}) is "
                            f"defined inside {outer}(), so no other process can import it; "
                            f"{fix}")
    return problems


def _calls_its_outer_argument(spec: FunctionSpec, outer: str) -> bool:
    """Whether the function ``spec`` describes, defined inside ``outer`` (the function that
    encloses it: a decorator, or the decorator a factory returns), calls one of ``outer``'s
    arguments (a decorator's wrapper calling the function it wraps), by the source of its
    file; False when that cannot be read."""
    import ast

    try:
        with open(spec.file, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                node.name == outer.rsplit(".", 1)[-1] and \
                node.lineno <= spec.line <= (node.end_lineno or node.lineno):
            arguments = {argument.arg for argument in node.args.args}
            inner = next((child for child in ast.walk(node) if child is not node and
                          isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                          and child.lineno <= spec.line <= (child.end_lineno or child.lineno)),
                         None)
            if inner is not None and any(
                    isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and call.func.id in arguments for call in ast.walk(inner)):
                return True
    return False


def check_params_reach(graph: ExperimentGraph) -> list[str]:
    """``params`` exist to reach the workflow and judge: set while neither takes them, they
    would change nothing (a prompt tuned, or a --set, without effect)."""
    if not graph.params:
        return []
    functions = [spec for spec in (graph.workflow, graph.judge) if spec is not None]
    if any("params" in spec.optional_params for spec in functions):
        return []
    names = [f"@{spec.kind} {spec.qualname} ({spec.where})" for spec in functions]
    takes = f"{names[0]} takes none" if len(names) == 1 else \
        f"neither {' nor '.join(names)} takes them"
    return [f"params: {', '.join(sorted(graph.params))} set, but {takes}, so they reach "
            f"nothing; add a params argument to the function that reads them, or remove them"]


def check_auxiliary_models_read(graph: ExperimentGraph) -> list[str]:
    """An auxiliary model under a name neither the workflow nor the judge reads (a
    ``--set auxiliary_models.gg...`` for ``g``, a settings file's ``[auxiliary_models.judge]``
    where the code reads ``grader``) would never be called, and the one they read would
    stay as it was. Said only where their source names every model they read."""
    from ..dsl.reads import auxiliary_names_read

    if not graph.auxiliary_models:
        return []
    try:
        reads = [auxiliary_names_read(load_function(spec))
                 for spec in (graph.workflow, graph.judge) if spec is not None]
    except Exception:  # noqa: BLE001 - one no import finds (check_importable says so)
        return []
    if not reads or any(read is None for read in reads):
        return []
    read = frozenset().union(*(r for r in reads if r is not None))
    if not read:
        return []  # (no function reads any: said by nothing yet, a run is not harmed)
    problems = []
    for name in sorted(set(graph.auxiliary_models) - read):
        hint = did_you_mean(name, sorted(read))
        problems.append(f"auxiliary_models.{name}: neither the workflow nor the judge reads "
                        f"it (they read {', '.join(map(repr, sorted(read)))}){hint}, so it "
                        f"would never be called; name it as they read it, or remove it")
    return problems


def check_lora(graph: ExperimentGraph) -> list[str]:
    """LoRA trains the trained model only, and not through Tinker (which has its own)."""
    problems = [f"auxiliary_models.{name}.lora: auxiliary models are frozen, so there are no "
                f"adapters to train (Trinity's lora_configs apply to the rollout model only); "
                f"remove it" for name, model in graph.auxiliary_models.items()
                if model.lora is not None]
    if graph.model.lora is not None and graph.tinker is not None:
        problems.append("model.lora: the experiment trains through Tinker, which trains LoRA "
                        "adapters of its own (tinker.rank, train_mlp, train_attn, "
                        "train_unembed); remove model.lora or tinker")
    return problems


def check_schedule_settings(graph: ExperimentGraph) -> list[str]:
    """A setting of the learning-rate schedule that the chosen schedule never reads."""
    problems = []
    for path in ("algorithm", "warmup"):
        record = getattr(graph, path)
        if record is not None and f"{path}.min_lr_ratio" in graph.explicit \
                and record.lr_scheduler != "cosine":
            problems.append(f"{path}.min_lr_ratio = {record.min_lr_ratio:g}: only the cosine "
                            f"schedule decays to it, and {path}.lr_scheduler is "
                            f"{record.lr_scheduler or 'constant'!r}, so it would be ignored; "
                            f"set {path}.lr_scheduler = 'cosine', or remove min_lr_ratio")
    return problems


def check_checkpoint_root(graph: ExperimentGraph) -> list[str]:
    """Run folders are made inside checkpoint_root_dir: no file may stand in its way."""
    probe = graph.checkpoint_root_dir
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if probe and not os.path.isdir(probe):
        return [f"checkpoint_root_dir = {graph.checkpoint_root_dir!r}: {probe} is a file, and "
                f"run folders are made inside that path; give a folder (it is created if "
                f"missing)"]
    root = os.path.realpath(graph.checkpoint_root_dir)
    for section in DATASET_SECTIONS:
        dataset = getattr(graph, section)
        data = local_path(dataset) if dataset is not None else None
        if data and os.path.isdir(data) and (
                root == os.path.realpath(data)
                or root.startswith(os.path.join(os.path.realpath(data), ""))):
            # a run's files there would become rows of the data (or break its reading)
            return [f"checkpoint_root_dir = {graph.checkpoint_root_dir!r} is inside "
                    f"{section}.path's folder ({dataset.path}), where a run's files would join "
                    f"the data; give a folder elsewhere"]
    return []


def check_eval_length(graph: ExperimentGraph) -> list[str]:
    """An eval set is read whole at each evaluation: a length given to it would be ignored."""
    dataset = graph.eval_dataset
    if dataset is None:
        return []
    ignored = [(name, value) for name, value in (("total_epochs", dataset.total_epochs),
                                                 ("total_steps", dataset.total_steps))
               if value != attrs.fields_dict(type(dataset))[name].default]
    return [f"eval_dataset.{name} = {value}: the eval set is read whole at each evaluation, so "
            f"it would be ignored; remove it (tunedsl eval -n N evaluates the first N tasks)"
            for name, value in ignored]


#: Checks of what training needs (``check`` and ``run`` on every backend, not ``eval``).
TRAINING_CHECKS = (check_schedule_settings, check_checkpoint_root)


GRAPH_CHECKS = (check_group_size, check_algorithm_arguments, check_conversation_training,
                check_response_budget, check_eval_length,
                check_endpoints, check_lora, check_importable, check_params_reach,
                check_auxiliary_models_read)


def refuse_problems(graph: ExperimentGraph, checks: Iterable[Any]) -> None:
    """Run every check of a list over the graph (`GRAPH_CHECKS`, a backend's) and raise
    one `ConfigError` with all the problems they find, if any."""
    problems = [Problem(line, setting=setting_named(line)) for check in checks
                for line in check(graph)]
    if problems:
        raise ConfigError(problems)


def _undeclared_params(label: str, declared: Any, layers: list[Any]) -> list[Problem]:
    """A settings file's or override's param spelt like one the class declares but not
    the same (``params.prefx``, ``Prefix``): it would reach no workflow, which reads the
    class's own value. A param of a name of its own is a new one, which settings may add."""
    if not isinstance(declared, dict) or not declared:
        return []
    problems = []
    for layer in layers:
        given = layer.values.get("params")
        for key in given if isinstance(given, dict) else ():
            meant = did_you_mean(key, declared) if key not in declared else ""
            if meant:
                problems.append(Problem(
                    f"params.{key} is not a param of {label}{meant}; its params are "
                    f"{', '.join(declared)} (a param of another name is added as a new one)",
                    where=layer.source, setting=f"params.{key}"))
    return problems


def build_graph(
    spec: ExperimentSpec,
    *,
    source: str | None,
    settings_file: str | None = None,
    overrides: Iterable[str] = (),
) -> ExperimentGraph:
    """Layer the settings for an experiment and build its checked graph.

    Raises:
        ConfigError: listing every problem found, one line each.
    """
    # Deferred: TOML reading is needed to build a graph, not to import tunedsl.
    from .nested import deep_merge
    from .settings import (
        Layer,
        class_layer,
        explicit_keys,
        merge_layers,
        params_above_class,
        parse_overrides,
        toml_layers,
    )
    from .trinity_base import (
        base_config_layer,
        eval_taskset_name,
        read_base_config,
        trinity_table_layer,
    )

    label = f"{spec.qualname} ({spec.where})"
    tomls = toml_layers(spec, settings_file)
    declared = class_layer(spec)
    layers = [*params_above_class(tomls, declared, settings_file),
              parse_overrides(overrides)]
    problems = _undeclared_params(label, declared.values.get("params"),
                                  [layer for layer in layers if layer is not declared])
    if problems:
        raise ConfigError(problems)
    user = merge_layers(layers)
    # the base YAML, read once for the [trinity] table's eval entry and its own layer
    base = read_base_config(user["trinity_config"]) if "trinity_config" in user else None
    eval_name = eval_taskset_name(base)
    table = trinity_table_layer(user.get("trinity", {}), os.getcwd(), layers, eval_name)
    _refuse_overrides_the_table_beats(layers[-1], table, layers)
    user = deep_merge(user, merge_layers([table]))
    # (a class name no folder may take is said as the name's default: the user wrote none)
    lower = [Layer("the run's name, by default the class name (set name = ... to give "
                   "another)", {"name": spec.qualname.rsplit(".", 1)[-1]}, os.getcwd())]
    if "trinity_config" in user:
        lower.append(base_config_layer(user["trinity_config"], base))
    merged = deep_merge(merge_layers(lower), user)
    problems = _required_problems(label, merged)
    if problems:
        raise ConfigError(problems)
    data = {
        **merged,
        "source": source,
        "workflow": _spec_dict(spec.workflow),
        "judge": _spec_dict(spec.judge),
        "explicit": sorted(explicit_keys(user)),
    }
    graph = make_converter().structure(data, ExperimentGraph)
    # A problem is named by the class, but params' by the layers that set them (a
    # settings file's params are not the class's).
    params_from = ", ".join(layer.source for layer in layers if layer.values.get("params"))
    problems = [Problem(line, where=params_from if check is check_params_reach else
                        _layers_that_set(layers, settings_named(line), label),
                        setting=setting_named(line))
                for check in GRAPH_CHECKS for line in check(graph)]
    if problems:
        raise ConfigError(problems)
    return graph


def _layers_that_set(layers: list[Any], settings: list[str], otherwise: str) -> str:
    """The sources of the layers that gave the settings a problem names (``--set``, a
    settings file, the class), each setting's last, once each: a problem of two settings
    given by two layers names both (it named the first one's alone); ``otherwise`` (the
    class) when none did (defaults) or no setting is named."""
    sources = []
    for dotted in settings:
        source = _layer_that_set(layers, dotted)
        if source is not None and source not in sources:
            sources.append(source)
    return ", ".join(sources) or otherwise


def _layer_that_set(layers: list[Any], dotted: str) -> str | None:
    """The source of the last layer that set the setting ``dotted``, or None."""
    parts = dotted.split(".")
    for layer in reversed(layers):
        value: Any = layer.values
        for part in parts:
            if not isinstance(value, dict) or part not in value:
                break
            value = value[part]
        else:
            return layer.source
    return None


def load_function(spec: FunctionSpec) -> Any:
    """Import the live function a `FunctionSpec` describes."""
    return load_object(spec.ref)
