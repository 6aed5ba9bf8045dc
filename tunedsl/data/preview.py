"""``preview``: the first rows of a dataset as a run reads them, printed as JSON (the DSL's
``Dataset.preview`` and ``tunedsl preview``)."""

from __future__ import annotations

import sys
from typing import Any

from .as_read import refuse_a_split_read_twice, refuse_rows_read_otherwise
from .datasets import first_rows
from .json_text import pretty


def preview(dataset: Any, n: int) -> list[dict[str, Any]]:
    """``Dataset.preview``: `print_first_rows` of a record that may have been built outside
    an experiment, its ``${env:NAME[,default]}`` read as an experiment's settings read them
    (a record from an experiment has them read already: an `EnvValue`)."""
    import copy

    import attrs

    from ..config.environment import EnvValue, env_resolved

    read = copy.copy(dataset)  # keeps defined_in, the folder relative paths are read from
    for field in attrs.fields(type(dataset)):
        value = getattr(dataset, field.name)
        if isinstance(value, str) and not isinstance(value, EnvValue) and "${env:" in value:
            object.__setattr__(read, field.name, env_resolved(
                value, f"{type(dataset).__name__}.{field.name}"))
    return print_first_rows(read, n)


def print_first_rows(dataset: Any, n: int, split: str | None = None,
                     label: str = "dataset", file: Any = None) -> list[dict[str, Any]]:
    """Print the first ``n`` rows (`first_rows`) as indented JSON that any terminal takes
    (`json_text.pretty`) to ``file`` (standard output by default), and return them:
    ``preview`` in the DSL and on the command line."""
    found = first_rows(dataset, n, split, label)
    # rows shown are rows a run reads: a stray train.jsonl.bak the library would read too
    # was shown as data, where check refuses it (sweep 44 A)
    refuse_rows_read_otherwise(dataset, split, label)
    refuse_a_split_read_twice(dataset, split, label)
    encoding = getattr(file or sys.stdout, "encoding", None) or "utf-8"
    print(pretty(found, encoding), file=file)  # (an ASCII terminal's: escaped, still JSON)
    return found
