"""The rows of data files as the files hold them, read by tunedsl itself (not the datasets
library): what `as_read` compares the library's reading against, and what `first_rows`
checks a preview's rows by."""

from __future__ import annotations

import csv
import importlib.util
import os
import re
from collections.abc import Iterator
from typing import Any

from ..errors import DatasetError
from .compressed import MODULES, kind, opened
from .csv_files import csv_problem
from .json_files import json_lines, json_rows, task_row


def written_rows(files: list[str], label: str) -> Iterator[tuple[str, Any]] | None:
    """``(where, row)`` for each row of ``files`` as they hold it, decompressed as the
    datasets library decompresses them, or None when one is of a format this does not
    read (``.arrow``, ``.txt``, ``.zip``)."""
    kinds = [kind(file) for file in files]
    if any(form not in FORMATS or (packed and (
            packed not in MODULES or importlib.util.find_spec(MODULES[packed]) is None))
           for form, packed in kinds):  # (zstandard is an optional package)
        return None

    def rows() -> Iterator[tuple[str, Any]]:
        for file, (form, packed) in zip(files, kinds):
            try:
                yield from _rows_of(file, form, packed, label)
            except DatasetError as exc:  # (a compressed file's line: said without the label)
                if str(exc).startswith(f"{label}: "):
                    raise
                raise DatasetError(f"{label}: {exc}") from None
            except (OSError, EOFError, UnicodeDecodeError, ValueError) as exc:  # a damaged
                twice = re.search(r"Multiple matches for FieldRef\.Name\((.*?)\)", str(exc))
                if twice:  # pyarrow's words, with its schema over several lines
                    raise DatasetError(f"{label}: {file}: the column {twice.group(1)!r} is "
                                       f"named twice; give each column a name of its own") \
                        from None
                if not os.access(file, os.R_OK):  # (pyarrow's words for it: "[Errno 13]")
                    raise DatasetError(f"{label}: {file}: cannot read it (Permission denied); "
                                       f"make it readable (chmod u+r {file})") from None
                reason = " ".join(str(exc).split())  # archive, text that is not UTF-8, a cut
                raise DatasetError(  # stream: one line
                    f"{label}: {file}: cannot be read as {form[1:]}"
                    f"{' compressed with ' + packed[1:] if packed else ''} ({reason}); write it "
                    f"again, or remove it") from None

    return rows()


def _rows_of(file: str, form: str, packed: str, label: str) -> Iterator[tuple[str, Any]]:
    """The rows of one data file as it holds them (`written_rows`)."""
    if form == ".parquet":
        import pyarrow.parquet

        for number, row in enumerate(pyarrow.parquet.read_table(file).to_pylist(), 1):
            yield f"{file} row {number}", row
        return
    if form == ".json" or (not packed and form == ".jsonl"):  # (a train.json.gz holding
        yield from json_rows([file], label)  # JSON Lines, as a plain one: sweep 51 A-W7)
        return
    with opened(file, packed) as handle:
        if form == ".jsonl":  # each row checked as a plain file's is (`task_row`)
            for number, row in json_lines(handle, file, data=True):
                yield task_row(f"{file}:{number}", row, label)
        else:
            problem = None if packed else csv_problem(file, label)
            if problem is not None:  # a row of more fields than the header, ...: by file:line
                raise problem
            reader = csv.DictReader(handle, delimiter="\t" if form == ".tsv" else ",")
            for row in reader:
                yield f"{file}:{reader.line_num}", Text(row)


#: The formats `written_rows` reads (each compressed too).
FORMATS = (".json", ".jsonl", ".parquet", ".csv", ".tsv")


class Text(dict[str, str]):
    """A CSV row: every value is the text written, which the reader types."""


def library_read_rows(file: str, label: str) -> Iterator[tuple[str, Any]] | None:
    """``(where, row)`` for each row of an ``.arrow`` or ``.txt`` file (compressed too) as the
    datasets library's arrow and text builders read it, or None for another format. Only
    for comparing a split's files with each other (`as_read.refuse_a_split_read_twice`):
    ``train-old.arrow`` beside ``train.arrow`` was read twice without a word (sweep 50 A-S1),
    as no format `written_rows` reads."""
    form, packed = kind(file)
    if form == ".arrow" and not packed:  # (the arrow builder opens the file as it is)
        return _checked(_arrow_rows(file), file, form, label)
    if form == ".txt" and (not packed or (packed in MODULES and
                                          importlib.util.find_spec(MODULES[packed]))):
        return _checked(_text_rows(file, packed), file, form, label)
    return None


def _arrow_rows(file: str) -> Iterator[tuple[str, Any]]:
    """The rows of an Arrow file as the arrow builder reads them: an IPC stream (what
    ``save_to_disk`` writes), else the IPC file format."""
    import pyarrow
    import pyarrow.ipc

    with open(file, "rb") as handle:
        batches: Iterator[Any]
        try:
            batches = iter(pyarrow.ipc.open_stream(handle))
        except (OSError, pyarrow.lib.ArrowInvalid):
            reader = pyarrow.ipc.open_file(handle)
            batches = (reader.get_batch(at) for at in range(reader.num_record_batches))
        number = 0
        for batch in batches:
            for row in batch.to_pylist():
                number += 1
                yield f"{file} row {number}", row


def _text_rows(file: str, packed: str) -> Iterator[tuple[str, Any]]:
    """The rows of a text file as the text builder reads them: ``{"text": line}`` a line,
    its line end dropped (universal newlines, UTF-8 with a BOM kept, as it opens it)."""
    handle = (importlib.import_module(MODULES[packed]).open(
        file, "rt", encoding="utf-8", errors="surrogateescape") if packed else
        open(file, encoding="utf-8", errors="surrogateescape"))
    with handle:
        for number, line in enumerate(handle, 1):
            yield f"{file}:{number}", {"text": line.removesuffix("\n")}


def _checked(rows: Iterator[tuple[str, Any]], file: str, form: str,
             label: str) -> Iterator[tuple[str, Any]]:
    """``rows``, a file that cannot be read said as `written_rows` says it (a damaged Arrow
    file or archive: pyarrow's or the module's words, over several lines)."""
    try:
        yield from rows
    except (OSError, EOFError, ValueError) as exc:  # (pyarrow's ArrowInvalid: a ValueError)
        reason = " ".join(str(exc).split())
        raise DatasetError(f"{label}: {file}: cannot be read as {form[1:]} ({reason}); write "
                           f"it again, or remove it") from None
