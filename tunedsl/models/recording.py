"""Recording what an OpenAI client is asked and answers, as `ModelCall` s.

`OpenAIChatModel` records its own ``chat`` calls with `model_calls`; calls that an
agent framework makes through the model's ``openai_client`` go through a
`recording_client`, a copy of the client (sharing its connections) that records each
chat completion it is answered, by whichever method, streamed or not, the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ..dsl.chat import ChatResponse, ModelCall, ToolCall
from ..dsl.records import redact_url

#: Request fields that are not sampling settings.
_NOT_SAMPLING = ("model", "messages", "stream", "stream_options", "n", "extra_headers",
                 "extra_query", "timeout")


def _sampling(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k not in _NOT_SAMPLING}


def reasoning_of(message: Any) -> str | None:
    """The reasoning a server parsed out of a reply (or a streamed delta): vLLM 0.10 and
    newer name it ``reasoning``, older servers (and SGLang, DeepSeek) ``reasoning_content``.
    Anything but text is no reasoning."""
    for name in ("reasoning_content", "reasoning"):
        text = getattr(message, name, None)
        if isinstance(text, str) and text:
            return text
    return None


def _not_a_completion(what: str) -> TypeError:
    return TypeError(f"the endpoint's reply has {what}; it does not answer as an OpenAI chat "
                     f"completion")


def _tool_calls(message: Any) -> tuple[ToolCall, ...]:
    """A reply's tool calls, each with a function name and its arguments as text (the
    openai package keeps whatever the server sent, so each is checked here).

    Raises:
        TypeError: a tool call without a function name, or with arguments that are not text.
    """
    calls = getattr(message, "tool_calls", None) or ()
    if not isinstance(calls, (list, tuple)):
        raise _not_a_completion(f"tool_calls that are a {type(calls).__name__}, not a list")
    found = []
    for index, call in enumerate(calls):
        function = getattr(call, "function", None)
        name = getattr(function, "name", None)
        arguments = getattr(function, "arguments", None)
        if not isinstance(name, str) or not name:
            raise _not_a_completion(f"tool call {index} without a function name")
        if arguments is not None and not isinstance(arguments, str):
            raise _not_a_completion(f"tool call {index} ({name}) whose arguments are a "
                                    f"{type(arguments).__name__}, not JSON text")
        call_id = getattr(call, "id", None)
        found.append(ToolCall(id=call_id if isinstance(call_id, str) else f"call_{index}",
                              name=name, arguments=arguments or "{}"))
    return tuple(found)


def reply_text(content: Any) -> str:
    """A reply's content as text, read at the boundary where the endpoint's answer enters
    (the openai package keeps whatever types the server sent): a string; nothing (a reply
    of tool calls only) as ""; a list of content parts, as some OpenAI-compatible servers
    answer, as its text parts joined. Anything else is no chat reply.

    Raises:
        TypeError: the content is neither text, nothing, nor a list of parts.
    """
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(part, dict) or hasattr(part, "type")
                                         for part in content):
        texts = [part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
                 for part in content]
        return "".join(text for text in texts if isinstance(text, str))
    import reprlib

    raise _not_a_completion(f"content {reprlib.repr(content)} (a {type(content).__name__}), "
                            f"not text")


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def token_count(value: Any) -> int:
    """A token count from an endpoint's ``usage``: a whole number, else 0 (unknown)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return 0


def model_calls(request: dict[str, Any], completion: Any) -> list[ModelCall]:
    """One `ModelCall` per choice of a ``ChatCompletion`` answering ``request``.

    The prompt's tokens are counted on the first choice only (n choices share one prompt).
    """
    usage = getattr(completion, "usage", None)
    prompt_tokens = token_count(getattr(usage, "prompt_tokens", 0))
    completion_tokens = token_count(getattr(usage, "completion_tokens", 0))
    choices = list(completion.choices)
    calls = []
    for index, choice in enumerate(choices):
        message = choice.message
        response = ChatResponse(
            content=reply_text(message.content), tool_calls=_tool_calls(message),
            reasoning_content=reasoning_of(message),
            finish_reason=_text_or_none(choice.finish_reason),
            refusal=_text_or_none(getattr(message, "refusal", None)) or None,
        )
        calls.append(ModelCall(
            messages=[dict(m) for m in request["messages"]], response=response,
            sampling=_sampling(request), prompt_tokens=prompt_tokens if index == 0 else 0,
            # Usage counts all choices together; a lone choice gets the exact count.
            completion_tokens=completion_tokens if len(choices) == 1 else 0,
        ))
    return calls


class _Choice:
    """A streamed choice put back together from its deltas."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None

    def add(self, choice: Any) -> None:
        delta = choice.delta
        if delta is not None:
            self.content.append(reply_text(getattr(delta, "content", None)))
            reasoning = reasoning_of(delta)
            if reasoning:
                self.reasoning.append(reasoning)
            refusal = _text_or_none(getattr(delta, "refusal", None))
            if refusal:
                self.refusal.append(refusal)
            for call in getattr(delta, "tool_calls", None) or ():
                entry = self.tool_calls.setdefault(call.index, {"id": "", "name": "",
                                                                "arguments": ""})
                entry["id"] = call.id or entry["id"]
                if call.function is not None:
                    entry["name"] += call.function.name or ""
                    entry["arguments"] += call.function.arguments or ""
        self.finish_reason = _text_or_none(choice.finish_reason) or self.finish_reason

    def response(self) -> ChatResponse:
        calls = [ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"] or "{}")
                 for _, c in sorted(self.tool_calls.items())]
        return ChatResponse(content="".join(self.content), tool_calls=calls,
                            reasoning_content="".join(self.reasoning) or None,
                            finish_reason=self.finish_reason,
                            refusal="".join(self.refusal) or None)


class RecordingStream:
    """Wraps an ``openai.AsyncStream`` of chunks: yields them unchanged and, at the end,
    records each choice as a `ModelCall`. Anything else is the wrapped stream's."""

    def __init__(self, stream: Any, request: dict[str, Any],
                 record: Callable[[ModelCall], None], url: str = "") -> None:
        self._stream, self._request, self._record, self._url = stream, request, record, url
        self._choices: dict[int, _Choice] = {}
        self._usage: Any = None
        self._done = False
        self._chunks = 0

    def __getattr__(self, name: str) -> Any:
        if name == "response":  # what the SDK's stream() helper closes when left early
            return _ClosingResponse(self._stream.response, self.finish)
        return getattr(self._stream, name)

    def __aiter__(self) -> RecordingStream:
        return self

    async def __anext__(self) -> Any:
        import json

        try:
            chunk = await self._stream.__anext__()
        except json.JSONDecodeError as exc:  # the openai package's reading of an event
            raise ConnectionError(
                f"the model endpoint {redact_url(self._url)} sent a streamed event that is "
                f"not JSON ({exc}): {exc.doc[:80]!r}; check that it streams chat "
                f"completions") from None
        except StopAsyncIteration:
            if not self._chunks:  # no answer at all: say what came instead
                response = getattr(self._stream, "response", None)
                headers = getattr(response, "headers", None) or {}
                raise no_stream(self._url, str(headers.get("content-type", ""))) from None
            if not self._choices:  # events, but none of a reply (a usage chunk alone)
                raise ConnectionError(
                    f"the model endpoint {redact_url(self._url)} answered a streamed request "
                    f"with {self._chunks} event{'s' * (self._chunks != 1)} and no choice in "
                    f"them (no reply); check that it streams chat completions") from None
            self.finish()
            raise
        self._chunks += 1
        for choice in chunk.choices or ():
            self._choices.setdefault(choice.index, _Choice()).add(choice)
        if getattr(chunk, "usage", None) is not None:
            self._usage = chunk.usage
        return chunk

    async def __aenter__(self) -> RecordingStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the wrapped stream (what was read so far is recorded)."""
        self.finish()
        await self._stream.close()

    def finish(self) -> None:
        """Record what was read so far, once: at the stream's end, when it is closed, or
        when the rollout ends with it left open."""
        if self._done:
            return
        self._done = True
        _record_choices(self._choices, self._usage, self._request, self._record)


class _ClosingResponse:
    """A streamed answer's HTTP response whose ``aclose`` first records what was read."""

    def __init__(self, response: Any, finish: Callable[[], None]) -> None:
        self._response, self._finish = response, finish

    def __getattr__(self, name: str) -> Any:
        return getattr(self._response, name)

    async def aclose(self) -> None:
        self._finish()
        await self._response.aclose()


async def _refuse_a_json_answer(stream: Any,
                                refuse: Callable[[Any, str], Exception | None] | None,
                                url: str) -> None:
    """Refuse a streamed request's answer that is one JSON object, not server-sent events
    (the openai package would read it as a stream of nothing): an error the endpoint
    answered with status 200 in its own words, else `no_stream`'s line. An answer that is
    not JSON is left to the stream (events sent under another content type)."""
    import json

    response = getattr(stream, "response", None)
    content_type = str((getattr(response, "headers", None) or {}).get("content-type", ""))
    if response is None or not content_type.startswith("application/json"):
        return
    body = await response.aread()  # the stream reads it again from memory
    try:
        data = json.loads(body)
    except ValueError:
        return
    if isinstance(data, dict) and "error" in data and refuse is not None:
        from openai.types.chat import ChatCompletion

        refused = refuse(ChatCompletion.construct(**data), url)
        if refused is not None:
            raise refused
    raise no_stream(url, content_type)


def no_stream(url: str, content_type: str) -> ConnectionError:
    """The error for a streamed request answered without a single event (an endpoint that
    does not stream answers a plain completion, which the openai package reads as a stream
    of nothing: an empty reply)."""
    where = f"the model endpoint {redact_url(url)}"
    if content_type.startswith("application/json"):
        return ConnectionError(f"{where} answered a streamed request with a plain completion "
                               f"(application/json), not server-sent events: it does not "
                               f"stream; send the request without stream=True")
    return ConnectionError(f"{where} answered a streamed request with no event (content type "
                           f"{content_type or 'none'}); check that it streams chat completions")


def _record_choices(choices: dict[int, _Choice], usage: Any, request: dict[str, Any],
                    record: Callable[[ModelCall], None]) -> None:
    """Record a streamed answer's choices, put back together, as `ModelCall` s."""
    prompt = token_count(getattr(usage, "prompt_tokens", 0))
    completion = token_count(getattr(usage, "completion_tokens", 0))
    lone = len(choices) == 1
    for position, (_, choice) in enumerate(sorted(choices.items())):
        record(ModelCall(
            messages=[dict(m) for m in request["messages"]], response=choice.response(),
            sampling=_sampling(request), prompt_tokens=prompt if position == 0 else 0,
            completion_tokens=completion if lone else 0,
        ))


def recording_client(client: Any, record: Callable[[ModelCall], None],
                     reword: Callable[[Exception, str], Exception | None] | None = None,
                     refuse: Callable[[Any, str], Exception | None] | None = None,
                     before: Callable[[], Awaitable[None]] | None = None,
                     opened: Callable[[Any], None] | None = None) -> Any:
    """A copy of ``client`` (same connections) that records every chat completion it is
    answered, whichever method asked for it: ``chat.completions.create`` (streamed or
    not), ``parse``, ``stream``, raw and streaming responses, a plain ``post``; copies of
    it (``with_options``, ``copy``) record too. Other routes (``models``, ``responses``,
    ``embeddings``) go through unrecorded. The original client is left as it was.

    Every request goes through the client's one ``request`` method, which is where this
    records. ``reword(error, base_url)`` may say an error of a chat-completion request in
    other words (None: as it is); ``refuse(answer, base_url)`` may refuse an answer that is
    no completion; ``before()`` runs before each request (and may refuse it);
    ``opened(stream)`` is told of each streamed answer (anything with ``finish()``, which
    records what was read), which records when it ends or is closed.
    """
    return watched_client(client, _Recording(record, reword, refuse, before, opened).request)


def watched_client(client: Any, watch: Callable[..., Any]) -> Any:
    """A copy of ``client`` (same connections) whose every request is made by
    ``watch(send, cast_to, options, *args, **kwargs)``, ``send`` being the client's own
    ``request`` (every method of the openai package's client goes through it); copies of
    it (``with_options``, ``copy``) are watched too. The original is left as it was."""
    view = client.with_options()
    send, original_copy = view.request, view.copy

    async def request(cast_to: Any, options: Any, *args: Any, **kwargs: Any) -> Any:
        return await watch(send, cast_to, options, *args, **kwargs)

    def copied(**options: Any) -> Any:
        return watched_client(original_copy(**options), watch)

    view.request = request
    view.with_options = view.copy = copied
    return view


@attrs.frozen
class _Recording:
    """What a `recording_client` does with each request (see there)."""

    record: Callable[[ModelCall], None]
    reword: Callable[[Exception, str], Exception | None] | None
    refuse: Callable[[Any, str], Exception | None] | None
    before: Callable[[], Awaitable[None]] | None
    opened: Callable[[Any], None] | None

    async def request(self, send: Any, cast_to: Any, options: Any, *args: Any,
                      **kwargs: Any) -> Any:
        """One request through ``send`` (the client's own ``request``), its chat completion
        recorded."""
        if self.before is not None:
            await self.before()
        if not _asks_for_chat_completion(options):
            return await send(cast_to, options, *args, **kwargs)
        base_url = str(send.__self__.base_url)
        try:
            answer = await send(cast_to, options, *args, **kwargs)
        except Exception as exc:
            reworded = self.reword(exc, base_url) if self.reword is not None else None
            if reworded is not None:
                raise reworded from None
            raise
        request = _chat_request(options)
        raw = str((options.headers or {}).get(_RAW, "")).lower()
        if raw == "true":  # with_raw_response: read already
            await _record_raw(answer, request, self.record, self.refuse, base_url)
        elif raw == "stream":  # with_streaming_response: read by the caller, as it arrives
            kept = _watch_stream(answer, request, self.record, self.refuse, base_url)
            if kept is not None and self.opened is not None:
                self.opened(kept)
        elif request.get("stream"):
            await _refuse_a_json_answer(answer, self.refuse, base_url)
            stream = RecordingStream(answer, request, self.record, base_url)
            if self.opened is not None:
                self.opened(stream)
            return stream
        else:
            _record_completion(answer, request, self.record, self.refuse, base_url)
        return answer


def _asks_for_chat_completion(options: Any) -> bool:
    """Whether a request (the openai package's ``FinalRequestOptions``) asks for a chat
    completion."""
    url = str(getattr(options, "url", ""))
    return str(getattr(options, "method", "")).lower() == "post" and \
        url.split("?")[0].rstrip("/").endswith("chat/completions") and \
        isinstance(getattr(options, "json_data", None), dict)


def _chat_request(options: Any) -> dict[str, Any]:
    """A chat-completion request as `model_calls` reads it: the body's fields, with what
    ``extra_body`` added kept apart, as `OpenAIChatModel.chat` records it."""
    extra = getattr(options, "extra_json", None)
    return {**options.json_data, **({"extra_body": dict(extra)} if extra else {})}


def _record_completion(completion: Any, request: dict[str, Any],
                       record: Callable[[ModelCall], None],
                       refuse: Callable[[Any, str], Exception | None] | None,
                       base_url: str) -> None:
    refused = refuse(completion, base_url) if refuse is not None else None
    if refused is not None:
        raise refused
    for call in model_calls(request, completion):
        record(call)


async def _record_raw(answer: Any, request: dict[str, Any],
                      record: Callable[[ModelCall], None],
                      refuse: Callable[[Any, str], Exception | None] | None,
                      base_url: str) -> None:
    """Record the completion of a raw response (``with_raw_response``), its body read by
    the openai package already."""
    http = answer.http_response
    if http.status_code >= 400:
        return  # the caller reads the error from it
    body = await http.aread()
    _record_body(body, str(http.headers.get("content-type", "")), request, record, refuse,
                 base_url, whole=True)


def _watch_stream(answer: Any, request: dict[str, Any], record: Callable[[ModelCall], None],
                  refuse: Callable[[Any, str], Exception | None] | None,
                  base_url: str) -> Any:
    """A streaming response (``with_streaming_response``), handed over as it arrives: its
    body is kept as the caller reads it, and recorded when it is read to its end or closed
    (or when the rollout ends with it open: the returned stream's ``finish``)."""
    http = answer.http_response
    if http.status_code >= 400:
        return None  # the caller reads the error from it
    kind = str(http.headers.get("content-type", ""))
    http.stream = _kept_stream(http.stream, lambda body, whole: _record_body(
        _decoded(body, str(http.headers.get("content-encoding", ""))), kind, request,
        record, refuse, base_url, whole=whole))
    return http.stream


def _kept_stream(stream: Any, done: Callable[[bytes, bool], None]) -> Any:
    """``stream`` (an HTTP response's byte stream) yielding its bytes unchanged, and handing
    ``done(body, whole)`` what passed once it ends, is closed, or is finished."""
    try:
        from httpx2 import AsyncByteStream
    except ImportError:  # pragma: no cover - an older openai
        from httpx import AsyncByteStream  # type: ignore[assignment]

    class Kept(AsyncByteStream):
        def __init__(self) -> None:
            self.parts: list[bytes] = []
            self.done = self.whole = False

        async def __aiter__(self) -> Any:
            async for part in stream:
                self.parts.append(part)
                yield part
            self.whole = True
            self.finish()

        async def aclose(self) -> None:
            try:
                await stream.aclose()
            finally:
                self.finish()

        def finish(self) -> None:
            if not self.done:
                self.done = True
                done(b"".join(self.parts), self.whole)

    return Kept()


def _decoded(body: bytes, encoding: str) -> bytes:
    """A response body as sent, decompressed when its content encoding is gzip or deflate
    (else as it is: an encoding this cannot read leaves it unreadable, and unrecorded)."""
    if encoding.strip().lower() not in ("gzip", "deflate"):
        return body
    import zlib

    try:
        return zlib.decompressobj(wbits=47).decompress(body)
    except zlib.error:
        return body


def _record_body(body: bytes, content_type: str, request: dict[str, Any],
                 record: Callable[[ModelCall], None],
                 refuse: Callable[[Any, str], Exception | None] | None,
                 base_url: str, *, whole: bool) -> None:
    """Record the completion a response body holds: a JSON completion, or a stream's events
    (as far as they were read). A body left unread in part (``whole`` False) that cannot be
    read is not recorded: the caller chose to stop reading it."""
    import json

    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    text = body.decode("utf-8", errors="replace")
    if not request.get("stream"):
        try:
            data = json.loads(text)
        except ValueError:
            if not whole:
                return
            data = text
        completion = ChatCompletion.construct(**data) if isinstance(data, dict) else data
        _record_completion(completion, request, record, refuse, base_url)
        return
    choices: dict[int, _Choice] = {}
    usage = None
    if whole and not any(line.startswith("data:") for line in text.splitlines()):
        raise no_stream(base_url, content_type)
    for line in text.splitlines():
        if not line.startswith("data:") or line[5:].strip() in ("", "[DONE]"):
            continue
        try:
            data = json.loads(line[5:])
        except ValueError:
            continue  # the caller's reader meets it too, and says so
        if not isinstance(data, dict):
            continue
        chunk = ChatCompletionChunk.construct(**data)
        for choice in chunk.choices or ():
            choices.setdefault(choice.index, _Choice()).add(choice)
        usage = chunk.usage if getattr(chunk, "usage", None) is not None else usage
    _record_choices(choices, usage, request, record)


#: The header with which the openai package asks a method for its raw HTTP response.
_RAW = "X-Stainless-Raw-Response"


def guarded_client(client: Any, before: Callable[[], Awaitable[None]]) -> Any:
    """A copy of ``client`` (an ``openai.AsyncOpenAI``: the in-process server's), its copies
    too, whose every request first awaits ``before()``, which may refuse it."""

    async def guarded(send: Any, *arguments: Any, **options: Any) -> Any:
        await before()
        return await send(*arguments, **options)

    return watched_client(client, guarded)

