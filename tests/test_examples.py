"""The examples, unit-tested with the test kit as their users would."""

from __future__ import annotations

from examples.arith.experiment import Arith
from examples.llm_judge.experiment import LLMJudged, parse_score
from tunedsl.testing import ScriptedModel, run_rollout

CAPITAL = {"question": "What is the capital of France? Explain in one sentence.",
           "reference": "Paris"}


def test_llm_judge_rewards_the_graders_score():
    """The frozen grader sees question, reference and answer; its score/10 is the reward."""
    grader = ScriptedModel(["Score: 9"], name="grader")
    trajectory = run_rollout(LLMJudged, CAPITAL, ScriptedModel(["Paris is the capital."]),
                             {"grader": grader})
    assert (trajectory.reward, trajectory.metrics) == (0.9, {"grader_unreadable": 0.0})
    prompt = grader.calls[0].messages[0]["content"]
    assert "Reference answer: Paris" in prompt and "Candidate answer: Paris is the capital." \
        in prompt


def test_llm_judge_counts_an_unreadable_verdict_as_zero():
    """A verdict without 'Score: N' scores 0 and is counted in the metrics."""
    trajectory = run_rollout(LLMJudged, CAPITAL, ScriptedModel(["Lyon"]),
                             {"grader": ScriptedModel(["Hmm, not sure."])})
    assert (trajectory.reward, trajectory.metrics) == (0.0, {"grader_unreadable": 1.0})


def test_parse_score_caps_at_ten():
    """Scores above 10 count as 10; decimals are kept."""
    assert (parse_score("Score: 12"), parse_score("Score: 7.5"), parse_score("no")) == (
        1.0, 0.75, None)


def test_arith_judge_wants_the_exact_sum():
    """The arith example rewards exactly the sum, nothing around it."""
    task = {"question": "3+4=", "answer": "7"}
    assert run_rollout(Arith, task, ScriptedModel(["7"])).reward == 1.0
    assert run_rollout(Arith, task, ScriptedModel(["77"])).reward == 0.0
