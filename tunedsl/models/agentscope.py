"""AgentScope chat models bound to a tunedsl model's own OpenAI client.

A workflow or judge written for AgentScope's tuner annotates ``model`` (and
``auxiliary_models``) with ``agentscope.model.ChatModelBase`` and hands the model to a
``ReActAgent``. `as_agentscope` builds the AgentScope ``OpenAIChatModel`` that such
code expects, with its client replaced by the tunedsl model's ``openai_client``: the
local backend's in-process server, the eval endpoint's recording client, Trinity's
history-recording client, or the scripted model's. Every call the agent makes is
therefore recorded, and trained on, like a call through ``model.chat``; the
experiment's sampling settings are sent with each request.

Nothing here imports AgentScope until a model is built, and `wants_agentscope` only
looks at AgentScope when the user's own code has already imported it.
"""

from __future__ import annotations

import functools
import sys
import typing
from collections.abc import Callable
from typing import Any

from ..dsl.chat import SAMPLING_KEYS
from ..errors import ConfigError

INSTALL_HINT = 'pip install "tunedsl[agentscope]"'


def _base_class() -> type | None:
    """AgentScope's ``ChatModelBase``, if the process has imported AgentScope."""
    module = sys.modules.get("agentscope.model")
    return getattr(module, "ChatModelBase", None)


def _mentions(annotation: Any, base: type) -> bool:
    if isinstance(annotation, type):
        return issubclass(annotation, base)
    return any(_mentions(argument, base) for argument in typing.get_args(annotation))


@functools.lru_cache(maxsize=1024)
def _annotated(fn: Callable[..., Any], parameter: str, base: type) -> bool:
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve: read the raw ones
        hints = getattr(fn, "__annotations__", {})
    return _mentions(hints.get(parameter), base)


def wants_agentscope(fn: Callable[..., Any], parameter: str) -> bool:
    """Whether ``fn``'s ``parameter`` is annotated with AgentScope's ``ChatModelBase``
    (also inside ``dict[str, ChatModelBase] | None``)."""
    base = _base_class()
    return base is not None and _annotated(fn, parameter, base)


def _version() -> tuple[int, ...]:
    import agentscope

    return tuple(int(part) for part in agentscope.__version__.split(".")[:2] if part.isdigit())


def _request_defaults(model: Any) -> dict[str, Any]:
    """The sampling settings a tunedsl model applies to its own calls."""
    defaults = dict(getattr(model, "sampling", None) or {})
    template = getattr(model, "template_kwargs", None)
    if template:
        extra = dict(defaults.get("extra_body") or {})
        extra["chat_template_kwargs"] = {**template, **extra.get("chat_template_kwargs", {})}
        defaults["extra_body"] = extra
    return defaults


def as_agentscope(model: Any, *, stream: bool = False) -> Any:
    """An AgentScope chat model whose requests reach ``model`` and are recorded by it.

    Use it in code that builds AgentScope agents without annotating its parameters::

        agent = ReActAgent(name="solver", sys_prompt="...", formatter=OpenAIChatFormatter(),
                           model=tunedsl.as_agentscope(model))

    The AgentScope model has ``model``'s ``end_turn`` too, for a workflow that ends its
    turns on the model it was handed.

    Args:
        model: The `ChatModel` a workflow or judge received.
        stream: Whether the AgentScope model streams its requests (AgentScope's own
            default is to stream; tunedsl's default, like Trinity's tuner adapter, is not).

    Raises:
        ConfigError: AgentScope is not installed.
    """
    if not callable(getattr(model, "chat", None)):
        if type(model).__module__.startswith("agentscope.") and hasattr(model, "stream"):
            # handed over as AgentScope's already (the parameter's ChatModelBase annotation)
            raise ConfigError(f"as_agentscope({type(model).__name__}): the model is an "
                              f"AgentScope model already (the workflow's ChatModelBase "
                              f"annotation made it one), so use it as it is; to stream, set "
                              f"model.stream = True")
        raise ConfigError(f"as_agentscope({model!r}): give the ChatModel a workflow or judge "
                          f"received (its model argument)")
    try:
        from agentscope.model import OpenAIChatModel
    except ImportError:
        raise ConfigError(f"{getattr(model, 'name', model)!r}: AgentScope is not installed; "
                          f"{INSTALL_HINT}") from None
    name = getattr(model, "model", None) or model.name
    defaults = _request_defaults(model)
    if _version() >= (2,):
        bound = _agentscope2(OpenAIChatModel, name, defaults, stream)
    else:
        bound = OpenAIChatModel(model_name=name, api_key="EMPTY", stream=stream,
                                generate_kwargs=defaults)
    bound.client = model.openai_client
    if callable(getattr(model, "end_turn", None)):  # the workflow ends turns on what it got
        bound.end_turn = model.end_turn
    return bound


def _agentscope2(cls: Any, name: str, defaults: dict[str, Any], stream: bool) -> Any:
    """AgentScope 2.x keeps settings in a credential and a Parameters record."""
    from agentscope.credential import OpenAICredential

    parameters = cls.Parameters(**{key: defaults[key] for key in SAMPLING_KEYS
                                   if defaults.get(key) is not None})
    return cls(credential=OpenAICredential(api_key="EMPTY"), model=name, parameters=parameters,
               stream=stream, extra_body=defaults.get("extra_body"))


def adapt(fn: Callable[..., Any], parameter: str, value: Any) -> Any:
    """``value`` (a model, or a mapping of them) as ``fn``'s ``parameter`` wants it."""
    if value is None or not wants_agentscope(fn, parameter):
        return value
    if parameter == "auxiliary_models":
        return {name: as_agentscope(model) for name, model in value.items()}
    return as_agentscope(value)


#: What an AgentScope 2.x ``Agent`` replies when it stops before running its tool calls:
#: one waits for a person's permission (its DEFAULT permission mode asks for every tool
#: not allowed by a rule), or for a tool run outside it (``Agent._next_action``).
WAITING_REPLY = "I'm waiting for your permission or the external execution to finish."


def agent_stopped_waiting(response: Any) -> str | None:
    """What is wrong with a workflow's response that is an AgentScope agent's reply
    stopped to wait (`WAITING_REPLY`), as a Msg or its text; None for any other response.

    Nobody grants a permission inside a rollout, so every such rollout would score as if
    the agent had given up, with no error.
    """
    text = response if isinstance(response, str) else None
    if text is None and type(response).__module__.startswith("agentscope."):
        get_text = getattr(response, "get_text_content", None)
        text = get_text() if callable(get_text) else None
    if not isinstance(text, str) or text.strip() != WAITING_REPLY:
        return None
    return ("an AgentScope agent's reply that waits for permission to run its tool calls "
            "(AgentScope 2's default permission mode asks a person, and nobody answers in "
            "a rollout); build the agent with state=AgentState(permission_context="
            "PermissionContext(mode=PermissionMode.BYPASS)), or allow its tools by "
            "permission rules")
