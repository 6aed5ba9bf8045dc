"""A JSON Lines file indexed by byte offset (`JsonLines`): the viewer's index of a run's
``rollouts.jsonl``, an eval's results or Trinity's saved experiences holds one offset a
line, not the text, so 100k rollouts cost a few MB and a page reads only its lines."""

from __future__ import annotations

import codecs
import json
import os
import stat
import threading
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from .json_files import beyond_the_reader


class JsonLines:
    """A JSON Lines file read by byte offset: the index keeps offsets, not text."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets = array("q")
        self.numbers = array("l")
        self.end = self.lines_read = 0  # where the next scan starts
        self.scanned: tuple[int, int] | None = None  # `stamp` when the last scan began
        self._lock = threading.Lock()
        self._handle: Any = None

    def scan(self, start: int = 0, number: int = 0) -> Iterator[tuple[int, int, Any]]:
        """``(line number, byte offset, value)`` of each complete non-blank line from byte
        ``start`` (line ``number`` + 1 on). A last line without its newline is being
        written (a run or an eval in progress): it is left for a later `scan`; `end`
        and `lines_read` say where that one starts."""
        self.scanned = self.stamp()
        try:
            handle = open(self.path, "rb")
        except OSError as exc:
            raise DatasetError(f"{self.path}: cannot read it: {exc.strerror}") from None
        with handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):  # /dev/zero never ends
                raise DatasetError(f"{self.path}: not a regular file (a device or a link to "
                                   f"one); give the file tunedsl wrote")
            handle.seek(start)
            offset, first = start, number + 1
            for number, line in enumerate(handle, start=first):
                if not line.endswith(b"\n"):
                    break
                begin, offset = offset, offset + len(line)
                self.end, self.lines_read = offset, number
                if not line.strip():
                    continue
                if begin == 0:  # an editor's byte-order mark, as the other readers allow
                    line = line.removeprefix(codecs.BOM_UTF8)
                try:
                    value = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
                    if begin == 0 and _one_json_document(self.path):  # a config.json
                        raise DatasetError(f"{self.path}: one JSON document over several "
                                           f"lines, not JSON Lines tunedsl wrote (an eval's "
                                           f"results, a run's files); give the file tunedsl "
                                           f"wrote") from None
                    if begin == 0 and not line.lstrip().startswith((b"{", b"[")):
                        # a text file of the user's, not a line to "fix or delete" (sweep 46
                        # A-W9)
                        raise DatasetError(f"{self.path}: text whose first line is no JSON "
                                           f"object, not JSON Lines tunedsl wrote (an eval's "
                                           f"results, a run's files); give the file tunedsl "
                                           f"wrote") from None
                    raise DatasetError(f"{self.path}:{number}: not a JSON line ({reason}); "
                                       f"fix or delete that line") from None
                except (RecursionError, ValueError) as exc:  # nested past what json reads
                    found = beyond_the_reader(exc, str(self.path), number)
                    if found is None:
                        raise
                    raise found from None
                yield number, begin, value

    def size(self) -> int:
        """The file's size now (0 when it is gone)."""
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def keep(self, number: int, offset: int) -> None:
        """Remember line ``number`` at ``offset`` as the next entry's line."""
        self.numbers.append(number)
        self.offsets.append(offset)

    def text(self, index: int) -> str:
        """The text of entry ``index``'s line."""
        with self._lock:  # one handle, many server threads
            if self._handle is None:
                self._handle = open(self.path, "rb")
            self._handle.seek(self.offsets[index])
            line = self._handle.readline()
        if self.offsets[index] == 0:
            line = line.removeprefix(codecs.BOM_UTF8)
        return line.decode("utf-8", errors="replace")

    def value(self, index: int) -> Any:
        """Entry ``index``'s line, parsed; a line that no longer parses (the file was
        rewritten since it was indexed) is one line naming it."""
        try:
            return json.loads(self.text(index))
        except ValueError as exc:
            raise DatasetError(f"{self.path}:{self.numbers[index]}: not a JSON line any more "
                               f"({exc}); the file changed while it was shown: reload the "
                               f"page") from None

    def stamp(self) -> tuple[int, int]:
        """The file's size and modification time now (zeros when it is gone): a file
        rewritten in place keeps its size but not its time."""
        try:
            found = self.path.stat()
        except OSError:
            return 0, 0
        return found.st_size, found.st_mtime_ns


def _one_json_document(path: Any) -> bool:
    """Whether ``path`` holds one JSON value over several lines (a pretty-printed
    ``config.json``), read whole only when small (sweep 47 A-W6)."""
    try:
        if os.path.getsize(path) > 16 << 20:
            return False
        with open(path, "rb") as handle:
            json.loads(handle.read())
    except (OSError, ValueError, RecursionError):
        return False
    return True
