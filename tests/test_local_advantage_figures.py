"""The local advantage functions on figures worked by hand, and the arguments they refuse.

These need no Trinity (the local extra does not install it); that each function gives what
Trinity's own gives is checked in ``test_local_advantage_fns.py``.
"""

from __future__ import annotations

import math
import struct

import pytest

pytest.importorskip("torch")

from tunedsl.backends.local.advantages import (  # noqa: E402
    ADVANTAGE_FNS,
    StepAdvantages,
    Trajectory,
    step_advantages,
)
from tunedsl.errors import ConfigError  # noqa: E402

EPS = 1e-6


def one_call(*rewards: float) -> list[Trajectory]:
    """A group of trajectories that made one 2-token call each."""
    return [Trajectory(reward, (2,)) for reward in rewards]


def f32(value: float) -> float:
    """``value`` rounded to float32, as Trinity holds rewards."""
    return struct.unpack("f", struct.pack("f", value))[0]


def advantages(name: str, groups, **args) -> list:
    return step_advantages(name, args, groups).advantages


def test_rloo_leaves_each_call_out():
    """(1, 0, 0): 1*3/2 - (1/3)*3/2 = 1 and 0 - 1/2; a lone call keeps its reward; one
    trajectory's two calls are two members of equal reward: 0 each."""
    assert advantages("rloo", [one_call(1.0, 0.0, 0.0)]) == [[[1.0], [-0.5], [-0.5]]]
    assert advantages("rloo", [one_call(0.7)]) == [[[f32(0.7)]]]
    assert advantages("rloo", [[Trajectory(0.6, (2, 5))]]) == [[[0.0, 0.0]]]


def test_grpo_standardises_over_calls():
    """Calls (1, 1, 0): mean 2/3, std 1/sqrt(3); a lone call is r / (1 + eps); with
    ``std_cal_level="batch"`` the std is the step's calls' (1, 0, 0.5: 1/2), the mean the
    group's (a lone call's 0)."""
    third = 1 / math.sqrt(3)
    assert advantages("grpo", [[Trajectory(1.0, (2, 3)), Trajectory(0.0, (4,))]]) == [[
        pytest.approx([(1 / 3) / (third + EPS)] * 2), pytest.approx([(-2 / 3) / (third + EPS)])]]
    assert advantages("grpo", [one_call(0.7)]) == [[[pytest.approx(0.7 / (1 + EPS))]]]
    half = 0.5 / (0.5 + EPS)
    assert advantages("grpo", [one_call(1.0, 0.0), one_call(0.5)], std_cal_level="batch") == [
        [[pytest.approx(half)], [pytest.approx(-half)]], [[pytest.approx(half)]]]


def test_std_threshold_drops_groups_at_or_below_it_and_lone_ones():
    """Threshold 0 drops equal rewards and a lone call (Trinity drops a lone experience
    whenever a threshold is set); 0.5 drops (1, 0.5) (std 0.354) and keeps (1, 0) (0.707).
    The counts are of calls and of groups."""
    result = step_advantages("grpo", {"std_threshold": 0.0},
                             [one_call(1.0), one_call(0.3, 0.3), one_call(1.0, 0.0)])
    assert result.advantages[:2] == [[None], [None, None]]
    assert result.advantages[2] == [[pytest.approx(0.5 / (math.sqrt(0.5) + EPS))],
                                    [pytest.approx(-0.5 / (math.sqrt(0.5) + EPS))]]
    assert result.metrics == {"advantage/filtered_count": 3.0, "advantage/skipped_groups": 2.0}
    kept = [values[0] is not None for values in
            advantages("grpo", [one_call(1.0, 0.5), one_call(1.0, 0.0)], std_threshold=0.5)]
    assert kept == [False, True]


def test_step_wise_grpo_standardises_over_trajectories():
    """Trajectories (1, 0): mean 1/2, std 1/sqrt(2), each call its trajectory's;
    ``enable_step_norm`` divides by the trajectory's calls; with a threshold a lone
    trajectory is dropped with all its calls."""
    score = 0.5 / (1 / math.sqrt(2) + EPS)
    groups = [[Trajectory(1.0, (2, 3)), Trajectory(0.0, (4,))]]
    assert advantages("step_wise_grpo", groups) == [
        [pytest.approx([score] * 2), pytest.approx([-score])]]
    assert advantages("step_wise_grpo", groups, enable_step_norm=True) == [
        [pytest.approx([score / 2] * 2), pytest.approx([-score])]]
    result = step_advantages("step_wise_grpo", {"std_threshold": 0.0},
                             [[Trajectory(0.6, (2, 5))]])
    assert result == StepAdvantages(advantages=[[None]], metrics={
        "advantage/filtered_count": 2.0, "advantage/skipped_groups": 1.0})


def test_reinforce_is_the_reward_in_float32():
    """Each call's advantage is its reward, as float32 holds it (0.1 is 0.100000001...)."""
    assert advantages("reinforce", [[Trajectory(0.1, (2,)), Trajectory(-2.5, (1, 1))]]) == [
        [[f32(0.1)], [-2.5, -2.5]]]
    assert f32(0.1) != 0.1


def test_opmd_subtracts_the_groups_baseline():
    """Baseline mean (1, 0, 0): 1/3; logavgexp (1, 0): tau * log((e^(1/tau) + 1) / 2);
    a lone call's baseline is 0."""
    assert advantages("opmd", [one_call(1.0, 0.0, 0.0)]) == [
        [[pytest.approx(2 / 3)], [pytest.approx(-1 / 3)], [pytest.approx(-1 / 3)]]]
    for tau in (1.0, 0.5):
        baseline = tau * math.log((math.exp(1 / tau) + 1) / 2)
        assert advantages("opmd", [one_call(1.0, 0.0)], opmd_baseline="logavgexp", tau=tau) == [
            [[pytest.approx(1 - baseline)], [pytest.approx(-baseline)]]]
    assert advantages("opmd", [one_call(-0.4)], opmd_baseline="logavgexp") == [[[f32(-0.4)]]]


def test_reinforceplusplus_whitens_over_the_steps_tokens():
    """gamma 1, replies of 3, 2 and 5 tokens rewarded 1, 0, 0 (in two groups: the whitening
    is over the step): ten returns, mean 0.3, unbiased variance 2.1/9, so (1 - 0.3) / sqrt(7/30)
    and -0.3 / sqrt(7/30) (weighting calls alike would give 2/3 and -1/3 over a std of
    1/sqrt(3)). gamma 0.5 on two 2-token replies rewarded 1 and 0: returns (0.5, 1) and
    (0, 0), mean 0.375, variance 0.6875/3, per-token lists."""
    std = math.sqrt(7 / 30)
    groups = [[Trajectory(1.0, (3,)), Trajectory(0.0, (2,))], [Trajectory(0.0, (5,))]]
    assert advantages("reinforceplusplus", groups) == [
        [[pytest.approx(0.7 / std)], [pytest.approx(-0.3 / std)]], [[pytest.approx(-0.3 / std)]]]
    std = math.sqrt(0.6875 / 3)
    assert advantages("reinforceplusplus", [one_call(1.0, 0.0)], gamma=0.5) == [[
        [pytest.approx([0.125 / std, 0.625 / std])], [pytest.approx([-0.375 / std] * 2)]]]


def test_an_empty_step_has_no_advantages():
    """A step whose groups were all skipped before (no valid trajectory) drops nothing."""
    for name in sorted(ADVANTAGE_FNS):
        assert step_advantages(name, {}, []) == StepAdvantages(advantages=[], metrics={
            "advantage/filtered_count": 0.0, "advantage/skipped_groups": 0.0})


def test_arguments_of_another_function_are_ignored():
    """Unknown keys are left to the caller's validation."""
    assert advantages("rloo", [one_call(1.0, 0.0)], epsilon=1e-6) == \
        advantages("rloo", [one_call(1.0, 0.0)])


@pytest.mark.parametrize(("name", "args", "message"), [
    ("ppo", {}, ("'ppo' is not a known advantage_fn; choose one of: gigpo, grpo, opmd, "
                 "reinforce, reinforceplusplus, rloo, step_wise_grpo")),
    ("grpo", {"rank_penalty": 0.5}, (
        "grpo's rank_penalty is not supported by the local backend: it ranks a group's calls "
        "by their log-probs, which its advantages do not see (got 0.5)")),
    ("grpo", {"duplicate_experiences": True}, (
        "grpo's duplicate_experiences is not supported by the local backend: Trinity refills "
        "dropped groups with random copies of kept ones (got True)")),
    ("grpo", {"std_cal_level": "task"},
     "grpo's std_cal_level must be either 'group' or 'batch' (got 'task')"),
    ("step_wise_grpo", {"std_cal_level": "run"},
     "step_wise_grpo's std_cal_level must be either 'group' or 'batch' (got 'run')"),
    ("opmd", {"opmd_baseline": "max"},
     "opmd's opmd_baseline must be 'mean' or 'logavgexp' (got 'max')"),
])
def test_refused_arguments(name, args, message):
    """What the local backend cannot compute as Trinity does is refused, naming it."""
    with pytest.raises(ConfigError) as caught:
        step_advantages(name, args, [one_call(1.0, 0.0)])
    assert str(caught.value) == message


def test_reinforceplusplus_refuses_a_step_of_one_token():
    """Bessel's correction over one token divides by zero; Trinity raises there too."""
    with pytest.raises(ValueError) as caught:
        step_advantages("reinforceplusplus", {}, [[Trajectory(1.0, (1,))]])
    assert str(caught.value) == ("reinforceplusplus whitens over the step's reply tokens: it "
                                 "needs two tokens or more, and the step has one")


@pytest.mark.parametrize("lengths", [(), (2, 0)])
def test_a_trajectory_has_calls_with_tokens(lengths):
    """No call, or a reply without tokens (whose reward Trinity would lose), is refused."""
    with pytest.raises(ValueError) as caught:
        Trajectory(1.0, lengths)
    assert str(caught.value) == ("response_lengths must hold one positive length per model "
                                 f"call (got {lengths!r})")


def test_a_group_has_a_trajectory():
    """A task without valid trajectories has no group (the caller skips it)."""
    with pytest.raises(ValueError) as caught:
        step_advantages("grpo", {}, [one_call(1.0), []])
    assert str(caught.value) == "every group needs a trajectory; group 1 has none"
