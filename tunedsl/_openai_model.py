"""`OpenAIChatModel`: a `ChatModel` over any ``openai.AsyncOpenAI``-compatible client.

Trinity's rollout engines, the local backend's in-process server and any hosted
endpoint all speak the chat-completions protocol, so one adapter serves them all.
It receives its client, so importing it does not import ``openai``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._chat import ChatResponse, ToolCall


def _tool_calls(message: Any) -> tuple[ToolCall, ...]:
    calls = getattr(message, "tool_calls", None) or ()
    return tuple(
        ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments or "{}")
        for call in calls
    )


class OpenAIChatModel:
    """A `ChatModel` whose ``chat`` is one chat-completions request.

    Args:
        client: An ``openai.AsyncOpenAI``-compatible client.
        model: The model name sent with every request.
        name: The name workflows see (``model.name``); defaults to ``model``.
        sampling: Default request arguments (temperature, top_p, max_tokens, ...);
            keyword arguments given to `chat` override them.
    """

    def __init__(self, client: Any, model: str, *, name: str | None = None,
                 sampling: Mapping[str, Any] | None = None) -> None:
        self._client = client
        self.model = model
        self.name = name or model
        self.sampling = {k: v for k, v in (sampling or {}).items() if v is not None}

    @property
    def openai_client(self) -> Any:
        """The client itself: requests through it reach the same model."""
        return self._client

    async def chat(self, messages: list[dict[str, Any]], **sampling: Any) -> ChatResponse:
        """Send ``messages`` and return the first choice as a `ChatResponse`."""
        completion = await self._client.chat.completions.create(
            model=self.model, messages=messages, **{**self.sampling, **sampling}
        )
        choice = completion.choices[0]
        message = choice.message
        return ChatResponse(
            content=message.content or "",
            tool_calls=_tool_calls(message),
            reasoning_content=getattr(message, "reasoning_content", None),
            finish_reason=choice.finish_reason,
        )

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, name={self.name!r})"
