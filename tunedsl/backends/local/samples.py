"""From a step's rollouts to training samples: which rollouts are trained on, the advantage
each model call carries, and the rollout statistics Trinity's explorer and trainer log.

The rules are Trinity's (its explorer's experiences, its advantage functions, named in
`tunedsl.dsl.algorithms`); `tests/test_local_advantages.py` holds every call's advantage to
the one Trinity's own function gives its experience.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import torch

from ...dsl.algorithms import ResolvedAlgorithm
from ...dsl.chat import ModelCall
from ...dsl.trinity_fields import ROLLOUT_METRIC
from ...dsl.turns import per_call
from .advantages import StepAdvantages, Trajectory, step_advantages
from .batches import TrainingSample
from .engine import DEFAULT_TOP_P
from .steps import Rollout, aggregate_stats

#: A step's scored rollouts, by task: each rollout with the reward it is trained with.
ScoredGroups = list[list[tuple[Rollout, float]]]
#: The teacher's log-prob of each reply token of each call, one tensor a call.
TeacherScores = Callable[[Sequence[ModelCall]], list[torch.Tensor]]


def step_samples(algorithm: ResolvedAlgorithm, groups: list[list[Rollout]],
                 teacher: TeacherScores | None = None,
                 said: set[str] | None = None) -> tuple[list[TrainingSample],
                                                        dict[str, float]]:
    """Training samples from the step's groups, and rollout statistics; each trained
    rollout's ``advantages`` are filled in (``teacher`` scores the calls for on-policy
    distillation; ``said``: the notes the run printed already, each said once a run).

    A rollout is trained on when it was scored and called the model: on Trinity only
    those leave experiences, so only they form their task's group, a group of one
    included. A failed rollout is left out, scored 0, or takes its group with it
    (``on_failed_rollout``); a reply cut short is trained on or masked
    (``on_truncated_reply``). The advantage function may drop whole groups
    (``std_threshold``). A group left with nothing is skipped (``rollout/groups_skipped``).
    """
    rewards, errors, failed_groups = [], 0, 0
    truncated = sum(call.response.finish_reason == "length" for group in groups
                    for rollout in group for call in rollout.calls)
    user_metrics: dict[str, list[float]] = {}
    trained: ScoredGroups = []
    for group in groups:
        failures = [r for r in group if r.result is None]
        errors += len(failures)
        scored = [(r, r.result.reward) for r in group if r.result is not None]
        if algorithm.on_failed_rollout == "zero":
            scored = [(r, 0.0 if r.result is None else r.result.reward) for r in group]
        # Every scored rollout's reward and metrics, one without a model call included:
        # on Trinity its placeholder experience carries them into the rollout metrics.
        rewards += [reward for _, reward in scored]
        for rollout, _ in scored:
            for key, value in (rollout.result.metrics if rollout.result else {}).items():
                user_metrics.setdefault(key, []).append(value)
        if failures and algorithm.on_failed_rollout == "drop_group":
            failed_groups += 1
            scored = []
        trained.append([(r, reward) for r, reward in scored if r.calls])
    kept = [group for group in trained if group]
    skipped = len(trained) - len(kept)
    if algorithm.advantage_fn == "on_policy_distill":
        assert teacher is not None  # on_policy_distill has its teacher (teacher_problems)
        found = distill_advantages(kept, teacher, algorithm.advantage_args["kl_coef"])
    else:
        assert algorithm.advantage_fn is not None  # resolve() named the algorithm's own
        found = step_advantages(algorithm.advantage_fn, algorithm.advantage_args, [
            [_trajectory(rollout, reward) for rollout, reward in scored_group]
            for scored_group in kept])
    samples, lengths = [], []
    mask_truncated = algorithm.on_truncated_reply == "mask"
    for scored_group, advantages in zip(kept, found.advantages):
        for (rollout, _), calls in zip(scored_group, advantages):
            if calls is None:  # the advantage function dropped the group
                continue
            rollout.advantages = list(calls)  # per call: a number, or one per token
            for call, given in zip(rollout.calls, calls):
                advantage = tuple(given) if isinstance(given, list) else given
                cut = call.response.finish_reason == "length"
                lengths.append(len(call.response_ids))
                samples.append(TrainingSample(
                    call.prompt_ids, call.response_ids, call.logprobs, advantage,
                    call.sampling["temperature"], call.sampling.get("top_p", DEFAULT_TOP_P),
                    masked=cut and mask_truncated))
    # Named as Trinity's explorer and trainer name them (see trinity_fields).
    stats = {**aggregate_stats(ROLLOUT_METRIC.format(name="reward", stat="{stat}"), rewards),
             "rollout/errors": float(errors), "rollout/groups_skipped": float(skipped),
             "rollout/groups_dropped_for_failures": float(failed_groups),
             "rollout/truncated": float(truncated),
             "rollout/masked": float(sum(sample.masked for sample in samples)),
             "train/samples": float(len(samples)), **found.metrics,
             **aggregate_stats("response_length/{stat}", lengths, empty=0.0, std=False)}
    for name, values in user_metrics.items():
        if name == "reward":  # the judge's reward wins, as on Trinity
            _say_the_reward_metric_is_not_logged(set() if said is None else said)
            continue
        stats.update(aggregate_stats(ROLLOUT_METRIC.format(name=name, stat="{stat}"),
                                     values, std=False))
    return samples, stats


def _say_the_reward_metric_is_not_logged(said: set[str]) -> None:
    """A metric the workflow or judge named ``reward`` is not logged (``rollout/reward/*``
    is the rollout's reward, as on Trinity): it was dropped without a word. Said once a
    run (``said``: its notes so far)."""
    if "reward metric" in said:
        return
    said.add("reward metric")
    print("note: a metric named 'reward' (in WorkflowOutput or JudgeOutput metrics) is not "
          "logged: rollout/reward is the rollout's reward, as on Trinity; give the metric "
          "another name to see it", file=sys.stderr)


def _trajectory(rollout: Rollout, reward: float) -> Trajectory:
    """A scored rollout as the advantage functions read it, with the rewards and states of
    the turns its workflow marked spread over its calls (as Trinity's experiences carry
    them)."""
    turns = per_call(rollout.result.turns if rollout.result is not None else (),
                     len(rollout.calls))
    return Trajectory(reward=reward,
                      response_lengths=tuple(len(call.response_ids) for call in rollout.calls),
                      step_rewards=turns.rewards, states=turns.states)


def distill_advantages(groups: ScoredGroups, teacher: TeacherScores,
                       coefficient: float) -> StepAdvantages:
    """Trinity's ``OnPolicyDistillAdvantage``: each reply token's advantage is
    ``kl_coef x (teacher - student)`` log-prob, the student's being the sampled ones and
    the teacher's what ``teacher`` gives for the step's calls at once."""
    calls = [call for group in groups for rollout, _ in group for call in rollout.calls]
    scored = teacher(calls) if calls else []
    lengths = [len(call.response_ids) for call in calls]
    student = torch.tensor([lp for call in calls for lp in call.logprobs])
    scores = torch.cat(scored) if calls else torch.empty(0)
    advantages = coefficient * (scores - student)  # float32, as Trinity's
    per_call = [values.tolist() for values in advantages.split(lengths)]
    segment = torch.repeat_interleave(torch.arange(len(calls)), torch.tensor(lengths,
                                                                             dtype=torch.long))
    kl_sums = torch.zeros(len(calls)).index_add(0, segment, student - scores)
    advantage_sums = torch.zeros(len(calls)).index_add(0, segment, advantages)
    flat = iter(per_call)
    # Named as Trinity's trainer logs its advantage function's metrics (advantage/...).
    metrics = {"advantage/kl/mean": float(kl_sums.mean()) if calls else 0.0,
               "advantage/kl/std": float(kl_sums.std()) if len(calls) > 1 else 0.0,
               "advantage/advantages/mean": float(advantage_sums.mean()) if calls else 0.0}
    return StepAdvantages(advantages=[[[next(flat) for _ in rollout.calls]
                                       for rollout, _ in group] for group in groups],
                          metrics=metrics)
