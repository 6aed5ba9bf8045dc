"""The Python entry points (api.py) as a user calls them; `tune`'s graph is tested in
tests/test_graph.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import tunedsl  # noqa: E402

from .local_support import REPO  # noqa: E402


def test_tune_runs_agentscope_tuners_functional_api_on_the_local_backend(tiny_model, tmp_path):
    """tune(workflow_func=..., judge_func=...) trains, as AgentScope's tune() does."""
    from examples.arith.experiment import add, exact

    summary = tunedsl.tune(
        workflow_func=add, judge_func=exact,
        train_dataset=tunedsl.DatasetConfig(str(REPO / "examples/arith/data"), total_steps=3),
        model=tunedsl.TunerModelConfig(tiny_model, max_model_len=32, max_tokens=1),
        algorithm=tunedsl.AlgorithmConfig("grpo", group_size=4, batch_size=5),
        experiment_name="seed-style", backend="local",
        overrides=[f"checkpoint_root_dir={tmp_path}"],
    )
    assert summary.steps == 3 and summary.run_dir.name.startswith("seed-style-")
