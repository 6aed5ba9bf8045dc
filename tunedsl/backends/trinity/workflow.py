"""The Trinity-RFT Workflow class named by ``default_workflow_type`` in tunedsl's YAML.

Trinity imports it on its workflow runners by dotted path. This module imports
only Trinity's workflow base class, which does not need vLLM; Trinity's model
wrapper (which does) is reached only through the objects Trinity passes in.
"""

from __future__ import annotations

import contextvars
import json
import random
from typing import Any

import attrs
from trinity.common.workflows.workflow import Workflow

from ...config.importer import load_object
from ...dsl.chat import SAMPLING_KEYS
from ...dsl.trinity_fields import FAILED_ROLLOUT, NO_MODEL_CALL, ROLLOUT_ERROR, TURN_KEYS
from ...dsl.turns import TurnMarks, per_call
from ...errors import RolloutError
from ...models.endpoint import OpenAIChatModel, endpoint_client
from ...models.recording import model_calls
from ...models.scoring import endpoint_logprobs
from ...rollout.group import judge_group
from ...rollout.run import Agent, RolloutResult, run_bounded_rollout, run_rollout
from ...rollout.together import all_or_none
from ...rollout.watchdog import loop_watchdog
from .checks import ratio_bias

#: vLLM's own sampling options, and where Trinity keeps them: they travel in
#: ``extra_body``, where vLLM's OpenAI server reads them (``create`` has no such arguments;
#: its sampling arguments are `SAMPLING_KEYS`).
_VLLM_ARGS = (("top_k", "top_k"), ("repetition_penalty", "repetition_penalty"),
              ("min_response_tokens", "min_tokens"))


def sampling_settings(rollout_args: Any, engine: Any) -> dict[str, Any]:
    """The per-call sampling settings of a rollout: the taskset's ``rollout_args`` over
    the engine entry's, OpenAI's names as arguments, vLLM's in ``extra_body``.

    ``max_tokens`` is left out when it is the engine's own ``max_response_tokens``: vLLM
    then bounds each reply by it and by the room the prompt leaves
    (``get_max_tokens`` in vLLM 0.23's ``entrypoints/serve/utils/api_utils.py``), as the
    local backend does, where a request naming ``max_tokens`` is refused with HTTP 400
    once prompt + max_tokens > max_model_len (``renderers/params.py``).
    """

    def value(key: str) -> Any:
        given = getattr(rollout_args, key, None)
        return given if given is not None else getattr(engine, key, None)

    sampling = {key: value(key) for key in SAMPLING_KEYS if value(key) is not None}
    if sampling.get("max_tokens") == getattr(engine, "max_response_tokens", None):
        del sampling["max_tokens"]
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


@attrs.frozen
class _RunningRollout:
    """The trained model's client in the running rollout, the calls it answered, in answer
    order (None for a streamed call, whose record tunedsl does not rebuild: the order in
    which Trinity's client appends them to its history), and the temperature the trainer
    scores its replies at (None for an eval rollout, which trains nothing)."""

    client: Any
    calls: list[Any]
    trained_at: float | None


_RUNNING: contextvars.ContextVar[_RunningRollout | None] = contextvars.ContextVar(
    "tunedsl_running_rollout", default=None)


async def _within_context(create: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``create(*args, **kwargs)``; when vLLM refuses it because prompt + ``max_tokens``
    exceeds ``max_model_len`` (HTTP 400), once more without ``max_tokens``: the engine then
    bounds the reply by its own limit and by the room the prompt leaves, which is less
    than the ``max_tokens`` asked for. A prompt that fills the context is refused again."""
    import openai

    try:
        return await create(*args, **kwargs)
    except openai.BadRequestError as error:
        if kwargs.get("max_tokens") is None or "maximum context length" not in str(error):
            raise
    return await create(*args, **{k: v for k, v in kwargs.items() if k != "max_tokens"})


#: Seeds for the calls a Tinker engine samples (`with_stream_contexts`): fresh entropy in
#: each runner process, one seed per call.
_TINKER_SEEDS = random.Random()


def on_tinker(model: Any) -> bool:
    """Whether Trinity samples ``model`` (a model wrapper) through Tinker."""
    return getattr(getattr(model, "config", None), "engine_type", None) == "tinker"


def with_stream_contexts(client: Any, *, seed_each_call: bool = False) -> Any:
    """``client`` (Trinity's recording client, changed in place once) whose streams can be
    used with ``async with``: without this every streamed call an agent framework makes
    through Trinity fails with "does not support the asynchronous context manager protocol".
    While a rollout runs, its answers are noted for `describe_experiences`, and a training
    call that samples otherwise than the trainer scores is refused (`ratio_bias`).

    ``seed_each_call`` (a Tinker engine): each call that names no ``seed`` gets one of its
    own. Trinity 0.6.0's ``TinkerModel`` sends ``seed=config.seed`` with every sample
    request that names none (``common/models/tinker_model.py``), and a GRPO group is
    ``repeat_times`` separate requests for one prompt: with one seed they are one reply
    repeated, every advantage 0, nothing learnt."""
    if getattr(client, "_tunedsl_stream_contexts", False):
        return client
    create = client.chat.completions.create

    async def create_with_contexts(*args: Any, **kwargs: Any) -> Any:
        if seed_each_call and kwargs.get("seed") is None:
            kwargs["seed"] = _TINKER_SEEDS.getrandbits(31)
        running = _RUNNING.get()
        mine = running if running is not None and running.client is client else None
        if mine is not None and mine.trained_at is not None:
            why = ratio_bias(kwargs, mine.trained_at)
            if why is not None:
                raise ValueError(f"the trained model cannot sample with {why}: the PPO ratio "
                                 f"of this reply's tokens would be biased; set the sampling "
                                 f"on Model(...) and drop it from the call")
        answer = await _within_context(create, args, kwargs)
        if mine is not None:
            mine.calls.extend([None] if kwargs.get("stream") else model_calls(kwargs, answer))
        # (`async with` looks on the type; the stream's __getattr__ would hide the gap.)
        if kwargs.get("stream") and not hasattr(type(answer), "__aenter__"):
            return _StreamContext(answer)
        return answer

    client.chat.completions.create = create_with_contexts
    for method in ("parse", "with_raw_response", "with_streaming_response"):
        setattr(client.chat.completions, method, _Unrecorded(method))
    client._tunedsl_stream_contexts = True
    return client


class _Unrecorded:
    """A method of Trinity's client that its history does not record: refused in words
    when used, as its replies would not be trained on (on the local backend and in eval
    every chat completion is recorded, whichever method asks for it)."""

    def __init__(self, method: str) -> None:
        self.method = method

    def _refusal(self) -> ValueError:
        return ValueError(f"on Trinity, model.openai_client.chat.completions.{self.method} is "
                          f"not recorded (Trinity's client records chat.completions.create "
                          f"only), so its replies would not be trained on; call "
                          f"chat.completions.create (response_format= asks for structured "
                          f"output) and read the reply it returns")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refusal()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and friends probing it
            raise AttributeError(name)
        raise self._refusal()


_ENDPOINT_CLIENTS: dict[tuple[str, str | None], Any] = {}


def shared_endpoint_client(base_url: str, api_key_env: str | None) -> Any:
    """One client per endpoint in this worker, rather than one per rollout (its
    connections follow the running event loop: `endpoint_client`)."""
    key = (base_url, api_key_env)
    if key not in _ENDPOINT_CLIENTS:
        _ENDPOINT_CLIENTS[key] = endpoint_client(base_url, api_key_env=api_key_env)
    return _ENDPOINT_CLIENTS[key]


def _tokenless_experience(reward: float, info: dict[str, Any],
                          metrics: dict[str, float]) -> Any:
    """An experience with no reply to train on (an empty action mask): a placeholder that
    carries a rollout's reward, marks and metrics through Trinity's runner."""
    import torch
    from trinity.common.experience import Experience

    return Experience(tokens=torch.zeros(2, dtype=torch.int32), prompt_length=1,
                      logprobs=torch.zeros(1), action_mask=torch.zeros(1, dtype=torch.bool),
                      reward=reward, info=info, metrics=metrics)


def placeholder_experience(result: RolloutResult, *, trained: bool) -> Any:
    """The one experience of a rollout that made no model call: Trinity's runner fails a
    rollout that returns none ("An empty experience is generated",
    ``explorer/workflow_runner.py``), eval included. It carries the rollout's metrics, so
    its reward counts in the step's rollout (or eval) metrics; a training one has no
    finite reward, so the pipeline's ``invalid_reward_filter`` (first of its operators,
    see ``config.py``) drops it before any advantage or trainer sees it."""
    return _tokenless_experience(float("nan") if trained else result.reward,
                                 {NO_MODEL_CALL: True}, {**result.metrics,
                                                         "reward": result.reward})


def failed_placeholder(error: str) -> Any:
    """The one experience of a failed rollout that is dropped (``on_failed_rollout``
    ``drop`` or ``drop_group``): tunedsl's `FailedRollouts` operator counts it (and drops
    its task's group for ``drop_group``), and with no finite reward ``invalid_reward_filter``
    drops it. Returned rather than raised, so the step's pipeline sees every failure: a
    step whose every rollout failed ends the run, as on the local backend."""
    return _tokenless_experience(float("nan"), {FAILED_ROLLOUT: True, ROLLOUT_ERROR: error},
                                 {})


def mark_truncated(experiences: list[Any], calls: list[Any]) -> None:
    """Mark the experiences of replies cut by ``max_tokens`` or the context as Trinity's
    ``mask_response_truncated`` operator reads them (its OpenAI-API experiences carry no
    finish reason). Done when the calls pair one to one with the experiences."""
    if len(calls) != len(experiences):
        return
    for experience, call in zip(experiences, calls):
        if call is not None and call.response.finish_reason == "length":
            experience.truncate_status = "response_truncated"


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
        messages = [*call.messages, call.response.as_message()]
        try:  # Trinity serialises both as JSON when it saves the experience
            json.dumps([messages, call.sampling.get("tools")])
        except (TypeError, ValueError):
            return
        experience.messages = messages
        if call.sampling.get("tools"):
            experience.tools = call.sampling["tools"]


@attrs.define
class _Member:
    """One rollout's hold on the trained model: a model wrapper whose history holds only
    its calls, Trinity's recording client over it, and the `OpenAIChatModel` the user's
    code drives."""

    wrapper: Any
    client: Any
    chat_model: OpenAIChatModel

    @classmethod
    def of(cls, wrapper: Any, sampling: dict[str, Any]) -> _Member:
        client = with_stream_contexts(wrapper.get_openai_async_client(),
                                      seed_each_call=on_tinker(wrapper))
        # Trinity's client records every call in its history: hand it out as it is.
        chat_model = OpenAIChatModel(client, client.model_path, sampling=sampling,
                                     client_records_calls=True)
        member = cls(wrapper, client, chat_model)
        # Its turns count every call Trinity's client answered in the running rollout
        # (calls through openai_client as well as chat): the experiences, one per call.
        chat_model.turns = TurnMarks(member.calls_so_far)
        return member

    def calls_so_far(self) -> int:
        running = _RUNNING.get()
        return len(running.calls) if running is not None else len(self.chat_model.calls)


@attrs.frozen
class _RolledOut:
    """A member's rollout, before its experiences are made: what it returned (or why it
    failed), the experiences Trinity's client recorded, and the calls it answered."""

    outcome: RolloutResult | RolloutError
    made: list[Any]
    calls: list[Any]


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
        self.sampling = sampling_settings(task.rollout_args, model.config)
        # (The group workflow runs its rollouts on copies of the wrapper, made after this:
        # they inherit the API address this asks of the engine once, not each again.)
        self.member = _Member.of(model, self.sampling)
        self.chat_model = self.member.chat_model
        self.auxiliary_chat_models = {}
        for wrapper in self.auxiliary_model_wrappers or ():
            aux_client = with_stream_contexts(wrapper.get_openai_async_client(),
                                              seed_each_call=on_tinker(wrapper))
            name = wrapper.config.name
            self.auxiliary_chat_models[name] = OpenAIChatModel(
                aux_client, aux_client.model_path, name=name,
                sampling=getattr(wrapper, "generate_kwargs", None), client_records_calls=True,
            )

        for name, spec in (task.workflow_args.get("endpoints") or {}).items():
            self.auxiliary_chat_models[name] = OpenAIChatModel(
                shared_endpoint_client(spec["base_url"], spec.get("api_key_env")),
                spec["model"], name=name, sampling=spec.get("sampling"))

    @property
    def _seconds(self) -> float | None:
        """``rollout_timeout`` (None in a config written before tunedsl bounded rollouts)."""
        return self.task.workflow_args.get("rollout_timeout") or None

    async def _bounded_rollout(self, member: _Member) -> RolloutResult:
        """The shared rollout within ``rollout_timeout``, even if it blocks the loop (the
        runner's loop is not in the main thread, so the watchdog interrupts Python code,
        not a blocking C call: Trinity's step bound then ends the step)."""
        arguments = (self.agent, self.task.raw_task, member.chat_model,
                     self.auxiliary_chat_models)
        if not self._seconds:
            return await run_rollout(*arguments, ends_model=True)
        with loop_watchdog() as watchdog:
            return await run_bounded_rollout(*arguments, seconds=self._seconds,
                                             watchdog=watchdog, ends_model=True)

    async def _roll_out(self, member: _Member) -> _RolledOut:
        """The member's rollout, and the experiences its calls made (taken from its
        history either way: calls made before a failure must not leak into a retry)."""
        calls: list[Any] = []
        trained_at = None if self.task.is_eval else getattr(self.model.config, "temperature",
                                                              None)
        running = _RUNNING.set(_RunningRollout(member.client, calls, trained_at))
        try:
            outcome: RolloutResult | RolloutError = await self._bounded_rollout(member)
        except RolloutError as error:
            outcome = error
        finally:
            _RUNNING.reset(running)
        return _RolledOut(outcome, member.wrapper.extract_experience_from_history(), calls)

    async def run_async(self) -> list[Any]:
        """Run the shared rollout, then turn the recorded model calls into experiences."""
        return await self._finished(await self._roll_out(self.member))

    async def _finished(self, rolled: _RolledOut) -> list[Any]:
        """A rollout's experiences: its calls', scored (by a teacher too), or what a failed
        one leaves (``on_failed_rollout``)."""
        error = rolled.outcome
        if isinstance(error, RolloutError):
            self.logger.error("rollout failed for task %s: %s\n%s%s", self.task.raw_task, error,
                              error.user_traceback or "",
                              f"\nit printed:\n{error.output}" if error.output else "")
            if self.task.is_eval:
                raise error  # Trinity retries the task, then leaves it out of the eval
            if self.task.workflow_args.get("on_failed_rollout") != "zero":
                return [failed_placeholder(str(error))]
            # "zero": the calls it made are trained on, with reward 0
            zero = RolloutResult(response="", reward=0.0, metrics={})
            experiences = self._experiences(rolled.made, rolled.calls, zero)
            for experience in experiences:
                experience.info[ROLLOUT_ERROR] = str(error)
            return await self._scored_by_teacher(experiences)
        result = error
        if result.output:  # kept out of the explorer's console, in its log
            self.logger.info("rollout of task %s printed:\n%s", self.task.raw_task,
                             result.output)
        return await self._scored_by_teacher(self._experiences(rolled.made, rolled.calls,
                                                               result))

    async def _scored_by_teacher(self, experiences: list[Any]) -> list[Any]:
        """With a teacher (``on_policy_distill``), each experience gets the teacher's
        log-probs of its reply tokens (at temperature 1: the teacher's own distribution),
        which Trinity's distillation advantage reads as ``teacher_logprobs``."""
        name = self.task.workflow_args.get("teacher")
        if name is None or self.task.is_eval:
            return experiences
        scored = [e for e in experiences
                  if not (e.info.get(NO_MODEL_CALL) or e.info.get(FAILED_ROLLOUT))]
        endpoint = (self.task.workflow_args.get("endpoints") or {}).get(name)
        if endpoint is not None:  # one request for the rollout's experiences
            import torch

            found = await endpoint_logprobs(
                shared_endpoint_client(endpoint["base_url"], endpoint.get("api_key_env")),
                endpoint["model"], name,
                [(e.tokens[:e.prompt_length].tolist(), e.tokens[e.prompt_length:].tolist())
                 for e in scored])
            for experience, scores in zip(scored, found):
                experience.teacher_logprobs = torch.tensor(scores)
            return experiences
        [teacher] = [w for w in self.auxiliary_model_wrappers or () if w.config.name == name]
        for experience in scored:
            scores = await teacher.logprobs_async(tokens=experience.tokens.tolist(),
                                                  temperature=1.0)
            experience.teacher_logprobs = scores[experience.prompt_length - 1:]
        return experiences

    def _mark_turns(self, experiences: list[Any], calls: list[Any],
                    result: RolloutResult) -> None:
        """Each turn's reward on its last call's experience and its state on its first's,
        in ``info`` under the keys GiGPO reads (`TURN_KEYS`, or the experiment's own)."""
        if not result.turns:
            return
        if len(calls) != len(experiences):  # the turns count calls: they must pair
            self.logger.warning("the turns of task %s are left out: its rollout made %d calls "
                                "and Trinity recorded %d experiences", self.task.raw_task,
                                len(calls), len(experiences))
            return
        keys = self.task.workflow_args.get("turn_keys") or TURN_KEYS
        turns = per_call(result.turns, len(experiences))
        for index, experience in enumerate(experiences):
            if turns.rewards is not None and turns.rewards[index] is not None:
                experience.info[keys["step_reward_key"]] = turns.rewards[index]
            if turns.states is not None and turns.states[index] is not None:
                experience.info[keys["env_state_hash_key"]] = turns.states[index]

    def _experiences(self, experiences: list[Any], calls: list[Any],
                     result: RolloutResult) -> list[Any]:
        """The rollout's experiences, one per recorded call, carrying its reward."""
        describe_experiences(experiences, calls)
        mark_truncated(experiences, calls)
        if not experiences:
            return [placeholder_experience(result, trained=not self.task.is_eval)]
        for step, experience in enumerate(experiences):
            experience.reward = result.reward
            experience.eid.step = step  # the call's place in its rollout, as GiGPO sorts them
        self._mark_turns(experiences, calls, result)
        # Trinity aggregates eval (and rollout) metrics from the experiences' metrics
        # only, so the reward goes there too, beside the user's metrics.
        experiences[-1].metrics = {**result.metrics, "reward": result.reward}
        return experiences


class TunedslGroupWorkflow(TunedslWorkflow):
    """A task's whole group of rollouts as one Trinity run, for a ``@group_judge``.

    Trinity hands a repeatable workflow (``can_repeat``) a task with its repeats
    (``set_repeat_times``) and takes every experience it returns; tunedsl writes
    ``explorer.max_repeat_times_per_runner: null`` for such an experiment, so a task's group
    reaches one runner whole. Its rollouts run side by side, each on a clone of the model
    wrapper with a history of its own (``clone_with_isolated_history``, as Trinity's runner
    isolates the runs of an asynchronous workflow), then the group judge scores them
    together (`judge_group`); each rollout's experiences are numbered ``eid.run`` from
    ``run_id_base``, as the runner numbers the runs of other workflows.
    """

    can_repeat = True

    def __init__(self, *, task: Any, model: Any, auxiliary_models: Any = None) -> None:
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        # until the runner calls set_repeat_times: the task's own repeats
        self.repeat_times: int = getattr(task, "repeat_times", None) or 1

    def set_repeat_times(self, repeat_times: int, run_id_base: int) -> None:
        """The group's size and the number of its first run (Trinity's runner calls it)."""
        self.repeat_times, self.run_id_base = repeat_times, run_id_base

    async def run_async(self) -> list[Any]:
        """The group's rollouts side by side, judged together, as experiences."""
        members = [_Member.of(self.model.clone_with_isolated_history(), self.sampling)
                   for _ in range(self.repeat_times)]
        with loop_watchdog() as watchdog:
            rolled = await all_or_none(self._roll_out(member) for member in members)
            outcomes = await judge_group(self.agent, self.task.raw_task,
                                         [r.outcome for r in rolled], self.auxiliary_chat_models,
                                         seconds=self._seconds, watchdog=watchdog)
        experiences = []
        for index, (each, outcome) in enumerate(zip(rolled, outcomes)):
            for experience in await self._finished(attrs.evolve(each, outcome=outcome)):
                experience.eid.run = self.run_id_base + index
                experiences.append(experience)
        return experiences
