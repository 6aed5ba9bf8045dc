"""A local folder's split files must agree on their columns.

The datasets library (through which eval, a local run, `preview` and Trinity read a
folder) infers the columns and their types from the folder's first split and casts every
other split's rows to them. A key one split has and another lacks, or a value typed
differently (``2`` in one split, ``2.5`` or ``"2"`` in another), either fails to load
("Couldn't cast", naming no column) or reaches the workflow changed: a missing key as
null, ``2`` as ``2.0``, a number as text. tunedsl's own reader reads each file as written,
so without this check `check` passed what `eval` then refused or changed.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from ..errors import DatasetError
from .json_files import json_files, json_rows

#: The split names the datasets library maps files to, in the order it lists them: the
#: first split found sets the folder's columns.
SPLITS_IN_ORDER = ("train", "validation", "valid", "dev", "test", "eval")

#: A JSON value's kind, as Arrow types a column (ints and floats are different columns).
_KINDS = {str: "text", bool: "a boolean", int: "an integer", float: "a number with a "
          "fraction", type(None): "null"}


def kind(value: Any) -> str:
    """A JSON value's type as a column holds it, nested ones spelled out (``a list of
    an integer``); null inside a list or an object fits any type."""
    if isinstance(value, dict):
        inner = ", ".join(f"{key}: {kind(item)}" for key, item in sorted(value.items()))
        return f"an object {{{inner}}}"
    if isinstance(value, list):
        kinds = sorted({kind(item) for item in value} - {"null"})
        return f"a list of {' or '.join(kinds) or 'nothing'}"
    return _KINDS.get(type(value), type(value).__name__)


@functools.lru_cache(maxsize=64)
def _columns(file: str, _stamp: tuple[int, int]) -> dict[str, tuple[frozenset[str], str]]:
    """Each column of a JSON (Lines) file: the kinds of its non-null values (``null`` when
    it holds only nulls) and the file:line of its first row. Cached by the file's size and
    modification time, so a command reading a folder's splits reads each file once."""
    found: dict[str, tuple[set[str], str]] = {}
    for where, row in json_rows([file], "dataset"):
        for key, value in row.items():
            kinds, _ = found.setdefault(key, (set(), where))
            kinds.add(kind(value))
    return {key: (frozenset(kinds - {"null"} or kinds), where)
            for key, (kinds, where) in found.items()}


def _read_columns(file: str) -> dict[str, tuple[frozenset[str], str]] | None:
    """`_columns`, or None for a file the reader refuses (its own split's read names why)."""
    try:
        stat = os.stat(file)
        return _columns(file, (stat.st_size, stat.st_mtime_ns))
    except (DatasetError, OSError, RecursionError, ValueError):
        return None


def refuse_splits_that_disagree(path: str, split: str, label: str) -> None:
    """Refuse ``split`` of a local folder when one of its JSON (Lines) files disagrees on
    a column's presence or type with the folder's first file (the first split's), naming
    the file:line where the column first differs. The first split's own files are read
    as written, so only its later shards are compared.

    Raises:
        DatasetError: one line naming both files, the key and the fix.
    """
    if not os.path.isdir(path):
        return
    present = [(name, json_files(path, name)) for name in SPLITS_IN_ORDER]
    present = [(name, files) for name, files in present if files]
    asked = [files for name, files in present if name == split]
    if not asked or (len(present) < 2 and len(asked[0]) < 2):
        return
    reference = present[0][1][0]
    first = _read_columns(reference)
    if first is None:
        return
    for file in asked[0]:
        columns = None if file == reference else _read_columns(file)
        problem = None if columns is None else _difference(reference, first, file, columns)
        if problem is not None:
            raise DatasetError(f"{label}: {problem}; the datasets library reads a folder's "
                               f"splits with the columns of its first file "
                               f"({os.path.basename(reference)}), so these rows would fail "
                               f"to load or reach the workflow changed; give every split the "
                               f"same keys, each with one type of value, or put each split "
                               f"in a folder of its own")


def _difference(first_file: str, first: dict[str, tuple[frozenset[str], str]],
                file: str, columns: dict[str, tuple[frozenset[str], str]]) -> str | None:
    """How ``file``'s columns differ from the first split's, in words (None: they agree)."""
    for key, (_, where) in columns.items():
        if key not in first:
            return f"{where} has the key {key!r}, which no row of {first_file} has"
    for key, (_, where) in first.items():
        if key not in columns:
            return f"{file} has no row with the key {key!r}, which {where} has"
    for key, (kinds, where) in columns.items():
        expected, first_where = first[key]
        if kinds != expected and kinds != {"null"}:  # (a column of nulls casts to any type)
            return (f"{where}: {key!r} is {' or '.join(sorted(kinds))}, and "
                    f"{' or '.join(sorted(expected))} in {first_where}")
    return None
