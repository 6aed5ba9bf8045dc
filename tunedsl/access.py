"""Why a path given to tunedsl cannot be reached for want of permission, and the ``chmod``
that lets it: a folder on its way that cannot be searched (its mode lacks x: nothing in it
can even be looked at, so the path reads as missing), or the file itself unreadable."""

from __future__ import annotations

import errno
import os
from pathlib import Path


def unsearchable_folder(path: str | os.PathLike[str]) -> str | None:
    """The first folder on the way to ``path`` (as given, relative or not) whose entries
    cannot be looked at, or None when each can be (or another error stops the walk)."""
    parts = Path(os.fspath(path)).parts
    for depth in range(1, len(parts)):
        try:
            os.stat(Path(*parts[:depth + 1]))
        except PermissionError:
            return str(Path(*parts[:depth]))
        except OSError:
            return None
    return None


def permission_fix(exc: OSError, path: str | os.PathLike[str]) -> str | None:
    """For a permission error on ``path`` (given to be read), the chmod to run: the folder
    on its way to make searchable, or the file to make readable; None for another error."""
    if exc.errno not in (errno.EACCES, errno.EPERM):
        return None
    folder = unsearchable_folder(path)
    if folder is not None:
        return f"make {folder} searchable (chmod u+rx {folder})"
    if os.path.isfile(path) and not os.access(path, os.R_OK):
        return f"make it readable (chmod u+r {path})"
    return None
