"""Unit-test agent code without a model server: `ScriptedModel` and `run_rollout`.

The pytest plugin ``tunedsl.pytest_plugin`` (registered through the ``pytest11``
entry point) adds a ``scripted_model`` fixture::

    def test_solve(scripted_model):
        trajectory = run_rollout(MathAgent, {"question": "1+1", "answer": "2"},
                                 scripted_model(["Answer: 2"]))
        assert trajectory.reward == 1.0
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ._chat import ChatResponse, ToolCall
from ._decorators import FunctionSpec, is_experiment, spec_of
from .rollout import Agent, RolloutResult
from .rollout import run_rollout as _run_rollout

Reply = str | ChatResponse
Script = Sequence[Reply] | Callable[[list[dict[str, Any]]], Reply]


@attrs.frozen
class ScriptedCall:
    """One call a `ScriptedModel` answered: what it was asked and what it said."""

    messages: list[dict[str, Any]]
    sampling: dict[str, Any]
    response: ChatResponse


class _Completions:
    def __init__(self, model: ScriptedModel) -> None:
        self._model = model

    async def create(self, *, messages: list[dict[str, Any]], model: str | None = None,
                     **sampling: Any) -> Any:
        from openai.types.chat import ChatCompletion

        reply = await self._model.chat(messages, **sampling)
        tool_calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ] or None
        return ChatCompletion.model_validate({
            "id": f"scripted-{len(self._model.calls)}", "object": "chat.completion",
            "created": int(time.time()), "model": model or self._model.name,
            "choices": [{"index": 0, "finish_reason": reply.finish_reason or "stop",
                         "message": {"role": "assistant", "content": reply.content,
                                     "tool_calls": tool_calls}}],
        })  # fmt: skip


class _Chat:
    def __init__(self, model: ScriptedModel) -> None:
        self.completions = _Completions(model)


class _ScriptedOpenAIClient:
    """The subset of ``openai.AsyncOpenAI`` agent frameworks use: chat.completions.create."""

    def __init__(self, model: ScriptedModel) -> None:
        self.chat = _Chat(model)


class ScriptedModel:
    """A `ChatModel` that answers from a script and records every call.

    Args:
        replies: Replies in order (text or `ChatResponse`, e.g. with tool calls), or
            a function of the messages returning one.
        name: The model's name.
    """

    def __init__(self, replies: Script = (), *, name: str = "scripted") -> None:
        self.name = name
        self.calls: list[ScriptedCall] = []
        self._script = replies if callable(replies) else iter(list(replies))
        self._given = None if callable(replies) else len(replies)
        self._client = _ScriptedOpenAIClient(self)

    @property
    def openai_client(self) -> Any:
        """An ``openai.AsyncOpenAI``-compatible client answering from the same script."""
        return self._client

    def _next_reply(self, messages: list[dict[str, Any]]) -> Reply:
        if callable(self._script):
            return self._script(messages)
        try:
            return next(self._script)
        except StopIteration:
            raise AssertionError(
                f"ScriptedModel {self.name!r} ran out of replies after {self._given} calls; "
                f"give it more replies, or a function of the messages"
            ) from None

    async def chat(self, messages: list[dict[str, Any]], **sampling: Any) -> ChatResponse:
        """Answer with the next scripted reply and record the call."""
        reply = self._next_reply(messages)
        response = reply if isinstance(reply, ChatResponse) else ChatResponse(content=str(reply))
        self.calls.append(ScriptedCall([dict(m) for m in messages], dict(sampling), response))
        return response


@attrs.frozen(kw_only=True)
class Trajectory:
    """What one rollout did: the model calls in order, and its score."""

    calls: tuple[ScriptedCall, ...]
    response: Any
    reward: float
    metrics: dict[str, float]


def _agent(target: Any, params: Mapping[str, Any] | None) -> Agent:
    if isinstance(target, Agent):
        agent = target
    elif isinstance(target, str) or is_experiment(target):
        from ._api import load_experiment

        agent = Agent.from_graph(load_experiment(target))
    elif hasattr(target, "workflow") and isinstance(getattr(target, "workflow"), FunctionSpec):
        agent = Agent.from_graph(target)  # an ExperimentGraph
    elif isinstance(target, tuple):
        workflow, judge = target
        agent = Agent(workflow=workflow, judge=judge)
    elif isinstance(spec_of(target), FunctionSpec):
        agent = Agent(workflow=target)
    else:
        raise TypeError(f"run_rollout takes an @experiment, an import string, a graph, a "
                        f"@workflow function or a (workflow, judge) pair; got {target!r}")
    return agent if params is None else attrs.evolve(agent, params=params)


async def arun_rollout(
    target: Any,
    task: Mapping[str, Any],
    model: Any,
    auxiliary_models: Mapping[str, Any] | None = None,
    *,
    params: Mapping[str, Any] | None = None,
) -> Trajectory:
    """Async `run_rollout`, for tests that already run an event loop."""
    before = len(getattr(model, "calls", ()))
    result: RolloutResult = await _run_rollout(_agent(target, params), task, model,
                                               auxiliary_models)
    calls = tuple(itertools.islice(getattr(model, "calls", ()), before, None))
    return Trajectory(calls=calls, response=result.response, reward=result.reward,
                      metrics=result.metrics)


def run_rollout(
    target: Any,
    task: Mapping[str, Any],
    model: Any,
    auxiliary_models: Mapping[str, Any] | None = None,
    *,
    params: Mapping[str, Any] | None = None,
) -> Trajectory:
    """Run one rollout through the same path training uses, and return its trajectory.

    Args:
        target: An ``@experiment`` class or its import string (its params and judge
            apply), an `ExperimentGraph`, a ``@workflow`` function, or a
            ``(workflow, judge)`` pair.
        task: One task row.
        model: Usually a `ScriptedModel`; any `ChatModel` works.
        auxiliary_models: `ChatModel` s by name.
        params: Replace the experiment's params for this rollout.

    Raises:
        RolloutError: the workflow or judge failed, as it would during training.
    """
    return asyncio.run(arun_rollout(target, task, model, auxiliary_models, params=params))


__all__ = ["ScriptedCall", "ScriptedModel", "ToolCall", "Trajectory", "arun_rollout",
           "run_rollout"]
