"""A Trinity-RFT 0.6.0 run directory (``<checkpoint_root_dir>/<project>/<name>/``) as a
view `Source`.

What is read, all of it what Trinity itself writes there, each by its own module:

* ``config.yaml``: the run's name, project, algorithm and model, as summary rows
  (`tunedsl.trinity_runs.config`);
* ``monitor/tensorboard/``: the scalars Trinity's ``TensorboardMonitor`` wrote, as the
  curves (`tensorboard`);
* ``buffer/``: the experiences the explorer produced, grouped into rollouts
  (`tunedsl.trinity_runs.experiences`, which resume reads too).

Nothing here, nor in those modules, imports Trinity, torch or tensorboard until a
function needs it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ..runs.run_files import BUFFER_DIR, CONFIG_YAML, TENSORBOARD_DIR
from ..trinity_runs.config import config_rows, read_config
from ..trinity_runs.experiences import group_rollouts, latest_batches, read_experiences
from .source import Entry, Source, ViewRollout, number_or_none, run_summary
from .tensorboard import read_tensorboard

#: Keys that mark a YAML mapping as a Trinity config (any one of them).
CONFIG_KEYS = ("mode", "buffer", "explorer")


def is_trinity_run(path: Path) -> bool:
    """Whether ``path`` looks like a Trinity run directory: it has Trinity's TensorBoard
    monitor folder, a ``buffer/`` holding experience stores (``.db``/``.jsonl``), or a
    ``config.yaml`` that is a Trinity config. Cheap: a few stats and, at most, one small
    YAML file."""
    if (path / TENSORBOARD_DIR).is_dir():
        return True
    buffer = path / BUFFER_DIR
    if buffer.is_dir() and any(child.suffix in (".db", ".jsonl")
                               for child in buffer.iterdir()):
        return True
    config = read_config(path / CONFIG_YAML)
    return isinstance(config, dict) and any(key in config for key in CONFIG_KEYS)


class TrinityRunSource(Source):
    """A Trinity run directory: config rows, TensorBoard curves and the explorer's
    experiences as rollouts (see the module docstring for what comes from where).

    Its rollouts are kept in memory (a Trinity run's saved experiences are moderate
    in number), already converted to view records' calls.
    """

    kind = "trinity"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        notes: list[tuple[str, str]] = []
        config = read_config(path / CONFIG_YAML, notes)
        self.curves = read_tensorboard(path / TENSORBOARD_DIR, notes)
        experiences = list(read_experiences(path, config if isinstance(config, dict) else {},
                                            notes))
        experiences, replaced = latest_batches(experiences)
        if replaced:
            notes.append(("experiences replaced", f"{replaced} (steps explored again after "
                                                  f"a resume; the later ones are shown)"))
        self._rollouts = group_rollouts(experiences)
        for rollout in self._rollouts:
            self.entries.append(Entry(step=rollout["step"], task_index=rollout["task_index"],
                                      run=rollout["run"], reward=number_or_none(rollout["reward"]),
                                      error=False))
        self.summary = (config_rows(config) + run_summary(self.curves, self.entries)
                        + notes)

    def record(self, index: int) -> dict[str, Any]:
        rollout = self._rollouts[index]
        return ViewRollout(id=index, step=rollout["step"], task_index=rollout["task_index"],
                           group=rollout["group"], run=rollout["run"], task=None,
                           calls=copy.deepcopy(rollout["calls"]), reward=rollout["reward"],
                           metrics=dict(rollout["metrics"])).as_json()  # callers may edit theirs
