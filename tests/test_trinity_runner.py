"""Every example and fixture experiment through Trinity-RFT 0.6.0's own WorkflowRunner,
ModelWrapper and buffer reader (see tests/trinity_runner.py for what stands in).

Assertions are on what Trinity builds: the experiences (token ids and log-probabilities as
the engine sent them, the reward on each, metrics, run ids), the requests the engine got,
and the eval metrics Trinity aggregates.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("trinity.common.config")

import tunedsl  # noqa: E402

from .trinity_runner import (  # noqa: E402
    VLLMServer,
    answers,
    knows,
    run_eval,
    run_training_batch,
    serve_models,
)
from .trinity_support import validate  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SMALL = ("algorithm.batch_size=2", "algorithm.group_size=3")


#: import string -> (policy reply, auxiliary replies, reward, policy calls per rollout)
EXPERIMENTS = {
    "examples.math_agent.experiment:MathAgent": (
        knows("examples/math_agent/data", "So... Answer: {answer}"), {}, 1.0, 1),
    "examples.arith.experiment:Arith": (knows("examples/arith/data", "{answer}"), {}, 1.0, 1),
    "examples.llm_judge.experiment:LLMJudged": (
        knows("examples/llm_judge/data", "{answer}."), {"grader": lambda m: "Score: 7"}, 0.7, 1),
    "tests.fixtures.multi_turn:MultiTurn": (lambda m: "2", {"grader": lambda m: "yes"}, 0.5, 2),
    "tests.fixtures.good:Good": (knows("tests/fixtures/tasks", "{answer}"), {}, 1.0, 1),
    "tests.fixtures.two_experiments:Small": (
        knows("tests/fixtures/tasks", "It is {answer}"), {}, 1.0, 1),
    "tests.fixtures.two_experiments:Large": (
        knows("tests/fixtures/tasks", "It is {answer}"), {"critic": lambda m: "fine"}, 1.0, 1),
    "tests.fixtures.local.agents:OpenAIClient": (
        knows("examples/arith/data", "{answer}"), {}, 1.0, 1),
    "tests.fixtures.local.agents:Params": (lambda m: "7", {}, 0.25, 1),
    "tests.fixtures.local.agents:WithHelper": (
        knows("examples/arith/data", "{answer}"), {"helper": lambda m: "3"}, 1.0, 1),
    "examples.react_agent.experiment:ReActMath": (
        knows("examples/react_agent/data", "The answer is {answer}."), {}, 1.0, 1),
    "tests.fixtures.agentscope_tutorial:Tutorial": (
        knows("examples/react_agent/data", "It is {answer}."), {}, 1.0, 1),
    "tests.fixtures.agentscope_tutorial:Streaming": (
        knows("examples/react_agent/data", "It is {answer}."), {}, 1.0, 1),
}


def trinity_config(tmp_path, target, *overrides):
    """tunedsl's YAML for ``target``, loaded and validated by Trinity."""
    return validate(tunedsl.load_experiment(target, overrides=[*SMALL, *overrides]), tmp_path)


def start(monkeypatch, policy, auxiliary):
    servers = {"rollout": VLLMServer(policy).__enter__(),
               **{name: VLLMServer(reply).__enter__() for name, reply in auxiliary.items()}}
    serve_models(monkeypatch, servers)
    return servers


def stop(servers):
    for server in servers.values():
        server.__exit__(None, None, None)


def run_batch(monkeypatch, config, policy, auxiliary=None):
    """The first training batch through Trinity's runner; the outcome and the servers."""
    servers = start(monkeypatch, policy, auxiliary or {})
    try:
        return run_training_batch(config), servers
    finally:
        stop(servers)


@pytest.mark.parametrize("mode", ["sequential", "asynchronous"])
@pytest.mark.parametrize("target", sorted(EXPERIMENTS))
def test_trinitys_runner_builds_the_experiences(target, mode, tmp_path, monkeypatch):
    """Token ids and log-probs as the engine sent them, the reward on every experience, the
    run ids Trinity's repeat splitting gives, and reward and metrics on each run's last."""
    if "agentscope" in target:
        pytest.importorskip("agentscope")
    policy, auxiliary, reward, calls = EXPERIMENTS[target]
    config = trinity_config(tmp_path, target, f"trinity.explorer.concurrent_mode={mode}")
    outcome, servers = run_batch(monkeypatch, config, policy, auxiliary)
    assert all(status.ok for status in outcome.statuses), [s.message for s in outcome.statuses]
    experiences = outcome.experiences
    assert len(experiences) == 2 * 3 * calls
    assert {e.reward for e in experiences} == {reward}
    sent = Counter((tuple(s["prompt_ids"] + s["token_ids"]), tuple(s["logprobs"]))
                   for s in servers["rollout"].sent)
    built = Counter((tuple(e.tokens.tolist()), tuple(round(x, 6) for x in e.logprobs.tolist()))
                    for e in experiences)
    assert built == Counter({(tokens, tuple(round(x, 6) for x in logprobs)): n
                             for (tokens, logprobs), n in sent.items()})
    assert all(e.prompt_length == len(e.tokens) - len(e.logprobs) for e in experiences)
    runs = Counter((e.eid.task, e.eid.run) for e in experiences)
    assert runs == Counter({(task, run): calls for task in (0, 1) for run in range(3)})
    finals = [e for e in experiences if e.metrics and "reward" in e.metrics]
    assert len(finals) == 2 * 3 and all(e.metrics["reward"] == reward for e in finals)
    request = servers["rollout"].requests[0]
    assert request["return_token_ids"] is True and request["logprobs"] is True


def test_streamed_calls_are_recorded_from_their_chunks(tmp_path, monkeypatch):
    """AgentScope's streamed request: Trinity's HistoryRecordingStream builds the experience
    from the chunks' token ids and log-probs."""
    pytest.importorskip("agentscope")
    policy = EXPERIMENTS["tests.fixtures.agentscope_tutorial:Streaming"][0]
    config = trinity_config(tmp_path, "tests.fixtures.agentscope_tutorial:Streaming")
    outcome, servers = run_batch(monkeypatch, config, policy)
    requests = servers["rollout"].requests
    assert all(r["stream"] is True and r["stream_options"] == {"include_usage": True}
               for r in requests)
    [sent] = {tuple(s["token_ids"]) for s in servers["rollout"].sent[:1]}
    assert any(tuple(e.tokens.tolist()[e.prompt_length:]) == sent for e in outcome.experiences)
    assert {e.reward for e in outcome.experiences} == {1.0}


def react_policy():
    """The ReAct example's model: the calculator tool for the task's sum, then the answer."""
    table = answers("examples/react_agent/data")

    def policy(messages):
        if messages[-1]["role"] == "tool":
            return f"The sum is {messages[-1]['content']}."
        question = next(q for q in table if q in json.dumps(messages))
        a, b = re.search(r"(\d+) plus (\d+)", question).groups()
        return {"content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "calculate", "arguments": json.dumps({"expression": f"{a}+{b}"})}}]}

    return policy


def test_a_react_tool_call_trajectory_is_two_experiences(tmp_path, monkeypatch):
    """The ReAct agent calls the calculator, then answers: two experiences, one reward."""
    pytest.importorskip("agentscope")
    policy = react_policy()
    config = trinity_config(tmp_path, "examples.react_agent.experiment:ReActMath")
    outcome, servers = run_batch(monkeypatch, config, policy)
    assert len(outcome.experiences) == 2 * 3 * 2
    assert {e.reward for e in outcome.experiences} == {1.0}
    tools = servers["rollout"].requests[0]["tools"]
    assert [t["function"]["name"] for t in tools] == ["calculate"]
    # Each experience carries the conversation it continues, so Trinity's buffer shows
    # what the model was asked (tunedsl view reads it): the request's messages, then
    # the reply with its tool call; and the tools offered.
    asked = Counter(json.dumps(r["messages"]) for r in servers["rollout"].requests)
    kept = Counter(json.dumps(e.messages[:-1]) for e in outcome.experiences)
    assert kept == asked
    calls = [e for e in outcome.experiences if e.messages[-1].get("tool_calls")]
    assert len(calls) == 6 and all(e.messages[-1]["tool_calls"][0]["function"]["name"] ==
                                   "calculate" for e in calls)
    answers_ = [e.messages[-1]["content"] for e in outcome.experiences if e not in calls]
    assert all(re.fullmatch(r"The sum is \d+\.", text) for text in answers_)
    assert all(e.tools == tools for e in outcome.experiences)


def test_saved_experiences_show_as_transcripts_in_tunedsl_view(tmp_path, monkeypatch):
    """The ReAct batch, saved by Trinity's own SQL writer where its pipeline saves its
    input, reads back in `tunedsl view` as rollouts of two calls: the question, the tool
    call, the tool's answer and the final reply."""
    pytest.importorskip("agentscope")
    import asyncio

    from trinity.buffer import get_buffer_writer
    from trinity.common.config import StorageConfig

    from tunedsl.view import open_source

    policy = react_policy()
    config = trinity_config(tmp_path, "examples.react_agent.experiment:ReActMath")
    outcome, _ = run_batch(monkeypatch, config, policy)
    run_dir = tmp_path / "run"
    (run_dir / "buffer").mkdir(parents=True)
    storage = StorageConfig(name="pipeline_input", storage_type="sql", schema_type="experience",
                            path=f"sqlite:///{run_dir / 'buffer' / 'explorer_output.db'}",
                            wrap_in_ray=False)

    async def save():
        writer = get_buffer_writer(storage)
        await writer.acquire()
        await writer.write(outcome.experiences)
        await writer.release()

    asyncio.run(save())
    source = open_source(run_dir)
    assert source.kind == "trinity" and len(source.entries) == 2 * 3
    record = source.record(0)
    first, second = record["calls"]
    assert first["messages"][-1]["role"] == "user" and first["reply"] == ""
    assert first["tool_calls"][0]["name"] == "calculate"
    assert second["messages"][-1]["role"] == "tool"
    assert re.fullmatch(r"The sum is \d+\.", second["reply"]) and record["reward"] == 1.0


def test_eval_metrics_that_trinity_aggregates_hold_the_reward(tmp_path, monkeypatch):
    """An eval taskset through the runner: Trinity's eval metrics show reward and user metrics."""
    config = trinity_config(tmp_path, "examples.math_agent.experiment:MathAgent")
    table = answers("examples/math_agent/data")
    right = set(list(table)[::2])  # every other question answered right

    def policy(messages):
        question = messages[-1]["content"]
        return f"Answer: {table[question] if question in right else -1}"

    servers = start(monkeypatch, policy, {})
    try:
        metrics = run_eval(config)
    finally:
        stop(servers)
    tests = [json.loads(line)["question"] for line in
             (REPO / "examples/math_agent/data/test.jsonl").read_text().splitlines()]
    expected = sum(q in right for q in tests) / len(tests)
    assert metrics["eval/eval/reward"] == pytest.approx(expected)
    assert metrics["eval/eval/answered"] == 1.0
