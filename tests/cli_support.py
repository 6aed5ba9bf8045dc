"""Shared by the tests that read what the command line prints.

``cli`` runs ``tunedsl ARGS`` through the CLI's own ``main`` in the test's process: the same
parser, dispatch, messages and exit codes as ``python -m tunedsl`` (whose ``__main__`` only
raises ``SystemExit(main())``), without a new interpreter paying 5-10 s of imports (torch,
transformers, Trinity) that the test worker has already paid. ``cli_process`` starts that new
interpreter, for what only a process of its own shows: what an import pulls in, Ctrl-C or a
kill, output written by child processes (Ray), the environment it inherits."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def unprivileged() -> list[str]:
    """What to run a command under so that file permissions stop it: nothing, or, for root
    (whom they never stop), ``setpriv`` without the capabilities that let it pass them."""
    import os

    return ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
            "--bounding-set=-dac_override,-dac_read_search"] if os.getuid() == 0 else []


def cli_while_closed(path: Path, mode: int, *args, cwd=REPO,
                     restore: int = 0o755) -> subprocess.CompletedProcess:
    """``python -m tunedsl ARGS`` in a new interpreter from ``cwd`` while ``path`` has
    ``mode``, without the capabilities that let root pass permissions (`unprivileged`);
    ``path`` given ``restore`` afterwards, whatever happened."""
    path.chmod(mode)
    try:
        return subprocess.run([*unprivileged(), sys.executable, "-m", "tunedsl",
                               *map(str, args)], cwd=cwd, capture_output=True, text=True,
                              timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        path.chmod(restore)


def cli(*args, cwd=REPO) -> subprocess.CompletedProcess:
    """``tunedsl ARGS`` run from ``cwd`` in this process: its exit code and what it printed.

    The working directory, ``sys.path`` and the modules imported from outside the repository
    (a test's project in a temporary folder) are as before afterwards, so that the next call
    imports its own ``exp.py`` afresh."""
    from tunedsl.cli import main

    argv = [str(arg) for arg in args]
    stdout, stderr = io.StringIO(), io.StringIO()
    path, modules, here = list(sys.path), set(sys.modules), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(argv)
    finally:
        os.chdir(here)
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            file = getattr(sys.modules[name], "__file__", None) or ""
            if file and not file.startswith((str(REPO), sys.prefix, sys.base_prefix)):
                del sys.modules[name]
    return not_internal(subprocess.CompletedProcess(["tunedsl", *argv], code,
                                                    stdout.getvalue(), stderr.getvalue()))


def not_internal(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """``done``, unless the CLI's last line of defence caught an exception: then the test
    fails with that exception's traceback (every input a test gives must be answered by a
    handler of tunedsl's own)."""
    from tunedsl.cli import INTERNAL_ERROR

    for line in (done.stderr or "").splitlines():
        if line.startswith(f"Error: {INTERNAL_ERROR}: "):
            path = line.rsplit("the traceback is in ", 1)[-1]
            kept = done.stderr
            if Path(path).is_file():  # the bug report file: read into the failure, removed
                kept = Path(path).read_text()
                Path(path).unlink()
            raise AssertionError(f"{' '.join(done.args)} reached the last line of defence:"
                                 f"\n{kept}")
    return done


def _command(args) -> list[str]:
    return [sys.executable, "-m", "tunedsl", *map(str, args)]


def cli_process(*args, cwd=REPO, timeout=300, **options) -> subprocess.CompletedProcess:
    """``python -m tunedsl ARGS`` in a new interpreter, from ``cwd``."""
    return not_internal(subprocess.run(_command(args), cwd=cwd, capture_output=True,
                                       text=True, timeout=timeout, **options))


def cli_started(*args, cwd=REPO, sigint=signal.SIG_DFL, **options) -> subprocess.Popen:
    """``python -m tunedsl ARGS`` started in a new interpreter, from ``cwd``, for a test to
    interrupt: with Ctrl-C's default disposition, as in a terminal (a shell without job
    control starts background jobs, a CI script's, with SIGINT ignored, which children
    inherit: ``sigint=signal.SIG_IGN`` starts it so). ``options`` go to `subprocess.Popen`
    (``stderr=subprocess.PIPE``, say)."""
    return subprocess.Popen(_command(args), cwd=cwd, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
                            **options)


def stopped_when(process: subprocess.Popen, ready: Callable[[], bool],
                 stop: int = signal.SIGINT, timeout: float = 120) -> tuple[str, str]:
    """Send ``stop`` to a started command once ``ready()`` holds (failing when the command
    ends, or ``timeout`` seconds pass, first); its ``(stdout, stderr)``. The process is
    killed on the way out whatever happens."""
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            if process.poll() is not None or time.monotonic() >= deadline:
                process.kill()  # (before reading what it said: a command that never ends
                # would hold communicate() forever, and the test with it)
                raise AssertionError(process.communicate())
            time.sleep(0.05)
        process.send_signal(stop)
        return process.communicate(timeout=120)
    finally:
        process.kill()

