"""git-lfs pointers: the small text files a clone without git-lfs leaves in place of the
large files it tracks (a model's weights, a dataset's Parquet files), which every reader
would otherwise fail on in its own words."""

from __future__ import annotations

import os

#: How a pointer file begins ("version https://git-lfs.github.com/spec/v1", or the older
#: "https://hawser.github.com/spec/v1").
_POINTER = b"version https://"


def is_git_lfs_pointer(file: str | os.PathLike[str]) -> bool:
    """Whether ``file`` is a git-lfs pointer (False when it cannot be read: its reader
    says why)."""
    try:
        with open(file, "rb") as handle:
            return handle.read(len(_POINTER)) == _POINTER
    except OSError:
        return False


def pointer_problem(file: str | os.PathLike[str], folder: str) -> str:
    """What to say of ``file``, a git-lfs pointer cloned into ``folder``."""
    return (f"{file} is a git-lfs pointer, not the file itself (a clone without git-lfs); "
            f"run git lfs pull in {folder}")
