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
#: What Trinity 0.6.0 logs, as a warning only, when a weight sync timed out or failed and
#: the run went on with stale weights: the trainer (``trainer/trainer.py``, ``sync_weight``)
#: and the explorer (``explorer/explorer.py``, when ``ready_to_nccl_sync`` returned None).
STALE_SYNC = ("NCCL weight sync failed (Explorer may have exited); continuing with stale "
              "weights", "NCCL weight sync skipped:",
              "Trainer is not ready to sync weight. Skipping sync weight.")
#: The trainer's last line, logged after its final checkpoint (``trainer/trainer.py``).
TRAINER_FINISHED = "> Trainer finished."


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


def _appended(ends: dict[Path, int], path: Path) -> str:
    """What was written to ``path`` since ``ends`` was taken ("" for no file)."""
    if not path.is_file():
        return ""
    with path.open("rb") as handle:
        handle.seek(ends.get(path, 0))
        return handle.read().decode("utf-8", errors="replace").replace("\r", "")


def stale_sync(ends: dict[Path, int], log_dir: str | os.PathLike[str],
               actors: Iterable[str]) -> str | None:
    """``<file>: <the warning>`` for the first weight sync that went stale since ``ends``
    was taken (`STALE_SYNC`), or None."""
    for path in actor_logs(log_dir, actors):
        for line in _appended(ends, path).split("\n"):
            marker = next((m for m in STALE_SYNC if m in line), None)
            if marker is not None:
                return f"{path}: {line[line.index(marker):].strip()}"
    return None


def trainer_cut_off(ends: dict[Path, int], log_dir: str | os.PathLike[str],
                    trainer: str) -> Path | None:
    """The trainer's log file when the trainer wrote to it since ``ends`` was taken but
    never logged `TRAINER_FINISHED` (the launcher shut it down before its final
    checkpoint), else None."""
    for path in actor_logs(log_dir, [trainer]):
        text = _appended(ends, path)
        if text.strip() and TRAINER_FINISHED not in text:
            return path
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
