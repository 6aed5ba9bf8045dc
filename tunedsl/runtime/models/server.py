"""An in-process OpenAI-compatible server, so a model's ``openai_client`` is a real
``openai.AsyncOpenAI`` wherever the model itself lives in this process.

The local backend's model and the test kit's scripted model both serve their
``openai_client`` through it: a request goes through the openai package and httpx
(no socket), reaches `ChatCompletionsApp`, and is answered and recorded by the
model's ``complete`` exactly like a call to its ``chat``. The chat-completion JSON
is built here and only here.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from ...dsl.chat import ModelCall

#: What the client's base URL says; requests never leave the process.
BASE_URL = "http://tunedsl.local/v1"


class RecordingModel(Protocol):
    """A model that answers one chat completion and returns its record."""

    name: str

    async def complete(self, messages: list[dict[str, Any]], **sampling: Any) -> ModelCall:
        """Answer ``messages``, record the call, and return the record."""
        ...


def completion_json(call: ModelCall, model: str, completion_id: str) -> dict[str, Any]:
    """The ``chat.completion`` object for one recorded call."""
    reply = call.response
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    if reply.reasoning_content is not None:
        message["reasoning_content"] = reply.reasoning_content
    return {
        "id": completion_id, "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": reply.finish_reason or "stop",
                     "message": message}],
        "usage": {"prompt_tokens": call.prompt_tokens,
                  "completion_tokens": call.completion_tokens,
                  "total_tokens": call.prompt_tokens + call.completion_tokens},
    }  # fmt: skip


class ChatCompletionsApp:
    """An ASGI app: ``POST /v1/chat/completions`` answered by a `RecordingModel`.

    The request's arguments other than ``model`` and ``messages`` reach the model as
    sampling settings (``max_completion_tokens`` as ``max_tokens``); an error the model
    raises is answered as a 500 whose message names it, as a real server would.
    """

    def __init__(self, model: RecordingModel) -> None:
        self.model = model
        self.answered = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"].rstrip("/") != "/v1/chat/completions" or scope["method"] != "POST":
            await _respond(send, 404, {"error": {"message": f"no route {scope['path']}"}})
            return
        request = json.loads(body)
        messages = request.pop("messages")
        name = request.pop("model", None) or self.model.name
        if "max_completion_tokens" in request:
            request["max_tokens"] = request.pop("max_completion_tokens")
        try:
            call = await self.model.complete(messages, **request)
        except Exception as exc:  # the client raises openai.InternalServerError with this text
            await _respond(send, 500, {"error": {"message": f"{type(exc).__name__}: {exc}",
                                                 "type": "server_error"}})
            return
        self.answered += 1
        await _respond(send, 200, completion_json(call, name, f"tunedsl-{self.answered}"))


async def _respond(send: Any, status: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


def in_process_client(model: RecordingModel) -> Any:
    """A real ``openai.AsyncOpenAI`` whose requests ``model`` answers in this process."""
    import httpx
    import openai

    transport = httpx.ASGITransport(app=ChatCompletionsApp(model))
    return openai.AsyncOpenAI(
        base_url=BASE_URL, api_key="in-process", max_retries=0,
        http_client=httpx.AsyncClient(transport=transport, base_url=BASE_URL),
    )
