"""The local backend honours `monitor` as Trinity does, under Trinity's metric names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.local_support import graph_for, run_local  # noqa: E402
from tunedsl.errors import ConfigError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TWO_STEPS = ("train_dataset.total_steps=2", "algorithm.eval_interval_steps=1",
             f"eval_dataset.path={REPO / 'examples/arith/data'}", "eval_dataset.split=test")


def metric_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_metrics_carry_trinitys_names(tiny_model, tmp_path):
    """Train and eval reward, user metrics, response length and the actor's figures are
    logged as Trinity's explorer and trainer log them."""
    summary = run_local(graph_for("Arith", tiny_model, tmp_path, *TWO_STEPS,
                                  "algorithm.learning_rate=0.02"), progress=False)
    rows = metric_rows(summary.run_dir)
    steps = [row for row in rows if "actor/pg_loss" in row]
    assert {"rollout/reward/mean", "rollout/reward/max", "rollout/reward/min",
            "response_length/mean", "actor/entropy", "actor/kl_loss", "actor/ppo_kl",
            "actor/grad_norm", "actor/lr"} <= set(steps[0])
    assert [row["rollout/reward/mean"] for row in steps] == list(summary.rewards)
    assert all(row["actor/lr"] == 0.02 for row in steps)
    evals = [row for row in rows if "eval/eval/reward/mean@1" in row]
    assert [row["step"] for row in evals] == [0, 1, 2]
    assert [(step, row["eval/eval/reward/mean@1"]) for step, row in zip((0, 1, 2), evals)] \
        == list(summary.eval_rewards)


def test_mlflow_gets_every_metric(tiny_model, tmp_path, monkeypatch):
    """monitor = "mlflow" logs to the tracking URI of monitor_args (a local file store
    here), '@' written as '_at_' as Trinity's MlflowMonitor writes it."""
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = tmp_path / "mlruns"
    summary = run_local(graph_for("Arith", tiny_model, tmp_path, *TWO_STEPS, "monitor=mlflow",
                                  f"trinity.monitor.monitor_args.uri=file:{store}"),
                        progress=False)
    [run] = [p for p in store.glob("*/*") if (p / "metrics").is_dir()]
    logged = {line.split()[2]: float(line.split()[1]) for line in
              (run / "metrics" / "rollout" / "reward" / "mean").read_text().splitlines()}
    assert logged == {str(step): reward for step, reward in enumerate(summary.rewards, 1)}
    assert (run / "metrics" / "eval" / "eval" / "reward" / "mean_at_1").is_file()
    assert (run / "params" / "algorithm.algorithm_type").read_text() == "grpo"
    assert (run / "tags" / "mlflow.runName").read_text().endswith("_trainer")
    assert not (summary.run_dir / "monitor" / "tensorboard").exists()


@pytest.mark.parametrize("monitor, settings, pattern", [
    ("wandb", (), "wandb/offline-run-*/run-*.wandb"),  # offline through WANDB_MODE
    ("swanlab", ("trinity.monitor.monitor_args.mode=offline",), "swanlab/run-*/run-*.swanlab"),
])
def test_offline_trackers_get_the_metrics(tiny_model, tmp_path, monkeypatch, monitor, settings,
                                          pattern, request):
    """wandb and swanlab, offline, write their run files under the run's monitor/ folder,
    carrying Trinity's metric names."""
    tracker = pytest.importorskip(monitor)
    if monitor == "wandb":  # its service threads would otherwise live on into the
        request.addfinalizer(tracker.teardown)  # interpreter's exit
    monkeypatch.setenv("WANDB_MODE", "offline")
    summary = run_local(graph_for("Arith", tiny_model, tmp_path, *TWO_STEPS,
                                  f"monitor={monitor}", *settings), progress=False)
    [log] = (summary.run_dir / "monitor").glob(pattern)
    data = log.read_bytes()
    assert b"rollout/reward/mean" in data and b"eval/eval/reward/mean@1" in data


@pytest.mark.parametrize("monitor", ["wandb", "mlflow", "swanlab"])
def test_a_missing_tracker_is_one_line_before_any_work(tiny_model, tmp_path, monkeypatch,
                                                       monitor):
    monkeypatch.setitem(sys.modules, monitor, None)  # as if not installed
    graph = graph_for("Arith", tiny_model, tmp_path, f"monitor={monitor}")
    with pytest.raises(ConfigError) as caught:
        run_local(graph, progress=False)
    assert str(caught.value) == (f"monitor = '{monitor}': the {monitor} package is not "
                                 f"installed; pip install {monitor}, or set monitor = "
                                 f"\"tensorboard\"")
    assert not list(tmp_path.glob("*/*/global_step_*"))  # nothing trained
    assert not list(tmp_path.glob("*/*/metrics.jsonl"))  # and no empty run left


def test_swanlab_cloud_without_a_key_is_refused(tiny_model, tmp_path, monkeypatch):
    pytest.importorskip("swanlab")
    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"^monitor = 'swanlab' logs to SwanLab's cloud, "
                                          r"which needs the SWANLAB_API_KEY environment "
                                          r"variable; set it, or set trinity\.monitor\."
                                          r"monitor_args\.mode = \"offline\"$"):
        run_local(graph_for("Arith", tiny_model, tmp_path, "monitor=swanlab"), progress=False)


def test_a_nan_metric_is_null_in_metrics_jsonl_and_nan_when_read_back(tmp_path):
    """metrics.jsonl is strict JSON (a statistic of nothing, NaN, is written null), and the
    run's own readers take null back as NaN."""
    import math

    from tunedsl.backends.local.monitors import Monitor
    from tunedsl.backends.local.monitors import metric_rows as read_back
    from tunedsl.runs.writing import JsonLines

    written = []
    monitor = Monitor(JsonLines(tmp_path / "metrics.jsonl", label="metrics", then="-"),
                      lambda step, m: written.append(m), lambda: None)
    monitor.log(3, {"rollout/reward/mean": 0.5, "eval/eval/reward/mean@1": math.nan})
    monitor.close()
    assert (tmp_path / "metrics.jsonl").read_text() == (
        '{"step": 3, "rollout/reward/mean": 0.5, "eval/eval/reward/mean@1": null}\n')
    [row] = read_back(tmp_path)
    assert row["rollout/reward/mean"] == 0.5 and math.isnan(row["eval/eval/reward/mean@1"])
    assert written == [{"rollout/reward/mean": 0.5}]  # NaNs stay out of the monitor
