"""Deadlines that hold even for a rollout that blocks its event loop.

A rollout's ``asyncio`` timeout only fires when the loop gets control back; workflow code
that blocks it (``time.sleep``, a synchronous HTTP call, a long pure-Python loop) would
stall every rollout of the step until it returned, perhaps never. `Watchdog` watches the
loop from a thread: when a guarded rollout's task is still the one running past its
deadline, it raises `RolloutBlocked` inside that task's code, which fails that rollout
(with the user's traceback, pointing at the blocking line) and lets the loop go on.

The exception is delivered by a signal when the loop runs in the main thread (so it
interrupts ``time.sleep`` and blocking system calls too), otherwise as an asynchronous
exception, which reaches Python code only: a thread's blocking C call is waited out.

Either way the watching thread decides from what it read while the loop ran on, so it
checks again before it acts: under a lock that `Watchdog.stop` also takes, the rollout
must still be the running task and still guarded (an asynchronous exception raised for a
rollout that had left its guard would land in whatever the loop thread ran next: another
rollout, or the loop itself), and `Watchdog.stop` takes back an asynchronous exception
that its rollout finished before receiving. The signal handler checks once more when it
runs. What stays is a rollout that awaits within the few bytecodes between the check and
the exception's arrival, which a rollout blocking the loop past its deadline does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class RolloutBlocked(BaseException):
    """Raised inside a rollout's code that held the event loop past its deadline.

    A `BaseException`, so a workflow's ``except Exception`` cannot swallow it and block on.

    Args:
        seconds: The deadline it held the loop past (unknown when raised asynchronously).
    """

    def __str__(self) -> str:
        limit = f" = {self.args[0]:g}s" if self.args else ""
        return (f"held the event loop past rollout_timeout{limit}: blocking code (time.sleep, "
                f"a synchronous HTTP call, a long computation) in an async workflow or judge "
                f"stops every rollout; await asyncio.to_thread(...) or use an async client")


class _Watcher:
    """The one thread that looks at every active `Watchdog`: started once per process and
    idle while none is active, so entering a watchdog for each step costs no thread."""

    def __init__(self) -> None:
        self.active: set[Watchdog] = set()
        self.changed = threading.Condition()
        self.thread: threading.Thread | None = None

    def add(self, watchdog: Watchdog) -> None:
        with self.changed:
            self.active.add(watchdog)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="tunedsl-watchdog",
                                               daemon=True)
                self.thread.start()
            self.changed.notify()

    def remove(self, watchdog: Watchdog) -> None:
        with self.changed:
            self.active.discard(watchdog)

    def _run(self) -> None:
        while True:
            with self.changed:
                while not self.active:
                    self.changed.wait()
                watching = list(self.active)
            for watchdog in watching:
                watchdog.look()
            time.sleep(min(watchdog.tick for watchdog in watching))


_WATCHER = _Watcher()


class Watchdog:
    """Fails guarded rollouts that block ``loop`` past their deadline; see the module docs.

    Use it as a context manager around the code that runs ``loop``, and `guard` each
    rollout inside its own task.

    Args:
        loop: The event loop the rollouts run on.
        grace: Seconds past a deadline before interrupting (the asyncio timeout, which
            needs no interruption, fires first when the loop is free).
        tick: How often the watching thread looks, in seconds.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, *, grace: float = 0.5,
                 tick: float = 0.1) -> None:
        self.loop, self.grace, self.tick = loop, grace, tick
        self._deadlines: dict[asyncio.Task[Any], tuple[float, float]] = {}
        self._target: tuple[asyncio.Task[Any], float] | None = None
        self._lock = threading.Lock()  # a deadline's end (stop) against its interruption
        self._loop_thread = threading.get_ident()
        self._previous_handler: Any = None
        self._by_signal = False
        self.interruptions = 0  # how many rollouts were interrupted (for tests and metrics)

    def __enter__(self) -> Watchdog:
        self._loop_thread = threading.get_ident()
        self._by_signal = threading.current_thread() is threading.main_thread()
        if self._by_signal:
            self._previous_handler = signal.signal(signal.SIGALRM, self._on_signal)
        _WATCHER.add(self)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        _WATCHER.remove(self)
        if self._by_signal:
            signal.signal(signal.SIGALRM, self._previous_handler)
            self._by_signal, self._previous_handler = False, None

    @contextlib.contextmanager
    def guard(self, seconds: float) -> Iterator[None]:
        """Give the current task ``seconds`` before it counts as blocking the loop."""
        task = self.start(seconds)
        try:
            yield
        finally:
            self.stop(task)

    def start(self, seconds: float) -> asyncio.Task[Any]:
        """`guard` without a context manager (one per rollout: the generator it takes
        shows in a step's time): the current task gets ``seconds``; `stop` ends it."""
        task = asyncio.current_task()
        assert task is not None, "guard() runs inside a rollout's task"
        self._deadlines[task] = (time.monotonic() + seconds, seconds)
        return task

    def stop(self, task: asyncio.Task[Any]) -> None:
        """End ``task``'s deadline (it finished, or failed, in time or not)."""
        with self._lock:
            self._deadlines.pop(task, None)
            if self._by_signal or self._target is None or self._target[0] is not task:
                return
            # Interrupted by an asynchronous exception: raised already (this runs in its
            # rollout's finally), or still pending, and then taken back so that it never
            # lands in what the loop thread runs next (clearing none is a no-op).
            self._target = None
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._loop_thread),
                                                       None)

    def look(self) -> None:
        """Interrupt the running guarded task if it is past its deadline (the watching
        thread calls this every ``tick``)."""
        # Read by another thread while the loop runs: the task seen here may leave its
        # guard at any moment, so it is checked again under the lock stop() takes.
        task = asyncio.current_task(self.loop)
        if task is None:
            return
        deadline = self._deadlines.get(task)
        if deadline is None or time.monotonic() < deadline[0] + self.grace:
            return
        with self._lock:
            if (asyncio.current_task(self.loop) is not task
                    or self._deadlines.pop(task, None) is None):  # interrupt it once
                return  # it left its guard (or yielded) since the read above
            self._target = (task, deadline[1])
            if self._by_signal:  # the handler checks once more
                signal.pthread_kill(self._loop_thread, signal.SIGALRM)
            else:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self._loop_thread), ctypes.py_object(RolloutBlocked))
            self.interruptions += 1

    def _on_signal(self, signum: int, frame: Any) -> None:
        target, self._target = self._target, None
        if target is None or asyncio.current_task(self.loop) is not target[0]:
            return  # the rollout finished between the look and the signal
        raise RolloutBlocked(target[1])


_SHARED: dict[asyncio.AbstractEventLoop, tuple[Watchdog, int]] = {}


@contextlib.contextmanager
def loop_watchdog() -> Iterator[Watchdog]:
    """The running loop's one `Watchdog`, entered while any rollout holds it.

    Rollouts that run side by side on one loop (Trinity's asynchronous runners) share it,
    so its signal handler is installed once and restored once, after the last of them.
    """
    loop = asyncio.get_running_loop()
    watchdog, holders = _SHARED.get(loop, (None, 0))
    if watchdog is None:
        watchdog = Watchdog(loop).__enter__()
    _SHARED[loop] = (watchdog, holders + 1)
    try:
        yield watchdog
    finally:
        watchdog, holders = _SHARED.pop(loop)
        if holders > 1:
            _SHARED[loop] = (watchdog, holders - 1)
        else:
            watchdog.__exit__(None, None, None)


async def within(seconds: float, make: Callable[[], Awaitable[T]],
                 watchdog: Watchdog | None = None) -> T:
    """Await ``make()`` with a deadline of ``seconds`` that holds even if it blocks the
    loop (with a ``watchdog``); raises ``asyncio.TimeoutError`` or `RolloutBlocked`."""
    async def guarded() -> T:
        # Guarded inside: on Python 3.10 the deadline runs it in a task of its own.
        if watchdog is None:
            return await make()
        task = watchdog.start(seconds)
        try:
            return await make()
        finally:
            watchdog.stop(task)

    if hasattr(asyncio, "timeout"):  # no extra task per rollout on Python 3.11+
        async with asyncio.timeout(seconds):
            return await guarded()
    return await _waited_for(guarded(), seconds)  # pragma: no cover - Python 3.10


class _Carried(Exception):
    """A KeyboardInterrupt or SystemExit carried out of a task as an ordinary exception."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


async def _waited_for(work: Awaitable[T], seconds: float) -> T:  # pragma: no cover - 3.10
    """``asyncio.wait_for(work, seconds)``, which on Python 3.10 runs ``work`` in a task of
    its own. A KeyboardInterrupt or SystemExit raised in a task leaves the event loop there
    and then (asyncio re-raises them from the task's step), past every caller: the workers
    awaiting it end with it while asyncio.run shuts down, and asyncio logs each with a
    traceback. Carried out of the task as an ordinary exception, it is raised again here,
    in the caller, as any exception would be."""
    async def carried() -> T:
        try:
            return await work
        except (KeyboardInterrupt, SystemExit) as error:
            raise _Carried(error) from None

    try:
        return await asyncio.wait_for(carried(), seconds)
    except _Carried as carried_out:
        raise carried_out.error from None
