"""A Trinity run directory as a view `Source` (being written; see issue 14)."""

from __future__ import annotations

from pathlib import Path


def is_trinity_run(path: Path) -> bool:
    """Whether ``path`` looks like a Trinity run directory."""
    return (path / "monitor").is_dir() and (path / "buffer").is_dir()


class TrinityRunSource:  # placeholder until the Trinity reader lands
    def __init__(self, path: Path) -> None:
        raise NotImplementedError
