"""tunedsl's experience operator for Trinity's pipeline: a failed rollout's whole group
is dropped (``Algorithm(on_failed_rollout="drop_group")``).

Trinity's pipeline names an operator by its registry key or, as here, by its import path
(``data_processor.experience_pipeline.operators``; ``config.py`` puts it first).
"""

from __future__ import annotations

from typing import Any

from trinity.buffer.operators import ExperienceOperator
from trinity.common.experience import group_by

from ...dsl.trinity_fields import FAILED_ROLLOUT


class DropFailedGroups(ExperienceOperator):
    """Drops every experience of a task one of whose rollouts failed: the workflow returns
    a placeholder marked `FAILED_ROLLOUT` for such a rollout (which Trinity's
    ``invalid_reward_filter`` would drop alone), so the group's baseline is never the
    survivors' only."""

    def process(self, exps: list[Any]) -> tuple[list[Any], dict[str, float]]:
        kept, dropped = [], 0
        for group in group_by(exps, id_type="task").values():
            if any(exp.info.get(FAILED_ROLLOUT) for exp in group):
                dropped += 1
            else:
                kept.extend(group)
        return kept, {"dropped_group_count": dropped,
                      "filtered_count": len(exps) - len(kept)}
