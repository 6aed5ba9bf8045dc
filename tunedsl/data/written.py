"""The rows of data files as the files hold them, read by tunedsl itself (not the datasets
library): what `as_read` compares the library's reading against, and what `first_rows`
checks a preview's rows by."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
from collections.abc import Iterator
from typing import Any

from ..errors import DatasetError
from .compressed import MODULES, kind, opened
from .csv_files import csv_problem
from .json_files import json_lines, json_rows, task_row, unique_keys


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
    if not packed and form in (".json", ".jsonl"):
        yield from json_rows([file], label)
        return
    with opened(file, packed) as handle:
        if form == ".jsonl":  # each row checked as a plain file's is (`task_row`)
            for number, row in json_lines(handle, file, data=True):
                yield task_row(f"{file}:{number}", row, label)
        elif form == ".json":  # a compressed JSON array (an object: one row)
            data = json.loads(handle.read(), object_pairs_hook=unique_keys)
            for index, row in enumerate(data if isinstance(data, list) else [data], 1):
                yield task_row(f"{file} row {index}", row, label)
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
