"""``check`` = ``run`` for data: a local folder's split is read by the datasets library as
its files hold it, or refused by file, line and key.

Eval, a local run and Trinity's own reader read a folder through the datasets library,
which picks a split's files by its own patterns (and a dataset card's ``configs``), takes
the columns and their types from the folder's first file and casts every other file to
them: a key or a type one file has and another lacks either fails to load ("Couldn't
cast", naming no column) or reaches the workflow changed (a missing key as null, ``4`` as
``4.0``, a date as another text). Rather than guess its rules, the split is read with it,
as Trinity reads it, and compared with what the files hold, value by value.

A folder of ``train``/``validation``/``test`` JSON Lines files whose rows all have one
shape (the common case) is read alike by everything, and is not read twice.
"""

from __future__ import annotations

import array
import datetime
import os
import re
import reprlib
import tempfile
from collections.abc import Iterator
from typing import Any

from ..config.paths import local_path
from ..errors import DatasetError
from .compressed import MODULES, kind
from .datasets import (
    check_one_format,
    no_such_split,
    plain_folder,
    reason_of_failure,
    refuse_a_null_file,
    refuse_unreadable_files,
    stream,
)
from .json_files import read_json_files
from .quality import MAX_ROWS
from .written import FORMATS, Text, library_read_rows, written_rows

#: A value shown in a message: long ones cut (a 5,000-field object made a 158 KB line).
_SHOWN = reprlib.Repr()
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxdict, _SHOWN.maxlist = 60, 60, 4, 4


def refuse_rows_read_otherwise(dataset: Any, split: str | None, label: str) -> None:
    """Refuse ``split`` of a local folder when the datasets library reads its rows
    otherwise than its files hold them (or cannot read them), naming the file:line, the key
    and both values.

    Raises:
        DatasetError: one line naming where, what differs and the fix.
    """
    path = local_path(dataset)
    split = split or dataset.split
    if not os.path.isdir(path) or plain_folder(path, getattr(dataset, "name", None), label):
        return
    check_one_format(dataset, path, label)  # before the library says it in its words
    first_file, files, read = _read_as_trinity_reads(dataset, path, split, label)
    # the files check reads by file and line: test-more.jsonl.gz with test.jsonl, as the
    # library reads them (test.jsonl alone refused a split the library reads: sweep 50 B-W8)
    own = read_json_files(path, split)
    if own and {os.path.realpath(file) for file in own} != \
            {os.path.realpath(file) for file in files}:
        def named(found: list[str]) -> str:  # (by their path in the folder: a card's
            # configs may name alt/train.jsonl beside a train.jsonl)
            return ", ".join(os.path.relpath(file, path) for file in found) or "no file"

        mine = {os.path.realpath(file) for file in own}
        extra = [file for file in files if os.path.realpath(file) not in mine]
        fix = (f"move {named(extra)} out of the folder (the library takes every file whose "
               f"name holds the split's for one of its files)"
               if extra and len(extra) < len(files) else
               "name the split's files as the library reads them (train.jsonl, test.jsonl), "
               "or put each split in a folder of its own")
        alone = " alone" if mine < {os.path.realpath(file) for file in files} else ""
        raise DatasetError(f"{label}: the datasets library reads {named(files)} as "
                           f"{dataset.path}'s split {split!r} (by its file patterns, or a "
                           f"dataset card's configs), not {named(own)}{alone}; {fix}")
    found = written_rows(files, label)
    if read is None or found is None:  # no rows, or a format read in no other way
        return
    written = list(found)  # (read once; Trinity's whole read holds the split in memory too)
    first, mixed = os.path.basename(first_file), _mixed_numbers(written)
    # Trinity's reader reads the split whole; eval and a local run stream it, and the two
    # differ (a streamed .json array hands objects of mixed keys on as JSON text).
    for rows, streamed in ((iter(read), False), (iter(stream(dataset, split, label)), True)):
        _compare(written, _converted(rows, dataset, split, label, path), first, mixed,
                 label, f"{dataset.path} (split {split!r})", streamed)


def refuse_a_split_read_twice(dataset: Any, split: str | None, label: str) -> list[str]:
    """The JSON files a local folder's ``split`` is read from (the datasets library takes
    every file whose name begins with the split's), after refusing two that share rows: a
    copy, the data in two formats (``train.json`` beside ``train.jsonl``), which every
    backend read twice without a word (sweep 47 A-S3), in another order or an older copy
    that shares most of them (``train-old.jsonl``; sweep 48 A-S2).

    Each row is digested on its own (its JSON with keys sorted), so neither the order of
    rows nor of keys hides a copy. Two files are refused when at least half the rows of
    one are in the other: an older or edited copy shares most of its rows, where files of
    other tasks put together on purpose share a few at most, each a task the dataset holds
    twice, as one file may (kept, as there). Shards of one set (``train-00000-of-00002.jsonl``
    beside ``train-00001-of-00002.jsonl``) are not compared: written from one dataset, a
    row they share is one the dataset holds twice, and a big dataset is not read for it."""
    from .json_files import split_files

    path = local_path(dataset)
    split = split or dataset.split
    if not os.path.isdir(path):
        return []
    files = split_files(path, split, _SPLIT_FILE_ENDINGS)  # (train-old.csv too: sweep 49)
    if any(kind(file)[0] != ".txt" for file in files):  # a split of text files alone: a
        # notes.txt beside data of another format is not read (the library reads a folder's
        # most common format, and `check_one_format` refused two others)
        files = [file for file in files if kind(file)[0] != ".txt"]
    pairs = [(first, second) for at, first in enumerate(files) for second in files[at + 1:]
             if _shard_set(first) is None or _shard_set(first) != _shard_set(second)]
    digested: dict[str, tuple[int, int, array.array[int]]] = {}
    for file in dict.fromkeys(file for pair in pairs for file in pair):
        found = _row_digests(file, label)
        if found is None:  # (a format this does not read: the library's words on it)
            return files
        digested[file] = found
    for first, second in pairs:
        (rows_a, limit_a, held_a), (rows_b, limit_b, held_b) = digested[first], digested[second]
        limit = min(limit_a, limit_b)  # (the rows a larger file's sample keeps, in both)
        kept_a = {digest for digest in held_a if digest < limit}
        kept_b = [digest for digest in held_b if digest < limit]
        shared = sum(1 for digest in kept_b if digest in kept_a)
        fewer = min(len(kept_a), len(kept_b))
        identical = shared == len(kept_a) == len(kept_b) and rows_a == rows_b
        if not shared or 2 * shared < fewer or (shared < 2 and not identical):
            continue  # (one task, 50 times in a file of its own, shared with another: kept)
        names = [os.path.relpath(name, path) for name in (first, second)]
        said = f"the datasets library reads both as {dataset.path}'s split {split!r}"
        if identical:
            raise DatasetError(f"{label}: {names[0]} and {names[1]} hold the same rows (a "
                               f"copy, or the data in two formats), and {said}, so every task "
                               f"would be read twice; move one out of the folder")
        smaller = names[1] if len(kept_b) < len(kept_a) or (
            len(kept_b) == len(kept_a) and rows_b < rows_a) else names[0]
        share = (f"{shared:,} row{'s' * (shared > 1)} ({shared:,} of the {fewer:,} in "
                 f"{smaller})"
                 if limit == _ALL else
                 f"about {100 * shared // fewer}% of the rows of {smaller} (by a sample of "
                 f"its rows)")
        raise DatasetError(f"{label}: {names[0]} and {names[1]} share {share}, and {said}, "
                           f"so each of those tasks would be read twice; remove the older "
                           f"copy, or move it out of the folder")
    return files


#: The endings of the data files a split's files are compared by (`written_rows` reads each
#: format, compressed too): ``train-old.csv`` beside ``train.csv`` as ``.jsonl`` beside;
#: ``.arrow`` and ``.txt`` as the library reads them (`library_read_rows`; sweep 50 A-S1).
_SPLIT_FILE_ENDINGS = (*(form + packed for form in (*FORMATS, ".txt")
                         for packed in ("", *MODULES)), ".arrow")
#: The name of a shard the datasets library writes: ``train-00000-of-00002.jsonl``.
_SHARD = re.compile(r"^(.*)-\d{5}-of-(\d{5})(\..*)$")
#: Digests a file's rows are kept by, at most: a file of more different rows is compared by
#: a sample of them (chosen by digest, so alike in every file), 8 bytes a row.
_KEPT = MAX_ROWS
_ALL = 1 << 64


def _shard_set(file: str) -> tuple[str, ...] | None:
    """The set of shards ``file`` is one of (its folder, name, count and ending), or None."""
    named = _SHARD.match(os.path.basename(file))
    return None if named is None else (os.path.dirname(file), *named.groups())


def _row_digests(file: str, label: str) -> tuple[int, int, array.array[int]] | None:
    """``(rows, limit, digests)``: how many rows ``file`` holds and the different 8-byte
    digests of its rows (each row's JSON with its keys sorted) below ``limit``: all of them,
    up to `_KEPT`; past that, the limit halves until no more are kept. None: a format not
    read here. Read a row at a time."""
    import hashlib
    import json

    found = written_rows([file], label) or library_read_rows(file, label)
    if found is None:
        return None
    count, limit, kept = 0, _ALL, set()
    for _, row in found:
        count += 1
        text = json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                          default=str)
        digest = int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"),
                                                digest_size=8).digest(), "big")
        if digest < limit:
            kept.add(digest)
            while len(kept) > _KEPT:
                limit >>= 1
                kept = {held for held in kept if held < limit}
    return count, limit, array.array("Q", sorted(kept))


def _compare(written: list[tuple[str, Any]], rows: Iterator[Any], first: str,
             mixed: frozenset[str], label: str, where_split: str, streamed: bool) -> None:
    """Refuse the first row ``rows`` gives otherwise than ``written`` holds it (``rows``
    read whole, as Trinity reads them, or ``streamed``, as eval and a local run do)."""
    count = 0
    for where, row in written:
        count += 1
        got = next(rows, _END)
        difference = ("the row", row, "nothing (fewer rows)") if got is _END else \
            _difference(row, got, mixed=mixed)
        if difference is None:
            continue
        key, held, as_read = difference
        empty = _empty_cell(written, key) if isinstance(as_read, float) else None
        if empty is not None:  # the library types a column of whole numbers and a gap float
            raise DatasetError(
                f"{label}: {empty}: {key} is empty, so the datasets library (through which "
                f"eval, a local run and Trinity read the data) reads the column as numbers "
                f"with a fraction ({_SHOWN.repr(held)} at {where} as "
                f"{_SHOWN.repr(as_read)}); fill the cell, or write the data as JSON Lines")
        said = (f"{label}: {where}: the datasets library (through which eval, a local run "
                f"and Trinity read the data) reads {key} as {_SHOWN.repr(as_read)}, and the "
                f"file holds {_SHOWN.repr(held)}")
        name = os.path.basename(where.split(" row ")[0])
        if streamed and (name.endswith(".json") or ".json." in name):
            # read whole it was right: streamed, the library types a .json array's value
            # whose objects differ as JSON text
            raise DatasetError(
                f"{said}; streamed (as eval and a local run read it), a .json array's value "
                f"whose objects differ is read as JSON text: write the file as JSON Lines "
                f"({name.split('.')[0]}.jsonl, one object a line)")
        earlier = _mixed_in_its_file(written, where, key, held)
        if earlier is not None:  # the rows of one file mix types: no other file is the cause
            raise DatasetError(f"{said}; {earlier}, and the library reads a column as "
                               f"one type: give {key} values of one type in every row")
        raise DatasetError(
            f"{said}; it reads every file of a folder with the columns and types of its "
            f"first ({first}): give every file the same keys, each with values of one "
            f"type, or put each split in a folder of its own")
    more = sum(1 for _ in rows)
    if more:
        raise DatasetError(f"{label}: the datasets library reads {count + more} rows of "
                           f"{where_split}, and its files hold {count}; give each split's "
                           f"files alone in a folder")


#: JSON's types as a message names them (null aside: it fits a column of any type).
_KINDS = {bool: "true or false", int: "an integer", float: "a number with a fraction",
          str: "text", list: "a list", dict: "an object"}


def _file_of(where: str) -> str:
    """The file a row's ``where`` (``file:line`` or ``file row N``) names."""
    return where.split(" row ")[0] if " row " in where else where.rsplit(":", 1)[0]


def _mixed_in_its_file(written: list[tuple[str, Any]], where: str, key: str,
                       held: Any) -> str | None:
    """How another row of the file ``where`` is in (the first such) holds ``key`` (as
    `_difference` names it) as a value of another type than ``held``, in words (``line 1 of
    the same file holds 'answer' as an integer (1) and this line as text``), or None. One
    file's rows mixing types were said as files of a folder differing (sweep 51 A-W10); the
    library may type the column by a later row, and read the first otherwise."""
    if type(held) not in _KINDS:
        return None
    file = _file_of(where)
    for at, row in written:
        if at == where or isinstance(row, Text) or _file_of(at) != file:
            continue
        value = _value_at(row, key)
        if type(value) in _KINDS and _KINDS[type(value)] != _KINDS[type(held)]:
            place, this = ((f"row {at.rsplit(' row ', 1)[1]}", "this row") if " row " in at
                           else (f"line {at.rsplit(':', 1)[1]}", "this line"))
            return (f"{place} of the same file holds {key} as {_KINDS[type(value)]} "
                    f"({_SHOWN.repr(value)}) and {this} as {_KINDS[type(held)]}")
    return None


def _value_at(value: Any, key: str, at: str = "") -> Any:
    """The value a row holds at ``key`` (as `_difference` names it: ``'a'.b[0]``), or
    `_END`; only the containers on the way to it are walked."""
    if at == key:
        return value
    children: Iterator[tuple[str, Any]]
    if isinstance(value, dict):
        children = ((f"{at}.{name}" if at else repr(name), inner)
                    for name, inner in value.items())
    elif isinstance(value, list):
        children = ((f"{at}[{index}]", inner) for index, inner in enumerate(value))
    else:
        return _END
    for name, inner in children:
        if key == name or key.startswith((f"{name}.", f"{name}[")):
            found = _value_at(inner, key, name)
            if found is not _END:
                return found
    return _END


def _empty_cell(written: list[tuple[str, Any]], key: str) -> str | None:
    """Where a CSV row (`Text`) first holds an empty cell under the column ``key`` (as
    `_difference` names it, in quotes), or None."""
    return next((where for where, row in written if isinstance(row, Text)
                 for name, text in row.items() if repr(name) == key and text == ""), None)


def _converted(rows: Iterator[Any], dataset: Any, split: str, label: str,
               path: str) -> Iterator[Any]:
    """``rows`` as the library hands them to Python, a value it cannot convert (a date in
    the year 0) said in one line as any failed read is."""
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except DatasetError:
            raise
        except Exception as exc:  # Arrow's OverflowError, ValueError, ...
            raise reason_of_failure(exc, dataset, split, label, path) from None
        yield row


_END = object()


def _read_as_trinity_reads(dataset: Any, path: str, split: str,
                           label: str) -> tuple[str, list[str], Any]:
    """The folder's first file (whose columns the library takes), the files it takes for
    ``split`` and its rows (None: the split's files hold none, which the row count's check
    says), read as Trinity's reader reads them (``load_dataset(path, name=..., split=...)``,
    whole: it types a Parquet split with the first file's columns where a streamed read
    does not), into a cache of its own that is removed after."""
    import logging

    from ..interrupts import import_whole

    refuse_unreadable_files(path, label)  # (the library lists no pipe: "no split" said)
    import_whole("datasets")
    import datasets

    logging.getLogger("datasets").setLevel(logging.CRITICAL)
    every: list[str] = []
    files: list[str] = []
    bars = datasets.utils.logging.is_progress_bar_enabled()
    datasets.utils.logging.disable_progress_bar()  # ("Generating test split": not ours)
    try:
        with tempfile.TemporaryDirectory(prefix="tunedsl-read-") as cache:
            found = datasets.load_dataset_builder(path, dataset.name,
                                                  cache_dir=cache).config.data_files or {}
            every = [str(file) for listed in found.values() for file in listed]
            files = [str(file) for name, listed in found.items() if str(name) == split
                     for file in listed]
            if found and split not in {str(name) for name in found}:  # (before the library
                # builds every split, and fails on another split's files first)
                raise no_such_split(dataset, split, [str(name) for name in found], label)
            for file in every:  # pyarrow crashes on it, whichever split it is
                refuse_a_null_file(file, label)
            read = datasets.load_dataset(path, name=dataset.name, split=split,
                                         cache_dir=cache, keep_in_memory=True)
    except DatasetError:
        raise
    except Exception as exc:  # datasets raises many types for one cause
        written = written_rows(files, label) if files else None
        if written is not None and next(written, None) is None:
            return "", files, None
        for _ in written_rows(every, label) or ():  # a row no reader takes, by file:line
            pass
        unlike = _unlike(every, label, exc) if every else None
        if unlike is not None:
            first = every[0]
            fix = (f"add rows to {os.path.basename(first)}, or remove it"
                   if unlike.startswith(f"{first} has no rows") else
                   "give every file the same keys, each with values of one type, or put "
                   "each split in a folder of its own")
            raise DatasetError(
                f"{label}: the datasets library cannot read {dataset.path} (split "
                f"{split!r}): {unlike}; it reads every file of a folder with the "
                f"columns and types of its first: {fix}") from None
        raise reason_of_failure(exc, dataset, split, label, path) from None
    finally:
        if bars:
            datasets.utils.logging.enable_progress_bar()
    return every[0] if every else "", files, read


def _unlike(files: list[str], label: str, exc: Exception) -> str | None:
    """How the first of ``files`` (the folder's first) and a later one differ, in words:
    the keys one holds and the other lacks, else values of another type (with the
    library's own words on them); None when they cannot be read here."""
    columns: list[tuple[str, dict[str, set[str]]]] = []  # each file's keys and value kinds
    for file in dict.fromkeys(files):
        written = written_rows([file], label)
        kinds: dict[str, set[str]] | None = None
        try:
            if written is not None:
                kinds = {}
                for _, row in written:
                    for key, value in row.items():
                        kinds.setdefault(key, set()).add(type(value).__name__)
        except DatasetError:
            kinds = None
        if kinds is None:
            return None
        columns.append((file, kinds))
    if len(columns) < 2:  # one file: nothing to set beside it (the library's words then)
        return None
    first, keys = columns[0]
    if not keys and any(held for _, held in columns[1:]):  # (a header-only CSV, an empty file)
        return f"{first} has no rows, so every column is typed as null and no value of the " \
               f"other files fits"
    for file, held in columns[1:]:
        if held.keys() != keys.keys():
            extra, lacking = sorted(held.keys() - keys.keys()), sorted(keys.keys() - held.keys())
            said = " and ".join(part for part in (
                f"the keys {', '.join(map(repr, extra))}" * bool(extra),
                f"not {', '.join(map(repr, lacking))}" * bool(lacking)) if part)
            return f"{file} holds {said}, unlike {first}"
    cause = exc
    while cause.__cause__ is not None:  # (DatasetGenerationError wraps Arrow's words)
        cause = cause.__cause__  # type: ignore[assignment]
    words = " ".join(str(cause).split())[:200]
    # the files whose values are of other kinds than the first's (all, when none is: a
    # number too large for its column looks alike here)
    differing = [file for file, held in columns[1:] if held != keys] or \
        [file for file, _ in columns[1:]]
    others = ", ".join(differing)
    return f"{others} holds values of another type than {first} under the same keys ({words})"


def _difference(held: Any, read: Any, key: str = "", mixed: frozenset[str] = frozenset(),
                top: str = "") -> tuple[str, Any, Any] | None:
    """``(key, held, read)`` where ``read`` is not ``held`` as written (a key the file lacks
    may be read as null; an integer under a top-level key in ``mixed``, whose split mixes
    integers and fractions, may be read as the same float: check names that mix to the
    code that reads it), or None."""
    if isinstance(held, Text):
        return next(((repr(name), text, read.get(name)) for name, text in held.items()
                     if not _same_text(text, read.get(name))), None)
    if isinstance(held, dict) and isinstance(read, dict):
        for name, value in held.items():
            found = _difference(value, read.get(name), f"{key}.{name}" if key else repr(name),
                                mixed, top or name)
            if found is not None:
                return found
        extra = next((name for name in read if name not in held and read[name] is not None),
                     None)
        return None if extra is None else (f"{key}.{extra}" if key else repr(extra), None,
                                           read[extra])
    if isinstance(held, list) and isinstance(read, list) and len(held) == len(read):
        for index, (value, got) in enumerate(zip(held, read)):
            found = _difference(value, got, f"{key}[{index}]", mixed, top)
            if found is not None:
                return found
        return None
    if isinstance(held, str) and isinstance(read, (datetime.date, datetime.datetime)):
        return None if _same_instant(held, read) else (key, held, read)
    if top in mixed and type(held) is int and isinstance(read, float) and read == held:
        return None
    if isinstance(held, float) and isinstance(read, float) and held != held and read != read:
        return None  # NaN as written (refused as no finite number where rows are read)
    if type(held) is not type(read) or held != read:
        return key, held, read
    return None


def _mixed_numbers(written: list[tuple[str, Any]]) -> frozenset[str]:
    """The top-level keys under which a split's rows (JSON's; a CSV's are text) hold both
    integers and fractions: Arrow reads them all as floats, in any reader, and check names
    that mix to the code that reads the key."""
    kinds: dict[str, set[type]] = {}
    for _, row in written:
        if isinstance(row, Text):
            continue
        for name, value in row.items():
            if type(value) in (int, float):
                kinds.setdefault(name, set()).add(type(value))
    return frozenset(name for name, found in kinds.items() if len(found) == 2)


def _same_text(text: str | None, read: Any) -> bool:
    """A CSV cell as written, read as ``read``: empty as null, else the same text."""
    if not text:
        return read is None or read == ""
    if isinstance(read, (datetime.date, datetime.datetime)):
        return _same_instant(text, read)
    return text == (str(read) if not isinstance(read, bool) else text)


def _same_instant(text: str, read: Any) -> bool:
    """An ISO date or time read as a timestamp, as Arrow reads it on every backend."""
    shown = {read.isoformat(), str(read)}
    if isinstance(read, datetime.datetime) and read.time() == datetime.time() and \
            read.tzinfo is None:
        shown.add(read.date().isoformat())
    return text.replace("Z", "+00:00") in shown or text in shown
