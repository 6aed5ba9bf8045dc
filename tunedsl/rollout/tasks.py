"""Tasks a rollout's code starts (``asyncio.gather``, ``create_task``, a ``TaskGroup``): a
``SystemExit`` raised in one (``sys.exit()`` in a tool, argparse refusing an argument) is
re-raised by asyncio out of the event loop, ending the whole command with that exit code and
no word (eval's summary, a run's training, tune-prompt's results lost). Raised in the
rollout's own code it fails that rollout; in a task the rollout started, it is made
`ExitInTask`, which fails the rollout that awaits it, the same way.

A task the factory does not make (``asyncio.Task(...)`` called directly, a task factory of
the user's own, a task made from another thread) still lets the exit out of the loop, but
the task holds it as its exception by then: `run_rollouts` and `run_rollouts_on` run the
loop on, and the rollout that awaits the task fails with it as `ExitInTask`. An exit in a
plain callback (``call_soon``, ``call_later``, a done callback) belongs to no rollout: it
ends the command with one line (`ExitInCallback`), never silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import os
import sys
import weakref
from collections.abc import Coroutine, Iterator
from types import TracebackType
from typing import Any, TypeVar

from ..errors import RunError, display_path

T = TypeVar("T")

#: Whether the code running in this context is a rollout's (`rollout_code`).
_IN_ROLLOUT: contextvars.ContextVar[bool] = contextvars.ContextVar("tunedsl_in_rollout",
                                                                   default=False)


class ExitInTask(Exception):
    """``SystemExit`` raised in a task a rollout's code started: it fails that rollout."""

    def __init__(self, code: Any) -> None:
        super().__init__(f"SystemExit({code!r}) in a task the workflow or judge started "
                         f"(asyncio would have ended the whole command with it)")
        self.code = code


@contextlib.contextmanager
def rollout_code() -> Iterator[None]:
    """Run a rollout's code: tasks it starts on the running loop have a ``SystemExit`` of
    theirs made `ExitInTask`. A task factory the loop has already (a tracing library's, an
    async test's) still makes every task, under tunedsl's."""
    loop = asyncio.get_running_loop()
    factory = loop.get_task_factory()
    if not isinstance(factory, _TaskFactory):
        loop.set_task_factory(_TaskFactory(factory))
    token = _IN_ROLLOUT.set(True)
    try:
        yield
    finally:
        _IN_ROLLOUT.reset(token)


#: The task that made each task a rollout's code made (`made_by`).
_MADE_BY: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def made_by(task: Any) -> Any:
    """The task whose code made ``task``, when a rollout's code did (through the loop's
    task factory), else None: the watchdog holds such a task to its maker's deadline."""
    return _MADE_BY.get(task)


class _TaskFactory:
    """The loop's task factory: a task made by a rollout's code runs ``coro`` with its
    ``SystemExit`` turned into `ExitInTask`, and is known by its maker (`made_by`). The
    task itself is made by the factory the loop had before (``inner``), else by asyncio."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, loop: asyncio.AbstractEventLoop, coro: Any,
                 **options: Any) -> asyncio.Future[Any]:
        if not _IN_ROLLOUT.get():
            return self._made(loop, coro, options)
        task = self._made(loop, _exits_contained(coro) if inspect.iscoroutine(coro) else coro,
                          options)
        maker = asyncio.current_task(loop)
        if maker is not None:
            _MADE_BY[task] = maker
        return task

    def _made(self, loop: asyncio.AbstractEventLoop, coro: Any,
              options: dict[str, Any]) -> asyncio.Future[Any]:
        if self.inner is None:
            return asyncio.Task(coro, loop=loop, **options)
        return self.inner(loop, coro, **options)


async def _exits_contained(coro: Any) -> Any:
    try:
        return await coro
    except SystemExit as exc:
        raise ExitInTask(exc.code) from exc


class ExitInCallback(RunError):
    """``SystemExit`` raised in a loop callback while rollouts ran: no rollout awaits it, so
    it ends the command (exit 1), saying where, as asyncio would have ended it silently;
    ``then``: what was kept and how to go on (`then`)."""

    def __init__(self, exit: SystemExit, then: str = "") -> None:
        where = _raised_at(exit.__traceback__)
        super().__init__(f"sys.exit({exit.code!r}) in a callback the rollouts' code scheduled "
                         f"with call_soon, call_later or as a done callback{where} ended "
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


def run_rollouts(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` for code that runs rollouts: a ``SystemExit`` that a task of
    theirs raised leaves the loop, and the loop runs on (`run_rollouts_on`)."""
    tracked: list[asyncio.Task[Any]] = []

    async def main_task() -> T:
        tracked.append(asyncio.current_task())  # type: ignore[arg-type]
        return await main

    let_through: list[SystemExit] = []
    with _runner() as runner:
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
            wind_down(runner.get_loop(), let_through)


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


def wind_down(loop: asyncio.AbstractEventLoop, let_through: list[SystemExit] | None = None
              ) -> None:
    """End what the rollouts left on ``loop``, as ``asyncio.run`` does before it closes the
    loop: the tasks left are cancelled and run to their end, the async generators left open
    closed, the default executor's threads joined. A ``SystemExit`` raised on the way (by a
    task when cancelled, in an async generator's ``finally``, by a timer firing meanwhile)
    is said in a warning and let go: the rollouts are over and their results stand (it
    ended the command with no word, its summary unwritten). A ``KeyboardInterrupt`` stops
    it, unless a task ends in it (the one that stopped the run, raised again by each task
    it passes through)."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:  # (what they raise is taken by gather: asyncio logs none as never retrieved)
        _run_through(loop, asyncio.gather(*tasks, return_exceptions=True))
    _run_through(loop, loop.create_task(loop.shutdown_asyncgens()))
    _run_through(loop, loop.create_task(loop.shutdown_default_executor()))
    _said_unmet(let_through or [])


def _run_through(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]) -> None:
    while True:
        try:
            loop.run_until_complete(future)
            return
        except SystemExit as exit:
            if future.done():
                raise
            where = "task" if _from_a_task(exit.__traceback__) else "loop callback"
            print(f"warning: sys.exit({exit.code!r}) in a {where} left when the rollouts "
                  f"ended{_raised_at(exit.__traceback__)} was ignored; the results stand",
                  file=sys.stderr)
        except KeyboardInterrupt as stop:
            if future.done() or not _from_a_task(stop.__traceback__):
                raise


def _said_unmet(let_through: list[SystemExit]) -> None:
    """Warn of each exit let out of the loop from a task that no rollout awaited (the
    rollouts are over): ignored, not silently."""
    for exit in let_through:
        if _ESCAPED.pop(id(exit), None) is exit:
            print(f"warning: sys.exit({exit.code!r}) in a task no rollout awaited"
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
    asyncio_folder = os.path.dirname(asyncio.__file__)
    below_handle = False
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if below_handle:
            return bool(code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR)) or (
                os.path.dirname(code.co_filename) == asyncio_folder
                and code.co_name.endswith("__step"))
        below_handle = code.co_name == "_run" and \
            os.path.dirname(code.co_filename) == asyncio_folder
        traceback = traceback.tb_next
    return False


def _raised_at(traceback: TracebackType | None) -> str:
    """`` (FILE:LINE, in NAME)``, the innermost frame of ``traceback`` outside asyncio (a
    callback of its own, ``call_later(1, sys.exit)``, has none: ``""``)."""
    asyncio_folder = os.path.dirname(asyncio.__file__)
    last = None
    while traceback is not None:
        if os.path.dirname(traceback.tb_frame.f_code.co_filename) != asyncio_folder:
            last = traceback
        traceback = traceback.tb_next
    if last is None:
        return ""
    code = last.tb_frame.f_code
    return f" ({display_path(code.co_filename)}:{last.tb_lineno}, in {code.co_name})"


def _runner() -> Any:
    """asyncio's ``Runner`` (Python 3.11+: Ctrl-C cancels the main task, as asyncio.run
    does), else one of the same shape that runs as Python 3.10's ``asyncio.run``."""
    if sys.version_info >= (3, 11):
        return asyncio.Runner()
    return _Runner310()


class _Runner310:
    """``asyncio.run``'s loop on Python 3.10, kept open between `run` calls (`run_rollouts`)."""

    def __enter__(self) -> _Runner310:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        return self

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.loop

    def __exit__(self, *exc_info: Any) -> None:
        try:
            wind_down(self.loop)  # (`run_rollouts` has, unless it failed on the way)
        finally:
            asyncio.set_event_loop(None)
            self.loop.close()
