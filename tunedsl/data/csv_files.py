"""What the datasets library (pandas, under it; Trinity reads a CSV taskset so too) would
change of a CSV file's rows without a word, found by reading the file as written.

pandas guesses: a row with a field too many shifts every column into the index, a repeated
column name becomes ``answer.1``, a column of numbers written ``02`` or ``1.50`` loses how
it was written, and the words ``NA``, ``null`` or ``None`` become missing values. Each is a
`DatasetError` naming the file and line, before any command reads the rows.
"""

from __future__ import annotations

import csv
import math
import re
from typing import Any

from ..errors import DatasetError
from .json_files import check_utf8

#: The texts pandas reads as a missing value by default (``keep_default_na``).
PANDAS_MISSING = frozenset({
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})
#: The texts pandas reads as booleans when a whole column holds them.
_BOOLEANS = frozenset({"True", "TRUE", "true", "False", "FALSE", "false"})
# pandas reads ASCII digits only, with blank space around them: " 5" is the number 5.
_INTEGER = re.compile(r"[ \t]*[+-]?[0-9]+[ \t]*")
_NUMBER = re.compile(r"[ \t]*([+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?"
                     r"(inf|Inf|INF)(inity)?)[ \t]*")


def csv_problem(path: str, label: str) -> DatasetError | None:
    """Why the datasets library would read ``path`` otherwise than it is written, or None."""
    delimiter = "\t" if path.lower().endswith(".tsv") else ","
    try:
        check_utf8(path, label)
        with open(path, "rb") as raw:  # (Python 3.10's csv reader stops at one, 3.11's not)
            cut = next((number for number, line in enumerate(raw, start=1)
                        if b"\x00" in line), None)
        if cut is not None:
            return DatasetError(f"{label}: {path}:{cut}: holds a NUL character, where the "
                                f"datasets library cuts the text; remove it")
        with open(path, encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.reader(handle, delimiter=delimiter))
    except DatasetError as error:
        return error
    except (OSError, csv.Error):  # the reader says what is wrong with it
        return None
    if not rows:
        return None
    header, body = rows[0], rows[1:]
    repeated = next((name for i, name in enumerate(header) if name in header[:i]), None)
    if repeated is not None:
        return DatasetError(f"{label}: {path}:1: the column {repeated!r} is named twice, and "
                            f"the datasets library renames the second {repeated}.1; give "
                            f"each column a name of its own")
    for number, row in enumerate(body, start=2):
        if row and len(row) != len(header):
            return DatasetError(f"{label}: {path}:{number}: {len(row)} fields for the "
                                f"{len(header)} columns of the first line, and the datasets "
                                f"library would shift the columns of every row; quote a "
                                f"value that holds a '{delimiter}' or fix that line"
                                if delimiter == "," else
                                f"{label}: {path}:{number}: {len(row)} fields for the "
                                f"{len(header)} columns of the first line; fix that line")
    for column, name in enumerate(header):
        values = [(number, row[column]) for number, row in enumerate(body, start=2)
                  if len(row) == len(header)]
        problem = _column_problem(path, label, name, values)
        if problem is not None:
            return problem
    return None


def _column_problem(path: str, label: str, name: str,
                    values: list[tuple[int, str]]) -> DatasetError | None:
    written = [(number, value) for number, value in values if value not in PANDAS_MISSING]
    missing = next(((number, value) for number, value in values
                    if value in PANDAS_MISSING and value != ""), None)
    if missing is not None:  # (an empty cell is the way to leave a value out)
        number, value = missing
        return DatasetError(f"{label}: {path}:{number}: {name} is {value!r}, which the "
                            f"datasets library reads as a missing value (None); write the data "
                            f"as JSON Lines to keep it as text")
    if not written:
        return None
    if all(value in _BOOLEANS for _, value in written):
        changed = next(((n, v) for n, v in written if v not in ("True", "False")), None)
        read = "the boolean {}"
        shown: Any = lambda text: text.lower() == "true"  # noqa: E731
    elif all(_INTEGER.fullmatch(value) for _, value in written):
        huge = next(((n, v) for n, v in written if not -2**63 <= int(v) < 2**63), None)
        if huge is not None:
            return DatasetError(f"{label}: {path}:{huge[0]}: {name} is an integer beyond 64 "
                                f"bits, which the datasets library cannot read as a number; "
                                f"write the data as JSON Lines with it as a string")
        changed = next(((n, v) for n, v in written if str(int(v)) != v), None)
        read = "the number {}"
        shown = int
    elif all(_NUMBER.fullmatch(value) for _, value in written):
        endless = next(((n, v) for n, v in written if not math.isfinite(float(v))), None)
        if endless is not None:
            return DatasetError(f"{label}: {path}:{endless[0]}: {name} is {endless[1]!r}, "
                                f"which the datasets library reads as an infinite number, and "
                                f"no results file (JSON) can hold one; write the data as JSON "
                                f"Lines to keep it as text")
        changed = next(((n, v) for n, v in written if repr(float(v)) != v
                        and (not float(v).is_integer() or str(int(float(v))) != v)), None)
        read = "the number {}"
        shown = float
    else:
        return None
    if changed is None:
        return None
    number, value = changed
    return DatasetError(f"{label}: {path}:{number}: {name} is {value!r}, which the datasets "
                        f"library reads as {read.format(shown(value))}, losing how it is "
                        f"written; write the data as JSON Lines to keep it as text")
