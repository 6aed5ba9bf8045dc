"""Local JSON and JSON Lines files read with the standard library, each row named by its
file and line: what `check` reports on, and where a reader that failed without saying
where (the datasets library) finds the line to fix.

A row's values keep the types written (``datasets`` would cast a column mixing ``"2"``
and ``3`` to one type, hiding the mix).
"""

from __future__ import annotations

import glob
import io
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from ..access import where_a_broken_link_leads
from ..errors import DatasetError
from ..text import holds_a_lone_surrogate
from .compressed import MODULES, kind, opened

#: The deepest nesting Arrow (the datasets library's reader, and Trinity's) takes: a row of
#: 64 nested containers is "Recursion level in ArrowSchema struct exceeded".
ARROW_NESTING = 63


def nesting(value: Any) -> int:
    """How many containers deep a JSON value goes (a row of scalars: 1), counted without
    recursion, so no depth a JSON reader returns is too deep to count."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((inner, depth + 1) for inner in item)
    return deepest


def lone_surrogate(row: Any) -> str | None:
    """Where in a JSON row a string holds a lone surrogate (``"the key 'a\\ud800'"``,
    ``"the value at 'messages.0.content'"``), or None; walked without recursion."""
    stack: list[tuple[Any, str]] = [(row, "")]
    while stack:
        value, at = stack.pop()
        if isinstance(value, str):
            if holds_a_lone_surrogate(value):
                return f"the value at {at!r}" if at else "the row"
        elif isinstance(value, dict):
            for key, inner in value.items():
                if isinstance(key, str) and holds_a_lone_surrogate(key):
                    return f"the key {key!r}"
                stack.append((inner, f"{at}.{key}" if at else str(key)))
        elif isinstance(value, list):
            stack.extend((inner, f"{at}.{index}") for index, inner in enumerate(value))
    return None


def surrogate_problem(where: str, found: str) -> str:
    """The line for a row at ``where`` (``file:line``) that `lone_surrogate` found."""
    return (f"{where}: {found} holds a lone surrogate (a \\ud800-\\udfff escape without "
            f"its pair), which is not text a model, a tokenizer or the datasets library can "
            f"take; fix that line")


def beyond_the_reader(exc: BaseException, path: str, number: int | None) -> DatasetError | None:
    """What a JSON line the standard library's reader gave up on holds, as a `DatasetError`
    naming ``path`` and its line: nesting past its depth, or an integer past the digits
    Python converts; None for any other failure. (Handed on to the datasets library
    instead, such a line crashes pyarrow's reader, or loses the integer as null.)"""
    where = path if number is None else f"{path}:{number}"
    if isinstance(exc, RecursionError):
        return DatasetError(f"{where}: nested deeper than a JSON reader goes (about a "
                            f"thousand levels); flatten or delete that "
                            f"{'row' if number is None else 'line'}")
    if isinstance(exc, ValueError) and "integer string conversion" in str(exc):
        return DatasetError(f"{where}: holds an integer of more digits than Python "
                            f"reads (4300), far beyond the 64 bits the datasets library "
                            f"keeps; write it as a string")
    return None


class NotJsonConstant(ValueError):
    """A constant Python's JSON reader takes and JSON does not (``NaN``, ``Infinity``)."""


def refuse_constant(constant: str) -> Any:
    """``json.loads``'s ``parse_constant`` for data rows: NaN and Infinity are refused."""
    raise NotJsonConstant(constant)


class DuplicateKey(ValueError):
    """A JSON object of a data row holding one key twice."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook`` for data rows: a key given twice in one
    object is refused (Python keeps the last; Arrow, Trinity's reader, refuses the row)."""
    found = dict(pairs)
    if len(found) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return found


def duplicate_problem(where: str, key: str) -> str:
    """The line for a data row at ``where`` that gives ``key`` twice in one object."""
    return (f"{where}: the key {key!r} is given twice in one object; Python's json keeps the "
            f"last, and the datasets library (Trinity's reader too) refuses the row: keep one")


def constant_problem(where: str, constant: str) -> str:
    """The line for a data row holding NaN or Infinity at ``where`` (``file:line``)."""
    return (f"{where}: {constant} is not JSON (Python's json writes it for a float NaN or "
            f"infinity; the datasets library then reads the whole column as numbers, \"2\" "
            f"as 2); write null, or a number")


def json_lines(handle: Any, path: str, *, data: bool = False) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of an open JSON Lines file (text, or
    bytes read as UTF-8); a line that is not JSON, or not UTF-8, is a `DatasetError` naming
    ``path`` and its number, and so with ``data`` (a dataset's rows) is NaN or Infinity,
    which the datasets library reads otherwise than Python does."""
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            if data:
                refuse_odd_blank(line, f"{path}:{number}")
            continue
        try:
            value = json.loads(line, parse_constant=refuse_constant,
                               object_pairs_hook=unique_keys) if data else json.loads(line)
        except NotJsonConstant as exc:
            raise DatasetError(constant_problem(f"{path}:{number}", str(exc))) from None
        except DuplicateKey as exc:
            raise DatasetError(duplicate_problem(f"{path}:{number}", str(exc))) from None
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{number}: not a JSON line ({exc.msg}); fix or delete "
                               f"that line") from None
        except UnicodeDecodeError as exc:
            raise DatasetError(f"{path}:{number}: not UTF-8 text (byte "
                               f"0x{exc.object[exc.start]:02x}); fix or delete that "
                               f"line") from None
        except (RecursionError, ValueError) as exc:
            found = beyond_the_reader(exc, path, number)
            if found is None:
                raise
            raise found from None
        yield number, value


def refuse_odd_blank(line: str | bytes, where: str) -> None:
    """Refuse a blank line of a data file that holds more than JSON's blanks (spaces, tabs,
    line ends): Python skips a form feed or a no-break space alone on a line, and the
    datasets library (Trinity's reader too) fails on it ("JSON parse error")."""
    odd = line.strip(" \t\r\n") if isinstance(line, str) else line.strip(b" \t\r\n")
    if odd:
        raise DatasetError(f"{where}: a line of blank characters other than spaces and tabs "
                           f"({odd!r}), which the datasets library (Trinity's reader too) "
                           f"cannot read; delete that line")


def json_files(path: str, split: str) -> list[str]:
    """The JSON / JSON Lines files at a local dataset path for a split, or [] for others."""
    return split_files(path, split, (".json", ".jsonl"))


def read_json_files(path: str, split: str) -> list[str]:
    """The JSON / JSON Lines files of a split that tunedsl reads by file and line: the plain
    ones (`json_files`) and, beside them, the compressed ones (``test-more.jsonl.gz``),
    which the datasets library reads with them as one split (reading ``test.jsonl`` alone
    counted 6 of its 12 rows, and refused the split). [] when the split has no plain one:
    compressed files alone stream through the library, as other formats do."""
    if not json_files(path, split):
        return []
    return split_files(path, split, tuple(form + packed for form in (".json", ".jsonl")
                                          for packed in ("", *MODULES)))


#: Files the datasets library never reads as data (``datasets.data_files.FILES_TO_IGNORE``;
#: ``tests/test_datasets.py`` checks the two agree).
LIBRARY_FILES = frozenset({"README.md", "config.json", "dataset_info.json", "dataset_infos.json",
                           "dummy_data.zip", "dataset_dict.json"})


#: The datasets library's words for each split in a file's name
#: (``datasets.data_files.SPLIT_KEYWORDS``; ``tests/test_datasets.py`` checks the two agree).
SPLIT_KEYWORDS = {"train": ("train", "training"),
                  "validation": ("validation", "valid", "dev", "val"),
                  "test": ("test", "testing", "eval", "evaluation")}


def library_file(file: str) -> bool:
    """Whether ``file`` is the datasets library's own, no data: one `LIBRARY_FILES` names,
    or the ``state.json`` ``save_to_disk`` writes beside its ``.arrow`` files (the library
    reads a folder's most common format, Arrow there, and a folder ``save_to_disk`` wrote
    was read by tunedsl as rows of its metadata)."""
    name = os.path.basename(file)
    if name in LIBRARY_FILES:
        return True
    return name == "state.json" and bool(glob.glob(os.path.join(glob.escape(
        os.path.dirname(file) or "."), "*.arrow")))


def split_files(path: str, split: str, extensions: tuple[str, ...]) -> list[str]:
    """The files of a local dataset path for a split with one of ``extensions`` (not the
    library's own, `library_file`)."""
    if os.path.isfile(path):
        return [path] if path.lower().endswith(extensions) else []
    if not os.path.isdir(path):
        return []
    # The names datasets maps to a split (its KEYWORDS_IN_FILENAME_BASE_PATTERNS, with its
    # NON_WORDS_CHARS): "train.jsonl", "train-00000-of-00002.json", "train2.jsonl",
    # "my_train.jsonl", "train/..." (train2.jsonl, read by it, was refused: sweep 49 A-W16),
    # by each of its words for the split: "training.jsonl" (refused too: sweep 50 A-W1)
    found = sorted({file for word in SPLIT_KEYWORDS.get(split, (split,))
                    for escaped in [glob.escape(word)]
                    for file in (
                        *glob.glob(os.path.join(glob.escape(path), f"{escaped}[-._ 0-9]*")),
                        *glob.glob(os.path.join(glob.escape(path),
                                                f"*[-._ 0-9]{escaped}[-._ 0-9]*")),
                        *glob.glob(os.path.join(glob.escape(path), escaped, "*")))})
    named = [f for f in found if f.lower().endswith(extensions) and not library_file(f)]
    files = [f for f in named if os.path.isfile(f)]
    for file in named if files else ():  # (alone, the reader names it: no data files)
        if os.path.islink(file) and not os.path.exists(file):  # the split read without it
            raise DatasetError(f"{file} is a symbolic link to {os.readlink(file)}, "
                               f"{where_a_broken_link_leads(file)}, so the split would be "
                               f"read without it; point "
                               f"the link at the data, or remove it")
    return files


def check_utf8(path: str, label: str) -> None:
    """A JSON file must be UTF-8 text: else one line naming the file, line and byte (read
    a line at a time, so a large file is not held in memory)."""
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(f"{label}: {path}:{number}: not UTF-8 text (byte "
                                   f"0x{line[exc.start]:02x}); save the file as UTF-8") from None


def json_rows(files: list[str], label: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(file:line, row)`` for each row of JSON Lines (or one JSON list) files, compressed
    ones (``train.json.gz``) too."""
    for path in files:
        form, packed = kind(path)
        if not packed:  # (a compressed file's bytes: said by `written.written_rows`)
            check_utf8(path, label)
        # utf-8-sig: a byte-order mark is read past, as the datasets library (preview, run
        # and Trinity's readers) reads it. A compressed file is read decompressed as a plain
        # one is: JSON Lines in a train.json.gz were refused as one value (sweep 51 A-W7).
        with (io.StringIO(_decompressed(path, packed)) if packed else
              open(path, encoding="utf-8-sig")) as handle:
            first = handle.read(1)
            handle.seek(0)
            if form == ".json" and first == "[":
                try:
                    data = json.load(handle, object_pairs_hook=unique_keys)
                except DuplicateKey as exc:  # (one value: Python and the library keep the last)
                    raise DatasetError(f"{label}: {path}: the key {str(exc)!r} is given twice "
                                       f"in one object; Python's json and the datasets library "
                                       f"keep the last, so the first is lost: keep one") \
                        from None
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{label}: {path}:{exc.lineno}: not valid JSON "
                                       f"({exc.msg}); fix that line") from None
                except (RecursionError, ValueError) as exc:  # one value: no line to name
                    beyond = beyond_the_reader(exc, path, None)
                    if beyond is None:
                        raise
                    raise DatasetError(f"{label}: {beyond}") from None
                for index, row in enumerate(data, start=1):
                    yield task_row(f"{path} row {index}", row, label)
                continue
            if form == ".json" and first == "{":
                problem = _one_object_of_columns(handle, path)
                if problem is not None:
                    raise DatasetError(f"{label}: {problem}")
                handle.seek(0)
            lines, yielded, failure = json_lines(handle, path, data=True), 0, None
            while failure is None:
                try:
                    number, row = next(lines)
                except StopIteration:
                    break
                except DatasetError as error:
                    failure = error
                    break
                yield task_row(f"{path}:{number}", row, label)
                yielded += 1
            if failure is not None:
                failed_at = re.search(r":(\d+): not a JSON line", str(failure))
                # (a line too deep, not UTF-8, or holding what Python cannot read is said
                # as the line reader said it)
                if yielded or failed_at is None:
                    raise DatasetError(f"{label}: {failure}")
                # Pretty-printed objects, each over several lines, are rows too, as the
                # datasets library reads them; else the line that is not JSON is the one to fix.
                handle.seek(0)
                try:
                    found = _objects_over_lines(handle.read(), path)
                except DatasetError as error:
                    raise DatasetError(f"{label}: {error}") from None
                if isinstance(found, _Stopped):
                    if found.start_line <= int(failed_at.group(1)):
                        raise DatasetError(f"{label}: {failure}")
                    raise DatasetError(f"{label}: {path}:{found.error.lineno}: not valid JSON "
                                       f"({found.error.msg}); fix that line")
                if len(found) == 1 and isinstance(found[0][1], list):  # one JSON array
                    # (rows, as the datasets library reads it whatever the file's name)
                    found = [(f"{path} row {index}", row)
                             for index, row in enumerate(found[0][1], start=1)]
                for where, row in found:
                    yield task_row(where, row, label)


def _decompressed(path: str, packed: str) -> str:
    """The text of a compressed JSON file, whole (a handle `json_rows` can seek in)."""
    with opened(path, packed) as handle:
        text: str = handle.read()
    return text


#: Keys a file holds its rows under beside other keys (a version, a description).
_ROW_CONTAINERS = frozenset({"data", "rows", "examples", "items", "records", "instances",
                             "tasks", "samples"})


def _one_object_of_columns(handle: Any, path: str) -> str | None:
    """What is wrong with a ``.json`` file that is one object holding its rows as columns
    (``{"question": [...], "answer": [...]}``) or under one key (``{"data": [...]}``):
    every reader takes it as one row of lists, and the workflow fails on the first. None
    for any other file (a JSON list of one such object is one row, as written)."""
    try:
        data = json.load(handle)
    except (ValueError, RecursionError):
        return None  # JSON Lines named .json, or not JSON: the line reader says which
    if not isinstance(data, dict) or not data:
        return None
    # rows under one key: alone, or a container's name beside text or numbers only (SQuAD's
    # {"version": ..., "data": [...]}; a task's own list of objects is not taken for rows)
    lists = [key for key, value in data.items() if isinstance(value, list)]
    if len(lists) == 1 and data[lists[0]] and \
            all(isinstance(row, dict) for row in data[lists[0]]) and \
            (len(data) == 1 or (lists[0].lower() in _ROW_CONTAINERS and
             not any(isinstance(value, dict) for value in data.values()))):
        return (f"{path}: one JSON object holding its rows under {lists[0]!r}, which "
                f"is read as a single row; write the list of rows itself (a JSON list of "
                f"objects, or JSON Lines: one object per line)")
    if not all(isinstance(value, list) for value in data.values()):
        return None
    keys = ", ".join(list(data)[:4]) + (", ..." if len(data) > 4 else "")
    lengths = {len(value) for value in data.values()}
    if len(lengths) == 1 and lengths.pop() > 1:
        return (f"{path}: one JSON object whose values are lists ({keys}), which is read as "
                f"a single row, not as a column per key; write one object per task (JSON "
                f"Lines, or a JSON list of objects)")
    return None


def first_leaf(value: Any, wrong: Callable[[Any], bool], where: str = "") -> str | None:
    """Where (``key.inner[2]``) in a row's nested lists and dicts the first leaf value
    ``wrong`` holds for is, or None."""
    if isinstance(value, dict):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return where if wrong(value) else None
    for key, item in items:
        found = first_leaf(item, wrong, f"{where}.{key}" if isinstance(key, str) and where else
                           key if isinstance(key, str) else f"{where}[{key}]")
        if found is not None:
            return found
    return None


def huge_integer(value: Any) -> str | None:
    """Where a JSON value holds an integer Arrow cannot keep (past 64 bits), or None."""
    return first_leaf(value, lambda leaf: isinstance(leaf, int) and not isinstance(leaf, bool)
                      and not -2**63 <= leaf < 2**63)


def non_finite(value: Any) -> str | None:
    """Where a row holds a float NaN or infinity, or None."""
    return first_leaf(value, lambda leaf: isinstance(leaf, float) and not math.isfinite(leaf))


def endless_problem(where: str, key: str) -> str:
    """The line for a row whose number is past a float's range (``1e400``), which Python's
    json reads as infinity."""
    return (f"{where}: {key} is a number past a float's range, read as infinity, which no "
            f"results file (JSON) can hold; write it as a string, or a smaller number")


def task_row(where: str, row: Any, label: str) -> tuple[str, dict[str, Any]]:
    """``(where, row)`` for a row of a JSON or JSON Lines file as every reader takes it, or
    a `DatasetError` naming ``where``: nested past Arrow's depth, not an object, a lone
    surrogate or a number past a float's range."""
    depth = nesting(row)
    if depth > ARROW_NESTING:  # as every reader of the data says it (datasets.rows)
        raise DatasetError(f"{label}: {where}: nested {depth} levels deep, past the "
                           f"{ARROW_NESTING} the datasets library (Trinity's reader too) "
                           f"takes; flatten it, or keep the deep part as JSON text")
    if not isinstance(row, dict):
        raise DatasetError(f"{label}: {where}: a row must be a JSON object with the task's "
                           f"keys (got {type(row).__name__})")
    found = lone_surrogate(row)
    if found is not None:
        raise DatasetError(f"{label}: {surrogate_problem(where, found)}")
    endless = non_finite(row)
    if endless is not None:
        raise DatasetError(f"{label}: {endless_problem(where, endless)}")
    key = huge_integer(row)
    if key is not None:  # as every reader says it (datasets.plain_jsonl_rows)
        raise DatasetError(f"{label}: {where}: {key} is an integer beyond 64 bits, which the "
                           f"datasets library (Trinity's reader too) turns into a float, so its "
                           f"digits are lost; write it as a string")
    return where, row


@attrs.frozen
class _Stopped:
    """Where reading a file of JSON values stopped: the error, and the line where the value
    it failed in starts."""

    error: json.JSONDecodeError
    start_line: int


def _objects_over_lines(text: str, path: str) -> list[tuple[str, Any]] | _Stopped:
    """``(file:line, value)`` for each JSON value of a file of values one after another, each
    over one line or several (where it starts); else where reading them stopped."""
    decoder, at = json.JSONDecoder(), 0
    values: list[tuple[str, Any]] = []
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return values
        try:
            value, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            return _Stopped(exc, text.count("\n", 0, at) + 1)
        except (RecursionError, ValueError) as exc:  # beyond the reader: said as such
            beyond = beyond_the_reader(exc, path, text.count("\n", 0, at) + 1)
            if beyond is None:
                raise
            raise beyond from None
        values.append((f"{path}:{text.count(chr(10), 0, at) + 1}", value))
        at = end


def json_problem(path: str, split: str, label: str) -> DatasetError | None:
    """What is wrong with the JSON or JSON Lines files at a local dataset path, named by
    file and line (for a reader that failed without saying where), or None."""
    try:
        for _ in json_rows(json_files(path, split), label):
            pass
    except DatasetError as error:
        return error
    return None
