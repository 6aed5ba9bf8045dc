"""Nested dicts addressed by dotted keys (``explorer.rollout_model.seed``), and merged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def get_path(data: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    """``(found, value)`` for a dotted key in nested mappings."""
    for part in dotted.split("."):
        if not isinstance(data, Mapping) or part not in data:
            return False, None
        data = data[part]
    return True, data


def set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set a dotted key in nested dicts, creating the parents."""
    *parents, leaf = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[leaf] = value


def dotted_nested(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with each dotted key nested as TOML nests it (``{"algorithm.kl_loss_fn":
    "k3"}`` is ``{"algorithm": {"kl_loss_fn": "k3"}}``), at every level; a dotted key and a
    table for the same place merge, the dotted key's leaves winning."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        value = dotted_nested(value) if isinstance(value, Mapping) else value
        if isinstance(key, str) and "." in key:
            branch: dict[str, Any] = {}
            set_path(branch, key, value)
            out = deep_merge(out, branch)
        else:
            out = deep_merge(out, {key: value})
    return out


def deep_merge(lower: Mapping[str, Any], higher: Mapping[str, Any]) -> dict[str, Any]:
    """Merge two nested dicts key by key; ``higher`` wins where both set a leaf."""
    merged = dict(lower)
    for key, value in higher.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one mapping of dotted keys to their leaves (an empty mapping is a
    leaf)."""
    if not isinstance(data, Mapping) or not data:
        return {prefix: data} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


#: How deep a setting's value may nest: the YAML it travels in is written and read by
#: recursion, as every layer's reader walks it.
MOST_NESTING = 100
#: How many lists and tables a setting's value may hold, each alias of a YAML file counted
#: where it is used (every walk over the value expands them: nine aliases of nine hang it).
MOST_CONTAINERS = 1_000_000


def nesting_problem(value: Any) -> str | None:
    """Why a setting's value cannot travel as YAML: a list or table inside itself (which a
    Python class can build), or nesting past `MOST_NESTING`; None otherwise. Walked
    without recursion, so any value is answered."""
    stack: list[tuple[Any, int, frozenset[int]]] = [(value, 0, frozenset())]
    visited = 0
    while stack:
        item, depth, holders = stack.pop()
        if not isinstance(item, (dict, list, tuple)):
            continue
        visited += 1
        if visited > MOST_CONTAINERS:  # YAML aliases of aliases: a "billion laughs"
            return (f"holds more than {MOST_CONTAINERS:,} lists and tables once its YAML "
                    f"aliases are expanded; write it out without them")
        if id(item) in holders:
            return ("holds itself (a list or table inside itself), which no YAML can write; "
                    "give a copy instead of the container itself")
        if depth >= MOST_NESTING:
            return f"nested more than {MOST_NESTING} deep; flatten it"
        holders = holders | {id(item)}
        inner = item.values() if isinstance(item, dict) else item
        stack.extend((part, depth + 1, holders) for part in inner)
    return None
