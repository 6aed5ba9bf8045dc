"""The shape of one experiment setting: a row of the settings table.

Every setting an experiment can have is written once, as one row: its name, what kind
of value it holds, its default, its check, the Trinity-RFT key it maps to, and its
meaning. A top-level setting is a `Setting` in `tunedsl.dsl.settings_table`; a field of
a record (`Dataset`, `Model`, `Algorithm`, ...) is the same row declared with
`setting()` in the record's class body. Everything that handles settings reads the
rows: the ``@experiment`` decorator, the settings layers, `tune`, the experiment
graph, the Trinity YAML writer and reader, and README's settings table::

    group_size: int = setting(8, check=at_least(1), trinity="algorithm.repeat_times",
                              meaning="Rollouts per task; group-relative algorithms "
                                      "need at least 2.")
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import attrs

#: The kinds of value a setting holds.
FUNCTION = "function"  # a decorated function (workflow, judge): code, set on the class only
RECORD = "record"  # a record (Dataset(...), Model(...)): a TOML table of its fields
MODELS = "models"  # a dict of name -> Model(...): a TOML table of tables
TABLE = "table"  # a dict of plain data ([params], [trinity])
VALUE = "value"  # a single value: text, a number, a flag

#: The key of a record field's row in its attrs metadata.
ROW = "tunedsl.setting"


class _Required:
    """The default of a setting that has none: some layer must set it."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()


@attrs.frozen(kw_only=True)
class Setting:
    """One row of the settings table.

    Attributes:
        name: The dotted name users write (``rollout_timeout``, ``algorithm.group_size``).
        meaning: One or two sentences for README, docstrings and ``--help``.
        kind: What it holds: `FUNCTION`, `RECORD`, `MODELS`, `TABLE` or `VALUE`.
        default: The default (`REQUIRED`: none); with ``factory``, a callable that makes it.
        factory: ``default`` is a callable that makes a fresh default each time.
        python_type: The type the experiment graph holds (cattrs structures it).
        record: The record class of a `RECORD` or `MODELS` setting.
        check: What is wrong with a value, worded to read after the name (None: fine).
            A `TABLE` setting's check returns a list of ``path: problem`` lines.
        trinity: The Trinity-RFT config key the value is written to and read from.
        tuner: Its argument name in AgentScope's ``tuner.tune`` (`tunedsl.tune` takes it).
        class_only: Code, or where code is found: set on the ``@experiment`` class only,
            never in TOML or ``--set``.
        in_graph: Whether the experiment graph keeps it (``settings`` is read and done).
        path: Its value names a file or folder, resolved against the file that set it.
        map_fields: A `RECORD` whose fields' ``trinity`` keys are fixed config paths (the
            trained model, the training data, the algorithm), written one value to one key.
        resumable: A resumed run may change it (how long the run goes on, how often it
            saves and evaluates); any other change would make the rest of the run another
            experiment.
    """

    name: str
    meaning: str
    kind: str = VALUE
    default: Any = REQUIRED
    factory: bool = False
    python_type: Any = None
    record: type | None = None
    check: Callable[[Any], Any] | None = None
    trinity: str | None = None
    tuner: str | None = None
    class_only: bool = False
    in_graph: bool = True
    path: bool = False
    map_fields: bool = False
    resumable: bool = False

    @property
    def required(self) -> bool:
        """Whether it has no default (some layer must set it)."""
        return self.default is REQUIRED

    def default_value(self) -> Any:
        """The default itself (a fresh one for a factory)."""
        return self.default() if self.factory else self.default

    @property
    def record_class(self) -> type:
        """The record class a `RECORD` or `MODELS` row holds."""
        if self.record is None:
            raise TypeError(f"setting {self.name} holds no record")
        return self.record

    def problem(self, value: Any) -> Any:
        """What the row's ``check`` says of ``value`` (None for a row without one)."""
        return None if self.check is None else self.check(value)


def setting(default: Any = attrs.NOTHING, *, meaning: str, check: Any = None,
            trinity: str | None = None, factory: Callable[[], Any] | None = None,
            converter: Callable[[Any], Any] | None = None, record: type | None = None,
            path: bool = False, resumable: bool = False) -> Any:
    """A record field that is a row of the settings table (see the module docstring).

    Args:
        default: The default; omit it for a required field.
        meaning: What the setting does, for docstrings and README.
        check: An attrs validator raising `FieldProblem`.
        trinity: The Trinity key: a full config path for the trained model's, the training
            data's and the algorithm's fields; a key inside the list entry for `LoRA`'s.
        factory: Makes the default instead of ``default``.
        converter: attrs converter.
        record: The record class of a field that holds a record (``Model.lora``): the
            settings layers read its TOML table field by field.
        path: The value names a file or folder (resolved beside the file that set it, when
            something is there; else it may be a hub id).
        resumable: A resumed run may change it (see `Setting.resumable`).
    """
    row = {"meaning": meaning, "trinity": trinity, "record": record, "path": path,
           "resumable": resumable}
    if factory is not None:
        default = attrs.Factory(factory)
    if path and converter is None:
        converter = fspath
    return attrs.field(default=default, validator=check, converter=converter,
                       metadata={ROW: row})


def fspath(value: Any) -> Any:
    """A `pathlib.Path` (any ``os.PathLike``) as the text a path setting holds; any other
    value as it is, for the field's check to judge."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def row_of(attribute: attrs.Attribute) -> dict[str, Any] | None:
    """A record field's row (``meaning``, ``trinity``, ``record``, ``path``,
    ``resumable``), or None for bookkeeping fields."""
    return attribute.metadata.get(ROW)


def setting_row(attribute: attrs.Attribute) -> dict[str, Any]:
    """The row of a field `setting_fields` gave (one that is a setting)."""
    row = row_of(attribute)
    if row is None:
        raise KeyError(f"{attribute.name} is not a setting")
    return row


def setting_fields(record: type) -> list[attrs.Attribute]:
    """The fields of a record class that are settings, in declaration order."""
    return [a for a in attrs.fields(record) if a.init and row_of(a) is not None]


def documented(cls: type) -> type:
    """Append an ``Args:`` section built from the fields' meanings to ``cls.__doc__``, so
    a field's meaning is written once, in its row."""
    lines = [f"        {a.name}: {setting_row(a)['meaning']}" for a in setting_fields(cls)]
    cls.__doc__ = f"{(cls.__doc__ or '').rstrip()}\n\n    Args:\n" + "\n".join(lines) + "\n"
    return cls


def explicit_fields(record: Any) -> frozenset[str]:
    """The names of the fields a record's constructor was given explicitly."""
    return getattr(record, "_explicit", frozenset())
