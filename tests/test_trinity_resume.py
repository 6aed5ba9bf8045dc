"""Resuming a Trinity run loses no explored step: the explorer's saved position (Trinity's
own ``StateManager``) goes back to the last step the trainer's checkpoint consumed in full,
counted from the experiences Trinity's pipeline saved (its own SQL writer), and Trinity's
own task scheduler then reads on from there."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("trinity.common.config")

import torch  # noqa: E402
from trinity.buffer.task_scheduler import get_taskset_scheduler  # noqa: E402
from trinity.common.experience import EID, Experience  # noqa: E402
from trinity.manager.state_manager import StateManager  # noqa: E402
from verl.utils.checkpoint.checkpoint_manager import get_checkpoint_tracker_filename  # noqa: E402

import tunedsl  # noqa: E402
from tunedsl.backends.trinity.config import trinity_config  # noqa: E402
from tunedsl.backends.trinity.resume import rewind_explorer  # noqa: E402

from .trinity_support import pipeline_store, validate, write_with_trinity  # noqa: E402

GOOD = "tests.fixtures.good:Good"  # 3 rows, 2 tasks x 4 rollouts a step


def stopped_run(tmp_path, *, explored, trained, calls=None):
    """A run Trinity stopped: its explorer saved at step ``explored``, its trainer's last
    checkpoint at step ``trained``, and (``calls``: model calls per rollout) the pipeline's
    store of each step's experiences."""
    graph = tunedsl.load_experiment(GOOD, overrides=["train_dataset.total_steps=10"])
    checked = validate(graph, tmp_path)
    run_dir = tmp_path / "ckpt" / "tunedsl" / checked.name
    StateManager(path=str(run_dir), explorer_name=checked.explorer.name).save_explorer(
        current_step=explored, taskset_states=[{"current_index": explored * 2}])
    (run_dir / f"global_step_{trained}").mkdir()
    with open(get_checkpoint_tracker_filename(str(run_dir)), "w") as tracker:
        tracker.write(str(trained))  # as verl's checkpoint manager records a save
    if calls is not None:
        save_experiences(run_dir, explored, per_step=8 * calls)
    return run_dir, checked, trinity_config(graph, name=checked.name)


def save_experiences(run_dir, steps, per_step):
    """Each step's experiences, written by Trinity's own SQL storage where its pipeline
    saves its input (``buffer/explorer_output.db``)."""
    write_with_trinity(pipeline_store(run_dir), [
        Experience(eid=EID(batch=step, task=i % 2, run=i // 2), tokens=torch.tensor([1, 2, 3]),
                   prompt_length=2, reward=1.0)
        for step in range(1, steps + 1) for i in range(per_step)])


def next_tasks(run_dir, checked):
    """The tasks Trinity's own scheduler reads next from the explorer's saved state."""
    state = StateManager(path=str(run_dir), explorer_name=checked.explorer.name).load_explorer()
    return [task.raw_task["question"] for task in
            asyncio.run(get_taskset_scheduler(state, checked).read())]


def fresh_tasks(checked, step):
    """The tasks a run that was never stopped reads at ``step`` (1-based)."""
    scheduler = get_taskset_scheduler({}, checked)
    for _ in range(step - 1):
        asyncio.run(scheduler.read())
    return [task.raw_task["question"] for task in asyncio.run(scheduler.read())]


def test_the_explorer_goes_back_to_the_steps_the_checkpoint_trained(tmp_path):
    """Two calls a rollout: 16 experiences a step, 8 a trainer step. The trainer's checkpoint
    at step 2 consumed 16, explorer step 1 alone, so the explorer goes back from 5 to 1,
    and reads step 2's tasks next."""
    run_dir, checked, config = stopped_run(tmp_path, explored=5, trained=2, calls=2)
    line = rewind_explorer(run_dir, config, checked)
    assert line == (
        "resume: the trainer's last checkpoint is step 2 and the explorer had reached step 5; "
        "the explorer goes back to step 1, the last one the checkpoint trained on in full "
        "(counted from the experiences it saved), so no explored step is lost")
    state = json.loads((run_dir / "explorer_meta.json").read_text())
    assert (state["latest_iteration"], state["taskset_states"]) == (1, [{"current_index": 2}])
    assert next_tasks(run_dir, checked) == fresh_tasks(checked, 2)


def test_without_an_experience_store_it_is_one_trainer_step_per_explorer_step(tmp_path):
    run_dir, checked, config = stopped_run(tmp_path, explored=5, trained=3)
    assert rewind_explorer(run_dir, config, checked).endswith(
        "the explorer goes back to step 3, the last one the checkpoint trained on in full "
        "(counted from one trainer step per explorer step (no experience store to count)), "
        "so no explored step is lost")
    assert next_tasks(run_dir, checked) == fresh_tasks(checked, 4)


def test_an_explorer_the_checkpoint_caught_up_with_stays(tmp_path):
    """One call a rollout: the checkpoint at step 4 consumed explorer steps 1-4 in full."""
    run_dir, checked, config = stopped_run(tmp_path, explored=4, trained=4, calls=1)
    before = (run_dir / "explorer_meta.json").read_text()
    assert rewind_explorer(run_dir, config, checked) is None
    assert (run_dir / "explorer_meta.json").read_text() == before


def checkpoints(run_dir):
    return sorted(int(path.name.removeprefix("global_step_"))
                  for path in run_dir.glob("global_step_*"))


def stopped_run_with_checkpoints(tmp_path, *, keep, saved, explored, trained):
    """A run whose trainer saved ``global_step_N`` (with verl's actor folder inside) for
    every N in ``saved``, its tracker at ``trained``, with ``keep_checkpoints=keep``."""
    graph = tunedsl.load_experiment(GOOD, overrides=[
        "train_dataset.total_steps=10", f"algorithm.keep_checkpoints={keep}"])
    checked = validate(graph, tmp_path)
    run_dir = tmp_path / "ckpt" / "tunedsl" / checked.name
    StateManager(path=str(run_dir), explorer_name=checked.explorer.name).save_explorer(
        current_step=explored, taskset_states=[{"current_index": explored * 2}])
    for step in saved:
        (run_dir / f"global_step_{step}" / "actor").mkdir(parents=True)
        (run_dir / f"global_step_{step}" / ".full_checkpoint").write_text("")
    with open(get_checkpoint_tracker_filename(str(run_dir)), "w") as tracker:
        tracker.write(str(trained))
    return run_dir, checked, trinity_config(graph, name=checked.name)


def test_a_resume_prunes_the_checkpoints_saved_before_it_beyond_the_retention(tmp_path):
    """Trinity's trainer prunes only what its own process saved: on resume, the newest
    keep_checkpoints up to the one resumed from stay, and a save after it (cut short)."""
    run_dir, checked, config = stopped_run_with_checkpoints(
        tmp_path, keep=2, saved=[1, 2, 3, 4, 5, 6], explored=6, trained=5)
    assert checked.trainer.max_checkpoints_to_keep == 2
    line = rewind_explorer(run_dir, config, checked)
    assert line == (
        f"resume: removed global_step_1, global_step_2, global_step_3 from {run_dir}: "
        f"trainer.max_checkpoints_to_keep = 2 keeps the newest 2 up to step 5, the one "
        f"resumed from (Trinity's trainer prunes only the checkpoints its own process "
        f"saved); the trainer's last checkpoint is step 5 and the explorer had reached "
        f"step 6; the explorer goes back to step 5, the last one the checkpoint trained on "
        f"in full (counted from one trainer step per explorer step (no experience store to "
        f"count)), so no explored step is lost")
    assert checkpoints(run_dir) == [4, 5, 6]
    # verl's own lookup still finds the checkpoint the trainer resumes from
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path
    assert find_latest_ckpt_path(str(run_dir)) == str(run_dir / "global_step_5")


def test_the_resumed_checkpoint_and_the_explorers_stay_whatever_the_retention(tmp_path):
    run_dir, checked, config = stopped_run_with_checkpoints(
        tmp_path, keep=1, saved=[1, 2, 3, 4, 5], explored=3, trained=5)
    assert rewind_explorer(run_dir, config, checked).startswith(
        f"resume: removed global_step_1, global_step_2, global_step_4 from {run_dir}: ")
    assert checkpoints(run_dir) == [3, 5]


def test_without_a_retention_every_checkpoint_stays(tmp_path):
    run_dir, checked, config = stopped_run_with_checkpoints(
        tmp_path, keep=0, saved=[1, 2, 3], explored=3, trained=3)
    assert rewind_explorer(run_dir, config, checked) is None
    assert checkpoints(run_dir) == [1, 2, 3]
