"""`OpenAIChatModel`: a `ChatModel` over any ``openai.AsyncOpenAI``-compatible client.

Trinity's rollout engines, the local backend's in-process server and any hosted
endpoint all speak the chat-completions protocol, so one adapter serves them all.
It receives its client, so importing it does not import ``openai``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ..dsl.chat import (
    SAMPLING_KEYS,
    ChatResponse,
    ModelCall,
    messages_problem,
    sampling_problem,
    unknown_options,
)
from ..dsl.records import redact_url
from ..dsl.turns import MarksTurns, TurnMarks
from ..errors import ConfigError, shortened
from ..keys import looks_like_a_key, without_keys
from ..wording import spelled
from .lifetime import EndsWithRollout, RolloutsClient
from .loop_http import loop_bound_http_client
from .recording import model_calls, recording_client


class KeyRefused(ConnectionError):
    """An endpoint refused the request's key (HTTP 401 or 403): said with `key_advice`."""


class OpenAIChatModel(MarksTurns, EndsWithRollout):
    """A `ChatModel` whose ``chat`` is one chat-completions request, recorded in ``calls``.

    Args:
        client: An ``openai.AsyncOpenAI``-compatible client.
        model: The model name sent with every request.
        name: The name workflows see (``model.name``); defaults to ``model``.
        sampling: Default request arguments (temperature, top_p, max_tokens, ...);
            keyword arguments given to `chat` override them.
        enable_thinking: Sent as ``chat_template_kwargs`` when set.
        direct: Post the request as given (``client.post``), skipping the openai
            package's client-side parameter transformation, which costs about 0.6 ms
            of CPU per request and dominates high-concurrency evals. Leave it off for
            clients whose ``chat.completions.create`` is wrapped (Trinity records
            history there).
        client_records_calls: The client records every call itself (Trinity's
            history-recording client), so `openai_client` hands it out as it is;
            otherwise `openai_client` is a recording copy, and calls made through it
            land in ``calls`` too.

    A backend makes one for each rollout and ends it with the rollout (`end_rollout`):
    a call after that (a workflow that kept the model of an earlier rollout) fails in words.
    """

    def __init__(self, client: Any, model: str, *, name: str | None = None,
                 sampling: Mapping[str, Any] | None = None, direct: bool = False,
                 enable_thinking: bool | None = None,
                 client_records_calls: bool = False,
                 key: tuple[str | None, str] | None = None) -> None:
        self._client = client
        # where its key came from, for a refused key: (variable or None, the option)
        self.key = key or (None, spelled("api_key_env"))
        # Trinity's client records every call itself: it is handed out as it is, behind a
        # view that refuses it once this model's rollout ended.
        self._view: Any = RolloutsClient(client, self) if client_records_calls else None
        self.direct = direct
        # vLLM and SGLang pass chat_template_kwargs to the template (Qwen3's thinking switch).
        self.template_kwargs = {} if enable_thinking is None else {
            "enable_thinking": enable_thinking}
        self.model = model
        self.name = name or model
        self.sampling = {k: v for k, v in (sampling or {}).items() if v is not None}
        self.calls: list[ModelCall] = []
        self.turns = TurnMarks(lambda: len(self.calls))
        self._streams: list[Any] = []  # streamed answers through openai_client

    def end_rollout(self) -> None:
        """End this model with its rollout (`EndsWithRollout.end_rollout`); a streamed
        answer left unread or unclosed is recorded as far as it was read."""
        for stream in self._streams:
            stream.finish()
        self._streams.clear()
        super().end_rollout()

    @property
    def openai_client(self) -> Any:
        """An ``openai.AsyncOpenAI`` reaching the same model; its calls are recorded."""
        if self._view is None:
            self._view = recording_client(self._client, self.calls.append, unreadable_reply,
                                          unusable_completion, self.refuse_call_if_ended,
                                          self._streams.append)
        return self._view

    async def chat(self, messages: list[dict[str, Any]], **sampling: Any) -> ChatResponse:
        """Send ``messages`` and return the first choice as a `ChatResponse`."""
        await self.refuse_call_if_ended()
        if _closed(self._client):
            # A rollout abandoned past its deadline, retrying under a bare except: after the
            # command closed its clients: the openai package raises without awaiting, so the
            # retry loop never gave the event loop back (no summary, no Ctrl-C). It waits.
            import asyncio

            await asyncio.sleep(CLOSED_PAUSE)
            raise ConnectionError(f"the client of the model endpoint "
                                  f"{redact_url(str(self._client.base_url))} was closed: the "
                                  f"command ended this rollout (past rollout_timeout, it was "
                                  f"abandoned)")
        if self.direct:  # the openai package's create() refuses a typo; a server ignores it
            problem = unknown_options(sampling, openai_chat_options())
            if problem is not None:
                raise TypeError(problem)
        problem = messages_problem(messages) or sampling_problem(sampling)
        if problem is not None:
            raise ValueError(problem)
        request = {"model": self.model, "messages": messages, **self.sampling, **sampling}
        extra = dict(request.pop("extra_body", None) or {})
        if self.template_kwargs:
            extra["chat_template_kwargs"] = {**self.template_kwargs,
                                             **extra.get("chat_template_kwargs", {})}
        completion = await self._completion(self._client, request, extra)
        self._check_completion(completion)
        call = model_calls({**request, **({"extra_body": extra} if extra else {})},
                           completion)[0]
        self.calls.append(call)
        return call.response

    async def _completion(self, client: Any, request: dict[str, Any],
                          extra: dict[str, Any]) -> Any:
        """One chat-completions request through ``client``, its failures in words."""
        try:
            if self.direct:
                from openai.types.chat import ChatCompletion

                # extra_body is the openai package's way to add body fields: add them here.
                return await client.post("/chat/completions", body={**request, **extra},
                                         cast_to=ChatCompletion)
            return await client.chat.completions.create(
                **request, **({"extra_body": extra} if extra else {}))
        except Exception as exc:
            import openai

            url = str(client.base_url)
            # Some transports report a refused connection as a timeout; say what happened.
            if isinstance(exc, openai.APIConnectionError):
                raise ConnectionError(f"cannot reach the model endpoint {redact_url(url)}"
                                      f"{through_proxy(url)}: {exc.__cause__ or exc}") from exc
            unreadable = unreadable_reply(exc, url)
            if unreadable is not None:
                raise unreadable from None
            key = getattr(client, "api_key", None)
            if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
                raise KeyRefused(
                    f"the model endpoint {redact_url(url)} refused the request (HTTP "
                    f"{exc.status_code}: {without_the_key(_server_said(exc), key)}); "
                    f"{key_advice(*self.key)}") from None
            if isinstance(key, str) and len(key) > 3 and key in str(exc):
                # (a server or proxy that quotes the request's Authorization header: the key
                # was shown, and written into the results)
                status = getattr(exc, "status_code", None)
                raise ConnectionError(
                    f"the model endpoint {redact_url(url)} answered"
                    f"{f' HTTP {status}' if status else ''}: "
                    f"{without_the_key(shortened(str(exc)), key)}") from None
            raise

    def _not_a_completion(self, what: str) -> ConnectionError:
        return not_a_completion(str(self._client.base_url), what)

    def _check_completion(self, completion: Any) -> None:
        """Refuse, in words, what a misconfigured URL or proxy answers instead of a
        completion (`completion_fault`)."""
        fault = completion_fault(completion)  # (the client's URL is read for an error only)
        if fault is not None:
            raise self._not_a_completion(fault)

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, name={self.name!r})"


def error_message(body: Any) -> Any:
    """The message of an endpoint's error body (``{"error": {"message": ...}}``, or the error
    object itself); a body of no such shape as it is."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        return inner.get("message", inner) if isinstance(inner, dict) else inner
    return body


def without_the_key(text: str, key: Any) -> str:
    """``text`` (an endpoint's words) without the request's ``key``, which a server or proxy
    may quote (``Incorrect API key provided: Bearer sk-...``), nor any other key."""
    if isinstance(key, str) and len(key) > 3:
        for form in _forms_of(key):
            text = re.sub(re.escape(form), "<the key, not shown>", text,
                          flags=re.IGNORECASE if "%" in form else 0)
    return without_keys(text)


def _forms_of(key: str) -> list[str]:
    """``key`` as sent, and as a server may write it back: URL-quoted once or twice (a
    redirect's ``?k=tok%2F...``, its hex in either case), or in base 64 (sweep 46 A-S3,
    sweep 47 A-S2); longest first, so no form is left half hidden."""
    import base64
    from urllib.parse import quote, quote_plus

    quoted = [quote(key, safe=""), quote(key), quote_plus(key)]
    coded = [encode(key.encode()).decode() for encode in (base64.b64encode,
                                                          base64.urlsafe_b64encode)]
    forms = {key, *quoted, *(quote(form, safe="") for form in quoted), *coded,
             *(form.rstrip("=") for form in coded)}
    return sorted(forms, key=len, reverse=True)


def _server_said(exc: Any) -> str:
    """An endpoint's error message, from its JSON body (`error_message`), else the openai
    package's text, on one line."""
    said = error_message(exc.body)
    return " ".join(shortened(str(said if said is not None else exc.message)).split())


#: How long a call on a closed client waits before it fails (see `OpenAIChatModel.chat`).
CLOSED_PAUSE = 0.1


def _closed(client: Any) -> bool:
    """Whether ``client`` (an ``openai.AsyncOpenAI``, or a wrapper without ``is_closed``)
    was closed."""
    is_closed = getattr(client, "is_closed", None)
    return bool(is_closed()) if callable(is_closed) else False


@functools.lru_cache(maxsize=1)
def openai_chat_options() -> frozenset[str]:
    """The keyword options ``chat.completions.create`` takes (``extra_body`` carries a
    server's own, such as vLLM's ``top_k``), but the request's own fields."""
    import inspect

    from openai.resources.chat.completions import AsyncCompletions

    taken = inspect.signature(AsyncCompletions.create).parameters
    return frozenset(name for name in taken
                     if name not in ("self", "messages", "model", "extra_headers",
                                     "extra_query", "timeout"))


def not_a_completion(url: str, what: str) -> ConnectionError:
    """An endpoint's reply that is no chat completion, said with what it was."""
    return ConnectionError(f"the model endpoint {redact_url(url)} answered {what}, not an "
                           f"OpenAI chat completion; check the URL (an OpenAI-compatible "
                           f"server's ends in /v1)")


def unreadable_reply(exc: Exception, url: str) -> ConnectionError | None:
    """What the openai package raised reading a reply that is no JSON it can parse, or a
    404 that is no model's (a URL without ``/v1``), in words (None: another error, left as
    it is)."""
    import json

    import openai

    if isinstance(exc, openai.NotFoundError) and "model" not in str(exc).lower():
        # (vLLM's 404 for an unknown model names it: that one is left in its own words)
        return not_a_completion(url, "404 Not Found for /chat/completions")
    if isinstance(exc, json.JSONDecodeError):
        return not_a_completion(url, "invalid JSON")
    if isinstance(exc, UnicodeDecodeError):  # the JSON decoder reads UTF-8 only
        return not_a_completion(url, "text that is not UTF-8")
    if isinstance(exc, RecursionError):
        return not_a_completion(url, "JSON nested too deep to read")
    said = str(getattr(exc, "message", ""))
    if type(exc).__name__ == "ClientResponseError" and said.startswith("Got more than "):
        # aiohttp's own limit on a header's length, said as a 400 the server never sent
        limit = said.split(" bytes", 1)[0].removeprefix("Got more than ")
        return ConnectionError(f"the model endpoint {redact_url(url)} answered a header "
                               f"longer than the {limit} bytes the HTTP client (aiohttp) "
                               f"reads; a proxy or server in between adds it: answer "
                               f"without it, or go around that proxy")
    if isinstance(exc, ValueError) and "integer string conversion" in str(exc):
        # Python's guard against quadratic parsing: its advice (raise the limit) is not
        # the user's to follow for a reply.
        return not_a_completion(url, "a number too long to read (thousands of digits)")
    return None


def completion_fault(completion: Any) -> str | None:
    """What an endpoint answered instead of a chat completion (an HTML page, an error, no
    choices, a choice without a message), or None for a completion."""
    from openai.types.chat import ChatCompletion

    if not isinstance(completion, ChatCompletion):
        text = str(completion).lstrip()
        return ("an HTML page" if text.startswith("<") else
                f"{type(completion).__name__} {text[:60]!r}")
    error = (completion.model_extra or {}).get("error")
    choices = completion.choices
    if not choices and error:  # a 200 carrying an error: the server's own words
        message = error.get("message", error) if isinstance(error, dict) else error
        return f"an error ({str(message)[:200]!r}) with status 200"
    if not choices:
        return "a completion with no choices"
    if not isinstance(choices, list):
        return f"choices that are a {type(choices).__name__}, not a list"
    if any(getattr(choice, "message", None) is None for choice in choices):
        return "a choice without a message"
    kinds = {type(choice.message).__name__ for choice in choices
             if not hasattr(choice.message, "content")}
    if kinds:
        return f"a message that is a {kinds.pop()}, not an object"
    return None


def unusable_completion(completion: Any, url: str) -> ConnectionError | None:
    """The error for an answer that is no chat completion (`completion_fault`), or None."""
    fault = completion_fault(completion)
    return None if fault is None else not_a_completion(url, fault)


def through_proxy(url: str) -> str:
    """How a request to ``url`` travels when the environment sends it through a proxy (as
    httpx, under the openai client, does), worded to follow the URL; else ``""``: a dead
    proxy fails with its own address, which names nothing the user gave."""
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return ""
    return (f" (through the proxy {redact_url(proxy)} that {parts.scheme}_proxy or all_proxy "
            f"sets; to reach it directly, add {parts.hostname} to no_proxy)")


def read_api_key(variable: str, where: str) -> str:
    """The API key in environment variable ``variable``; unset or empty, one line naming
    ``where`` it was given (``--api-key-env``, ``auxiliary_models.NAME.api_key_env``)."""
    import os
    import re

    key = os.environ.get(variable)
    if not variable.strip():  # (said to look like a key before)
        raise ConfigError(f"{where} {variable!r}: give the name of the environment variable "
                          f"holding the key, e.g. OPENAI_API_KEY")
    if key is None and not looks_like_a_key(variable) and not re.fullmatch(r"[A-Za-z_]\w*",
                                                                            variable):
        # (MY-KEY: no key, and was said to look like one)
        raise ConfigError(f"{where} {without_keys(variable)!r}: an environment variable's "
                          f"name holds only letters, digits and _ (and does not begin with a "
                          f"digit); give the name of the variable holding the key, e.g. "
                          f"OPENAI_API_KEY")
    if key is None and looks_like_a_key(variable):
        # not a variable's name: most likely the key itself, which is not shown again
        raise ConfigError(f"{where}: what was given is no environment variable's name (it "
                          f"looks like a key, which tunedsl takes only from the environment); "
                          f"export the key, e.g. export OPENAI_API_KEY=..., and give the "
                          f"variable's name")
    if key is None:
        raise ConfigError(f"{where} {variable}: that environment variable is not set; export "
                          f"it (the key is never read from a file)")
    if not key.strip():
        raise ConfigError(f"{where} {variable}: that environment variable is empty; put the "
                          f"key in it (the key is never read from a file)")
    problem = key_text_problem(key)
    if problem is not None:
        raise ConfigError(f"{where} {variable}: that environment variable {problem}")
    return key


def key_text_problem(key: str) -> str | None:
    """Why an API key's text cannot be sent in an HTTP header (said after the variable that
    holds it, never showing the key), or None."""
    if not key.isascii() or not key.isprintable():
        # an HTTP header cannot carry it: every request would fail, each blamed on the
        # workflow (a key read from a Windows file keeps its \r)
        what = "a line break or another control character" if key.isascii() else \
            "a character that is not ASCII"
        return f"holds {what}, and an API key is one line of ASCII; export the key alone"
    return None


def endpoint_client(base_url: str, *, api_key_env: str | None = None, max_retries: int = 3,
                    timeout: float = 600.0, label: str | None = None) -> Any:
    """An ``openai.AsyncOpenAI`` for an OpenAI-compatible endpoint (vLLM, SGLang, Ollama, ...).

    The API key is read from the environment variable ``api_key_env`` at this moment and
    never stored elsewhere; without one, ``"EMPTY"`` (what local servers accept) is sent.
    ``label`` names where the variable was given, for the error when it is not set
    (default: ``--api-key-env``, or ``api_key_env`` in Python).
    The openai package retries connection errors, 408, 409, 429 and 5xx answers
    ``max_retries`` times with exponential backoff; 401 is not retried.
    Its connections follow the running event loop (`loop_bound_http_client`), so every
    method of it also serves a synchronous agent running ``asyncio.run`` in a thread.
    """
    label = label or spelled("api_key_env")
    import openai

    if urlsplit(base_url).username is not None:  # aiohttp refuses it next to the key
        raise ConfigError(f"endpoint {redact_url(base_url)}: a user and password in the URL "
                          f"are not sent (the client sends an API key as a bearer token); "
                          f"give the URL without them, and the key's environment variable "
                          f"with {label}")
    api_key = "EMPTY" if api_key_env is None else read_api_key(api_key_env, label)
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=max_retries,
                              timeout=timeout, http_client=loop_bound_http_client(
                                  timeout=timeout))


def key_advice(variable: str | None, option: str) -> str:
    """What to check after an endpoint refused the key (HTTP 401/403): the key in
    ``variable``, given with ``option``, or, none given, that option to give one with."""
    if variable is None:
        return (f"check its API key: give the name of the environment variable holding it "
                f"with {option}")
    return (f"check its API key: the key in {variable} (given with {option}) was sent; "
            f"export the key this endpoint takes in it")


def request_sampling(model: Any) -> dict[str, Any]:
    """A `Model`'s per-request sampling settings, as an endpoint receives them."""
    return {key: getattr(model, key) for key in SAMPLING_KEYS}


def endpoint_models(spec: Any, *, base_url: str, model_name: str, name: str | None = None,
                    api_key_env: str | None = None,
                    label: str | None = None) -> tuple[Any, Any]:
    """``(client, factory)``: one client for ``base_url`` and a factory of
    `OpenAIChatModel` s (one per rollout) asking it for ``model_name`` with ``spec``'s
    sampling settings and thinking switch."""
    label = label or spelled("api_key_env")
    client = endpoint_client(base_url, api_key_env=api_key_env, label=label)
    sampling = request_sampling(spec)
    return client, lambda: OpenAIChatModel(client, model_name, name=name, sampling=sampling,
                                           direct=True, enable_thinking=spec.enable_thinking,
                                           key=(api_key_env, label))


def auxiliary_endpoint(model: Any, name: str) -> tuple[Any, Any]:
    """`endpoint_models` for an auxiliary model served by an endpoint
    (``Model(base_url=..., api_key_env=...)``)."""
    return endpoint_models(model, base_url=model.base_url, model_name=model.model_path,
                           name=name, api_key_env=model.api_key_env,
                           label=f"auxiliary_models.{name}.api_key_env")
