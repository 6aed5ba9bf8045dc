"""One streamed pass over a dataset's rows: missing keys and columns of mixed types.

Local JSON and JSON Lines files are read line by line with the standard library, so a
row's number is its line and its values keep the types written (``datasets`` would cast
a column mixing ``"2"`` and ``3`` to one type, hiding the mix). Other datasets stream
through ``datasets``; their row numbers count from 1.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from ..errors import DatasetError
from .datasets import json_lines, local_path
from .datasets import rows as stream_rows

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
        types: For each column: each value type seen and where it is first seen.
        keys: Every key seen in some row.
    """

    rows: int = 0
    truncated: bool = False
    missing: dict[str, tuple[int, str]] = attrs.field(factory=dict)
    types: dict[str, dict[str, str]] = attrs.field(factory=dict)
    keys: set[str] = attrs.field(factory=set)

    def mixed(self) -> dict[str, dict[str, str]]:
        """Columns whose values have more than one type (null aside)."""
        return {key: seen for key, seen in self.types.items()
                if len([kind for kind in seen if kind != "null"]) > 1}


def _json_files(dataset: Any, split: str) -> list[str]:
    """The local JSON / JSON Lines files behind a dataset and split, or [] for others."""
    path = local_path(dataset)
    if os.path.isfile(path):
        return [path] if path.lower().endswith((".json", ".jsonl")) else []
    if not os.path.isdir(path):
        return []
    # The names datasets maps to a split: "train.jsonl", "train-00000-of-00002.json", ...
    found = sorted({*glob.glob(os.path.join(path, f"{split}.json*")),
                    *glob.glob(os.path.join(path, f"{split}[-_.]*.json*")),
                    *glob.glob(os.path.join(path, split, "*.json*"))})
    return [f for f in found if f.lower().endswith((".json", ".jsonl"))]


def _check_utf8(path: str, label: str) -> None:
    """A JSON file must be UTF-8 text: else one line naming the file, line and byte (read
    a line at a time, so a large file is not held in memory)."""
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(f"{label}: {path}:{number}: not UTF-8 text (byte "
                                   f"0x{line[exc.start]:02x}); save the file as UTF-8") from None


def _json_rows(files: list[str], label: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(file:line, row)`` for each row of JSON Lines (or one JSON list) files."""
    for path in files:
        _check_utf8(path, label)
        # utf-8-sig: a byte-order mark is read past, as the datasets library (preview, run
        # and Trinity's readers) reads it.
        with open(path, encoding="utf-8-sig") as handle:
            first = handle.read(1)
            handle.seek(0)
            if path.lower().endswith(".json") and first == "[":
                try:
                    data = json.load(handle)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{label}: {path}:{exc.lineno}: not valid JSON "
                                       f"({exc.msg}); fix that line") from None
                for index, row in enumerate(data, start=1):
                    if not isinstance(row, dict):
                        raise DatasetError(f"{label}: {path} row {index}: a row must be a JSON "
                                           f"object with the task's keys (got "
                                           f"{type(row).__name__})")
                    yield f"{path} row {index}", row
                continue
            lines, yielded, failure = json_lines(handle, path), 0, None
            while failure is None:
                try:
                    number, row = next(lines)
                except StopIteration:
                    break
                except DatasetError as error:
                    failure = error
                    break
                yield _task_row(f"{path}:{number}", row, label)
                yielded += 1
            if failure is not None:
                if yielded:
                    raise DatasetError(f"{label}: {failure}")
                # Pretty-printed objects, each over several lines, are rows too, as the
                # datasets library reads them; else the line that is not JSON is the one to fix.
                handle.seek(0)
                found = _objects_over_lines(handle.read(), path)
                if isinstance(found, json.JSONDecodeError):
                    line = int(re.search(r":(\d+): not a JSON line", str(failure)).group(1))
                    if found.start_line <= line:  # it failed where the line reader did
                        raise DatasetError(f"{label}: {failure}")
                    raise DatasetError(f"{label}: {path}:{found.lineno}: not valid JSON "
                                       f"({found.msg}); fix that line")
                for where, row in found:
                    yield _task_row(where, row, label)


def _task_row(where: str, row: Any, label: str) -> tuple[str, dict[str, Any]]:
    if not isinstance(row, dict):
        raise DatasetError(f"{label}: {where}: a row must be a JSON object with the task's "
                           f"keys (got {type(row).__name__})")
    return where, row


def _objects_over_lines(text: str,
                        path: str) -> list[tuple[str, Any]] | json.JSONDecodeError:
    """``(file:line, value)`` for each JSON value of a file of values one after another, each
    over one line or several (where it starts); else the error where reading them stopped
    (its ``start_line``: where the value it failed in starts)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return values
        try:
            value, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            exc.start_line = text.count("\n", 0, at) + 1  # where the value it failed in starts
            return exc
        values.append((f"{path}:{text.count(chr(10), 0, at) + 1}", value))
        at = end


def json_problem(dataset: Any, split: str, label: str) -> DatasetError | None:
    """What is wrong with a dataset's local JSON or JSON Lines files, named by file and line
    (for a reader that failed without saying where), or None."""
    try:
        for _ in _json_rows(_json_files(dataset, split), label):
            pass
    except DatasetError as error:
        return error
    return None


def located_rows(dataset: Any, *, split: str | None = None, label: str = "dataset",
                 limit: int = MAX_ROWS) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, row)`` for each row, ``where`` being ``file:line`` for local JSON Lines
    (else ``row N``); a reader stops after ``limit + 1`` rows of other formats."""
    split = split or dataset.split
    files = _json_files(dataset, split)
    if files:
        return _json_rows(files, label)
    return ((f"row {number}", row) for number, row in
            enumerate(stream_rows(dataset, split, label, limit=limit + 1), start=1))


def scan(dataset: Any, keys: Iterable[str], *, split: str | None = None,
         label: str = "dataset", limit: int = MAX_ROWS) -> Quality:
    """Read up to ``limit`` rows once; count the rows lacking each of ``keys`` and note each
    column's value types, with where each is first seen."""
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
            if key not in row:
                count, first = quality.missing.get(key, (0, where))
                quality.missing[key] = (count + 1, first)
        for key, value in row.items():
            kind = _TYPE_NAMES.get(type(value), type(value).__name__)
            quality.types.setdefault(key, {}).setdefault(kind, where)
    return quality
