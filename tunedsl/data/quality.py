"""One streamed pass over a dataset's rows: missing keys and columns of mixed types.

Local JSON and JSON Lines files (and compressed ones beside them) are read line by line
with the standard library, so a row's number is its line and its values keep the types
written (``datasets`` would cast a column mixing ``"2"`` and ``3`` to one type, hiding the
mix). Other datasets stream through ``datasets``; their row numbers count from 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from ..config.paths import local_path
from .datasets import refuse_unreadable_files
from .datasets import rows as stream_rows
from .json_files import json_files, json_rows, read_json_files
from .written import written_rows

#: Rows a check reads at most (it says so when a dataset has more).
MAX_ROWS = 100_000
_TYPE_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean",
               type(None): "null", list: "list", dict: "object"}


@attrs.define
class Quality:
    """What one pass over a dataset found.

    Attributes:
        rows: Rows read.
        truncated: Whether the dataset has more rows than were read.
        missing: For each key asked about that some rows lack: how many lack it and where
            the first one is.
        nulls: For each key asked about that is null in some rows: how many, and where the
            first one is.
        types: For each column: each value type seen and where it is first seen.
        keys: Every key seen in some row.
    """

    rows: int = 0
    truncated: bool = False
    missing: dict[str, tuple[int, str]] = attrs.field(factory=dict)
    nulls: dict[str, tuple[int, str]] = attrs.field(factory=dict)
    types: dict[str, dict[str, str]] = attrs.field(factory=dict)
    keys: set[str] = attrs.field(factory=set)

    def mixed(self) -> dict[str, dict[str, str]]:
        """Columns whose values have more than one type (null aside)."""
        return {key: seen for key, seen in self.types.items()
                if len([kind for kind in seen if kind != "null"]) > 1}


def located_rows(dataset: Any, *, split: str | None = None, label: str = "dataset",
                 limit: int = MAX_ROWS) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, row)`` for each row, ``where`` being ``file:line`` for local JSON Lines
    (else ``row N``); a reader stops after ``limit + 1`` rows of other formats."""
    split = split or dataset.split
    refuse_unreadable_files(local_path(dataset), label)
    files = read_json_files(local_path(dataset), split)
    if files == json_files(local_path(dataset), split):
        found = json_rows(files, label) if files else None
    else:  # compressed ones beside, read decompressed as the library reads them (None: of a
        found = written_rows(files, label)  # compression whose optional module is missing)
    if found is not None:
        return found
    return ((f"row {number}", row) for number, row in
            enumerate(stream_rows(dataset, split, label, limit=limit + 1), start=1))


def scan(dataset: Any, keys: Iterable[str], *, split: str | None = None,
         label: str = "dataset", limit: int = MAX_ROWS) -> Quality:
    """Read up to ``limit`` rows once; count the rows lacking each of ``keys`` or holding
    null for it, and note each column's value types, with where each is first seen."""
    located = located_rows(dataset, split=split, label=label, limit=limit)
    quality = Quality()
    wanted = list(dict.fromkeys(keys))
    for where, row in located:
        if quality.rows == limit:
            quality.truncated = True
            break
        quality.rows += 1
        quality.keys.update(row)
        for key in wanted:
            found = quality.missing if key not in row else \
                quality.nulls if row[key] is None else None
            if found is not None:
                count, first = found.get(key, (0, where))
                found[key] = (count + 1, first)
        for key, value in row.items():
            kind = _TYPE_NAMES.get(type(value), type(value).__name__)
            quality.types.setdefault(key, {}).setdefault(kind, where)
    return quality
