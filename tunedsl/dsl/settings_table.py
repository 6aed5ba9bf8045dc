"""The settings table: every setting an experiment can have, one row each.

`EXPERIMENT_SETTINGS` holds the top-level rows, in the order the docs list them; the
fields of the records they name are rows of their own, declared with `setting` in
`tunedsl.dsl.records`. `all_settings` flattens both into dotted rows
(``algorithm.group_size``). Every reader takes its facts from here:

- the ``@experiment`` decorator: which attributes exist and what each must hold;
- the settings layers (`tunedsl.config.settings`): which keys a TOML layer or ``--set``
  may set, the check of each, and which name files;
- `tunedsl.tune`: AgentScope tuner's argument names;
- the experiment graph (`tunedsl.config.graph`): its fields and their defaults;
- the Trinity YAML writer and the base-YAML reader: `FIELD_MAP` and the other key maps;
- the documentation's settings reference (`markdown_table`; ``tests/test_docs.py`` checks it).

Adding a setting is one row (here, or a `setting` field in its record) with its meaning.
"""

from __future__ import annotations

import math
import re
from typing import Any

import attrs

from ..errors import FieldProblem, unknown_name_message
from .records import Algorithm, Dataset, LoRA, Model, Tinker, plain_text_problem, text_problem
from .setting import (
    FUNCTION,
    MODELS,
    RECORD,
    REQUIRED,
    TABLE,
    VALUE,
    Setting,
    setting_fields,
    setting_row,
)
from .trinity_fields import AUXILIARY_MODELS, EVAL_TASKSETS, MONITOR_TYPES, TASKSET

# ----------------------------------------------------------------------- value checks

#: What a name that becomes a folder or a YAML key may hold (run names, auxiliary models).
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")
_PLAIN = (str, int, float, bool, type(None))
#: The longest name that names a folder (with a run's -<timestamp>, under 255 bytes).
MOST_NAME_CHARACTERS = 200


def _as_folder_name(value: str) -> str:
    """A name like ``value`` that names one folder (``'my run'`` as ``'my-run'``, accents
    taken off: ``'Résumé'`` as ``'Resume'``)."""
    import unicodedata

    plain = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii")
    return "-".join(re.findall(r"[A-Za-z0-9_]+(?:[.-][A-Za-z0-9_]+)*", plain)) or "run"


def folder_name(value: Any) -> str | None:
    """One folder of the run's path: no separator, no ``..``."""
    problem = plain_text_problem(value)
    if problem is None and (not NAME_PATTERN.match(value) or value in (".", "..")):
        # Runs are written to checkpoint_root_dir/project/name: a separator or '..' would
        # write outside checkpoint_root_dir.
        return (f"{value!r} names a folder of the run's path (checkpoint_root_dir/project/"
                f"name), so it may hold only ASCII letters, digits, '_', '.' and '-' (not "
                f"'..'): write e.g. {_as_folder_name(value)!r}, and choose where runs go "
                f"with checkpoint_root_dir")
    if problem is None and len(value) > MOST_NAME_CHARACTERS:
        # a run's folder is the name and a 15-character -<timestamp>: file systems take
        # 255 bytes a name
        return (f"{value[:40]!r}... is {len(value)} characters; it names a folder of the "
                f"run's path, which must fit a file name: give at most "
                f"{MOST_NAME_CHARACTERS}")
    return problem


def monitor_type(value: Any) -> str | None:
    """One of Trinity's monitors."""
    problem = text_problem(value)
    if problem is None and value not in MONITOR_TYPES:
        return unknown_name_message("monitor", value, MONITOR_TYPES)
    return problem


def count(value: Any) -> str | None:
    """A whole number >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"must be a whole number >= 1 (got {value!r})"
    return None


def whole_seconds(value: Any) -> str | None:
    """A positive whole number of seconds, as Trinity reads ``explorer.max_timeout``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not \
            0 < value < math.inf:
        return f"must be a positive number of seconds (got {value!r})"
    if value > MOST_SECONDS:  # (1e308 read as "no limit" is a whole number, and no int)
        return (f"must be at most {MOST_SECONDS} seconds, about 31 years (got {value!r}); "
                f"give {MOST_SECONDS} for no practical limit")
    if not isinstance(value, int):
        return f"must be a whole number of seconds, as Trinity reads it (got {value!r})"
    return None


#: The longest timeout taken, in seconds (about 31 years): longer ones are meant as none.
MOST_SECONDS = 10**9


def plain_data(value: Any, path: str = "params") -> list[str]:
    """``path: problem`` lines for what is not plain data: parameters travel to Trinity's
    workers inside the YAML."""
    if isinstance(value, dict):
        named = [k for k in value if not isinstance(k, str)]
        if path == "params" and named:  # a workflow reads params["name"]: they travel as text
            return [f"params: each name must be text, so it reaches the workflow as it was "
                    f"set (got {named[0]!r}, {type(named[0]).__name__}); write "
                    f"params = {{{str(named[0])!r}: ...}}"]
        if path == "params" or all(isinstance(k, str) for k in value):
            return [p for k, v in value.items() for p in plain_data(v, f"{path}.{k}")]
        return [f"{path}: keys must be strings"]
    if path == "params":
        return [f"params: must be a table of name -> value (got {value!r})"]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in plain_data(v, f"{path}[{i}]")]
    if isinstance(value, _PLAIN):
        return []
    return [f"{path}: must be plain data (text, number, bool, list or table) so it can "
            f"travel in the YAML (got {type(value).__name__})"]


def trinity_table(value: Any) -> list[str]:
    """The ``[trinity]`` table is a table (its keys are Trinity's, checked by Trinity)."""
    return [] if isinstance(value, dict) else ["trinity: must be a table"]


# ---------------------------------------------------------------------------- the rows

#: Every top-level setting, in the order the docs and messages list them.
EXPERIMENT_SETTINGS: tuple[Setting, ...] = (
    Setting(name="workflow", kind=FUNCTION, class_only=True, tuner="workflow_func",
            meaning="The ``@workflow`` function: the agent being tuned."),
    Setting(name="judge", kind=FUNCTION, class_only=True, default=None, tuner="judge_func",
            meaning="The ``@judge`` function that scores a response (optional when the "
                    "workflow sets the reward)."),
    Setting(name="train_dataset", kind=RECORD, record=Dataset, python_type=Dataset,
            map_fields=True, tuner="train_dataset", meaning="Training tasks."),
    Setting(name="eval_dataset", kind=RECORD, record=Dataset, python_type=Dataset | None,
            default=None, tuner="eval_dataset",
            meaning="Evaluation tasks, if any (Trinity's first eval taskset)."),
    Setting(name="model", kind=RECORD, record=Model, python_type=Model, map_fields=True,
            tuner="model", meaning="The model being trained."),
    Setting(name="auxiliary_models", kind=MODELS, record=Model,
            python_type=dict[str, Model], default=dict, factory=True,
            tuner="auxiliary_models",
            meaning="Frozen models by name (opponents, LLM judges, ...), local engines or "
                    "endpoints."),
    Setting(name="algorithm", kind=RECORD, record=Algorithm, python_type=Algorithm,
            default=Algorithm, factory=True, map_fields=True, tuner="algorithm",
            meaning="The RL algorithm."),
    Setting(name="warmup", kind=RECORD, record=Algorithm, python_type=Algorithm | None,
            default=None,
            meaning="A supervised warm-up before RL: ``Algorithm(\"sft\", batch_size=..., "
                    "learning_rate=...)``, trained on ``warmup_dataset`` first (a Trinity "
                    "stage of its own); RL then starts from its weights."),
    Setting(name="warmup_dataset", kind=RECORD, record=Dataset, python_type=Dataset | None,
            default=None,
            meaning="The warm-up's conversations: a ``messages`` column of chat messages, "
                    "the last one the assistant's reply to learn (its epochs or steps set "
                    "the warm-up's length)."),
    Setting(name="params", kind=TABLE, python_type=dict[str, Any], default=dict, factory=True,
            check=plain_data,
            meaning="Experiment parameters (plain data) handed to a workflow or judge that "
                    "declares a ``params`` parameter."),
    Setting(name="project", default="tunedsl", check=folder_name, python_type=str,
            trinity="project", tuner="project_name",
            meaning="Groups runs under ``<checkpoint_root_dir>/<project>/``."),
    Setting(name="name", check=folder_name, python_type=str, tuner="experiment_name",
            meaning="The run's name (default: the class name); run folders are "
                    "``<name>-<timestamp>``."),
    Setting(name="monitor", default="tensorboard", check=monitor_type, python_type=str,
            trinity="monitor.monitor_type", tuner="monitor_type",
            meaning="Where metrics go: tensorboard, wandb, mlflow or swanlab."),
    Setting(name="checkpoint_root_dir", default="checkpoints", check=text_problem, python_type=str,
            trinity="checkpoint_root_dir", meaning="Where run folders go."),
    Setting(name="rollout_timeout", default=3600, check=whole_seconds, python_type=int,
            meaning="Seconds one rollout (workflow and judge) may take before it fails, on "
                    "every backend (on Trinity, tunedsl's workflow enforces it; Trinity's own "
                    "``explorer.max_timeout`` bounds a whole step and is derived from it)."),
    Setting(name="keep_rollouts_every", default=1, check=count, python_type=int,
            meaning="The local backend's ``rollouts.jsonl`` keeps the rollouts of every this "
                    "many steps."),
    Setting(name="keep_rollouts_per_step", default=None, check=count, python_type=int | None,
            meaning="It keeps at most this many of a step's rollouts (a seeded sample); unset "
                    "keeps them all."),
    Setting(name="tinker", kind=RECORD, record=Tinker, python_type=Tinker | None, default=None,
            meaning="Train through Tinker instead of local GPUs (Trinity backend), if set."),
    Setting(name="settings", class_only=True, in_graph=False, check=text_problem, default=None,
            meaning="A TOML settings file for the experiment, beside its module."),
    Setting(name="trinity_config", default=None, check=text_problem, python_type=str | None,
            path=True,
            tuner="config_path",
            meaning="A Trinity YAML to use as the base of the generated one."),
    Setting(name="trinity", kind=TABLE, python_type=dict[str, Any], default=dict, factory=True,
            check=trinity_table,
            meaning="Trinity-RFT options merged verbatim into the generated YAML."),
)
SETTINGS_BY_NAME: dict[str, Setting] = {row.name: row for row in EXPERIMENT_SETTINGS}
#: The attributes an ``@experiment`` class may declare, in the docs' order.
EXPERIMENT_ATTRIBUTES: tuple[str, ...] = tuple(SETTINGS_BY_NAME)
#: The graph's dataset sections, in the order every reader goes through them.
DATASET_SECTIONS = ("train_dataset", "eval_dataset", "warmup_dataset")


def field_setting(prefix: str, attribute: attrs.Attribute) -> Setting:
    """A record field's row under its dotted name (``algorithm.group_size``)."""
    row = setting_row(attribute)
    validator = attribute.validator

    def check(value: Any) -> str | None:
        try:
            if validator is not None:
                validator(None, attribute, value)
        except FieldProblem as problem:
            return problem.detail
        return None

    nested = row["record"]
    default: Any = attribute.default
    # attrs' stubs declare Factory a function; at run time it is the class of its defaults
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        default, factory = default.factory, True
    else:
        default, factory = (REQUIRED if default is attrs.NOTHING else default), False
    return Setting(name=f"{prefix}.{attribute.name}", meaning=row["meaning"],
                   kind=RECORD if nested else VALUE, record=nested, default=default,
                   factory=factory, check=check, trinity=row["trinity"], path=row["path"],
                   resumable=row["resumable"])


def record_settings(prefix: str, record: type, *, nested: bool = True) -> list[Setting]:
    """The rows of a record's fields (with ``nested``, a nested record's fields after its
    own row)."""
    rows = []
    for attribute in setting_fields(record):
        row = field_setting(prefix, attribute)
        rows.append(row)
        if row.record is not None and nested:
            rows += record_settings(row.name, row.record)
    return rows


def all_settings() -> list[Setting]:
    """Every setting, flattened: each top-level row, then its record's fields."""
    rows = []
    for row in EXPERIMENT_SETTINGS:
        rows.append(row)
        if row.kind == RECORD:
            rows += record_settings(row.name, row.record_class)
        elif row.kind == MODELS:  # frozen models: no adapters of their own (check_lora)
            rows += record_settings(f"{row.name}.NAME", row.record_class, nested=False)
    return rows


def resumable_settings() -> frozenset[str]:
    """The dotted names of the settings a resumed run may change."""
    return frozenset(row.name for row in all_settings() if row.resumable)


def lookup(dotted: str) -> Setting:
    """The row of a dotted setting name (``model.lora.rank``, ``auxiliary_models.judge.
    temperature``); KeyError if there is none."""
    section, *parts = dotted.split(".")
    row = SETTINGS_BY_NAME[section]
    if row.kind == MODELS and parts:  # the next part names one of the models
        row = attrs.evolve(row, name=f"{section}.{parts.pop(0)}")
    for part in parts:
        fields = {a.name: a for a in setting_fields(row.record)} if row.record else {}
        if part not in fields:
            raise KeyError(dotted)
        row = field_setting(row.name, fields[part])
    return row


# ------------------------------------------------------------------ Trinity key maps

def _entry_key(key: str, prefixes: tuple[str, ...]) -> str | None:
    """``key`` inside a list entry: what follows one of ``prefixes``, else None."""
    for prefix in prefixes:
        if key.startswith(prefix + "."):
            return key[len(prefix) + 1:]
    return None


def _field_pairs(record: type) -> list[tuple[str, str]]:
    return [(a.name, setting_row(a)["trinity"]) for a in setting_fields(record)
            if setting_row(a)["trinity"] is not None]


#: (tunedsl setting, Trinity key) pairs that map one value to one value.
FIELD_MAP: tuple[tuple[str, str], ...] = (
    *((row.name, row.trinity) for row in EXPERIMENT_SETTINGS
      if row.kind == VALUE and row.trinity is not None),
    *((f"{row.name}.{field}", key) for row in EXPERIMENT_SETTINGS if row.map_fields
      for field, key in _field_pairs(row.record_class)),
)
#: ``Model`` field -> key of a Trinity inference-model entry (an auxiliary model): the
#: trained model's key without its section (``model.``, ``explorer.rollout_model.``).
AUXILIARY_MAP: tuple[tuple[str, str], ...] = tuple(
    (field, key.rsplit(".", 1)[-1]) for field, key in _field_pairs(Model))
#: ``Dataset`` field -> key of a Trinity taskset (the training taskset's keys inside it).
TASKSET_MAP: tuple[tuple[str, str], ...] = tuple(
    (field, entry) for field, key in _field_pairs(Dataset)
    if (entry := _entry_key(key, (TASKSET,))) is not None)
#: ``Algorithm`` field -> its Trinity key (a warm-up stage's record is written through it).
ALGORITHM_MAP: tuple[tuple[str, str], ...] = tuple(_field_pairs(Algorithm))
#: ``LoRA`` field -> key of Trinity's ``LoRAConfig`` entry.
LORA_MAP: tuple[tuple[str, str], ...] = tuple(_field_pairs(LoRA))
#: ``Tinker`` field -> its Trinity key (under ``model.tinker``, written when it is set).
TINKER_MAP: tuple[tuple[str, str], ...] = tuple(_field_pairs(Tinker))


def trinity_key(row: Setting) -> str | None:
    """Where a row lives in a Trinity config, for the docs: entry keys of lists are shown
    under the list (``explorer.auxiliary_models[].engine_num``)."""
    section = row.name.split(".")[0]
    if row.trinity is None or "." not in row.name:
        return row.trinity
    if section == "eval_dataset":
        entry = _entry_key(row.trinity, (TASKSET,))
        return None if entry is None else f"{EVAL_TASKSETS}[].{entry}"
    if section == "auxiliary_models":
        return f"{AUXILIARY_MODELS}[].{row.trinity.rsplit('.', 1)[-1]}"
    if row.name.startswith("model.lora."):
        return f"model.lora_configs[].{row.trinity}"
    return row.trinity


# -------------------------------------------------------------------------- the docs

def _default_text(row: Setting) -> str:
    if row.required:
        return "required" if row.name != "name" else "the class name"
    value = row.default
    if row.factory:
        made = value()
        return "{}" if made == {} else f"`{type(made).__name__}()`"
    if value is None:
        return "unset"
    if isinstance(value, bool):  # as TOML writes it
        return f"`{str(value).lower()}`"
    return f"`{value!r}`".replace("'", '"')


def markdown_table() -> str:
    """The settings reference's table: every setting, its default, its Trinity key, its meaning."""
    lines = ["| setting | default | Trinity key | meaning |", "|---|---|---|---|"]
    for row in all_settings():
        key = trinity_key(row)
        meaning = row.meaning.replace("``", "`").replace("|", "\\|")
        lines.append(f"| `{row.name}` | {_default_text(row)} | "
                     f"{f'`{key}`' if key else ''} | {meaning} |")
    return "\n".join(lines) + "\n"


_LEADING_SETTING = re.compile(r"[A-Za-z_]\w*(?:\.[\w-]+)*")


#: A dotted setting's name inside a line (``train_dataset.total_steps``), not part of a path.
_DOTTED_SETTING = re.compile(r"(?<![\w./-])[A-Za-z_]\w*(?:\.[\w-]+)+")


def settings_named(line: str) -> list[str]:
    """Every setting a check's line names as its problem: the one it starts by naming
    (`setting_named`), then each other dotted one before the fix (after the first ``;``:
    "set algorithm.save_interval_steps" names where to go, not what was given), in order,
    once each."""
    found = [setting_named(line)] if setting_named(line) else []
    for match in _DOTTED_SETTING.finditer(line.split(";")[0]):
        if match[0].split(".")[0] in SETTINGS_BY_NAME and match[0] not in found:
            found.append(match[0])
    return found


def setting_named(line: str) -> str:
    """The dotted setting a check's line starts by naming (``algorithm.lr_warmup_steps:
    ...``, ``warmup_dataset is set ...``), or ``""`` when it starts with something else."""
    found = _LEADING_SETTING.match(line)
    if found is None or found[0].split(".")[0] not in SETTINGS_BY_NAME:
        return ""
    return found[0]
