"""A Trinity-RFT YAML read back as tunedsl settings.

A base Trinity YAML (``trinity_config``) is read through the field map of the settings
table (`tunedsl.dsl.settings_table`) as the lowest settings layer, and the ``[trinity]``
table as the highest, so the experiment graph shows the values the run will really
use on every backend. Reading is plain YAML: no Trinity import.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from ..dsl.algorithms import ARGUMENT_TABLES, table_arguments
from ..dsl.settings_table import (
    AUXILIARY_MAP,
    FIELD_MAP,
    LORA_MAP,
    TASKSET_MAP,
    TINKER_MAP,
    whole_seconds,
)
from ..dsl.trinity_fields import (
    AUXILIARY_MODELS,
    EVAL_TASKSET,
    EVAL_TASKSETS,
    LORA_CONFIGS,
    RUN_NAME,
    TINKER,
)
from ..errors import ConfigError, Problem
from .environment import EnvValue, env_read, verbatim
from .nested import dotted_nested, get_path, nesting_problem, set_path
from .paths import anchor_trinity_paths, read_text
from .settings import Layer, setting_problem

_OMEGACONF_ENV = re.compile(r"\$\{oc\.env:([^}]*)\}")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _as_setting(value: Any) -> Any:
    """A base-YAML value as tunedsl reads it, the way OmegaConf would."""
    if not isinstance(value, str):
        return value
    if _NUMBER.match(value):
        # PyYAML reads "1e-6" as text (YAML 1.1 wants "1.0e-6"); OmegaConf's typed
        # fields accept it as a number, so tunedsl does too.
        number = float(value)
        return int(number) if number.is_integer() and "." not in value and "e" not in \
            value.lower() else number
    # Trinity's ${oc.env:NAME,default} becomes tunedsl's ${env:NAME,default}: it is
    # resolved for the graph and written back unchanged to the YAML.
    converted = _OMEGACONF_ENV.sub(lambda m: "${env:" + m.group(1) + "}", value)
    if "${" in converted.replace("${env:", ""):
        return verbatim(str(value))  # another interpolation of OmegaConf's: kept as written
    return converted


def as_omegaconf_reads(value: Any) -> Any:
    """A base YAML's values, at every level, as OmegaConf (Trinity's reader) reads them
    (`_as_setting`: PyYAML's text ``1e-3`` is a number)."""
    if isinstance(value, Mapping):
        return {key: as_omegaconf_reads(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_omegaconf_reads(item) for item in value]
    return _as_setting(value)


def _copy(source: Mapping[str, Any], pairs: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for setting, key in pairs:
        found, value = get_path(source, key)
        if found and value is not None:
            set_path(out, setting, _as_setting(value))
    return out


def _lora(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `LoRA` fields of a config's ``model.lora_configs`` (its first entry, the one
    Trinity 0.6.0 takes), or None when it has none."""
    found, entries = get_path(config, LORA_CONFIGS)
    if not found or not isinstance(entries, list) or not entries or \
            not isinstance(entries[0], Mapping):
        return None
    return _copy(entries[0], LORA_MAP)


def _argument_tables(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """`Algorithm`'s tables of further arguments, from a config's ``*_fn_args``."""
    tables = {}
    for table, key in ARGUMENT_TABLES.items():
        found, arguments = get_path(config, key)
        if found and isinstance(arguments, Mapping):
            values = table_arguments(table, arguments)
            if values:
                tables[table] = {k: _as_setting(v) for k, v in values.items()}
    return tables


def settings_from_trinity(config: Mapping[str, Any]) -> dict[str, Any]:
    """The tunedsl settings a Trinity config already sets (a settings layer's values)."""
    settings = _copy(config, FIELD_MAP)
    tables = _argument_tables(config)
    if tables:
        settings.setdefault("algorithm", {}).update(tables)
    lora = _lora(config)
    if lora is not None:  # so the local backend trains the adapters a Trinity run would
        settings.setdefault("model", {})["lora"] = lora
    found, name = get_path(config, RUN_NAME)
    if found and isinstance(name, str) and name:
        settings["name"] = name
    found, evals = get_path(config, EVAL_TASKSETS)
    if found and isinstance(evals, list) and evals and isinstance(evals[0], Mapping):
        settings["eval_dataset"] = _copy(evals[0], TASKSET_MAP)
    found, enabled = get_path(config, f"{TINKER}.enable")
    if found and enabled is True:
        settings["tinker"] = _copy(config, TINKER_MAP)
    auxiliary = _named_entries(get_path(config, AUXILIARY_MODELS)[1])
    if auxiliary:
        settings["auxiliary_models"] = {name: _copy(entry, AUXILIARY_MAP)
                                        for name, entry in auxiliary}
    return settings


class _KeyTwice(Exception):
    """A mapping of a YAML file gives a key twice."""

    def __init__(self, key: Any, at: Any, first: Any) -> None:
        super().__init__(key)
        self.key, self.line = key, at.line + 1
        self.first = f"line {first.line + 1}" if first.line != at.line else \
            f"column {first.column + 1} of that line"


class _UniqueKeys(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping as OmegaConf (which
    Trinity loads its config with) does; keys a merge (``<<``) brings in may be given again.
    Its scalars resolve as OmegaConf's do (`resolve_as_trinity`)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # (a key that is a list: PyYAML refuses it itself)
                    continue
                if first.index != key_node.start_mark.index:  # (a flow mapping: one line)
                    raise _KeyTwice(key, key_node.start_mark, first)
        return super().construct_mapping(node, deep)


def resolve_as_trinity(yaml_class: Any) -> None:
    """Make a PyYAML loader or dumper class resolve plain scalars as OmegaConf's loader
    (Trinity's) does: ``1e-6``, ``4e81236`` and ``1_000`` are numbers to it, text to
    PyYAML's YAML 1.1. A base YAML is then read as Trinity reads it, and text the config
    writes that OmegaConf would read as a number is quoted. (Once per class; without
    OmegaConf, there is no Trinity to read it otherwise.)"""
    if getattr(yaml_class, "resolved_as_trinity", False):
        return
    try:
        from omegaconf._utils import get_yaml_loader
    except ImportError:
        return
    yaml_class.yaml_implicit_resolvers = {
        first: list(resolvers)
        for first, resolvers in get_yaml_loader().yaml_implicit_resolvers.items()}
    yaml_class.resolved_as_trinity = True


#: The sections of a Trinity config that are tables of settings (refused as a scalar here,
#: where Trinity may not be installed; the tables below them are walked by Trinity's own
#: dataclasses in `tunedsl.backends.trinity.tables.table_problems`).
_TABLES = ("algorithm", "model", "cluster", "buffer", "explorer", "trainer", "monitor",
           "synchronizer", "data_processor", "service")


def base_not_a_table(path: str, key: str, value: Any) -> str:
    """The line for a base YAML's ``key`` (dotted) given ``value`` where Trinity reads a
    table of settings. The top-level sections are refused as the file is read, without
    Trinity; the tables below them by Trinity's own dataclasses, where it is installed
    (`tunedsl.backends.trinity.tables.table_problems`): one wording for both."""
    return (f"{path}: {key} is {value!r}, where Trinity-RFT reads a table of settings; give "
            f"a table, or remove it")


def read_base_config(path: str) -> dict[str, Any]:
    """Read a base Trinity YAML as plain data (``${oc.env:...}`` left for Trinity, relative
    paths anchored to the YAML's folder)."""
    text = read_text(path, "Trinity config (trinity_config)")
    resolve_as_trinity(_UniqueKeys)
    try:
        data = yaml.load(text, Loader=_UniqueKeys) or {}  # noqa: S506 - a SafeLoader
    except _KeyTwice as twice:
        raise ConfigError(f"{path}:{twice.line}: the key {twice.key!r} is given twice in one "
                          f"mapping (first at {twice.first}); YAML keeps the last, and "
                          f"Trinity's loader refuses the file: merge them") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}".replace("\n", " ")) from None
    except RecursionError:  # the YAML reader recurses into nested lists and mappings
        raise ConfigError(f"{path}: nested deeper than the reader goes (about a thousand "
                          f"levels); flatten it") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a Trinity config must be a mapping at the top level")
    problem = nesting_problem(data)  # an alias of a mapping inside itself, too deep
    if problem is not None:
        raise ConfigError(f"{path}: {problem}")
    scalar = next((key for key in _TABLES if key in data and data[key] is not None
                   and not isinstance(data[key], dict)), None)
    if scalar is not None:  # (tunedsl's own table replaced it without a word: sweep 49)
        raise ConfigError(base_not_a_table(path, scalar, data[scalar]))
    # its ${...} are OmegaConf's, written back as they are (Trinity resolves them with the
    # experiment's settings merged in: resolved here, one naming a key the experiment also
    # sets would read the base's value)
    return verbatim(anchor_trinity_paths(data, os.path.dirname(os.path.abspath(path))))


def base_config_layer(path: str, config: Mapping[str, Any] | None = None) -> Layer:
    """A base Trinity YAML read back as the settings layer just above the defaults
    (``config``: the file as `read_base_config` read it, when the caller has).

    Raises:
        ConfigError: naming each key of the YAML whose value its setting refuses (by the
            key the file holds: ``algorithm.repeat_times``, not ``algorithm.group_size``).
    """
    config = read_base_config(path) if config is None else config
    _, problems = _read_fields(config, lambda key: key, lambda key: path)
    if problems:
        raise ConfigError(problems)
    values = settings_from_trinity(config)
    return Layer(os.path.basename(path), values, os.path.dirname(os.path.abspath(path)))


def _read_fields(config: Mapping[str, Any], name: Callable[[str], str],
                 where: Callable[[str], str]) -> tuple[dict[str, Any], list[Problem]]:
    """The settings a Trinity config (a ``[trinity]`` table, a base YAML) sets through the
    field map, LoRA's and the algorithm's argument tables, and a problem for each value
    its setting refuses, named by its Trinity key (``name(key)``) in its source
    (``where(key)``); Trinity's own step bounds are checked as seconds."""
    values: dict[str, Any] = {}
    problems = []
    pairs = [(setting, key, get_path(config, key)[1]) for setting, key in FIELD_MAP]
    # The run's name is tunedsl's name, whichever layer gives it: checked as a folder name
    # and given the time, so that runs never share a directory.
    pairs.append(("name", RUN_NAME, get_path(config, RUN_NAME)[1]))
    lora = _lora(config)
    if lora is not None:
        values.setdefault("model", {})["lora"] = {}  # on, with Trinity's defaults
        pairs += [(f"model.lora.{field}", f"{LORA_CONFIGS}[0].{key}", lora.get(field))
                  for field, key in LORA_MAP]
    pairs += [(f"algorithm.{table}", ARGUMENT_TABLES[table], value)
              for table, value in _argument_tables(config).items()]
    for setting, key, value in pairs:
        if value is None:
            continue
        value = _as_setting(value)
        if isinstance(value, str) and not isinstance(value, EnvValue) and "${" in value:
            continue  # a base YAML's ${oc.env:...}: read, and checked, as its layer is read
        problem = setting_problem(setting, value)
        if problem and isinstance(value, EnvValue) and not setting_problem(setting,
                                                                           env_read(value)):
            value, problem = env_read(value), None  # ${env:N} for a number: its value
        if problem:
            problems.append(Problem(f"{name(key)} {problem}", where=where(key),
                                    setting=name(key)))
        else:
            set_path(values, setting, value)
    for key in _SECONDS_KEYS:  # Trinity's own bounds, no setting's: checked as seconds
        value = get_path(config, key)[1]
        problem = None if value is None or isinstance(value, EnvValue) else whole_seconds(value)
        if problem:
            problems.append(Problem(f"{name(key)} {problem}", where=where(key),
                                    setting=name(key)))
    return values, problems


def _setter(layers: Sequence[Layer], key: str) -> str:
    """The source of the highest layer whose ``[trinity]`` sets ``key`` (dotted)."""
    for layer in reversed(layers):
        table = layer.values.get("trinity")
        if isinstance(table, Mapping) and get_path(dotted_nested(table), key)[0]:
            return layer.source
    return ""


def _named_entries(entries: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """A named list's entries by name, given as a list of entries naming themselves or as
    tables keyed by name (those without a name are refused when the YAML is written)."""
    if isinstance(entries, Mapping):
        return [(str(key), entry) for key, entry in entries.items()
                if isinstance(entry, Mapping) and not str(key).isdigit()]
    if not isinstance(entries, list):
        return []
    return [(entry["name"], entry) for entry in entries
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str)
            and entry["name"]]


def eval_taskset_name(base: Mapping[str, Any] | None) -> str:
    """The name of the eval taskset tunedsl writes for ``eval_dataset``: the base YAML's
    (as `read_base_config` read it) first one's (the graph reads ``eval_dataset`` from it),
    else `EVAL_TASKSET`."""
    named = _named_entries(get_path(base or {}, EVAL_TASKSETS)[1])
    return named[0][0] if named else EVAL_TASKSET


def trinity_table_layer(trinity: Mapping[str, Any], base_dir: str,
                        layers: Sequence[Layer] = (), eval_name: str = EVAL_TASKSET) -> Layer:
    """The settings a ``[trinity]`` table sets through the field map, as the highest layer
    (the table is merged over everything in the YAML, so its values are the run's).
    ``layers``: the layers merged into ``trinity``, to name the one that set a bad value;
    ``eval_name``: the eval taskset that is ``eval_dataset`` (`eval_taskset_name`).

    Raises:
        ConfigError: naming each ``trinity.<key>`` whose value the setting refuses.
    """
    values, problems = _read_fields(trinity, lambda key: f"trinity.{key}",
                                    lambda key: _setter(layers, key.partition("[")[0]))
    # Its entry for the eval taskset tunedsl writes is eval_dataset's, as the training
    # taskset's keys are train_dataset's: what check reads is what Trinity evaluates.
    entries: list[tuple[str, str | None, str, Mapping[str, Any], tuple[tuple[str, str], ...]]]
    entries = [("eval_dataset", None, f"{EVAL_TASKSETS}.{name}", entry, TASKSET_MAP)
               for name, entry in _named_entries(get_path(trinity, EVAL_TASKSETS)[1])
               if name == eval_name]
    # Its auxiliary models are the experiment's, as a base YAML's are: probed by check,
    # handed to the preflight rollout, counted (an undeclared one reached only Trinity).
    entries += [("auxiliary_models", name, f"{AUXILIARY_MODELS}.{name}", entry, AUXILIARY_MAP)
                for name, entry in _named_entries(get_path(trinity, AUXILIARY_MODELS)[1])]
    for section, name, path, entry, pairs in entries:
        fields = _copy(entry, pairs)
        setting = section if name is None else f"{section}.{name}"
        for field, key in pairs:  # a refused value named by its key in the table
            problem = setting_problem(f"{setting}.{field}", fields[field]) \
                if field in fields else None
            if problem:
                problems.append(Problem(f"trinity.{path}.{key} {problem}",
                                        where=_setter(layers, path.split(".")[0]),
                                        setting=f"trinity.{path}.{key}"))
                del fields[field]
        if name is None:
            values[section] = fields
        else:
            values.setdefault(section, {})[name] = fields
    if problems:
        raise ConfigError(problems)
    return Layer("[trinity]", values, base_dir)


#: The ``[trinity]`` keys that bound a step's time (`backends.trinity.bounds.time_bounds`
#: fills them in when not given).
_SECONDS_KEYS = ("explorer.max_timeout", "synchronizer.sync_timeout")
