"""Tasks a rollout's code starts (``asyncio.gather``, ``create_task``, a ``TaskGroup``): a
``SystemExit`` raised in one (``sys.exit()`` in a tool, argparse refusing an argument) is
re-raised by asyncio out of the event loop, ending the whole command with that exit code and
no word (eval's summary, a run's training, tune-prompt's results lost). Raised in the
rollout's own code it fails that rollout; in a task the rollout started, it is made
`ExitInTask`, which fails the rollout that awaits it, the same way. A task the factory
does not make still lets the exit out of the loop: `tunedsl.rollout.loop` runs the loop on.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import weakref
from collections.abc import Iterator
from typing import Any

#: Whether the code running in this context is a rollout's (`rollout_code`).
_IN_ROLLOUT: contextvars.ContextVar[bool] = contextvars.ContextVar("tunedsl_in_rollout",
                                                                   default=False)


class ExitInTask(Exception):
    """``SystemExit`` raised in a task a rollout's code started: it fails that rollout."""

    def __init__(self, code: Any) -> None:
        super().__init__(f"SystemExit({shown_code(code)}) in a task the workflow or judge "
                         f"started "
                         f"(asyncio would have ended the whole command with it)")
        self.code = code


def shown_code(code: Any) -> str:
    """An exit's code as ``repr`` shows it, or what it is when its ``repr`` raises (a user's
    object: "internal error in tunedsl" before)."""
    try:
        return repr(code)
    except Exception:  # noqa: BLE001 - any error of the user's __repr__
        return f"<a {type(code).__name__} whose repr() fails>"


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
