"""The models a command's rollouts talk to, built once and passed whole.

``eval``, model selection and ``tune-prompt`` each reach a policy model (an endpoint or a
local folder) and the experiment's auxiliary models; the entry points build a `Reached`
from what the user gave (options or arguments, checked there) and everything below takes
it as one value, instead of a model factory, auxiliary factories, a close function and
the settings a file keeps, threaded by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

#: A factory for one rollout's `ChatModel` (each rollout records its own calls).
ModelFactory = Callable[[], Any]


@attrs.frozen(kw_only=True)
class Reached:
    """The models of one command, built.

    Attributes:
        model: Makes the policy's `ChatModel` for one rollout.
        auxiliary: Makes each auxiliary model's `ChatModel`, by the experiment's name.
        clients: The HTTP clients to close when the command ends (in the event loop that
            used them: a client does not outlive its loop).
        settings: What a results or candidates file keeps of how the models were reached
            (model name, redacted base URL, checkpoint, ``aux`` items, a candidate's own
            sampling); a resume with other values is refused.
    """

    model: ModelFactory
    auxiliary: Mapping[str, ModelFactory] = attrs.field(factory=dict)
    clients: Sequence[Any] = ()
    settings: Mapping[str, Any] = attrs.field(factory=dict)

    async def close(self) -> None:
        """Close every client (awaited at the end of the command's event loop)."""
        await asyncio.gather(*(client.close() for client in self.clients))


#: Makes one auxiliary model's ``(client, factory)``: called once per evaluation, since a
#: client does not outlive the event loop that used it.
AuxiliaryMaker = Callable[[], tuple[Any, ModelFactory]]


@attrs.frozen(kw_only=True)
class AuxiliaryPlan:
    """The experiment's auxiliary models as a command reaches them, checked but not made.

    Attributes:
        makers: Each model's `AuxiliaryMaker`, by the experiment's name (those it serves
            from an endpoint, and those the user pointed elsewhere).
        kept: What results files keep of the endpoints the user gave, as ``NAME=URL,MODEL``
            items (any secret in a URL masked), sorted.
    """

    makers: Mapping[str, AuxiliaryMaker] = attrs.field(factory=dict)
    kept: Sequence[str] = ()

    def made(self) -> tuple[list[Any], dict[str, ModelFactory]]:
        """Every model's endpoint made now: the HTTP clients to close at the end, and the
        model factories by name."""
        helpers = {name: make() for name, make in self.makers.items()}
        return ([client for client, _ in helpers.values()],
                {name: factory for name, (_, factory) in helpers.items()})
