"""An in-process OpenAI-compatible server, so a model's ``openai_client`` is a real
``openai.AsyncOpenAI`` wherever the model itself lives in this process.

The local backend's model and the test kit's scripted model both serve their
``openai_client`` through it: a request goes through the openai package and httpx
(no socket), reaches `ChatCompletionsApp`, and is answered and recorded by the
model's ``complete`` exactly like a call to its ``chat``. The chat-completion JSON,
streamed or not, is built here and only here.

What agent frameworks send is supported: ``stream`` with ``stream_options``,
``tools`` and ``tool_choice``, ``stop``, ``n`` (each choice is its own recorded call),
``temperature``, ``top_p``, ``max_tokens`` / ``max_completion_tokens`` and
``chat_template_kwargs``. Any other option is answered with HTTP 400 naming it,
never ignored.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from collections.abc import Iterator
from typing import Any, Protocol, cast

from ..dsl.chat import ModelCall, messages_problem, sampling_problem

#: What the client's base URL says; requests never leave the process.
BASE_URL = "http://tunedsl.local/v1"

#: Request fields the server understands (``model``, ``messages`` and ``n`` it reads
#: itself; the rest reach the model's ``complete`` as sampling settings).
SUPPORTED = frozenset({
    "model", "messages", "n", "stream", "stream_options", "temperature", "top_p",
    "max_tokens", "max_completion_tokens", "tools", "tool_choice", "stop",
    "chat_template_kwargs",
})  # fmt: skip
#: The options a local model's ``chat`` takes per call (what the server hands it).
LOCAL_CHAT_OPTIONS = SUPPORTED - {"model", "messages", "n", "stream", "stream_options",
                                  "max_completion_tokens"}


#: Whether the request being answered asked for a stream: the server reads ``stream``
#: itself (the model answers whole), so a model's ``complete`` records it from here
#: (`streamed_request`) on its `ModelCall`.
_STREAMED: contextvars.ContextVar[bool] = contextvars.ContextVar("tunedsl_streamed",
                                                                 default=False)


def streamed_request() -> bool:
    """Whether the request a model's ``complete`` is answering asked for a stream (False
    for a call made through ``chat``)."""
    return _STREAMED.get()


class BadRequest(ValueError):
    """A request the model cannot honour (answered with HTTP 400 and this message)."""


def stop_index(text: str, stop: Any) -> int | None:
    """Where the first of the ``stop`` strings (one string or a list) begins in ``text``."""
    if stop is None:
        return None
    strings = [stop] if isinstance(stop, str) else stop
    if not isinstance(strings, list) or not all(isinstance(s, str) and s for s in strings):
        raise BadRequest(f"stop must be a non-empty string or a list of them (got {stop!r})")
    found = [index for index in (text.find(s) for s in strings) if index >= 0]
    return min(found) if found else None


class RecordingModel(Protocol):
    """A model that answers one chat completion and returns its record."""

    name: str

    async def complete(self, messages: list[dict[str, Any]], **sampling: Any) -> ModelCall:
        """Answer ``messages``, record the call (``streamed`` from `streamed_request`),
        and return the record."""
        ...


def _usage(calls: list[ModelCall]) -> dict[str, int]:
    # n choices share one prompt: it is counted once, as vLLM and OpenAI count it.
    prompt = calls[0].prompt_tokens if calls else 0
    completion = sum(call.completion_tokens for call in calls)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def completion_json(calls: list[ModelCall], model: str, completion_id: str) -> dict[str, Any]:
    """The ``chat.completion`` object answering one request (one choice per call)."""
    return {
        "id": completion_id, "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": index, "finish_reason": call.response.finish_reason or "stop",
                     "message": call.response.as_message()} for index, call in enumerate(calls)],
        "usage": _usage(calls),
    }  # fmt: skip


def completion_chunks(calls: list[ModelCall], model: str, completion_id: str,
                      include_usage: bool) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed answer: per choice its text (and
    reasoning), then its tool calls, then its finish reason; usage last when asked."""
    created = int(time.time())

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": completion_id, "object": "chat.completion.chunk", "created": created,
                "model": model, "choices": choices, **extra}

    for index, call in enumerate(calls):
        message = call.response.as_message()
        delta = {key: message[key] for key in ("role", "content", "reasoning_content")
                 if key in message}
        yield chunk([{"index": index, "delta": delta, "finish_reason": None}])
        if "tool_calls" in message:
            calls_delta = [{"index": position, **tool_call}
                           for position, tool_call in enumerate(message["tool_calls"])]
            yield chunk([{"index": index, "delta": {"tool_calls": calls_delta},
                          "finish_reason": None}])
        yield chunk([{"index": index, "delta": {},
                      "finish_reason": call.response.finish_reason or "stop"}])
    if include_usage:
        yield chunk([], usage=_usage(calls))


class ChatCompletionsApp:
    """An ASGI app: ``POST /v1/chat/completions`` answered by a `RecordingModel`.

    An error the model raises is answered as a 500 whose message names it (a
    `BadRequest` as a 400), as a real server would.
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
            await _respond(send, 404, _error(f"no route {scope['method']} {scope['path']}"))
            return
        try:
            request = json.loads(body)
            calls = await self._answer(request)
        except BadRequest as exc:
            await _respond(send, 400, _error(str(exc), "invalid_request_error"))
            return
        except Exception as exc:  # the client raises openai.InternalServerError with this text
            await _respond(send, 500, _error(f"{type(exc).__name__}: {exc}"))
            return
        self.answered += 1
        name, completion_id = request.get("model") or self.model.name, f"tunedsl-{self.answered}"
        if not request.get("stream"):
            await _respond(send, 200, completion_json(calls, name, completion_id))
            return
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        events = [f"data: {json.dumps(chunk)}\n\n" for chunk in
                  completion_chunks(calls, name, completion_id, include_usage)]
        await _respond_bytes(send, 200, "text/event-stream",
                             ("".join(events) + "data: [DONE]\n\n").encode())

    async def _answer(self, request: Any) -> list[ModelCall]:
        if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
            raise BadRequest("the request needs 'messages', a list of chat messages")
        unsupported = sorted(set(request) - SUPPORTED)
        if unsupported:
            raise BadRequest(f"unsupported request option(s): {', '.join(unsupported)}; this "
                             f"in-process server supports {', '.join(sorted(SUPPORTED))}")
        sampling = {k: v for k, v in request.items()
                    if k not in ("model", "messages", "n", "stream", "stream_options")}
        if "max_completion_tokens" in sampling:
            sampling["max_tokens"] = sampling.pop("max_completion_tokens")
        n = request.get("n") or 1
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise BadRequest(f"n must be a positive integer (got {n!r})")
        # What the caller got wrong is a 400, as from a real server, not the model's 500.
        problem = messages_problem(request["messages"]) or sampling_problem(sampling)
        if problem is not None:
            raise BadRequest(problem)
        # The n choices are sampled concurrently, so the local engine batches them; each
        # task copies the context, so each call records whether the request streamed.
        token = _STREAMED.set(bool(request.get("stream")))
        try:
            return list(await asyncio.gather(*(self.model.complete(request["messages"],
                                                                   **sampling)
                                               for _ in range(n))))
        finally:
            _STREAMED.reset(token)


def _error(message: str, kind: str = "server_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind}}


async def _respond(send: Any, status: int, payload: dict[str, Any]) -> None:
    await _respond_bytes(send, status, "application/json", json.dumps(payload).encode())


async def _respond_bytes(send: Any, status: int, content_type: str, data: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


def in_process_client(model: RecordingModel) -> Any:
    """A real ``openai.AsyncOpenAI`` whose requests ``model`` answers in this process."""
    import httpx
    import openai

    # (the app is an ASGI callable; httpx's and openai's stubs name other classes for both)
    transport = httpx.ASGITransport(app=cast(Any, ChatCompletionsApp(model)))
    http_client: Any = httpx.AsyncClient(transport=transport, base_url=BASE_URL)
    return openai.AsyncOpenAI(base_url=BASE_URL, api_key="in-process", max_retries=0,
                              http_client=http_client)
