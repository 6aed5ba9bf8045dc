"""A model folder's files as read from their first bytes, without loading them: weights
and tokenizer files a clone without git-lfs left as pointers, damaged or cut short, shards an
index names and the folder lacks. Every backend that loads a local folder asks these first,
so ``check`` finds what the engine would fail on once GPUs are taken."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from ..lfs import is_git_lfs_pointer, pointer_problem

#: Weights files transformers loads, besides ``*.safetensors``.
_OTHER_WEIGHTS = ("pytorch_model*.bin", "model*.bin", "*.pt", "*.pth")


def model_files_problem(path: Path, model_path: str) -> str | None:
    """What keeps a model folder's weights from loading, read from their headers (8 bytes
    and a JSON header a safetensors file): none there, a git-lfs pointer in their place (a
    clone without git-lfs), or a damaged file; None when they look whole."""
    weights = sorted(path.glob("*.safetensors"))
    if not weights and not any(any(path.glob(pattern)) for pattern in _OTHER_WEIGHTS):
        return (f"{model_path} has no model weights (model.safetensors, or "
                f"pytorch_model.bin); copy them into it, or give the folder that holds them")
    for file in [*weights, *_named_weights(path)]:
        problem = model_file_problem(file, model_path)
        if problem is not None:
            return problem
    return None


def _named_weights(path: Path) -> list[Path]:
    """Every file of a folder besides its ``.safetensors`` (the ``.bin`` weights, the
    tokenizer's files, the chat template, the configurations, a shard index): any of them
    git-lfs may have left as a pointer, as it leaves the weights."""
    try:
        files = list(path.iterdir())
    except OSError:  # a folder that cannot be listed: its loader says so
        return []
    return sorted(file for file in files
                  if file.suffix != ".safetensors" and not file.name.startswith(".")
                  and (file.is_file() or file.is_symlink()))


def git_lfs_pointers(path: Path) -> list[Path]:
    """The files of the model folder ``path`` that a clone without git-lfs left as
    pointers."""
    return [file for file in sorted(path.glob("*.safetensors")) + _named_weights(path)
            if is_git_lfs_pointer(file)]


def model_file_problem(file: Path, model_path: str) -> str | None:
    """What is wrong with one file of a model folder, read from its first bytes and, for
    safetensors, its header and size (for a shard index, the shards it names): unreadable,
    a git-lfs pointer, damaged, or cut short (a download interrupted); None when it looks
    whole."""
    if is_git_lfs_pointer(file):
        return pointer_problem(file, model_path)
    try:
        with open(file, "rb") as handle:
            if file.name.endswith(".safetensors.index.json"):
                return _shards_problem(file, handle.read(), model_path)
            if file.suffix == ".safetensors":
                return _safetensors_problem(file, handle, model_path)
    except OSError as exc:  # a dangling link (a cache's blob deleted), a folder by that name
        return (f"{file} cannot be read ({exc.strerror}); copy the weights again from where "
                f"the model came from")
    return None


def _shards_problem(file: Path, text: bytes, model_path: str) -> str | None:
    """What is wrong with a sharded model's index: not the JSON of one, or naming a shard
    the folder lacks."""
    import json

    try:
        weight_map = json.loads(text).get("weight_map", {})
        shards = sorted({name for name in weight_map.values() if isinstance(name, str)})
        if len(shards) != len(set(weight_map.values())) or not shards:
            raise ValueError("no shard names")
    except (ValueError, AttributeError, TypeError):
        return (f"{file} is damaged (not the JSON of a shard index, whose weight_map names "
                f"each tensor's file); copy it again from where the model came from")
    missing = [name for name in shards if not (file.parent / name).is_file()]
    if missing:
        return (f"{file} names the weights file {missing[0]}, which is not in {model_path}; "
                f"copy it in")
    return None


def _safetensors_problem(file: Path, handle: BinaryIO, model_path: str) -> str | None:
    """What is wrong with a safetensors file: a header whose length is not the file's, a
    header that is not JSON, or tensors that end past the file's end (cut short)."""
    import json
    import struct

    head = handle.read(8)
    size = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
    whole = file.stat().st_size
    try:
        if not 0 < size <= whole - 8:
            raise ValueError("its header's length is not the file's")
        header = json.loads(handle.read(size))
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")
        ends = [entry["data_offsets"][1] for entry in header.values()
                if isinstance(entry, dict) and "data_offsets" in entry]
        if ends and 8 + size + max(ends) > whole:  # (its tensors' bytes missing)
            raise ValueError(f"cut short: {whole} bytes of {8 + size + max(ends)}")
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        return (f"{file} is damaged ({exc}); copy the weights again from where the model "
                f"came from")
    return None
