"""One writer for every file tunedsl writes, so that nothing written is lost.

Two kinds of file, each written one way:

- **A whole file** (a run's ``experiment.yaml`` and ``config.yaml``, ``config -o``'s
  Trinity YAML, ``tune-prompt -o``'s TOML, ``view --out``'s page): `write_whole` writes it
  beside its target and renames it into place, so a crash or a full disk leaves the old
  file or the new one, never half of either.
- **A JSON Lines file** that grows as work finishes (eval results, a candidates file, a
  run's rollouts and metrics): `JsonLines` writes each record with `json_text.dumps` and
  flushes it at once, so every finished record survives any later error.

Text UTF-8 cannot encode (a lone surrogate) is escaped, never a crash. A file that cannot
be written (no space, read-only, no permission) is one line naming the path, why, what was
kept and how to go on. Which existing files an output may replace is decided before
writing, by `tunedsl.runs.outputs.refuse_overwriting`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import Any

from ..data.json_text import dumps
from ..errors import ConfigError, RunError


def reason(exc: OSError, path: str | os.PathLike[str]) -> str:
    """Why ``path`` could not be written, in words: the system's reason, the file standing
    where one of its folders should be, and how much room is left when its device is
    nearly full."""
    said = exc.strerror or " ".join(str(exc).split()) or type(exc).__name__
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):  # making its folders met a file
        blocking = next((folder for folder in Path(path).parents if folder.is_file()), None)
        if blocking is not None:
            return f"{blocking} is a file, not a folder"
        dangling = _dangling_link(path)
        if dangling is not None:  # (said "File exists" of a name that leads nowhere)
            return dangling
    if exc.errno != errno.ENOSPC:
        return said
    try:
        free = shutil.disk_usage(Path(path).parent if not Path(path).is_dir() else path).free
    except OSError:
        return said
    return f"{said}; {free / 2**20:.1f} MB free on its device" if free < 64 * 2**20 else said


def _dangling_link(path: str | os.PathLike[str]) -> str | None:
    """``path``, or a folder on its way, as a link to nothing, in words; else None. Making
    the folders of such a path fails with "File exists": the link stands there, and leads
    nowhere (sweep 50's known list)."""
    from ..access import where_a_broken_link_leads

    for part in [Path(path), *Path(path).parents]:
        if part.is_symlink() and not part.exists():
            return f"{part} is a link to {os.readlink(part)}, {where_a_broken_link_leads(part)}"
    return None


def _to_write(exc: OSError, path: Path, chosen: bool) -> str:
    """How to go on when the JSON Lines file ``path`` cannot be opened to add to: a file made
    read-only is made writable (another file would give up what it holds, a resume's work;
    it is added to in place, so its folder need not be writable); else another file, when
    the user ``chosen`` it (a run directory's own files have no other)."""
    denied = exc.errno in (errno.EACCES, errno.EPERM)
    if denied and path.is_file():
        writable = f"it is read-only: make it writable (chmod u+w {path})"
        return f"{writable}, or give another file" if chosen else writable
    if chosen:
        return "choose a file in a folder you can write"
    if denied:
        return f"make its folder writable (chmod u+w {path.parent})"
    return "free room on its device, then go on" if exc.errno == errno.ENOSPC else \
        "mend that, then go on"


def write_whole(path: str | os.PathLike[str], text: str, *, label: str,
                error: type[ConfigError] | type[RunError] = ConfigError,
                then: str = "choose a file in a folder you can write") -> None:
    """Write ``text`` as the whole of ``path`` (its folder made), atomically.

    Args:
        path: The file.
        text: Its text (written as UTF-8; what UTF-8 cannot encode, escaped).
        label: How the file is named in a message (``-o out.yaml``, ``run directory X``).
        error: What a failure raises: `ConfigError` before any work (exit 2), `RunError`
            when work was done and is kept elsewhere (exit 1).
        then: What to do about a failure (what is kept, how to go on).
    """
    target = Path(path)
    if target.is_dir():  # ".", "..", "sub/..": the output would replace the folder
        raise error(f"{label}: that is a folder; give a file in it, e.g. "
                    f"{os.path.join(str(path), 'NAME')}")
    if target.exists() and not target.is_file():
        # renaming into place would replace a device or a pipe (/dev/null) with a file
        raise error(f"{label}: not a regular file (a device or a pipe); {then}")
    if target.is_symlink():
        # the file a link names is written, the link kept (renamed onto, the link itself
        # became the file: /dev/stdout's, run as root)
        target = Path(os.path.realpath(target))
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(text)
        os.replace(partial, target)
    except OSError as exc:
        with contextlib.suppress(OSError):  # the same full disk may refuse this too
            partial.unlink(missing_ok=True)
        raise error(f"{label}: cannot write it ({reason(exc, target)}); {then}") from None


def cannot_take_a_file(folder: str | os.PathLike[str]) -> OSError | None:
    """Why ``folder`` takes no new file (read-only, no permission, no room), found by making
    one there, removed at once; None when it takes one."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return exc
    return None


def refuse_unwritable(path: str | os.PathLike[str], label: str) -> None:
    """Refuse, before any work, a whole-file output (`write_whole`) that could not be put
    in place when the work ends: a file is made beside it and renamed onto it, so its
    nearest folder that exists must take a new file (`cannot_take_a_file`).

    Raises:
        ConfigError: that folder takes no new file.
    """
    dangling = _dangling_link(path)
    if dangling is not None:
        raise ConfigError(f"{label}: cannot write it ({dangling}); choose a file in a folder "
                          f"you can write")
    target = Path(os.path.realpath(path))
    folder = next((parent for parent in target.parents if parent.is_dir()), None)
    exc = None if folder is None else cannot_take_a_file(folder)
    if folder is not None and exc is not None:
        raise ConfigError(f"{label}: cannot write it ({reason(exc, folder)}); choose a file "
                          f"in a folder you can write")


def being_written(label: str) -> str:
    """The line for a file another tunedsl command is writing now (`JsonLines` holds it)."""
    return (f"{label}: another tunedsl command is writing it now; wait for it to end, or "
            f"give another file")


def refuse_if_being_written(path: str | os.PathLike[str], label: str) -> None:
    """Refuse ``path`` while another command holds it (`JsonLines`), before anything else is
    said of it: "add --resume" to a file another eval writes would only meet this next.

    Raises:
        ConfigError: another tunedsl command is writing it.
    """
    try:
        import fcntl
    except ImportError:  # no flock on this platform: nothing is held
        return
    try:
        handle = open(path, "rb")
    except OSError:  # not there, or not readable: its writer says why
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(being_written(label)) from None


def torn_last_line(path: str | os.PathLike[str]) -> int | None:
    """Where the last line of a JSON Lines file tunedsl wrote begins when a command stopped
    while writing it (``kill -9``, a crash, the machine gone: no newline and no whole
    JSON), else None. A last line that is whole JSON without its newline is whole
    (`JsonLines` ends it)."""
    import json

    try:
        with open(path, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            if not size:
                return None
            file.seek(size - 1)
            if file.read(1) == b"\n":
                return None
            start, block = size, 1 << 16
            while start > 0:  # back to the newline before the last line
                step = min(block, start)
                file.seek(start - step)
                found = file.read(step).rfind(b"\n")
                if found >= 0:
                    start = start - step + found + 1
                    break
                start -= step
            file.seek(start)
            tail = file.read()
    except OSError:  # (said by the reading that follows)
        return None
    try:
        json.loads(tail)
    except ValueError:
        return start
    return None


def drop_torn_last_line(path: str | os.PathLike[str], label: str) -> None:
    """Before a resume reads a JSON Lines file tunedsl wrote, drop its `torn_last_line`,
    saying so: its work runs again. The resume refused the file ("not a JSON line; fix or
    delete that line") for what any crash may leave. A file another command writes now is
    refused first (its last line may be on its way).

    Raises:
        ConfigError: another tunedsl command is writing it (``label`` names it).
    """
    import sys

    refuse_if_being_written(path, label)
    start = torn_last_line(path)
    if start is None:
        return
    try:
        os.truncate(path, start)
    except OSError:
        return  # (its reading says the line, and the writer the file)
    print(f"note: {path}: its last line was cut short (a command stopped while writing it); "
          f"dropped: its work runs again", file=sys.stderr)


class JsonLines:
    """A JSON Lines file written a record at a time, each line written whole or not at all.

    Each line goes to the file in one unbuffered write (nothing waits in a buffer for a
    later error to lose); a line the device cannot take whole (a full disk) is cut off
    again, so the file ends with the last whole line and a resume reads it cleanly.
    Opening fails before any work (`ConfigError`, exit 2); a line that cannot be written
    fails the run (`RunError`, exit 1) saying what is kept and how to go on (``then``).
    Usable from several threads only under the caller's lock.
    """

    def __init__(self, path: str | os.PathLike[str], *, label: str, then: str,
                 mode: str = "a", chosen: bool = True) -> None:
        self.path, self.label, self.then = Path(path), label, then
        self.chosen = chosen  # (by the user: another can be given)
        self.written = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.handle = open(self.path, mode + "b", buffering=0)  # closed by close()
            self.size = self.handle.seek(0, os.SEEK_END)
        except OSError as exc:
            raise ConfigError(f"{label}: cannot write it ({reason(exc, self.path)}); "
                              f"{_to_write(exc, self.path, chosen)}") from None
        self._hold(label)
        self._end_last_line()

    def _end_last_line(self) -> None:
        """A file continued whose last line lacks its newline (a full disk took every byte
        but that one, or an editor saved it so) gets the newline first: the next record
        would otherwise be glued to it, two records in one line no reader can take."""
        if not self.size:
            return
        with open(self.path, "rb") as file:
            file.seek(-1, os.SEEK_END)
            if file.read(1) == b"\n":
                return
        try:
            self.handle.write(b"\n")
        except OSError as exc:
            self.close()
            raise ConfigError(f"{self.label}: cannot write it ({reason(exc, self.path)}); "
                              f"{_to_write(exc, self.path, self.chosen)}") from None
        self.size += 1

    def _hold(self, label: str) -> None:
        """Hold the operating system's lock on the file while writing it: a second command
        writing it at once (an eval, a resume of it) would run the same rollouts again and
        interleave their lines. A process that dies, even by ``kill -9``, frees it."""
        try:
            import fcntl

            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # no flock on this platform: nothing to hold
            pass
        except BlockingIOError:
            self.handle.close()
            raise ConfigError(being_written(label)) from None

    def write(self, record: Any) -> str:
        """Append ``record`` as one line (`json_text.dumps`); return that line."""
        text = dumps(record)
        line = (text + "\n").encode("utf-8")
        data = memoryview(line)
        try:
            while data:
                data = data[self.handle.write(data) or 0:]
        except OSError as exc:
            with contextlib.suppress(OSError):  # the part that fitted goes again
                os.truncate(self.path, self.size)
            raise RunError(f"{self.label}: cannot write it ({reason(exc, self.path)}); "
                           f"every line written before is kept; {self.then}") from None
        self.size += len(line)
        self.written += 1
        return text

    def close(self) -> None:
        """Close the file."""
        with contextlib.suppress(OSError):
            self.handle.close()

    def __enter__(self) -> JsonLines:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
