"""`LocalChatModel`: the `ChatModel` a workflow gets on the local backend.

One is made per rollout over the shared `Engine`, so each rollout's model calls
(prompt ids, response ids, sampled log-probabilities, as `ModelCall` s) are
recorded apart: they are that trajectory's training samples. ``openai_client`` is
a real ``openai.AsyncOpenAI`` whose requests reach the same model through the
in-process server of `tunedsl.models.server`, and are recorded the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ...dsl.chat import (
    ChatResponse,
    ModelCall,
    ToolCall,
    messages_problem,
    sampling_problem,
    unknown_options,
)
from ...dsl.turns import MarksTurns, TurnMarks
from ...models.endpoint import request_sampling
from ...models.lifetime import EndsWithRollout
from ...models.recording import guarded_client
from ...models.server import (
    LOCAL_CHAT_OPTIONS,
    BadRequest,
    stop_index,
    streamed_request,
)
from .engine import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P, Engine


def _cache_key(messages: list[dict[str, Any]], tools: Any, options: dict[str, Any]) -> Any:
    """A hashable key for a conversation: cheap tuples for plain text turns (the usual
    case), JSON text for anything richer (content parts, tool calls)."""
    key = (tuple(tuple(sorted(m.items())) for m in messages),
           None if tools is None else json.dumps(tools, sort_keys=True, default=str),
           tuple(sorted(options.items())))
    try:
        hash(key)
    except TypeError:
        return json.dumps([messages, tools, options], sort_keys=True, default=str)
    return key


def _text_of(content: Any, role: str) -> Any:
    """OpenAI content parts joined into the one string a chat template expects, as vLLM
    does for string-content templates; plain strings and None pass through."""
    if not isinstance(content, list):
        return content
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise BadRequest(f"a {role} message has a {kind!r} content part; the local backend "
                             f"reads text parts only")
        texts.append(str(part.get("text", "")))
    return "\n".join(texts)


def _arguments(call: Any) -> Any:
    """A tool call whose JSON arguments are parsed, as vLLM hands them to the template."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = json.loads(function["arguments"])
    except ValueError:
        return call
    return {**call, "function": {**function, "arguments": arguments}}


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as the model's chat template reads them (see `_text_of`, `_arguments`)."""
    out = []
    for message in messages:
        message = dict(message)
        message["content"] = _text_of(message.get("content"), str(message.get("role")))
        if message.get("tool_calls"):
            message["tool_calls"] = [_arguments(call) for call in message["tool_calls"]]
        out.append(message)
    return out


_HERMES_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def parse_hermes(text: str) -> tuple[str, tuple[ToolCall, ...]]:
    """Split a reply into its text and its ``<tool_call>{json}</tool_call>`` calls (the
    Hermes format Qwen models emit; vLLM's ``hermes`` parser reads the same)."""
    calls = []
    for index, match in enumerate(_HERMES_CALL.finditer(text)):
        try:
            call = json.loads(match.group(1))
            name, arguments = call["name"], call.get("arguments", {})
        except (ValueError, KeyError, TypeError):
            continue  # not a well-formed call: it stays in the text
        calls.append(ToolCall(id=f"call_{index}", name=str(name),
                              arguments=arguments if isinstance(arguments, str)
                              else json.dumps(arguments, ensure_ascii=False)))
    if not calls:
        return text, ()
    return _HERMES_CALL.sub("", text).strip(), tuple(calls)


def split_reasoning(text: str, parser: str | None) -> tuple[str, str | None]:
    """``(content, reasoning)`` of a reply, as vLLM's reasoning parser ``parser`` splits it:
    ``qwen3`` takes the text between ``<think>`` and ``</think>`` when both are there;
    ``deepseek_r1`` takes everything before ``</think>`` (its models may not print the
    opening tag), and a reply that never closes its thinking is all reasoning."""
    if parser is None:
        return text, None
    start, end = "<think>", "</think>"
    if parser == "qwen3":
        if start not in text or end not in text:
            return text, None
        before, _, rest = text.partition(start)
        reasoning, _, after = rest.partition(end)
        return (before + after).strip(), reasoning.strip()
    if end not in text:  # deepseek_r1: still thinking when the reply ended
        return "", text.replace(start, "", 1).strip()
    reasoning, _, after = text.partition(end)
    return after.strip(), reasoning.replace(start, "", 1).strip()


class ChatCodec:
    """A tokenizer's chat template and decoder, remembered: a GRPO step renders the same
    prompt once per rollout of its group, and rendering dominated the step's Python time."""

    def __init__(self, tokenizer: Any, size: int = 4096, *,
                 enable_thinking: bool | None = None) -> None:
        self.tokenizer = tokenizer
        self.size = size
        # Qwen3-style templates read enable_thinking; others ignore extra variables.
        self.template_kwargs = {} if enable_thinking is None else {
            "enable_thinking": enable_thinking}
        self._prompts: dict[Any, tuple[int, ...]] = {}
        self._texts: dict[tuple[int, ...], str] = {}

    def prompt_ids(self, messages: list[dict[str, Any]], tools: Any = None,
                   template_kwargs: dict[str, Any] | None = None) -> tuple[int, ...]:
        """The token ids of ``messages`` under the model's chat template; ``template_kwargs``
        (a request's ``chat_template_kwargs``) add to or override the model's own."""
        options = {**self.template_kwargs, **(template_kwargs or {})}
        key = _cache_key(messages, tools, options)
        found = self._prompts.get(key)
        if found is None:
            encoded = self.tokenizer.apply_chat_template(
                template_messages(messages), tools=tools, add_generation_prompt=True,
                tokenize=True, return_dict=True, **options)
            found = self._remember(self._prompts, key, tuple(encoded["input_ids"]))
        return found

    def decode(self, ids: tuple[int, ...]) -> str:
        """The text of generated ids, special tokens left out."""
        found = self._texts.get(ids)
        if found is None:
            found = self._remember(self._texts, ids,
                                   self.tokenizer.decode(list(ids), skip_special_tokens=True))
        return found

    def _remember(self, cache: dict[Any, Any], key: Any, value: Any) -> Any:
        if len(cache) >= self.size:
            cache.pop(next(iter(cache)))  # oldest first: dicts keep insertion order
        cache[key] = value
        return value


class LocalChatModel(MarksTurns, EndsWithRollout):
    """A `ChatModel` over a local engine, recording every call.

    Args:
        engine: The batched sampler.
        codec: The model's chat template and decoder (shared by every rollout).
        name: What ``model.name`` reports.
        sampling: Defaults for ``temperature``, ``top_p`` and ``max_tokens``.
        tool_call_parser: How tool calls are read from replies: ``hermes`` (the only
            format the local backend reads), or None for plain text.
        max_model_len: Prompt plus reply tokens at most: a longer prompt fails the call
            (naming both lengths), and a reply stops where the room ends.
        reasoning_parser: ``deepseek_r1`` or ``qwen3`` moves the reply's thinking into
            ``reasoning_content``, as on Trinity (see `split_reasoning`).
    """

    def __init__(self, engine: Engine, codec: ChatCodec, *, name: str,
                 sampling: Mapping[str, Any], tool_call_parser: str | None = "hermes",
                 max_model_len: int | None = None,
                 reasoning_parser: str | None = None) -> None:
        self.engine = engine
        self.max_model_len = max_model_len
        self.reasoning_parser = reasoning_parser
        self.tool_call_parser = tool_call_parser
        self.codec = codec
        self.name = name
        self.sampling = {k: v for k, v in sampling.items() if v is not None}
        self.calls: list[ModelCall] = []
        self.turns = TurnMarks(lambda: len(self.calls))
        self._client: Any = None

    async def complete(self, messages: list[dict[str, Any]], **sampling: Any) -> ModelCall:
        """Sample a reply and record the call; return its record.

        ``temperature``, ``top_p``, ``max_tokens``, ``tools``, ``tool_choice`` (``auto`` or
        ``none``), ``stop`` and ``chat_template_kwargs`` may be given per call.
        """
        await self.refuse_call_if_ended()
        problem = (unknown_options(sampling, LOCAL_CHAT_OPTIONS) or messages_problem(messages)
                   or sampling_problem(sampling))
        if problem is not None:
            raise BadRequest(problem)
        settings = {**self.sampling, **{k: v for k, v in sampling.items() if v is not None}}
        tools, tool_choice = settings.get("tools"), settings.get("tool_choice", "auto")
        problem = forced_tool_problem(tool_choice)
        if problem is not None:
            raise BadRequest(problem)
        if tools and self.tool_call_parser not in ("hermes", None):
            raise BadRequest(f"the local backend reads tool calls in the hermes format only; "
                             f"this model's tool_call_parser is {self.tool_call_parser!r}")
        prompt = self.codec.prompt_ids(messages, tools, settings.get("chat_template_kwargs"))
        max_tokens = settings.get("max_tokens", DEFAULT_MAX_TOKENS)
        if self.max_model_len is not None:
            room = self.max_model_len - len(prompt)
            if room < 1:  # as vLLM refuses it: this call fails, not the batch it would join
                raise BadRequest(f"the prompt is {len(prompt)} tokens, and max_model_len = "
                                 f"{self.max_model_len} leaves no room for a reply; shorten "
                                 f"the prompt or raise max_model_len")
            max_tokens = min(max_tokens, room)
        # The trainer recomputes log-probabilities with the temperature and top-p they were
        # sampled with.
        settings["temperature"] = float(settings.get("temperature", DEFAULT_TEMPERATURE))
        settings["top_p"] = float(settings.get("top_p", DEFAULT_TOP_P))
        sample = await self.engine.generate(
            prompt, temperature=settings["temperature"], top_p=settings["top_p"],
            max_tokens=max_tokens,
        )
        ids, logprobs, finish = sample.response_ids, sample.logprobs, sample.finish_reason
        text = self.codec.decode(ids)
        if stop_index(text, settings.get("stop")) is not None:
            ids = self._through_stop(ids, settings["stop"])
            logprobs, finish = logprobs[:len(ids)], "stop"
            text = self.codec.decode(ids)
            text = text[:stop_index(text, settings["stop"])]
        text, reasoning = split_reasoning(text, self.reasoning_parser)
        parse = tools and self.tool_call_parser and tool_choice != "none"
        content, calls = parse_hermes(text) if parse else (text, ())
        response = ChatResponse(content=content, tool_calls=calls, reasoning_content=reasoning,
                                finish_reason="tool_calls" if calls else finish)
        call = ModelCall(
            messages=[dict(m) for m in messages], response=response, sampling=settings,
            prompt_tokens=len(prompt), completion_tokens=len(ids),
            prompt_ids=prompt, response_ids=ids, logprobs=logprobs, streamed=streamed_request(),
        )
        self.calls.append(call)
        return call

    def _through_stop(self, ids: tuple[int, ...], stop: Any) -> tuple[int, ...]:
        """The shortest prefix of ``ids`` whose text holds a stop string: the tokens sampled
        up to the stop are the reply (as vLLM keeps them), the rest are dropped."""
        low, high = 1, len(ids)
        while low < high:  # containing a stop string only grows with the prefix
            middle = (low + high) // 2
            if stop_index(self.codec.decode(ids[:middle]), stop) is None:
                low = middle + 1
            else:
                high = middle
        return ids[:low]

    async def chat(self, messages: list[dict[str, Any]], **sampling: Any) -> ChatResponse:
        """Sample a reply; ``temperature``, ``top_p`` and ``max_tokens`` may be overridden."""
        return (await self.complete(messages, **sampling)).response

    @property
    def openai_client(self) -> Any:
        """A real ``openai.AsyncOpenAI`` served in-process by this model."""
        if self._client is None:
            from ...models.server import in_process_client

            self._client = guarded_client(in_process_client(self), self.refuse_call_if_ended)
        return self._client


def forced_tool_problem(tool_choice: Any) -> str | None:
    """Why the local backend cannot answer a ``tool_choice`` (any but ``auto`` or ``none``),
    or None."""
    if tool_choice in ("auto", "none"):
        return None
    return (f"tool_choice {tool_choice!r}: the local backend cannot force a tool call (that "
            f"needs constrained decoding); use 'auto' or 'none'")


def local_sampling(model: Any, fallback_length: int | None = None) -> dict[str, Any]:
    """A `Model`'s sampling defaults for the local engine; an unset ``max_tokens`` means
    half the context (``max_model_len``, else ``fallback_length``), as on Trinity."""
    length = model.max_model_len or fallback_length or 2
    return {**request_sampling(model), "max_tokens": model.max_tokens or max(1, length // 2)}
