"""Names Trinity-RFT 0.6.0 registers, kept here so `import tunedsl` need not import Trinity.

``tests/test_catalog.py`` checks these tables against Trinity's own registries.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: Trinity's ``ALGORITHM_TYPE`` registry keys (trinity/algorithm/__init__.py).
ALGORITHM_TYPES: tuple[str, ...] = (
    "asymre", "cispo", "cpt", "dapo", "dpo", "gigpo", "grpo", "grpo_verl", "gspo", "jsd",
    "mix", "mix_chord", "multi_step_grpo", "on_policy_distill", "opmd", "ppo", "raft",
    "rec", "reinforceplusplus", "rloo", "sapo", "sft", "sppo", "topr",
)  # fmt: skip

#: Algorithms whose default advantage function compares rollouts within a group of the
#: same task (grpo, step_wise_grpo, gigpo, rloo, opmd, asymre, rec): a group of one has
#: nothing to compare with, so these need ``group_size >= 2``.
GROUP_ALGORITHMS: frozenset[str] = frozenset({
    "asymre", "cispo", "dapo", "gigpo", "grpo", "grpo_verl", "gspo", "mix", "mix_chord",
    "multi_step_grpo", "opmd", "rec", "rloo", "sapo", "sppo",
})  # fmt: skip

#: Trinity's monitor types (trinity/utils/monitor.py).
MONITOR_TYPES: tuple[str, ...] = ("mlflow", "swanlab", "tensorboard", "wandb")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_name_message(kind: str, value: object, choices: Iterable[str]) -> str:
    """The one-line message for a value that is not one of ``choices``."""
    choices = sorted(choices)
    hint = did_you_mean(str(value), choices)
    return f"{value!r} is not a known {kind}{hint}; choose one of: {', '.join(choices)}"
