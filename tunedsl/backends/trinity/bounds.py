"""How long Trinity-RFT waits, derived from how long one rollout may take.

``rollout_timeout`` bounds one rollout: tunedsl's workflow class enforces it on the
runner (`tunedsl.backends.trinity.workflow`). Trinity's own timeouts bound more than
that, and must be sized from it (``trinity/explorer/scheduler.py``,
``trinity/explorer/rollout_coordinator.py``, ``trinity/buffer/storage/queue.py``):

- the explorer waits for a whole step at most ``explorer.max_timeout x (max_retry_times
  + 1)`` (the scheduler's ``default_timeout``, also each attempt's limit), and a step
  runs its rollouts in waves of ``engine_num x runner_per_model`` runners, each attempt
  of each sub-task one after another on its runner;
- the trainer waits for a step's experiences at most ``max_read_timeout`` (1800 s by
  default), and they arrive only when the explorer has finished that step, after the
  previous step's eval and weight sync.

- a side of the weight sync waits for the other at most ``synchronizer.sync_timeout``,
  then goes on with stale weights, logging only a warning (``manager/synchronizer.py``
  ``ready_to_nccl_sync`` returns None; ``explorer/explorer.py``, ``trainer/trainer.py``;
  in mode colocate the wait raises ``TimeoutError``): the trainer waits for the explorer
  to finish an eval and a step, the explorer for the trainer's step; and once the explorer
  has finished, the launcher waits ``sync_timeout`` for the trainer's last steps and its
  final checkpoint before it shuts Ray down (``cli/launcher.py``).

So ``explorer.max_timeout`` is written as the longest a step's attempts can take on one
runner, the read timeout as two explorer waits (an eval, then a step) plus `TRAINER_STEP`,
and ``sync_timeout`` the same. All go under a base YAML and ``[trinity]``, which may set
them; `tunedsl.backends.trinity.run_logs` reports a sync that went stale and a trainer cut
off before its final checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...config.environment import EnvValue, env_read
from ...config.nested import get_path
from ...dsl.settings_table import whole_seconds
from ...errors import ConfigError

#: Seconds a rollout attempt may take on a runner beyond ``rollout_timeout``: the
#: runner's own work (recording, experience extraction, serialisation) and a blocked
#: rollout's watchdog grace.
GRACE = 60
#: Seconds the trainer's own work may take between two reads: a training step, the weight
#: sync and a checkpoint save (the final one included).
TRAINER_STEP = 1800
#: Where Trinity keeps the trainer's experience buffer (a queue in mode ``both``).
EXPERIENCE_BUFFER = "buffer.trainer_input.experience_buffer"
#: Trinity 0.6.0's defaults for what the bounds read (``trinity/common/config.py``).
_TRINITY_DEFAULTS = {"explorer.rollout_model.engine_num": 1, "explorer.runner_per_model": 8,
                     "explorer.max_retry_times": 2, "synchronizer.sync_timeout": 3600,
                     "algorithm.repeat_times": 1, "buffer.batch_size": 1}


def _value(config: Mapping[str, Any], key: str) -> Any:
    """A whole number the bounds read (a ``[trinity]`` value is not checked before)."""
    found, value = get_path(config, key)
    if not found or value is None:
        return _TRINITY_DEFAULTS.get(key)
    if isinstance(value, str) and "${" in value:  # a base YAML's ${oc.env:N}, kept verbatim
        value = _from_environment(str(value), key)
    if isinstance(value, EnvValue):  # ${env:N}: Trinity reads the number it spells
        value = env_read(value)
    least = 1 if key in _COUNTS else 0
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"trinity.{key} must be a whole number >= {least} (got {value!r})")
    return value


def _from_environment(text: str, key: str) -> Any:
    """A base YAML's ``${oc.env:NAME[,default]}`` as Trinity's reader resolves it (its
    other interpolations are Trinity's to resolve: refused here, with the key)."""
    from ...config.environment import Unresolved, interpolate
    from ...config.trinity_base import as_omegaconf_reads

    problems: list[Any] = []
    value = interpolate(as_omegaconf_reads(text), "", f"trinity.{key}", problems)
    if isinstance(value, Unresolved):
        raise ConfigError(str(value.problem))
    if problems or not isinstance(value, EnvValue):
        raise ConfigError(f"trinity.{key} must be a whole number, or ${{oc.env:NAME}} of one "
                          f"(got {text!r})")
    return value


#: What the bounds divide by or multiply a step's work with: 0 of them ran no rollout
#: (Trinity would wait for ever) and was an internal error here (division by zero).
_COUNTS = frozenset({"explorer.rollout_model.engine_num", "explorer.runner_per_model",
                     "algorithm.repeat_times", "explorer.max_repeat_times_per_runner",
                     "buffer.batch_size"})


def step_seconds(config: Mapping[str, Any], rollout_timeout: int,
                 eval_tasks: int | None = None, *, grouped: bool = False) -> int:
    """The longest one attempt of a train or eval step can take, as waves of sub-tasks on
    the explorer's runners (``eval_tasks``: the eval dataset's rows times its repeats,
    when known). ``grouped``: a ``@group_judge`` experiment, whose runner runs a task's
    repeats side by side and then judges them, each within ``rollout_timeout``."""
    runners = _value(config, "explorer.rollout_model.engine_num") * \
        _value(config, "explorer.runner_per_model")
    repeats, per_runner = _value(config, "algorithm.repeat_times"), \
        _value(config, "explorer.max_repeat_times_per_runner")
    runs_per_task = per_runner or repeats  # a runner runs a sub-task's repeats in turn
    if grouped:
        sub_tasks = _value(config, "buffer.batch_size")
        waves = 2 * math.ceil(sub_tasks / runners)  # the rollouts, then their judge
        if eval_tasks:
            waves = max(waves, 2 * math.ceil(eval_tasks / runners))
        return waves * (rollout_timeout + GRACE)
    sub_tasks = _value(config, "buffer.batch_size") * math.ceil(repeats / runs_per_task)
    waves = math.ceil(sub_tasks / runners) * runs_per_task
    if eval_tasks:
        waves = max(waves, math.ceil(eval_tasks / runners))
    return waves * (rollout_timeout + GRACE)


def time_bounds(config: Mapping[str, Any], rollout_timeout: int,
                eval_tasks: int | None = None, *, grouped: bool = False) -> dict[str, Any]:
    """The Trinity keys that bound a step and the trainer's wait, for ``config`` (a nested
    dict to merge under the base YAML and ``[trinity]``)."""
    found, given = get_path(config, "explorer.max_timeout")
    if found and given is not None:
        problem = whole_seconds(given)
        if problem:
            raise ConfigError(f"trinity.explorer.max_timeout {problem}")
    max_timeout = given or step_seconds(config, rollout_timeout, eval_tasks, grouped=grouped)
    attempts = _value(config, "explorer.max_retry_times") + 1
    read = 2 * attempts * max_timeout + TRAINER_STEP
    found, sync = get_path(config, "synchronizer.sync_timeout")
    if found and sync is not None:
        problem = whole_seconds(sync)
        if problem:
            raise ConfigError(f"trinity.synchronizer.sync_timeout {problem}")
    return {"explorer": {"max_timeout": max_timeout},
            "synchronizer": {"sync_timeout": sync if found and sync is not None else read},
            "buffer": {"trainer_input": {"experience_buffer": {
                "name": "experience_buffer", "storage_type": "queue",
                "max_read_timeout": read}}}}
