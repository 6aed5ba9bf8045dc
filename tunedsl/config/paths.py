"""Relative paths mean "beside the file that names them": one rule for every source."""

from __future__ import annotations

import os
from typing import Any, cast

from ..dsl.arguments import home
from ..errors import ConfigError

__all__ = ["Anchored", "beside", "home", "local_path", "read_text"]


class Anchored(str):
    """A model's path made absolute beside the file that named it, remembering the text as
    written: should a later layer of settings give that model a ``base_url``, the model is
    one an endpoint serves, named by that text (`settings.merge_layers`), whatever folder
    of that name lies beside the file."""

    written: str

    def __new__(cls, value: str, written: str) -> Anchored:
        made = super().__new__(cls, value)
        made.written = written
        return made


def anchored_model_path(value: Any, folder: str | None) -> Any:
    """`beside` for a model's ``model_path``: an `Anchored` path when it was made absolute."""
    made = beside(value, folder)
    if type(value) is str and made != value:
        return Anchored(made, value)
    return made


def beside(value: Any, folder: str | None, *, only_if_exists: bool = True) -> Any:
    """``value`` made absolute against ``folder`` when it is a relative path.

    With ``only_if_exists`` (the default) a path that is not there is left alone: it may
    be a Hugging Face hub id such as ``openai/gsm8k``. A leading ``~`` is the home folder.
    Non-strings, absolute paths and ``${...}`` templates are returned unchanged.
    """
    if isinstance(value, str) and value.startswith("~") and "${" not in value:
        expanded = home(value)  # as a shell reads it; Python would keep the "~"
        template = getattr(value, "template", None)
        if template is not None:
            return cast(Any, type(value))(expanded, template)
        return expanded
    if not folder or not isinstance(value, str) or os.path.isabs(value) or "${" in value:
        return value
    candidate = os.path.normpath(os.path.join(folder, value))
    # lexists: a broken symbolic link is there (a path to fix), not a hub id.
    if only_if_exists and not os.path.lexists(candidate):
        if os.path.lexists(value):  # the library would read it from the current folder
            raise ConfigError(f"{value!r}: a relative path is read beside the file that names "
                              f"it, and {folder} holds no {value!r}; the one in the current "
                              f"folder ({os.path.abspath(value)}) is not read: write the path "
                              f"relative to {folder}, or absolute")
        return value
    template = getattr(value, "template", None)
    if template is not None:
        # A value read from ${env:...} stays that template in the files tunedsl writes
        # (the environment where they are used decides); this process uses the anchored path.
        return cast(Any, type(value))(candidate, template)
    return candidate


def local_path(dataset: Any) -> str:
    """A dataset's path as this process reads it: ``~`` expanded, and a relative path
    taken from the file that built the `Dataset` when something is there."""
    return beside(os.path.expanduser(dataset.path), dataset.defined_in)


def read_text(path: str | os.PathLike[str], what: str) -> str:
    """A settings or config file's text; one line naming the file, the line and the fix when
    it cannot be read or is not UTF-8 (``what`` names the kind of file)."""
    from ..errors import ConfigError

    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found") from None
    except OSError as exc:
        from ..access import permission_fix

        fix = permission_fix(exc, path)
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror}"
                          + (f"; {fix}" if fix else "")) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: the {what} is not UTF-8 text (byte "
                          f"0x{data[exc.start]:02x}); save it as UTF-8") from None


def anchor_trinity_paths(config: dict[str, Any], folder: str) -> dict[str, Any]:
    """Make the relative paths of a Trinity config (a base YAML, a ``[trinity]`` table)
    that exist beside the file naming it absolute, so the config means the same files
    whatever directory Trinity later runs in (others may be hub ids), as every dataset
    path of the settings is read. An eval taskset may be given as a list or as tables
    keyed by name."""
    from ..dsl.trinity_fields import PATH_KEYS, PATH_LIST_KEYS
    from .nested import get_path, set_path

    for key in PATH_KEYS:
        found, value = get_path(config, key)
        if found:
            set_path(config, key, beside(value, folder))
    # Where runs go: a "~" is the home folder, as tunedsl reads it (Trinity would make
    # "./~/..." of it); a relative one stays Trinity's to join to the folder it runs in.
    found, root = get_path(config, "checkpoint_root_dir")
    if found and isinstance(root, str) and root.startswith("~") and "${" not in root:
        set_path(config, "checkpoint_root_dir", beside(root, None))
    for key, field in PATH_LIST_KEYS:
        _, entries = get_path(config, key)
        named = entries.values() if isinstance(entries, dict) else \
            entries if isinstance(entries, list) else ()
        for entry in named:
            if isinstance(entry, dict) and field in entry:
                entry[field] = beside(entry[field], folder)
    return config
