"""Run directories (runtime/rundir.py): what a resume of one accepts."""

from __future__ import annotations

import pytest

import tunedsl
from tunedsl.errors import ConfigError


def test_resume_refuses_changed_settings_but_allows_a_longer_run(tmp_path):
    """Resuming with another learning rate is refused by name; more steps are fine."""
    pytest.importorskip("torch")
    from examples.arith.tiny_model import build_tiny_model

    model = build_tiny_model(str(tmp_path / "model"))
    base = [f"model.model_path={model}", f"checkpoint_root_dir={tmp_path}",
            "train_dataset.total_steps=2"]
    first = tunedsl.run("tests.fixtures.local.agents:Arith", backend="local", overrides=base,
                        progress=False)
    with pytest.raises(ConfigError) as caught:
        tunedsl.run("tests.fixtures.local.agents:Arith", backend="local", progress=False,
                    overrides=[*base, "algorithm.learning_rate=0.5"], resume=first.run_dir)
    assert ("the run was started with other settings: algorithm.learning_rate (run: 0.001, "
            "now: 0.5)") in str(caught.value)
    longer = tunedsl.run("tests.fixtures.local.agents:Arith", backend="local", progress=False,
                         overrides=[*base[:-1], "train_dataset.total_steps=4"],
                         resume=first.run_dir)
    assert longer.steps == 4 and longer.run_dir == first.run_dir
