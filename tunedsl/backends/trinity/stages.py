"""Running a Trinity config's stages (a warm-up, then RL), each checked as a run is.

Trinity's own ``trinity run`` walks ``stages`` in ``cli/launcher.py``: each stage is the
config with the stage's sections in place of the top-level ones (``Config.__iter__``, its
folder ``<run>/<stage>``), started from the previous stage's last Hugging Face checkpoint,
and ``StateManager`` records the stage reached so that a resumed run skips the finished
ones. tunedsl walks them the same way, with Trinity's own pieces, but checks each stage's
outcome as it checks a single-stage run: a stage whose launcher reports failure, or whose
actor logged an error its loop swallowed, ends the run (exit 1) before the next stage
starts from a checkpoint that is not there.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import RunError
from ...wording import option
from .resume import rewind_explorer
from .run_logs import (
    TRAINER_FINISHED,
    actor_logs,
    log_ends,
    stale_sync,
    swallowed_error,
    trainer_cut_off,
)
from .unattended import unattended


class FailureWatch(threading.Thread):
    """Ends a run whose explorer or trainer loop has swallowed an error.

    Trinity 0.6.0's loops log the error and stop; the other side then waits for what will
    never come: a trainer for the next step's experiences (``max_read_timeout``), the
    launcher for the trainer (``synchronizer.sync_timeout``, ``cli/launcher.py``). Both are
    derived from the run's own bounds and can be days. Every few seconds this reads what
    the actors appended to their logs; on a swallowed error it kills the run's explorer and
    trainer actors, so the launcher's wait returns at once and the run reports the error."""

    def __init__(self, ends: dict[Path, int], log_dir: str, actors: tuple[str, ...],
                 namespace: str, seconds: float = 3.0) -> None:
        super().__init__(name="tunedsl-failure-watch", daemon=True)
        self.ends, self.log_dir, self.actors = ends, log_dir, actors
        self.namespace, self.seconds = namespace, seconds
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(self.seconds):
            if swallowed_error(self.ends, self.log_dir, self.actors) is not None:
                self._end_actors()
                return

    def _end_actors(self) -> None:
        import ray

        for name in self.actors:
            try:
                ray.kill(ray.get_actor(name, namespace=self.namespace))
            except Exception:  # gone already, or Ray disconnected: nothing to end
                pass

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=10)


def run_checked(trinity: Any, run_dir: Path, label: str = "the Trinity run",
                log_dir: str | None = None) -> float:
    """Run one checked Trinity ``Config`` with Trinity's ``run_stage``; return its seconds.
    Its actors log in ``log_dir``: the job's, which a stage's actors write to, not the
    stage's own ``log.save_dir`` (they are made with no runtime_env of their own, so
    they read ``TRINITY_LOG_DIR`` from the job's: ``trainer/trainer.py``, ``utils/log.py``).

    Raises:
        RunError: the launcher reports a failure, or an actor's loop swallowed an error.
    """
    from trinity.cli.launcher import run_stage

    log_dir = log_dir or trinity.log.save_dir
    actors = (trinity.explorer.name, trinity.trainer.name)
    ends = log_ends(actor_logs(log_dir, actors))
    watch = FailureWatch(ends, log_dir, actors, trinity.ray_namespace)
    watch.start()
    try:
        status = run_stage(trinity)
    except Exception as exc:  # raised, not reported: the stage never ran (its actors failed)
        reason = ' '.join(str(exc).split()) or "no message"
        raise RunError(f"{label} failed ({type(exc).__name__}: {reason}); logs in "
                       f"{log_dir}") from None
    finally:
        watch.stop()
    # Trinity's loops log an error and stop; its launcher then says success, or fails later
    # on what that left behind (a sync that never came): the logged error is the cause.
    swallowed = swallowed_error(ends, log_dir, actors)
    if not status.success:
        error = status.error
        detail = swallowed or (f"{error.type_name}: {error.message}" if error
                               else "no error reported")
        raise RunError(f"{label} failed ({detail}); logs in {log_dir}")
    if swallowed is not None:
        raise RunError(f"{label} failed mid-run ({swallowed}), though Trinity reported "
                       f"success; the run directory {run_dir} can be resumed with "
                       f"{option('resume', run_dir)} once the cause is fixed")
    # Past synchronizer.sync_timeout the launcher stops waiting for the trainer, and a
    # sync goes on with stale weights, each logged at most (bounds.py).
    cut_off = trainer_cut_off(ends, log_dir, trinity.trainer.name)
    if cut_off is not None:
        raise RunError(f"{label} failed: the trainer never reached its final checkpoint "
                       f"({cut_off} has no '{TRAINER_FINISHED}'; Trinity's launcher waits "
                       f"synchronizer.sync_timeout = {trinity.synchronizer.sync_timeout} s "
                       f"for it once the explorer has finished); raise trinity.synchronizer."
                       f"sync_timeout and resume with {option('resume', run_dir)}")
    stale = stale_sync(ends, log_dir, actors)
    if stale is not None:
        print(f"warning  {label}: a weight sync timed out or failed and the run went on with "
              f"stale weights ({stale}); rollouts after it sampled older weights than the "
              f"trainer had; raise trinity.synchronizer.sync_timeout", file=sys.stderr)
    return status.total_time_sec or 0.0


def run_stages(loaded: Any, run_dir: Path, config: dict[str, Any], *,
               resuming: bool = False, before_stage: Callable[[], None] | None = None,
               log_dir: str | None = None) -> float:
    """Run every stage of ``loaded`` (Trinity's loaded, unchecked ``Config`` with
    ``stages``; ``config`` is its dict) that has not finished, as Trinity's launcher does;
    return the seconds the stages run now took. Resuming, the stage it stopped in has its
    explorer moved back to its trainer's checkpoint first (`rewind_explorer`).
    Every stage's actors log in ``log_dir`` (the job's; `run_checked`).
    ``before_stage`` runs before each stage starts: Trinity's ``run_stage`` ends with
    ``ray.shutdown()``, so the launch connects again, with its own runtime_env, which
    Trinity's ``ray.init(..., ignore_reinit_error=True)`` then keeps.

    Raises:
        RunError: a stage failed (the later ones did not start); ``--resume`` runs it again.
    """
    from trinity.manager.state_manager import StateManager
    from trinity.trainer import get_latest_hf_checkpoint_path

    names = [stage.stage_name for stage in loaded.stages]
    state = StateManager(path=loaded.get_checkpoint_job_dir())
    reached = state.load_stage().get("latest_stage", 0)
    previous: str | None = None
    seconds = 0.0
    for index, stage in enumerate(loaded):
        label = f"stage {index + 1}/{len(names)} ({names[index]})"
        if index < reached:
            print(f"{label}: finished before; skipped", file=sys.stderr)
        else:
            state.save_stage(index)
            if previous is not None:
                stage.model.model_path = previous
        with unattended(quiet=True):
            stage.check_and_update()
        if index == reached and resuming and stage.mode != "train":
            moved = rewind_explorer(Path(stage.checkpoint_job_dir), config, stage)
            if moved is not None:
                print(f"ok  {moved}", file=sys.stderr)
        if index >= reached:
            print(f"{label}: starting from {stage.model.model_path}; its folder is "
                  f"{stage.checkpoint_job_dir}", file=sys.stderr)
            if before_stage is not None:
                before_stage()
            seconds += run_checked(stage, run_dir, f"{label} of the Trinity run", log_dir)
        previous = get_latest_hf_checkpoint_path(stage)
        if previous is None and index + 1 < len(names):
            raise RunError(f"{label} left no Hugging Face checkpoint in "
                           f"{stage.checkpoint_job_dir} for {names[index + 1]} to start "
                           f"from; its logs are in {log_dir or stage.log.save_dir}")
    return seconds
