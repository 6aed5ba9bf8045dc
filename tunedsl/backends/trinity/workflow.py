"""The Trinity-RFT Workflow class named by ``default_workflow_type`` in tunedsl's YAML.

Trinity imports it on its workflow runners by dotted path. This module imports
only Trinity's workflow base class, which does not need vLLM; Trinity's model
wrapper (which does) is reached only through the objects Trinity passes in.
"""

from __future__ import annotations

import contextvars
import json
from typing import Any

from trinity.common.workflows.workflow import Workflow

from ...config.importer import load_object
from ...dsl.chat import SAMPLING_KEYS
from ...errors import RolloutError
from ...runtime.models.endpoint import OpenAIChatModel, endpoint_client
from ...runtime.models.recording import model_calls
from ...runtime.rollout import Agent, run_rollout

#: vLLM's own sampling options, and where Trinity keeps them: they travel in
#: ``extra_body``, where vLLM's OpenAI server reads them (``create`` has no such arguments;
#: its sampling arguments are `SAMPLING_KEYS`).
_VLLM_ARGS = (("top_k", "top_k"), ("repetition_penalty", "repetition_penalty"),
              ("min_response_tokens", "min_tokens"))


def sampling_settings(rollout_args: Any, engine: Any) -> dict[str, Any]:
    """The per-call sampling settings of a rollout: the taskset's ``rollout_args`` over
    the engine entry's, OpenAI's names as arguments, vLLM's in ``extra_body``."""

    def value(key: str) -> Any:
        given = getattr(rollout_args, key, None)
        return given if given is not None else getattr(engine, key, None)

    sampling = {key: value(key) for key in SAMPLING_KEYS if value(key) is not None}
    extra = {name: value(key) for key, name in _VLLM_ARGS if value(key) is not None}
    if extra.get("top_k") == -1:  # Trinity's "disabled"
        del extra["top_k"]
    if getattr(engine, "ignore_eos", False):
        extra["ignore_eos"] = True
    if value("logprobs") is not None:  # OpenAI's logprobs is a flag; the count is top_logprobs
        sampling.update(logprobs=True, top_logprobs=value("logprobs"))
    if extra:
        sampling["extra_body"] = extra
    return sampling


class _StreamContext:
    """Trinity 0.6.0's ``HistoryRecordingStream`` as an async context manager, the way the
    openai package's own streams are used (``async with stream: ...``, as AgentScope does)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __aiter__(self) -> Any:
        return self._stream.__aiter__()

    async def __aenter__(self) -> Any:
        return self._stream

    async def __aexit__(self, *exc: Any) -> None:
        await self._stream.aclose()  # records what was read, then closes the response


#: The trained model's client and the calls it answered in the running rollout, in
#: answer order (None for a streamed call, whose record tunedsl does not rebuild): the
#: same order in which Trinity's client appends them to its history.
_ROLLOUT_CALLS: contextvars.ContextVar[tuple[Any, list[Any]] | None] = contextvars.ContextVar(
    "tunedsl_rollout_calls", default=None)


def with_stream_contexts(client: Any) -> Any:
    """``client`` (Trinity's recording client, changed in place once) whose streams can be
    used with ``async with``: without this every streamed call an agent framework makes
    through Trinity fails with "does not support the asynchronous context manager protocol".
    Its answers are also noted for `describe_experiences` while a rollout runs."""
    if getattr(client, "_tunedsl_stream_contexts", False):
        return client
    create = client.chat.completions.create

    async def create_with_contexts(*args: Any, **kwargs: Any) -> Any:
        answer = await create(*args, **kwargs)
        noted = _ROLLOUT_CALLS.get()
        if noted is not None and noted[0] is client:
            noted[1].extend([None] if kwargs.get("stream") else model_calls(kwargs, answer))
        # (`async with` looks on the type; the stream's __getattr__ would hide the gap.)
        if kwargs.get("stream") and not hasattr(type(answer), "__aenter__"):
            return _StreamContext(answer)
        return answer

    client.chat.completions.create = create_with_contexts
    client._tunedsl_stream_contexts = True
    return client


_ENDPOINT_CLIENTS: dict[tuple[str, str | None, int], Any] = {}


def shared_endpoint_client(base_url: str, api_key_env: str | None) -> Any:
    """One client per endpoint and event loop in this worker (its connection pool belongs
    to the loop), rather than one per rollout."""
    import asyncio

    try:
        loop = id(asyncio.get_running_loop())
    except RuntimeError:
        loop = 0
    key = (base_url, api_key_env, loop)
    if key not in _ENDPOINT_CLIENTS:
        _ENDPOINT_CLIENTS[key] = endpoint_client(base_url, api_key_env=api_key_env)
    return _ENDPOINT_CLIENTS[key]


def agent_from_workflow_args(args: dict[str, Any]) -> Agent:
    """The user's functions and params, from the import strings in ``workflow_args``."""
    judge = load_object(args["judge"]) if args.get("judge") else None
    return Agent(workflow=load_object(args["workflow"]), judge=judge,
                 params=args.get("params") or {})


def describe_experiences(experiences: list[Any], calls: list[Any]) -> None:
    """Give each experience the conversation it continues: ``messages`` (the prompt, then
    the reply as an assistant message with its tool calls and reasoning) and ``tools``.

    Trinity's recording client keeps tokens and the reply's text only; with these, the
    experiences its buffer saves show what the model was asked (``tunedsl view``). Done
    only when every call is known and they pair one to one with the experiences.
    """
    if len(calls) != len(experiences) or any(call is None for call in calls):
        return
    for experience, call in zip(experiences, calls):
        reply = call.response
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning_content:
            message["reasoning_content"] = reply.reasoning_content
        if reply.tool_calls:
            message["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": c.arguments}} for c in reply.tool_calls]
        messages = [*call.messages, message]
        try:  # Trinity serialises both as JSON when it saves the experience
            json.dumps([messages, call.sampling.get("tools")])
        except (TypeError, ValueError):
            return
        experience.messages = messages
        if call.sampling.get("tools"):
            experience.tools = call.sampling["tools"]


class TunedslWorkflow(Workflow):
    """Runs a tunedsl ``@workflow`` (and ``@judge``) as one Trinity rollout.

    The trained model and each auxiliary model are handed to the user's code as
    `OpenAIChatModel` s over Trinity's own OpenAI clients, so every call is recorded
    in Trinity's history; each recorded call becomes one `Experience` carrying the
    rollout's reward, and the last one carries its metrics and the reward as ``reward``.
    """

    is_async = True

    def __init__(self, *, task: Any, model: Any, auxiliary_models: Any = None) -> None:
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self.agent = agent_from_workflow_args(task.workflow_args)
        client = self.trained_client = with_stream_contexts(model.get_openai_async_client())
        sampling = sampling_settings(task.rollout_args, model.config)
        # Trinity's client records every call in its history: hand it out as it is.
        self.chat_model = OpenAIChatModel(client, client.model_path, sampling=sampling,
                                          client_records_calls=True)
        self.auxiliary_chat_models = {}
        for wrapper in self.auxiliary_model_wrappers or ():
            aux_client = with_stream_contexts(wrapper.get_openai_async_client())
            name = wrapper.config.name
            self.auxiliary_chat_models[name] = OpenAIChatModel(
                aux_client, aux_client.model_path, name=name,
                sampling=getattr(wrapper, "generate_kwargs", None), client_records_calls=True,
            )

        for name, spec in (task.workflow_args.get("endpoints") or {}).items():
            self.auxiliary_chat_models[name] = OpenAIChatModel(
                shared_endpoint_client(spec["base_url"], spec.get("api_key_env")),
                spec["model"], name=name, sampling=spec.get("sampling"))

    async def run_async(self) -> list[Any]:
        """Run the shared rollout, then turn the recorded model calls into experiences."""
        calls: list[Any] = []
        noted = _ROLLOUT_CALLS.set((self.trained_client, calls))
        try:
            result = await run_rollout(self.agent, self.task.raw_task, self.chat_model,
                                       self.auxiliary_chat_models)
        except RolloutError as error:
            # Calls made before the failure must not leak into the retry's experiences.
            self.model.extract_experience_from_history()
            self.logger.error("rollout failed for task %s: %s\n%s", self.task.raw_task, error,
                              error.user_traceback or "")
            raise
        finally:
            _ROLLOUT_CALLS.reset(noted)
        experiences = self.model.extract_experience_from_history()
        describe_experiences(experiences, calls)
        for experience in experiences:
            experience.reward = result.reward
        if experiences:
            # Trinity aggregates eval (and rollout) metrics from the experiences' metrics
            # only, so the reward goes there too, beside the user's metrics.
            experiences[-1].metrics = {**result.metrics, "reward": result.reward}
        return experiences
