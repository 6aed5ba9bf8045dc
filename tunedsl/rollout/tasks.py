"""Tasks a rollout's code starts (``asyncio.gather``, ``create_task``, a ``TaskGroup``): a
``SystemExit`` raised in one (``sys.exit()`` in a tool, argparse refusing an argument) is
re-raised by asyncio out of the event loop, ending the whole command with that exit code and
no word (eval's summary, a run's training, tune-prompt's results lost). Raised in the
rollout's own code it fails that rollout; in a task the rollout started, it is made
`ExitInTask`, which fails the rollout that awaits it, the same way.
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

#: The event loops whose task factory is tunedsl's already.
_LOOPS: weakref.WeakSet[Any] = weakref.WeakSet()


class ExitInTask(Exception):
    """``SystemExit`` raised in a task a rollout's code started: it fails that rollout."""

    def __init__(self, code: Any) -> None:
        super().__init__(f"SystemExit({code!r}) in a task the workflow or judge started "
                         f"(asyncio would have ended the whole command with it)")
        self.code = code


@contextlib.contextmanager
def rollout_code() -> Iterator[None]:
    """Run a rollout's code: tasks it starts on the running loop have a ``SystemExit`` of
    theirs made `ExitInTask`. A loop with a task factory of another's is left as it is."""
    loop = asyncio.get_running_loop()
    if loop not in _LOOPS and loop.get_task_factory() is None:
        loop.set_task_factory(_task)
        _LOOPS.add(loop)
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


def _task(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
    """The loop's task factory: a task made by a rollout's code runs ``coro`` with its
    ``SystemExit`` turned into `ExitInTask`, and is known by its maker (`made_by`); any
    other task is asyncio's own."""
    if not _IN_ROLLOUT.get():
        return asyncio.Task(coro, loop=loop, **options)
    task = asyncio.Task(_exits_contained(coro) if inspect.iscoroutine(coro) else coro,
                        loop=loop, **options)
    maker = asyncio.current_task(loop)
    if maker is not None:
        _MADE_BY[task] = maker
    return task


async def _exits_contained(coro: Any) -> Any:
    try:
        return await coro
    except SystemExit as exc:
        raise ExitInTask(exc.code) from exc
