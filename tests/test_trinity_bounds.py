"""How long Trinity-RFT 0.6.0 waits, as its validated config holds it: the explorer waits
for a whole step at most ``explorer.max_timeout x (max_retry_times + 1)``
(``explorer/scheduler.py``'s ``default_timeout``), and the trainer for a step's
experiences at most the experience buffer's ``max_read_timeout``
(``buffer/reader/queue_reader.py``, through ``to_storage_config``), then raises on a short
batch. Both must outlast a step of rollouts that each keep within ``rollout_timeout``."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("trinity.common.config")

import tunedsl  # noqa: E402
from tunedsl.backends.trinity.bounds import GRACE, TRAINER_STEP  # noqa: E402

from .trinity_support import validate  # noqa: E402

EXAMPLE = "examples.math_agent.experiment:MathAgent"  # 32 tasks x 8 rollouts, 16 runners


def waits(checked):
    """(the explorer's wait for a step, the trainer's wait for its experiences), in s."""
    explorer = checked.explorer.max_timeout * (checked.explorer.max_retry_times + 1)
    buffer = checked.buffer.trainer_input.experience_buffer.to_storage_config()
    return explorer, buffer.max_read_timeout


def test_a_step_of_two_minute_rollouts_no_longer_ends_training(tmp_path):
    """256 rollouts on 16 runners are 16 waves: at two minutes a rollout the step takes
    32 minutes, past Trinity's default 1800 s read timeout; the trainer now waits for the
    longest step the explorer allows (every attempt of every wave at rollout_timeout),
    after an eval of the same bound and the weight sync."""
    checked = validate(tunedsl.load_experiment(EXAMPLE), tmp_path)
    explorer, trainer = waits(checked)
    attempts = checked.explorer.max_retry_times + 1
    assert 16 * 120 > 1800
    assert explorer == attempts * 16 * (3600 + GRACE)
    assert trainer == 2 * explorer + TRAINER_STEP == 2 * explorer + 1800


def test_the_weight_sync_waits_as_long_as_a_step_and_the_trainers_final_save(tmp_path):
    """Past synchronizer.sync_timeout a side of the weight sync goes on with stale weights
    (manager/synchronizer.py), and once the explorer has finished Trinity's launcher waits
    that long for the trainer's final checkpoint (cli/launcher.py): Trinity's 3600 s (and
    tunedsl's former 1800 s) are shorter than one step of hour-long rollouts. The sync now
    waits for an eval and a step of the explorer plus the trainer's own step and save."""
    checked = validate(tunedsl.load_experiment(EXAMPLE), tmp_path)
    explorer, trainer = waits(checked)
    assert checked.synchronizer.sync_timeout == 2 * explorer + TRAINER_STEP == trainer
    assert checked.synchronizer.sync_timeout > explorer > 3600
    graph = tunedsl.load_experiment(EXAMPLE, overrides=["trinity.synchronizer.sync_timeout=600"])
    (tmp_path / "b").mkdir()
    assert validate(graph, tmp_path / "b").synchronizer.sync_timeout == 600


def test_the_step_bound_covers_an_eval_larger_than_a_training_step(tmp_path):
    """An eval of 1000 tasks on 16 runners is 63 waves: the explorer's wait for it is the
    same default_timeout, so the bound is sized by the larger of the two."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=["rollout_timeout=60"])
    checked = validate(graph, tmp_path, rows={"train_dataset": 64, "eval_dataset": 1000})
    assert checked.explorer.max_timeout == math.ceil(1000 / 16) * (60 + GRACE)


def test_bounds_a_base_yaml_or_the_trinity_table_sets_are_kept(tmp_path):
    """Trinity's own keys win: tunedsl derives only what nobody set."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[
        "trinity.explorer.max_timeout=900",
        "trinity.buffer.trainer_input.experience_buffer.max_read_timeout=7200"])
    checked = validate(graph, tmp_path)
    assert (checked.explorer.max_timeout, waits(checked)[1]) == (900, 7200)
    graph = tunedsl.load_experiment(EXAMPLE, overrides=["trinity.explorer.max_timeout=900"])
    (tmp_path / "b").mkdir()
    assert waits(validate(graph, tmp_path / "b"))[1] == 2 * 900 * 3 + 1800
