"""Every algorithm the local backend runs learns the arith example; a failed rollout and a
truncated reply are what ``on_failed_rollout`` and ``on_truncated_reply`` say, counted in
each step's metrics (the same settings on Trinity: tests/test_trinity_rollouts.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import tunedsl  # noqa: E402
from tunedsl.dsl.algorithms import (  # noqa: E402
    ALGORITHMS,
    CONVERSATION_ALGORITHMS,
    TEACHER_ALGORITHMS,
)

from .local_support import graph_for, run_local  # noqa: E402

#: Settings an algorithm needs to learn the arith example in a test's steps: DAPO masks
#: replies cut by max_tokens, and every arith reply is (one token, no end token), so it
#: trains on them here; that setting's own test is below.
LEARNS_WITH = {"dapo": ["algorithm.on_truncated_reply=train"],
               # composed as a ported Trinity config composes it (Trinity's rec loss)
               "multi_step_grpo+rec": ["algorithm.policy_loss_fn=rec",
                                       "algorithm.policy_loss_args.clip_mode=one-side",
                                       "algorithm.policy_loss_args.weight=importance_sampling"]}


@pytest.mark.parametrize("name", sorted(set(ALGORITHMS) - TEACHER_ALGORITHMS
                                         - CONVERSATION_ALGORITHMS - {"grpo"})
                         + ["multi_step_grpo+rec"])
def test_each_algorithm_learns(name, tiny_model, tmp_path):
    """With a fixed seed, the arith example's reward rises clearly within 80 steps under
    every algorithm, each with its own defaults (KL to the initial model included);
    on_policy_distill learns from a teacher instead (tests/test_local_distill.py), and sft
    from conversations (tests/test_local_sft.py). grpo, the example's own algorithm, is
    tests/test_local_trainer.py::test_the_example_learns: the same run and the same
    assertion, so it is not run twice. Measured over seeds 0-3, the last 15 steps' mean
    reward is 0.15 to 0.27 above the first 15 steps' (about 0.07) at step 80, and 0.25 to
    0.53 above at step 150: a rise of 0.1 is far outside chance (1800 rollouts a mean)."""
    graph = tunedsl.load_experiment("examples.arith.experiment:Arith", overrides=[
        f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}",
        "train_dataset.total_steps=80", "algorithm.eval_interval_steps=1000",
        "algorithm.save_interval_steps=1000",
        f"algorithm.algorithm_type={name.partition('+')[0]}",
        *LEARNS_WITH.get(name, [])])
    summary = run_local(graph, progress=False)
    first, last = summary.rewards[:15], summary.rewards[-15:]
    assert sum(last) / 15 > sum(first) / 15 + 0.1, (sum(first) / 15, sum(last) / 15)


def one_step(tiny_model, tmp_path, name, *overrides):
    from tunedsl.backends.local.trainer import LocalTrainer

    trainer = LocalTrainer(graph_for(name, tiny_model, tmp_path, *overrides), tmp_path)
    report = trainer.train_step()
    trainer.close()
    return report


@pytest.mark.parametrize("choice", ["mask", "train"])
def test_truncated_replies_are_masked_or_trained_on(choice, tiny_model, tmp_path):
    """Most arith replies stop at max_tokens = 1 (finish reason ``length``), a few end
    (``stop``): ``mask`` takes exactly the cut ones out of the loss, as Trinity's
    ``mask_response_truncated`` does, ``train`` none. The counts are in the metrics."""
    from tunedsl.backends.local.trainer import LocalTrainer

    trainer = LocalTrainer(graph_for("Arith", tiny_model, tmp_path,
                                     f"algorithm.on_truncated_reply={choice}"), tmp_path)
    report = trainer.train_step()
    samples, _ = trainer.samples([list(group) for group in report.groups])
    trainer.close()
    calls = [call for group in report.groups for rollout in group for call in rollout.calls]
    cut = [call.response.finish_reason == "length" for call in calls]
    assert 0 < sum(cut) < len(calls)
    assert [sample.masked for sample in samples] == [c and choice == "mask" for c in cut]
    assert report.metrics["rollout/truncated"] == sum(cut)
    assert report.metrics["rollout/masked"] == (sum(cut) if choice == "mask" else 0)


def failure_shape(report):
    """Per group: (failed rollouts, rollouts trained on, rollouts in the group)."""
    return [(sum(r.result is None for r in group), sum(bool(r.advantages) for r in group),
             len(group)) for group in report.groups]


@pytest.mark.parametrize("policy", ["drop", "zero", "drop_group"])
def test_a_failed_rollout_is_what_on_failed_rollout_says(policy, tiny_model, tmp_path):
    """The workflow fails after its call when the reply is an odd digit, so groups mix
    failed and scored rollouts: ``drop`` trains on the scored ones, ``zero`` on all of them
    (a failed one's reward is 0 in the statistics), ``drop_group`` on no group with a
    failure (counted in rollout/groups_dropped_for_failures)."""
    report = one_step(tiny_model, tmp_path, "FailsLate",
                            f"algorithm.on_failed_rollout={policy}")
    shape = failure_shape(report)
    mixed = [(failed, trained, size) for failed, trained, size in shape if 0 < failed < size]
    assert mixed, shape  # the seed gives groups of both kinds
    expected = {"drop": lambda failed, size: size - failed, "zero": lambda failed, size: size,
                "drop_group": lambda failed, size: 0 if failed else size}[policy]
    assert all(trained == expected(failed, size) for failed, trained, size in shape), shape
    groups_with_failures = sum(failed > 0 for failed, _, _ in shape)
    assert report.metrics["rollout/groups_dropped_for_failures"] == (
        groups_with_failures if policy == "drop_group" else 0)
    rollouts = [r for group in report.groups for r in group]
    counted = len(rollouts) if policy == "zero" else sum(r.result is not None for r in rollouts)
    scored_sum = sum(r.result.reward for r in rollouts if r.result is not None)
    assert report.metrics["rollout/reward/mean"] == pytest.approx(scored_sum / counted)


def test_dynamic_sampling_carries_samples_until_a_batch_fills(tiny_model, tmp_path, capsys):
    """dapo drops the groups whose rewards all agree (std_threshold = 0); as Trinity's
    trainer reads only full batches, a step whose surviving samples are fewer than
    batch_size x group_size trains nothing and carries them, and the step that fills the
    batch trains on all it carried (issue 33 part 4)."""
    import json

    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.algorithm_type=dapo",
                      "algorithm.group_size=4", "algorithm.batch_size=2",
                      "algorithm.on_truncated_reply=train", "train_dataset.total_steps=16")
    summary = run_local(graph, progress=False)
    rows = [row for row in map(json.loads, (summary.run_dir / "metrics.jsonl").read_text()
                                .splitlines()) if "train/carried_samples" in row]
    target, carried, trained, waited = 2 * 4, 0.0, 0, 0
    for row in rows:
        assert row["train/carried_samples"] == carried
        survivors = 2 * 4 - row["advantage/filtered_count"]
        if carried + survivors >= target:
            assert "actor/lr" in row  # the step updated the weights
            carried, trained = 0.0, trained + 1
        elif carried + survivors == 0:  # nothing to learn, nothing waiting
            assert "actor/lr" not in row
        else:
            assert "actor/lr" not in row
            carried, waited = carried + survivors, waited + 1
    assert len(rows) == 16 and trained and waited
    note = next(line for line in capsys.readouterr().err.splitlines() if "carried" in line)
    assert note.startswith(f"note: {waited} of 16 steps (")
