"""A model a backend made for one rollout, ended with it.

Every backend (and eval, and check's rollout) hands each rollout a model of its own and
reads what that model recorded once the rollout is over. A workflow that keeps the model
for later rollouts (in a module-level cache, or an agent built once) would go on
recording into a rollout that was already scored: eval shows its calls under the wrong
rollout, the local backend trains on none of them, and Trinity's repeated rollouts lose
them with a history nobody reads. So a call through a model whose rollout ended fails,
saying why, and so does one from another rollout while its own still runs (rollouts run
side by side); the rollout that made the call fails with that line.

A call from a worker thread the rollout handed work to (``asyncio.to_thread``,
``loop.run_in_executor(None, ...)``) is that rollout's: the event loop's default executor
is `RolloutThreads`, which marks each thread with the model of the rollout that submitted
its work while the work runs. So is a call from a task the rollout awaits (through
``asyncio.gather``, ``wait_for``, ``shield``, a ``TaskGroup``, or directly): `_awaited_by`
finds the rollout at the end of the chain of tasks awaiting the caller. A task no rollout
awaits (a batching worker serving every rollout's own model) is held to none.
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: How long a call through an ended model waits before it fails.
ENDED_PAUSE = 0.1


class RolloutEnded(RuntimeError):
    """A call through the model of a rollout that has ended, or of another rollout."""


def ended_message(name: str, own: bool = False) -> str:
    """What a call through the model ``name`` says in a rollout it does not belong to (or,
    ``own``, from a task its own rollout started and left running past its end)."""
    if own:
        return (f"the model {name!r} belongs to a rollout that has ended: a task the rollout "
                f"started (asyncio.create_task) called it after the workflow returned; await "
                f"such tasks before returning")
    return (f"the model {name!r} belongs to another rollout: it was kept from an earlier "
            f"one (in a module-level cache, or an agent built once); use the model passed "
            f"to this rollout's workflow, e.g. build the agent inside it")


#: The trained model of the rollout running in this context, and the asyncio task it runs
#: in (`begin_rollout`).
_ROLLOUT_MODEL: contextvars.ContextVar[Any] = contextvars.ContextVar("tunedsl_rollout_model",
                                                                     default=None)


def begin_rollout(model: EndsWithRollout) -> contextvars.Token[Any]:
    """Mark ``model`` as the trained model of the rollout that runs in this asyncio task: a
    call made in that task through another rollout's model, kept while that one still runs
    (rollouts run side by side), is refused. Undo with `leave_rollout`.

    Only the rollout's own task is held to it: a task it starts inherits the mark, and may
    be a worker serving other rollouts' models (a batching queue), whose calls are theirs."""
    model._owned = True
    task = _current_task()
    if task is not None:
        run_threads_as_rollouts(task.get_loop())
        _ROLLOUT_TASKS[task] = model
    return _ROLLOUT_MODEL.set((model, task))


#: The trained model of each rollout by the asyncio task it runs in (`begin_rollout`).
_ROLLOUT_TASKS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

#: How many tasks up a chain of awaiting tasks `_awaited_by` looks.
_DEEPEST_AWAIT = 32


def _awaited_by(task: Any) -> list[Any]:
    """The trained models of the rollouts whose tasks await ``task``, through any chain of
    tasks each awaiting the next (none: a worker task no rollout awaits). A task several
    await (a result cached as a task and shared) is each one's.
    asyncio records who awaits what only in its tasks' private state (3.14 made it public):
    the future a task waits on (``_fut_waiter``) and the callbacks a task completes when it
    is done (``gather``'s, ``shield``'s, ``wait_for``'s, a ``TaskGroup``'s); where these
    differ, no chain is found, and the call is let through as before."""
    import asyncio

    loop = task.get_loop()
    try:  # (a rollout's own task is none of all_tasks(): `watchdog.within` says why)
        waiting = {other: waiter for other in [*asyncio.all_tasks(loop), *_ROLLOUT_TASKS]
                   if other.get_loop() is loop
                   and (waiter := getattr(other, "_fut_waiter", None)) is not None}
    except RuntimeError:  # (a set changed while it was read, in another thread)
        return []
    found: list[Any] = []  # (models by identity: a model need not hash)
    seen, tasks = {task}, [task]
    for _ in range(_DEEPEST_AWAIT):
        awaiting = []
        for awaited in tasks:
            completes = _completed_by(awaited)
            awaiting += [other for other, waiter in waiting.items() if other not in seen
                         and (waiter is awaited or any(waiter is item for item in completes))]
        seen.update(awaiting)
        found += [_ROLLOUT_TASKS[other] for other in awaiting if other in _ROLLOUT_TASKS]
        tasks = [other for other in awaiting if other not in _ROLLOUT_TASKS]
        if not tasks:
            break
    return found


def _completed_by(task: Any) -> list[Any]:
    """The futures the end of ``task`` completes: what its done-callbacks hold (a partial's
    arguments, a bound method's object and its attributes, a closure's cells), and through
    each such future that is no task, what its own callbacks hold in turn (``gather``
    inside ``wait_for``: the task ends the gathering future, which ends the waiter)."""
    import asyncio
    import functools

    found: list[Any] = []
    futures = [task]
    for _ in range(_DEEPEST_AWAIT):
        held: list[Any] = []
        for future in futures:
            for callback, *_ in getattr(future, "_callbacks", None) or ():
                if isinstance(callback, functools.partial):
                    held += [*callback.args, *callback.keywords.values()]
                    callback = callback.func
                owner = getattr(callback, "__self__", None)
                if owner is not None:
                    held += [owner, *getattr(owner, "__dict__", {}).values()]
                for cell in getattr(callback, "__closure__", None) or ():
                    try:
                        held.append(cell.cell_contents)
                    except ValueError:  # a cell not yet filled
                        pass
        futures = [item for item in held if isinstance(item, asyncio.Future)
                   and not isinstance(item, asyncio.Task)
                   and all(item is not seen for seen in found)]
        found += held
        if not futures:
            break
    return found


def _current_task() -> Any:
    import asyncio

    try:
        return asyncio.current_task()
    except RuntimeError:  # no event loop runs here
        return None


#: The model of the rollout each worker thread runs work for now, by thread (`RolloutThreads`).
_THREAD_ROLLOUT: dict[int, Any] = {}

#: The `RolloutThreads` each event loop was given as its default executor.
_LOOPS_WITH_ROLLOUT_THREADS: weakref.WeakKeyDictionary[Any, RolloutThreads] = (
    weakref.WeakKeyDictionary())


class RolloutThreads(ThreadPoolExecutor):
    """The default executor of an event loop that runs rollouts: work submitted from a
    rollout's own task (``asyncio.to_thread``, ``loop.run_in_executor(None, ...)``) runs
    with its thread marked as that rollout's, so that a kept model called there for
    another rollout is refused as it is in the task itself. A thread carries no context of
    its own when its work starts (``run_in_executor`` does not copy it), so the mark is the
    thread's."""

    def __init__(self) -> None:
        super().__init__(thread_name_prefix="asyncio")  # as asyncio's own default executor

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        running = _ROLLOUT_MODEL.get()
        if running is None or running[1] is None or running[1] is not _current_task():
            return super().submit(fn, *args, **kwargs)
        return super().submit(_run_for_rollout, running[0], fn, args, kwargs)


def _run_for_rollout(model: Any, fn: Any, args: Any, kwargs: Any) -> Any:
    thread = threading.get_ident()
    _THREAD_ROLLOUT[thread] = model
    try:
        return fn(*args, **kwargs)
    finally:
        del _THREAD_ROLLOUT[thread]


def run_threads_as_rollouts(loop: Any) -> None:
    """Make ``loop``'s default executor a `RolloutThreads` (once). One made earlier (a host
    name looked up) is let go: its threads end as their work does."""
    if loop not in _LOOPS_WITH_ROLLOUT_THREADS:
        threads = RolloutThreads()
        loop.set_default_executor(threads)
        _LOOPS_WITH_ROLLOUT_THREADS[loop] = threads


def rollout_threads_of(loop: Any) -> RolloutThreads | None:
    """The `RolloutThreads` ``loop`` was given as its default executor, if any."""
    return _LOOPS_WITH_ROLLOUT_THREADS.get(loop)


def leave_rollout(token: contextvars.Token[Any]) -> None:
    """Undo `begin_rollout` (in the context it was called in)."""
    _ROLLOUT_MODEL.reset(token)


class EndsWithRollout:
    """Mixed into tunedsl's models: `end_rollout` ends the model with the rollout it was
    made for, and `refuse_if_ended` guards each of its calls."""

    name: str
    _ended = False
    _owned = False  # made for one rollout (`begin_rollout`)

    def end_rollout(self) -> None:
        """End this model with its rollout (called by whoever made it for that rollout):
        any later call fails with `RolloutEnded`."""
        self._ended = True

    def _refused(self) -> bool:
        """Whether a call now is refused: the rollout ended, or it is made in another
        running rollout's own task (`begin_rollout`), a task it awaits (`_awaited_by`) or
        its worker thread (`RolloutThreads`)."""
        if self._ended:
            return True
        thread_rollout = _THREAD_ROLLOUT.get(threading.get_ident())
        if self._owned and thread_rollout is not None and thread_rollout is not self:
            return True
        if not self._owned:
            return False
        running, task = _ROLLOUT_MODEL.get(), _current_task()
        if running is not None and running[1] is not None and running[1] is task:
            return running[0] is not self
        if task is None or task in _ROLLOUT_TASKS:
            return False
        awaiting = _awaited_by(task)  # a task some rollout awaits is that rollout's
        return bool(awaiting) and all(model is not self for model in awaiting)

    def refuse_if_ended(self) -> None:
        """Raise `RolloutEnded` when this model's rollout has ended, or when it is called
        from another rollout (one running in a context `begin_rollout` marked for another
        model).

        Raises:
            RolloutEnded: it has.
        """
        if self._refused():
            running = _ROLLOUT_MODEL.get()
            raise RolloutEnded(ended_message(self.name, own=self._ended and running is not None
                                             and running[0] is self))

    async def refuse_call_if_ended(self) -> None:
        """`refuse_if_ended`, for a call: it fails after a pause (`ENDED_PAUSE`), so that a
        rollout abandoned past its deadline that retries under a bare ``except:`` gives the
        event loop back (else the command could not end).

        Raises:
            RolloutEnded: this model's rollout has ended.
        """
        if self._refused():
            import asyncio

            await asyncio.sleep(ENDED_PAUSE)
            self.refuse_if_ended()


class RolloutsClient:
    """A client a model hands out as its ``openai_client`` without copying it (Trinity's
    client, which records the calls itself), refused once the model's rollout ended: each
    use starts with an attribute of it (``client.chat``), and that is where it is refused.
    Everything else is the client's."""

    def __init__(self, client: Any, model: EndsWithRollout) -> None:
        object.__setattr__(self, "_client", client)
        object.__setattr__(self, "_model", model)

    def __getattr__(self, name: str) -> Any:
        self._model.refuse_if_ended()
        return getattr(self._client, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._client, name, value)

    def __repr__(self) -> str:
        return repr(self._client)

