"""Settings layers: built-in defaults < TOML < the experiment class < ``--set`` (the
``[params]`` of a ``--settings`` file sit above the class's: `params_above_class`).

A layer is a nested dict of the values one source sets explicitly, keyed by the
Python field names (``[model] model_path = ...``). Each layer is checked on its
own, so every problem names the file or flag it came from; all problems are
reported together. Layers then merge field by field: a field a layer does not
set never hides a lower layer's value.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ..dsl.decorators import ExperimentSpec
from ..dsl.setting import MODELS, RECORD, TABLE, explicit_fields, setting_fields, setting_row
from ..dsl.settings_table import (
    DATASET_SECTIONS,
    EXPERIMENT_ATTRIBUTES,
    NAME_PATTERN,
    SETTINGS_BY_NAME,
    lookup,
)
from ..errors import ConfigError, FieldProblem, Problem, did_you_mean, display_path
from ..keys import without_keys
from ..wording import said, spelled
from .environment import (
    POINT_AT_AN_END,
    EnvValue,
    Unresolved,
    env_read,
    interpolate,
    unresolved_in,
    verbatim,
    whence,
)
from .nested import deep_merge, dotted_nested, nesting_problem
from .paths import Anchored, anchor_trinity_paths, anchored_model_path, beside, home, read_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


@attrs.frozen
class Layer:
    """One source of settings: a label for messages, its values, its folder, and the file
    it was read from (None for the class, ``--set`` and defaults)."""

    source: str
    values: dict[str, Any]
    base_dir: str
    file: str | None = None


# ------------------------------------------------------------------------------ sources


def _validated(value: Any) -> Any:
    """``value`` as its checks see it: an `Unresolved` leaf reads as text, its own
    problem reported apart."""
    if isinstance(value, Unresolved):
        return ""
    if isinstance(value, dict):
        return {key: _validated(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_validated(item) for item in value]
    return value


class UnsetVariables(ConfigError):
    """Settings name environment variables that are not set (and nothing else is wrong);
    ``paths`` holds the settings that name them, for a caller that replaces some
    (``--aux`` an auxiliary model's endpoint)."""

    def __init__(self, unresolved: Iterable[Unresolved]) -> None:
        found = list(unresolved)
        self.paths = tuple(item.problem.setting for item in found)
        super().__init__([item.problem for item in found])


def _written_in_another_language(path: Path, text: str) -> str:
    """What to add to "invalid TOML" for a settings file written as JSON or YAML (a Trinity
    config, say): the TOML reader's own words point at a line, not at the language."""
    import json

    try:
        json.loads(text)
    except ValueError:
        if path.suffix.lower() not in (".yaml", ".yml"):
            return ""
        language = "YAML"
    else:
        language = "JSON"
    base = (f"; a Trinity YAML is given as the base config: --set trinity_config={path}"
            if language == "YAML" else "")
    return f"; this file is {language}, and settings files are TOML (key = value){base}"


def read_toml(path: str | os.PathLike[str], table: str | None = None) -> Layer:
    """Read a TOML settings file (or its ``[tool.tunedsl]`` table) as a layer."""
    path = Path(path)
    label = str(path) if table is None else f"{path} [{table}]"
    text = read_text(path, "settings file")
    if text.startswith("\ufeff"):  # TOML has no byte-order mark; some editors write one
        raise ConfigError(f"{path}: starts with a byte-order mark (U+FEFF), which TOML does "
                          f"not allow; save it as UTF-8 without one")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}{_written_in_another_language(path, text)}"
                          ) from None
    except ValueError:  # Python reads integers of at most 4,300 digits
        raise ConfigError(f"{path}: {TOO_MANY_DIGITS}") from None
    except RecursionError:  # the TOML reader recurses into nested arrays and tables
        raise ConfigError(f"{path}: {TOO_DEEP}") from None
    problem = nesting_problem(data)  # before anything walks it by recursion
    if problem is not None:
        raise ConfigError(f"{path}: {problem}")
    if table is not None:
        for depth, part in enumerate(parts := table.split(".")):
            data = data.get(part, {})
            if not isinstance(data, dict):
                # [tool] tunedsl = 3, or tool = "x": the table tunedsl reads is a value.
                raise ConfigError(f"{path}: {'.'.join(parts[:depth + 1])} must be a table "
                                  f"(got {data!r}); write the settings under [{table}]")
    return Layer(label, data, str(path.resolve().parent), str(path.resolve()))


def _nearest_pyproject(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
        if candidate.is_symlink() and not candidate.exists():  # (was passed over: sweep 50)
            from ..access import where_a_broken_link_leads

            raise ConfigError(f"{candidate}: a link to {os.readlink(candidate)}, "
                              f"{where_a_broken_link_leads(candidate)}, so the project it "
                              f"marks (its folder, its [tool.tunedsl] settings) would be "
                              f"passed over; fix or remove it")
    return None


def toml_layers(spec: ExperimentSpec, settings_file: str | None) -> list[Layer]:
    """The TOML layers for an experiment, lowest first: the discovered file
    (`discover_toml`), or the ``--settings`` file in its place (a ``pyproject.toml``'s
    ``[tool.tunedsl]`` table), except that a ``--settings``
    file holding only ``[params]`` (what ``tune-prompt -o`` writes) goes on top of the
    discovered one instead of replacing it: applying tuned text must not drop the project's
    algorithm, model and dataset settings."""
    # a pyproject.toml keeps the settings in its [tool.tunedsl] table, wherever it is named
    named = None if settings_file is None else _named_settings(Path(settings_file))
    if named is not None and set(named.values) != {"params"}:
        return [named]  # the discovered file is not even read: the user chose another
    return [layer for layer in (discover_toml(spec), named) if layer is not None]


#: The tables only a pyproject.toml holds.
_PYPROJECT_TABLES = ("build-system", "project")


def _named_settings(path: Path) -> Layer:
    """The ``--settings`` file as a layer: a project file (a ``pyproject.toml``, under any
    name) is read for its ``[tool.tunedsl]`` table, which it must have."""
    whole = read_toml(path)
    if path.name != "pyproject.toml" and not any(isinstance(whole.values.get(key), dict)
                                                 for key in _PYPROJECT_TABLES):
        return whole  # (tunedsl's own `project` setting is a name, not a table)
    tool = whole.values.get("tool")
    if not isinstance(tool, dict) or "tunedsl" not in tool:
        raise ConfigError(f"{path}: a project file with no [tool.tunedsl] table, so it holds "
                          f"no tunedsl settings; add the settings under [tool.tunedsl], or "
                          f"give a tunedsl.toml")
    return read_toml(path, "tool.tunedsl")


def discover_toml(spec: ExperimentSpec) -> Layer | None:
    """The discovered TOML layer for an experiment, the first that applies: the class's
    ``settings``; the nearest ``tunedsl.toml`` from the module's folder up to the project's
    (the nearest ``pyproject.toml``'s folder, else the working folder when the module is
    below it); the ``[tool.tunedsl]`` table of that ``pyproject.toml``."""
    module_dir = Path(spec.file).resolve().parent
    declared = spec.declared.get("settings")
    if declared is not None:  # read as --settings reads it: a pyproject's [tool.tunedsl]
        return _named_settings(module_dir / home(declared))  # ~ as --settings reads it
    pyproject = _nearest_pyproject(module_dir)
    folders = _project_folders(module_dir, pyproject)
    _note_a_working_folder_file_not_read(folders, pyproject)
    for folder in folders:
        found = folder / "tunedsl.toml"
        if found.is_file():
            if pyproject is not None and _has_own_table(pyproject):
                # (the first found applies whole: the other's settings were dropped without
                # a word; sweep 52 A-S8)
                print(f"note: {pyproject} [tool.tunedsl] is not read: {found} applies "
                      f"instead, whole; keep the settings in one of them", file=sys.stderr)
            return read_toml(found)
        if found.is_symlink() or found.exists():  # meant, but not readable
            from ..access import where_a_broken_link_leads  # (a loop: sweep 50 A-W4)

            what = (f"a link to {os.readlink(found)}, {where_a_broken_link_leads(found)}"
                    if found.is_symlink() and not found.exists() else "not a file")
            raise ConfigError(f"{found}: {what}, so the settings kept in it would not "
                              f"apply; fix or remove it")
    if pyproject is not None:
        layer = read_toml(pyproject, "tool.tunedsl")
        return layer if layer.values else None
    return None


def _note_a_working_folder_file_not_read(folders: list[Path], pyproject: Path | None) -> None:
    """Say so when a folder from the working folder down to the module's project (its
    ``pyproject.toml``, below the working folder) holds settings the search does not
    reach (a ``tunedsl.toml``, a ``pyproject.toml``'s ``[tool.tunedsl]``): they were
    dropped without a word."""
    try:
        here = Path.cwd().resolve()
    except OSError:
        return
    if pyproject is None or pyproject.parent == here or not pyproject.parent.is_relative_to(
            here):
        return  # (a module elsewhere: the working folder is no project of it)
    above = [folder for folder in pyproject.parent.parents if folder.is_relative_to(here)]
    unread = [display_path(str(found)) for folder in above for found in (
        folder / "tunedsl.toml", folder / "pyproject.toml")
        if found.is_file() and (found.name == "tunedsl.toml" or _has_own_table(found))]
    if not unread:
        return
    use = said(f"--settings {unread[0]}", f"settings='{unread[0]}'")
    files = unread[0] if len(unread) == 1 else \
        f"{', '.join(unread[:-1])} and {unread[-1]}"
    note = (f"note: {files} {'is' if len(unread) == 1 else 'are'} not read: the "
            f"experiment's project is {display_path(str(pyproject.parent))}, by its "
            f"pyproject.toml, and its settings are searched there; give {use} to use "
            f"{'it' if len(unread) == 1 else 'the nearest'}")
    if note not in _NOTES_SAID:  # (an experiment loaded twice in a command says it once)
        _NOTES_SAID.add(note)
        print(note, file=sys.stderr)


#: The notes on unread settings said in this process.
_NOTES_SAID: set[str] = set()


def _has_own_table(pyproject: Path) -> bool:
    """Whether a ``pyproject.toml`` holds a ``[tool.tunedsl]`` table (read loosely: one
    that cannot be read says nothing here)."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    tool = data.get("tool")
    return isinstance(tool, dict) and isinstance(tool.get("tunedsl"), dict)


def _project_folders(module_dir: Path, pyproject: Path | None) -> list[Path]:
    """The folders a ``tunedsl.toml`` is looked for in, nearest first: from the module's up
    to the project's. A package's module finds the file at its project's root, as a
    ``pyproject.toml`` is found; a file outside the project (a home folder's) never applies."""
    if pyproject is not None:
        root = pyproject.parent
    else:
        try:
            root = Path.cwd().resolve()
        except OSError:  # (the working folder was removed)
            root = module_dir
        if not module_dir.is_relative_to(root):
            root = module_dir
    folders = [module_dir]
    while folders[-1] != root and folders[-1].parent != folders[-1]:
        folders.append(folders[-1].parent)
    return folders


def class_layer(spec: ExperimentSpec) -> Layer:
    """The values an ``@experiment`` class sets, records reduced to their explicit fields."""
    values: dict[str, Any] = {}
    for key, value in spec.declared.items():
        row = SETTINGS_BY_NAME[key]
        if row.class_only:
            continue
        where = f"{spec.qualname} ({spec.where}): {key}"
        if isinstance(value, os.PathLike):  # a pathlib.Path: its text
            value = os.fspath(value)
        if row.kind == RECORD and value is not None:
            values[key] = _record_values(value, where)
        elif row.kind == MODELS:
            values[key] = {name: _record_values(model, f"{where}.{name}")
                           for name, model in value.items()}
        elif row.path and key in spec.origins:
            # inherited: meant from the base class's file, as its records' paths are
            values[key] = beside(value, str(Path(spec.origins[key]).resolve().parent),
                                 only_if_exists=False)
        else:
            values[key] = value
    return Layer(f"{spec.qualname} ({spec.where})", values, str(Path(spec.file).resolve().parent))


def _record_values(record: Any, where: str) -> dict[str, Any]:
    values = {name: getattr(record, name) for name in explicit_fields(record)}
    rows = {a.name: setting_row(a) for a in setting_fields(type(record))}
    for name, value in values.items():
        # A record inside a record (Model.lora) is its explicit fields too, so a [model.lora]
        # table below it keeps the fields it does not set.
        if rows[name]["record"] is not None and value is not None:
            values[name] = _record_values(value, f"{where}.{name}")
        # A relative path means "beside the file that built this record", which may be a
        # shared module rather than the experiment's own.
        elif rows[name]["path"] and not (name == "model_path"
                                         and getattr(record, "base_url", None) is not None):
            # (a model an endpoint serves is named, not a folder beside the module)
            try:
                values[name] = anchored_model_path(value, record.defined_in) \
                    if name == "model_path" else beside(value, record.defined_in)
            except ConfigError as exc:
                raise ConfigError(f"{where}.{name}: {exc}") from None
    return values


def parse_overrides(items: Iterable[str]) -> Layer:
    """Turn ``--set dotted.key=value`` items into a layer; values parse as TOML values."""
    if items is None or isinstance(items, Mapping):
        raise ConfigError(f"overrides={items!r}: give a list of KEY=VALUE strings, e.g. "
                          f"overrides=['algorithm.group_size=8']")
    if isinstance(items, str):  # iterating it would give one character per "override"
        raise ConfigError(f"overrides {items!r}: a list of KEY=VALUE strings is expected, not "
                          f"one string; write overrides=[{items!r}]")
    values: dict[str, Any] = {}
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"overrides item {item!r}: give KEY=VALUE strings, e.g. "
                              f"'algorithm.group_size=8'")
        key, sep, raw = _split_item(item)
        if not sep or not key.strip():
            raise ConfigError(
                f"{_set(item)}: expected KEY=VALUE, e.g. {_example()}"
            )
        target = values
        *parents, leaf = _key_parts(key.strip(), item)
        if not all(part.strip() for part in (*parents, leaf)):
            raise ConfigError(f"{_set(item)}: the key {key.strip()!r} has an empty part; "
                              f"write a dotted setting name, e.g. {_example()}")
        for part in parents:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise ConfigError(f"{_set(item)}: {part} is already set to a value")
        value = _parse_value(raw.strip(), item)
        if isinstance(value, dict) and isinstance(target.get(leaf), dict):
            # a table after dotted keys of it merges, as the other way round and as layers
            # do (algorithm.group_size=4 then algorithm={batch_size=4} lost the group size)
            value = deep_merge(target[leaf], value)
        target[leaf] = value
    return Layer(said("--set", "overrides"), values, os.getcwd())


def _split_item(item: str) -> tuple[str, str, str]:
    """``KEY=VALUE`` at its first ``=`` outside a quoted part of the key (``params."a=b"``
    names the param ``a=b``), as ``str.partition`` splits."""
    quote, escaped = "", False
    for at, char in enumerate(item):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\" and quote == '"':
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "=":
            return item[:at], "=", item[at + 1:]
    return item, "", ""


def _key_parts(key: str, item: str) -> list[str]:
    """A dotted key's parts, read as TOML reads a key: ``params."a.b"`` is the one param
    ``a.b``, its quotes not part of the name."""
    if '"' not in key and "'" not in key:
        return [part.strip() for part in key.split(".")]  # TOML allows space around dots
    try:
        parsed: Any = tomllib.loads(f"{key} = 0")
    except tomllib.TOMLDecodeError:
        raise ConfigError(f"{_set(item)}: the key {key!r} is not a TOML key; quote a part "
                          f"holding dots or spaces whole, e.g. {said('--set ', '')}"
                          f"'params.\"a.b\"=1'") from None
    parts = []
    while isinstance(parsed, dict):
        [(part, parsed)] = parsed.items()
        parts.append(part)
    return parts


def _set(item: str) -> str:
    """An override as the reader gave it: ``--set 'KEY=VALUE'`` or ``overrides item
    'KEY=VALUE'``."""
    return f"{spelled('set')} {without_keys(item)!r}"  # (a key pasted in: not shown)


def _example() -> str:
    """An override, as the reader writes one."""
    return said("--set algorithm.group_size=8", "'algorithm.group_size=8'")


#: What Python says of an integer past ``sys.get_int_max_str_digits()``, in tunedsl's words.
TOO_MANY_DIGITS = ("an integer of more than 4,300 digits, more than Python reads; give a "
                   "smaller number, or quote it as text")


#: Why a settings file or value nested past what its reader goes is refused.
TOO_DEEP = "nested deeper than the reader goes (about a thousand levels); flatten it"


def _parse_value(raw: str, item: str) -> Any:
    try:
        value = tomllib.loads(f"value = {raw}")["value"]
    except RecursionError:
        raise ConfigError(f"{_set(item)}: {TOO_DEEP}") from None
    except ValueError as exc:
        if not isinstance(exc, tomllib.TOMLDecodeError):
            raise ConfigError(f"{_set(item)}: {TOO_MANY_DIGITS}") from None
        if raw[:1] in ("[", "{", '"', "'"):  # meant as a TOML list, table or string
            kind = {"[": "a list", "{": "a table"}.get(raw[0], "a quoted string")
            key = item.partition("=")[0].strip()
            why = re.sub(r" \(at [^)]*\)", "",  # (positions in tunedsl's "value = ..." line)
                         str(exc))
            raise ConfigError(f"{_set(item)}: the value starts as {kind} but is not TOML "
                              f"({without_keys(why)}); close its brackets and quotes, or "
                              f"quote the whole of a string: {said('--set ', '')}"
                              f"'{key}=\"...\"'") from None
        if POINT_AT_AN_END.fullmatch(raw.strip()):  # .001 and 1.: numbers on a command
            return float(raw)  # line, which TOML (a digit each side of the point) is not
        return raw  # a bare word such as a model path is meant as a string
    problem = nesting_problem(value)  # before anything walks it by recursion
    if problem is not None:
        raise ConfigError(f"{_set(item)}: {problem}")
    import datetime

    if isinstance(value, (datetime.date, datetime.time)):  # no setting takes one: a
        return raw  # date-stamped name (name=2024-06-01) is text, as a bare word is
    return value


# ----------------------------------------------------------------------------- checking


def _invalid(layer: Layer, setting: str, detail: str) -> Problem:
    """A value of ``layer`` its setting refuses."""
    return Problem(f"invalid value @ {setting}: {detail}", where=layer.source, setting=setting)


def normalize(layer: Layer) -> tuple[dict[str, Any], list[Problem]]:
    """Check a layer's keys and values against the settings table; return its values
    (environment variables resolved, relative paths anchored to the layer's folder) and
    its problems."""
    problems: list[Problem] = []
    out: dict[str, Any] = {}
    for key, value in layer.values.items():
        nested = nesting_problem(value)  # every reader below walks it by recursion
        if nested is not None:
            problems.append(_invalid(layer, key, nested))
            continue
        value = interpolate(value, layer.source, key, problems)
        row = SETTINGS_BY_NAME.get(key)
        if row is None:
            problems.append(_top_level_extra(layer.source, key, value))
        elif row.class_only and key == "settings":  # (names a settings file: not in one)
            problems.append(Problem(f"{key} cannot be set here: it names a settings file, "
                                    f"which cannot be given inside one; give it with "
                                    f"--settings FILE, or settings = ... on the @experiment "
                                    f"class", where=layer.source, setting=key))
        elif row.class_only:
            problems.append(Problem(f"{key} cannot be set here; it is code: assign it on "
                                    f"the @experiment class", where=layer.source, setting=key))
        elif row.kind == RECORD and value is None and row.default is None:
            out[key] = None  # a class dropping the optional record its base set
        elif row.kind == RECORD:
            out[key] = _normalize_record(layer, key, value, row.record_class, problems)
        elif row.kind == MODELS:
            out[key] = _normalize_auxiliary(layer, value, problems)
        elif row.kind == TABLE:
            problems += [Problem(f"invalid value @ {problem}", where=layer.source, setting=key)
                         for problem in row.problem(_validated(value))]
            if key == "trinity" and isinstance(value, dict):
                # A Python dict's "algorithm.kl_loss_fn" is nested as TOML nests it (it
                # reached Trinity's YAML as one unknown key, refused only there); its paths
                # are read beside the file naming them, as a base YAML's are.
                value = anchor_trinity_paths(dotted_nested(value), layer.base_dir)
            # [trinity] is merged into Trinity's YAML as written (its ${...} are OmegaConf's)
            out[key] = verbatim(value) if key == "trinity" else value
        else:
            problem = None if isinstance(value, Unresolved) else row.problem(value)
            if problem and isinstance(value, EnvValue):  # ${env:N} for a number: its value,
                parsed = env_read(value)  # or what is wrong with that number (90.0 of whole
                again = row.problem(parsed)  # seconds was "a positive number (got '90.0')")
                if again is None:
                    value, problem = parsed, None
                elif not isinstance(parsed, str):
                    problem = again
            if problem:  # say where the text came from
                problem += whence(value)
            if problem:
                problems.append(_invalid(layer, key, problem))
            if key == "checkpoint_root_dir" and isinstance(value, str) \
                    and value.startswith("~"):
                # where runs go, relative to where they run from (not anchored to a
                # file), yet "~" is the home folder as a shell reads it
                value = beside(value, None)
            out[key] = _anchor(layer, value) if row.path else value
    return out, problems


def _top_level_extra(source: str, key: str, value: Any = None) -> Problem:
    """A top-level key no setting has; a section's field set at the top level (TOML's
    ``learning_rate`` outside ``[algorithm]``) is named with its section, and a header that
    wraps the settings (``[tool.tunedsl]`` copied from a pyproject into ``tunedsl.toml``)
    is named as that."""
    choices = [name for name in EXPERIMENT_ATTRIBUTES if not SETTINGS_BY_NAME[name].class_only]
    inner = value.get("tunedsl") if key == "tool" and isinstance(value, dict) else value
    if key in ("tool", "tunedsl", "experiment") and isinstance(inner, dict) and \
            set(inner) & set(choices):
        in_pyproject = source.endswith("[tool.tunedsl]")
        header = "tool.tunedsl" if key == "tool" else \
            f"tool.tunedsl.{key}" if in_pyproject else key
        home = "directly under [tool.tunedsl]" if in_pyproject else \
            "at the top of the file (only pyproject.toml needs [tool.tunedsl])"
        prefix = "tool.tunedsl." if in_pyproject else ""
        return Problem(f"extra fields found ({key}) @ <top level>: the settings sit under a "
                       f"[{header}] table; put them {home}, with sub-tables named "
                       f"[{prefix}algorithm], [{prefix}model], ...", where=source,
                       setting=key)
    return _extra_field(source, key, "<top level>", choices)


def _extra_field(source: str, key: str, path: str, choices: Iterable[str]) -> Problem:
    """A key ``path`` has no field for. One that another section (or the top level) has by
    that exact name is pointed there: a near spelling within ``path`` (``total_steps`` is
    close to ``save_interval_steps``) is the wrong lead for it."""
    setting = key if path == "<top level>" else f"{path}.{key}"
    # a field of this very section whose name holds the key as a word (model.path: the
    # model's model_path), else where a field of that name lives
    within = [choice for choice in choices if choice.endswith(f"_{key}")]
    home = None if within else _home_of(key, path)
    if within:
        return Problem(f"extra fields found ({key}) @ {path} (did you mean {within[0]!r}?)",
                       where=source, setting=setting)
    if home is None:
        return Problem(f"extra fields found ({key}) @ {path}{did_you_mean(key, choices)}",
                       where=source, setting=setting)
    return Problem(f"extra fields found ({key}) @ {path}: it is {home}", where=source,
                   setting=setting)


def _home_of(key: str, path: str) -> str | None:
    """Where a setting named ``key`` lives, if not under ``path``: worded for a message (an
    algorithm part's argument, such as gigpo's ``omega``, in that part's arguments)."""
    if path in ("algorithm", "warmup"):
        from ..dsl.algorithms import ADVANTAGE_ARGS, POLICY_LOSS_ARGS, SAMPLE_STRATEGY_ARGS

        for table, parts in (("advantage_args", ADVANTAGE_ARGS),
                             ("policy_loss_args", POLICY_LOSS_ARGS),
                             ("sample_strategy_args", SAMPLE_STRATEGY_ARGS)):
            owners = sorted(name for name, arguments in parts.items() if key in arguments)
            if owners:
                kind = table.removesuffix("_args").replace("_", " ")
                return (f"an argument of the {kind} {', '.join(owners[:3])}"
                        f"{' and others' if len(owners) > 3 else ''}; set "
                        f"{path}.{table}.{key} (in TOML: under [{path}.{table}])")
    if key in ("name", "model", "model_name") and (
            path == "model" or path.startswith("auxiliary_models.")):  # (it was told to set
        # the experiment's name, which names its run directories; sweep 47 B-W6)
        return (f"not a field of a model, which is named by its model_path (a folder, a hub "
                f"id, or the name an endpoint serves); set {path}.model_path")
    row = SETTINGS_BY_NAME.get(key)
    if path != "<top level>" and row is not None and not row.class_only and row.kind not in (
            RECORD, MODELS, TABLE):  # the experiment's name, not a dataset's
        return f"a top-level setting; set {key} (in TOML: above every [table])"
    owners = [name for name in EXPERIMENT_ATTRIBUTES if not SETTINGS_BY_NAME[name].class_only
              and SETTINGS_BY_NAME[name].kind == RECORD and name != path.partition(".")[0]
              and key in {field.name for field in setting_fields(
                  SETTINGS_BY_NAME[name].record_class)}]
    if path == "warmup" and "warmup_dataset" in owners:  # the warm-up's own data
        owners.remove("warmup_dataset")
        owners.insert(0, "warmup_dataset")
    if owners:
        named = " and ".join(filter(None, [", ".join(owners[:-1]), owners[-1]]))
        return (f"a field of {named}; set {owners[0]}.{key} (in TOML: under "
                f"[{owners[0]}])")
    if path == "<top level>" or row is None or row.class_only:
        return None
    if row.kind in (RECORD, MODELS, TABLE):
        return f"a section of its own; set {key}.<field> (in TOML: under [{key}])"
    return f"a top-level setting; set {key} (in TOML: above every [table])"


def _normalize_record(layer: Layer, path: str, value: Any, cls: type,
                      problems: list[Problem]) -> dict[str, Any]:
    if not isinstance(value, dict):
        row = SETTINGS_BY_NAME.get(path)
        unset = (f"; no settings file or override can remove {path}: set {path} = None on "
                 f"the class (a subclass drops its base's)") \
            if row is not None and row.default is None else ""
        problems.append(_invalid(layer, path, f"must be a table of {cls.__name__} fields "
                                              f"(got {value!r}){unset}"))
        return {}
    fields = {a.name: a for a in setting_fields(cls)}
    out = {}
    for key, item in value.items():
        attribute = fields.get(key)
        if attribute is None:
            problems.append(_extra_field(layer.source, key, path, fields))
            continue
        nested = setting_row(attribute)["record"]
        if nested is not None:  # a table of its own (None: the class turned it off)
            out[key] = item if item is None else _normalize_record(
                layer, f"{path}.{key}", item, nested, problems)
            continue
        try:
            if attribute.validator is not None and not isinstance(item, Unresolved):
                try:
                    attribute.validator(None, attribute, item)
                except FieldProblem:
                    if not isinstance(item, EnvValue):
                        raise
                    attribute.validator(None, attribute, env_read(item))
                    item = env_read(item)  # ${env:N} for a number: its value
        except FieldProblem as problem:
            problems.append(_invalid(layer, f"{path}.{key}", problem.detail + whence(item) +
                                     _quote_it(layer, f"{path}.{key}", item, problem.detail)))
        # A file or folder beside the layer's file; else it may be a hub id. (A model an
        # endpoint serves is named, not a folder: a folder of its name stays apart.)
        served = key == "model_path" and value.get("base_url") is not None
        out[key] = anchored_model_path(item, layer.base_dir) if key == "model_path" \
            and not isinstance(item, Unresolved) and not served else \
            _anchor(layer, item, only_if_exists=True) \
            if setting_row(attribute)["path"] and not isinstance(item, Unresolved) \
            and not served else \
            verbatim(item) if key == "trinity" else item  # a model's engine options, as written
    return out


def _quote_it(layer: Layer, setting: str, item: Any, detail: str) -> str:
    """``; to mean the text 123, quote it: ...`` for a number (or true/false) read from an
    override or a TOML file where text belongs: both read a bare 123 as a number (a model
    named by digits, ``--set model.model_path=123``, was refused with no word of quoting)."""
    if not isinstance(item, (bool, int, float)) or "string" not in detail:
        return ""
    text = str(item).lower() if isinstance(item, bool) else str(item)
    quoted = f'"{text}"'
    if layer.source == said("--set", "overrides"):
        return f"; to mean the text {text}, quote it: {_set(f'{setting}={quoted}')}"
    if layer.file is not None:
        return f"; to mean the text {text}, quote it: {setting.rpartition('.')[2]} = {quoted}"
    return ""


def _normalize_auxiliary(layer: Layer, value: Any, problems: list[Problem]) -> dict[str, Any]:
    if not isinstance(value, dict):
        problems.append(_invalid(layer, "auxiliary_models", f"must be a table of name -> "
                                                            f"model settings (got {value!r})"))
        return {}
    out = {}
    for name, settings in value.items():
        if not NAME_PATTERN.match(name):
            problems.append(_invalid(layer, "auxiliary_models", f"the name {name!r} may hold "
                                                                f"only letters, digits, '_', "
                                                                f"'.' and '-'"))
        out[name] = _normalize_record(layer, f"auxiliary_models.{name}", settings,
                                      SETTINGS_BY_NAME["auxiliary_models"].record_class,
                                      problems)
    return out


def setting_problem(dotted: str, value: Any) -> str | None:
    """What is wrong with ``value`` for the setting ``dotted`` (``algorithm.group_size``,
    ``rollout_timeout``), worded to read after its name; None when nothing is."""
    return lookup(dotted).problem(value)


def _anchor(layer: Layer, value: Any, *, only_if_exists: bool = False) -> Any:
    """Make a relative path absolute against the layer's folder.

    With ``only_if_exists``, a path that is not there is left alone: it may be a
    Hugging Face hub id such as ``openai/gsm8k``.
    """
    return beside(value, layer.base_dir, only_if_exists=only_if_exists)


# ------------------------------------------------------------------------------ merging


def params_above_class(tomls: list[Layer], cls: Layer,
                       settings_file: str | None) -> list[Layer]:
    """The TOML and class layers in merge order: the TOML below the class, except the
    ``[params]`` of a file named with ``--settings``, which sit above the class's, key by key.

    The class's ``params`` are the workflow's defaults (the prompt it starts from), and a
    discovered ``tunedsl.toml`` sets defaults the class refines. A file named on the command
    line is this run's choice: ``tunedsl tune-prompt`` writes the tuned params as such a
    file, and they must win over the very class values they were tuned from. Only ``params``
    move, and key by key: a param the file does not set keeps the class's value, and every
    other setting of the file stays below the class.
    """
    named = tomls[-1] if tomls and settings_file is not None else None
    params = named.values.get("params") if named is not None else None
    if named is None or not isinstance(params, dict):
        return [*tomls, cls]
    rest = {key: value for key, value in named.values.items() if key != "params"}
    return [*tomls[:-1], attrs.evolve(named, values=rest), cls,
            attrs.evolve(named, values={"params": params})]


def merge_layers(layers: Iterable[Layer]) -> dict[str, Any]:
    """Check every layer, then merge them in order (later wins, field by field)."""
    merged: dict[str, Any] = {}
    problems: list[Problem] = []
    for layer in layers:
        values, found = normalize(layer)
        problems += found + _one_length_a_layer(layer, values)
        merged = deep_merge(_lengths_a_layer_replaces(merged, values), values)
    unresolved = unresolved_in(merged)  # those no later layer replaced
    if unresolved and not problems:
        raise UnsetVariables(unresolved)
    problems += [item.problem for item in unresolved]
    if problems:
        raise ConfigError(problems)
    return _served_models_named(merged)


#: The settings of a dataset's length: total_steps decides where both are given (Trinity's
#: rule), and total_epochs was then dropped without a word (sweep 47 A-S4).
_LENGTHS = ("total_steps", "total_epochs")


def _one_length_a_layer(layer: Layer, values: Mapping[str, Any]) -> list[Problem]:
    """A layer giving a dataset both lengths: the run would go total_steps, and the epochs
    asked for would be ignored."""
    problems = []
    for section in DATASET_SECTIONS:
        record = values.get(section)
        if isinstance(record, dict) and all(record.get(key) is not None for key in _LENGTHS):
            problems.append(Problem(
                f"{section}.total_epochs = {record['total_epochs']} is given with total_steps "
                f"= {record['total_steps']}, which decides the run's length (Trinity's rule), "
                f"so the epochs would be ignored; give one of them", where=layer.source,
                setting=f"{section}.total_epochs"))
    return problems


def _lengths_a_layer_replaces(merged: dict[str, Any],
                              values: Mapping[str, Any]) -> dict[str, Any]:
    """``merged`` without an earlier layer's total_steps of a dataset a later layer gives
    total_epochs alone (``--set train_dataset.total_epochs=2`` over a class's total_steps):
    the later length asked for is the one meant, and it was ignored."""
    out = merged
    for section in DATASET_SECTIONS:
        record, before = values.get(section), merged.get(section)
        if isinstance(record, dict) and isinstance(before, dict) and \
                record.get("total_epochs") is not None and "total_steps" not in record and \
                before.get("total_steps") is not None:
            out = {**out, section: {key: value for key, value in before.items()
                                    if key != "total_steps"}}
    return out


def _served_models_named(merged: dict[str, Any]) -> dict[str, Any]:
    """The merged settings with each model's path as the layers left it, but for a model
    an endpoint serves (``base_url`` set in any layer): named as written, not as a folder
    of that name beside the file that wrote it (sweep 45 A-W5)."""
    def named(record: Any) -> Any:
        path = record.get("model_path") if isinstance(record, dict) else None
        if not isinstance(path, Anchored):
            return record
        served = record.get("base_url") is not None
        return {**record, "model_path": path.written if served else str(path)}

    out = dict(merged)
    if "model" in out:
        out["model"] = named(out["model"])
    if isinstance(out.get("auxiliary_models"), dict):
        out["auxiliary_models"] = {name: named(record)
                                   for name, record in out["auxiliary_models"].items()}
    return out


def explicit_keys(merged: Mapping[str, Any]) -> frozenset[str]:
    """Dotted names of every setting some layer set (``model.temperature``, ...)."""
    keys = set()
    for key, value in merged.items():
        kind = SETTINGS_BY_NAME[key].kind
        if kind == RECORD and value is not None:
            keys |= {f"{key}.{field}" for field in value}
        elif kind == MODELS:
            keys |= {f"{key}.{name}.{field}" for name, fields in value.items() for field in fields}
        else:
            keys.add(key)
    return frozenset(keys)
