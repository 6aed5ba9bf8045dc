"""AgentScope 2.x (its ``Agent`` class, pydantic ``Msg``) in the test kit, eval and rescore.

CI runs this file in an environment of its own with AgentScope 2 (which needs Python 3.11+
and cannot sit beside AgentScope 1.0.x); elsewhere it is skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

agentscope = pytest.importorskip("agentscope")
if int(agentscope.__version__.split(".")[0]) < 2:
    pytest.skip("AgentScope 2.x is not installed here (CI runs this file in its own "
                "environment)", allow_module_level=True)

from tunedsl.testing import ScriptedModel, run_rollout  # noqa: E402

from agentscope.message import UserMsg  # noqa: E402
from agentscope.model import ChatModelBase  # noqa: E402

from .fixtures import agentscope2_agent as fixture  # noqa: E402
from .openai_server import OpenAIServer, sums  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TASK = {"question": "What is 341 plus 980?", "answer": "1321"}


def cli(*args):
    return subprocess.run([sys.executable, "-m", "tunedsl", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_an_agentscope2_agent_scores_in_the_test_kit():
    """Agent(model=...) gets a model bound to the scripted client, streamed or not."""
    right = run_rollout(fixture.Solver, TASK, ScriptedModel(["It is 1321."]))
    wrong = run_rollout(fixture.Solver, TASK, ScriptedModel(["No idea."]))
    streamed = run_rollout(fixture.StreamingSolver, TASK, ScriptedModel(["It is 1321."]))
    assert (right.reward, wrong.reward, streamed.reward) == (1.0, 0.0, 1.0)
    assert type(right.response).__name__ == "Msg"
    assert right.calls[0].messages[1]["content"] == [{"type": "text", "text": TASK["question"]}]


def test_an_agent_waiting_for_permission_to_run_a_tool_fails_its_rollout():
    """AgentScope 2's default permission mode parks a tool call until a person allows it;
    in a rollout nobody does, and the agent's "I'm waiting for your permission" reply
    scored 0 with no error. It fails the rollout, naming the permission mode to use."""
    from tunedsl import ChatResponse, ToolCall
    from tunedsl.errors import RolloutError
    from tunedsl.rollout.run import label_of

    def script():
        return ScriptedModel([ChatResponse(content="", tool_calls=[ToolCall(
            id="c1", name="add", arguments='{"a": 341, "b": 980}')]), "It is 1321."])

    with pytest.raises(RolloutError) as caught:
        run_rollout((fixture.solve_with_a_tool, fixture.exact), TASK, script())
    assert str(caught.value) == (
        f"{label_of(fixture.solve_with_a_tool)} returned an AgentScope agent's reply that "
        "waits for permission to run its tool calls (AgentScope 2's default permission mode asks a person, and nobody answers in a "
        "rollout); build the agent with state=AgentState(permission_context="
        "PermissionContext(mode=PermissionMode.BYPASS)), or allow its tools by permission "
        "rules")
    unasked = run_rollout((fixture.solve_with_a_tool_unasked, fixture.exact), TASK, script())
    assert (unasked.reward, len(unasked.calls)) == (1.0, 2)


def test_the_guides_agent_with_a_tool_runs_it_unasked(tmp_path):
    """The AgentScope guide's 2.x agent with a tool (its code block, run here): its tool
    runs in a rollout, and the agent answers with the tool's result."""
    from tunedsl import ChatResponse, ToolCall, WorkflowOutput, workflow

    from .test_docs_examples import run_by

    [block] = run_by("tests/test_agentscope2.py")
    namespace: dict = {"Any": object}
    exec(compile(block.code, f"docs/{block.page}", "exec"), namespace)

    @workflow
    async def solve(task, model: ChatModelBase):
        reply = await namespace["calculator"](model).reply(UserMsg("user", task["question"]))
        return WorkflowOutput(response=reply)

    model = ScriptedModel([ChatResponse(content="", tool_calls=[ToolCall(
        id="c1", name="add", arguments='{"a": 341, "b": 980}')]), "It is 1321."])
    done = run_rollout((solve, fixture.exact), TASK, model)
    assert done.reward == 1.0
    assert model.calls[1].messages[-1] == {"role": "tool", "tool_call_id": "c1",
                                            "content": "1321", "name": "add"}


def test_eval_and_rescore_keep_a_pydantic_msg(tmp_path):
    """The pydantic Msg is saved with model_dump and rebuilt with model_validate."""
    out, rescored = tmp_path / "results.jsonl", tmp_path / "rescored.jsonl"
    with OpenAIServer(sums) as server:
        done = cli("eval", "tests.fixtures.agentscope2_agent:Solver", "--base-url",
                   server.base_url, "--model", "served", "-n", "2", "-o", str(out),
                   "--no-progress")
        sent = server.requests[0]
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["reward"] for r in records] == [1.0, 1.0]
    assert records[0]["response_class"] == "agentscope.message._base:Msg"
    assert (sent["temperature"], sent["max_completion_tokens"]) == (0.5, 16)
    again = cli("rescore", str(out), "tests.fixtures.agentscope2_agent:Solver", "-o",
                str(rescored))
    assert again.returncode == 0, again.stderr
    assert [json.loads(line)["reward"] for line in rescored.read_text().splitlines()] == [
        1.0, 1.0]
