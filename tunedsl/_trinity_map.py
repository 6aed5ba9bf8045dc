"""Where each tunedsl setting lives in a Trinity-RFT config, read in both directions.

The YAML writer uses this table to place values; a base Trinity YAML
(``trinity_config``) is read back through it as the lowest settings layer, so the
experiment graph shows the values the run will really use.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import yaml

from ._paths import beside
from .errors import ConfigError

#: (tunedsl setting, Trinity key) pairs that map one value to one value.
FIELD_MAP: tuple[tuple[str, str], ...] = (
    ("project", "project"),
    ("checkpoint_root_dir", "checkpoint_root_dir"),
    ("monitor", "monitor.monitor_type"),
    ("algorithm.algorithm_type", "algorithm.algorithm_type"),
    ("algorithm.group_size", "algorithm.repeat_times"),
    ("algorithm.learning_rate", "algorithm.optimizer.lr"),
    ("algorithm.batch_size", "buffer.batch_size"),
    ("algorithm.save_interval_steps", "trainer.save_interval"),
    ("algorithm.eval_interval_steps", "explorer.eval_interval"),
    ("algorithm.kl_coef", "algorithm.kl_loss_fn_args.kl_coef"),
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

_OMEGACONF_ENV = re.compile(r"\$\{oc\.env:([^}]*)\}")


def get_path(data: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    """``(found, value)`` for a dotted key in nested mappings."""
    for part in dotted.split("."):
        if not isinstance(data, Mapping) or part not in data:
            return False, None
        data = data[part]
    return True, data


def set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set a dotted key in nested dicts, creating the parents."""
    *parents, leaf = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[leaf] = value


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
    return _OMEGACONF_ENV.sub(lambda m: "${env:" + m.group(1) + "}", value)


def _copy(source: Mapping[str, Any], pairs: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for setting, key in pairs:
        found, value = get_path(source, key)
        if found and value is not None:
            set_path(out, setting, _as_setting(value))
    return out


def settings_from_trinity(config: Mapping[str, Any]) -> dict[str, Any]:
    """The tunedsl settings a Trinity config already sets (a settings layer's values)."""
    settings = _copy(config, FIELD_MAP)
    found, name = get_path(config, "name")
    if found and isinstance(name, str) and name:
        settings["name"] = name
    found, evals = get_path(config, "buffer.explorer_input.eval_tasksets")
    if found and isinstance(evals, list) and evals and isinstance(evals[0], Mapping):
        settings["eval_dataset"] = _copy(evals[0], TASKSET_MAP)
    found, auxiliary = get_path(config, "explorer.auxiliary_models")
    if found and isinstance(auxiliary, list):
        settings["auxiliary_models"] = {
            entry["name"]: _copy(entry, AUXILIARY_MAP)
            for entry in auxiliary if isinstance(entry, Mapping) and entry.get("name")
        }
    return settings


#: Keys of a Trinity config that name a local path (lists: every entry's key).
_PATH_KEYS = ("model.model_path", "explorer.rollout_model.model_path",
              "buffer.explorer_input.taskset.path")
_PATH_LISTS = (("buffer.explorer_input.eval_tasksets", "path"),
               ("explorer.auxiliary_models", "model_path"))


def _anchor_paths(config: dict[str, Any], folder: str) -> dict[str, Any]:
    """Make relative paths that exist beside the base YAML absolute, so the config means
    the same files whatever directory Trinity later runs in (others may be hub ids)."""

    for key in _PATH_KEYS:
        found, value = get_path(config, key)
        if found:
            set_path(config, key, beside(value, folder))
    for key, field in _PATH_LISTS:
        _, entries = get_path(config, key)
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict) and field in entry:
                entry[field] = beside(entry[field], folder)
    return config


def read_base_config(path: str) -> dict[str, Any]:
    """Read a base Trinity YAML as plain data (``${oc.env:...}`` left for Trinity, relative
    paths anchored to the YAML's folder)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
    except FileNotFoundError:
        raise ConfigError(f"trinity_config: file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"trinity_config: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a Trinity config must be a mapping at the top level")
    return _anchor_paths(data, os.path.dirname(os.path.abspath(path)))
