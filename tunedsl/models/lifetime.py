"""A model a backend made for one rollout, ended with it.

Every backend (and eval, and check's rollout) hands each rollout a model of its own and
reads what that model recorded once the rollout is over. A workflow that keeps the model
for later rollouts (in a module-level cache, or an agent built once) would go on
recording into a rollout that was already scored: eval shows its calls under the wrong
rollout, the local backend trains on none of them, and Trinity's repeated rollouts lose
them with a history nobody reads. So a call through a model whose rollout ended fails,
saying why, and so does one from another rollout while its own still runs (rollouts run
side by side); the rollout that made the call fails with that line.
"""

from __future__ import annotations

import contextvars
from typing import Any

#: How long a call through an ended model waits before it fails.
ENDED_PAUSE = 0.1


class RolloutEnded(RuntimeError):
    """A call through the model of a rollout that has ended, or of another rollout."""


def ended_message(name: str) -> str:
    """What a call through the model ``name`` says in a rollout it does not belong to."""
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
    return _ROLLOUT_MODEL.set((model, _current_task()))


def _current_task() -> Any:
    import asyncio

    try:
        return asyncio.current_task()
    except RuntimeError:  # no event loop runs here
        return None


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
        running rollout's own task (`begin_rollout`)."""
        if self._ended:
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
            raise RolloutEnded(ended_message(self.name))

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

