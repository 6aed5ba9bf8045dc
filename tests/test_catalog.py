"""tunedsl's copies of Trinity's registries match the installed Trinity-RFT 0.6.0."""

from __future__ import annotations

import pytest

from tunedsl.dsl.trinity_fields import ALGORITHM_TYPES, GROUP_ALGORITHMS, MONITOR_TYPES
from tunedsl.errors import did_you_mean, unknown_name_message

pytest.importorskip("trinity.algorithm")

#: Advantage functions that compare rollouts within the group of one task.
GROUP_ADVANTAGES = {"grpo", "step_wise_grpo", "gigpo", "rloo", "opmd", "asymre", "rec"}


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
