"""Data files compressed as the datasets library reads them (``train.jsonl.gz``): what a
file's name says of its format and compression, and opening it as text."""

from __future__ import annotations

import importlib
import os
from typing import Any

#: The compressions the datasets library reads (by a file's last ending), with the
#: standard (or optional, for zstd) module that opens each.
MODULES = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma", ".zst": "zstandard"}
#: The compressions whose module is a package of its own, by the name fsspec (the datasets
#: library's opener) gives them: the file's ending, the package and the tool that
#: decompresses it. Without the package the library says only "Compression type lz4 not
#: supported" (sweep 50 A-W2).
OPTIONAL = {"lz4": (".lz4", "lz4", "lz4"), "zstd": (".zst", "zstandard", "zstd")}


def kind(file: str) -> tuple[str, str]:
    """A data file's format and compression by its name: ``(".jsonl", ".gz")``, or
    ``(".jsonl", "")`` for a file that is not compressed."""
    stem, ending = os.path.splitext(file.lower())
    # (.lz4 too, read by the library when its package is installed: a train.jsonl.lz4
    # given alone was "cannot tell the format")
    if ending in MODULES or ending in (".zip", ".lz4"):
        return os.path.splitext(stem)[1], ending
    return ending, ""


def opened(file: str, packed: str) -> Any:
    """``file`` opened as text, decompressed by ``packed``'s module (none: as it is).

    Raises:
        ImportError: the module of an optional compression (zstandard) is not installed.
    """
    if not packed:
        return open(file, encoding="utf-8-sig", newline="")
    module = importlib.import_module(MODULES[packed])
    return module.open(file, "rt", encoding="utf-8-sig", newline="")
