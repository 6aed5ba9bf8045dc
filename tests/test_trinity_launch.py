"""Launching on Trinity over Ray, as far as a CPU machine goes: code shipping and preflight."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trinity.common.config")
ray = pytest.importorskip("ray")

import tunedsl  # noqa: E402
from tunedsl.api import choose_backend  # noqa: E402
from tunedsl.backends.trinity.checks import LORA_ON_TRINITY, check_installed  # noqa: E402
from tunedsl.backends.trinity.config import trinity_config  # noqa: E402
from tunedsl.backends.trinity.shipping import EXCLUDES, ship  # noqa: E402
from tunedsl.errors import ConfigError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def test_module_experiments_ship_their_top_level_package():
    """A `pkg.mod:Attr` experiment ships `pkg` as a py_module; import strings stay."""
    config = trinity_config(tunedsl.load_experiment("tests.fixtures.multi_turn:MultiTurn"))
    env = ship(config)
    assert env == {"py_modules": [str(REPO / "tests")], "excludes": sorted(EXCLUDES)}
    assert config["buffer"]["explorer_input"]["taskset"]["workflow_args"]["workflow"] == \
        "tests.fixtures.multi_turn:two_turns"


def test_script_experiments_ship_their_folder_and_import_relative_to_it():
    """A `path/file.py:Attr` experiment ships its folder as working_dir, refs made relative."""
    graph = tunedsl.load_experiment(str(REPO / "tests/fixtures/good.py") + ":Good")
    config = trinity_config(graph)
    env = ship(config)
    assert env == {"working_dir": str(REPO / "tests/fixtures"), "excludes": sorted(EXCLUDES)}
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
    env = ship(config)
    args = config["buffer"]["explorer_input"]["taskset"]["workflow_args"]
    script = tmp_path / "driver.py"
    script.write_text(ACTORS)
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(script), json.dumps(env), json.dumps(args)],
                          cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=300)
    assert "REWARD 0.5" in done.stdout, done.stderr[-3000:]


def test_trinity_backend_on_a_machine_without_gpus_stops_before_asking_for_them(tmp_path):
    """Preflight passes; with no cluster running, the GPU count ends the run before a local
    Ray is started: exit 2, nothing left behind."""
    done = subprocess.run(
        [sys.executable, "-m", "tunedsl", "run", "examples.math_agent.experiment:MathAgent",
         "--backend", "trinity", "--set", f"checkpoint_root_dir={tmp_path}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1] == (
        "Error: the config needs 2 GPUs as Trinity-RFT counts them (each engine's data x "
        "tensor x pipeline parallel size, auxiliary engines, and the trainer's), this machine "
        "has 0 and no Ray cluster is running")
    assert "local Ray instance" not in done.stderr and not any(tmp_path.iterdir())
    assert "ok  rollout: workflow and judge ran" in done.stderr
    assert not list(tmp_path.rglob("config.yaml"))  # nothing ran, nothing left behind


def test_lora_on_trinity_is_refused_before_anything_starts(tmp_path):
    """Trinity 0.6.0's OpenAI API server (the one tunedsl's workflows call) serves no LoRA
    adapter, so rollouts would sample the base model: refused, exit 2, nothing left."""
    done = subprocess.run(
        [sys.executable, "-m", "tunedsl", "run", "examples.math_agent.experiment:MathAgent",
         "--backend", "trinity", "--set", "model.lora.rank=8",
         "--set", f"checkpoint_root_dir={tmp_path}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr.splitlines()[-1]) == (
        2, f"Error: {LORA_ON_TRINITY}")
    assert not any(tmp_path.iterdir())


def test_missing_trinity_gives_the_install_command(monkeypatch):
    """Without Trinity-RFT, auto picks local and --backend trinity says how to install it."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "trinity" else real(name, *a))
    assert choose_backend("auto") == (
        "local", 'Trinity-RFT is not installed (pip install "tunedsl[trinity]")')
    assert check_installed(None) == ['Trinity-RFT is not installed; install it with: '
                                     'pip install "tunedsl[trinity]"']


def test_auto_picks_local_without_gpus():
    """On this CPU machine auto chooses the local backend and says why."""
    assert choose_backend("auto") == ("local", "no GPU is visible on this machine")


def test_an_unreachable_ray_address_is_one_line_and_leaves_nothing(tmp_path):
    """Nothing listens at --ray-address: exit 2 at once, one line, no run directory."""
    import socket
    import time

    with socket.socket() as probe:  # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tunedsl", "run", "examples.math_agent.experiment:MathAgent",
         "--backend", "trinity", "--ray-address", f"127.0.0.1:{port}",
         "--set", f"checkpoint_root_dir={tmp_path}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert [line for line in done.stderr.splitlines() if line.startswith("Error")] == [
        f"Error: --ray-address 127.0.0.1:{port}: no Ray cluster answers there (Connection "
        f"refused); start one with 'ray start --head', or give its address"]
    assert not any(tmp_path.iterdir())
    assert time.perf_counter() - started < 60  # ray.init alone retries for minutes


def test_trinitys_validator_never_waits_on_a_terminal_prompt(monkeypatch):
    """Where CUDA is visible, Trinity's GPU memory check asks "continue? [y/n]" on a terminal
    and waits 30 s when it cannot check; tunedsl's validation goes on at once."""
    import time

    import torch

    from tunedsl.backends.trinity.validate import validate_with_trinity

    primary, secondary = os.openpty()  # a real terminal on stdin, nobody typing
    terminal = os.fdopen(secondary, "r")
    monkeypatch.setattr(sys, "stdin", terminal)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: type("Device", (), {"total_memory": 80 * 2**30})())
    # The check runs for verl's legacy trainer; it cannot load the hub model offline, so it
    # asks whether to continue.
    monkeypatch.setattr("trinity.trainer.is_verl_legacy", lambda: True)
    config = trinity_config(tunedsl.load_experiment("examples.math_agent.experiment:MathAgent"))
    started = time.perf_counter()
    try:
        line, _split = validate_with_trinity(config)
    finally:
        terminal.close()
        os.close(primary)
    assert time.perf_counter() - started < 15
    assert line.startswith("trinity: Trinity-RFT accepts the config")


def test_a_package_over_rays_upload_limit_is_refused_naming_its_biggest_files(
        tmp_path, monkeypatch):
    """Packed as Ray packs it (excludes and .gitignore honoured), an oversized folder is
    refused before launch with its biggest files; ignoring the big file lets it through."""
    from tunedsl.backends.trinity.shipping import check_upload_size

    monkeypatch.setattr("ray._private.runtime_env.packaging.GCS_STORAGE_MAX_SIZE", 200_000)
    (tmp_path / "agent.py").write_text("x = 1\n")
    (tmp_path / "data.bin").write_bytes(os.urandom(300_000))  # random: does not compress
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "torch.so").write_bytes(os.urandom(400_000))  # excluded
    env = {"working_dir": str(tmp_path), "excludes": sorted(EXCLUDES)}
    with pytest.raises(ConfigError) as info:
        check_upload_size(env)
    assert re.fullmatch(
        re.escape(f"{tmp_path}: the code shipped to the Ray workers packs to ") + r"0\.\d MiB"
        + re.escape(", over Ray's upload limit of 0.2 MiB; its biggest files: "
                    f"{tmp_path / 'data.bin'} (0.3 MiB), {tmp_path / 'agent.py'} (0.0 MiB); "
                    "list what the workers do not need in .gitignore or .rayignore"),
        str(info.value))
    (tmp_path / ".gitignore").write_text("data.bin\n")
    check_upload_size(env)  # fits now


def test_resuming_a_moved_trinity_run_points_trinity_at_that_folder(tmp_path):
    """Trinity continues the folder given to --resume, wherever it has moved."""
    pytest.importorskip("trinity.common.config")
    from tunedsl.backends.trinity.launch import relocate

    config = {"project": "p", "group": "", "name": "x", "checkpoint_root_dir": "checkpoints"}
    relocate(config, tmp_path / "moved" / "proj" / "Arith-20250101000000")
    assert config == {"project": "proj", "group": "", "name": "Arith-20250101000000",
                      "checkpoint_root_dir": str(tmp_path / "moved")}


@pytest.fixture(scope="module")
def _one_ray_instance():
    """A local Ray instance of one node with 8 (declared) GPUs, started once for the
    module's launches: each start and shutdown of Ray costs seconds."""
    ray.init(num_cpus=2, num_gpus=8, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def ray_with_gpus(_one_ray_instance, monkeypatch):
    """The module's Ray instance, running; ``run_trinity`` shuts Ray down when it ends (as
    it does after every launch), which here leaves it running for the next launch."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "shutdown", lambda *args, **kwargs: None)


def launched_config(monkeypatch, tmp_path, *overrides, resume=None):
    """``run_trinity`` on a Ray cluster of one node with 8 (declared) GPUs (the
    ``ray_with_gpus`` fixture), up to Trinity's launcher, which needs real GPUs: the config
    Trinity would have been given."""
    import trinity.cli.launcher

    from tunedsl.backends.trinity.launch import run_trinity

    handed = {}

    def run_stage(config):  # the GPU boundary: record what Trinity's launcher gets
        handed["config"] = config
        return trinity.cli.launcher.StageStatus(stage="both", success=True, total_time_sec=0.0)

    monkeypatch.setattr(trinity.cli.launcher, "run_stage", run_stage)
    graph = tunedsl.load_experiment("examples.math_agent.experiment:MathAgent", overrides=[
        f"checkpoint_root_dir={tmp_path}", *overrides])
    summary = run_trinity(graph, resume=resume)
    return handed["config"], summary.run_dir


def test_a_run_splits_the_clusters_gpus_as_verl_can_train(ray_with_gpus, monkeypatch, tmp_path,
                                                          capsys):
    """Ray reports 1 x 8 GPUs: the run's config.yaml and the config Trinity's launcher gets
    name that cluster and 4 rollout engines (a 4-GPU trainer divides 256 experiences)."""
    config, run_dir = launched_config(monkeypatch, tmp_path)
    assert (config.cluster.node_num, config.cluster.gpu_per_node) == (1, 8)
    assert (config.explorer.rollout_model.engine_num, config.cluster.trainer_gpu_num) == (4, 4)
    import yaml

    written = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert written["cluster"] == {"node_num": 1, "gpu_per_node": 8}
    assert written["explorer"]["rollout_model"]["engine_num"] == 4
    said = capsys.readouterr().err
    assert said.count("ok  trinity: on 1 node x 8 GPUs, 4 rollout engines") == 1
    assert "on 1 node x 2 GPUs" not in said  # the preflight's fewest-GPU check says no split


def test_a_resumed_run_takes_the_explorer_back_to_the_trainers_checkpoint(
        ray_with_gpus, monkeypatch, tmp_path, capsys):
    """Stopped with the explorer at step 3 and the trainer's last checkpoint at step 1: the
    resume starts the explorer again after step 1 (no experience store: one trainer step a
    step)."""
    import json

    _, run_dir = launched_config(monkeypatch, tmp_path)
    (run_dir / "explorer_meta.json").write_text(json.dumps(
        {"latest_iteration": 3, "taskset_states": [{"current_index": 96}]}))
    (run_dir / "global_step_1").mkdir()
    (run_dir / "latest_checkpointed_iteration.txt").write_text("1")
    capsys.readouterr()
    launched_config(monkeypatch, tmp_path, resume=run_dir)
    assert json.loads((run_dir / "explorer_meta.json").read_text()) == {
        "latest_iteration": 1, "taskset_states": [{"current_index": 32}]}
    assert "ok  resume: the trainer's last checkpoint is step 1 and the explorer had reached " \
           "step 3; the explorer goes back to step 1" in capsys.readouterr().err


WARMUP = ("warmup.algorithm_type=sft", "warmup.batch_size=8", "warmup.learning_rate=1e-5",
          f"warmup_dataset.path={REPO / 'examples/arith/conversations'}")


def launched_stages(monkeypatch, tmp_path, *, resume=None, fail=None):
    """``run_trinity`` of the math example with an SFT warm-up, up to Trinity's launcher:
    the configs each stage is run with (on the ``ray_with_gpus`` fixture's Ray). Each stage
    leaves what verl's trainer leaves (its tracker file and a Hugging Face checkpoint),
    except a stage named in ``fail``, which Trinity's launcher reports failed."""
    import trinity.cli.launcher

    from tunedsl.backends.trinity.launch import run_trinity

    handed = []

    def run_stage(config):  # the GPU boundary
        handed.append(config)
        folder = Path(config.checkpoint_job_dir)
        if config.name.endswith(f"/{fail}"):
            return trinity.cli.launcher.StageStatus(
                stage=config.mode, success=False, total_time_sec=1.0,
                error=trinity.cli.launcher.StageError(type_name="RuntimeError",
                                                      message="out of memory",
                                                      traceback_text=""))
        (folder / "global_step_2" / "actor" / "huggingface").mkdir(parents=True)
        (folder / "latest_checkpointed_iteration.txt").write_text("2")
        return trinity.cli.launcher.StageStatus(stage=config.mode, success=True,
                                                total_time_sec=1.0)

    monkeypatch.setattr(trinity.cli.launcher, "run_stage", run_stage)
    graph = tunedsl.load_experiment("examples.math_agent.experiment:MathAgent", overrides=[
        f"checkpoint_root_dir={tmp_path}", *WARMUP])
    return handed, lambda: run_trinity(graph, resume=resume)


def test_a_warmup_runs_as_trinitys_stages_the_second_from_the_firsts_checkpoint(
        ray_with_gpus, monkeypatch, tmp_path, capsys):
    handed, run = launched_stages(monkeypatch, tmp_path)
    run_dir = run().run_dir
    warmup, rl = handed
    assert (warmup.name, warmup.mode, warmup.algorithm.algorithm_type) == (
        f"{run_dir.name}/sft_warmup", "train", "sft")
    assert (warmup.buffer.train_batch_size, warmup.cluster.trainer_gpu_num) == (8, 8)
    assert warmup.model.model_path == "Qwen/Qwen3-0.6B"
    assert (rl.name, rl.mode, rl.algorithm.algorithm_type) == (
        f"{run_dir.name}/rl", "both", "multi_step_grpo")
    assert rl.model.model_path == str(run_dir / "sft_warmup/global_step_2/actor/huggingface")
    said = capsys.readouterr().err
    assert f"stage 1/2 (sft_warmup): starting from Qwen/Qwen3-0.6B; its folder is " \
           f"{run_dir / 'sft_warmup'}" in said
    assert "stage 2/2 (rl): starting from " in said


def test_a_failed_warmup_stops_the_run_and_resume_runs_it_again(ray_with_gpus, monkeypatch,
                                                                tmp_path):
    from tunedsl.errors import RunError

    handed, run = launched_stages(monkeypatch, tmp_path, fail="sft_warmup")
    with pytest.raises(RunError) as info:
        run()
    [warmup] = handed
    assert str(info.value) == (
        f"stage 1/2 (sft_warmup) of the Trinity run failed (RuntimeError: out of memory); "
        f"logs in {warmup.log.save_dir}")
    run_dir = Path(warmup.checkpoint_job_dir).parent
    handed, run = launched_stages(monkeypatch, tmp_path, resume=run_dir)
    run()
    assert [config.name.rsplit("/", 1)[1] for config in handed] == ["sft_warmup", "rl"]


def test_a_resumed_run_skips_a_finished_warmup(ray_with_gpus, monkeypatch, tmp_path):
    from tunedsl.errors import RunError

    handed, run = launched_stages(monkeypatch, tmp_path, fail="rl")
    with pytest.raises(RunError, match=r"^stage 2/2 \(rl\) of the Trinity run failed"):
        run()
    run_dir = Path(handed[0].checkpoint_job_dir).parent
    handed, run = launched_stages(monkeypatch, tmp_path, resume=run_dir)
    run()
    [rl] = handed
    assert rl.name.endswith("/rl")
    assert rl.model.model_path == str(run_dir / "sft_warmup/global_step_2/actor/huggingface")
