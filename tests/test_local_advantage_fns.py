"""Each of the local backend's advantage functions gives what Trinity-RFT 0.6.0's own gives.

The same step goes through `step_advantages` and through Trinity's class for the name (from
its ``ADVANTAGE_FN`` registry) as real ``Experience`` objects, one per model call: the
explorer-side ones take the list; the trainer-side ones (rloo, reinforceplusplus) take the
verl ``DataProto`` that Trinity's trainer builds from it (``to_data_proto``, then the
``none`` KL penalty that copies scores into rewards). Every token of every call must agree.
Hand-worked figures, which need no Trinity, are in ``test_local_advantage_figures.py``.
"""

from __future__ import annotations

import logging
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trinity.common.config")

from trinity.algorithm.advantage_fn import ADVANTAGE_FN  # noqa: E402
from trinity.algorithm.kl_fn.kl_fn import DummyKLFn  # noqa: E402
from trinity.common.experience import EID, Experience  # noqa: E402
from trinity.trainer.verl.utils import to_data_proto  # noqa: E402

from tunedsl.backends.local.advantages import (  # noqa: E402
    ADVANTAGE_FNS,
    Trajectory,
    default_args,
    step_advantages,
)

#: One step's groups, a group per task: each trajectory as (reward, each call's reply length).
STEPS = {
    "a normal group": [[(1.0, (4,)), (0.0, (4,)), (0.0, (4,)), (1.0, (4,)), (0.5, (4,))]],
    "a group of one": [[(0.7, (3,))]],
    "a group of one with two calls": [[(0.6, (2, 5))]],
    "multi-call trajectories": [[(1.0, (3, 1)), (0.0, (2, 4, 6)), (0.5, (5,)), (0.25, (1, 2))]],
    "equal rewards": [[(0.7, (2,))] * 8],
    "several groups": [
        [(0.2, (1,)), (0.8, (3, 2)), (0.5, (2,))],
        [(1.0, (4,))],
        [(0.0, (2,)), (0.0, (3,))],
        [(0.3, (1, 2)), (0.9, (7,)), (0.3, (2,))],
    ],
    "rewards float32 cannot hold": [
        [(0.1, (3,)), (0.2, (1,)), (0.3, (2, 2)), (0.7, (5,))],
        [(1 / 3, (2,)), (2 / 3, (2,))],
    ],
    "negative rewards": [[(-1.0, (2,)), (-0.25, (3, 1)), (0.5, (1,)), (-3.7, (4,))]],
}

#: Argument sets of each function, its defaults first.
ARGS = {
    "grpo": [{}, {"std_threshold": 0.0}, {"std_cal_level": "batch"},
             {"epsilon": 1e-3, "std_threshold": 0.3, "std_cal_level": "batch"}],
    "step_wise_grpo": [{}, {"std_threshold": 0.0}, {"std_cal_level": "batch"},
                       {"enable_step_norm": True},
                       {"enable_step_norm": True, "std_threshold": 0.3,
                        "std_cal_level": "batch"}],
    "rloo": [{}],
    "reinforceplusplus": [{}, {"gamma": 0.9}, {"gamma": 0.5}],
    "reinforce": [{}],
    "opmd": [{}, {"opmd_baseline": "logavgexp"}, {"opmd_baseline": "logavgexp", "tau": 0.3}],
    "gigpo": [{}, {"fnorm": "std"}, {"fnorm": "std", "gamma": 0.9, "omega": 0.5}],
}
CASES = [(name, args) for name in sorted(ARGS) for args in ARGS[name]]


def experiences(step) -> list[Experience]:
    """One Experience per call of each trajectory, carrying its reward, as tunedsl's Trinity
    workflow emits them; the prompt grows by a token each call (each call repeats the
    conversation so far), so Trinity's batch left-pads prompts and right-pads replies."""
    return [
        Experience(eid=EID(batch=0, task=task, run=run, step=step),
                   tokens=torch.tensor([1] * (3 + step) + [7] * length), prompt_length=3 + step,
                   reward=reward, logprobs=torch.full((length,), -0.5),
                   action_mask=torch.ones(length, dtype=torch.bool))
        for task, group in enumerate(step) for run, (reward, lengths) in enumerate(group)
        for step, length in enumerate(lengths)]


def trinity_advantages(name: str, args: dict, step) -> tuple[dict, dict]:
    """Trinity's per-token advantages by (task, run, call) of the experiences it keeps, and
    its metrics."""
    fn = ADVANTAGE_FN.get(name)(**args)
    exps = experiences(step)
    if not fn.compute_in_trainer():
        kept, metrics = fn(exps)
        return {(e.eid.task, e.eid.run, e.eid.step): e.advantages.tolist() for e in kept}, metrics
    batch = to_data_proto(exps, pad_token_id=0, model=types.SimpleNamespace(),
                          logger=logging.getLogger(__name__))
    batch, _ = DummyKLFn().apply_kl_penalty_to_reward(batch)
    batch, metrics = fn(batch)
    found = {}
    for e, row, mask in zip(exps, batch.batch["advantages"], batch.batch["response_mask"]):
        found[(e.eid.task, e.eid.run, e.eid.step)] = row[mask.bool()].tolist()
    return found, metrics


def local_advantages(name: str, args: dict, step):
    """`step_advantages` on the step, and its per-token advantages by (task, run, call) of
    the calls it keeps."""
    groups = [[Trajectory(reward, lengths) for reward, lengths in group] for group in step]
    result = step_advantages(name, args, groups)
    found = {}
    for task, (group, values) in enumerate(zip(step, result.advantages)):
        assert len(values) == len(group)
        for run, ((_, lengths), calls) in enumerate(zip(group, values)):
            if calls is None:
                continue
            assert len(calls) == len(lengths)
            for call, (length, value) in enumerate(zip(lengths, calls)):
                found[(task, run, call)] = value if isinstance(value, list) else [value] * length
    return result, found


@pytest.mark.parametrize(("name", "args"), CASES, ids=[f"{n}{a}" for n, a in CASES])
@pytest.mark.parametrize("case", sorted(STEPS))
def test_every_tokens_advantage_is_trinitys(name, args, case):
    """Every token of every call Trinity keeps has Trinity's advantage to 1e-6, the calls it
    drops have None, and the dropped count is Trinity's ``filtered_count`` where it has one."""
    step = STEPS[case]
    trinity, metrics = trinity_advantages(name, args, step)
    result, local = local_advantages(name, args, step)
    assert local.keys() == trinity.keys()
    for key, values in local.items():
        assert values == pytest.approx(trinity[key], abs=1e-6), key
    if "filtered_count" in metrics:
        assert result.metrics["advantage/filtered_count"] == metrics["filtered_count"]


@pytest.mark.parametrize("name", ["grpo", "step_wise_grpo"])
def test_std_threshold_drops_what_trinity_drops(name):
    """With ``std_threshold`` 0 both drop the several-groups step's lone trajectory and its
    group of equal rewards (1 and 2 calls) and keep the others, so the comparison above sees
    groups dropped."""
    step = STEPS["several groups"]
    trinity, metrics = trinity_advantages(name, {"std_threshold": 0.0}, step)
    result, local = local_advantages(name, {"std_threshold": 0.0}, step)
    assert {task for task, _, _ in local} == {0, 3}
    assert [values[0] is None for values in result.advantages] == [False, True, True, False]
    assert {task for task, _, _ in trinity} == {0, 3}
    assert metrics["filtered_count"] == 3
    assert result.metrics == {"advantage/filtered_count": 3.0, "advantage/skipped_groups": 2.0}


def test_reinforceplusplus_is_per_token_only_when_discounted():
    """With gamma 1 Trinity's advantage is constant over each call's tokens and each call
    gets one number; with gamma 0.9 a rewarded call's tokens differ, and each call gets a
    list (their values are checked above)."""
    step = STEPS["multi-call trajectories"]
    groups = [[Trajectory(reward, lengths) for reward, lengths in group] for group in step]
    trinity, _ = trinity_advantages("reinforceplusplus", {}, step)
    assert all(len(set(values)) == 1 for values in trinity.values())
    calls = [call for run in step_advantages("reinforceplusplus", {}, groups).advantages[0]
             for call in run]
    assert all(isinstance(call, float) for call in calls)
    trinity, _ = trinity_advantages("reinforceplusplus", {"gamma": 0.9}, step)
    assert len(set(trinity[(0, 0, 0)])) == 3
    calls = [call for run in step_advantages("reinforceplusplus", {"gamma": 0.9},
                                             groups).advantages[0] for call in run]
    assert [len(call) for call in calls] == [3, 1, 2, 4, 6, 5, 1, 2]


@pytest.mark.parametrize("name", sorted(ADVANTAGE_FNS))
def test_defaults_are_trinitys(name):
    """An argument left out takes the value Trinity's class would."""
    assert default_args(name) == ADVANTAGE_FN.get(name).default_args()


#: Steps whose calls carry rewards and environment states of their own (Trinity's
#: ``info["step_reward"]`` and ``info["env_state_hash"]``): per trajectory (reward, each call's
#: reply length, each call's step reward, each call's state), None where a call has none.
STATE_STEPS = {
    "one task, shared states": [[
        (1.0, (3, 2), (0.0, 1.0), ("s0", "s1")),
        (0.0, (2, 4, 1), (0.0, 0.0, 0.0), ("s0", "s2", "s1")),
        (0.5, (1, 1), (0.25, 0.25), ("s0", "s1"))]],
    "states across tasks, some calls without": [
        [(1.0, (2, 2), (0.5, None), ("a", None)), (0.0, (3,), (0.0,), ("a",))],
        [(0.3, (1, 1, 1), (0.1, 0.1, 0.1), ("a", "b", "b")), (0.9, (2,), None, ("b",))],
        [(0.2, (4,), None, None)]],
    "a lone state and a lone trajectory": [[(0.4, (2, 3), (0.3, 0.1), ("x", "y"))]],
}


def state_experiences(step) -> list[Experience]:
    """`experiences`, with each call's step reward and state in its info."""
    found = []
    for task, group in enumerate(step):
        for run, (reward, lengths, rewards, states) in enumerate(group):
            for call, length in enumerate(lengths):
                info = {}
                if rewards is not None and rewards[call] is not None:
                    info["step_reward"] = rewards[call]
                if states is not None and states[call] is not None:
                    info["env_state_hash"] = states[call]
                found.append(Experience(
                    eid=EID(batch=0, task=task, run=run, step=call),
                    tokens=torch.tensor([1] * (3 + call) + [7] * length),
                    prompt_length=3 + call, reward=reward, info=info,
                    logprobs=torch.full((length,), -0.5),
                    action_mask=torch.ones(length, dtype=torch.bool)))
    return found


@pytest.mark.parametrize("args", ARGS["gigpo"], ids=str)
@pytest.mark.parametrize("case", sorted(STATE_STEPS))
def test_gigpo_with_step_rewards_and_states_is_trinitys(case, args):
    """Trinity's GiGPOAdvantageFn and the local one agree to 1e-6 on every token when calls
    carry their own rewards and states: episode returns summed from the step rewards (0 for
    a call without one), discounted returns compared within each state's anchor group
    across tasks, a state seen once adding nothing."""
    step = STATE_STEPS[case]
    kept, _ = ADVANTAGE_FN.get("gigpo")(**args)(state_experiences(step))
    trinity = {(e.eid.task, e.eid.run, e.eid.step): e.advantages.tolist() for e in kept}
    groups = [[Trajectory(reward, lengths, rewards, states)
               for reward, lengths, rewards, states in group] for group in step]
    result = step_advantages("gigpo", args, groups)
    local = {(task, run, call): [value] * length
             for task, (group, values) in enumerate(zip(step, result.advantages))
             for run, ((_, lengths, _, _), calls) in enumerate(zip(group, values))
             for call, (length, value) in enumerate(zip(lengths, calls))}
    assert local.keys() == trinity.keys()
    for key, values in local.items():
        assert values == pytest.approx(trinity[key], abs=1e-6), key
    distinct = {round(v[0], 6) for v in local.values()}
    if case == "a lone state and a lone trajectory":  # A_E = 0.3 + 0.1 (mean 0, std 1), no A_S
        assert distinct == {0.4}
    else:  # the step rewards and states made a difference between calls of one trajectory
        assert len(distinct) > 2
