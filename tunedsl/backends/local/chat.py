"""`LocalChatModel`: the `ChatModel` a workflow gets on the local backend.

One is made per rollout over the shared `Engine`, so each rollout's model calls
(prompt ids, response ids, sampled log-probabilities) are recorded apart: they
are that trajectory's training samples. ``openai_client`` is a real
``openai.AsyncOpenAI`` whose requests reach the same model through an in-process
ASGI app, and are recorded the same way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import attrs

from ..._chat import ChatResponse
from .engine import Engine


@attrs.frozen
class ModelCall:
    """One recorded call: a training sample for the trajectory that made it."""

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    messages: list[dict[str, Any]] = attrs.field(factory=list, eq=False)
    reply: str = ""

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def completion_tokens(self) -> int:
        return len(self.response_ids)


class LocalChatModel:
    """A `ChatModel` over a local engine, recording every call.

    Args:
        engine: The batched sampler.
        tokenizer: Applies the chat template and decodes replies.
        name: What ``model.name`` reports.
        sampling: Defaults for ``temperature``, ``top_p`` and ``max_tokens``.
    """

    def __init__(self, engine: Engine, tokenizer: Any, *, name: str,
                 sampling: Mapping[str, Any]) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.name = name
        self.sampling = dict(sampling)
        self.calls: list[ModelCall] = []
        self._client: Any = None

    def prompt_ids(self, messages: list[dict[str, Any]], tools: Any = None) -> list[int]:
        """The token ids of ``messages`` under the model's chat template."""
        encoded = self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=True
        )
        return list(encoded["input_ids"])

    async def chat(self, messages: list[dict[str, Any]], **sampling: Any) -> ChatResponse:
        """Sample a reply; ``temperature``, ``top_p`` and ``max_tokens`` may be overridden."""
        settings = {**self.sampling, **{k: v for k, v in sampling.items() if v is not None}}
        prompt = self.prompt_ids(messages, settings.get("tools"))
        sample = await self.engine.generate(
            prompt, temperature=settings.get("temperature", 1.0),
            top_p=settings.get("top_p", 1.0), max_tokens=settings.get("max_tokens", 64),
        )
        text = self.tokenizer.decode(list(sample.response_ids), skip_special_tokens=True)
        self.calls.append(ModelCall(tuple(prompt), sample.response_ids, sample.logprobs,
                                    [dict(m) for m in messages], text))
        return ChatResponse(content=text, finish_reason=sample.finish_reason)

    @property
    def openai_client(self) -> Any:
        """A real ``openai.AsyncOpenAI`` served in-process by this model."""
        if self._client is None:
            import httpx
            import openai

            transport = httpx.ASGITransport(app=_ChatCompletionsApp(self))
            self._client = openai.AsyncOpenAI(
                base_url="http://tunedsl.local/v1", api_key="local", max_retries=0,
                http_client=httpx.AsyncClient(transport=transport, base_url="http://tunedsl.local"),
            )
        return self._client


class _ChatCompletionsApp:
    """A minimal ASGI app: ``POST /v1/chat/completions`` answered by a `LocalChatModel`."""

    def __init__(self, model: LocalChatModel) -> None:
        self.model = model

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
        sampling = {k: request.get(k) for k in ("temperature", "top_p", "tools")}
        sampling["max_tokens"] = request.get("max_completion_tokens") or request.get("max_tokens")
        reply = await self.model.chat(request["messages"], **sampling)
        await _respond(send, 200, {
            "id": f"local-{len(self.model.calls)}", "object": "chat.completion",
            "created": int(time.time()), "model": request.get("model", self.model.name),
            "choices": [{"index": 0, "finish_reason": reply.finish_reason or "stop",
                         "message": {"role": "assistant", "content": reply.content}}],
            "usage": {"prompt_tokens": len(self.model.calls[-1].prompt_ids),
                      "completion_tokens": len(self.model.calls[-1].response_ids),
                      "total_tokens": len(self.model.calls[-1].prompt_ids)
                      + len(self.model.calls[-1].response_ids)},
        })  # fmt: skip


async def _respond(send: Any, status: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


def checkpoint_model(folder: str, sampling: Mapping[str, Any]) -> Any:
    """A factory of `LocalChatModel` s over a saved model folder (e.g. ``global_step_N``)."""
    from pathlib import Path

    from ...errors import ConfigError

    if not (Path(folder) / "config.json").is_file():
        raise ConfigError(f"--checkpoint {folder}: not a saved model folder (no config.json); "
                          f"give RUN_DIR/global_step_N")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    engine = Engine(model, eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id)
    return lambda: LocalChatModel(engine, tokenizer, name=folder, sampling=sampling)
