"""SFT on the local backend: alone it teaches the arith model its sums from conversations; as
a warm-up it runs first, RL then starts from its model (its reference too, as on Trinity's
second stage), and a run stopped anywhere resumes to the same weights."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tunedsl.runs.run_files import WARMUP_DIR  # noqa: E402

from .local_support import graph_for, interrupted_and_resumed, load_weights, run_local  # noqa: E402


def metric_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_sft_alone_teaches_the_sums_from_conversations(tiny_model, tmp_path):
    """From random weights to a third of the training sums right in 100 steps (the
    workflow evaluated on the training tasks: the conversations are those sums), its loss
    per reply token falling by more than half."""
    summary = run_local(graph_for("Supervised", tiny_model, tmp_path,
                                  "train_dataset.total_steps=100", "algorithm.batch_size=15",
                                  "algorithm.learning_rate=3e-3", "eval_dataset.split=train",
                                  "algorithm.eval_interval_steps=100"), progress=False)
    (first_step, first), (last_step, last) = summary.eval_rewards[0], summary.eval_rewards[-1]
    assert (first_step, last_step, summary.steps) == (0, 100, 100)
    assert first < 0.1 and last >= 0.3, summary.eval_rewards
    losses = summary.sft_losses
    assert len(losses) == 100 and sum(losses[-10:]) < sum(losses[:10]) / 2
    rows = [row for row in metric_rows(summary.run_dir) if "actor/sft_loss" in row]
    assert [row["step"] for row in rows] == list(range(1, 101))
    assert all(row["train/samples"] == 15 for row in rows)
    assert not any(key in row for row in rows for key in ("rollout/reward/mean",
                                                          "actor/pg_loss", "actor/kl_loss"))


def test_a_warmup_runs_first_and_rl_starts_from_its_model(tiny_model, tmp_path):
    summary = run_local(graph_for("WarmedUp", tiny_model, tmp_path), progress=False)
    run_dir = summary.run_dir
    assert summary.steps == 3 + 4 and len(summary.sft_losses) == 3
    assert len(summary.rewards) == 4
    rows = {row["step"]: row for row in metric_rows(run_dir) if "actor/lr" in row}
    assert [step for step in rows if "actor/sft_loss" in rows[step]] == [1, 2, 3]
    assert [step for step in rows if "rollout/reward/mean" in rows[step]] == [4, 5, 6, 7]
    # The warm-up's model is kept, and checkpointed at its last step.
    warmed = load_weights(run_dir / WARMUP_DIR)
    at_three = load_weights(run_dir / "global_step_3")
    assert all(torch.equal(warmed[k], at_three[k]) for k in warmed)
    initial = load_weights(tiny_model)
    assert any(not torch.equal(warmed[k], initial[k]) for k in warmed)
    # RL's reference is the warm-up's model: the first RL step's policy is that model, so
    # its KL to the reference is 0 (to the initial model it would not be).
    assert rows[4]["actor/kl_loss"] == 0.0 and rows[5]["actor/kl_loss"] > 0.0
    # Each phase its own learning rate, from a fresh optimizer.
    assert [rows[s]["actor/lr"] for s in (1, 3, 4, 7)] == [1e-3, 1e-3, 1e-3, 1e-3]


@pytest.mark.parametrize("stop_at", [2, 3, 5])
def test_a_warmed_up_run_stopped_anywhere_resumes_to_the_same_weights(tiny_model, tmp_path,
                                                                     stop_at):
    """Stopped in the warm-up, at its last step, or in RL: the same final weights."""
    straight, resumed, interruption = interrupted_and_resumed(
        tiny_model, tmp_path, name="WarmedUp", stop_at=stop_at)
    assert f"interrupted at step {stop_at}" in str(interruption)
    assert resumed.steps == 7
    expected, got = load_weights(straight.checkpoint), load_weights(resumed.checkpoint)
    assert all(torch.allclose(expected[k], got[k], atol=1e-6) for k in expected)


def test_check_refuses_a_conversation_longer_than_the_model_as_run_does(tiny_model, tmp_path):
    """``check --backend local`` encodes the conversations as the run does: one longer than
    max_model_len is refused by check, in run's words (check said ok, run refused)."""
    from .cli_support import cli

    args = ("tests.fixtures.local.agents:Supervised", "--backend", "local", "--set",
            f"model.model_path={tiny_model}", "--set", "model.max_model_len=5", "--set",
            f"checkpoint_root_dir={tmp_path}")
    checked, ran = cli("check", *args), cli("run", *args)
    assert checked.returncode == ran.returncode == 2, checked.stdout
    assert checked.stderr.strip().splitlines()[-1] == ran.stderr.strip().splitlines()[-1]
    assert ran.stderr.strip().splitlines()[-1].startswith(
        "Error: train_dataset: row 1: the conversation is ")
    assert ran.stderr.strip().splitlines()[-1].endswith(
        " tokens, longer than model.max_model_len = 5; shorten it or raise max_model_len")


def test_a_warmup_s_length_may_change_on_resume_only_until_it_ends(tiny_model, tmp_path):
    """Resumed with a longer warm-up after RL began, the run trained SFT on the RL-trained
    model, then RL's first steps again, without a word (sweep 46 B-S1)."""
    import tunedsl
    from tunedsl.errors import ConfigError

    settings = [f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}",
                "train_dataset.total_steps=2"]
    done = tunedsl.run("tests.fixtures.local.agents:WarmedUp", backend="local",
                       overrides=settings, progress=False)
    assert (done.run_dir / WARMUP_DIR).is_dir() and done.steps == 3 + 2
    with pytest.raises(ConfigError) as refused:
        tunedsl.run("tests.fixtures.local.agents:WarmedUp", backend="local",
                    overrides=[*settings, "warmup_dataset.total_steps=4"],
                    resume=done.run_dir, progress=False)
    said = (f"warmup_dataset: the run's warm-up ended after step 3 (its model is in "
            f"{done.run_dir / WARMUP_DIR}) and RL began, and the experiment now gives the "
            f"warm-up {{}} steps: it would train SFT on the RL-trained model, or skip into RL's "
            f"schedule; resume with the warm-up's settings it ran with (its length 3 steps), "
            f"or start a new run")
    assert str(refused.value) == said.format(4)
    # by the step it really ended at, not the settings it started with: a length given by
    # --set and left out of the resume (sweep 47 B-S1), or given again as it ran
    with pytest.raises(ConfigError) as refused:
        tunedsl.run("tests.fixtures.local.agents:WarmedUp", backend="local",
                    overrides=[*settings, "warmup_dataset.total_steps=2"],
                    resume=done.run_dir, progress=False)
    assert str(refused.value) == said.format(2)
    resumed = tunedsl.run("tests.fixtures.local.agents:WarmedUp", backend="local",
                          overrides=[*settings[:-1], "train_dataset.total_steps=3"],
                          resume=done.run_dir, progress=False)
    assert resumed.steps == 3 + 3


@pytest.mark.parametrize("longer, refused", [(4, False), (2, True)])
def test_a_warmup_stopped_at_its_end_may_go_on_longer_but_not_end_sooner(tiny_model, tmp_path,
                                                                        longer, refused):
    """Stopped at the warm-up's last step, no RL step kept: a longer warm-up goes on from
    its model (it was refused as "RL began", sweep 47 B-W8); a shorter one would skip
    into RL's schedule, and is refused."""
    from tunedsl.errors import ConfigError, RunInterrupted

    def stop_at_the_warmup_s_end(report):
        if report.step == 3:
            raise KeyboardInterrupt

    graph = graph_for("WarmedUp", tiny_model, tmp_path)
    with pytest.raises(RunInterrupted):
        run_local(graph, progress=False, on_step_end=stop_at_the_warmup_s_end)
    run_dir = next((tmp_path / "tunedsl").iterdir())
    assert (run_dir / WARMUP_DIR).is_dir()
    other = graph_for("WarmedUp", tiny_model, tmp_path, f"warmup_dataset.total_steps={longer}")
    if refused:
        with pytest.raises(ConfigError) as caught:
            run_local(other, resume=run_dir, progress=False)
        assert str(caught.value).startswith(
            "warmup_dataset: the run's warm-up ended after step 3 ")
        return
    resumed = run_local(other, resume=run_dir, progress=False)
    assert resumed.steps == longer + 4 and len(resumed.sft_losses) == longer
