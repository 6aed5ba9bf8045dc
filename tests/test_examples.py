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


def test_react_agent_answers_with_the_calculator():
    """The ReAct example: a scripted tool call, the calculator's result, then the answer."""
    import pytest

    pytest.importorskip("agentscope")
    from examples.react_agent.experiment import ReActMath
    from tunedsl import ChatResponse, ToolCall

    task = {"question": "What is 676 plus 59?", "answer": "735"}
    call = ToolCall(id="c1", name="calculate", arguments='{"expression": "676+59"}')
    policy = ScriptedModel([ChatResponse(content="", tool_calls=[call]), "That makes 735."])
    trajectory = run_rollout(ReActMath, task, policy)
    assert trajectory.reward == 1.0 and len(trajectory.calls) == 2
    assert trajectory.calls[1].messages[-1]["content"] == "735"
    assert run_rollout(ReActMath, task, ScriptedModel(["Roughly 700."])).reward == 0.0


def test_react_agents_calculator_refuses_anything_but_arithmetic():
    """The calculator evaluates numbers and operators only, never code."""
    import pytest

    pytest.importorskip("agentscope")
    from examples.react_agent.experiment import calculate

    assert calculate("(2+3)*4").content[0]["text"] == "20"
    assert calculate("__import__('os')").content[0]["text"] == (
        "error: only numbers and + - * / ( ) are allowed")


def test_corridor_ends_a_turn_per_move_and_opens_a_door_for_the_right_digit():
    """The corridor: the right digit for the cell opens its door (reward 1, the next cell);
    a wrong one leaves the agent where it was; each turn names the cell it began in."""
    from examples.corridor.experiment import CELLS, Corridor, right_digit

    task = {"code": 2, "turns": 4}
    moves = [right_digit(2, 0), "x", right_digit(2, 1), right_digit(2, 2)]
    trajectory = run_rollout(Corridor, task, ScriptedModel(moves))
    assert trajectory.reward == 3.0 and trajectory.metrics == {"reached_end": 0.0, "doors": 3.0}
    assert trajectory.turn_rewards == (1.0, 0.0, 1.0, 1.0)
    assert trajectory.turn_states == ("20=", "21=", "21=", "22=")
    perfect = run_rollout(Corridor, {"code": 7, "turns": 8},
                          ScriptedModel([right_digit(7, cell) for cell in range(CELLS)]))
    assert (perfect.reward, len(perfect.calls), perfect.metrics) == (
        float(CELLS), CELLS, {"reached_end": 1.0, "doors": float(CELLS)})
    from examples.corridor.experiment import CorridorToTheEnd

    sparse = run_rollout(CorridorToTheEnd, task, ScriptedModel(moves))
    assert (sparse.reward, sparse.turn_rewards) == (0.0, (1.0, 0.0, 1.0, 1.0))


def test_sudoku_port_rewards_each_step_as_trinitys_workflow_does():
    """The Sudoku port: a step of valid moves earns 0, the solving step 1, a step that
    breaks the rules -1 and ends the game; each step's state is the board it began on."""
    import json
    from pathlib import Path

    from examples.sudoku.experiment import Sudoku, is_valid, render

    tasks = [json.loads(line) for line in
             Path("examples/sudoku/data/train.jsonl").read_text().splitlines()]
    assert all(is_valid(task["solution"]) and is_valid(task["puzzle"]) for task in tasks)
    task = tasks[0]  # three empty cells
    empty = [(r, c) for r in range(9) for c in range(9) if task["puzzle"][r][c] == 0]
    moves = [f"{r} {c} {task['solution'][r][c]}" for r, c in empty]
    solved = run_rollout(Sudoku, task, ScriptedModel([moves[0], "\n".join(moves[1:])]))
    assert (solved.reward, solved.turn_rewards) == (1.0, (0.0, 1.0))
    assert solved.turn_states[0] == render(task["puzzle"])
    wrong = (task["solution"][empty[0][0]][empty[0][1]] % 9) + 1
    broken = run_rollout(Sudoku, task, ScriptedModel([f"{empty[0][0]} {empty[0][1]} {wrong}"]))
    assert (broken.reward, broken.turn_rewards) == (0.0, (-1.0,))
    filled = next((r, c) for r in range(9) for c in range(9) if task["puzzle"][r][c])
    refused = run_rollout(Sudoku, task, ScriptedModel([moves[0], "%d %d 5" % filled]))
    assert (refused.reward, refused.turn_rewards) == (0.0, (0.0, -1.0))
    assert run_rollout(Sudoku, task, ScriptedModel(["I think 4 goes top left"])).turn_rewards \
        == (-1.0,)
