"""Eval tasksets a Trinity config adds beside the experiment's ``eval_dataset``: a base
YAML's second and later ones, or new names under ``[trinity]``'s
``buffer.explorer_input.eval_tasksets``.

tunedsl writes one eval taskset, its ``eval_dataset``, and checks that one's data as every
dataset's; the others went to Trinity unread, so a missing folder or a key the workflow
reads that their rows lack surfaced only at the run's first evaluation, on GPUs. Each is
read here as ``eval_dataset`` is, when it runs tunedsl's workflow (one of another workflow
reads its own keys: only that it holds rows is checked).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ...checks.preflight import Note, check_dataset
from ...config.graph import ExperimentGraph
from ...config.nested import get_path
from ...data.quality import located_rows
from ...dsl.records import Dataset
from ...dsl.settings_table import TASKSET_MAP
from ...dsl.trinity_fields import EVAL_TASKSETS
from ...errors import ConfigError, DatasetError
from .config import workflow_class


def added_eval_tasksets(graph: ExperimentGraph,
                        config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The eval tasksets of ``config`` that are not the experiment's ``eval_dataset`` (which
    tunedsl writes first)."""
    _, tasksets = get_path(config, EVAL_TASKSETS)
    entries = [t for t in tasksets or () if isinstance(t, dict)]
    return entries[1:] if graph.eval_dataset is not None else entries


def check_added_eval_tasksets(graph: ExperimentGraph, config: Mapping[str, Any],
                              backend: str) -> list[str]:
    """A report line for each added eval taskset whose data reads as ``eval_dataset``'s
    would, or a note that the local backend does not evaluate it.

    Raises:
        DatasetError: every added taskset's problem, one line each, named by its path in
            the Trinity config.
    """
    lines: list[str] = []
    problems: list[str] = []
    for entry in added_eval_tasksets(graph, config):
        name = entry.get("name")
        section = f"{EVAL_TASKSETS}.{name}"
        fields = {field: entry[key] for field, key in TASKSET_MAP if entry.get(key) is not None}
        if not isinstance(fields.get("path"), str):
            problems.append(f"{section}: it has no path to read its tasks from; give "
                            f"path = a dataset folder or file")
            continue
        try:
            dataset = Dataset(**fields)
        except ConfigError as exc:
            problems.append(f"{section}: {exc}")
            continue
        # [trinity]'s paths are written as given: relative ones are read from the folder the
        # run starts in, as tunedsl.toml's own are (the record takes its maker's file's).
        object.__setattr__(dataset, "defined_in", os.getcwd())
        try:
            if entry.get("default_workflow_type") in (None, workflow_class(graph)):
                line, _ = check_dataset(graph, section, dataset, training=False)
            else:
                if next(iter(located_rows(dataset, label=section)), None) is None:
                    raise DatasetError(f"{section}: {dataset.path} (split "
                                       f"{dataset.split!r}) has no rows")
                line = f"{section}: {dataset.path} (split {dataset.split!r}) has tasks"
        except DatasetError as exc:
            problems.append(str(exc))
            continue
        lines.append(line)
        if backend == "local":
            lines.append(Note(f"local: {section} is evaluated by Trinity only; the local "
                              f"backend evaluates eval_dataset"))
    if problems:
        raise DatasetError("\n".join(problems))
    return lines
