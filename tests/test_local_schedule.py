"""The local backend's task order (schedule.py) is Trinity's: Trinity-RFT 0.6.0's own
taskset scheduler and shuffle data selector read a dataset, and the local `Schedule` must
give every step the same rows, across epoch ends, with total_steps or total_epochs, and
after a resume."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("numpy")
pytest.importorskip("trinity.common.config")

from trinity.buffer.task_scheduler import TasksetScheduler, get_taskset_scheduler  # noqa: E402
from trinity.common.config import load_config  # noqa: E402

import tunedsl  # noqa: E402
from examples.arith.experiment import add, exact  # noqa: E402
from tunedsl import Algorithm, Dataset, Model, experiment  # noqa: E402
from tunedsl.backends.local.schedule import Schedule, read_rows  # noqa: E402
from tunedsl.backends.trinity.config import to_yaml, trinity_config  # noqa: E402
from tunedsl.backends.trinity.validate import gpus_needed  # noqa: E402


@experiment
class Shuffled:
    """A training set the test writes (its path comes from --set); epochs, not steps."""

    workflow = add
    judge = exact
    train_dataset = Dataset("set-by-test", split="train", total_epochs=3)
    model = Model("set-by-test", max_model_len=32, max_tokens=1)
    algorithm = Algorithm("grpo", group_size=2, batch_size=3, learning_rate=1e-3, seed=0)


def write_rows(folder: Path, count: int) -> Path:
    """``count`` distinct rows in ``folder/train.jsonl``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.jsonl").write_text("".join(
        json.dumps({"question": f"{i}+0=", "answer": str(i)}) + "\n" for i in range(count)))
    return folder


def trinity_checked(graph, folder: Path):
    """Trinity's loaded and checked config for ``graph``, its taskset read through the
    shuffle data selector seeded with algorithm.seed, as tunedsl's YAML sets it."""
    config = trinity_config(graph)
    config["buffer"]["explorer_input"]["taskset"]["data_selector"] = {
        "selector_type": "shuffle", "seed": graph.algorithm.seed}
    config["cluster"] = {"node_num": 1, "gpu_per_node": gpus_needed(config)}
    config["checkpoint_root_dir"] = str(folder / "ckpt")
    path = folder / "config.yaml"
    path.write_text(to_yaml(config))
    return load_config(str(path)).check_and_update()


def trinity_steps(scheduler) -> list[list[dict]]:
    """Every batch the scheduler gives until it stops: each task's row."""
    async def read_all():
        batches = []
        while True:
            try:
                batches.append([task.raw_task for task in await scheduler.read()])
            except StopAsyncIteration:
                return batches

    return asyncio.run(read_all())


def graph_of(tmp_path: Path, rows: int, *overrides: str):
    data = write_rows(tmp_path / "data", rows)
    return tunedsl.load_experiment(Shuffled, overrides=[
        f"train_dataset.path={data}", "model.model_path=tiny", f"checkpoint_root_dir={tmp_path}",
        *overrides])


@pytest.mark.parametrize("rows, batch, seed, epochs, steps", [
    (7, 3, 0, 3, 7),     # batches straddle both epoch ends; 21 // 3 steps
    (10, 4, 42, 2, 5),   # the last step's batch is cut at the end (20 // 4)
    (5, 5, 3, 3, 3),     # a batch is the whole dataset: one epoch a step
    (6, 1, 7, 2, 12),
])
def test_each_step_takes_the_rows_trinitys_shuffle_selector_gives(tmp_path, rows, batch, seed,
                                                                 epochs, steps):
    """Trinity's taskset scheduler (as its explorer builds it) over the same file, batch
    size and seed reads the same rows as `Schedule.indices`, step by step, for every step
    of total_epochs."""
    graph = graph_of(tmp_path, rows, f"algorithm.batch_size={batch}",
                     f"algorithm.seed={seed}", f"train_dataset.total_epochs={epochs}")
    config = trinity_checked(graph, tmp_path)
    scheduler = get_taskset_scheduler({}, config)
    assert isinstance(scheduler, TasksetScheduler)  # the shuffle path, not the sequential one
    trinity = trinity_steps(scheduler)
    assert len(trinity) == steps
    table = read_rows(graph.train_dataset, "train_dataset")
    schedule = Schedule(rows, batch, seed)
    assert [[table[i] for i in schedule.indices(step)] for step in range(steps)] == trinity


def test_with_total_steps_the_order_runs_on_through_the_epochs(tmp_path):
    """total_steps past the dataset's end: Trinity reads on into later epochs' shuffles."""
    graph = graph_of(tmp_path, 4, "algorithm.batch_size=3", "algorithm.seed=11",
                     "train_dataset.total_steps=9")
    trinity = trinity_steps(get_taskset_scheduler({}, trinity_checked(graph, tmp_path)))
    table = read_rows(graph.train_dataset, "train_dataset")
    assert len(trinity) == 9
    assert [[table[i] for i in Schedule(4, 3, 11).indices(step)] for step in range(9)] == trinity


def test_a_resumed_trinity_run_continues_the_order_the_local_schedule_gives(tmp_path):
    """Trinity's explorer resumes its scheduler from the step and the selector's saved
    state; the batches from there are `Schedule.indices` of those steps, which is what a
    resumed local run (its step restored from the checkpoint) reads."""
    graph = graph_of(tmp_path, 7, "algorithm.batch_size=3", "algorithm.seed=2")
    config = trinity_checked(graph, tmp_path)
    first = get_taskset_scheduler({}, config)

    async def read(scheduler, count):
        return [await scheduler.read() for _ in range(count)]

    asyncio.run(read(first, 3))  # stopped after step 3, mid-epoch 1
    state = {"latest_iteration": 3, "taskset_states": first.state_dict()}
    resumed = trinity_steps(get_taskset_scheduler(state, config))
    table = read_rows(graph.train_dataset, "train_dataset")
    assert [[table[i] for i in Schedule(7, 3, 2).indices(step)] for step in range(3, 7)] == \
        resumed


def test_the_order_is_numpys_permutation_per_epoch():
    """Pinned: 7 rows, batches of 3, seed 0: epoch 0 is default_rng(0)'s permutation,
    epoch 1 default_rng(1)'s; step 2 takes epoch 0's last row and epoch 1's first two."""
    schedule = Schedule(7, 3, 0)
    assert schedule.order(0) == (2, 4, 3, 6, 5, 0, 1)
    assert schedule.order(1) == (5, 0, 1, 4, 2, 6, 3)
    assert [schedule.indices(step) for step in range(4)] == [
        [2, 4, 3], [6, 5, 0], [1, 5, 0], [1, 4, 2]]
