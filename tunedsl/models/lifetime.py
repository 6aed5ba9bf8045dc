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
its work while the work runs.
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
        _run_threads_as_rollouts(task.get_loop())
    return _ROLLOUT_MODEL.set((model, task))


def _current_task() -> Any:
    import asyncio

    try:
        return asyncio.current_task()
    except RuntimeError:  # no event loop runs here
        return None


#: The model of the rollout each worker thread runs work for now, by thread (`RolloutThreads`).
_THREAD_ROLLOUT: dict[int, Any] = {}

#: The event loops whose default executor is a `RolloutThreads` already.
_LOOPS_WITH_ROLLOUT_THREADS: weakref.WeakSet[Any] = weakref.WeakSet()


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


def _run_threads_as_rollouts(loop: Any) -> None:
    """Make ``loop``'s default executor a `RolloutThreads` (once). One made earlier (a host
    name looked up) is let go: its threads end as their work does."""
    if loop not in _LOOPS_WITH_ROLLOUT_THREADS:
        loop.set_default_executor(RolloutThreads())
        _LOOPS_WITH_ROLLOUT_THREADS.add(loop)


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
        running rollout's own task (`begin_rollout`) or worker thread (`RolloutThreads`)."""
        if self._ended:
            return True
        thread_rollout = _THREAD_ROLLOUT.get(threading.get_ident())
        if self._owned and thread_rollout is not None and thread_rollout is not self:
            return True
        running = _ROLLOUT_MODEL.get()
        return self._owned and running is not None and running[0] is not self and \
            running[1] is not None and running[1] is _current_task()

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

