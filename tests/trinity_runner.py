"""Trinity-RFT 0.6.0's own rollout machinery driving tunedsl's workflow class on a CPU.

Real Trinity code does the work: the YAML tunedsl writes is loaded and validated by
``load_config(...).check_and_update()``, tasks come from Trinity's buffer reader, and
Trinity's ``WorkflowRunner`` (with its concurrency modes and repeat handling) runs them
through Trinity's ``ModelWrapper``, whose history-recording OpenAI client turns every call
into an ``Experience``. Only these are replaced, as shared/TRINITY_NOTES.md allows:

- the inference engine: `VLLMServer`, a loopback server answering ``/v1/chat/completions``
  as vLLM does when asked for ``return_token_ids`` and ``logprobs`` (streamed too), and
  ``GET /health``;
- ``Allocator.get_model``, which looks up a Ray actor: it returns a real ``ModelWrapper``
  over an engine handle that only knows its server's address and model version;
- where vLLM is not installed, the three vLLM modules ``mm_utils`` imports, by the
  import-only shim in ``tests/vllm_shim``.

The scheduler's part is reproduced as it is written (``trinity/explorer/scheduler.py``):
each task is split into sub-tasks of ``explorer.max_repeat_times_per_runner`` repeats, with
``rollout_args.n`` set to the sub-task's repeats and a rising ``run_id_base``; eval metrics
are aggregated with Trinity's own ``aggregate_eval_metrics`` from each status's metrics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from .openai_server import OpenAIServer

if importlib.util.find_spec("vllm") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent / "vllm_shim"))

ROOT = Path(__file__).resolve().parents[1]
#: The token id that ends every reply (as an EOS does on vLLM).
EOS = 3

Reply = Callable[[list[dict[str, Any]]], "str | dict[str, Any]"]


def token_ids(text: str) -> list[int]:
    """The loopback engine's tokenizer: one token per character."""
    return [ord(character) for character in text]


def logprob_of(position: int) -> float:
    """The log-probability the engine reports for the token at ``position`` of a reply."""
    return -0.5 - 0.01 * position


def render(messages: list[dict[str, Any]], tools: Any) -> str:
    """The prompt the engine tokenizes: each message's role and text, tools first."""
    parts = [json.dumps(tools, sort_keys=True)] if tools else []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(part.get("text", "") for part in content)
        parts.append(f"<{message['role']}>{content or ''}")
        for call in message.get("tool_calls") or ():
            parts.append(json.dumps(call["function"], sort_keys=True))
    return "".join(parts)


def answers(folder: str) -> dict[str, str]:
    """Question -> answer (or reference) of every row of a data folder's jsonl files."""
    found = {}
    for path in (ROOT / folder).glob("*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            found[row["question"]] = str(row.get("answer", row.get("reference")))
    return found


def knows(folder: str, template: str):
    """A reply that answers the dataset's question found in the messages, rightly."""
    table = answers(folder)

    def reply(messages):
        text = json.dumps(messages)
        asked = [q for q in table if json.dumps(q)[1:-1] in text]
        return template.format(answer=table[max(asked, key=len)]) if asked else "?"

    return reply


class VLLMServer(OpenAIServer):
    """Answers chat completions as vLLM does with ``return_token_ids`` and ``logprobs``.

    Args:
        reply: The assistant's text for the messages, or a dict with ``content``,
            ``tool_calls`` (OpenAI shape) and ``reasoning`` (the field vLLM 0.23 names it).
        max_model_len: Bound prompt and reply as vLLM 0.23 does for this context length
            (``renderers/params.py``, ``get_max_tokens``): a request naming ``max_tokens``
            is refused with HTTP 400 when the prompt exceeds ``max_model_len -
            max_tokens``; a reply is cut (finish reason ``length``) at the fewest of the
            request's ``max_tokens`` (else ``default_max_tokens``, the engine's
            ``max_response_tokens``) and the room the prompt leaves.
        default_max_tokens: The engine's own reply bound.
    """

    def __init__(self, reply: Reply, *, max_model_len: int | None = None,
                 default_max_tokens: int | None = None, **options: Any) -> None:
        super().__init__(reply, **options)
        self.max_model_len, self.default_max_tokens = max_model_len, default_max_tokens
        self.sent: list[dict[str, Any]] = []  # per choice: prompt ids, token ids, logprobs
        self.scored: list[tuple[list[int], float | None]] = []  # logprobs(): tokens, temp.

    def score(self, token_ids: list[int], temperature: float | None) -> list[float]:
        """The engine's ``logprobs(token_ids)`` (vLLM's prompt log-probs): one per token
        after the first, here a function of the token and its position."""
        self.scored.append((list(token_ids), temperature))
        return [-0.05 * (1 + token % 7) - 0.001 * position
                for position, token in enumerate(token_ids[1:], start=1)]

    def routes(self, app: web.Application) -> None:
        super().routes(app)
        app.router.add_get("/health", self._health)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    def _choice(self, answer: Any, limit: int | None) -> dict[str, Any]:
        message = {"role": "assistant", "content": answer} if isinstance(answer, str) else {
            "role": "assistant", "content": answer.get("content") or "",
            "tool_calls": answer.get("tool_calls")}
        if not isinstance(answer, str) and answer.get("reasoning"):
            message["reasoning"] = answer["reasoning"]
        text = message["content"] + "".join(json.dumps(c["function"], sort_keys=True)
                                            for c in message.get("tool_calls") or ())
        ids = token_ids(text) + [EOS]
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        if limit is not None and len(ids) > limit:
            ids, finish = ids[:limit], "length"
            message = {"role": "assistant", "content": "".join(map(chr, ids))}
        return {"message": message, "token_ids": ids,
                "logprobs": [logprob_of(i) for i in range(len(ids))], "finish_reason": finish}

    def _reply_limit(self, body: dict[str, Any], prompt: list[int]) -> int | web.Response | None:
        """The most reply tokens vLLM would allow, or its HTTP 400 answer."""
        if self.max_model_len is None:
            return body.get("max_tokens")
        asked = body.get("max_tokens")
        if len(prompt) > self.max_model_len:
            return web.json_response({"error": {
                "message": f"Input length ({len(prompt)}) exceeds model's maximum context "
                           f"length ({self.max_model_len}).", "type": "BadRequestError",
                "param": None, "code": 400}}, status=400)
        if asked is not None and len(prompt) > self.max_model_len - asked:
            return web.json_response({"error": {
                "message": f"This model's maximum context length is {self.max_model_len} "
                           f"tokens. However, you requested {asked} output tokens and your "
                           f"prompt contains {len(prompt)} input tokens, for a total of "
                           f"{len(prompt) + asked} tokens. Please reduce the length of the "
                           f"input prompt or the number of requested output tokens.",
                "type": "BadRequestError", "param": "input_tokens", "code": 400}}, status=400)
        bounds = (asked if asked is not None else self.default_max_tokens,
                  self.max_model_len - len(prompt))
        return min(bound for bound in bounds if bound is not None)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        prompt = token_ids(render(body["messages"], body.get("tools")))
        limit = self._reply_limit(body, prompt)
        if isinstance(limit, web.Response):
            return limit
        choices = [self._choice(self.reply(body["messages"]), limit)
                   for _ in range(body.get("n") or 1)]
        for choice in choices:
            self.sent.append({"prompt_ids": prompt, "token_ids": choice["token_ids"],
                              "logprobs": choice["logprobs"]})
        with_ids = bool(body.get("return_token_ids"))
        if body.get("stream"):
            return await self._stream_choices(request, body, prompt, choices, with_ids)
        completion = {
            "id": "chatcmpl-vllm", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": i, "message": c["message"], "finish_reason": c["finish_reason"],
                         "logprobs": self._logprobs(c, body), **(
                             {"token_ids": c["token_ids"]} if with_ids else {})}
                        for i, c in enumerate(choices)],
            "usage": self._usage(prompt, choices),
        }
        if with_ids:
            completion["prompt_token_ids"] = prompt
        return web.json_response(completion)

    @staticmethod
    def _logprobs(choice: dict[str, Any], body: dict[str, Any],
                  positions: range | None = None) -> dict[str, Any] | None:
        if not body.get("logprobs"):
            return None
        positions = positions or range(len(choice["token_ids"]))
        return {"content": [{"token": chr(choice["token_ids"][i]), "logprob": choice["logprobs"][i],
                             "bytes": None, "top_logprobs": []} for i in positions]}

    @staticmethod
    def _usage(prompt: list[int], choices: list[dict[str, Any]]) -> dict[str, int]:
        completion = sum(len(c["token_ids"]) for c in choices)
        return {"prompt_tokens": len(prompt), "completion_tokens": completion,
                "total_tokens": len(prompt) + completion}

    async def _stream_choices(self, request: web.Request, body: dict[str, Any],
                              prompt: list[int], choices: list[dict[str, Any]],
                              with_ids: bool) -> web.StreamResponse:
        """One chunk per token, as vLLM streams: the first carries the prompt's token ids,
        each carries its token's id and log-probability; the tool calls ride on the last."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        base = {"id": "chatcmpl-vllm", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body["model"]}
        first = True
        for index, choice in enumerate(choices):
            text = choice["message"]["content"]
            for position, token in enumerate(choice["token_ids"]):
                last = position == len(choice["token_ids"]) - 1
                delta: dict[str, Any] = {"content": text[position] if position < len(text) else ""}
                if position == 0:
                    delta["role"] = "assistant"
                    if choice["message"].get("reasoning"):
                        delta["reasoning"] = choice["message"]["reasoning"]
                if last and choice["message"].get("tool_calls"):
                    delta["tool_calls"] = [{"index": k, **call} for k, call in
                                           enumerate(choice["message"]["tool_calls"])]
                chunk = {**base, "choices": [{
                    "index": index, "delta": delta,
                    "logprobs": self._logprobs(choice, body, range(position, position + 1)),
                    "finish_reason": choice["finish_reason"] if last else None,
                    **({"token_ids": [token]} if with_ids else {})}]}
                if first and with_ids:
                    chunk["prompt_token_ids"] = prompt
                    first = False
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {**base, "choices": [], "usage": self._usage(prompt, choices)}
            await response.write(f"data: {json.dumps(usage)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


class EngineHandle:
    """What a ``ModelWrapper`` asks of its Ray actor on the rollout path, answered locally."""

    class _Method:
        def __init__(self, value: Any) -> None:
            self.value = value

        def remote(self, *args: Any, **kwargs: Any) -> Any:
            async def result() -> Any:
                return self.value

            return result()

    class _Scores:
        def __init__(self, server: VLLMServer) -> None:
            self.server = server

        def remote(self, token_ids: list[int], temperature: float | None = None) -> Any:
            import torch

            async def result() -> Any:
                return torch.tensor(self.server.score(token_ids, temperature))

            return result()

    def __init__(self, url: str, server: VLLMServer | None = None) -> None:
        self.get_model_version = self._Method(0)
        self.get_api_server_url = self._Method(url)
        if server is not None:  # vllm_model.py's logprobs(token_ids, temperature)
            self.logprobs = self._Scores(server)


def serve_models(monkeypatch: Any, servers: dict[str, VLLMServer]) -> None:
    """Have Trinity's ``Allocator.get_model`` hand out real ``ModelWrapper`` s over
    ``servers``: ``"rollout"`` for the trained model, auxiliary models by their name."""
    from trinity.common.models.allocator import Allocator
    from trinity.common.models.model import ModelWrapper

    def get_model(self: Any, config: Any, role: str, engine_id: int) -> Any:
        server = servers["rollout" if role == "rollout" else config.name]
        url = f"http://127.0.0.1:{server.port}"
        return ModelWrapper(model=EngineHandle(url, server), config=config, api_address=url)

    monkeypatch.setattr(Allocator, "get_model", get_model)


@dataclasses.dataclass
class Outcome:
    """What Trinity's runner returned for a set of tasks."""

    statuses: list[Any]
    experiences: list[Any]


async def _run(config: Any, tasks: list[Any], batch_id: Any) -> Outcome:
    from trinity.common.experience import Experience
    from trinity.explorer.workflow_runner import WorkflowRunner

    auxiliary = [0] * len(config.explorer.auxiliary_models)
    runner = WorkflowRunner(config, rollout_model_id=0, auxiliary_model_ids=auxiliary,
                            runner_id=0)
    await runner.prepare()
    per_runner = config.explorer.max_repeat_times_per_runner
    statuses, experiences = [], []
    for task_id, task in enumerate(tasks):
        task = dataclasses.replace(task, batch_id=batch_id, task_id=task_id)
        step = per_runner or task.repeat_times
        for run_id_base in range(0, task.repeat_times, step):
            repeat = min(step, task.repeat_times - run_id_base)
            sub_task = dataclasses.replace(
                task, rollout_args=dataclasses.replace(task.rollout_args, n=repeat))
            status, payload = await runner.run_task(task=sub_task, batch_id=batch_id,
                                                    repeat_times=repeat,
                                                    run_id_base=run_id_base)
            statuses.append(status)
            experiences += Experience.deserialize_many(payload) if payload else []
    return Outcome(statuses=statuses, experiences=experiences)


def read_tasks(taskset_config: Any) -> list[Any]:
    """One batch of tasks, read by Trinity's own buffer reader."""
    from trinity.buffer.buffer import get_buffer_reader

    return asyncio.run(get_buffer_reader(taskset_config).read())


def run_training_batch(config: Any, batch_id: Any = "0") -> Outcome:
    """The first training batch, through Trinity's runner, as batch ``batch_id`` (the
    explorer passes its step number, an int)."""
    return asyncio.run(_run(config, read_tasks(config.buffer.explorer_input.tasksets[0]),
                            batch_id))


def run_eval(config: Any) -> dict[str, float]:
    """The first eval taskset, through Trinity's runner; the metrics Trinity would log."""
    from trinity.utils.metrics import aggregate_eval_metrics

    taskset = config.buffer.explorer_input.eval_tasksets[0]
    outcome = asyncio.run(_run(config, read_tasks(taskset), f"0/{taskset.name}"))
    return aggregate_eval_metrics([s.metrics[0] for s in outcome.statuses if s.metrics],
                                  prefix=f"eval/{taskset.name}")
