"""Where the user's Trinity settings give a number, text or list where Trinity-RFT reads a
table of settings, at any depth, found by Trinity's own config types: tunedsl's own
tables replaced a base YAML's such value without a word, a ``[trinity]`` one reached
OmegaConf's "Merge error" without its path, and the checks that read those tables must
never meet a number (sweep 50 A-T1, A-W9)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ...config.nested import dotted_nested
from ...config.trinity_base import base_not_a_table, read_base_config
from ...dsl.trinity_fields import AUXILIARY_MODELS, EVAL_TASKSETS

if TYPE_CHECKING:
    from ...config.graph import ExperimentGraph


@functools.cache
def _tables_of(kind: type) -> dict[str, tuple[type, bool]]:
    """The fields of Trinity's config dataclass ``kind`` that hold tables of settings: each
    field's dataclass, and True where the field is one table (the dataclass, or Optional of
    it), False where it is a list or dict of them. Read from Trinity's own type hints, so
    the walk follows whatever tables the installed Trinity has, at any depth."""
    hints = typing.get_type_hints(kind)
    tables = {}
    for field in dataclasses.fields(kind):
        hint = hints.get(field.name)
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
            hint = args[0]  # Optional[X] is X, or nothing
        inner = typing.get_args(hint)[-1:]
        if dataclasses.is_dataclass(hint):
            tables[field.name] = (typing.cast(type, hint), True)
        elif typing.get_origin(hint) in (list, dict) and inner and \
                dataclasses.is_dataclass(inner[0]):
            tables[field.name] = (typing.cast(type, inner[0]), False)
    return tables


#: The lists tunedsl also reads as tables of entries keyed by name (``[trinity.<list>.NAME]``).
_NAMED_LISTS = (AUXILIARY_MODELS, EVAL_TASKSETS)


@functools.cache
def _lists_and_words_of(kind: type) -> dict[str, tuple[type, str, str]]:
    """The fields of Trinity's config dataclass ``kind`` that hold a list, or a word of an
    enum of words (``SyncMethod``, ``SyncStyle``, ...): each field's type of value (list or
    str), what Trinity reads there and the fix. OmegaConf says a scalar given for a list in
    its own words ("AnyNode is not a ListConfig, list or tuple."), and a table given for
    one ("Cannot merge DictConfig with ListConfig") or a number for such an enum (Trinity's
    enums call ``.lower()`` on it: "'int' object has no attribute 'lower'") without the
    key (sweep 51 A-W2, A-W3)."""
    hints = typing.get_type_hints(kind)
    found: dict[str, tuple[type, str, str]] = {}
    for field in dataclasses.fields(kind):
        hint = hints.get(field.name)
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
            hint = args[0]  # Optional[X] is X, or nothing
        inner = typing.get_args(hint)[:1]
        if typing.get_origin(hint) is list:
            of = f" of tables of settings ({typing.cast(type, inner[0]).__name__})" \
                if inner and dataclasses.is_dataclass(inner[0]) else ""
            found[field.name] = (list, f"a list{of}", "give a list")
        elif isinstance(hint, type) and issubclass(hint, enum.Enum) and \
                all(isinstance(member.value, str) for member in hint):
            words = ", ".join(member.value for member in hint)
            found[field.name] = (str, f"one of {words}", "give one of them")
    return found


def _not_tables(data: Mapping[str, Any], kind: type,
                path: str = "") -> Iterator[tuple[str, Any, str, str]]:
    """``(dotted key, value, what Trinity reads, the fix)`` for each value of ``data`` (a
    user's Trinity settings, read as Trinity's ``kind``) that is a scalar or a list where
    Trinity reads a table, not a list where it reads one, or no word where it reads an
    enum's word (`_lists_and_words_of`). Entries of a list or dict of tables are walked
    into, not judged: tunedsl's named lists and Trinity's reader already name an entry that
    is no table by its path."""
    for key, value in data.items():
        field = _tables_of(kind).get(key) if isinstance(key, str) else None
        other = _lists_and_words_of(kind).get(key) if isinstance(key, str) else None
        # (None: Trinity's default; ${...}: an interpolation OmegaConf resolves, a table too)
        if value is None or (isinstance(value, str) and "${" in value):
            continue
        named = isinstance(value, Mapping) and f"{path}{key}" in _NAMED_LISTS
        if other is not None and not isinstance(value, other[0]) and not named:
            yield f"{path}{key}", value, other[1], other[2]
            continue
        if field is None:
            continue
        table, single = field
        if single and not isinstance(value, Mapping):
            yield f"{path}{key}", value, f"a table of settings ({table.__name__})", \
                "give a table"
        elif single:
            yield from _not_tables(value, table, f"{path}{key}.")
        else:
            entries = value.items() if isinstance(value, Mapping) else \
                enumerate(value) if isinstance(value, list) else ()
            for name, entry in entries:
                if isinstance(entry, Mapping):
                    at = f"[{name}]" if isinstance(value, list) else f".{name}"
                    yield from _not_tables(entry, table, f"{path}{key}{at}.")


def table_problems(graph: ExperimentGraph) -> list[str]:
    """A line for each scalar or list the user's Trinity settings (the base YAML's, the
    ``[trinity]`` table's) give where Trinity reads a table of settings, and each value
    that is no list or word where it reads one (`_lists_and_words_of`), at any depth,
    named by its path and where it was given. tunedsl's own tables replace a base YAML's
    value without a word, a ``[trinity]`` one reaches OmegaConf's "Merge error" without
    its path, and the checks reading those tables must not meet a number (sweep 50 A-T1,
    A-W9). Nothing where Trinity does not import (its validation says so)."""
    try:
        from trinity.common.config import Config
    except ImportError:
        return []
    problems = []
    if graph.trinity_config:
        base = read_base_config(graph.trinity_config)
        problems += [base_not_a_table(graph.trinity_config, key, value)
                     if fix == "give a table" else
                     f"{graph.trinity_config}: {key} is {value!r}, where Trinity-RFT reads "
                     f"{reads}; {fix}, or remove it"
                     for key, value, reads, fix in _not_tables(base, Config)]
    problems += [f"trinity: {key} is given the {type(value).__name__} {value}, where "
                 f"Trinity-RFT reads {reads}; {fix} (in the base YAML or [trinity]), or "
                 f"remove it"
                 for key, value, reads, fix in _not_tables(_without_shape(graph.trinity),
                                                           Config)]
    return problems


def _without_shape(trinity: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``[trinity]`` table as nested tables, but a ``cluster`` written as a shape
    (``cluster = "1x8"``), which tunedsl reads itself (`cluster.shape_as_table`)."""
    nested = dict(dotted_nested(trinity))
    if isinstance(nested.get("cluster"), str):
        del nested["cluster"]
    return nested
