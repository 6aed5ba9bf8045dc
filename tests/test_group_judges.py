"""@group_judge: a judge that scores a task's whole group of rollouts at once, in the test
kit, ``check``, ``eval`` (``--repeat`` forms the group), ``rescore`` and a local run (the
Trinity runner's part is in tests/test_trinity_rollouts.py)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunedsl import JudgeOutput, WorkflowOutput, experiment, group_judge, judge, workflow
from tunedsl.errors import RolloutError, SignatureError
from tunedsl.testing import ScriptedModel, run_group, run_rollout

from .cli_support import cli
from .fixtures.group_judges import places, ranks
from .openai_server import OpenAIServer

HERE = "tests/test_group_judges.py"


@workflow
async def answer(task, model):
    reply = await model.chat([{"role": "user", "content": task["question"]}])
    return WorkflowOutput(response=reply.content)


TASK = {"question": "3+4=", "answer": "7"}


def scripted(*replies):
    return [ScriptedModel([reply]) for reply in replies]


def line_of(fn) -> int:
    return fn.__code__.co_firstlineno


# ------------------------------------------------------------------------ the decorator

def test_a_group_judge_stays_a_plain_function_and_takes_a_judges_place():
    async def by_hand(task, responses):
        return [JudgeOutput(reward=1.0) for _ in responses]

    assert group_judge(by_hand) is by_hand

    @experiment
    class Ranked:
        workflow = answer
        judge = ranks

    from tunedsl.dsl.decorators import spec_of

    assert spec_of(Ranked).judge is ranks
    assert spec_of(ranks).kind == "group_judge"


@pytest.mark.parametrize("source, message", [
    ("async def f(task, response):\n    return []",
     "@group_judge f ({file}:1) has an unknown parameter 'response' (did you mean "
     "'responses'?); a group_judge takes task, responses and optionally auxiliary_models, "
     "params, logger"),
    ("def f(task, responses):\n    return []",
     "@group_judge f ({file}:1) must be async: write async def f(task, responses)"),
    ("async def f(task, responses):\n    yield []",
     "@group_judge f ({file}:1) is an async generator (it yields); a group judge returns "
     "once: return a list of JudgeOutput(...), one per response instead of yielding"),
])
def test_a_group_judge_of_the_wrong_shape_is_refused_in_one_line(source, message, tmp_path):
    path = tmp_path / "judges.py"
    path.write_text(source + "\n", encoding="utf-8")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102
    with pytest.raises(SignatureError) as raised:
        group_judge(namespace["f"])
    assert str(raised.value) == message.format(file=path)


def test_a_judge_taking_responses_is_pointed_to_group_judge():
    async def whole(task, responses):
        return []

    with pytest.raises(SignatureError) as raised:
        judge(whole)
    assert str(raised.value) == (
        f"@judge {whole.__qualname__} ({HERE}:{line_of(whole)}) takes 'responses', as a judge "
        f"of a task's whole group does: decorate it with @group_judge (a @judge scores one "
        f"response: async def whole(task, response))")


def test_a_group_judge_called_with_parentheses_says_so():
    with pytest.raises(SignatureError) as raised:
        group_judge()
    assert str(raised.value) == ("@group_judge() takes no arguments: write @group_judge "
                                 "without parentheses above async def f(task, responses)")


def test_a_judge_slot_holding_a_plain_function_names_both_kinds():
    async def plain(task, responses):
        return []

    with pytest.raises(Exception) as raised:
        experiment(type("Plain", (), {"workflow": answer, "judge": plain,
                                      "__module__": __name__}))
    assert str(raised.value).endswith(
        ".judge must be a @judge function (got the undecorated function "
        "test_a_judge_slot_holding_a_plain_function_names_both_kinds.<locals>.plain): add "
        "@judge above 'async def plain' (or @group_judge)")


# ---------------------------------------------------------------------------- test kit

def test_the_kit_runs_a_group_and_the_judge_scores_it_whole():
    trajectories = run_group((answer, ranks), TASK, scripted("7", "9", "x", "6"))
    assert [t.response for t in trajectories] == ["7", "9", "x", "6"]
    assert [t.reward for t in trajectories] == places(TASK, ["7", "9", "x", "6"])
    assert [t.reward for t in trajectories] == [1.0, 1 / 3, 0.0, 2 / 3]
    assert all(t.metrics == {"group_size": 4.0} for t in trajectories)
    assert [len(t.calls) for t in trajectories] == [1, 1, 1, 1]


def test_run_rollout_with_a_group_judge_is_a_group_of_one():
    assert run_rollout((answer, ranks), TASK, ScriptedModel(["7"])).reward == 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=9))
def test_each_rollout_gets_the_reward_the_judge_gave_at_its_place(rewards):
    @group_judge
    async def given_back(task, responses):
        return [JudgeOutput(reward=rewards[int(r)]) for r in responses]

    trajectories = run_group((answer, given_back), TASK,
                             scripted(*(str(i) for i in range(len(rewards)))))
    assert [t.reward for t in trajectories] == rewards


@group_judge
async def one_short(task, responses):
    return [JudgeOutput(reward=1.0)] * (len(responses) - 1)


@group_judge
async def a_dict(task, responses):
    return {r: JudgeOutput(reward=1.0) for r in responses}


@group_judge
async def floats(task, responses):
    return [1.0 for _ in responses]


@group_judge
async def raises(task, responses):
    raise ValueError("the judge is down")


@group_judge
async def forgot_a_return(task, responses):
    return [None for _ in responses]  # a helper that returned nothing (sweep 17 T1)


@group_judge
async def nan_for_the_second(task, responses):
    return [JudgeOutput(reward=float("nan") if i == 1 else 1.0) for i in range(len(responses))]


@pytest.mark.parametrize("judge_fn, said", [
    (one_short, "returned 1 JudgeOutputs for 2 responses; return one per response, in their "
                "order"),
    (a_dict, "returned {'7': JudgeOutput(reward=1.0, metrics=None), '9': JudgeOutput(reward="
             "1.0, metrics=None)}; return a list of JudgeOutput(reward=...), one per response"),
    (floats, "returned a list holding 1.0; return a list of JudgeOutput(reward=...), one per "
             "response"),
    (raises, "raised ValueError: the judge is down"),
    (forgot_a_return, "returned a list holding None; return a list of "
                      "JudgeOutput(reward=...), one per response"),
    (nan_for_the_second, "returned the reward nan; a reward must be a finite number"),
])
def test_a_group_judge_that_fails_fails_the_group_in_one_line(judge_fn, said):
    with pytest.raises(RolloutError) as raised:
        run_group((answer, judge_fn), TASK, scripted("7", "9"))
    assert str(raised.value) == f"@group_judge {judge_fn.__name__} ({HERE}:" \
                                f"{line_of(judge_fn)}) {said}"
    assert raised.value.stage == "judge"


def test_the_kits_group_arguments_are_named_with_the_fix():
    model = ScriptedModel(["7", "7"])
    for models, said in [
        ([], "run_group's models must be a list of models, one per rollout of the group, e.g. "
             "[ScriptedModel([...]), ScriptedModel([...])]; got [] (a list)"),
        (model, "run_group's models must be a list of models, one per rollout of the group, "
                "e.g. [ScriptedModel([...]), ScriptedModel([...])]; got "
                f"{model!r} (a ScriptedModel)"),
        ([model, model], "run_group's models must be distinct: each rollout records its own "
                         "calls; give one ScriptedModel per rollout"),
        ([model, None], "run_group's model is None (a NoneType), which has no chat method; "
                        "give a ScriptedModel([...]), say"),
    ]:
        with pytest.raises(Exception) as raised:
            run_group((answer, ranks), TASK, models)
        assert str(raised.value) == said


def test_a_per_rollout_judge_scores_a_kit_group_one_by_one():
    @judge
    async def exact(task, response):
        return JudgeOutput(reward=float(response == task["answer"]))

    assert [t.reward for t in run_group((answer, exact), TASK, scripted("7", "1"))] == [1.0, 0.0]


# ------------------------------------------------------------------------- check, eval

def test_check_runs_the_group_judge_on_a_scripted_group_of_two(tiny_model, tmp_path):
    done = cli("check", "tests.fixtures.eval_agents:Ranked", "--backend", "local",
               "--set", f"checkpoint_root_dir={tmp_path}", "--set",
               f"model.model_path={tiny_model}", "--set", "algorithm.batch_size=2")
    assert "ok  rollout: the workflow ran twice on the first training task with a scripted " \
           "model and the group judge scored the two together (rewards 0, 0)" in \
        done.stdout.splitlines(), done.stdout + done.stderr


def test_check_names_a_group_judge_that_returns_too_few(tiny_model):
    project = "tests.fixtures.group_judge_short:Short"
    done = cli("check", project, "--backend", "local", "--set",
               f"model.model_path={tiny_model}", "--set", "algorithm.batch_size=2")
    assert done.returncode == 2
    line = next(x for x in done.stderr.splitlines() if "JudgeOutputs" in x)
    assert line.endswith("@group_judge one_short (tests/fixtures/group_judge_short.py:7) "
                         "returned 1 JudgeOutputs for 2 responses; return one per response, "
                         "in their order")


def changing_replies():
    """Replies that differ from call to call: 7, 9, x, 6, then again."""
    answers = itertools.cycle(["7", "9", "x", "6", "3"])
    return lambda messages: next(answers)


def results(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def by_task(records):
    grouped: dict[int, list[dict]] = {}
    for record in records:
        grouped.setdefault(record["task_index"], []).append(record)
    return {k: sorted(v, key=lambda r: r["repeat"]) for k, v in grouped.items()}


def test_eval_forms_each_group_from_the_repeats_and_rescore_judges_them_again(tmp_path):
    out = tmp_path / "ranked.jsonl"
    with OpenAIServer(changing_replies()) as server:
        done = cli("eval", "tests.fixtures.eval_agents:Ranked", "--base-url", server.base_url,
                   "--model", "m", "--repeat", "3", "-n", "4", "-o", out, "--no-progress")
    assert done.returncode == 0, done.stderr
    groups = by_task(results(out))
    assert sorted(groups) == [0, 1, 2, 3] and all(len(g) == 3 for g in groups.values())
    for group in groups.values():
        task = group[0]["task"]
        assert [r["reward"] for r in group] == places(task, [r["response"] for r in group])
        assert all(r["metrics"] == {"group_size": 3.0} for r in group)

    # rescore: the same groups, judged together again (here by another group judge)
    again = tmp_path / "again.jsonl"
    done = cli("rescore", out, "tests.fixtures.group_judge_short:Reversed", "-o", again)
    assert done.returncode == 0, done.stderr
    for group in by_task(results(again)).values():
        assert [r["reward"] for r in group] == \
            [1 - p for p in places(group[0]["task"], [r["response"] for r in group])]
        assert [r["previous_reward"] for r in group] == \
            places(group[0]["task"], [r["response"] for r in group])


def test_a_group_judge_failing_in_eval_keeps_each_member_s_response(tmp_path):
    """A group judge that raised left every member's response null (sweep 48 B-L1): each
    keeps its own, and rescore with a working group judge judges them together again."""
    out = tmp_path / "ranked.jsonl"
    with OpenAIServer(changing_replies()) as server:
        done = cli("eval", "tests.fixtures.eval_agents:RankedBadly", "--base-url",
                   server.base_url, "--model", "m", "--repeat", "3", "-n", "2", "-o", out,
                   "--no-progress")
    assert done.returncode == 1, done.stderr  # (every rollout failed)
    groups = by_task(results(out))
    for group in groups.values():
        assert [r["failed_in"] for r in group] == ["judge"] * 3
        assert [r["response"] for r in group] == [
            r["messages"][0]["reply"] for r in group]
    again = tmp_path / "again.jsonl"
    done = cli("rescore", out, "tests.fixtures.eval_agents:Ranked", "-o", again)
    assert done.returncode == 0, done.stderr
    for group in by_task(results(again)).values():
        assert [r["reward"] for r in group] == places(group[0]["task"],
                                                      [r["response"] for r in group])


def test_eval_judges_only_the_rollouts_that_did_not_fail(tmp_path):
    out = tmp_path / "ranked.jsonl"
    replies = itertools.count()

    def fail_every_third(messages):
        number = next(replies)
        return "7" if number % 3 else "8"

    with OpenAIServer(fail_every_third, failures=[None, 400, None]) as server:
        done = cli("eval", "tests.fixtures.eval_agents:Ranked", "--base-url", server.base_url,
                   "--model", "m", "--repeat", "3", "-n", "1", "-o", out, "--no-progress",
                   "--concurrency", "1")
    records = results(out)
    failed = [r for r in records if r["error"] is not None]
    judged = [r for r in records if r["error"] is None]
    assert len(failed) == 1 and len(judged) == 2, done.stderr
    assert all(r["metrics"] == {"group_size": 2.0} for r in judged)


def test_eval_resume_runs_a_group_again_whole(tmp_path):
    """A task whose group is not whole in the file (a line lost) runs its repeats again, so
    the judge sees a whole group; the new lines replace the old."""
    out = tmp_path / "ranked.jsonl"
    with OpenAIServer(changing_replies()) as server:
        args = ("eval", "tests.fixtures.eval_agents:Ranked", "--base-url", server.base_url,
                "--model", "m", "--repeat", "2", "-n", "2", "-o", out, "--no-progress")
        assert cli(*args).returncode == 0
        lines = out.read_text().splitlines()
        kept = [line for line in lines if not (json.loads(line)["task_index"] == 1
                                               and json.loads(line)["repeat"] == 0)]
        out.write_text("\n".join(kept) + "\n")
        before = len(server.requests)
        done = cli(*args, "--resume")
        assert done.returncode == 0, done.stderr
        assert len(server.requests) - before == 2  # task 1's two repeats, not one
    records = results(out)
    assert [(r["task_index"], r["repeat"]) for r in records[len(kept):]] == [(1, 0), (1, 1)]


def test_a_ruler_judge_scores_the_group_in_one_call_of_its_model(tmp_path):
    """examples/llm_judge's LLMRanked: one grader call per task shows it the group."""
    out = tmp_path / "ruled.jsonl"
    with OpenAIServer(changing_replies()) as policy, \
            OpenAIServer(lambda messages: "Paris twice. Scores: [0.9, 0.2, 1.5]") as grader:
        done = cli("eval", "examples.llm_judge.experiment:LLMRanked", "--base-url",
                   policy.base_url, "--model", "m", "--aux", f"grader={grader.base_url},g",
                   "--repeat", "3", "-n", "2", "-o", out, "--no-progress")
        assert done.returncode == 0, done.stderr
        assert len(grader.requests) == 2  # one call per task's group
        prompt = grader.requests[0]["messages"][0]["content"]
    assert [line for line in prompt.splitlines() if line.startswith("Candidate ")] == [
        f"Candidate {i}: {reply}" for i, reply in enumerate(["7", "9", "x"], start=1)]
    assert [r["reward"] for r in results(out)] == [0.9, 0.2, 1.0] * 2
    assert {r["metrics"]["grader_unreadable"] for r in results(out)} == {0.0}


@settings(max_examples=200, deadline=None)
@given(st.text(), st.lists(st.floats(-5, 5, allow_nan=False), max_size=6), st.text())
def test_the_graders_scores_are_read_from_its_last_list_or_not_at_all(before, scores, after):
    from examples.llm_judge.experiment import parse_scores

    after = after.replace("[", "").replace("]", "")
    found = parse_scores(f"{before}{scores}{after}", len(scores))
    assert found == [min(1.0, max(0.0, s)) for s in scores]
    assert parse_scores(f"{before}{scores}{after}", len(scores) + 1) is None
    assert parse_scores(f"[{10**400}]", 1) is None  # past float's range: no score


# ------------------------------------------------------------------------- local backend

def test_a_local_run_scores_each_tasks_group_together(tiny_model, tmp_path):
    from .local_support import graph_for, run_local

    summary = run_local(graph_for("Ranked", tiny_model, tmp_path,
                                  "train_dataset.total_steps=1"), progress=False)
    rollouts = [json.loads(line) for line in
                (summary.run_dir / "rollouts.jsonl").read_text().splitlines()]
    groups: dict[int, list[dict]] = {}
    for rollout in rollouts:
        groups.setdefault(rollout["task_index"], []).append(rollout)
    assert len(groups) == 5 and all(len(g) == 4 for g in groups.values())
    for group in groups.values():
        replies = [r["calls"][-1]["reply"] for r in group]
        assert [r["reward"] for r in group] == places(group[0]["task"], replies)


def test_check_with_a_group_of_one_says_so(tiny_model, tmp_path):
    """group_size = 1: the judge sees one response in training, and check says that, not
    "the two together" (sweep 17 W11)."""
    done = cli("check", "tests.fixtures.eval_agents:Ranked", "--backend", "local",
               "--set", f"checkpoint_root_dir={tmp_path}", "--set",
               f"model.model_path={tiny_model}", "--set", "algorithm.batch_size=2",
               "--set", "algorithm.group_size=1", "--set",
               "algorithm.algorithm_type=reinforceplusplus")
    assert "ok  rollout: the workflow ran on the first training task with a scripted model " \
           "and the group judge scored it as a group of one (group_size = 1) (reward 0)" in \
        done.stdout.splitlines(), done.stdout + done.stderr
