"""tunedsl's experience operator for Trinity's pipeline: what a failed rollout leaves
(``Algorithm(on_failed_rollout=...)``), and the end of a run whose step failed whole.

Trinity's pipeline names an operator by its registry key or, as here, by its import path
(``data_processor.experience_pipeline.operators``; ``config.py`` puts it first). It runs
once per explorer step on every experience of the step (``explorer/rollout_coordinator.py``
hands the whole batch to ``ExperiencePipeline.process_serialized_chunks``).
"""

from __future__ import annotations

from typing import Any

from trinity.buffer.operators import ExperienceOperator
from trinity.common.experience import group_by

from ...dsl.trinity_fields import FAILED_ROLLOUT, ROLLOUT_ERROR


class NothingToLearn(RuntimeError):
    """Every rollout of an explorer step failed: Trinity's explorer loop logs it as the
    error that ended the run, and tunedsl's launch reports it (exit 1)."""


class FailedRollouts(ExperienceOperator):
    """Counts a step's failed rollouts and drops what ``policy`` says: ``drop`` the failed
    rollout's placeholder (`FAILED_ROLLOUT`), ``drop_group`` its task's whole group (so the
    group's baseline is never the survivors' alone), ``zero`` nothing (the workflow scored
    the rollout's experiences 0). A step whose every rollout failed leaves nothing to learn
    from, as on the local backend: raises `NothingToLearn` with the first error."""

    def __init__(self, policy: str = "drop") -> None:
        self.policy = policy

    def process(self, exps: list[Any]) -> tuple[list[Any], dict[str, float]]:
        failed = {_rollout(exp): exp.info[ROLLOUT_ERROR] for exp in exps
                  if exp.info.get(ROLLOUT_ERROR) is not None}
        rollouts = {_rollout(exp) for exp in exps}
        if rollouts and len(failed) == len(rollouts):
            first = next(iter(failed.values()))
            raise NothingToLearn(f"step {_step(exps)}: every rollout failed, so there is "
                                 f"nothing to learn from; the first error: {first}")
        kept, dropped = exps, 0
        if self.policy == "drop_group":
            kept = []
            for group in group_by(exps, id_type="task").values():
                if any(exp.info.get(FAILED_ROLLOUT) for exp in group):
                    dropped += 1
                else:
                    kept.extend(group)
        kept = [exp for exp in kept if not exp.info.get(FAILED_ROLLOUT)]
        return kept, {"rollout_errors": len(failed), "dropped_group_count": dropped,
                      "filtered_count": len(exps) - len(kept)}


class DropFailedGroups(FailedRollouts):
    """`FailedRollouts` for ``drop_group``, by the name configs written before it name."""

    def __init__(self) -> None:
        super().__init__("drop_group")


def _rollout(exp: Any) -> tuple[Any, Any, Any]:
    """One rollout's key: its step, task and run (a rollout may leave several
    experiences, one per model call)."""
    return exp.eid.batch, exp.eid.task, exp.eid.run


def _step(exps: list[Any]) -> Any:
    return exps[0].eid.batch
