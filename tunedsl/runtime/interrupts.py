"""SIGTERM ends a command or a run as Ctrl-C does: what it saves on Ctrl-C, it saves."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a scheduler or a container stopping the job) ends a command as
    Ctrl-C does: a run saves its checkpoint and says how to resume, an eval keeps every
    finished rollout. The handler before is restored after (the tests call `main` in their
    own process), so ``tunedsl.run`` in a user's script does the same as the command."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
            # Ctrl-C is off (a background job of a script starts so, and schedulers,
            # `timeout` and supervisors send SIGTERM to such jobs): stop as it would.
            raise KeyboardInterrupt
        # Through SIGINT's own handler: asyncio.run's cancels its task cleanly, where an
        # exception raised here could land inside any task.
        signal.raise_signal(signal.SIGINT)

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
