"""The watchdog fails a rollout that blocks its event loop, and only that rollout."""

import asyncio
import threading
import time

import pytest

from tunedsl.rollout.watchdog import RolloutBlocked, Watchdog


def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def race(block):
    """A guarded rollout that blocks for 20 s against a polite one; what each ended with."""
    loop = asyncio.new_event_loop()
    watchdog = Watchdog(loop, grace=0.1, tick=0.05)

    async def blocking():
        with watchdog.guard(0.2):
            await asyncio.sleep(0)
            block(20)
            return "finished"

    async def polite():
        with watchdog.guard(5):
            await asyncio.sleep(0.3)
            return "polite finished"

    async def both():
        return await asyncio.gather(blocking(), polite(), return_exceptions=True)

    started = time.monotonic()
    try:
        with watchdog:
            outcome = loop.run_until_complete(both())
    finally:
        loop.close()
    return outcome, time.monotonic() - started, watchdog.interruptions


@pytest.mark.parametrize("block", [time.sleep, spin], ids=["sleep", "spin"])
def test_a_blocking_rollout_is_interrupted_in_the_main_thread(block):
    (blocked, polite), seconds, interruptions = race(block)
    assert isinstance(blocked, RolloutBlocked)
    assert str(blocked).startswith("held the event loop past rollout_timeout = 0.2s: ")
    assert polite == "polite finished" and interruptions == 1
    assert seconds < 10  # the 20 s block was cut short


async def _gathered(*rollouts):
    return await asyncio.gather(*rollouts, return_exceptions=True)


def test_a_handler_of_the_user_s_own_in_the_watchdog_s_place_is_left_alone():
    """A judge's time limit (``signal.signal(SIGALRM, ...)``, left installed) took the
    signal that interrupts a blocked loop: a later blocked workflow failed with the judge's
    "grader took too long" (sweep 34 W1). The interruption is raised without the signal
    then, and the user's handler is neither called nor replaced."""
    import signal

    called = []

    def graders_limit(signum, frame):
        called.append(signum)
        raise TimeoutError("grader took too long")

    loop = asyncio.new_event_loop()
    watchdog = Watchdog(loop, grace=0.1, tick=0.05)

    async def blocking():
        signal.signal(signal.SIGALRM, graders_limit)  # as a judge before it did
        with watchdog.guard(0.2):
            await asyncio.sleep(0)
            spin(20)
            return "finished"

    try:
        with watchdog:
            outcome = loop.run_until_complete(_gathered(blocking()))
            kept = signal.getsignal(signal.SIGALRM)
    finally:
        loop.close()
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert isinstance(outcome[0], RolloutBlocked) and called == []
    assert kept is graders_limit


def test_a_spinning_rollout_is_interrupted_in_another_thread():
    """Off the main thread no signal can be used; pure-Python code still gets the error."""
    results = []
    thread = threading.Thread(target=lambda: results.append(race(spin)))
    thread.start()
    thread.join(30)
    (blocked, polite), seconds, interruptions = results[0]
    assert isinstance(blocked, RolloutBlocked)
    assert str(blocked).startswith("held the event loop past rollout_timeout: blocking code")
    assert polite == "polite finished" and interruptions == 1


def test_a_rollout_past_its_deadline_that_yields_often_is_not_taken_for_blocking():
    """A rollout that catches each cancellation runs a moment each time it is cancelled
    again (printing "retrying"): the watching thread saw it running past its deadline and
    failed it as blocking the loop (CI, under load). Only a loop held past the grace
    period counts; this one runs 30 ms at a time, past its deadline, for 1.5 s."""
    loop = asyncio.new_event_loop()
    watchdog = Watchdog(loop, grace=0.3, tick=0.02)

    async def busy_but_polite():
        with watchdog.guard(0):
            end = time.monotonic() + 1.5
            while time.monotonic() < end:
                spin(0.03)
                await asyncio.sleep(0.005)
            return "finished"

    try:
        with watchdog:
            outcome = loop.run_until_complete(busy_but_polite())
    finally:
        loop.close()
    assert (outcome, watchdog.interruptions) == ("finished", 0)


def test_the_signal_handler_is_restored():
    import signal

    before = signal.getsignal(signal.SIGALRM)
    loop = asyncio.new_event_loop()
    with Watchdog(loop):
        assert signal.getsignal(signal.SIGALRM) is not before
    loop.close()
    assert signal.getsignal(signal.SIGALRM) is before


class PausedPeek(dict):
    """A watchdog's deadlines whose first read by the watching thread returns only once the
    rollout has left its guard: the watching thread has seen the rollout running past its
    deadline, and the rollout finishes before the thread acts on it."""

    def __init__(self, watcher_name, rollout_done):
        super().__init__()
        self.watcher_name, self.rollout_done = watcher_name, rollout_done
        self.peeked = threading.Event()

    def get(self, key, default=None):
        value = super().get(key, default)
        if threading.current_thread().name == self.watcher_name and not self.peeked.is_set():
            self.peeked.set()
            assert self.rollout_done.wait(10), "the rollout never left its guard"
        return value


def test_a_look_that_races_the_end_of_its_rollout_raises_nothing_after_it():
    """Off the main thread the error is an asynchronous exception, raised wherever the loop
    thread is when it arrives: the watching thread checks again, under the lock `stop`
    takes, that the rollout is still guarded, so the code after the guard runs on."""
    done = threading.Event()
    outcome = []

    async def rollout(watchdog, deadlines):
        watcher = threading.Thread(target=watchdog.look, name="look")
        with watchdog.guard(0):  # past its deadline as soon as it starts
            watcher.start()
            assert deadlines.peeked.wait(10), "the watching thread never looked"
        done.set()
        watcher.join(10)  # whatever the loop thread runs next: the error would land here
        return "ran on after its guard"

    def loop_thread():
        loop = asyncio.new_event_loop()
        watchdog = Watchdog(loop, grace=0)
        watchdog._deadlines = deadlines = PausedPeek("look", done)
        try:
            outcome.append(loop.run_until_complete(rollout(watchdog, deadlines)))
        except BaseException as exc:  # noqa: BLE001 - what the test reports
            outcome.append(exc)
        finally:
            loop.close()
        outcome.append(watchdog.interruptions)

    thread = threading.Thread(target=loop_thread)
    thread.start()
    thread.join(30)
    assert outcome == ["ran on after its guard", 0]


ABANDONING = r'''
import asyncio
from tunedsl.rollout.watchdog import within

async def endless():
    while True:
        try:
            await asyncio.sleep(1000)
        except BaseException:
            print("caught", flush=True)

async def main():
    try:
        await within(0.2, endless)
    except asyncio.TimeoutError as error:
        print(type(error).__name__, error)
    print("tasks left", len(asyncio.all_tasks()))

asyncio.run(main())
print("ran to the end")
'''


def test_a_rollout_that_never_stops_is_abandoned_and_python_still_exits():
    """``asyncio.run`` ends by cancelling every task and waiting for each: the abandoned
    rollout is not one of them. Nor is it finalized as Python exits, which would run its
    code outside any event loop, where this one would print "caught" without end."""
    import subprocess
    import sys

    from tunedsl.rollout.watchdog import ABANDON_SECONDS, RECANCEL_SECONDS

    done = subprocess.run([sys.executable, "-c", ABANDONING], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    caught = round(ABANDON_SECONDS / RECANCEL_SECONDS)  # cancelled again while waited for
    # The abandoned rollout is still cancelled every RECANCEL_SECONDS while asyncio.run
    # shuts down (its loop runs on for that), so one more "caught" may come after main's end.
    said = [line for line in done.stdout.splitlines() if line != "caught"]
    assert said[-3:] == [
        "TimedOut it caught the cancellation (a bare except: or except BaseException:), so "
        "re-raise asyncio.CancelledError; still running 1s later, it was abandoned",
        "tasks left 1", "ran to the end"]
    assert caught <= done.stdout.count("caught\n") <= caught + 2


def test_a_keyboard_interrupt_raised_in_a_rollout_is_raised_in_its_caller():
    """A rollout runs in a task of its own; asyncio re-raises a KeyboardInterrupt from a
    task's step, out of the event loop past every caller. It is raised in the caller, as
    any exception is (eval's workers turn it into the one-line interruption)."""
    from tunedsl.rollout.watchdog import within

    async def interrupts():
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    async def caller():
        try:
            await within(5, interrupts)
        except KeyboardInterrupt:
            return "raised in the caller"

    assert asyncio.run(caller()) == "raised in the caller"


def test_a_rollout_returns_its_result_and_raises_its_error_as_awaited_directly():
    from tunedsl.rollout.watchdog import within

    class Failed(Exception):
        pass

    async def returns():
        await asyncio.sleep(0)
        return "result"

    async def fails():
        raise Failed("its own")

    async def main():
        assert await within(5, returns) == "result"
        with pytest.raises(Failed, match=r"^its own$"):
            await within(5, fails)
        return "checked"

    assert asyncio.run(main()) == "checked"


def test_a_rollout_held_up_by_another_s_block_gets_that_time_back():
    """A rollout blocking the loop before its first await (a synchronous call that hangs)
    held every other rollout in flight past its deadline: they timed out, "make it faster",
    in its place (sweep 35 B-02). The time another's code held the loop is given back."""
    from tunedsl.rollout.watchdog import loop_watchdog, within

    async def polite():
        await asyncio.sleep(0.3)
        await asyncio.sleep(0.2)  # (its answer comes after the loop is free again)
        return "polite finished"

    async def blocks():
        time.sleep(3)  # before its first await
        return "blocked to the end"

    async def main():
        with loop_watchdog() as watchdog:
            return await asyncio.gather(within(1.0, polite, watchdog),
                                        within(1.0, blocks, watchdog), return_exceptions=True)

    polite_ended, blocked = asyncio.run(main())
    assert polite_ended == "polite finished"
    assert isinstance(blocked, RolloutBlocked)


@pytest.mark.parametrize("caught, said", [
    # retries under a bare except:, then a call cancelled as it ran: said as stopped when
    # that call outlasted the next cancellation (eval's test, on a loaded machine)
    (3, "it caught the cancellation (a bare except: or except BaseException:), so re-raise "
        "asyncio.CancelledError"),
    # a cleanup awaited before re-raising, which the next cancellation ends: it stopped
    (0, ""),
])
def test_a_rollout_that_ran_on_past_its_cancellations_is_said_to_catch_them(caught, said):
    from tunedsl.rollout.watchdog import within

    async def retries_then_calls():
        for _ in range(caught):
            try:
                await asyncio.sleep(1000)
            except BaseException:  # noqa: BLE001 - the user's retry loop
                pass
        try:
            await asyncio.sleep(1000)  # the call the last cancellation ends
        finally:
            await asyncio.sleep(1000)  # a cleanup, ended by the next one

    async def main():
        with pytest.raises(asyncio.TimeoutError) as info:
            await within(0.1, retries_then_calls)
        return str(info.value)

    assert asyncio.run(main()) == said


@pytest.mark.parametrize("block", [time.sleep, spin], ids=["sleep", "spin"])
def test_a_rollout_blocking_inside_an_import_is_interrupted_after_it(tmp_path, monkeypatch,
                                                                       block):
    """Raised inside an import, the interruption left the module half made in sys.modules:
    a slow first import of openai in a rollout broke every later test of the session
    ("module 'aiohttp' has no attribute 'client_exceptions'", sweep 50 B-T1). The import
    is let finish; the blocking after it is still interrupted."""
    import importlib
    import sys

    (tmp_path / "slow_package").mkdir()
    (tmp_path / "slow_package" / "__init__.py").write_text(
        "from . import slow_part\nDONE = slow_part.MADE\n")
    (tmp_path / "slow_package" / "slow_part.py").write_text(
        f"import time\n"
        f"end = time.monotonic() + 0.8\n"
        f"while time.monotonic() < end:\n"
        f"    {'time.sleep(0.01)' if block is time.sleep else 'pass'}\n"
        f"MADE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    loop = asyncio.new_event_loop()
    watchdog = Watchdog(loop, grace=0.1, tick=0.05)

    async def imports_then_blocks():
        with watchdog.guard(0.1):
            await asyncio.sleep(0)
            importlib.import_module("slow_package")
            block(20)

    try:
        with watchdog:
            outcome = loop.run_until_complete(_gathered(imports_then_blocks()))
    finally:
        loop.close()
        sys.modules.pop("slow_package.slow_part", None)
        imported = sys.modules.pop("slow_package", None)
    assert isinstance(outcome[0], RolloutBlocked)
    assert imported is not None and imported.DONE is True


def test_a_rollout_blocking_inside_an_import_for_good_is_interrupted_after_an_allowance(
        tmp_path, monkeypatch):
    """An import that never ends (a module waiting at import for a connection without a
    timeout) was let go on for ever: neither the rollout's time limit nor one Ctrl-C ended
    the command (sweep 51 B-T1). It is interrupted `IMPORT_ALLOWANCE` past the deadline."""
    import importlib
    import sys

    from tunedsl.rollout import watchdog as watchdog_module

    monkeypatch.setattr(watchdog_module, "IMPORT_ALLOWANCE", 0.5)
    (tmp_path / "stuck_module.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    loop = asyncio.new_event_loop()
    watchdog = Watchdog(loop, grace=0.1, tick=0.05)

    async def imports():
        with watchdog.guard(0.1):
            await asyncio.sleep(0)
            importlib.import_module("stuck_module")

    started = time.monotonic()
    try:
        with watchdog:
            outcome = loop.run_until_complete(_gathered(imports()))
    finally:
        loop.close()
        imported = sys.modules.pop("stuck_module", None)
    assert isinstance(outcome[0], RolloutBlocked)
    assert time.monotonic() - started < 20
    assert imported is None  # (the import system drops a module whose code raised)
