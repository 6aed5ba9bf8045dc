"""A Trinity run's ``config.yaml``, read for ``tunedsl view``'s Trinity source
(`trinity_run`).

tunedsl's launcher writes it; ``trinity run --config`` reads it: the run's name, project,
algorithm and model become summary rows (`config_rows`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..runs.run_files import CONFIG_YAML


def read_config(path: Path, notes: list[tuple[str, str]] | None = None) -> Any:
    """``config.yaml`` parsed, or None when it is missing or unreadable (a note says
    which, when ``notes`` is given: a bad config should not hide the run's data)."""
    if not path.is_file():
        return None
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        if notes is not None:
            reason = " ".join(str(exc).split())
            notes.append((CONFIG_YAML, f"not read ({reason})"))
        return None


def config_value(config: Any, dotted: str) -> Any:
    """``config[a][b]...`` for ``dotted`` ``"a.b"``, None where a level is missing."""
    for key in dotted.split("."):
        if not isinstance(config, dict):
            return None
        config = config.get(key)
    return config


def config_rows(config: Any) -> list[tuple[str, str]]:
    """The run's name, project, algorithm and model, as far as the config gives them."""
    rows = []
    for label, dotted in (("name", "name"), ("project", "project"),
                          ("algorithm", "algorithm.algorithm_type"),
                          ("model", "model.model_path")):
        value = config_value(config, dotted)
        if value not in (None, ""):
            rows.append((label, str(value)))
    return rows
