"""Launching on Trinity over Ray, as far as a CPU machine goes: code shipping and preflight."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trinity.common.config")
ray = pytest.importorskip("ray")

import tunedsl  # noqa: E402
from tunedsl.api import choose_backend  # noqa: E402
from tunedsl.backends.trinity import launch  # noqa: E402
from tunedsl.backends.trinity.config import trinity_config  # noqa: E402
from tunedsl.errors import ConfigError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def test_module_experiments_ship_their_top_level_package():
    """A `pkg.mod:Attr` experiment ships `pkg` as a py_module; import strings stay."""
    config = trinity_config(tunedsl.load_experiment("tests.fixtures.multi_turn:MultiTurn"))
    env = launch._ship(config)
    assert env == {"py_modules": [str(REPO / "tests")]}
    assert config["buffer"]["explorer_input"]["taskset"]["workflow_args"]["workflow"] == \
        "tests.fixtures.multi_turn:two_turns"


def test_script_experiments_ship_their_folder_and_import_relative_to_it():
    """A `path/file.py:Attr` experiment ships its folder as working_dir, refs made relative."""
    graph = tunedsl.load_experiment(str(REPO / "tests/fixtures/good.py") + ":Good")
    config = trinity_config(graph)
    env = launch._ship(config)
    assert env == {"working_dir": str(REPO / "tests/fixtures")}
    args = config["buffer"]["explorer_input"]["taskset"]["workflow_args"]
    assert (args["workflow"], args["judge"], args["experiment"]) == (
        "good.py:answer", "good.py:exact", "good.py:Good")


ACTORS = '''
import asyncio, json, sys
import ray

@ray.remote
class Runner:
    def rollout(self, workflow_args, task):
        from tunedsl.backends.trinity.workflow import agent_from_workflow_args
        from tunedsl.runtime.rollout import run_rollout
        from tunedsl.testing import ScriptedModel
        agent = agent_from_workflow_args(workflow_args)
        result = asyncio.run(run_rollout(agent, task, ScriptedModel(lambda m: "2"),
                                         {"grader": ScriptedModel(lambda m: "yes")}))
        return result.reward

@ray.remote
class Starter:
    def start(self, workflow_args, task):
        runner = Runner.remote()
        return ray.get(runner.rollout.remote(workflow_args, task))

runtime_env, workflow_args = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ray.init(num_cpus=2, runtime_env=runtime_env, include_dashboard=False)
print("REWARD", ray.get(Starter.remote().start.remote(workflow_args, {"question": "1+1", "answer": "2"})))
ray.shutdown()
'''


def test_user_code_resolves_in_an_actor_started_by_an_actor_from_elsewhere(tmp_path):
    """With the runtime_env run builds, a nested actor imports the experiment's functions
    while the driver's working directory is not the project folder."""
    import json

    config = trinity_config(tunedsl.load_experiment("tests.fixtures.multi_turn:MultiTurn"))
    env = launch._ship(config)
    args = config["buffer"]["explorer_input"]["taskset"]["workflow_args"]
    script = tmp_path / "driver.py"
    script.write_text(ACTORS)
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(script), json.dumps(env), json.dumps(args)],
                          cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=300)
    assert "REWARD 0.5" in done.stdout, done.stderr[-3000:]


def test_trinity_backend_on_a_machine_without_gpus_stops_before_asking_for_them(tmp_path):
    """Preflight passes, Ray starts locally, and the GPU arithmetic ends the run: exit 2."""
    done = subprocess.run(
        [sys.executable, "-m", "tunedsl", "run", "examples.math_agent.experiment:MathAgent",
         "--backend", "trinity", "--set", f"checkpoint_root_dir={tmp_path}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1] == (
        "Error: the config needs 2 GPUs as Trinity-RFT counts them (each engine's data x "
        "tensor x pipeline parallel size, auxiliary engines, and the trainer's), the cluster "
        "has 0")
    assert "ok  rollout: workflow and judge ran" in done.stderr
    assert not list(tmp_path.rglob("config.yaml"))  # nothing ran, nothing left behind


def test_missing_trinity_gives_the_install_command(monkeypatch):
    """Without Trinity-RFT, auto picks local and --backend trinity says how to install it."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "trinity" else real(name, *a))
    assert choose_backend("auto") == (
        "local", 'Trinity-RFT is not installed (pip install "tunedsl[trinity]")')
    with pytest.raises(ConfigError) as caught:
        launch.require_trinity()
    assert str(caught.value) == ('Trinity-RFT is not installed; install it with: '
                                 'pip install "tunedsl[trinity]"')


def test_auto_picks_local_without_gpus():
    """On this CPU machine auto chooses the local backend and says why."""
    assert choose_backend("auto") == ("local", "no GPU is visible on this machine")
