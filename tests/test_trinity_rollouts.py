"""The edges of a rollout on Trinity-RFT 0.6.0, through its own WorkflowRunner, ModelWrapper
and experience operators (tests/trinity_runner.py says what stands in): a rollout that
makes no model call, one that outlives rollout_timeout, a conversation that outgrows the
context, a call that samples otherwise than the trainer scores, and vLLM's ``reasoning``."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

pytest.importorskip("trinity.common.config")

import tunedsl  # noqa: E402
from tunedsl.backends.trinity.config import FAILED_ROLLOUTS, INVALID_REWARD_FILTER  # noqa: E402
from tunedsl.dsl.trinity_fields import FAILED_ROLLOUT, ROLLOUT_ERROR  # noqa: E402

from .trinity_runner import (  # noqa: E402
    VLLMServer,
    render,
    run_eval,
    run_training_batch,
    serve_models,
    token_ids,
)
from .trinity_support import validate  # noqa: E402

FIXTURES = "tests.fixtures.trinity_rollouts"


def checked(tmp_path, name, *overrides):
    """The fixture experiment's YAML, loaded and validated by Trinity."""
    return validate(tunedsl.load_experiment(f"{FIXTURES}:{name}", overrides=list(overrides)),
                    tmp_path)


def through_runner(monkeypatch, config, reply, run=run_training_batch, **engine):
    """``run(config)`` with the trained model served by a vLLM-style engine answering
    ``reply``; returns what it returns and the engine."""
    server = VLLMServer(reply, **engine).__enter__()
    serve_models(monkeypatch, {"rollout": server})
    try:
        return run(config), server
    finally:
        server.__exit__(None, None, None)


def rollout_errors(outcome):
    """The errors of the failed training rollouts, as their placeholders carry them to the
    pipeline's failed-rollouts operator (Trinity's runner sees each rollout succeed)."""
    assert all(status.ok for status in outcome.statuses), [s.message for s in outcome.statuses]
    return [e.info[ROLLOUT_ERROR] for e in outcome.experiences if ROLLOUT_ERROR in e.info]


def test_a_rollout_without_a_model_call_trains_nothing_and_fails_nothing(tmp_path, monkeypatch):
    """Trinity's runner fails a run that returns no experience ("An empty experience is
    generated"); tunedsl's placeholder keeps the run and its reward in the metrics, and the
    pipeline's operators (tunedsl's failed-rollouts count, then Trinity's
    invalid_reward_filter) drop it before training, failing nothing."""
    from trinity.buffer.operators import create_operators

    config = checked(tmp_path, "NoCall")
    outcome, server = through_runner(monkeypatch, config, lambda m: "unused")
    assert all(status.ok for status in outcome.statuses), [s.message for s in outcome.statuses]
    assert server.requests == []
    assert len(outcome.experiences) == 2 * 2
    assert all(math.isnan(e.reward) and e.metrics == {"lookups": 1.0, "reward": 1.0}
               for e in outcome.experiences)
    assert [op.name for op in config.data_processor.experience_pipeline.operators] == \
        [FAILED_ROLLOUTS, INVALID_REWARD_FILTER["name"]]
    failed, invalid = create_operators(config.data_processor.experience_pipeline.operators)
    kept, metrics = asyncio.run(failed.process(list(outcome.experiences)))
    assert metrics == {"rollout_errors": 0, "dropped_group_count": 0, "filtered_count": 0}
    kept, metrics = asyncio.run(invalid.process(kept))
    assert (kept, metrics) == ([], {"filtered_count": 4})


def test_an_eval_rollout_without_a_model_call_is_scored(tmp_path, monkeypatch):
    """Eval tasks too: the rollout's reward reaches the eval metrics Trinity aggregates."""
    config = checked(tmp_path, "NoCall")
    metrics, _ = through_runner(monkeypatch, config, lambda m: "unused", run=run_eval)
    assert metrics["eval/eval/reward"] == 1.0
    assert metrics["eval/eval/lookups"] == 1.0


def test_a_rollout_awaiting_past_rollout_timeout_fails_at_the_bound(tmp_path, monkeypatch):
    """rollout_timeout = 1 bounds each rollout on the runner (Trinity's own per-task limit
    is its whole step's): four rollouts that would await 30 s each fail within seconds."""
    config = checked(tmp_path, "Waits")
    started = time.perf_counter()
    outcome, _ = through_runner(monkeypatch, config, lambda m: "4")
    assert time.perf_counter() - started < 15
    assert rollout_errors(outcome) == [
        "@workflow waits (tests/fixtures/trinity_rollouts.py:16) "
        "timed out after 1s (rollout_timeout); make it faster or raise rollout_timeout"] * 4
    assert all(e.info[FAILED_ROLLOUT] for e in outcome.experiences)


def test_a_rollout_holding_the_loop_fails_on_a_runner_thread(tmp_path, monkeypatch):
    """Ray runs an async actor's loop in a thread of its own: a rollout that holds it in
    Python code is interrupted there too, and the runner goes on to the next."""
    config = checked(tmp_path, "Spins")
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(
        done=through_runner(monkeypatch, config, lambda m: "4")[0]))
    started = time.perf_counter()
    worker.start()
    worker.join(30)
    assert not worker.is_alive() and time.perf_counter() - started < 20
    assert set(rollout_errors(outcome["done"])) == {
        "@workflow spins (tests/fixtures/trinity_rollouts.py:24) "
        "raised RolloutBlocked: held the event loop past rollout_timeout: blocking code "
        "(time.sleep, a synchronous HTTP call, a long computation) in an async workflow or "
        "judge stops every rollout; await asyncio.to_thread(...) or use an async client"}


def test_a_long_conversation_gets_replies_bounded_by_the_room_left(tmp_path, monkeypatch):
    """vLLM refuses prompt + max_tokens > max_model_len (HTTP 400); the trained model leaves
    max_tokens to the engine (its max_response_tokens), which bounds each reply by it and by
    the room the prompt leaves, as the local backend does."""
    config = checked(tmp_path, "TalksOn", "params.turns=2")
    outcome, server = through_runner(monkeypatch, config, lambda m: "y" * 100,
                                     max_model_len=256, default_max_tokens=64)
    assert all(status.ok for status in outcome.statuses), [s.message for s in outcome.statuses]
    assert all("max_tokens" not in request for request in server.requests)
    second = server.requests[1]
    room = 256 - len(token_ids(render(second["messages"], None)))
    assert room < 64
    replies = [e for e in outcome.experiences if e.eid.run == 0 and e.eid.task == 0]
    assert [len(e.tokens) - e.prompt_length for e in replies] == [64, room]


def test_a_call_naming_max_tokens_past_the_room_is_bounded_not_refused(tmp_path, monkeypatch):
    """A workflow's own max_tokens that the prompt leaves no room for: the engine's 400 is
    answered by asking again without it, so the reply is bounded by the room left."""
    config = checked(tmp_path, "TalksOn", "params.turns=2", "params.call.max_tokens=100")
    outcome, server = through_runner(monkeypatch, config, lambda m: "y" * 100,
                                     max_model_len=256, default_max_tokens=64)
    assert all(status.ok for status in outcome.statuses), [s.message for s in outcome.statuses]
    asked = [request.get("max_tokens") for request in server.requests[:3]]
    assert asked == [100, 100, None]  # the second turn's 100 did not fit: asked again


def test_a_training_call_sampling_otherwise_than_the_trainer_fails_its_rollout(
        tmp_path, monkeypatch):
    """vLLM's log-probs are at the call's temperature, verl's at model.temperature: a
    training call at another temperature fails, naming why; eval calls may."""
    config = checked(tmp_path, "Cooler")
    outcome, server = through_runner(monkeypatch, config, lambda m: "2")
    assert set(rollout_errors(outcome)) == {
        "@workflow cooler (tests/fixtures/trinity_rollouts.py:46) "
        "raised ValueError: the trained model cannot sample with temperature=0.3, while "
        "Trinity's trainer recomputes log-probs at model.temperature = 1: the PPO ratio of "
        "this reply's tokens would be biased; set the sampling on Model(...) and drop it "
        "from the call"}
    assert server.requests == []
    metrics, server = through_runner(monkeypatch, config, lambda m: "2", run=run_eval)
    assert metrics["eval/eval/reward"] == 1.0
    assert server.requests[0]["temperature"] == 0.3


def test_vllm_only_sampling_options_reach_the_engine_on_eval(tmp_path, monkeypatch):
    """top_k (rollout_args) and repetition_penalty (the engine entry), which the openai
    client takes no arguments for, travel in the body as vLLM reads them (an eval rollout:
    a training one may not use them, see checks.ratio_bias)."""
    config = checked(tmp_path, "Cooler")
    config.buffer.explorer_input.eval_tasksets[0].rollout_args.top_k = 20
    config.explorer.rollout_model.repetition_penalty = 1.1
    _, server = through_runner(monkeypatch, config, lambda m: "2", run=run_eval)
    request = server.requests[0]
    assert (request["top_k"], request["repetition_penalty"]) == (20, 1.1)


def test_vllms_reasoning_field_reaches_the_experience(tmp_path, monkeypatch):
    """vLLM 0.23 returns the parsed reasoning as ``reasoning`` (no longer
    ``reasoning_content``); the experience's conversation keeps it."""
    config = validate(tunedsl.load_experiment("tests.fixtures.good:Good"), tmp_path)
    outcome, _ = through_runner(monkeypatch, config,
                                lambda m: {"content": "2", "reasoning": "1 and 1 make 2"})
    assert {e.messages[-1]["reasoning_content"] for e in outcome.experiences} == \
        {"1 and 1 make 2"}


def fail_first_of_each_task():
    """A reply function answering "fail" to each question's first call, then "ok"."""
    seen: set[str] = set()

    def reply(messages):
        question = messages[-1]["content"]
        if question in seen:
            return "ok"
        seen.add(question)
        return "fail"

    return reply


def after_pipeline(config, experiences):
    """What the experience pipeline's operators, built by Trinity from the YAML, leave."""
    from trinity.buffer.operators import create_operators

    async def run():
        kept = list(experiences)
        for operator in create_operators(config.data_processor.experience_pipeline.operators):
            kept, _ = await operator.process(kept)
        return kept

    return asyncio.run(run())


@pytest.mark.parametrize("policy, kept_rewards", [
    # drop: the failed rollout's placeholder is dropped; each group trains on the rest
    ("drop", [1.0, 1.0]),
    # zero: the failed rollout's call is trained on with reward 0
    ("zero", [0.0, 0.0, 1.0, 1.0]),
    # drop_group: nothing of a task one of whose rollouts failed
    ("drop_group", []),
])
def test_a_failed_rollout_is_what_on_failed_rollout_says(policy, kept_rewards, tmp_path,
                                                         monkeypatch):
    """Each task's first rollout fails after its model call (two tasks, two rollouts each);
    what reaches the trainer through Trinity's runner and pipeline is what the local trainer
    trains on for the same setting (tests/test_local_algorithms.py)."""
    config = checked(tmp_path, "FailsLate", f"algorithm.on_failed_rollout={policy}")
    outcome, _ = through_runner(monkeypatch, config, fail_first_of_each_task())
    assert all(status.ok for status in outcome.statuses)  # no retry: as on the local backend
    kept = after_pipeline(config, outcome.experiences)
    assert sorted(e.reward for e in kept) == kept_rewards


@pytest.mark.parametrize("policy", ["drop", "zero", "drop_group"])
def test_a_step_whose_every_rollout_failed_ends_the_run_with_the_first_error(
        policy, tmp_path, monkeypatch):
    """Every rollout fails after its model call: the step's pipeline, built by Trinity from
    the YAML, raises the local backend's message, which Trinity's explorer loop logs as
    the error that ended the run (tunedsl's launch then exits 1 with it)."""
    from tunedsl.backends.trinity.operators import NothingToLearn

    config = checked(tmp_path, "FailsLate", f"algorithm.on_failed_rollout={policy}")
    outcome, _ = through_runner(monkeypatch, config, lambda messages: "fail")
    with pytest.raises(NothingToLearn) as info:
        after_pipeline(config, outcome.experiences)
    assert str(info.value) == (
        "step 0: every rollout failed, so there is nothing to learn from; the first error: "
        "@workflow fails_after_fail (tests/fixtures/trinity_rollouts.py:60) raised "
        "ValueError: the model said fail")


@pytest.mark.parametrize("choice, masked", [("train", 0), ("mask", 4)])
def test_a_truncated_reply_is_masked_when_asked(choice, masked, tmp_path, monkeypatch):
    """A reply cut at max_tokens is marked as Trinity's truncation (its OpenAI-API
    experiences carry no finish reason) and ``mask`` adds Trinity's
    ``mask_response_truncated`` operator, which takes it out of the loss."""
    config = checked(tmp_path, "Asks", f"algorithm.on_truncated_reply={choice}",
                     "model.max_tokens=3")
    outcome, _ = through_runner(monkeypatch, config, lambda m: "a reply far too long",
                                max_model_len=256, default_max_tokens=3)
    assert all(e.truncate_status == "response_truncated" and e.reward == 1.0
               for e in outcome.experiences)
    kept = after_pipeline(config, outcome.experiences)
    assert len(kept) == 4
    assert sum(not bool(e.action_mask.any()) for e in kept) == masked


def test_a_teacher_at_an_endpoint_scores_each_rollouts_experiences_in_one_request(
        tmp_path, monkeypatch):
    """A teacher served at an endpoint (not a Trinity engine) is asked by tunedsl's workflow
    over the completions protocol (echo and logprobs over the token ids), once per rollout;
    its log-probs of the reply tokens become ``teacher_logprobs``."""
    from .openai_server import OpenAIServer

    def score(tokens):  # a scripted teacher: a fixed log-prob per token id
        return [None] + [-0.1 - (token % 7) / 10 for token in tokens[1:]]

    with OpenAIServer(score=score) as teacher, VLLMServer(lambda m: "42") as student:
        config = checked(tmp_path, "Distill", f"auxiliary_models.teacher.base_url="
                         f"{teacher.base_url}", "auxiliary_models.teacher.model_path=teacher")
        assert config.explorer.auxiliary_models == []  # an endpoint is no Trinity engine
        serve_models(monkeypatch, {"rollout": student})
        outcome = run_training_batch(config)
    assert all(s.ok for s in outcome.statuses) and len(outcome.experiences) == 4
    requests = [r for r in teacher.requests if "prompt" in r]
    assert len(requests) == 4 and all(r["echo"] and r["logprobs"] == 0 for r in requests)
    for experience in outcome.experiences:
        tokens = experience.tokens.tolist()
        assert experience.teacher_logprobs.tolist() == pytest.approx(
            score(tokens)[experience.prompt_length:])
        assert len(experience.teacher_logprobs) == len(experience.logprobs)


def test_distillation_experiences_carry_the_teachers_logprobs(tmp_path, monkeypatch):
    """With on_policy_distill, tunedsl's workflow has the teacher (a Trinity auxiliary
    model, through its ModelWrapper's ``logprobs_async``) score each experience's tokens at
    temperature 1, and hands Trinity's trainer the reply's part as ``teacher_logprobs``:
    Trinity's own advantage then gives each token teacher minus student."""
    import logging
    import types

    from trinity.algorithm.advantage_fn import ADVANTAGE_FN
    from trinity.trainer.verl.utils import to_data_proto

    config = checked(tmp_path, "Distill")
    assert config.buffer.explorer_input.tasksets[0].workflow_args["teacher"] == "teacher"
    with VLLMServer(lambda m: "42") as student, VLLMServer(lambda m: "unused") as teacher:
        serve_models(monkeypatch, {"rollout": student, "teacher": teacher})
        outcome = run_training_batch(config)
    assert all(s.ok for s in outcome.statuses) and len(outcome.experiences) == 4
    assert len(teacher.scored) == 4 and {t for _, t in teacher.scored} == {1.0}
    for experience in outcome.experiences:
        tokens = experience.tokens.tolist()
        expected = teacher.score(tokens, 1.0)[experience.prompt_length - 1:]
        assert experience.teacher_logprobs.tolist() == pytest.approx(expected)
        assert len(experience.teacher_logprobs) == len(experience.logprobs)
    batch = to_data_proto(list(outcome.experiences), pad_token_id=0,
                          model=types.SimpleNamespace(), logger=logging.getLogger(__name__))
    batch.batch["old_log_probs"] = batch.batch["rollout_log_probs"]  # bypass_old_logprobs
    batch, _ = ADVANTAGE_FN.get("on_policy_distill")(
        **config.algorithm.advantage_fn_args)(batch)
    for experience, row, mask in zip(outcome.experiences, batch.batch["advantages"],
                                     batch.batch["response_mask"]):
        assert row[mask.bool()].tolist() == pytest.approx(
            (experience.teacher_logprobs - experience.logprobs).tolist())


def moves_by_turn():
    """A reply function under which a task's rollouts part ways: each call's answer is
    "right" or "stay" by how many calls at that cell came before."""
    seen: dict[str, int] = {}

    def reply(messages):
        cell = messages[-1]["content"]
        seen[cell] = seen.get(cell, 0) + 1
        return "right" if seen[cell] % 3 != 2 else "stay"

    return reply


@pytest.mark.parametrize("keys", [("step_reward", "env_state_hash"), ("gain", "cell")])
def test_turns_reach_gigpo_through_trinitys_runner_as_the_local_backend_reads_them(
        keys, tmp_path, monkeypatch):
    """The corridor's turns (``model.end_turn``) through Trinity's own runner: each call's
    experience carries its turn's reward and starting cell in ``info`` under GiGPO's keys,
    numbered by ``eid.step``; and GiGPO, built by Trinity from the YAML, gives the
    advantages the local backend computes from the same turns (to 1e-6). GiGPO's
    ``step_reward_key`` and ``env_state_hash_key``, when the experiment names others, are
    where the workflow puts them."""
    from trinity.algorithm import ADVANTAGE_FN
    from trinity.common.experience import group_by

    from tunedsl.backends.local.advantages import Trajectory, step_advantages

    reward_key, state_key = keys
    config = checked(tmp_path, "Corridor", f"algorithm.advantage_args.step_reward_key={reward_key}",
                     f"algorithm.advantage_args.env_state_hash_key={state_key}")
    outcome, _ = through_runner(monkeypatch, config, moves_by_turn())
    assert all(status.ok for status in outcome.statuses)
    experiences = outcome.experiences
    assert len(experiences) == 2 * 2 * 3  # tasks x runs x turns, one call each
    for experience in experiences:
        prompt, reply = experience.messages[-2]["content"], experience.messages[-1]["content"]
        assert experience.info[state_key] == f"cell {prompt.rsplit(' ', 1)[1]}"
        assert experience.info[reward_key] == (1.0 if reply == "right" else 0.0)
    runs = [sorted(run, key=lambda e: e.eid.step)
            for task in group_by(experiences, "task").values()
            for run in group_by(task, "run").values()]
    assert sorted([e.eid.step for e in run] for run in runs) == [[0, 1, 2]] * 4
    assert len({run[-1].info[state_key] for run in runs}) > 1  # the rollouts part ways

    gigpo = ADVANTAGE_FN.get(config.algorithm.advantage_fn)(**config.algorithm.advantage_fn_args)
    trinity, metrics = gigpo.process(list(experiences))
    assert metrics["gigpo/anchor_groups_size_gt1"] > 0
    groups = [[run for run in runs if run[0].eid.task == task]
              for task in sorted({run[0].eid.task for run in runs})]
    local = step_advantages("gigpo", dict(config.algorithm.advantage_fn_args), [[Trajectory(
        reward=run[-1].reward, response_lengths=[len(e.tokens) - e.prompt_length for e in run],
        step_rewards=[e.info[reward_key] for e in run],
        states=[e.info[state_key] for e in run]) for run in group] for group in groups])
    by_experience = {id(e): e.advantages[e.action_mask.bool()].tolist() for e in trinity}
    for group, found in zip(groups, local.advantages):
        for run, advantages in zip(group, found):
            for experience, advantage in zip(run, advantages):
                assert by_experience[id(experience)] == pytest.approx(
                    [advantage] * len(by_experience[id(experience)]), abs=1e-6)


def test_a_group_judge_scores_each_tasks_group_whole_on_one_runner(tmp_path, monkeypatch):
    """With a @group_judge, tunedsl writes its repeatable workflow and no split of a task's
    repeats over runners: Trinity's runner hands each task's group of three to one
    workflow, whose rollouts the judge scores together; each rollout's experiences are
    numbered eid.run 0, 1, 2, as the runner numbers the runs of other workflows."""
    import itertools

    from tests.fixtures.group_judges import places
    from tunedsl.backends.trinity.config import GROUP_WORKFLOW_CLASS

    from .trinity_runner import answers

    config = checked(tmp_path, "Ranked")
    assert config.explorer.max_repeat_times_per_runner is None
    assert config.buffer.explorer_input.tasksets[0].default_workflow_type == \
        GROUP_WORKFLOW_CLASS
    replies = itertools.cycle(["2", "9", "x", "5"])
    outcome, _ = through_runner(monkeypatch, config, lambda messages: next(replies))
    assert [(s.ok, s.completed_runs) for s in outcome.statuses] == [(True, 3), (True, 3)]
    known = answers("tests/fixtures/tasks")
    tasks = {}
    for experience in outcome.experiences:
        tasks.setdefault(experience.eid.task, []).append(experience)
    assert len(tasks) == 2
    for group in tasks.values():
        group.sort(key=lambda e: e.eid.run)
        assert [e.eid.run for e in group] == [0, 1, 2]
        question = group[0].messages[0]["content"]
        replies_seen = [e.messages[-1]["content"] for e in group]
        assert [e.reward for e in group] == places({"answer": known[question]}, replies_seen)
        assert all(e.metrics["group_size"] == 3.0 for e in group)
    # the eval set's one repeat: a group of one, whose one response beats no other
    metrics, _ = through_runner(monkeypatch, config, lambda messages: "2", run=run_eval)
    assert metrics["eval/eval/reward"] == 0.0 and metrics["eval/eval/group_size"] == 1.0


def test_a_split_of_a_group_over_runners_is_refused_before_the_run():
    """The config a group judge's run needs never splits a task's group over runners:
    writing it refuses the setting that would (config, check and run all write it)."""
    from tests.fixtures.group_judges import ranks
    from tunedsl.backends.trinity.config import trinity_config
    from tunedsl.errors import ConfigError

    graph = tunedsl.load_experiment(f"{FIXTURES}:Ranked", overrides=[
        "trinity.explorer.max_repeat_times_per_runner=1"])
    with pytest.raises(ConfigError) as raised:
        trinity_config(graph)
    assert str(raised.value) == (
        f"trinity.explorer.max_repeat_times_per_runner = 1 splits each task's group of 3 over "
        f"runners, and @group_judge ranks (tests/fixtures/group_judges.py:"
        f"{ranks.__code__.co_firstlineno}) must see the group whole; remove it (tunedsl "
        f"writes null for a group judge)")
    whole = tunedsl.load_experiment(f"{FIXTURES}:Ranked", overrides=[
        "trinity.explorer.max_repeat_times_per_runner=3"])
    assert trinity_config(whole)["explorer"]["max_repeat_times_per_runner"] == 3
