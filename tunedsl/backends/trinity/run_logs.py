"""A failure that Trinity-RFT reports as success, read from its actors' log files.

Trinity 0.6.0's explorer and trainer loops catch every exception, log ``Error in
Explorer: <traceback>`` / ``Error in Trainer:\\n<traceback>`` and ``break``
(``explorer/explorer.py``, ``trainer/trainer.py``); the launcher's ``both`` then returns
``StageStatus(success=True)`` (``cli/launcher.py``). Each actor logs to
``<log.save_dir>/<actor name>.log`` (``utils/log.py``; under a folder per node IP when
``TRINITY_LOG_NODE_IP`` is set), so tunedsl notes where those files end before the run
and reads what the run appended: a run whose actor logged such an error failed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

#: How Trinity's loops begin the message of an error they swallow.
SWALLOWED = ("Error in Explorer:", "Error in Trainer:")


def actor_logs(log_dir: str | os.PathLike[str], actors: Iterable[str]) -> list[Path]:
    """The log files the named actors write (those that exist now or may appear)."""
    folder = Path(log_dir)
    names = [f"{actor}.log" for actor in actors]
    found = [folder / name for name in names]
    found += [path for name in names for path in folder.glob(f"*/{name}")]  # per node IP
    return found


def log_ends(paths: Iterable[Path]) -> dict[Path, int]:
    """Where each file ends now (0 for one not written yet): a resumed run appends."""
    return {path: path.stat().st_size if path.is_file() else 0 for path in paths}


def swallowed_error(ends: dict[Path, int], log_dir: str | os.PathLike[str],
                    actors: Iterable[str]) -> str | None:
    """``<file>: <the error's last line>`` for the first error an actor's loop swallowed
    since ``ends`` was taken, or None."""
    for path in actor_logs(log_dir, actors):
        if not path.is_file():
            continue
        with path.open("rb") as handle:
            handle.seek(ends.get(path, 0))
            text = handle.read().decode("utf-8", errors="replace")
        found = _last_line_of_swallowed(text.replace("\r", "").split("\n"))
        if found is not None:
            return f"{path}: {found}"
    return None


def _last_line_of_swallowed(lines: list[str]) -> str | None:
    """A multi-line record repeats its prefix (level, time, file:line) on every line: the
    swallowed error's record ends at the last line with that prefix, the exception."""
    for index, line in enumerate(lines):
        marker = next((m for m in SWALLOWED if m in line), None)
        if marker is None:
            continue
        prefix = line[:line.index(marker)]
        record = [line[len(prefix):]]
        for following in lines[index + 1:]:
            if not following.startswith(prefix):
                break
            record.append(following[len(prefix):])
        last = next((part.strip() for part in reversed(record) if part.strip()), marker)
        return last if last != marker else f"{marker} (no traceback logged)"
    return None
