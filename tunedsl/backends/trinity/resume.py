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
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: verl's record of the trainer's latest checkpoint step, in the run directory.
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"


def trainer_step(run_dir: Path) -> int:
    """The step the trainer resumes from: its latest checkpoint (0: none)."""
    tracker = run_dir / CHECKPOINT_TRACKER
    try:
        step = int(tracker.read_text().strip())
    except (OSError, ValueError):
        return 0
    return step if (run_dir / f"global_step_{step}").is_dir() else 0


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
    from ...tools.view.trinity_experiences import latest_batches, read_experiences

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
    """Move the explorer's saved position back to the trainer's checkpoint (see the module
    docstring); return a line saying so, or None when nothing had to move.

    Args:
        run_dir: The run directory.
        config: The run's Trinity config (a dict).
        loaded: Trinity's checked ``Config`` for it (names, batch sizes).
    """
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
