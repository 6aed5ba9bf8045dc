"""The local trainer's advantages are Trinity's: the same rewards go through Trinity-RFT
0.6.0's own GRPO advantages (``GRPOGroupedAdvantage`` for ``grpo``,
``StepWiseGRPOAdvantageFn`` for ``multi_step_grpo``) as real ``Experience`` objects, one per
model call, and through `step_samples`; each call's advantage must agree, for a
normal group, a group of one, multi-call trajectories and groups with failed rollouts."""

from __future__ import annotations


import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trinity.common.config")

from trinity.algorithm import ADVANTAGE_FN  # noqa: E402
from trinity.common.experience import EID, Experience  # noqa: E402

import tunedsl  # noqa: E402
from tunedsl.backends.local.steps import Rollout  # noqa: E402
from tunedsl.backends.local.samples import step_samples  # noqa: E402
from tunedsl.dsl.algorithms import ALGORITHMS, resolve  # noqa: E402
from tunedsl.dsl.chat import ChatResponse, ModelCall  # noqa: E402
from tunedsl.rollout.run import RolloutResult  # noqa: E402

#: The algorithms whose advantages Trinity computes on its experiences in groups (rloo's and
#: reinforceplusplus's run in its trainer: tests/test_local_advantage_fns.py; distillation's
#: read a teacher: tests/test_local_distill.py; sft has none).
TRINITY = sorted(name for name, parts in ALGORITHMS.items()
                 if parts.advantage_fn not in ("rloo", "reinforceplusplus", "on_policy_distill",
                                               None))  # sft: no advantages (test_local_sft.py)
FAILED = None  # a rollout that raised (or timed out): no result, whatever calls it made

#: One step's groups, a group per task: each rollout as (reward or FAILED, model calls).
GROUPS = {
    "a normal group": [[(1.0, 1), (0.0, 1), (0.0, 1), (1.0, 1), (0.5, 1)]],
    "a group of one": [[(0.7, 1)]],
    "a group of one with two calls": [[(0.6, 2)]],
    "multi-call trajectories": [[(1.0, 2), (0.0, 3), (0.5, 1), (0.25, 2)]],
    "equal rewards float32 cannot hold": [[(0.7, 1)] * 8],
    "groups with failures": [
        [(FAILED, 1), (1.0, 2), (FAILED, 0), (0.0, 1), (0.4, 0)],  # 0.4 made no call
        [(FAILED, 2), (0.3, 2), (0.9, 0)],  # one valid rollout left
        [(FAILED, 1), (FAILED, 0), (1.0, 0)],  # none left: skipped
        [(0.2, 1), (0.8, 3), (0.5, 2)],
    ],
}


def rollouts(group: list[tuple[float | None, int]]) -> list[Rollout]:
    """The local trainer's rollouts of one task: each call has 3 prompt and 2 reply tokens."""
    def call(index: int) -> ModelCall:
        return ModelCall(messages=[], response=ChatResponse(content="x"),
                         sampling={"temperature": 1.0}, prompt_ids=(1, 2, index + 3),
                         response_ids=(7, 8), logprobs=(-0.5, -0.5))

    return [Rollout(task_index=0, calls=[call(i) for i in range(calls)],
                    result=None if reward is FAILED else RolloutResult(
                        response="x", reward=reward, metrics={}))
            for reward, calls in group]


def trinity_advantages(algorithm: str, groups) -> dict[tuple[int, int, int], torch.Tensor]:
    """Trinity's advantages by (task, run, call): an Experience for each call of each rollout
    that was scored and made calls (the rest leave none on Trinity), carrying the rollout's
    reward, as tunedsl's Trinity workflow emits them."""
    experiences = [
        Experience(eid=EID(batch=0, task=task, run=run, step=step),
                   tokens=torch.tensor([1, 2, step + 3, 7, 8]), prompt_length=3, reward=reward)
        for task, group in enumerate(groups) for run, (reward, calls) in enumerate(group)
        if reward is not FAILED for step in range(calls)]
    resolved = resolve(tunedsl.Algorithm(algorithm))
    function = ADVANTAGE_FN.get(resolved.advantage_fn)(**resolved.advantage_args)
    processed, _ = function.process(experiences)
    return {(e.eid.task, e.eid.run, e.eid.step): e.advantages for e in processed}


def local_samples(algorithm: str, groups, tmp_path):
    """`step_samples` on the groups' rollouts, for an experiment of ``algorithm``."""
    graph = tunedsl.load_experiment("tests.fixtures.local.agents:Arith", overrides=[
        "model.model_path=tiny", f"checkpoint_root_dir={tmp_path}",
        f"algorithm.algorithm_type={algorithm}"])
    local = [rollouts(group) for group in groups]
    samples, stats = step_samples(resolve(graph.algorithm), local)
    return local, samples, stats


@pytest.mark.parametrize("algorithm", TRINITY)
@pytest.mark.parametrize("case", sorted(GROUPS))
def test_each_calls_advantage_is_trinitys(algorithm, case, tmp_path):
    """Every call of every valid rollout is trained on with the advantage Trinity gives its
    experience (every token of it); failed rollouts and rollouts without calls have none,
    as on Trinity, where they leave no experience."""
    groups = GROUPS[case]
    trinity = trinity_advantages(algorithm, groups)
    local, samples, _ = local_samples(algorithm, groups, tmp_path)
    found = {}
    for task, group in enumerate(local):
        for run, rollout in enumerate(group):
            # every call of a trained rollout has one; a dropped group's (dapo's
            # std_threshold) and failed rollouts have none, leaving no key to match
            assert len(rollout.advantages) in (0, len(rollout.calls))
            assert rollout.result or not rollout.advantages
            found.update({(task, run, step): advantage
                          for step, advantage in enumerate(rollout.advantages)})
    assert found.keys() == trinity.keys()
    for key, advantage in found.items():
        assert trinity[key].tolist() == pytest.approx([advantage] * 2, abs=1e-6), key
    assert [s.advantage for s in samples] == list(found.values())  # in rollout order


@pytest.mark.parametrize("algorithm", [name for name in TRINITY if name != "dapo"])
def test_only_a_group_without_valid_rollouts_is_skipped(algorithm, tmp_path):
    """Of the failure groups only the one whose rollouts all failed or made no call is
    skipped (dapo, which drops groups of equal rewards, aside); the one with a single valid
    rollout trains on its two calls. The reward
    statistics are over every scored rollout, those without a model call included (on
    Trinity their placeholder experience carries the reward into the rollout metrics)."""
    _, samples, stats = local_samples(algorithm, GROUPS["groups with failures"], tmp_path)
    assert stats["rollout/groups_skipped"] == 1.0
    assert stats["rollout/errors"] == 5.0
    assert stats["train/samples"] == len(samples) == 3 + 2 + 6
    rewards = [1.0, 0.0, 0.4, 0.3, 0.9, 1.0, 0.2, 0.8, 0.5]
    assert stats["rollout/reward/mean"] == pytest.approx(sum(rewards) / len(rewards))
    assert (stats["rollout/reward/min"], stats["rollout/reward/max"]) == (0.0, 1.0)


def test_a_rollout_without_model_calls_counts_its_reward_on_both_backends(tmp_path,
                                                                          monkeypatch):
    """Trinity's runner fails a run that returns no experience ("An empty experience is
    generated"); tunedsl's workflow returns a placeholder instead, whose metrics carry the
    reward into Trinity's rollout metrics. The local reward statistics count it likewise,
    and neither backend trains on it (a group of such rollouts alone is skipped)."""
    from trinity.utils.metrics import aggregate_metrics

    from .trinity_runner import VLLMServer, run_training_batch, serve_models
    from .trinity_support import validate

    graph = tunedsl.load_experiment("tests.fixtures.local.agents:Silent", overrides=[
        "model.model_path=tiny", f"checkpoint_root_dir={tmp_path}", "algorithm.batch_size=2",
        "algorithm.group_size=2"])
    with VLLMServer(lambda messages: "1") as server:
        serve_models(monkeypatch, {"rollout": server})
        outcome = run_training_batch(validate(graph, tmp_path))
    assert all(s.ok for s in outcome.statuses) and len(outcome.statuses) == 4
    metrics = aggregate_metrics([s.metrics[0] for s in outcome.statuses], prefix="rollout")
    assert metrics["rollout/reward/mean"] == 0.0
    silent = [[Rollout(task_index=0, calls=[], result=RolloutResult(
        response="", reward=0.0, metrics={})) for _ in range(2)] for _ in range(2)]
    samples, stats = step_samples(resolve(graph.algorithm), silent)
    assert samples == [] and stats["rollout/reward/mean"] == 0.0
    assert stats["rollout/groups_skipped"] == 2.0


#: Rollouts of one task that mark turns, for gigpo: (reward, calls, turns as (calls so far,
#: reward, state)), and what Trinity's experiences carry for them, written out per call:
#: (step_reward or None, env_state_hash or None).
TURNS = [
    (1.0, 3, [(1, 0.0, "a"), (2, 0.5, "b"), (3, 0.5, "c")],
     [(0.0, "a"), (0.5, "b"), (0.5, "c")]),
    (0.0, 3, [(1, 0.0, "a"), (3, -1.0, "b")],  # a turn of two calls, a state it shares
     [(0.0, "a"), (None, "b"), (-1.0, None)]),
    (0.5, 2, [(1, 1.0, "a"), (1, -0.5, "z")],  # a turn without a call of its own
     [(0.5, "a"), (None, None)]),
    (0.2, 2, [], [(None, None), (None, None)]),  # no turn marked
]


def test_gigpo_reads_the_turns_a_workflow_marked_as_trinitys_experiences_carry_them(tmp_path):
    """A step's rollouts with turns (``model.end_turn``) through `step_samples`, against
    Trinity's GiGPO on experiences carrying each call's turn reward and state in ``info``
    (where tunedsl's Trinity workflow puts them): every call's advantage agrees."""
    from tunedsl.dsl.turns import Turn

    group = [(reward, calls) for reward, calls, _, _ in TURNS]
    local = rollouts(group)
    for rollout, (_, _, turns, _) in zip(local, TURNS):
        rollout.result = RolloutResult(response="x", reward=rollout.result.reward, metrics={},
                                       turns=tuple(Turn(*turn) for turn in turns))
    graph = tunedsl.load_experiment("tests.fixtures.local.agents:Arith", overrides=[
        "model.model_path=tiny", f"checkpoint_root_dir={tmp_path}",
        "algorithm.algorithm_type=gigpo"])
    resolved = resolve(graph.algorithm)
    step_samples(resolved, [local])

    experiences = []
    for run, (reward, calls, _, per_call) in enumerate(TURNS):
        for step, (step_reward, state) in enumerate(per_call):
            info = {} if step_reward is None else {"step_reward": step_reward}
            if state is not None:
                info["env_state_hash"] = state
            experiences.append(Experience(
                eid=EID(batch=0, task=0, run=run, step=step), info=info, reward=reward,
                tokens=torch.tensor([1, 2, step + 3, 7, 8]), prompt_length=3))
    function = ADVANTAGE_FN.get("gigpo")(**resolved.advantage_args)
    processed, metrics = function.process(experiences)
    assert metrics["gigpo/anchor_groups_size_gt1"] == 2  # "a" thrice, "b" twice
    trinity = {(e.eid.run, e.eid.step): e.advantages.tolist() for e in processed}
    found = {(run, step): advantage for run, rollout in enumerate(local)
             for step, advantage in enumerate(rollout.advantages)}
    assert found.keys() == trinity.keys()
    for key, advantage in found.items():
        assert trinity[key] == pytest.approx([advantage] * 2, abs=1e-6), key
