"""A digest of each local dataset's bytes, kept in a run directory so a resume can tell
that the data it goes on over is the data the run started with.

A run resumed over edited rows would go on at its next row index of other data, and
nothing downstream could tell: the settings compare equal, the path is the same. The
digest is of the file's bytes (a folder's: every file in it but hidden ones, by its name
relative to the folder, so a project moved with its data keeps its digests).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.graph import DATASET_SECTIONS

if TYPE_CHECKING:
    from ..config.graph import ExperimentGraph

_CHUNK = 1 << 20


#: The key of ``data_digests.json`` that holds a folder's digest per file, by section.
FILES = "files"


def dataset_digests(graph: ExperimentGraph) -> dict[str, Any]:
    """``{section: digest}`` of every dataset of ``graph`` whose path is on this machine,
    and under `FILES` each folder's ``{file: digest}`` by section, so that a resume can say
    which of its files changed."""
    from ..config.paths import local_path

    found: dict[str, Any] = {}
    files: dict[str, dict[str, str]] = {}
    for section in DATASET_SECTIONS:
        dataset = getattr(graph, section, None)
        if dataset is not None and os.path.exists(local_path(dataset)):
            found[section], each = _digests(Path(local_path(dataset)))
            if each is not None:
                files[section] = each
    return {**found, FILES: files} if files else found


def bytes_digest(path: Path) -> str:
    """The sha256 (16 hex digits) of a file's bytes, or of a folder's files and names."""
    return _digests(path)[0]


def _digests(path: Path) -> tuple[str, dict[str, str] | None]:
    """`bytes_digest` of ``path``, and a folder's digest of each file by its name (None for
    a file), in one read."""
    whole = hashlib.sha256()
    if path.is_file():
        files = [(path, "")]
    else:
        files = sorted((file, file.relative_to(path).as_posix()) for file in path.rglob("*")
                       if file.is_file() and not any(part.startswith(".") for part in
                                                     file.relative_to(path).parts))
    each = {}
    for file, name in files:
        whole.update(f"{name}\0{file.stat().st_size}\0".encode())
        alone = hashlib.sha256()
        with file.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                whole.update(chunk)
                alone.update(chunk)
        each[name] = alone.hexdigest()[:16]
    return whole.hexdigest()[:16], None if path.is_file() else each


def changed_datasets(recorded: dict[str, Any], now: dict[str, Any],
                     paths: dict[str, str] | None = None) -> list[str]:
    """The sections whose digest differs between a run's start (``recorded``) and now,
    as ``section's data (digest A -> B)``; a section either side lacks is not compared.
    Sections of one folder (``paths``, by section) are said once, as that folder: a digest
    is of the whole folder, so a change to the eval split alone was blamed on the training
    data too (sweep 46 B-W1). A folder's files that changed are named where both sides
    keep their digests (`FILES`; a run from before they were kept says "one of its
    files")."""
    changed = [section for section in DATASET_SECTIONS
               if section in recorded and section in now and recorded[section] != now[section]]
    said, lines = set(), []
    for section in changed:
        if section in said:
            continue
        shared = [other for other in changed
                  if paths and paths.get(other) is not None
                  and paths.get(other) == paths.get(section)]
        said.update(shared)
        digest = f"its digest {recorded[section]} -> {now[section]}"
        files = _changed_files(recorded, now, section)
        if paths and len(shared) > 1:
            lines.append(f"{paths[section]} (the data of {' and '.join(shared)}: "
                         f"{files or 'one of its files'}; {digest})")
        else:
            lines.append(f"{section}'s data ({files + '; ' if files else ''}{digest})")
    return lines


def _changed_files(recorded: dict[str, Any], now: dict[str, Any], section: str) -> str:
    """Which of a folder's files changed, were added or removed (``train.jsonl changed,
    old.jsonl added``), or "" when either side keeps no digest per file."""
    before, after = (side.get(FILES, {}).get(section) if isinstance(side.get(FILES), dict)
                     else None for side in (recorded, now))
    if not isinstance(before, dict) or not isinstance(after, dict):
        return ""
    said = [f"{name} {what}" for name in sorted(set(before) | set(after)) for what in (
        "added" if name not in before else "removed" if name not in after else
        "changed" if before[name] != after[name] else None,) if what]
    return ", ".join(said[:3]) + (f" and {len(said) - 3} more" if len(said) > 3 else "")
