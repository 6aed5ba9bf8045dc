"""What a rollout's code prints, kept with the rollout instead of shown.

Agent frameworks print as they go (an AgentScope agent prints every message), so a run's
own lines drowned under the rollouts'. While a rollout runs, ``sys.stdout`` and
``sys.stderr`` write to that rollout's buffer: rollouts run concurrently on one event loop,
and each asyncio task carries its own buffer in a context variable (threads the code starts
do not, and print as before). The text reaches the rollout's record (``output``): eval's
results line, ``rollouts.jsonl``, ``view`` and the test kit's trajectory.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import io
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO

#: The most of a rollout's output kept; the rest is cut, saying how much (a workflow that
#: prints in a loop must not fill the results file).
KEPT_CHARACTERS = 20_000

_BUFFER: contextvars.ContextVar[io.StringIO | None] = contextvars.ContextVar(
    "tunedsl_rollout_output", default=None)


class _Routed(io.TextIOBase):
    """A stream that writes to the running rollout's buffer, else to the stream it wraps."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        buffer = _BUFFER.get()
        return (buffer or self.stream).write(text)

    def flush(self) -> None:
        if _BUFFER.get() is None:
            self.stream.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return _BUFFER.get() is None and self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer, ...
        if name == "stream":  # its own attribute gone (a thread printing while the process
            # shuts down): looked up here again, it recursed until Python crashed
            raise AttributeError(name)
        return getattr(self.stream, name)


_ROUTING = 0  # rollouts capturing now, in this process (abandoned ones too: `abandoned`)
_LIVE = 0  # of them, those not abandoned: the last of them puts back the streams

#: Every routed stream made, by the stream it wraps: never freed. A thread's ``print``
#: holds ``sys.stdout`` without a reference of its own (CPython 3.11), so a routed stream
#: freed when the last rollout put the real one back crashed the process (exit 139) under
#: a thread that printed just then.
_MADE: dict[int, _Routed] = {}


def _routed(stream: TextIO) -> _Routed:
    """The routed stream over ``stream``, made once (`_MADE`)."""
    made = _MADE.get(id(stream))
    if made is None or made.stream is not stream:
        made = _MADE[id(stream)] = _Routed(stream)
    return made


#: The streams routing began with (when no live rollout was capturing), put back when the
#: last live one ends.
_STARTED_WITH: dict[str, Any] = {}

#: Per thread running rollouts: how many run now, and the working folder and recursion
#: limit when the first began, put back when its last ends. Counted by thread, not by
#: process: a rollout abandoned past its time limit in a thread of its own (check's
#: preflight) must not keep another thread's from putting them back.
_THREADS: dict[int, tuple[int, str | None, int]] = {}

#: Each rollout capturing now, by a token of its own: its thread and task, and whether it
#: still counts in its thread's (`abandoned`: no longer).
_CAPTURING: dict[object, tuple[int, Any, bool]] = {}


@contextlib.contextmanager
def captured() -> Iterator[io.StringIO]:
    """Route what the code inside prints to a buffer of its own (yielded) while it runs."""
    global _ROUTING, _LIVE
    if _LIVE == 0:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            _STARTED_WITH[name] = stream.stream if isinstance(stream, _Routed) else stream
    # Whenever it is missing, not only for the first rollout: the streams may be replaced
    # since (pytest's capture replaces them for each test).
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, _Routed):
            setattr(sys, name, _routed(stream))
    _ROUTING += 1
    _LIVE += 1
    thread = threading.get_ident()
    running, folder, limit = _THREADS.get(thread) or (0, _working_folder(),
                                                      sys.getrecursionlimit())
    _THREADS[thread] = (running + 1, folder, limit)
    token = object()
    _CAPTURING[token] = (thread, _current_task(), True)
    buffer = io.StringIO()
    context = _BUFFER.set(buffer)
    try:
        yield buffer
    finally:
        _BUFFER.reset(context)
        _, _, live = _CAPTURING.pop(token)
        _ROUTING -= 1
        if live:
            _live_ended(thread)
        elif _ROUTING == 0 and _LIVE == 0:  # the last abandoned one, ended at last
            for name in ("stdout", "stderr"):
                current = getattr(sys, name)
                if isinstance(current, _Routed) and current.stream is _STARTED_WITH.get(name):
                    setattr(sys, name, current.stream)


def own_stderr() -> TextIO:
    """Standard error for tunedsl's own line while a rollout captures what its code prints
    (the stream the routed one wraps)."""
    stream = sys.stderr
    return stream.stream if isinstance(stream, _Routed) else stream


def abandoned(*, thread: int | None = None, task: Any = None) -> None:
    """The rollouts running in ``thread`` (check's preflight thread), or as ``task``, were
    given up on, still running past their time limit: they count as ended, so the streams,
    working folder and recursion limit are put back when the others end (a stream such a
    rollout put in place of ``sys.stdout`` took the command's report). What they print on
    stays routed to them until they end at last."""
    for token, (its_thread, its_task, live) in list(_CAPTURING.items()):
        if live and ((thread is not None and its_thread == thread) or
                     (task is not None and its_task is task)):
            _CAPTURING[token] = (its_thread, its_task, False)
            _live_ended(its_thread)


def _current_task() -> Any:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop
        return None


def _live_ended(thread: int) -> None:
    """A live rollout of ``thread`` ended (or was abandoned): the last of the process's puts
    back the streams (routed still while abandoned ones run), the last of the thread's the
    recursion limit and working folder it began with."""
    global _LIVE
    _LIVE -= 1
    if _LIVE == 0:
        for name in ("stdout", "stderr"):
            _put_back(name, routed=_ROUTING > 0)
    running, folder, limit = _THREADS.pop(thread)
    if running > 1:
        _THREADS[thread] = (running - 1, folder, limit)
        return
    # (a workflow's sys.setrecursionlimit(60), as a library may set its own, left tunedsl
    # too little to close its clients and print its report)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), limit))
    # (a workflow's os.chdir into its sandbox: the relative paths tunedsl writes after the
    # rollouts, a run's checkpoints, landed in that folder)
    if folder is not None and _working_folder() != folder:
        with contextlib.suppress(OSError):  # (removed since: nothing to go back to)
            os.chdir(folder)


def _working_folder() -> str | None:
    """The current working folder (None when it was removed)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _put_back(name: str, routed: bool = False) -> None:
    """Put back the stream routing began with (``routed``: wrapped, for abandoned rollouts
    still printing), whatever the rollouts' code left in its place: ``redirect_stdout`` in
    rollouts side by side puts back each other's targets, leaving one rollout's buffer, and
    the command's report went there. A stream that drops what it cannot write (the
    terminal hung up meanwhile: `interrupts`) stays, over the stream it wrapped."""
    current = getattr(sys, name)
    kept: Any = current.stream if isinstance(current, _Routed) else current
    if getattr(kept, "drops_failed_writes", False):
        if isinstance(kept.wrapped, _Routed):
            kept.wrapped = kept.wrapped.stream
        setattr(sys, name, kept)
        return
    started = _STARTED_WITH[name]
    setattr(sys, name, _routed(started) if routed else started)


def kept(buffer: io.StringIO) -> str | None:
    """The output to keep: None when nothing was printed, else at most `KEPT_CHARACTERS`."""
    text = buffer.getvalue()
    if not text:
        return None
    if len(text) <= KEPT_CHARACTERS:
        return text
    return (f"{text[:KEPT_CHARACTERS]}\n[... {len(text) - KEPT_CHARACTERS} more characters "
            f"not kept]")
