"""What a workflow and a judge return."""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class WorkflowOutput:
    """The result of one run of a ``@workflow``.

    Attributes:
        response: Whatever the agent produced; it is handed to the judge as is.
        reward: Set it when the workflow scores itself; the judge is then optional.
        metrics: Extra numbers to log for this rollout.
    """

    response: Any = None
    reward: float | None = None
    metrics: dict[str, float] | None = None


@attrs.frozen
class JudgeOutput:
    """The score a ``@judge`` gives one workflow response.

    Attributes:
        reward: The reward the RL algorithm optimises.
        metrics: Extra numbers to log for this rollout.
    """

    reward: float
    metrics: dict[str, float] | None = None
