"""What verl makes of ``trainer.trainer_config``: the overrides Trinity-RFT merges into
the config it builds for verl's workers (``build_verl_config`` in
``trinity/trainer/verl/config.py``).

Trinity's ``Config`` takes ``trainer_config`` as any value, so its validator reads none of
it, and verl reads it only on the GPU workers, when each section becomes its dataclass
(``omega_conf_to_dataclass`` in ``verl/workers/engine_workers.py``): a misspelt key is a
``TypeError`` there, after the cluster has started. Other keys are dropped with no more
than a line in the trainer's log: a key Trinity sets from its own settings
(``FROZEN_KEYS``), an engine table of another training strategy, a section that is not
one of those merged. Each is said here, at ``check``, with the path the user wrote.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import importlib.util
from collections.abc import Mapping
from typing import Any

from .unattended import unattended

#: Where the overrides sit in Trinity's config (the base YAML's path; ``[trinity]`` adds
#: ``trinity.`` in front).
TRAINER_CONFIG = "trainer.trainer_config"

#: The wrapper of verl's older layout, whose sections Trinity unwraps.
_WRAPPER = "actor_rollout_ref"

#: Overrides of the model's own config (transformers'), where any of its keys may go;
#: tunedsl writes the attention implementation there.
_MODEL_CONFIG = ("model", "override_config")


def verl_override_problems(validated: Any, written: Mapping[str, Any]) -> list[str]:
    """One line for each key of ``trainer.trainer_config`` in ``written`` (the config
    handed to Trinity) that verl would refuse or Trinity would drop, ``validated`` being
    Trinity's checked ``Config`` of it; nothing when verl is not installed or is older than
    the 0.8 that Trinity builds this config for."""
    not_a_table = trainer_config_problem(written)
    if not_a_table is not None:
        return [not_a_table]
    trainer = written.get("trainer")
    given = trainer.get("trainer_config") if isinstance(trainer, Mapping) else None
    if not given:
        return []
    if validated.model.tinker.enable:
        return [f"trinity: {TRAINER_CONFIG}: the experiment trains through Tinker, which "
                f"reads no verl config, so it would be ignored; remove it"]
    if not _builds_verl_config():
        return []
    from trinity.trainer.verl.config import FROZEN_KEYS, build_verl_config

    sections, problems = _sections(given)
    leaves = _leaves(sections)
    if all(path[:2] == _MODEL_CONFIG for _, path in leaves):
        return problems  # (tunedsl's attention setting alone: no build to wait for)
    strategy = validated.trainer.trainer_strategy
    bare = copy.deepcopy(validated)
    bare.trainer.trainer_config = {}
    try:
        with unattended():  # (Trinity logs each override it drops; each is said below)
            own = build_verl_config(bare)  # what Trinity writes before the overrides
            merged = build_verl_config(copy.deepcopy(validated))  # (it edits the overrides)
    except Exception as exc:  # the trainer would stop the same way on the cluster
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return [*problems, f"trinity: {TRAINER_CONFIG}: Trinity-RFT cannot build verl's "
                           f"config from it ({reason}); fix or remove the overrides"]
    said: list[tuple[str, ...]] = []  # (a table said once, not again for each key in it)
    for as_written, path in leaves:
        if any(path[:len(table)] == table for table in said):
            continue
        where = f"{TRAINER_CONFIG}.{as_written}"
        dotted = ".".join(path)
        before = len(problems)
        if dotted in FROZEN_KEYS:
            problems.append(f"trinity: {where}: Trinity-RFT sets {dotted} from its own "
                            f"settings and ignores this override; remove it")
        elif path[0] in ("actor", "ref", "critic") and len(path) > 1 \
                and path[1] in _other_strategy_engines(strategy):
            problems.append(f"trinity: {where}: the trainer's strategy is {strategy}, whose "
                            f"verl config has no {path[1]} table (Trinity drops it); remove "
                            f"it, or set trainer.trainer_strategy")
        elif isinstance(_at(own, path), Mapping) and not isinstance(_at(merged, path), Mapping):
            problems.append(f"trinity: {where}: verl reads a table of settings there, and "
                            f"this value would replace it; give a table, or remove it")
        else:
            unknown = _unknown_field(own, merged, path)
            if unknown:
                problems.append(f"trinity: {where}: verl's {unknown} has no field "
                                f"{path[-1]!r}, and its workers would stop on it after the "
                                f"cluster started; fix its name, or remove it")
        if len(problems) > before:
            said.append(path)
    return problems


def trainer_config_problem(written: Mapping[str, Any]) -> str | None:
    """The line for a ``trainer.trainer_config`` of ``written`` (the config handed to
    Trinity) that is no table, or None. Trinity's ``Config`` takes it as any value, and its
    verl builder then fails on the trainer, so ``config`` says it as ``check`` does (it
    wrote ``trainer_config: 5`` into the YAML: sweep 51 A-W4); no Trinity needed."""
    trainer = written.get("trainer")
    given = trainer.get("trainer_config") if isinstance(trainer, Mapping) else None
    if given is not None and not isinstance(given, Mapping):
        return (f"trinity: {TRAINER_CONFIG} is given {given!r}, where Trinity-RFT reads a "
                f"table of verl's sections; give a table, or remove it")
    return None


def _builds_verl_config() -> bool:
    """Whether the installed Trinity builds verl's config itself (verl 0.8 and later)."""
    try:
        from trinity.trainer.trainer import is_verl_legacy

        return importlib.util.find_spec("verl") is not None and not is_verl_legacy()
    except ImportError:
        return False


def _sections(given: Mapping[str, Any]) -> tuple[dict[str, tuple[str, Any]], list[str]]:
    """The sections Trinity merges (``_normalize_trainer_config``), each with the path the
    user wrote it under, and a line for each key it drops."""
    from trinity.trainer.verl.config import _MERGEABLE_KEYS as MERGED

    sections: dict[str, tuple[str, Any]] = {}
    problems = []
    wrapped = given.get(_WRAPPER)
    if _WRAPPER in given and not isinstance(wrapped, Mapping):
        problems.append(f"trinity: {TRAINER_CONFIG}.{_WRAPPER}: Trinity-RFT reads a table "
                        f"of verl's sections there, and drops this value; give a table, or "
                        f"remove it")
    if isinstance(wrapped, Mapping):
        for key, value in wrapped.items():
            if key in MERGED and key != "critic":
                sections[key] = (f"{_WRAPPER}.{key}", value)
            else:
                problems.append(_dropped(f"{_WRAPPER}.{key}", MERGED))
    for key, value in given.items():
        if key == _WRAPPER:
            continue
        if key not in MERGED:
            problems.append(_dropped(key, MERGED))
        elif key in sections:  # (Trinity takes the wrapped one)
            problems.append(f"trinity: {TRAINER_CONFIG}.{key}: it is given under "
                            f"{_WRAPPER} too, and Trinity-RFT reads that one; give it once")
        else:
            sections[key] = (key, value)
    return sections, problems


def _dropped(written: str, merged: tuple[str, ...]) -> str:
    return (f"trinity: {TRAINER_CONFIG}.{written}: Trinity-RFT passes verl only "
            f"{', '.join(merged)} (or {_WRAPPER}.model, .actor, .ref, .rollout) and drops the "
            f"rest; move it under one of them, or set it among Trinity's own settings")


def _leaves(sections: dict[str, tuple[str, Any]]) -> list[tuple[str, tuple[str, ...]]]:
    """Each key the user set, as (the path written, the path in verl's config); a table is
    followed down to its keys."""
    found = []

    def walk(value: Any, written: str, path: tuple[str, ...]) -> None:
        found.append((written, path))
        if isinstance(value, Mapping):
            for key, inner in value.items():
                walk(inner, f"{written}.{key}", (*path, str(key)))

    for section, (written, value) in sections.items():
        if isinstance(value, Mapping):
            for key, inner in value.items():
                walk(inner, f"{written}.{key}", (section, str(key)))
        else:  # (said as a value where a table belongs)
            found.append((written, (section,)))
    return found


def _at(config: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` of a built config, or None."""
    for key in path:
        config = config.get(key) if isinstance(config, Mapping) else None
    return config


def _unknown_field(own: Any, merged: Any, path: tuple[str, ...]) -> str:
    """The name of verl's dataclass that has no field for the last key of ``path``, or
    ``""``: a key Trinity writes itself is known (verl's workers rename some of them, the
    ref's ``log_prob_*``), and a table with no dataclass named (``_target_``) is free."""
    node, mine = merged, own
    for depth, key in enumerate(path):
        if depth and isinstance(node, Mapping) and "_target_" in node:
            fields = _fields(node["_target_"])
            known = isinstance(mine, Mapping) and key in mine
            if fields is not None and key not in fields and not known:
                return node["_target_"].rsplit(".", 1)[-1]
        node = node.get(key) if isinstance(node, Mapping) else None
        mine = mine.get(key) if isinstance(mine, Mapping) else None
        if node is None:
            return ""
    return ""


def _fields(target: str) -> set[str] | None:
    """The field names of the dataclass ``target`` names, or None when it names none."""
    module, _, name = target.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return {field.name for field in dataclasses.fields(found)} \
        if dataclasses.is_dataclass(found) else None


def _other_strategy_engines(strategy: str) -> tuple[str, ...]:
    """The engine tables Trinity strips for ``strategy`` (``_strip_incompatible_engine_keys``)."""
    from trinity.trainer.verl.config import _FSDP_ENGINE_KEYS, _MEGATRON_ENGINE_KEYS

    return _MEGATRON_ENGINE_KEYS if strategy.startswith("fsdp") else _FSDP_ENGINE_KEYS
