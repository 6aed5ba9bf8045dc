"""The event loop rollouts run on, run and wound down so that no ``SystemExit`` from their
code ends the command with no word.

A task tunedsl's factory does not make (``asyncio.Task(...)`` called directly, a task
factory of the user's own, a task made from another thread) lets a ``sys.exit()`` out of
the loop, but the task holds it as its exception by then: `run_rollouts` and
`run_rollouts_on` run the loop on, and the rollout that awaits the task fails with it as
`ExitInTask` (`as_exit_in_task`). An exit in a plain callback (``call_soon``,
``call_later``, a done callback) belongs to no rollout: it ends the command with one line
(`ExitInCallback`). The loop is wound down as ``asyncio.run`` does (`wind_down`), an exit
raised on the way said in a warning.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

from ..errors import RunError, display_path
from .tasks import ExitInTask, shown_code

T = TypeVar("T")

#: The folders of asyncio's code and tunedsl's, which a traceback's frames are told apart by.
_ASYNCIO = os.path.dirname(asyncio.__file__)
_TUNEDSL = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class ExitInCallback(RunError):
    """``SystemExit`` raised in a loop callback while rollouts ran: no rollout awaits it, so
    it ends the command (exit 1), saying where, as asyncio would have ended it silently;
    ``then``: what was kept and how to go on (`then`)."""

    def __init__(self, exit: SystemExit, then: str = "") -> None:
        where = _raised_at(exit.__traceback__)
        super().__init__(f"sys.exit({shown_code(exit.code)}) in a callback the rollouts' "
                         f"code scheduled with call_soon, call_later or as a done "
                         f"callback{where} ended "
                         f"the command; raise an exception there instead, or exit from the "
                         f"workflow (which fails its rollout){f'; {then}' if then else ''}")
        self.exit, self.code = exit, exit.code

    def then(self, kept: str) -> ExitInCallback:
        """The same, saying what the command kept and how to go on."""
        return ExitInCallback(self.exit, kept)


#: The exits that left the loop from a rollout's task, by id, until the rollout that awaits
#: the task meets them (`as_exit_in_task`; exceptions take no weak reference).
_ESCAPED: dict[int, BaseException] = {}


def as_exit_in_task(exc: BaseException) -> BaseException:
    """``exc`` as the rollout that met it fails with: an exit that left the loop from a task
    of its code (`run_rollouts_on`) is `ExitInTask`, as the task factory makes it."""
    if isinstance(exc, SystemExit) and _ESCAPED.get(id(exc)) is exc:
        del _ESCAPED[id(exc)]
        made = ExitInTask(exc.code)
        made.__cause__ = exc
        return made
    return exc


def run_rollouts(main: Coroutine[Any, Any, T], threads_bound: float | None = None) -> T:
    """``asyncio.run(main)`` for code that runs rollouts: a ``SystemExit`` that a task of
    theirs raised leaves the loop, and the loop runs on (`run_rollouts_on`). With
    ``threads_bound``, the threads the rollouts left are waited for that long at most
    (`wind_down`)."""
    tracked: list[asyncio.Task[Any]] = []

    async def main_task() -> T:
        from ..models.lifetime import run_threads_as_rollouts

        tracked.append(asyncio.current_task())  # type: ignore[arg-type]
        run_threads_as_rollouts(asyncio.get_running_loop())  # (a judge's alone: rescore's)
        return await main

    let_through: list[SystemExit] = []
    runner = _runner()
    try:
        step: Coroutine[Any, Any, Any] = main_task()
        while True:
            try:
                return runner.run(step)
            except SystemExit as exit:
                if not tracked or not _left_a_task(exit, tracked[0], let_through):
                    raise
                step = _awaited(tracked[0])
    finally:  # (before asyncio's own close, which an exit on the way would end)
        try:
            wind_down(runner.get_loop(), let_through, threads_bound)
        finally:
            _closed(runner)


def _closed(runner: Any) -> None:
    """Close ``runner`` (its loop run once more: a Ctrl-C during the wind-down leaves
    asyncio's own end to do), a ``SystemExit`` raised meanwhile by a timer of the
    rollouts' warned of and let go: it replaced the interrupt, ending the command with its
    code and no word."""
    while True:
        try:
            runner.close()
            return
        except SystemExit as exit:
            print(f"warning: sys.exit({shown_code(exit.code)}) in a loop callback as the "
                  f"rollouts' event loop closed{_raised_at(exit.__traceback__)} was ignored",
                  file=sys.stderr)


def run_rollouts_on(loop: asyncio.AbstractEventLoop, task: asyncio.Task[T]) -> T:
    """``loop.run_until_complete(task)``, run on after a ``SystemExit`` a task of the
    rollouts' raised (asyncio re-raises it out of the loop, which ended the command with no
    word): the task holds it, and the rollout awaiting the task fails with it."""
    let_through: list[SystemExit] = []
    try:
        while True:
            try:
                return loop.run_until_complete(task)
            except SystemExit as exit:
                if not _left_a_task(exit, task, let_through):
                    raise
    finally:
        _said_unmet(let_through)


def wind_down(loop: asyncio.AbstractEventLoop, let_through: list[SystemExit] | None = None,
              threads_bound: float | None = None) -> None:
    """End what the rollouts left on ``loop``, as ``asyncio.run`` does before it closes the
    loop: the tasks left are cancelled and run to their end, the async generators left open
    closed, the default executor's threads joined. A ``SystemExit`` raised on the way (by a
    task when cancelled, in an async generator's ``finally``, by a timer firing meanwhile)
    is said in a warning and let go: the rollouts are over and their results stand (it
    ended the command with no word, its summary unwritten).

    A task (or an async generator's ``finally``) still running `ABANDON_SECONDS` after it
    was cancelled, one that catches every cancellation, is let go with a warning, as the
    watchdog lets go such a rollout: asyncio's own end waited for it forever, the command's
    summary unwritten. Threads are waited for (Python waits for them as it exits anyway),
    saying so when that takes longer; with ``threads_bound`` (the test kit's timeout: a
    test hung on a job its workflow never awaited) no longer than that, then let go with a
    warning.

    Ctrl-C and SIGTERM are taken by tunedsl meanwhile, never raised inside the code that
    runs (a task's bare ``except`` swallowed it, and one left half let go hung asyncio's own
    end): the tasks' and generators' ends, bounded, are run out, the threads' wait is cut
    short, and the wind-down then ends in KeyboardInterrupt."""
    from ..interrupts import cancelling, deferred

    # (an interrupt that stopped the rollouts: the threads are not waited for, as one that
    # came while they were is not; the first Ctrl-C was spent, and the wait was unbounded)
    interrupted = isinstance(sys.exc_info()[1], KeyboardInterrupt)
    with deferred():
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            _run_through(loop, loop.create_task(_ended_or_let_go(tasks, "tasks the rollouts "
                                                                         "left")))
        _run_through(loop, loop.create_task(_asyncgens_closed(loop)))
    if interrupted:
        _threads_let_go(loop)
        _said_unmet(let_through or [])
        return
    waiting = loop.create_task(_waited_saying(loop.create_task(_threads_joined(loop)),
                                              threads_bound))

    def stop_waiting() -> None:  # (called by the signal handler: wakes the loop too)
        loop.call_soon_threadsafe(waiting.cancel)

    try:
        with cancelling(stop_waiting):
            _run_through(loop, waiting)
    except KeyboardInterrupt:
        _threads_let_go(loop)
        raise
    _said_unmet(let_through or [])


def _threads_let_go(loop: asyncio.AbstractEventLoop) -> None:
    """Let the threads still running in ``loop``'s default executor go: asyncio's own end
    would wait for them again, without bound (the command's entry ends the process without
    them: `cli._end_without_threads_left`)."""
    from concurrent.futures import ThreadPoolExecutor

    from ..models.lifetime import rollout_threads_of

    threads = rollout_threads_of(loop)
    if threads is not None:  # (its idle threads end now; only the busy ones run on)
        threads.shutdown(wait=False, cancel_futures=True)
    loop.set_default_executor(ThreadPoolExecutor(thread_name_prefix="asyncio"))


async def _asyncgens_closed(loop: asyncio.AbstractEventLoop) -> None:
    """``loop.shutdown_asyncgens()``, bounded as the tasks left are (`_ended_or_let_go`):
    the tasks it closes each generator in are let go with it (left registered, asyncio's
    own end waited for one whose ``finally`` catches its cancellation forever)."""
    before = asyncio.all_tasks()
    closing = asyncio.ensure_future(loop.shutdown_asyncgens())
    await asyncio.sleep(0)  # (its gather makes a task for each generator's aclose())
    closings = asyncio.all_tasks() - before - {closing}
    await _ended_or_let_go({closing, *closings}, "async generators the rollouts left open",
                           shown=closings)


async def _ended_or_let_go(tasks: set[asyncio.Task[Any]], what: str,
                           shown: set[asyncio.Task[Any]] | None = None) -> None:
    """Wait for ``tasks`` (cancelled) to end, cancelling them again every
    `RECANCEL_SECONDS`; those still running after `ABANDON_SECONDS` are let go (`let_go`)
    with a warning counting and naming those of ``shown`` (default: all). What the ended
    ones raised is taken (asyncio logs none as never retrieved); an exit (`ExitInTask`, as
    the task factory makes it) is warned of, as one let out of the loop is."""
    from .watchdog import ABANDON_SECONDS, RECANCEL_SECONDS, let_go

    pending = set(tasks)
    waited = 0.0
    while pending and waited < ABANDON_SECONDS:
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_SECONDS)
        waited += RECANCEL_SECONDS
        for task in pending:
            task.cancel()
    for task in tasks - pending:
        raised = None if task.cancelled() else task.exception()
        if isinstance(raised, ExitInTask) and isinstance(raised.__cause__, SystemExit):
            _said_ignored(raised.__cause__, "task")
    if not pending:
        return
    for task in pending:
        let_go(task)
    said = sorted((pending & shown) or pending if shown is not None else pending, key=id)
    named = [_coroutine_of(task) for task in said]
    first = next((name for name, users in named if users), named[0][0])
    print(f"warning: {len(said)} {what} still ran {ABANDON_SECONDS:g}s after they were "
          f"cancelled (they catch the cancellation; the first: {first}); let go, running on",
          file=sys.stderr)


async def _waited_saying(joining: asyncio.Task[Any], bound: float | None = None) -> None:
    """Wait for ``joining`` (the default executor's threads), saying so after
    `ABANDON_SECONDS`: the command's summary waits for them. With ``bound``, no longer:
    then they are let go, with a warning (`RuntimeWarning`, which pytest shows)."""
    from .watchdog import ABANDON_SECONDS

    if bound is not None:
        done, _ = await asyncio.wait({joining}, timeout=bound)
        if not done:
            import warnings

            joining.cancel()
            _threads_let_go(asyncio.get_running_loop())
            warnings.warn(f"a thread the rollout started (asyncio.to_thread, run_in_executor) "
                          f"still ran {bound:g}s after it ended, and was let go (Python waits "
                          f"for it as the process exits); await what the workflow hands to "
                          f"a thread, or bound it", RuntimeWarning, stacklevel=1)
        return
    done, _ = await asyncio.wait({joining}, timeout=ABANDON_SECONDS)
    if not done:
        print("note: waiting for threads the rollouts started (asyncio.to_thread, "
              "run_in_executor) to end; Python waits for them as it exits too", file=sys.stderr)
    await joining


async def _threads_joined(loop: asyncio.AbstractEventLoop) -> None:
    """Join the threads of ``loop``'s default executor: tunedsl's own (`RolloutThreads`),
    joined in a thread of its own that wakes this task unless it was cancelled, as a Ctrl-C
    meanwhile does (Python 3.10's and 3.11's ``shutdown_default_executor`` then set the
    result of its cancelled future, and asyncio printed an ``InvalidStateError``
    traceback); else asyncio's own."""
    from ..models.lifetime import rollout_threads_of

    threads = rollout_threads_of(loop)
    if threads is None:
        await loop.shutdown_default_executor()
        return
    joined = loop.create_future()

    def join() -> None:
        threads.shutdown(wait=True)
        try:
            loop.call_soon_threadsafe(_ended, joined)
        except RuntimeError:  # the loop closed meanwhile: nothing waits for it
            pass

    threading.Thread(target=join, name="tunedsl-join", daemon=True).start()
    await joined


def _ended(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _coroutine_of(task: asyncio.Task[Any]) -> tuple[str, bool]:
    """``NAME (FILE:LINE)`` of the code a task runs, where it waits now: the outermost
    coroutine (or async generator: one an ``aclose()`` task closes) of the user's it awaits
    through (past tunedsl's wrapper), else its own; and whether it is the user's."""
    from .code import users_file

    chain = _awaiting(task)
    users = next((c for c, frame in chain if users_file(frame.f_code.co_filename)), None)
    shown = users if users is not None else chain[0][0] if chain else task.get_coro()
    name = getattr(shown, "__qualname__", None) or type(shown).__name__
    frame = next((frame for c, frame in chain if c is shown), None)
    if frame is None:
        return name, users is not None
    return (f"{name} ({display_path(frame.f_code.co_filename)}:{frame.f_lineno})",
            users is not None)


def _awaiting(task: asyncio.Task[Any]) -> list[tuple[Any, Any]]:
    """The coroutines and async generators ``task`` awaits through, each with its frame,
    outermost first. An async generator's ``aclose()`` (what asyncio's
    ``shutdown_asyncgens`` awaits) is no coroutine and names no generator; the generator
    is found among what it refers to (`gc.get_referents`)."""
    import gc
    import inspect

    chain: list[tuple[Any, Any]] = []
    step: Any = task.get_coro()
    while step is not None and len(chain) < 100:
        frame = getattr(step, "cr_frame", None) or getattr(step, "ag_frame", None)
        if frame is not None:
            chain.append((step, frame))
            step = getattr(step, "cr_await", None) if inspect.iscoroutine(step) else \
                getattr(step, "ag_await", None)
            continue
        if type(step).__name__ not in ("async_generator_athrow", "async_generator_asend"):
            break
        step = next((held for held in gc.get_referents(step) if inspect.isasyncgen(held)
                     and all(held is not seen for seen, _ in chain)), None)
    return chain


def _run_through(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]) -> None:
    while True:
        try:
            loop.run_until_complete(future)
            return
        except SystemExit as exit:
            if future.done():
                raise
            _said_ignored(exit, "task" if _from_a_task(exit.__traceback__) else
                          "loop callback")
        except KeyboardInterrupt as stop:
            if future.done() or not _from_a_task(stop.__traceback__):
                raise


def _said_ignored(exit: SystemExit, where: str) -> None:
    print(f"warning: sys.exit({shown_code(exit.code)}) in a {where} left when the rollouts "
          f"ended{_raised_at(exit.__traceback__)} was ignored; the results stand",
          file=sys.stderr)


def _said_unmet(let_through: list[SystemExit]) -> None:
    """Warn of each exit let out of the loop from a task that no rollout awaited (the
    rollouts are over): ignored, not silently."""
    for exit in let_through:
        if _ESCAPED.pop(id(exit), None) is exit:
            print(f"warning: sys.exit({shown_code(exit.code)}) in a task no rollout awaited"
                  f"{_raised_at(exit.__traceback__)} was ignored", file=sys.stderr)


def _left_a_task(exit: SystemExit, main: asyncio.Task[Any],
                 let_through: list[SystemExit]) -> bool:
    """Whether ``exit`` left the loop from a task other than ``main`` (recorded, for the
    rollout awaiting it, and in ``let_through``); raises `ExitInCallback` for one from a
    plain callback."""
    if main.done():  # through main's own code: not a rollout's
        return False
    if not _from_a_task(exit.__traceback__):
        raise ExitInCallback(exit) from None
    _ESCAPED[id(exit)] = exit
    let_through.append(exit)
    return True


async def _awaited(task: asyncio.Task[T]) -> T:
    return await task


def _from_a_task(traceback: TracebackType | None) -> bool:
    """Whether the frames below the loop's ``Handle._run`` are a task's step (a coroutine
    run by asyncio's C task, or the pure-Python task's ``__step``) and not a callback's."""
    below_handle = False
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if below_handle:
            return bool(code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR)) or (
                os.path.dirname(code.co_filename) == _ASYNCIO
                and code.co_name.endswith("__step"))
        below_handle = code.co_name == "_run" and \
            os.path.dirname(code.co_filename) == _ASYNCIO
        traceback = traceback.tb_next
    return False


def _raised_at(traceback: TracebackType | None) -> str:
    """`` (FILE:LINE, in NAME)``, where ``traceback`` left the user's code: its innermost
    frame in a file of the user's (a library patching ``sys.exit``, as wandb does, is
    passed over), else outside asyncio and tunedsl; ``""`` when none is
    (``call_later(1, sys.exit)``)."""
    from .code import users_file

    users = last = None
    while traceback is not None:
        file = traceback.tb_frame.f_code.co_filename
        if os.path.dirname(file) != _ASYNCIO and \
                not os.path.abspath(file).startswith(_TUNEDSL):
            last = traceback
        if users_file(file):
            users = traceback
        traceback = traceback.tb_next
    shown = users or last
    if shown is None:
        return ""
    code = shown.tb_frame.f_code
    return f" ({display_path(code.co_filename)}:{shown.tb_lineno}, in {code.co_name})"


def _runner() -> Any:
    """asyncio's ``Runner`` (Python 3.11+: Ctrl-C cancels the main task, as asyncio.run
    does), else one of the same shape that runs as Python 3.10's ``asyncio.run``."""
    if sys.version_info >= (3, 11):
        return asyncio.Runner()
    return _Runner310()


class _Runner310:
    """``asyncio.run``'s loop on Python 3.10, kept open between `run` calls (`run_rollouts`)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.loop

    def close(self) -> None:
        """As Python 3.11's ``Runner.close``: what is left cancelled and awaited, the async
        generators closed, the default executor shut down, the loop closed."""
        loop = self.loop
        if loop.is_closed():  # (closed already, an exit on the way: `_closed`)
            return
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
