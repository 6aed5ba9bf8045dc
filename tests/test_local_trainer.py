"""The local trainer (trainer.py): it learns; rollouts, auxiliary models, KL, the learning
rate and the Algorithm settings as Trinity's; failed rollouts dropped; what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import tunedsl  # noqa: E402
from tunedsl.errors import ConfigError, DatasetError  # noqa: E402

from .local_support import REPO, SMALL_TWO_CALLS, decorated_at, graph_for, run_local  # noqa: E402


def test_the_example_learns(tiny_model, tmp_path):
    """With a fixed seed, the arith example's reward rises clearly within 80 steps (under
    its own algorithm, grpo: test_each_algorithm_learns has the others and the figures)."""
    graph = tunedsl.load_experiment("examples.arith.experiment:Arith", overrides=[
        f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}",
        "train_dataset.total_steps=80", "algorithm.eval_interval_steps=1000",
        "algorithm.save_interval_steps=40"])
    summary = run_local(graph, progress=False)
    first, last = summary.rewards[:15], summary.rewards[-15:]
    assert sum(last) / 15 > sum(first) / 15 + 0.1, (sum(first) / 15, sum(last) / 15)
    lines = (summary.run_dir / "metrics.jsonl").read_text().splitlines()
    assert len([1 for line in lines if "rollout/reward/mean" in json.loads(line)]) == 80
    assert (summary.run_dir / "reward_curve.png").stat().st_size > 0
    assert list((summary.run_dir / "monitor" / "tensorboard" / "trainer").iterdir())
    assert {"experiment.yaml", "config.yaml"} <= {p.name for p in summary.run_dir.iterdir()}


def test_a_step_reuses_earlier_turns_and_drops_the_kept_caches_before_its_update(tiny_model,
                                                                                 tmp_path):
    """Within a step, each trajectory's second call reuses the first call's prompt from the
    kept KV cache (the step reports the share reused); the cache is dropped before the
    update changes the weights that computed it; the step reports the seconds spent in the
    model's passes."""
    from tunedsl.backends.local.trainer import LocalTrainer

    trainer = LocalTrainer(graph_for("TwoCalls", tiny_model, tmp_path, *SMALL_TWO_CALLS),
                           tmp_path)
    kept_at_update = []
    update = trainer.update
    trainer.update = lambda samples: kept_at_update.append(
        list(trainer.engine.prefixes.kept)) or update(samples)
    report = trainer.train_step()
    rollouts = [rollout for group in report.groups for rollout in group]
    assert {len(rollout.calls) for rollout in rollouts} == {2}
    firsts = {tuple(r.calls[1].prompt_ids): len(r.calls[0].prompt_ids) for r in rollouts}
    assert trainer.engine.reused_tokens >= sum(firsts.values())
    assert report.metrics["rollout/prefix_cache_hit"] == trainer.engine.reused_tokens / (
        trainer.engine.reused_tokens + trainer.engine.prefilled_tokens)
    assert kept_at_update == [[]]
    assert 0 < report.metrics["time/model_seconds"] < report.metrics["time/step_seconds"]
    trainer.close()


def test_params_reach_the_workflow_on_the_local_backend(tiny_model, tmp_path):
    """The experiment's params arrive in the workflow (its reward is params["bonus"])."""
    summary = run_local(graph_for("Params", tiny_model, tmp_path, "params.bonus=0.75"),
                        progress=False)
    assert set(summary.rewards) == {0.75}


def test_openai_client_workflow_trains(tiny_model, tmp_path):
    """Model calls made through the OpenAI client become training samples too."""
    summary = run_local(graph_for("OpenAIClient", tiny_model, tmp_path), progress=False)
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert rows and all(row["response_length/mean"] == 1.0 for row in rows)
    assert all(row["rollout/errors"] == 0.0 for row in rows)


def test_failed_and_nan_rollouts_are_dropped_logged_and_counted(tiny_model, tmp_path):
    """A raising workflow and a NaN reward drop that rollout; the run goes on."""
    graph = graph_for("Flaky", tiny_model, tmp_path, "train_dataset.total_steps=9",
                      "algorithm.batch_size=5")
    summary = run_local(graph, progress=False)
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert summary.steps == 9 and len(rows) == 9
    errors = sum(row["rollout/errors"] for row in rows)
    skipped = sum(row["rollout/groups_skipped"] for row in rows)
    # Every task whose answer is 3 or 4 loses its whole group (4 rollouts) and is skipped.
    assert errors == 4 * skipped and skipped > 0
    log = (summary.run_dir / "log" / "rollouts.log").read_text()
    assert "@workflow flaky" in log and "ValueError: no threes" in log
    assert 'raise ValueError("no threes")' in log  # the user's traceback
    assert "returned the reward nan" in log and "'answer': '4'" in log


def test_batch_larger_than_the_dataset_is_an_error(tiny_model, tmp_path):
    """45 training rows cannot fill a batch of 50."""
    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.batch_size=50")
    with pytest.raises(DatasetError) as caught:
        run_local(graph, progress=False)
    assert str(caught.value) == (
        f"train_dataset: {graph.train_dataset.path} (split 'train') has 45 rows, fewer than "
        f"algorithm.batch_size = 50, so not one training step can be filled; lower "
        f"batch_size or add tasks")
    project = Path(graph.checkpoint_root_dir) / graph.project
    assert not project.exists() or not any(project.iterdir())  # no run left


def test_workflow_that_never_calls_the_model_is_an_error(tiny_model, tmp_path):
    """Nothing to train: said before the first step."""
    with pytest.raises(ConfigError, match=r"@workflow silent \(.*agents.py:\d+\) never called "
                                          r"the model on the first task"):
        run_local(graph_for("Silent", tiny_model, tmp_path), progress=False)


def test_auxiliary_models_reach_workflow_and_judge_and_stay_frozen(tiny_model, tmp_path):
    """The helper answers in both functions; only the trained model's calls are learned from."""
    graph = graph_for("WithHelper", tiny_model, tmp_path,
                      f"auxiliary_models.helper.model_path={tiny_model}")
    summary = run_local(graph, progress=False)
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert all(row["rollout/errors"] == 0.0 for row in rows) and len(rows) == 4
    assert all(row["response_length/mean"] == 1.0 for row in rows)  # helper's 2-token replies: not
    from tunedsl.backends.local.trainer import LocalTrainer

    trainer = LocalTrainer(graph, summary.run_dir)
    helper_engine = trainer.explorer.auxiliary["helper"].engine
    assert not any(p.requires_grad for p in helper_engine.model.parameters())
    assert trainer.explorer.auxiliary["helper"].sampling == {"temperature": 0.5, "top_p": 1.0, "max_tokens": 2}


@pytest.mark.parametrize("name, cause", [
    ("Slow", "timed out after 1s"),
    ("Blocks", "raised RolloutBlocked: held the event loop past rollout_timeout = 1s: "
               "blocking code (time.sleep, a synchronous HTTP call, a long computation) in an "
               "async workflow or judge stops every rollout; await asyncio.to_thread(...) or "
               "use an async client"),
    ("Spins", "raised RolloutBlocked: held the event loop past rollout_timeout = 1s"),
])
def test_a_rollout_that_times_out_is_dropped_and_logged(tiny_model, tmp_path, name, cause,
                                                        capsys):
    """rollout_timeout bounds each rollout, even one that blocks the event loop (a
    synchronous sleep, a pure-Python loop that swallows Exceptions): that rollout fails and
    is named, the step's other rollouts are trained on, the run goes on."""
    import time

    graph = graph_for(name, tiny_model, tmp_path, "rollout_timeout=1",
                      "train_dataset.total_steps=2")  # sums of 7 in both steps (seed 1)
    started = time.perf_counter()
    summary = run_local(graph, progress=False)
    assert time.perf_counter() - started < 25  # nobody waited the 30 s sleep out
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    log = (summary.run_dir / "log" / "rollouts.log").read_text()
    sevens = sum(1 for line in log.splitlines() if "rollout failed" in line)
    assert sevens == sum(row["rollout/errors"] for row in rows) > 0
    assert cause in log and "'answer': '7'" in log
    kept = [json.loads(line) for line in (summary.run_dir / "rollouts.jsonl").read_text()
            .splitlines()]
    failed = [r for r in kept if r["error"]]
    assert len(failed) == sevens and {r["task"]["answer"] for r in failed} == {"7"}
    # A blocking rollout keeps the user's traceback, at the line that held the loop.
    assert all((r["traceback"] is None) == (name == "Slow") for r in failed)
    # The blocked step's other rollouts were scored, not lost with it.
    assert all(r["reward"] is not None for r in kept if not r["error"])
    assert sum(row["train/samples"] for row in rows) == len(kept) - sevens
    # "raise rollout_timeout", which a resume refuses, says so (sweep 48 B-W4)
    [warned] = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("warning: step")]
    assert ("; a resume keeps the rollout_timeout the run began with (a larger one needs a "
            "new run); " in warned) == (name == "Slow"), warned


def test_kl_to_the_initial_model_is_measured_and_penalised(tiny_model, tmp_path):
    """With kl_coef the reference stays frozen; KL is 0 at the first update, then grows."""
    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.kl_coef=0.5",
                      "algorithm.learning_rate=0.01")
    summary = run_local(graph, progress=False)
    kls = [json.loads(line)["actor/kl_loss"] for line in (summary.run_dir / "metrics.jsonl")
           .read_text().splitlines() if '"actor/kl_loss"' in line]
    assert kls[0] == pytest.approx(0.0, abs=1e-6) and kls[-1] > 1e-4
    from tunedsl.backends.local.trainer import LocalTrainer

    trainer = LocalTrainer(graph, summary.run_dir)
    assert trainer.reference is not None
    assert not any(p.requires_grad for p in trainer.reference.parameters())


def test_an_auxiliary_model_on_an_endpoint_is_called_there_not_loaded(tiny_model, tmp_path):
    """A helper with base_url is never loaded locally: each of its calls reaches the endpoint
    (its sampling settings with it), and training goes on as with a local helper."""
    from .openai_server import OpenAIServer

    with OpenAIServer(lambda messages: "3") as helper:
        graph = graph_for("WithHelper", tiny_model, tmp_path,
                          f"auxiliary_models.helper.base_url={helper.base_url}",
                          "auxiliary_models.helper.model_path=served")
        summary = run_local(graph, progress=False)
        requests = list(helper.requests)
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert len(rows) == 4 and all(row["rollout/errors"] == 0.0 for row in rows)
    rollouts = 4 * graph.algorithm.batch_size * graph.algorithm.group_size
    preflight = 1  # the one rollout before training, on the first task
    assert len(requests) == 2 * (rollouts + preflight)  # in the workflow and in the judge
    assert {(r["model"], r["temperature"], r["max_tokens"]) for r in requests} == {
        ("served", 0.5, 2)}


def test_no_dropout_in_the_passes_that_compute_the_ratio(tiny_model, tmp_path):
    """With dropout in the model, the update's policy still equals the sampling policy before
    the step's update (Trinity's actor/ppo_kl is ~0), as TRL's disable_dropout does."""
    import shutil

    folder = tmp_path / "dropout-model"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "attention_dropout": 0.5}))
    summary = run_local(graph_for("Arith", str(folder), tmp_path, "train_dataset.total_steps=2"),
                        progress=False)
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert len(rows) == 2 and all(abs(row["actor/ppo_kl"]) < 1e-4 for row in rows)


def test_a_failing_preflight_says_why_and_keeps_its_log(tiny_model, tmp_path):
    """The cause (the user's error, with their traceback, and the task) is printed, and the
    run directory keeps the log of the failed rollout."""
    from tunedsl.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        run_local(graph_for("Broken", tiny_model, tmp_path), progress=False)
    [run_dir] = (tmp_path / "tunedsl").iterdir()
    log = run_dir / "log" / "rollouts.log"
    first = json.loads((REPO / "examples/arith/data/train.jsonl").read_text().splitlines()[0])
    assert str(info.value) == (
        f"before training, on the first training task ({first}): @workflow broken "
        f"(tests/fixtures/local/agents.py:{decorated_at('broken')}) raised ValueError: no "
        f"model today; the log is kept in {log}")
    assert 'raise ValueError("no model today")' in info.value.user_traceback
    assert "no model today" in log.read_text()


def test_weights_that_stop_being_finite_stop_the_run_before_saving(tiny_model, tmp_path,
                                                                   monkeypatch):
    """An update that diverges (here one made to write NaN, as an exploding step would):
    exit 1 naming the step; the broken weights are never saved."""
    from tunedsl.errors import RunError

    step = torch.optim.AdamW.step

    def diverging(self, *args, **kwargs):
        result = step(self, *args, **kwargs)
        self.param_groups[0]["params"][0].data.fill_(float("nan"))
        return result

    monkeypatch.setattr(torch.optim.AdamW, "step", diverging)
    with pytest.raises(RunError) as info:
        run_local(graph_for("Arith", tiny_model, tmp_path), progress=False)
    assert str(info.value) == (
        "step 1: the weights are no longer finite after the update (learning_rate = 0.001); "
        "the run stopped before saving them, and the newest checkpoint is as it was; lower "
        "learning_rate")
    [run_dir] = (tmp_path / "tunedsl").iterdir()
    assert not list(run_dir.glob("global_step_*"))


def test_algorithm_settings_mean_the_same_locally_and_unused_trinity_ones_are_named(
        tiny_model, tmp_path, capsys):
    """clip_range, weight_decay and grad_clip (also read from their [trinity] keys) drive the
    local trainer; [trinity] keys no field reads are named once, at the start."""
    from tunedsl.backends.local.trainer import LocalTrainer

    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.clip_range=0.1",
                      "trinity.algorithm.optimizer.weight_decay=0.05",
                      "trinity.algorithm.optimizer.clip_grad=0.5",
                      "trinity.synchronizer.sync_interval=2",
                      "model.tensor_parallel_size=2", "model.trinity.enforce_eager=true",
                      "train_dataset.total_steps=1")
    summary = run_local(graph, progress=False)
    trainer = LocalTrainer(graph, summary.run_dir)
    assert (trainer.algorithm.policy_loss_args["clip_range"], trainer.phase().grad_clip) == \
        (0.1, 0.5)
    assert trainer.optimizer.param_groups[0]["weight_decay"] == 0.05
    assert capsys.readouterr().err.count(
        "local backend: these Trinity settings apply to Trinity runs only and are not used "
        "here: trinity.synchronizer.sync_interval, model.tensor_parallel_size, "
        "model.trinity.enforce_eager\n") == 1


def test_the_learning_rate_follows_trinitys_schedule(tiny_model, tmp_path):
    """Warmup and cosine decay (set through their Trinity keys too) give each update the
    learning rate verl's schedule gives it: 0 during warmup, then a half cosine from
    learning_rate to min_lr_ratio x learning_rate over the remaining steps."""
    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.lr_warmup_steps=1",
                      "trinity.algorithm.optimizer.lr_scheduler_type=cosine",
                      "algorithm.min_lr_ratio=0.1")
    summary = run_local(graph, progress=False)
    rates = [json.loads(line)["actor/lr"] for line in (summary.run_dir / "metrics.jsonl")
             .read_text().splitlines() if "actor/lr" in line]
    # 4 steps, 1 of warmup: progress 0, 1/3, 2/3 -> 0.55 + 0.45 cos(pi * progress).
    assert rates == pytest.approx([0.0, 1e-3, 1e-3 * 0.775, 1e-3 * 0.325])


def test_settings_that_leave_nothing_to_learn_are_said_before_the_first_step(
        tiny_model, tmp_path, capsys):
    """Greedy sampling under GRPO and a warm-up longer than the run are run as asked, with
    a warning on stderr naming each setting, before the first step."""
    graph = graph_for("Arith", tiny_model, tmp_path, "model.temperature=0",
                      "algorithm.lr_warmup_steps=5", "train_dataset.total_steps=2")
    run_local(graph, progress=False)
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("warning: ")]
    assert warnings == [
        "warning: model.temperature = 0: every rollout of a task's group gets the same reply, "
        "so grpo's advantages (each reward against its group's) are all 0 and training "
        "changes nothing; sample at a temperature above 0 (1.0 is the usual)",
        "warning: algorithm.lr_warmup_steps = 5: the run has 2 steps, so the learning rate is "
        "still rising when it ends and never reaches algorithm.learning_rate; make "
        "lr_warmup_steps a fraction of the steps (a tenth is usual)"]


def test_learning_with_multi_token_replies_and_two_calls_per_trajectory(tiny_model, tmp_path):
    """Each trajectory makes two calls of up to two tokens (the digits and the end of the
    reply), and both are trained on: the reward rises from chance within 200 steps."""
    summary = run_local(graph_for("TwoCalls", tiny_model, tmp_path), progress=False)
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert {row["train/samples"] for row in rows} == {15 * 8 * 2}
    assert max(row["response_length/mean"] for row in rows) > 1.5  # replies of more than a token
    first, last = (sum(row["rollout/reward/mean"] for row in part) / 20 for part in (rows[:20],
                                                                           rows[-20:]))
    assert first < 0.1 and last > first + 0.1  # measured: 0.033 -> 0.237 (seed 0: 0.156)


def test_user_metrics_reach_the_local_run_metrics(tmp_path, capsys):
    """WorkflowOutput/JudgeOutput metrics are averaged per step into metrics.jsonl; one
    named ``reward``, which rollout/reward (the rollout's reward) beats as on Trinity, is
    said once, not dropped without a word (sweep 45 B-S1)."""
    pytest.importorskip("torch")
    from examples.arith.tiny_model import build_tiny_model

    summary = tunedsl.run("tests.fixtures.local.agents:Params", backend="local", progress=False,
                          overrides=[f"model.model_path={build_tiny_model(str(tmp_path / 'm'))}",
                                     f"checkpoint_root_dir={tmp_path}", "params.bonus=0.5"])
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert [row["rollout/seen_bonus/mean"] for row in rows] == [0.5] * 4
    assert [row["rollout/reward/mean"] for row in rows] == [0.5] * 4
    said = capsys.readouterr().err.splitlines()
    assert said.count("note: a metric named 'reward' (in WorkflowOutput or JudgeOutput "
                      "metrics) is not logged: rollout/reward is the rollout's reward, as on "
                      "Trinity; give the metric another name to see it") == 1
