"""Turns (``model.end_turn``): where each turn's reward and state land among a rollout's
calls, through the one rollout path the test kit, eval and every backend share, and the
errors a workflow gets for a turn it cannot mark."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunedsl import JudgeOutput, WorkflowOutput, judge, workflow
from tunedsl.dsl.turns import STATE_CHARACTERS, Turn, per_call, state_key
from tunedsl.errors import RolloutError
from tunedsl.testing import ScriptedModel, run_rollout


@workflow
async def walks(task, model):
    """An agent in a corridor: each turn one call, the reward the environment's."""
    position = 0
    for reward in task["rewards"]:
        await model.chat([{"role": "user", "content": f"at {position}"}])
        model.end_turn(reward=reward, state=f"cell {position}")
        position += 1
    return WorkflowOutput(response="done", reward=sum(task["rewards"]))


@workflow
async def uses_tools(task, model):
    """A ReAct-style agent: two calls a turn (a tool call, then the action)."""
    for turn in range(2):
        await model.chat([{"role": "user", "content": f"look {turn}"}])
        await model.chat([{"role": "user", "content": f"act {turn}"}])
        model.end_turn(reward=float(turn), state={"room": turn, "items": ["key"]})
    await model.chat([{"role": "user", "content": "summary"}])  # after the last turn
    return WorkflowOutput(response="done", reward=1.0)


def test_each_turns_reward_lands_on_its_call_and_its_state_on_it_too():
    trajectory = run_rollout(walks, {"rewards": [0.0, -0.5, 2.0]}, ScriptedModel(["go"] * 3))
    assert trajectory.turns == (Turn(1, 0.0, "cell 0"), Turn(2, -0.5, "cell 1"),
                                Turn(3, 2.0, "cell 2"))
    assert trajectory.turn_rewards == (0.0, -0.5, 2.0)
    assert trajectory.turn_states == ("cell 0", "cell 1", "cell 2")
    assert trajectory.reward == 1.5


def test_a_turn_of_several_calls_rewards_its_last_and_names_the_state_on_its_first():
    trajectory = run_rollout(uses_tools, {}, ScriptedModel(["x"] * 5))
    assert trajectory.turn_rewards == (None, 0.0, None, 1.0, None)
    assert trajectory.turn_states == ('{"items":["key"],"room":0}', None,
                                      '{"items":["key"],"room":1}', None, None)


def test_a_model_used_for_several_rollouts_counts_each_rollouts_turns_from_its_own_start():
    model = ScriptedModel(["go"] * 5)
    run_rollout(walks, {"rewards": [1.0, 1.0]}, model)
    second = run_rollout(walks, {"rewards": [3.0, 4.0, 5.0]}, model)
    assert second.turns == (Turn(1, 3.0, "cell 0"), Turn(2, 4.0, "cell 1"),
                            Turn(3, 5.0, "cell 2"))


def test_a_workflow_marking_no_turn_has_none():
    @workflow
    async def once(task, model):
        await model.chat([{"role": "user", "content": "q"}])
        return WorkflowOutput(response="a", reward=1.0)

    trajectory = run_rollout(once, {}, ScriptedModel(["a"]))
    assert (trajectory.turns, trajectory.turn_rewards, trajectory.turn_states) == ((), None, None)


@pytest.mark.parametrize("turns, calls, rewards, states", [
    # a turn without a call of its own: its reward to the call before; no state
    ([Turn(1, 1.0, "a"), Turn(1, 2.0, "b"), Turn(2, 4.0, "c")], 2, (3.0, 4.0), ("a", "c")),
    # turns before any call: their rewards to the first call
    ([Turn(0, 1.0, "a"), Turn(0, None, "b"), Turn(2, 2.0, None)], 2, (1.0, 2.0), None),
    # a state without a reward, and a reward without a state
    ([Turn(1, None, "a"), Turn(2, 5.0, None)], 3, (None, 5.0, None), ("a", None, None)),
    # no call at all: nothing to put anything on
    ([Turn(0, 1.0, "a")], 0, None, None),
])
def test_turns_spread_over_calls(turns, calls, rewards, states):
    spread = per_call(turns, calls)
    assert (spread.rewards, spread.states) == (rewards, states)


turn_lists = st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), st.floats(-10, 10)),
                                st.one_of(st.none(), st.text(max_size=5))), max_size=8)


@settings(max_examples=200, deadline=None)
@given(turn_lists, st.integers(0, 4))
def test_spreading_keeps_every_reward_and_puts_states_only_where_turns_begin(steps, tail):
    calls, turns = 0, []
    for made, reward, state in steps:
        calls += made
        turns.append(Turn(calls, reward, state))
    calls += tail
    spread = per_call(turns, calls)
    given_rewards = [t.reward for t in turns if t.reward is not None]
    if calls and given_rewards:
        assert math.isclose(sum(r for r in spread.rewards if r is not None), sum(given_rewards),
                            abs_tol=1e-9)
    else:
        assert spread.rewards is None
    starts = {previous.calls for previous, turn in zip([Turn(0, None, None), *turns], turns)
              if turn.calls > previous.calls and turn.state is not None}
    assert {i for i, s in enumerate(spread.states or ()) if s is not None} == starts


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=8))
def test_a_state_key_is_text_that_two_equal_states_share(state):
    key = state_key(state)
    assert key == state_key(json.loads(json.dumps(state)))  # a copy, keys in another order
    assert len(key) <= max(STATE_CHARACTERS, len("sha256:") + 64)


def test_a_long_state_is_kept_as_its_digest():
    board = "#" * (STATE_CHARACTERS + 1)
    assert state_key(board).startswith("sha256:") and state_key(board) != state_key(board + "#")
    assert state_key("#" * STATE_CHARACTERS) == "#" * STATE_CHARACTERS


def failure(turn_args, **auxiliary):
    """The error of a rollout whose workflow ends a turn with ``turn_args`` (on an auxiliary
    model, when one is given), and the workflow's label."""
    @workflow
    async def marks(task, model, auxiliary_models):
        await model.chat([{"role": "user", "content": "q"}])
        target = auxiliary_models["opponent"] if auxiliary else model
        target.end_turn(**turn_args)
        return WorkflowOutput(response="a", reward=1.0)

    with pytest.raises(RolloutError) as raised:
        run_rollout(marks, {}, ScriptedModel(["a"]), auxiliary or None)
    label = f"@workflow {marks.__qualname__} (tests/test_turns.py:{marks.__code__.co_firstlineno})"
    return str(raised.value), label


@pytest.mark.parametrize("turn_args, said", [
    ({"reward": "1"}, "raised TypeError: end_turn's reward must be a number; got '1' (a str)"),
    ({"reward": True}, "raised TypeError: end_turn's reward must be a number; got True (a "
                       "bool): write 1.0 or 0.0"),
    ({"reward": math.inf}, "raised ValueError: end_turn's reward must be a finite number; got "
                           "inf"),
    ({"reward": 10**400}, "raised ValueError: end_turn's reward must be a finite number; got "
                          "inf"),
    # a rollout's reward is held to the same bound (sweep 15: 1e300 passed, then NaN losses)
    ({"reward": -1e300}, "raised ValueError: end_turn's reward must be at most 1e+15 in size "
                         "(larger ones overflow the group's statistics); got -1e+300: scale it "
                         "down"),
    ({"state": {1, 2}}, "raised TypeError: end_turn's state must be text or JSON data "
                        "(numbers, lists, tuples, dicts of them) that names the environment's "
                        "state; got set (Object of type set is not JSON serializable): give "
                        "str(...) of a key that identifies it"),
])
def test_a_turn_the_workflow_cannot_mark_fails_its_rollout_in_words(turn_args, said):
    message, label = failure(turn_args)
    assert message == f"{label} {said}"


def test_a_turn_ended_on_an_auxiliary_model_fails_the_rollout():
    message, label = failure({"reward": 1.0}, opponent=ScriptedModel([]))
    assert message == (f"{label} ended a turn on the auxiliary model 'opponent'; turns are the "
                       f"trained model's (its calls are what trains): call model.end_turn(...)")


def test_a_turn_a_judge_ends_on_an_auxiliary_model_names_the_judge():
    """The judge's own doing was put on the workflow (sweep 15 W4)."""
    @workflow
    async def answers(task, model):
        await model.chat([{"role": "user", "content": "q"}])
        return WorkflowOutput(response="a")

    @judge
    async def grades(task, response, auxiliary_models):
        await auxiliary_models["grader"].chat([{"role": "user", "content": "grade a"}])
        auxiliary_models["grader"].end_turn(reward=1.0)
        return JudgeOutput(reward=1.0)

    with pytest.raises(RolloutError) as raised:
        run_rollout((answers, grades), {}, ScriptedModel(["a"]),
                    {"grader": ScriptedModel(["1"])})
    line = grades.__code__.co_firstlineno
    assert str(raised.value) == (
        f"@judge {grades.__qualname__} (tests/test_turns.py:{line}) ended a turn on the "
        f"auxiliary model 'grader'; turns are the trained model's (its calls are what "
        f"trains): call model.end_turn(...) in the workflow")


def test_eval_keeps_each_rollouts_turns_in_its_results_line(tmp_path):
    """The same turns, from a real OpenAI client against an OpenAI-compatible server, in
    ``eval``'s results file, the calls each turn ended at counted from the rollout's first."""
    import tunedsl

    from .openai_server import OpenAIServer

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "test.jsonl").write_text(
        '{"rewards": [1.0, 0.0]}\n{"rewards": [0.5]}\n')
    (tmp_path / "walk.py").write_text(
        "from tunedsl import Dataset, Model, experiment\n"
        "from tests.test_turns import walks\n\n\n"
        "@experiment\nclass Walk:\n    workflow = walks\n"
        "    train_dataset = Dataset('data', split='test')\n"
        "    eval_dataset = Dataset('data', split='test')\n"
        "    model = Model('m', max_model_len=64)\n")
    results = tmp_path / "results.jsonl"
    with OpenAIServer(lambda messages: "go") as server:
        tunedsl.evaluate(f"{tmp_path / 'walk.py'}:Walk", f"m@{server.base_url}",
                         output=results, concurrency=1, progress=False)
    lines = sorted((json.loads(line) for line in results.read_text().splitlines()),
                   key=lambda line: line["task_index"])
    assert [line["turns"] for line in lines] == [
        [{"calls": 1, "reward": 1.0, "state": "cell 0"},
         {"calls": 2, "reward": 0.0, "state": "cell 1"}],
        [{"calls": 1, "reward": 0.5, "state": "cell 0"}]]


def test_numpy_numbers_make_state_keys_and_a_state_too_deep_is_said_so():
    import numpy

    assert state_key(numpy.int64(3)) == "3" and state_key([numpy.float32(0.5), "a"]) == '[0.5,"a"]'
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(TypeError) as raised:
        state_key(deep)
    assert str(raised.value) == ("end_turn's state is nested too deep to make a key of; give "
                                 "str(...) of a key that identifies it")
