"""Shared by the tests of the local backend: the experiments of tests/fixtures/local/, run as
`tunedsl.run` hands them to the backend, and the weights a run leaves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tunedsl
from tunedsl.backends.local.metric_names import described
from tunedsl.backends.local.run import run_local as _run_local
from tunedsl.backends.trinity.config import to_yaml, trinity_config
from tunedsl.errors import RunInterrupted
from tunedsl.runs.rundir import run_name

REPO = Path(__file__).resolve().parents[1]
AGENTS = "tests.fixtures.local.agents"


def graph_for(name, tiny_model, tmp_path, *overrides):
    return tunedsl.load_experiment(f"{AGENTS}:{name}", overrides=[
        f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}", *overrides])


def run_local(graph, resume=None, **options):
    """The local backend, handed what tunedsl.run hands it; every metric the run logged
    is one the metrics reference describes (docs/reference/metrics.md)."""
    name = Path(resume).name if resume is not None else run_name(graph)
    summary = _run_local(graph, resume=resume, run_name=name,
                         trinity_yaml=to_yaml(trinity_config(graph, name=name)), **options)
    assert undescribed_metrics(summary.run_dir) == set()
    return summary


def undescribed_metrics(run_dir):
    """The metric names a run's metrics.jsonl holds that no row of the reference matches."""
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return {name for line in lines for name in json.loads(line) if not described(name)}


def weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def load_weights(folder):
    from transformers import AutoModelForCausalLM

    return weights(AutoModelForCausalLM.from_pretrained(folder, local_files_only=True))


def interrupted_and_resumed(model, tmp_path, *overrides, name="Arith", stop_at=2):
    """The ``name`` run straight through, and again stopped by Ctrl-C after step
    ``stop_at`` and resumed: ``(straight, resumed, the interruption)``."""
    straight = run_local(graph_for(name, model, tmp_path / "a", *overrides), progress=False)

    def stop_after_two(report):
        if report.step == stop_at:
            raise KeyboardInterrupt

    graph = graph_for(name, model, tmp_path / "b", *overrides)
    with pytest.raises(RunInterrupted) as caught:
        run_local(graph, progress=False, on_step_end=stop_after_two)
    run_dir = next((tmp_path / "b" / "tunedsl").iterdir())
    return straight, run_local(graph, resume=run_dir, progress=False), caught.value


SMALL_TWO_CALLS = ("train_dataset.total_steps=4", "algorithm.group_size=4",
                   "algorithm.batch_size=5")


def decorated_at(name):
    """The line of the decorator above ``async def name`` in the local agents fixture."""
    lines = (REPO / "tests/fixtures/local/agents.py").read_text().splitlines()
    return lines.index(next(line for line in lines if line.startswith(f"async def {name}(")))
