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
