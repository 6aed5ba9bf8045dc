"""Resuming a Trinity run without losing training: the explorer goes back to the trainer.

Trinity saves the explorer's position at every weight sync (``<explorer>_meta.json``:
its step and its taskset's read position, ``trinity/manager/state_manager.py``) but the
trainer only at a checkpoint, every ``save_interval`` trainer steps
(``latest_checkpointed_iteration.txt`` and ``global_step_N``, read back by verl's
``find_latest_ckpt_path``). After a stop between two checkpoints the trainer resumes from
the last one while the explorer goes on from where it stopped: the experiences explored
in between were never trained on, and never would be.

`rewind_explorer` moves the explorer back, before a resume, to the last step all of
whose experiences the trainer's checkpoint had consumed. A trainer step reads
``buffer.train_batch_size`` experiences, and the pipeline saved each explorer step's
experiences in order (``buffer/explorer_output.db``, before its filters run), so the
step is the last whose running total of saved experiences fits in ``T x
train_batch_size``. Counting before the filters can only place it earlier: steps may be
explored twice, none is lost. Without that store it is ``T`` (exact for a workflow that
calls the model once per rollout).

`prune_checkpoints` keeps ``trainer.max_checkpoints_to_keep`` across resumes, which
Trinity does not: its verl trainer prunes from a list of the checkpoints it saved, kept in
memory and empty in each new process (``trinity/trainer/verl/trainer.py``,
``_retain_checkpoints``; verl's own ``max_ckpt_to_keep`` is not passed,
``trinity/trainer/verl/workers.py``, ``save_checkpoint``), so every ``global_step_N``
saved before a resume would stay forever. `rewind_explorer` prunes first.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...runs.run_files import step_dir_name
from ...runs.rundir import checkpoints

#: verl's record of the trainer's latest checkpoint step, in the run directory.
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
#: Trinity's record of the latest state dict saved for the explorer to load
#: (``trinity/trainer/verl/trainer.py``, ``CheckpointMonitor``).
STATE_DICT_TRACKER = "latest_state_dict_iteration.txt"


def trainer_step(run_dir: Path) -> int:
    """The step the trainer resumes from: its latest checkpoint (0: none)."""
    tracker = run_dir / CHECKPOINT_TRACKER
    try:
        step = int(tracker.read_text().strip())
    except (OSError, ValueError):
        return 0
    return step if (run_dir / step_dir_name(step)).is_dir() else 0


def _step_in(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _explorer_step(run_dir: Path, loaded: Any) -> int | None:
    try:
        state = json.loads((run_dir / f"{loaded.explorer.name}_meta.json").read_text())
        return int(state.get("latest_iteration", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def prune_checkpoints(run_dir: Path, loaded: Any) -> str | None:
    """Before a resume, remove the ``global_step_N`` folders of ``run_dir`` beyond the
    run's retention (see the module docstring); return a line naming them, or None.

    Kept: the newest ``trainer.max_checkpoints_to_keep`` folders up to the trainer's latest
    checkpoint (the one resumed from, always), those after it (a save the stop cut short,
    which the trainer saves again), and the steps the explorer's saved state and Trinity's
    state-dict record point at. 0 or unset keeps all. The folders kept here stay until the
    next resume (the resumed trainer prunes only what it saves), so a resumed run holds at
    most twice the retention.
    """
    keep = getattr(getattr(loaded, "trainer", None), "max_checkpoints_to_keep", 0) or 0
    trained = trainer_step(run_dir)
    if keep <= 0 or trained == 0:
        return None
    steps = [step for step, _ in checkpoints(run_dir)]
    kept = {step for step in steps if step > trained}
    kept |= set([step for step in steps if step <= trained][-keep:])
    kept |= {step for step in (_explorer_step(run_dir, loaded),
                               _step_in(run_dir / STATE_DICT_TRACKER)) if step is not None}
    removed = [step for step in steps if step not in kept]
    if not removed:
        return None
    for step in removed:
        shutil.rmtree(run_dir / step_dir_name(step))
    names = ", ".join(step_dir_name(step) for step in removed)
    return (f"resume: removed {names} from {run_dir}: trainer.max_checkpoints_to_keep = "
            f"{keep} keeps the newest {keep} up to step {trained}, the one resumed from "
            f"(Trinity's trainer prunes only the checkpoints its own process saved)")


def consumed_step(counts: Iterable[tuple[int, int]], experiences: int) -> int:
    """The last explorer step whose experiences all fit in the first ``experiences`` a
    trainer read, from ``(step, experiences saved)`` in step order."""
    total, last = 0, 0
    for step, count in counts:
        total += count
        if total > experiences:
            break
        last = step
    return last


def saved_counts(run_dir: Path, config: dict[str, Any]) -> list[tuple[int, int]] | None:
    """``(explorer step, experiences saved)`` from the pipeline's store, in step order
    (a step saved twice counts once, its later copy), or None without a store."""
    from ...trinity_runs.experiences import latest_batches, read_experiences

    notes: list[tuple[str, str]] = []
    experiences = list(read_experiences(run_dir, config, notes))
    if not experiences:
        return None
    counts: dict[int, int] = {}
    for experience in latest_batches(experiences)[0]:
        batch = experience["eid"].get("batch")
        if isinstance(batch, int) or (isinstance(batch, str) and batch.isdigit()):
            counts[int(batch)] = counts.get(int(batch), 0) + 1
    return sorted(counts.items())


def rewind_explorer(run_dir: Path, config: dict[str, Any], loaded: Any) -> str | None:
    """Prepare ``run_dir`` for a resume: remove the checkpoints beyond its retention
    (`prune_checkpoints`), then move the explorer's saved position back to the trainer's
    checkpoint (see the module docstring); return a line saying what was done, or None
    when nothing had to be.

    Args:
        run_dir: The run directory.
        config: The run's Trinity config (a dict).
        loaded: Trinity's checked ``Config`` for it (names, batch sizes).
    """
    pruned = prune_checkpoints(run_dir, loaded)
    moved = _rewind(run_dir, config, loaded)
    if pruned and moved:  # one line: the callers print it as one ``ok`` line
        return f"{pruned}; {moved.removeprefix('resume: ')}"
    return pruned or moved


def _rewind(run_dir: Path, config: dict[str, Any], loaded: Any) -> str | None:
    state_file = run_dir / f"{loaded.explorer.name}_meta.json"
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return None
    explored, trained = int(state.get("latest_iteration", 0)), trainer_step(run_dir)
    counts = saved_counts(run_dir, config)
    back_to = min(explored, trained if counts is None else consumed_step(
        counts, trained * loaded.buffer.train_batch_size))
    if back_to >= explored:
        return None
    state["latest_iteration"] = back_to
    state["taskset_states"] = [{**taskset, "current_index": back_to * loaded.buffer.batch_size}
                               for taskset in state.get("taskset_states") or [{}]]
    state_file.write_text(json.dumps(state, indent=2))
    source = ("the experiences it saved" if counts is not None else
              "one trainer step per explorer step (no experience store to count)")
    return (f"resume: the trainer's last checkpoint is step {trained} and the explorer had "
            f"reached step {explored}; the explorer goes back to step {back_to}, the last "
            f"one the checkpoint trained on in full (counted from {source}), so no "
            f"explored step is lost")
