"""The model interface a workflow receives: `ChatModel`, its reply types, and `ModelCall`.

Backends implement it (Trinity's vLLM engines, the local CPU model, any
OpenAI-compatible endpoint, the test kit's scripted model); workflow code sees
only this protocol, which is why the same workflow runs on every backend. Every
implementation records each call it answers as one `ModelCall`, the record that
eval results, the test kit and the trainers read.
"""

from __future__ import annotations

import reprlib
from typing import Any, Protocol, runtime_checkable

import attrs

from ..errors import ArgumentError

#: The sampling settings an experiment's `Model` gives (fields of these names) and a
#: call may override: every backend passes them on under these names, the OpenAI API's.
SAMPLING_KEYS: tuple[str, ...] = ("temperature", "top_p", "max_tokens")

#: Below this temperature a reply is the most likely one, not a sample: vLLM's
#: ``_SAMPLING_EPS`` (vllm/sampling_params.py), which the local engine follows.
GREEDY_BELOW = 1e-5


def _sampling_rules() -> dict[str, tuple[Any, str]]:
    import math

    def number(low: float, high: float | None = None, above: bool = False) -> Any:
        return lambda v: (isinstance(v, (int, float)) and not isinstance(v, bool)
                          and math.isfinite(v) and (v > low if above else v >= low)
                          and (high is None or v <= high))
    return {
        "temperature": (number(0), "a finite number >= 0"),
        "top_p": (number(0, 1, above=True), "a number above 0, at most 1"),
        "max_tokens": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                       "a whole number >= 1"),
        "max_completion_tokens": (lambda v: isinstance(v, int) and not isinstance(v, bool)
                                  and v >= 1, "a whole number >= 1"),
        "n": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
              "a whole number >= 1"),
    }


def messages_problem(messages: Any) -> str | None:
    """The one line for chat messages that are not a list of ``{"role": ..., ...}`` objects
    (a list of strings, say), or None: every `ChatModel` checks its calls so."""
    if not isinstance(messages, (list, tuple)) or not messages:
        return (f"model.chat(messages): give a non-empty list of messages such as "
                f"[{{\"role\": \"user\", \"content\": \"...\"}}] (got "
                f"{type(messages).__name__} {messages!r:.60})")
    for index, message in enumerate(messages):
        if isinstance(message, ChatResponse):  # the openai habit: the reply appended as is
            return (f"model.chat(messages): message {index} is a ChatResponse (a reply), not "
                    f"a message; append reply.as_message(), the assistant message it is")
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return (f"model.chat(messages): message {index} must be an object with a role, "
                    f"such as {{\"role\": \"user\", \"content\": \"...\"}} (got "
                    f"{type(message).__name__} {message!r:.60})")
        content = message.get("content")
        # what an OpenAI-compatible server takes: text, a list of content parts, or none
        if content is not None and not isinstance(content, str) and not (
                isinstance(content, list) and all(isinstance(p, dict) for p in content)):
            return (f"model.chat(messages): message {index}'s content is "
                    f"{type(content).__name__} {content!r:.40}; give text (str(...) of it), "
                    f"or a list of content parts")
    return None


def sampling_problem(options: Any) -> str | None:
    """The one line for a chat call's sampling option whose value no backend samples with
    (a temperature of NaN or below 0, a top_p of 0, max_tokens of 0), as `Model`'s own
    fields refuse them, or None. Every `ChatModel` checks its calls so, the test kit's too,
    so ``check`` refuses what a run would."""
    for key, (good, need) in _sampling_rules().items():
        value = options.get(key)
        if value is not None and not good(value):
            return f"model.chat({key}={value!r}): {key} must be {need}"
    return _tools_problem(options.get("tools"))


def _tools_problem(tools: Any) -> str | None:
    """Tools that are not a list of function tools, as an OpenAI-compatible server refuses
    them (HTTP 400): said by every model, the test kit's too."""
    if tools is None:
        return None
    bad = not isinstance(tools, (list, tuple)) or next(
        (tool for tool in tools if not isinstance(tool, dict) or tool.get("type") != "function"
         or not isinstance(tool.get("function"), dict)
         or not isinstance(tool["function"].get("name"), str)), None) is not None
    if not bad:
        return None
    return (f"model.chat(tools={tools!r:.60}): tools must be a list of function tools, such as "
            f"[{{\"type\": \"function\", \"function\": {{\"name\": \"add\", "
            f"\"parameters\": {{...}}}}}}]")


def unknown_options(options: Any, known: Any) -> str | None:
    """The one line for keyword options of a chat call that are not ``known`` (a typo such
    as ``temprature`` would otherwise sample with the default), or None."""
    from ..errors import did_you_mean

    unknown = sorted(set(options) - set(known))
    if not unknown:
        return None
    takes = (f"it takes {', '.join(sorted(known))}" if len(known) <= 10 else
             "it takes the OpenAI chat-completions parameters (a server's own go in "
             "extra_body)")
    return (f"model.chat() got the unknown option(s) {', '.join(map(repr, unknown))}"
            f"{did_you_mean(unknown[0], known)}; {takes}")


@attrs.frozen
class ToolCall:
    """One function call the model asked for (OpenAI chat-completions shape): its
    ``arguments`` are the JSON text a model sends, as a workflow parses them."""

    id: str = attrs.field()
    name: str = attrs.field()
    arguments: str = attrs.field(default="{}")

    @id.validator
    @name.validator
    def _text(self, attribute: Any, value: Any) -> None:
        if not isinstance(value, str):  # a workflow keys its tools by them
            raise ArgumentError(f"ToolCall({attribute.name}={value!r}): give the call's "
                                f"{attribute.name} as text, e.g. ToolCall(id='c1', "
                                f"name='add', arguments='{{\"a\": 1}}')")

    @arguments.validator
    def _json_text(self, _: Any, value: Any) -> None:
        if not isinstance(value, str):  # a workflow's json.loads would fail on it later
            raise ArgumentError(f"ToolCall(arguments={value!r}): arguments are the JSON text "
                                f"a model sends; write arguments=json.dumps(...)")


#: How a ChatResponse's tool calls are written.
_TOOL_CALLS_FIX = ("tool_calls is a list of ToolCall(id=..., name=..., arguments=...), e.g. "
                   "[ToolCall(id='c1', name='add', arguments='{\"a\": 1}')]")



def _tool_calls(calls: Any) -> tuple[ToolCall, ...]:
    """A reply's tool calls, checked: a string or a mapping is iterable too, and became
    its characters or keys."""
    if calls is None:
        return ()
    if isinstance(calls, (str, bytes, dict, ToolCall)) or not hasattr(calls, "__iter__"):
        raise ArgumentError(f"ChatResponse(tool_calls={reprlib.repr(calls)}): {_TOOL_CALLS_FIX}")
    found = tuple(calls)
    for call in found:
        if not isinstance(call, ToolCall):
            raise ArgumentError(f"ChatResponse(tool_calls=[..., {reprlib.repr(call)}, ...]): "
                                f"{_TOOL_CALLS_FIX}")
    return found


def _content(value: Any) -> str:
    """A reply's text: None (a reply of tool calls alone, as OpenAI sends it) is ""."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ArgumentError(f"ChatResponse(content={reprlib.repr(value)}): content is the reply's "
                            f"text; give a str (\"\" or None for a reply of tool calls alone)")
    return value


def _text_or_none(instance: Any, attribute: Any, value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise ArgumentError(f"ChatResponse({attribute.name}={reprlib.repr(value)}): give text or "
                            f"None")


@attrs.frozen
class ChatResponse:
    """A model's reply to one `ChatModel.chat` call.

    Raises:
        ArgumentError: a field of another type than its own (text, a list of `ToolCall`).
    """

    content: str = attrs.field(converter=_content)
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tool_calls)
    reasoning_content: str | None = attrs.field(default=None, validator=_text_or_none)
    finish_reason: str | None = attrs.field(default=None, validator=_text_or_none)
    #: What the model said in declining to answer (OpenAI's ``message.refusal``), if it did.
    refusal: str | None = attrs.field(default=None, validator=_text_or_none)

    def as_message(self) -> dict[str, Any]:
        """The reply as the assistant message that continues a conversation (OpenAI's form,
        tool calls and reasoning included): ``messages.append(reply.as_message())``."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": c.arguments}} for c in self.tool_calls]
        if self.reasoning_content:
            message["reasoning_content"] = self.reasoning_content
        return message


@attrs.frozen(kw_only=True)
class ModelCall:
    """One chat-completion call a model answered, as every backend records it.

    Attributes:
        messages: The messages sent (OpenAI format).
        response: The reply: text, tool calls, reasoning text and finish reason.
        sampling: The request's other arguments as sent (``temperature``, ``top_p``,
            ``max_tokens``, ``tools``, ...), the experiment's defaults included.
        prompt_tokens: Prompt tokens, as the server counted them.
        completion_tokens: Reply tokens, as the server counted them.
        prompt_ids: The prompt's token ids, where the backend has them (local, Trinity).
        response_ids: The reply's token ids, likewise.
        logprobs: The log-probability each reply token was sampled with, likewise.
        streamed: The request asked for a streamed answer (``stream=True`` through the
            model's ``openai_client``, as AgentScope's models send by default).
    """

    messages: list[dict[str, Any]]
    response: ChatResponse
    sampling: dict[str, Any] = attrs.field(factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_ids: tuple[int, ...] = ()
    response_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    streamed: bool = False

    def to_json(self) -> dict[str, Any]:
        """The call as plain data, the form ``rollouts.jsonl`` and eval results keep: the
        messages, the reply's text, tool calls, reasoning and finish reason, the token
        counts and the sampling settings (token ids and log-probs are left out), and a
        refusal when the model gave one."""
        reply = self.response
        return {
            "messages": self.messages, "reply": reply.content,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                           for c in reply.tool_calls],
            "reasoning": reply.reasoning_content, "finish_reason": reply.finish_reason,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "sampling": self.sampling,
            **({"refusal": reply.refusal} if reply.refusal is not None else {}),
        }  # fmt: skip


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

    def end_turn(self, *, reward: float | None = None, state: Any = None) -> None:
        """End the workflow's turn: the calls answered since the previous ``end_turn``,
        which earned ``reward`` from the state named ``state`` (`tunedsl.dsl.turns`; the
        trained model's, read by the ``gigpo`` advantage)."""
        ...
