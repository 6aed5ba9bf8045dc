"""tunedsl's copies of Trinity's registries match the installed Trinity-RFT 0.6.0."""

from __future__ import annotations

import pytest

from tunedsl.dsl.trinity_fields import ALGORITHM_TYPES, GROUP_ALGORITHMS, MONITOR_TYPES
from tunedsl.errors import did_you_mean, unknown_name_message

pytest.importorskip("trinity.algorithm")

from tunedsl.dsl.algorithms import GROUP_ADVANTAGES  # noqa: E402


def _trinity_algorithms():
    from trinity.algorithm import ALGORITHM_TYPE

    return ALGORITHM_TYPE


def test_algorithm_types_equal_trinity_registry_keys():
    """ALGORITHM_TYPES is exactly the set of Trinity's registered algorithm names."""
    registry = _trinity_algorithms()
    names = set(registry._default_mapping) | set(registry.modules)
    assert set(ALGORITHM_TYPES) == names
    assert len(ALGORITHM_TYPES) == len(set(ALGORITHM_TYPES))
    assert list(ALGORITHM_TYPES) == sorted(ALGORITHM_TYPES)


def test_group_algorithms_are_those_with_a_group_advantage():
    """GROUP_ALGORITHMS holds the algorithms whose default advantage_fn is group-relative."""
    registry = _trinity_algorithms()
    expected = {
        name for name in registry._default_mapping
        if registry.get(name).default_config().get("advantage_fn") in GROUP_ADVANTAGES
    }
    assert GROUP_ALGORITHMS == expected
    assert {"grpo", "multi_step_grpo", "rloo", "gigpo"} <= GROUP_ALGORITHMS
    assert not {"ppo", "sft", "dpo", "reinforceplusplus"} & GROUP_ALGORITHMS


def test_monitor_types_equal_trinity_monitor_registry():
    """MONITOR_TYPES is exactly the set of monitors trinity.utils.monitor registers."""
    from trinity.utils.monitor import MONITOR

    assert set(MONITOR_TYPES) == set(MONITOR._default_mapping) | set(MONITOR.modules)
    assert len(MONITOR_TYPES) == len(set(MONITOR_TYPES))


def test_every_monitor_type_resolves_in_trinity():
    """Each monitor name imports to a class through Trinity's own registry."""
    from trinity.utils.monitor import MONITOR, Monitor

    for name in MONITOR_TYPES:
        assert issubclass(MONITOR.get(name), Monitor)


def test_did_you_mean_and_unknown_name_message():
    """Suggestions pick the closest choice; far-off words get none."""
    assert did_you_mean("grop_size", ["group_size", "batch_size"]) == \
        " (did you mean 'group_size'?)"
    assert did_you_mean("zzz", ["group_size"]) == ""
    assert unknown_name_message("monitor", "wandbb", ["wandb", "mlflow"]) == \
        "'wandbb' is not a known monitor (did you mean 'wandb'?); choose one of: mlflow, wandb"


def _trinity_field_types():
    """Dotted key -> type for every field of Trinity's Config, following nested dataclasses."""
    import dataclasses
    import typing

    from trinity.common.config import Config

    found = {}

    def walk(cls, prefix):
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            key = f"{prefix}{field.name}"
            kind = hints[field.name]
            found[key] = kind
            # Optional[List[X]] (model.lora_configs) is a list of X like List[X].
            listed = [a for a in (kind, *typing.get_args(kind)) if typing.get_origin(a) is list]
            if listed:
                kind = listed[0]
            inner = [a for a in typing.get_args(kind) if dataclasses.is_dataclass(a)] or \
                ([kind] if dataclasses.is_dataclass(kind) else [])
            if inner and typing.get_origin(kind) is not list:
                walk(inner[0], key + ".")
            elif typing.get_origin(kind) is list and inner:
                walk(inner[0], key + "[].")

    walk(Config, "")
    return found


def test_every_trinity_key_tunedsl_names_is_a_field_of_trinitys_config():
    """The field map, the taskset/auxiliary maps and the named locations all exist in
    Trinity-RFT 0.6.0's Config, so neither the writer nor the base-YAML layer guesses."""
    import typing

    from tunedsl.dsl import settings_table as table
    from tunedsl.dsl import trinity_fields as fields

    known = _trinity_field_types()
    keys = [key for _, key in table.FIELD_MAP] + list(fields.PATH_KEYS)
    keys += [fields.RUN_NAME, fields.TASKSET, fields.EVAL_TASKSETS, fields.AUXILIARY_MODELS,
             fields.ROLLOUT_MODEL]
    keys += [f"{fields.EVAL_TASKSETS}[].{key}" for _, key in table.TASKSET_MAP]
    keys += [f"{fields.TASKSET}.{key}" for _, key in table.TASKSET_MAP]
    keys += [f"{fields.AUXILIARY_MODELS}[].{key}" for _, key in table.AUXILIARY_MAP]
    keys += [f"{lists}[].{key}" for lists, key in fields.PATH_LIST_KEYS]
    keys += [f"{fields.LORA_CONFIGS}[].{key}" for key in ("name", *dict(table.LORA_MAP).values())]
    keys += [key for _, key in table.TINKER_MAP]
    # Every row of the settings table, as README's table shows its key.
    keys += [key for row in table.all_settings() if (key := table.trinity_key(row))]
    def exists(key):  # keys inside a free-form dict field (kl_loss_fn_args) count too
        parts = key.split(".")
        prefixes = (".".join(parts[:n]) for n in range(1, len(parts)))
        return key in known or any(prefix in known and is_dict(known[prefix])
                                   for prefix in prefixes)

    def is_dict(kind):
        options = (kind, *typing.get_args(kind))
        return dict in options or dict in map(typing.get_origin, options)

    assert [key for key in keys if not exists(key)] == []
    assert [key for key in fields.INFERENCE_MODEL_FIELDS
            if f"{fields.ROLLOUT_MODEL}.{key}" not in known] == []
