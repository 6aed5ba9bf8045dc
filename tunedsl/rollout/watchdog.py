"""Deadlines that hold even for a rollout that blocks its event loop, or that catches the
cancellation meant to stop it.

A timeout cancels a task, which only asks its code to stop: a retry loop under a bare
``except:`` catches the ``CancelledError`` and goes on, and whoever awaits it waits on.
`within` runs each rollout in a task of its own that it only waits for, so past its
deadline it cancels the rollout again for a short while, then abandons it (see there).

A rollout's ``asyncio`` timeout only fires when the loop gets control back; workflow code
that blocks it (``time.sleep``, a synchronous HTTP call, a long pure-Python loop) would
stall every rollout of the step until it returned, perhaps never. `Watchdog` watches the
loop from a thread: when the loop has run none of its callbacks for longer than a grace
period and a guarded rollout's task, past its deadline, is the one running, it raises
`RolloutBlocked` inside that task's code, which fails that rollout (with the user's
traceback, pointing at the blocking line) and lets the loop go on. Being the running task
past the deadline is not enough: a rollout that catches each cancellation `within` sends
it runs a moment each time (printing "retrying"), and a look that fell in that moment
took it for blocking code.

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
import atexit
import contextlib
import ctypes
import signal
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from .output import abandoned
from .tasks import made_by

T = TypeVar("T")


class RolloutBlocked(BaseException):
    """Raised inside a rollout's code that held the event loop past its deadline.

    A `BaseException`, so a workflow's ``except Exception`` cannot swallow it and block on.

    Args:
        seconds: The deadline it held the loop past (unknown when raised asynchronously).
    """

    def __str__(self) -> str:
        return (f"{self.held()}: blocking code (time.sleep, a synchronous HTTP call, a long "
                f"computation) in an async workflow or judge stops every rollout; await "
                f"asyncio.to_thread(...) or use an async client")

    def held(self) -> str:
        """What it did, without the fix: ``held the event loop past rollout_timeout = 1s``."""
        limit = f" = {self.args[0]:g}s" if self.args else ""
        return f"held the event loop past rollout_timeout{limit}"


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
        #: The task being interrupted, its seconds, whether by the signal, the guarded
        #: rollout it is (or that made it), and its deadline (monotonic).
        self._target: tuple[asyncio.Task[Any], float, bool, asyncio.Task[Any], float] | \
            None = None
        self._lock = threading.Lock()  # a deadline's end (stop) against its interruption
        self._loop_thread = threading.get_ident()
        self._previous_handler: Any = None
        self._by_signal = False
        #: When the watching thread last asked the loop to run a callback that has not run
        #: yet (None: answered): how long the loop has been held, to within a tick.
        self._asked: float | None = None
        self.interruptions = 0  # how many rollouts were interrupted (for tests and metrics)
        #: How long the loop was held past the grace, in all and by task (`_count_held`);
        #: until when it was counted.
        self.held = 0.0
        self._held_by: dict[Any, float] = {}  # (a task's entry ends with its deadline)
        self._counted: float | None = None

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
            self._held_by.pop(task, None)
            if self._target is None or self._target[0] is not task or self._target[2]:
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
        now = time.monotonic()
        asked = self._asked  # read once: the loop thread clears it when it answers
        if asked is None:
            self._asked = asked = now
            try:
                self.loop.call_soon_threadsafe(self._answered)
            except RuntimeError:  # the loop closed: nothing of it to watch
                self._asked = None
                return
        if now - asked < self.grace:
            return  # the loop ran a callback lately: whatever runs now is not blocking it
        task = asyncio.current_task(self.loop)
        self._count_held(now, asked, task)
        if task is None:
            return
        guarded = self._guarded(task)
        deadline = self._deadlines.get(guarded)
        if deadline is None or now < deadline[0] + self.grace:
            return
        if _importing(sys._current_frames().get(self._loop_thread)) and \
                now < deadline[0] + self.grace + IMPORT_ALLOWANCE:
            return  # looked at again once the import is done (see `_importing`)
        with self._lock:
            # A handler of the user's own in tunedsl's place (a judge's time limit, left
            # installed) would take the signal: the interruption is raised without it; in
            # a task the rollout made only by the signal (an asynchronous exception there
            # could not be taken back by `stop`).
            by_signal = self._by_signal and \
                signal.getsignal(signal.SIGALRM) == self._on_signal
            if guarded is not task and not by_signal:
                return
            if (asyncio.current_task(self.loop) is not task
                    or self._deadlines.pop(guarded, None) is None):  # interrupt it once
                return  # it left its guard (or yielded) since the read above
            self._target = (task, deadline[1], by_signal, guarded, deadline[0])
            if by_signal:  # the handler checks once more
                signal.pthread_kill(self._loop_thread, signal.SIGALRM)
            else:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self._loop_thread), ctypes.py_object(RolloutBlocked))
            self.interruptions += 1

    def _guarded(self, task: Any) -> Any:
        """``task``, or the guarded rollout whose code made it (a tool run by ``gather``,
        ``create_task``, a ``TaskGroup``: `tasks.made_by`), held to that one's deadline."""
        for _ in range(_DEEPEST_MAKERS):
            if task is None or task in self._deadlines:
                return task
            task = made_by(task)
        return task

    def _count_held(self, now: float, asked: float, task: Any) -> None:
        """Add the time since the last look (since the watcher asked, at a hold's first
        look) to the time the loop was held, and to the time ``task`` held it."""
        counted = self._counted if self._counted is not None and self._counted >= asked \
            else asked
        self._counted = now
        self.held += now - counted
        if task is not None:
            self._held_by[task] = self._held_by.get(task, 0.0) + now - counted

    def held_by_others(self, task: Any) -> float:
        """How long the loop was held (seconds, counted from when each hold was seen)
        by any code but ``task``'s, since the watchdog began."""
        return self.held - self._held_by.get(task, 0.0)

    def _answered(self) -> None:
        """Run by the loop when it is free: it was not held since the watcher asked."""
        self._asked = None

    def _on_signal(self, signum: int, frame: Any) -> None:
        target, self._target = self._target, None
        if target is None or asyncio.current_task(self.loop) is not target[0]:
            return  # the rollout finished between the look and the signal
        if _importing(frame) and time.monotonic() < target[4] + self.grace + IMPORT_ALLOWANCE:
            # begun since the look: interrupted again after it (its deadline kept, so an
            # import that never ends is interrupted all the same)
            self._deadlines.setdefault(target[3], (target[4], target[1]))
            return
        raise RolloutBlocked(target[1])


#: How long past its deadline a rollout blocking inside an import is let go on (an import
#: cut short leaves its module half made): an import that blocks for good (a connection
#: without a timeout, a lock) is interrupted after it; it was let go on for ever, and a
#: Ctrl-C could not end the command (sweep 51 B-T1).
IMPORT_ALLOWANCE = 30.0


def _importing(frame: Any) -> bool:
    """Whether the code at ``frame`` (a thread's innermost) runs inside an import: an
    exception raised there leaves the module half made in ``sys.modules``, where every
    later import finds it broken ("module 'aiohttp' has no attribute 'client_exceptions'"
    in every later test, after a slow first import of openai in a rollout; sweep 50). A
    rollout that blocks the loop is interrupted once its import is done."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


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


#: How often a rollout past its deadline is cancelled again, in seconds. Code that catches
#: the cancellation (a retry loop under a bare ``except:``) loses an attempt to each one,
#: so a loop of up to 5 attempts ends within `ABANDON_SECONDS`; code that re-raises it after
#: awaiting a cleanup (closing a connection) has this long before that cleanup is cancelled.
RECANCEL_SECONDS = 0.2
#: How long past its deadline a rollout's caller waits for it to end (cancelled again every
#: `RECANCEL_SECONDS`): it is then abandoned, left running (and cancelled) on its own, and
#: its caller goes on. The same bound holds for a rollout cancelled from outside (Ctrl-C, a
#: sibling's failure), so no caller waits longer than this on code that will not stop.
ABANDON_SECONDS = 1.0

#: Rollouts being cancelled until they end (past their deadline, or abandoned), kept
#: referenced till then: asyncio keeps only a weak reference to a task, and an abandoned
#: one collected mid-run would be closed in place, running its code where it stood.
_STOPPING: set[asyncio.Task[Any]] = set()

#: Takes a task out of asyncio's registry of a loop's tasks (private; Python 3.10 to 3.12 have
#: it): see `within`.
_unregister_task = getattr(asyncio.tasks, "_unregister_task", None)


@atexit.register
def _keep_past_exit() -> None:
    """Rollouts still running (abandoned) when Python exits are never finalized: finalizing
    one closes its coroutine, which runs its code outside any event loop, and a retry loop
    catching every exception there spins forever, so Python would never exit."""
    for task in list(_STOPPING):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(task))


class TimedOut(asyncio.TimeoutError):
    """A rollout ran past its deadline (an ``asyncio.TimeoutError``, as before); its text
    says what it did with the cancellation that should have stopped it, or is empty when it
    stopped.

    Args:
        caught: It went on after being cancelled (it returned, raised something else, or
            was still running), so its code catches ``asyncio.CancelledError``.
        abandoned: Still running `ABANDON_SECONDS` past its deadline, it was abandoned.
    """

    def __init__(self, caught: bool = False, abandoned: bool = False) -> None:
        super().__init__()  # no arguments: Python 3.11's TimeoutError is an OSError
        self.caught, self.abandoned = caught, abandoned

    def __str__(self) -> str:
        if not self.caught:
            return ""
        said = ("it caught the cancellation (a bare except: or except BaseException:), so "
                "re-raise asyncio.CancelledError")
        if self.abandoned:
            said += f"; still running {ABANDON_SECONDS:g}s later, it was abandoned"
        return said


#: How a rollout's task ended: whether it returned, and what it returned or raised.
_Ending = tuple[bool, Any]


async def within(seconds: float, make: Callable[[], Awaitable[T]],
                 watchdog: Watchdog | None = None, *,
                 at_deadline: Callable[[], None] | None = None) -> T:
    """Await ``make()`` with a deadline of ``seconds`` that holds whatever it does: even if
    it blocks the loop (with a ``watchdog``, which raises `RolloutBlocked` in it) or catches
    the cancellation (raises `TimedOut`, an ``asyncio.TimeoutError``, after at most
    `ABANDON_SECONDS` more). ``at_deadline`` is called when the deadline passes with the
    rollout still running, before it is cancelled (to note where it was stopped: what it
    runs after catching the cancellation is not what timed out).

    ``make()`` runs in a task of its own (on every Python version), which the caller only
    waits for: cancelling a task merely asks its code to stop, and code that catches the
    ``CancelledError`` runs on, holding whoever awaits it. A rollout still running when its
    deadline is acted on is cancelled then and every `RECANCEL_SECONDS`, and abandoned if it
    still runs `ABANDON_SECONDS` later; whatever it returns once cancelled is no result (one
    that finished first keeps its result, as under ``asyncio.timeout``: the loop held by
    another rollout's blocking code can act on a deadline late). A caller cancelled from
    outside (Ctrl-C, a sibling's failure) cancels it likewise, waits as long at most, and
    is cancelled.

    The task ends in no exception of its own (its outcome is raised here, in the caller): a
    KeyboardInterrupt or SystemExit raised in a task would leave the event loop there and
    then, past every caller (asyncio re-raises them from the task's step). Nor is it one of
    ``asyncio.all_tasks()``: ``asyncio.run`` ends by cancelling each of those and waiting
    for it, without end for one that catches every cancellation; its caller, which is one
    of them, stops it as above.
    """
    loop = asyncio.get_running_loop()
    woken = loop.create_future()  # by the rollout's end, or by its deadline
    deadline = loop.call_later(seconds, _wake, woken)
    rollout = loop.create_task(_settled(make, seconds, watchdog, woken))
    try:
        if _unregister_task is not None:
            _unregister_task(rollout)
        held_before = watchdog.held_by_others(rollout) if watchdog is not None else 0.0
        try:
            await woken
        finally:
            deadline.cancel()
        # The time another rollout's blocking code held the loop is given back: this one
        # could not run then (it timed out in place of the one that blocked). At most
        # ``seconds`` more in all: a hold of its own child task's counts as another's.
        given = 0.0
        while not rollout.done() and watchdog is not None:
            lost = min(watchdog.held_by_others(rollout) - held_before, seconds - given)
            if lost < _GIVEN_BACK_FROM:
                break
            held_before, given = held_before + lost, given + lost
            await _until(rollout, lost)
        on_time = rollout.done()
        if not on_time:
            if at_deadline is not None:
                at_deadline()
            _cancel_until_done(rollout)
            await _until(rollout, ABANDON_SECONDS)
    except asyncio.CancelledError:  # from outside: the rollout is stopped too, or abandoned
        if not rollout.done():
            _cancel_until_done(rollout)
            await _until(rollout, ABANDON_SECONDS)  # cancelled again: no more waiting
        raise
    finally:
        if not rollout.done():
            _abandon(rollout, watchdog)
    if on_time:
        return _outcome(rollout)
    raise _late(rollout)


async def _settled(make: Callable[[], Awaitable[T]], seconds: float,
                   watchdog: Watchdog | None, woken: asyncio.Future[None]) -> _Ending:
    """``make()``'s ending, never raised (see `within`), guarded inside its own task; wakes
    the caller as it ends (sooner than a callback on the task's end would)."""
    task = watchdog.start(seconds) if watchdog is not None else None
    try:
        return True, await make()
    except GeneratorExit:  # the coroutine closed, not run: nothing to report
        raise
    except BaseException as error:  # noqa: BLE001 - raised again by within, in the caller
        return False, error
    finally:
        if watchdog is not None and task is not None:
            watchdog.stop(task)
        _wake(woken)


#: How many makers up from a task the watchdog looks for a guarded rollout's.
_DEEPEST_MAKERS = 32

#: Time held by others shorter than this (seconds) is not given back to a rollout.
_GIVEN_BACK_FROM = 0.05


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():  # cancelled with its caller, or woken already
        woken.set_result(None)


def _outcome(rollout: asyncio.Task[_Ending]) -> Any:
    """What the rollout returned, or its exception raised."""
    if rollout.cancelled():  # cancelled as it returned: by its own code
        raise asyncio.CancelledError
    returned, value = rollout.result()
    if returned:
        return value
    raise value


def _late(rollout: asyncio.Task[_Ending]) -> BaseException:
    """The error of a rollout cancelled for its deadline (ended since, or still running)."""
    if not rollout.done():
        return TimedOut(caught=True, abandoned=True)
    caught = _OUTLIVED.get(rollout, 0) >= _CATCHES_AFTER
    if rollout.cancelled():
        return TimedOut(caught=caught)
    returned, value = rollout.result()
    if returned:
        return TimedOut(caught=True)
    if isinstance(value, asyncio.CancelledError):
        return TimedOut(caught=caught)
    if isinstance(value, RolloutBlocked) or isinstance(value.__cause__, RolloutBlocked):
        return value  # it held the loop: that is what to fix
    timed_out = TimedOut(caught=True)  # it made the cancellation another error
    timed_out.__cause__ = value
    return timed_out


async def _until(task: asyncio.Task[Any], seconds: float) -> None:
    """Until ``task`` ends or ``seconds`` pass, whichever is first; cancelling the caller
    leaves ``task`` be."""
    if task.done():
        return
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def wake(_: Any = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_later(seconds, wake)
    task.add_done_callback(wake)
    try:
        await waiter
    finally:
        timer.cancel()
        task.remove_done_callback(wake)


def _cancel_until_done(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` now and every `RECANCEL_SECONDS` until it ends, keeping it referenced
    till then (once started, calling this again does nothing more)."""
    if task not in _STOPPING:
        _STOPPING.add(task)
        task.add_done_callback(_STOPPING.discard)
        _cancel_again(task)


def _cancel_again(task: asyncio.Task[Any]) -> None:
    if not task.done():
        if task in _CANCELLED:  # still running since the last one: it went on past it
            _OUTLIVED[task] = _OUTLIVED.get(task, 0) + 1
        _CANCELLED.add(task)
        task.cancel()
        task.get_loop().call_later(RECANCEL_SECONDS, _cancel_again, task)


#: Tasks `_cancel_again` has cancelled, and how many of its cancellations each ran on past
#: (a cancellation reaches a task at its next step, well before the next one is sent).
_CANCELLED: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
_OUTLIVED: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = weakref.WeakKeyDictionary()

#: A rollout that ran on past this many cancellations catches them, whatever ended it:
#: code that re-raises after awaiting a cleanup outlives one at most (the next cancels the
#: cleanup). A retry loop under a bare ``except:`` that ends in a cancelled call was said
#: as stopped when that call outlasted a `RECANCEL_SECONDS` (on a loaded machine).
_CATCHES_AFTER = 2


def let_go(task: asyncio.Task[Any]) -> None:
    """Stop waiting for ``task``, which catches its cancellation: it is cancelled every
    `RECANCEL_SECONDS` and kept referenced until it ends (`_STOPPING`), out of asyncio's
    registry of the loop's tasks (its end waits for none of them)."""
    _cancel_until_done(task)
    if _unregister_task is not None:
        _unregister_task(task)


def _abandon(rollout: asyncio.Task[Any], watchdog: Watchdog | None) -> None:
    """Stop waiting for ``rollout``: it runs on, cancelled every `RECANCEL_SECONDS` and kept
    referenced until it ends (`_STOPPING`), no longer guarded (its caller has gone on: an
    interruption would fail nothing, and a late one must not land in the caller's code)."""
    _cancel_until_done(rollout)
    abandoned(task=rollout)  # (its output's routing, folder and recursion limit released)
    if watchdog is not None:
        watchdog.stop(rollout)
