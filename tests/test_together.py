"""`all_or_none`: the first failure stops its siblings, and each sibling's own ending is
retrieved before that failure leaves (so `asyncio.run` has nothing to log at shutdown)."""

import asyncio
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunedsl.rollout.together import all_or_none


def test_results_come_back_in_order_of_the_work():
    async def after(seconds, value):
        await asyncio.sleep(seconds)
        return value

    assert asyncio.run(all_or_none([after(0.02, "a"), after(0.0, "b"), after(0.01, "c")])) == \
        ["a", "b", "c"]


def test_the_first_failure_cancels_the_rest_and_nothing_is_logged_at_shutdown(caplog):
    """The sibling fails in its own way when cancelled (as a worker whose user code raises on
    the way out does); `asyncio.gather` left it running, and asyncio.run logged its error
    with a traceback under the real one."""
    ended = []

    async def fails():
        raise KeyError("first")

    async def fails_when_cancelled():
        try:
            await asyncio.sleep(10)
        finally:
            ended.append("sibling")
            raise ValueError("on the way out")

    async def main():
        await all_or_none([fails_when_cancelled(), fails()])

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(KeyError, match="first"):
            asyncio.run(main())
    assert ended == ["sibling"]
    assert caplog.records == []


def test_gather_alone_would_have_logged_the_sibling(caplog):
    """The reason the helper exists, kept true: if asyncio stops logging, it can go."""
    async def fails():
        raise KeyError("first")

    async def fails_when_cancelled():
        try:
            await asyncio.sleep(10)
        finally:
            raise ValueError("on the way out")

    async def main():
        await asyncio.gather(fails_when_cancelled(), fails())

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(KeyError):
            asyncio.run(main())
    assert [record.getMessage().splitlines()[0] for record in caplog.records] == [
        "unhandled exception during asyncio.run() shutdown"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=8))
def test_every_task_has_ended_when_all_or_none_returns_or_raises(failing):
    started: list[asyncio.Task] = []

    async def one(index, fail):
        started.append(asyncio.current_task())
        await asyncio.sleep(0.001 * index)
        if fail:
            raise RuntimeError(index)
        return index

    async def main():
        try:
            return await all_or_none(one(i, fail) for i, fail in enumerate(failing))
        finally:
            assert all(task.done() for task in started)

    if any(failing):
        with pytest.raises(RuntimeError) as raised:
            asyncio.run(main())
        assert raised.value.args == (failing.index(True),)
    else:
        assert asyncio.run(main()) == list(range(len(failing)))
