"""Interrupts (`tunedsl.interrupts`): what a second Ctrl-C may and may not cut."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tunedsl.interrupts import interrupts_held

from .cli_support import REPO


def test_ctrl_c_and_sigterm_are_held_while_an_interrupt_saves(capsys):
    """A second Ctrl-C during the checkpoint an interrupt saves cut the save, left a
    .partial folder and lost every step since the last checkpoint: held now, said once,
    and the handlers before are back afterwards."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    finished = False
    with interrupts_held("saving step 63 before stopping; Ctrl-C again is held until it is "
                         "saved"):
        for number in (signal.SIGINT, signal.SIGINT, signal.SIGTERM):
            os.kill(os.getpid(), number)
        finished = True
    assert finished
    assert capsys.readouterr().err == ("saving step 63 before stopping; Ctrl-C again is held "
                                       "until it is saved\n")
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_ctrl_c_after_an_interrupted_command_ends_it_without_a_traceback():
    """Once a command exits 130, Python's shutdown runs exit handlers (torch's among them);
    a Ctrl-C pressed again then printed their traceback under the resume line."""
    done = subprocess.run(
        [sys.executable, "-c",
         "import os, signal\n"
         "from tunedsl.interrupts import quiet_shutdown\n"
         "quiet_shutdown(130)\n"
         "os.kill(os.getpid(), signal.SIGINT)\n"
         "print('shut down quietly')\n"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (done.returncode, done.stdout, done.stderr) == (0, "shut down quietly\n", "")


def test_an_interrupt_cancels_the_rollouts_it_waits_for_then_stops():
    """Ctrl-C or SIGTERM while a step's rollouts run cancels them as asyncio.run does, and
    only then raises KeyboardInterrupt: raised at whatever line ran, it could land between
    making the rollouts and starting them, and Python warned of each never awaited."""
    import asyncio
    import warnings

    import pytest

    from tunedsl.interrupts import cancelling, terminate_as_interrupt

    loop = asyncio.new_event_loop()
    ended: list[str] = []

    async def rollout() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    async def step() -> list:
        loop.call_later(0.2, os.kill, os.getpid(), signal.SIGTERM)
        return await asyncio.gather(*(rollout() for _ in range(3)))

    task = loop.create_task(step())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine never awaited would fail the test
        with pytest.raises(KeyboardInterrupt), terminate_as_interrupt(), \
                cancelling(task.cancel):
            loop.run_until_complete(task)
    loop.close()
    assert ended == ["cancelled"] * 3


def test_an_interrupt_during_a_step_waits_for_it_to_end():
    """Cut inside the optimizer's step, the checkpoint an interrupt saved held half-updated
    weights (or a state a resume could not read): the step ends first, then it stops; a
    `cancelling` block inside it (the rollouts) still stops at once."""
    import asyncio

    import pytest

    from tunedsl.interrupts import cancelling, deferred, terminate_as_interrupt

    done = []
    with pytest.raises(KeyboardInterrupt), terminate_as_interrupt(), deferred():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        done.append("update")
        done.append("records")
    assert done == ["update", "records"]

    loop = asyncio.new_event_loop()
    task = loop.create_task(asyncio.sleep(30))
    loop.call_later(0.1, os.kill, os.getpid(), signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), deferred(), cancelling(task.cancel):
        loop.run_until_complete(task)
    loop.close()
    assert task.cancelled()


def test_ctrl_c_during_a_heavy_import_lets_it_finish_then_stops(tmp_path, monkeypatch):
    """A Ctrl-C inside a C extension's initialisation (numpy's, torch's) left a
    half-imported module, or became an ImportError a library's optional-import probe
    swallowed, and the run went on to the end (sweep 19 S1): `import_whole` lets the import
    finish, then stops."""
    import pytest

    from tunedsl.interrupts import import_whole

    (tmp_path / "slow_library.py").write_text(
        "import os, signal\n"
        "os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of the import\n"
        "initialised = True\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_library", raising=False)
    with pytest.raises(KeyboardInterrupt):
        import_whole("slow_library", "a_library_not_installed")
    assert sys.modules["slow_library"].initialised


def test_a_second_ctrl_c_while_the_first_is_answered_is_said_once_without_a_traceback():
    """A terminal under ``timeout`` sends Ctrl-C twice: the second landed as the command's
    ``with`` block closed, after "Error: interrupted", and printed a traceback with exit -2
    (sweep 19 T2). ``main`` stands in for the command: it says the interrupt, then the
    second one arrives."""
    script = ("import sys, tunedsl.cli as cli\n"
              "def main():\n"
              "    cli._INTERRUPT_SAID.append(True)\n"
              "    print('Error: interrupted', file=sys.stderr)\n"
              "    raise KeyboardInterrupt  # the second Ctrl-C\n"
              "cli.main = main\n"
              "sys.exit(cli.entry())\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (done.returncode, done.stderr) == (130, "Error: interrupted\n")
    early = script.replace("    cli._INTERRUPT_SAID.append(True)\n", "").replace(
        "    print('Error: interrupted', file=sys.stderr)\n", "")  # before any command ran
    done = subprocess.run([sys.executable, "-c", early], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (done.returncode, done.stderr) == (130, "Error: interrupted\n")


HUNG_UP_DURING_A_ROLLOUT = """
import io, os, signal, sys
from tunedsl.interrupts import terminate_as_interrupt
from tunedsl.rollout.output import captured

class HungUp(io.TextIOBase):  # a terminal that closed: every write fails
    def write(self, text):
        raise OSError(5, "Input/output error")
    def writable(self):
        return True

sys.stdout = sys.stderr = HungUp()
with terminate_as_interrupt():
    try:
        with captured():
            os.kill(os.getpid(), signal.SIGHUP)  # the terminal closes while a rollout runs
            for _ in range(10**6):  # (the handler runs here)
                pass
    except KeyboardInterrupt:
        pass
    print("saving step 3")  # what the interrupted run says as it saves: dropped, no error
open(os.environ["DONE"], "w").write(type(sys.stdout).__name__)
"""


def test_a_terminal_that_hangs_up_during_a_rollout_stays_unfailing_after_it(tmp_path):
    """SIGHUP wraps the streams so that writes to the closed terminal are dropped; the last
    rollout's end then put back the streams routing began with, whose writes fail (EIO),
    and the run saving its step ended in an error, exit 1, instead of 130 (the suite's
    closing-terminal test, under load)."""
    done = tmp_path / "done"
    ran = subprocess.run([sys.executable, "-c", HUNG_UP_DURING_A_ROLLOUT], cwd=REPO,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO), "DONE": str(done)})
    assert ran.returncode == 0, ran.stderr
    assert done.read_text() == "_Unfailing"


FORKED_AND_TERMINATED = """
import multiprocessing, sys, time
from tunedsl.interrupts import terminate_as_interrupt

def work(started):
    started.set()
    time.sleep(60)

with terminate_as_interrupt():
    context = multiprocessing.get_context("fork")
    for wait in (True, False):  # terminated once running, and at once (as a Pool's exit)
        started = context.Event()
        child = context.Process(target=work, args=(started,))
        child.start()
        if wait:
            started.wait(10)
        child.terminate()  # SIGTERM, as a Pool's or a sandbox's terminate() sends it
        child.join(10)
        print(child.exitcode)
        if child.exitcode is None:
            child.kill()
"""


def test_a_process_forked_under_tunedsl_ends_on_terminate():
    """A workflow's multiprocessing worker (a Pool, a sandbox) inherited tunedsl's SIGTERM
    handler: terminate() made it an interrupt of a child with no command to end, it went
    on, and the eval waiting for it hung (sweep 32 B-01); reset as the child started, a
    signal that came before the reset was lost, and a Pool's worker hung now and then
    (sweep 33 B-02)."""
    ran = subprocess.run([sys.executable, "-c", FORKED_AND_TERMINATED], cwd=REPO,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (ran.returncode, ran.stdout) == (0, f"{-signal.SIGTERM}\n" * 2), ran.stderr
