"""A real HTTP server on loopback that speaks the OpenAI chat-completions protocol.

Tests and benchmarks start it to exercise tunedsl's endpoint model over the wire,
including the failures a real endpoint produces (401, 429, 5xx, slowness). It runs
on its own event loop in a background thread (``with OpenAIServer(...) as server``)
or as a process (``python tests/openai_server.py --delay 0.05`` prints its port).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web


def arithmetic(messages: list[dict[str, Any]]) -> str:
    """Answers "a+b=" questions correctly, anything else with "?"."""
    text = str(messages[-1]["content"])
    try:
        left, right = text.rstrip("=?").split("+")
        return str(int(left) + int(right))
    except ValueError:
        return "?"


def sums(messages: list[dict[str, Any]]) -> str:
    """Answers the last "What is A plus B?" asked (plain or content-part messages)."""
    import re

    asked = re.findall(r"What is (\d+) plus (\d+)", json.dumps(messages))
    if not asked:
        return "?"
    a, b = map(int, asked[-1])
    return f"The answer is {a + b}."


class OpenAIServer:
    """Serves ``POST /v1/chat/completions`` on 127.0.0.1 (and ``POST /v1/completions``
    with ``echo`` and ``logprobs`` over token-id prompts, as vLLM does, given ``score``).

    Args:
        reply: The assistant's text for a list of messages.
        delay: Seconds each answer takes.
        api_key: When set, requests without ``Bearer <api_key>`` get 401.
        failures: Status codes to answer with, in order, before answering normally (None
            in the list: answer that request normally, e.g. a probe before the failures;
            a ``(status, headers)`` pair: with those headers, a Retry-After or a redirect's
            Location).
        score: A token sequence's log-probs (each token's given the ones before; None for
            the first), for the completions endpoint; without it that path is not served.
        answer: Rewrites each chat completion before it is sent (a test's odd server:
            content of another type, a usage that is a word).
        quotes_key: Its 401 quotes the Authorization header it got, as some proxies do.
    """

    def __init__(self, reply: Callable[[list[dict[str, Any]]], str] = arithmetic, *,
                 delay: float = 0.0, api_key: str | None = None,
                 failures: list[int | tuple[int, dict[str, str]] | None] | None = None,
                 port: int = 0,
                 score: Callable[[list[int]], list[float | None]] | None = None,
                 answer: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 quotes_key: bool = False) -> None:
        self.quotes_key = quotes_key
        # (not `self.score`: the vLLM-style engine, a subclass, has a method of that name)
        self.reply, self.delay, self.api_key, self.scorer = reply, delay, api_key, score
        self.failures = list(failures or [])
        self.answer = answer or (lambda completion: completion)
        self.models = ["served"]  # what GET /v1/models lists
        self.requests: list[dict[str, Any]] = []
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        failure = self.failures.pop(0) if self.failures else None
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            quoted = f": {request.headers.get('Authorization')}" if self.quotes_key else ""
            return web.json_response({"error": {"message": f"Incorrect API key provided{quoted}",
                                                "type": "invalid_request_error"}}, status=401)
        if failure is not None:
            status, headers = failure if isinstance(failure, tuple) else (failure, {})
            return web.json_response({"error": {"message": f"scripted failure {status}"}},
                                     status=status, headers=headers)
        await asyncio.sleep(self.delay)
        text = self.reply(body["messages"])
        prompt = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        usage = {"prompt_tokens": prompt, "completion_tokens": len(text.split()),
                 "total_tokens": prompt + len(text.split())}
        if body.get("stream"):
            return await self._stream(request, body, text, usage)
        return web.json_response(self.answer({
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "test"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": usage,
        }))  # fmt: skip

    async def _stream(self, request: web.Request, body: dict[str, Any], text: str,
                      usage: dict[str, int]) -> web.StreamResponse:
        """Server-sent events as vLLM sends them: the role, the text word by word, the finish
        reason, usage when stream_options asks for it, then [DONE]."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        base = {"id": "chatcmpl-test", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body.get("model", "test")}
        words = text.split(" ")
        deltas = [{"role": "assistant", "content": ""}] + [
            {"content": word if i == 0 else " " + word} for i, word in enumerate(words)]
        chunks = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
                  for d in deltas]
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "choices": [], "usage": usage})
        for chunk in chunks:
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _complete(self, request: web.Request) -> web.Response:
        """A completions request with ``echo`` and ``logprobs``: each prompt (a list of
        token ids) comes back with every token's log-prob, then one generated token."""
        body = await request.json()
        self.requests.append(body)
        failure = self.failures.pop(0) if self.failures else None
        if failure is not None:
            status, headers = failure if isinstance(failure, tuple) else (failure, {})
            return web.json_response({"error": {"message": f"scripted failure {status}"}},
                                     status=status, headers=headers)
        prompts = body["prompt"]
        prompts = prompts if prompts and isinstance(prompts[0], list) else [prompts]
        choices = []
        for index, tokens in enumerate(prompts):
            logprobs = None
            if body.get("echo") and body.get("logprobs") is not None:
                scores = [*self.scorer(tokens), -1.0]  # the prompt's, then the generated one
                logprobs = {"tokens": [str(t) for t in [*tokens, 0]], "token_logprobs": scores,
                            "top_logprobs": None, "text_offset": list(range(len(scores)))}
            choices.append({"index": index, "text": "0", "finish_reason": "length",
                            "logprobs": logprobs})
        count = sum(len(tokens) for tokens in prompts)
        return web.json_response({
            "id": "cmpl-test", "object": "text_completion", "created": int(time.time()),
            "model": body.get("model", "test"), "choices": choices,
            "usage": {"prompt_tokens": count, "completion_tokens": len(prompts),
                      "total_tokens": count + len(prompts)}})

    def routes(self, app: web.Application) -> None:
        """The paths this server answers."""
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_get("/v1/models", self._models)
        if self.scorer is not None:
            app.router.add_post("/v1/completions", self._complete)

    async def _models(self, request: web.Request) -> web.Response:
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"error": {"message": "Incorrect API key provided"}},
                                     status=401)
        return web.json_response({"object": "list", "data": [
            {"id": name, "object": "model"} for name in self.models]})

    async def start(self) -> None:
        """Start serving on the current event loop."""
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # the port the OS chose

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()

    def __enter__(self) -> OpenAIServer:
        started = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.start())
            started.set()
            self._loop.run_forever()

        threading.Thread(target=serve, daemon=True).start()
        started.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)


async def _serve_forever(server: OpenAIServer) -> None:
    await server.start()
    print(f"listening on {server.port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    options = parser.parse_args()
    asyncio.run(_serve_forever(OpenAIServer(delay=options.delay, port=options.port)))
