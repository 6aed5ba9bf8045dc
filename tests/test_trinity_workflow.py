"""tunedsl's Trinity Workflow class, driven by Trinity's own task reader and Task objects.

The only stand-in is the model wrapper: Trinity's real one needs vLLM engines (GPUs).
The stand-in answers chat completions and records each call as a real Trinity
`Experience`, as Trinity's history recording does.
"""

from __future__ import annotations

import asyncio
import re
import types

import pytest

pytest.importorskip("trinity.common.config")

from openai.types.chat import ChatCompletion  # noqa: E402
from trinity.buffer.buffer import get_buffer_reader  # noqa: E402
from trinity.common.experience import Experience  # noqa: E402

import tunedsl  # noqa: E402
from tunedsl.backends.trinity.workflow import TunedslWorkflow  # noqa: E402
from tunedsl.dsl.trinity_fields import FAILED_ROLLOUT, ROLLOUT_ERROR  # noqa: E402

from .trinity_support import validate  # noqa: E402



class StandInModelWrapper:
    """Answers with ``reply(messages)`` and records every call as an Experience."""

    def __init__(self, model_path, reply, name=None, generate_kwargs=None):
        self.config = types.SimpleNamespace(name=name, model_path=model_path)
        self.generate_kwargs = generate_kwargs or {}
        self.history, self.requests = [], []
        self._reply = reply

    def get_openai_async_client(self):
        async def create(**request):
            self.requests.append(request)
            text = self._reply(request["messages"])
            self.history.append(Experience(tokens=[1, 2, 3, 4], prompt_length=2,
                                           response_text=text))
            return ChatCompletion.model_validate({
                "id": "x", "object": "chat.completion", "created": 0, "model": request["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
            })

        chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=create))
        return types.SimpleNamespace(chat=chat, model_path=self.config.model_path)

    def extract_experience_from_history(self, clear_history=True):
        found = list(self.history)
        if clear_history:
            self.history.clear()
        return found


def validated_config(tmp_path, target, *overrides):
    """Write tunedsl's YAML for ``target`` and have real Trinity load and validate it."""
    return validate(tunedsl.load_experiment(target, overrides=overrides), tmp_path)


def read_tasks(config):
    reader = get_buffer_reader(config.buffer.explorer_input.tasksets[0])
    return asyncio.run(reader.read())


def test_trinity_reads_the_tasks_and_runs_the_users_workflow(tmp_path):
    """Each model call becomes one Experience carrying the reward; metrics sit on the last."""
    config = validated_config(tmp_path, "tests.fixtures.multi_turn:MultiTurn")
    tasks = read_tasks(config)
    # batch_size 2, in Trinity's seeded shuffle (algorithm.seed 42) of the three rows
    assert [t.raw_task["question"] for t in tasks] == ["4+4", "2+3"]
    task = tasks[0]
    assert task.workflow is TunedslWorkflow
    policy = StandInModelWrapper("policy-model", lambda messages: "2")
    grader = StandInModelWrapper("grader-model", lambda messages: "yes", name="grader",
                                 generate_kwargs={"temperature": 0.1})
    experiences = asyncio.run(task.to_workflow(model=policy, auxiliary_models=[grader])
                              .run_async())
    assert len(experiences) == 2  # params turns=2: two calls of the trained model
    assert [e.reward for e in experiences] == [0.5, 0.5]  # scale 0.5 from params
    assert experiences[-1].metrics == {"turns": 2.0, "graded": 1.0, "reward": 0.5}
    assert not experiences[0].metrics
    # Sampling settings from the taskset's rollout_args reach the model.
    assert policy.requests[0]["temperature"] == 0.7 and policy.requests[0]["max_tokens"] == 256
    assert grader.requests[0]["temperature"] == 0.1


def test_params_from_the_command_line_reach_the_workflow_on_trinity(tmp_path):
    """A --set params override travels in the YAML to the user's function."""
    config = validated_config(tmp_path, "tests.fixtures.multi_turn:MultiTurn",
                              "params.turns=3", "params.scale=1.0")
    task = read_tasks(config)[0]
    policy = StandInModelWrapper("policy-model", lambda messages: "2")
    grader = StandInModelWrapper("grader-model", lambda messages: "yes", name="grader")
    experiences = asyncio.run(task.to_workflow(model=policy, auxiliary_models=[grader])
                              .run_async())
    # turns=3 (three calls) and scale=1.0 (not the class's 0.5) both came from --set.
    assert len(experiences) == 3 and {e.reward for e in experiences} == {1.0}


def failed(experiences):
    """The error a failed training rollout's one placeholder carries (its calls dropped)."""
    [placeholder] = experiences
    assert placeholder.info[FAILED_ROLLOUT] is True
    return placeholder.info[ROLLOUT_ERROR]


def test_failing_judge_fails_the_rollout_and_clears_the_history(tmp_path):
    """A judge error fails the rollout (its placeholder names the judge) and leaves no
    stale calls behind; in an eval it propagates (Trinity retries the task)."""
    config = validated_config(tmp_path, "tests.fixtures.multi_turn:MultiTurn")
    task = read_tasks(config)[0]
    policy = StandInModelWrapper("policy-model", lambda messages: "2")
    broken = StandInModelWrapper("grader-model", lambda messages: 1 / 0, name="grader")
    assert failed(asyncio.run(task.to_workflow(model=policy, auxiliary_models=[broken])
                              .run_async())).startswith("@judge llm_grader")
    assert policy.history == []
    task.is_eval = True
    with pytest.raises(tunedsl.errors.RolloutError, match="@judge llm_grader"):
        asyncio.run(task.to_workflow(model=policy, auxiliary_models=[broken]).run_async())
    assert policy.history == []


def test_nan_reward_and_raising_workflow_fail_the_rollout(tmp_path):
    """A NaN verdict or a workflow exception is a RolloutError naming the user's function."""
    config = validated_config(tmp_path, "tests.fixtures.multi_turn:MultiTurn",
                              "params.scale=nan")
    task = read_tasks(config)[0]
    policy = StandInModelWrapper("policy-model", lambda messages: "2")
    grader = StandInModelWrapper("grader-model", lambda messages: "yes", name="grader")
    assert "returned the reward nan" in failed(asyncio.run(
        task.to_workflow(model=policy, auxiliary_models=[grader]).run_async()))
    (tmp_path / "second").mkdir()
    config = validated_config(tmp_path / "second", "tests.fixtures.multi_turn:MultiTurn",
                              'params.turns="two"')
    task = read_tasks(config)[0]
    assert re.match(r"@workflow two_turns \(.*\) raised TypeError", failed(asyncio.run(
        task.to_workflow(model=policy, auxiliary_models=[grader]).run_async())))
    assert policy.history == []


def test_the_agentscope_tutorials_agent_runs_in_trinitys_workflow(tmp_path):
    """An AgentScope ReActAgent gets a model bound to Trinity's recording client; each of its
    calls becomes an experience carrying the judge's reward."""
    pytest.importorskip("agentscope")
    config = validated_config(tmp_path, "tests.fixtures.agentscope_tutorial:Tutorial")
    task = read_tasks(config)[0]
    question = task.raw_task["question"]
    a, b = (int(word) for word in question.rstrip("?").split() if word.isdigit())
    policy = StandInModelWrapper("policy-model", lambda messages: f"It is {a + b}.")
    experiences = asyncio.run(task.to_workflow(model=policy).run_async())
    assert [e.reward for e in experiences] == [1.0]
    [request] = policy.requests
    assert request["model"] == "policy-model" and request["stream"] is False
    assert request["messages"][-1]["content"] == [{"type": "text", "text": question}]


@pytest.mark.parametrize("method", ["parse", "with_raw_response", "with_streaming_response"])
def test_methods_trinity_s_client_does_not_record_are_refused_in_words(method):
    """Trinity's client records ``chat.completions.create`` only: a reply asked for by
    ``parse`` or a raw/streaming response was answered, and silently never trained on."""
    from tunedsl.backends.trinity.workflow import with_stream_contexts
    from tunedsl.testing import ScriptedModel

    client = with_stream_contexts(ScriptedModel(["a"]).openai_client.with_options())
    use = getattr(client.chat.completions, method)
    with pytest.raises(ValueError) as refused:
        use(model="m", messages=[]) if method == "parse" else use.create(model="m", messages=[])
    assert str(refused.value) == (
        f"on Trinity, model.openai_client.chat.completions.{method} is not recorded "
        f"(Trinity's client records chat.completions.create only), so its replies would not be "
        f"trained on; call chat.completions.create (response_format= asks for structured "
        f"output) and read the reply it returns")
