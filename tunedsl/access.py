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


def searchable(folder: str) -> str:
    """The fix for a folder that cannot be searched, with its ``chmod`` (for its owner to
    run, when it is another user's: `_for_its_owner`)."""
    return _for_its_owner(folder, f"make {folder} searchable", "rx")


def writable(path: str) -> str:
    """The fix for a file that cannot be written, with its ``chmod`` (for its owner to run,
    when it is another user's)."""
    return _for_its_owner(path, "make it writable", "w")


def permission_fix(exc: OSError, path: str | os.PathLike[str]) -> str | None:
    """For a permission error on ``path`` (given to be read), the chmod to run: the folder
    on its way to make searchable, or the file to make readable; None for another error."""
    if exc.errno not in (errno.EACCES, errno.EPERM):
        return None
    folder = unsearchable_folder(path)
    if folder is not None:
        return searchable(folder)
    if os.path.exists(path) and not os.access(path, os.R_OK):
        return _for_its_owner(str(path), "make it readable",
                              "rx" if os.path.isdir(path) else "r")
    return None


def _for_its_owner(path: str, what: str, bits: str) -> str:
    """``what`` with its chmod: ``u+`` for a path of this user's; for another user's, the
    chmod that lets others, for its owner (or root) to run (``u+`` would change only the
    owner's)."""
    try:
        owner = os.stat(path).st_uid
    except OSError:
        owner = os.getuid()
    if owner == os.getuid():
        return f"{what} (chmod u+{bits} {path})"
    try:
        import pwd

        name = pwd.getpwuid(owner).pw_name
    except (ImportError, KeyError):
        name = f"user {owner}"
    return f"{what}: it belongs to {name}, who (or root) can let you (chmod o+{bits} {path})"


def where_a_broken_link_leads(link: str | os.PathLike[str]) -> str:
    """How a symbolic link that reaches no file ends, said after its target: "which does
    not exist", or "which loops back to itself" (links that name each other, or themselves)."""
    try:
        os.stat(link)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "which loops back to itself"
    return "which does not exist"


def looping_link(path: str | os.PathLike[str]) -> str | None:
    """The first symbolic link on the way to ``path`` (or ``path`` itself) that loops back
    to itself, whatever follows it (links that name each other, or themselves), or None."""
    parts = Path(os.fspath(path)).parts
    for depth in range(1, len(parts) + 1):
        try:
            os.stat(Path(*parts[:depth]))
        except OSError as exc:
            return str(Path(*parts[:depth])) if exc.errno == errno.ELOOP else None
    return None


def looping_link_problem(path: str | os.PathLike[str]) -> str | None:
    """``LINK is a symbolic link to TARGET, which loops back to itself`` for the looping
    link on the way to ``path`` (`looping_link`), or None: such a path read as missing, a
    hub id, or no folder (sweep 49 A-W5)."""
    loop = looping_link(path)
    if loop is None:
        return None
    try:
        target = os.readlink(loop)
    except OSError:
        return None
    return f"{loop} is a symbolic link to {target}, which loops back to itself"
