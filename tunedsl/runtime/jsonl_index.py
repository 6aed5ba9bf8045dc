"""A JSON Lines file indexed by byte offset (`JsonLines`): the viewer's index of a run's
``rollouts.jsonl``, an eval's results or Trinity's saved experiences holds one offset a
line, not the text, so 100k rollouts cost a few MB and a page reads only its lines."""

from __future__ import annotations

import json
import threading
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import DatasetError


class JsonLines:
    """A JSON Lines file read by byte offset: the index keeps offsets, not text."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets = array("q")
        self.numbers = array("l")
        self.end = self.lines_read = 0  # where the next scan starts
        self._lock = threading.Lock()
        self._handle: Any = None

    def scan(self, start: int = 0, number: int = 0) -> Iterator[tuple[int, int, Any]]:
        """``(line number, byte offset, value)`` of each complete non-blank line from byte
        ``start`` (line ``number`` + 1 on). A last line without its newline is being
        written (a run or an eval in progress): it is left for a later `scan`; `end`
        and `lines_read` say where that one starts."""
        try:
            handle = open(self.path, "rb")
        except OSError as exc:
            raise DatasetError(f"{self.path}: cannot read it: {exc.strerror}") from None
        with handle:
            handle.seek(start)
            offset, first = start, number + 1
            for number, line in enumerate(handle, start=first):
                if not line.endswith(b"\n"):
                    break
                begin, offset = offset, offset + len(line)
                self.end, self.lines_read = offset, number
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
                    raise DatasetError(f"{self.path}:{number}: not a JSON line ({reason}); "
                                       f"fix or delete that line") from None
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
            return self._handle.readline().decode("utf-8")

    def value(self, index: int) -> Any:
        """Entry ``index``'s line, parsed."""
        return json.loads(self.text(index))
