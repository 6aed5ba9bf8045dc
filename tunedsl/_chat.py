"""The model interface a workflow receives: `ChatModel` and its reply types.

Backends implement it (Trinity's vLLM engines, the local CPU model, any
OpenAI-compatible endpoint, the test kit's scripted model); workflow code sees
only this protocol, which is why the same workflow runs on every backend.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import attrs


@attrs.frozen
class ToolCall:
    """One function call the model asked for (OpenAI chat-completions shape)."""

    id: str
    name: str
    arguments: str = "{}"


@attrs.frozen
class ChatResponse:
    """A model's reply to one `ChatModel.chat` call."""

    content: str
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=tuple)
    reasoning_content: str | None = None
    finish_reason: str | None = None


@runtime_checkable
class ChatModel(Protocol):
    """What a ``@workflow`` receives as ``model`` (and each auxiliary model).

    Attributes:
        name: The model's name (its path, or its auxiliary-model name).
        openai_client: An ``openai.AsyncOpenAI``-compatible client whose requests
            reach this same model, so any agent framework that takes an OpenAI
            client can run inside a workflow and still be trained.
    """

    name: str

    @property
    def openai_client(self) -> Any:
        """An ``openai.AsyncOpenAI``-compatible client for this model."""
        ...

    async def chat(self, messages: list[dict[str, Any]], **sampling: Any) -> ChatResponse:
        """Send chat messages (OpenAI format) and return the model's reply.

        Args:
            messages: ``[{"role": "user", "content": "..."}, ...]``.
            **sampling: Per-call overrides such as ``temperature``, ``top_p``,
                ``max_tokens`` or ``tools``; the experiment's settings apply otherwise.
        """
        ...
