"""How a command runs its rollouts, one record for eval, model selection and tune-prompt."""

from __future__ import annotations

import attrs

from ..rollout.run import DEFAULT_CONCURRENCY


@attrs.frozen(kw_only=True)
class Execution:
    """How a command runs its rollouts.

    Attributes:
        concurrency: Rollouts in flight at once.
        resume: Continue the file the command writes (what it holds is not run again).
        progress: Show a progress bar on stderr.
    """

    concurrency: int = DEFAULT_CONCURRENCY
    resume: bool = False
    progress: bool = True
