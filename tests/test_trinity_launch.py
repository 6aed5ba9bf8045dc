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

from .cli_support import cli  # noqa: E402

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
        from tunedsl.rollout.run import run_rollout
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


def test_user_code_resolves_in_an_actor_started_by_an_actor_from_elsewhere(tmp_path,
                                                                          ray_on_this_machine):
    """With the runtime_env run builds, a nested actor imports the experiment's functions
    while the driver's working directory is not the project folder."""
    import json

    config = trinity_config(tunedsl.load_experiment("tests.fixtures.multi_turn:MultiTurn"))
    env = ship(config)
    args = config["buffer"]["explorer_input"]["taskset"]["workflow_args"]
    script = tmp_path / "driver.py"
    script.write_text(ACTORS)
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with ray_on_this_machine():  # the driver starts a Ray instance of its own
        done = subprocess.run([sys.executable, str(script), json.dumps(env), json.dumps(args)],
                              cwd=tmp_path, env=clean, capture_output=True, text=True,
                              timeout=300)
    assert "REWARD 0.5" in done.stdout, done.stderr[-3000:]


def test_trinity_backend_on_a_machine_without_gpus_stops_before_asking_for_them(
        tmp_path, ray_on_this_machine):
    """Preflight passes; with no cluster running, the GPU count ends the run before a local
    Ray is started: exit 2, nothing left behind."""
    with ray_on_this_machine(alone=True):  # no other test's Ray instance to join
        done = cli("run", "examples.math_agent.experiment:MathAgent", "--backend", "trinity",
                   "--set", f"checkpoint_root_dir={tmp_path}")
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
    done = cli("run", "examples.math_agent.experiment:MathAgent", "--backend", "trinity",
               "--set", "model.lora.rank=8", "--set", f"checkpoint_root_dir={tmp_path}")
    assert (done.returncode, done.stderr.splitlines()[-1]) == (
        2, f"Error: {LORA_ON_TRINITY.format(local='--backend local')}")
    assert done.stderr.splitlines()[-1].endswith(
        "train LoRA with --backend local, or remove model.lora for Trinity")
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
    done = cli("run", "examples.math_agent.experiment:MathAgent", "--backend", "trinity",
               "--ray-address", f"127.0.0.1:{port}", "--set", f"checkpoint_root_dir={tmp_path}")
    assert done.returncode == 2, done.stderr[-3000:]
    assert [line for line in done.stderr.splitlines() if line.startswith("Error")] == [
        f"Error: --ray-address 127.0.0.1:{port}: no Ray cluster answers there (Connection "
        f"refused); start one with 'ray start --head', or give its address"]
    assert not any(tmp_path.iterdir())
    assert time.perf_counter() - started < 60  # ray.init alone retries for minutes


def test_a_ray_address_where_another_service_answers_is_one_line(tmp_path):
    """--ray-address at a port that answers but is not Ray's head (the dashboard's, say):
    ray.init waited there for ever; now exit 2 in seconds, one line, no run directory."""
    import threading
    import time
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{server.server_address[1]}"
    started = time.perf_counter()
    try:
        done = cli("run", "examples.math_agent.experiment:MathAgent", "--backend", "trinity",
                   "--ray-address", address, "--set", f"checkpoint_root_dir={tmp_path}")
    finally:
        server.shutdown()
    assert done.returncode == 2, done.stderr[-3000:]
    assert [line for line in done.stderr.splitlines() if line.startswith("Error")] == [
        f"Error: --ray-address {address}: no Ray cluster answers there (it answers, but not "
        f"as a Ray head: no gRPC handshake within 5 s; the head's port is 6379 unless 'ray "
        f"start --port' chose another (the dashboard's 8265 is not it)); start one with "
        f"'ray start --head', or give its address"]
    assert not any(tmp_path.iterdir())
    assert time.perf_counter() - started < 60


def test_ray_address_auto_is_the_cluster_running_here_never_a_new_one(monkeypatch):
    """Ray's own word "auto" (RAY_ADDRESS=auto, --ray-address auto) connects to the cluster
    running on this machine; with none, it says so rather than starting one."""
    from tunedsl.backends.trinity import launch

    def nothing_runs() -> str:
        raise ConnectionError("no cluster")

    monkeypatch.setattr(launch, "running_cluster", nothing_runs)
    with pytest.raises(ConfigError) as caught:
        launch.connect_ray("auto", {}, "ns", needed=0)
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    with pytest.raises(ConfigError) as from_environment:
        launch.connect_ray(None, {}, "ns", needed=0)
    assert (str(caught.value), str(from_environment.value)) == (
        "ray_address='auto': no Ray cluster runs on this machine; start one with 'ray start "
        "--head', or leave the address out and tunedsl starts one for the run",
        "RAY_ADDRESS auto: no Ray cluster runs on this machine; start one with 'ray start "
        "--head', or leave the address out and tunedsl starts one for the run")


def test_trinitys_validator_never_waits_on_a_terminal_prompt():
    """Where CUDA is visible and it cannot check the GPU memory, Trinity's validator asks
    "continue? [y/n]" on a terminal and waits 30 s (``GPUMemoryValidator._get_user_choice``,
    ``trinity/common/config_validator.py``). That function itself, on a real terminal
    with nobody typing: it waits out its timeout, except under `unattended`, which every
    tunedsl call of Trinity's validators runs in."""
    import time

    from trinity.common.config_validator import GPUMemoryValidator

    from tunedsl.backends.trinity.unattended import unattended

    primary, secondary = os.openpty()  # a real terminal on stdin, nobody typing
    terminal = os.fdopen(secondary, "r")
    stdin, sys.stdin = sys.stdin, terminal
    try:
        started = time.perf_counter()
        GPUMemoryValidator()._get_user_choice(ValueError("unchecked"), timeout=1.0)
        waited = time.perf_counter() - started
        started = time.perf_counter()
        with unattended():
            GPUMemoryValidator()._get_user_choice(ValueError("unchecked"), timeout=30.0)
        unattended_took = time.perf_counter() - started
    finally:
        sys.stdin = stdin
        terminal.close()
        os.close(primary)
    assert waited >= 1.0  # the prompt is real here: it waited for an answer
    assert unattended_took < 0.5


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
