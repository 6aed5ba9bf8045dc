"""Ctrl-C and SIGTERM, for every layer: SIGTERM (and SIGHUP, a terminal that closed) ends
a command or a run as Ctrl-C does (what it saves on Ctrl-C, it saves); blocks that hold
them (a checkpoint being saved), defer them (a step's update, a heavy library's import) or
cancel asyncio work on them; and a command's end that a second Ctrl-C cannot fill with a
traceback."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a scheduler or a container stopping the job) ends a command as
    Ctrl-C does: a run saves its checkpoint and says how to resume, an eval keeps every
    finished rollout. The handler before is restored after (the tests call `main` in their
    own process), so ``tunedsl.run`` in a user's script does the same as the command."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    installed_in = os.getpid()

    def interrupt(signum: int, frame: Any) -> None:
        if os.getpid() != installed_in:  # a process the user's code forked: no command of
            _as_if_never_set(signum)  # its own to end; terminate() ends it, as it would have
        if _CANCELLERS:  # asyncio work that stops cleanly when cancelled (`cancelling`)
            _CANCELLERS[-1](signum, frame)
            return
        if not _interrupts(signal.getsignal(signal.SIGINT)):
            # Ctrl-C is off (a background job of a script starts so, and schedulers,
            # `timeout` and supervisors send SIGTERM to such jobs), or a handler of the
            # user's own takes it, which may not stop anything: stop as Ctrl-C would.
            raise KeyboardInterrupt
        # Through SIGINT's own handler: asyncio.run's cancels its task cleanly, where an
        # exception raised here could land inside any task.
        signal.raise_signal(signal.SIGINT)

    def hang_up(signum: int, frame: Any) -> None:
        if os.getpid() != installed_in:
            _as_if_never_set(signum)
        # The terminal closed (an SSH session dropped): what is printed from now on has
        # nowhere to go, and a write to it fails (EIO), which must not cut the save short.
        sys.stdout, sys.stderr = _Unfailing(sys.stdout), _Unfailing(sys.stderr)
        interrupt(signum, frame)

    interrupt.tunedsl_handler = hang_up.tunedsl_handler = True  # type: ignore[attr-defined]
    _default_in_forked_children()
    before = {signal.SIGTERM: signal.signal(signal.SIGTERM, interrupt)}
    if hasattr(signal, "SIGHUP"):  # POSIX
        before[signal.SIGHUP] = signal.signal(signal.SIGHUP, hang_up)
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


#: The signals tunedsl's handlers take, which a forked process starts without.
_TAKEN = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
_FORK_HOOKED: list[bool] = []


def _default_in_forked_children() -> None:
    """A process the user's code forks (``multiprocessing``'s workers, a sandbox) starts with
    SIGTERM and SIGHUP at their default action, as without tunedsl: inherited, its handler
    turned ``terminate()`` into an interrupt of a child with no command to end. The signals
    are blocked across the fork, so one sent to the new process before its handlers are
    reset waits for the reset instead of being lost (Python clears what it caught then)."""
    if _FORK_HOOKED or not hasattr(os, "register_at_fork") or \
            not hasattr(signal, "pthread_sigmask"):
        return
    _FORK_HOOKED.append(True)

    def block() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, _TAKEN)

    def unblock() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _TAKEN)

    def in_child() -> None:
        for number in _TAKEN:
            if getattr(signal.getsignal(number), "tunedsl_handler", False):
                try:
                    signal.signal(number, signal.SIG_DFL)
                except ValueError:  # (forked from a thread that cannot set handlers)
                    pass
        unblock()

    os.register_at_fork(before=block, after_in_parent=unblock, after_in_child=in_child)


def _as_if_never_set(signum: int) -> None:
    """In a process the user's code forked that still has tunedsl's handlers (one forked
    from a thread, where `_default_in_forked_children` cannot reset them): take the
    signal's default action, as the process would have without them (``terminate()`` ends
    it)."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


class _Unfailing:
    """A text stream whose writes never fail: those its stream refuses (a terminal that
    hung up) are dropped. (The rollouts' output routing keeps it in place when the last
    rollout puts its streams back: ``drops_failed_writes``.)"""

    drops_failed_writes = True

    def __init__(self, stream: Any) -> None:
        self.wrapped = stream

    def write(self, text: str) -> int:
        try:
            return self.wrapped.write(text)
        except (OSError, ValueError):  # gone, or closed
            return len(text)

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":  # (not set yet, or gone at shutdown: never a recursion)
            raise AttributeError(name)
        return getattr(self.wrapped, name)


def _interrupts(handler: Any) -> bool:
    """Whether a SIGINT handler stops the program as Ctrl-C does: Python's own (it raises
    KeyboardInterrupt) or asyncio.run's (it cancels the main task, then raises it)."""
    if handler is signal.default_int_handler:
        return True
    method = getattr(handler, "func", handler)  # asyncio's is a partial of a bound method
    return getattr(method, "__qualname__", "") == "Runner._on_sigint"


@contextlib.contextmanager
def interrupts_held(note: str) -> Iterator[None]:
    """Ctrl-C and SIGTERM are held while the work inside runs (the checkpoint an interrupt
    saves: a second Ctrl-C, pressed because the stop takes a moment, would cut it and lose
    every step since the last one); the first one held prints ``note``. The handlers
    before are restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    said = False

    def hold(signum: int, frame: Any) -> None:
        nonlocal said
        if not said:
            print(note, file=sys.stderr, flush=True)
            said = True

    before = {number: signal.signal(number, hold) for number in (signal.SIGINT,
                                                                 signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)


def quiet_shutdown(code: int) -> int:
    """After an interrupted command (exit 130), a Ctrl-C pressed again while Python shuts
    down would print a traceback from its exit handlers under the resume line: ignored."""
    if code == 130 and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return code


def _ours_to_take(handler: Any) -> bool:
    """Whether Ctrl-C's handler may be replaced for a block: Python's own (Ctrl-C on), or
    an outer block's; not one of the user's, nor Ctrl-C ignored."""
    return handler is signal.default_int_handler or handler in _CANCELLERS


#: Handlers of the `cancelling` and `deferred` blocks running now, innermost last.
_CANCELLERS: list[Callable[[int, Any], None]] = []


@contextlib.contextmanager
def _taking_interrupts(on_signal: Callable[[int, Any], None]) -> Iterator[None]:
    """``on_signal`` takes Ctrl-C (when Python's own handler or an outer block's has it;
    not the user's, nor Ctrl-C ignored) and SIGTERM (`terminate_as_interrupt` hands it to
    the innermost block) while the block runs."""
    before = signal.getsignal(signal.SIGINT)
    takes_sigint = _ours_to_take(before)
    if takes_sigint:
        signal.signal(signal.SIGINT, on_signal)
    _CANCELLERS.append(on_signal)
    try:
        yield
    finally:
        _CANCELLERS.pop()
        if takes_sigint:
            signal.signal(signal.SIGINT, before)


@contextlib.contextmanager
def cancelling(cancel: Callable[[], None]) -> Iterator[None]:
    """Ctrl-C and SIGTERM call ``cancel`` while the block runs (cancel the asyncio work
    it waits for, as ``asyncio.run`` does on Ctrl-C), and the block then ends in
    KeyboardInterrupt: raised at whatever line was running, the interrupt could land
    between making a step's rollouts and starting them, leaving some never awaited. A
    second one stops at once."""
    import asyncio

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    interrupted = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal interrupted
        if interrupted:
            raise KeyboardInterrupt
        interrupted = True
        cancel()

    try:
        with _taking_interrupts(on_signal):
            yield
    except asyncio.CancelledError:
        if not interrupted:
            raise
        raise KeyboardInterrupt from None
    if interrupted:  # the work ended before the cancel reached it
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait for the block to end, then stop it (KeyboardInterrupt): a
    step's weight update, its records and its checkpoint happen whole or not at all (cut
    inside the optimizer's step, the checkpoint an interrupt saves held half-updated
    weights, or an optimizer state a resume could not read). A `cancelling` block inside
    (the step's rollouts) still stops at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    with _taking_interrupts(lambda signum, frame: pending.append(signum)):
        yield
    if pending:
        raise KeyboardInterrupt


def import_whole(*names: str) -> None:
    """Import the heavy libraries ``names`` (those installed) with Ctrl-C and SIGTERM held
    until they are in, then stop (KeyboardInterrupt) if one came. An interrupt inside a C
    extension's initialisation (numpy's, torch's) leaves a half-imported module, or turns
    into an ImportError that a library's optional-import probe swallows: the command then
    went on as if never interrupted, or failed later on a module with no attributes."""
    with deferred():
        for name in names:
            with contextlib.suppress(ModuleNotFoundError, ValueError):
                if importlib.util.find_spec(name.partition(".")[0]) is None:
                    continue
            importlib.import_module(name)


def ignore_interrupt_reports(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """``sys.unraisablehook`` that says nothing of a KeyboardInterrupt (a Ctrl-C landing in
    an import lock's callback or a finaliser, which Python reports as "Exception ignored
    in ..." with a traceback), and hands anything else to ``hook``."""
    def report(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            hook(unraisable)
    return report
