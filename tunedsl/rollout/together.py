"""Coroutines run side by side that end together: the first to fail stops the others."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")


async def all_or_none(work: Iterable[Awaitable[T]]) -> list[T]:
    """Each result of ``work`` run at once, in order; the first exception cancels the rest
    and is raised once they have ended.

    `asyncio.gather` raises the first exception and leaves its siblings running: they fail
    later, while `asyncio.run` shuts down, and Python 3.10 logs each of those failures with a
    traceback ("unhandled exception during asyncio.run() shutdown") under the one-line error
    the user should have seen. Here every sibling has ended, its outcome retrieved, before
    the first exception leaves.

    That wait is bounded by what the siblings await, not here: each of tunedsl's (eval's
    and prompt tuning's workers, the local trainer's rollouts) runs the user's code only
    through `within` (``tunedsl.rollout.watchdog``), which, cancelled, stops waiting for
    code that catches the cancellation after `ABANDON_SECONDS` and abandons it. A bound
    here as well would abandon tunedsl's own code instead (a worker between two rollouts,
    writing a results line), which cancels promptly.
    """
    tasks = [asyncio.ensure_future(each) for each in work]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
