"""`ScriptedModel`: a `ChatModel` that answers from a script, for tests and preflights."""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import attrs

from ..dsl.chat import ChatResponse, ModelCall
from ..dsl.turns import MarksTurns, TurnMarks
from ..errors import ArgumentError, described
from .lifetime import EndsWithRollout
from .recording import guarded_client
from .server import stop_index, streamed_request

Reply = str | ChatResponse
Script = Iterable[Reply] | Callable[[list[dict[str, Any]]], Reply]


def _check_reply(reply: Any, label: str, kind: type[Exception] = TypeError) -> None:
    """Refuse a reply that is neither text nor a `ChatResponse`: as an `ArgumentError` where
    the script is handed over, and as the TypeError a client raises where the workflow's call
    reads it (the rollout then fails naming it)."""
    if not isinstance(reply, (str, ChatResponse)):
        # an example from the value itself where it has text to give (not None's 'None')
        text = reply.decode(errors="replace") if isinstance(reply, (bytes, bytearray)) \
            else None if reply is None or isinstance(reply, dict) else str(reply)
        example = repr(text) if text is not None else "'4'"
        if isinstance(reply, dict) and isinstance(reply.get("content"), str):  # a message
            example = (f"{reply['content']!r}, or ChatResponse(content="
                       f"{reply['content']!r}, tool_calls=[...])")
        raise kind(f"{label} is {described(reply)}; a reply is text or a ChatResponse (for "
                   f"tool calls), e.g. {example}")



class ScriptedModel(MarksTurns, EndsWithRollout):
    """A `ChatModel` that answers from a script and records every call.

    Args:
        replies: Replies in order (text or `ChatResponse`, e.g. with tool calls): a list,
            or any iterable, read a reply a call (an endless ``itertools.cycle`` too); or a
            function of the messages returning one.
        name: The model's name.
    """

    def __init__(self, replies: Script = (), *, name: str = "scripted") -> None:
        if not callable(replies) and not isinstance(replies, Iterable):
            raise ArgumentError(f"ScriptedModel({replies!r}): give a list of replies (or a "
                                f"function of the messages)")
        if isinstance(replies, (bytes, bytearray)):
            raise ArgumentError(f"ScriptedModel({replies!r}): bytes; give a list of text replies, "
                                f"e.g. ScriptedModel([{replies.decode(errors='replace')!r}])")
        if isinstance(replies, Mapping):  # iterable too: its keys became the replies
            raise ArgumentError(f"ScriptedModel({reprlib.repr(replies)}): a dict is no script (its "
                                f"keys would be the replies); give a list of replies, or a "
                                f"function of the messages, e.g. ScriptedModel(lambda messages: "
                                f"table[messages[-1]['content']])")
        if isinstance(replies, AbstractSet):
            raise ArgumentError(f"ScriptedModel({reprlib.repr(replies)}): a set has no order, so "
                                f"the replies would come in any; give a list")
        if inspect.iscoroutinefunction(replies):
            raise ArgumentError(f"ScriptedModel({getattr(replies, '__name__', replies)}): an "
                                f"async function; give a plain function of the messages "
                                f"(def, not async def) that returns the reply")
        if isinstance(replies, (str, ChatResponse)):
            # A string is a sequence of characters: each call would get one of them.
            raise ArgumentError(f"ScriptedModel({replies!r}): replies is a list of replies (or a "
                                f"function of the messages); write ScriptedModel([{replies!r}])")
        self.name = name
        self.calls: list[ModelCall] = []
        self.turns = TurnMarks(lambda: len(self.calls))
        self._script: Callable[[list[dict[str, Any]]], Reply] | Iterator[Reply]
        self._given: int | None = None
        self._lazy = False
        if callable(replies):
            self._script = replies
        elif isinstance(replies, Sequence):  # every reply checked now
            for number, reply in enumerate(replies, start=1):
                _check_reply(reply, f"ScriptedModel's reply {number}", ArgumentError)
            self._script, self._given = iter(list(replies)), len(replies)
        else:  # an iterator, maybe endless (itertools.cycle): read a reply per call
            self._script, self._given = iter(replies), 0
            self._lazy = True
        self._client: Any = None

    @property
    def reply_function(self) -> Callable[[list[dict[str, Any]]], Reply] | None:
        """The function of the messages it answers with, or None for a list of replies."""
        return self._script if callable(self._script) else None

    @property
    def openai_client(self) -> Any:
        """A real ``openai.AsyncOpenAI`` answering from the same script (served in-process)."""
        if self._client is None:
            from .server import in_process_client

            self._client = guarded_client(in_process_client(self), self.refuse_call_if_ended)
        return self._client

    def _next_reply(self, messages: list[dict[str, Any]]) -> Reply:
        if callable(self._script):
            reply = self._script(messages)
            _check_reply(reply, f"ScriptedModel {self.name!r}: its function's reply")
            return reply
        try:
            reply = next(self._script)
        except StopIteration:
            raise AssertionError(
                f"ScriptedModel {self.name!r} ran out of replies after {self._given} "
                f"call{'s' if self._given != 1 else ''}; "
                f"give it more replies, or a function of the messages"
            ) from None
        if self._lazy:
            self._given = (self._given or 0) + 1
            _check_reply(reply, f"ScriptedModel's reply {self._given}")
        return reply

    async def complete(self, messages: list[dict[str, Any]], **sampling: Any) -> ModelCall:
        """Answer with the next scripted reply (cut before a ``stop`` string, as a server
        would); record the call and return its record."""
        await self.refuse_call_if_ended()
        from ..dsl.chat import messages_problem, sampling_problem, unknown_options
        from .endpoint import openai_chat_options

        # It stands in for every backend: an option none of them takes is a typo. (The
        # openai package is read for them only when options are given: its first import,
        # seconds on a loaded machine, would count against the rollout's time; sweep 50.)
        problem = unknown_options(sampling, openai_chat_options()) if sampling else None
        if problem is not None:
            raise TypeError(problem)
        problem = messages_problem(messages) or sampling_problem(sampling)
        if problem is not None:
            raise ValueError(problem)
        reply = self._next_reply(messages)
        response = reply if isinstance(reply, ChatResponse) else ChatResponse(content=str(reply))
        cut = stop_index(response.content, sampling.get("stop"))
        if cut is not None:  # as a server does: the text ends before the stop string
            response = attrs.evolve(response, content=response.content[:cut], finish_reason="stop")
        call = ModelCall(messages=[dict(m) for m in messages], response=response,
                         sampling=dict(sampling), streamed=streamed_request())
        self.calls.append(call)
        return call

    async def chat(self, messages: list[dict[str, Any]], **sampling: Any) -> ChatResponse:
        """Answer with the next scripted reply and record the call."""
        return (await self.complete(messages, **sampling)).response

    def __repr__(self) -> str:
        return f"ScriptedModel(name={self.name!r}, calls={len(self.calls)})"
