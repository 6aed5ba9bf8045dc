"""Launching on Trinity over a user's Ray cluster with 8 (declared) GPUs, nothing patched:
``tunedsl run --backend trinity --ray-address ...`` fits the run to the cluster, writes its
YAML and hands it to Trinity's real launcher, which fails where the GPU work starts (no
vLLM, no CUDA on this machine), as a run on broken GPUs would. What is tested is what
tunedsl did up to there and how it reports the failure. (The run past that boundary is
tests/test_trinity_on_tinker.py's, through Trinity's Tinker mode.) The cluster lives as
long as the module's tests; they hold the machine's Ray lock alone."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

pytest.importorskip("trinity.common.config")
pytest.importorskip("ray")

import tunedsl  # noqa: E402

from .users_ray import on_users_cluster, users_ray_cluster  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MATH = "examples.math_agent.experiment:MathAgent"
WARMUP = ("warmup.algorithm_type=sft", "warmup.batch_size=8", "warmup.learning_rate=1e-5",
          f"warmup_dataset.path={REPO / 'examples/arith/conversations'}")


@pytest.fixture(scope="module")
def _eight_gpu_cluster(ray_on_this_machine):
    """``ray start --head --num-gpus=8``, as a user starts a cluster; its address."""
    with ray_on_this_machine(alone=True), \
            users_ray_cluster("--num-gpus=8", "--num-cpus=4") as address:
        yield address


@pytest.fixture
def cluster(_eight_gpu_cluster, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return _eight_gpu_cluster


def launch(cluster: str, root: Path, *overrides: str, resume: Path | None = None
           ) -> subprocess.CompletedProcess:
    """``tunedsl run`` of the math example on ``cluster``, run directory under ``root``."""
    args = ["run", MATH, "--backend", "trinity", "--ray-address", cluster,
            "--set", f"checkpoint_root_dir={root}"]
    for override in overrides:
        args += ["--set", override]
    if resume is not None:
        args += ["--resume", str(resume)]
    return subprocess.run([os.sys.executable, "-m", "tunedsl", *args], cwd=REPO,
                          env=on_users_cluster(), capture_output=True, text=True,
                          timeout=600)


def run_folder(root: Path) -> Path:
    [folder] = (root / "tunedsl-examples").iterdir()
    return folder


def last_line(done: subprocess.CompletedProcess) -> str:
    return done.stderr.strip().splitlines()[-1]


def test_a_run_splits_the_clusters_gpus_as_verl_can_train(cluster, tmp_path):
    """Ray reports 1 x 8 GPUs: the run's config.yaml names that cluster, 4 rollout engines (a
    4-GPU trainer divides 256 experiences) and step bounds for 4 engines; Trinity's
    launcher then fails where the engines start, exit 1 naming the logs."""
    done = launch(cluster, tmp_path)
    folder = run_folder(tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.count("ok  trinity: on 1 node x 8 GPUs, 4 rollout engines") == 1
    assert "on 1 node x 2 GPUs" not in done.stderr  # the preflight's fewest-GPU check
    written = yaml.safe_load((folder / "config.yaml").read_text())
    assert written["cluster"] == {"node_num": 1, "gpu_per_node": 8, "ray_address": cluster}
    assert written["explorer"]["rollout_model"]["engine_num"] == 4
    # A step's 256 rollouts run in waves of 4 engines x 16 runners: 4 waves of an hour and
    # 60 s, not the 16 waves of one engine the bounds were once computed for.
    assert written["explorer"]["max_timeout"] == 4 * 3660
    # Trinity's launcher raises where it imports vLLM to start the engines
    assert last_line(done) == (f"Error: the Trinity run failed (ModuleNotFoundError: No "
                               f"module named 'vllm'); logs in {folder / 'log'}")


def test_a_resumed_run_takes_the_explorer_back_to_the_trainers_checkpoint(cluster, tmp_path):
    """Stopped with the explorer at step 3 and the trainer's last checkpoint at step 1: the
    resume starts the explorer again after step 1 (no experience store: one trainer step a
    step), before Trinity's launcher starts."""
    launch(cluster, tmp_path)
    folder = run_folder(tmp_path)
    (folder / "explorer_meta.json").write_text(json.dumps(
        {"latest_iteration": 3, "taskset_states": [{"current_index": 96}]}))
    (folder / "global_step_1").mkdir()
    (folder / "latest_checkpointed_iteration.txt").write_text("1")
    done = launch(cluster, tmp_path, resume=folder)
    assert json.loads((folder / "explorer_meta.json").read_text()) == {
        "latest_iteration": 1, "taskset_states": [{"current_index": 32}]}
    assert "ok  resume: the trainer's last checkpoint is step 1 and the explorer had reached " \
           "step 3; the explorer goes back to step 1" in done.stderr


def test_a_failed_warmup_stops_the_run_before_rl_naming_the_jobs_logs(cluster, tmp_path):
    """The warm-up's trainer fails (no GPU): the run ends at stage 1, exit 1, naming the
    job's log folder, where a stage's actors write (not the stage's own log.save_dir); the
    RL stage never starts from the failed warm-up."""
    done = launch(cluster, tmp_path, *WARMUP)
    folder = run_folder(tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"stage 1/2 (sft_warmup): starting from Qwen/Qwen3-0.6B; its folder is " \
           f"{folder / 'sft_warmup'}" in done.stderr
    assert "stage 2/2 (rl): starting from" not in done.stderr
    assert last_line(done).startswith(
        "Error: stage 1/2 (sft_warmup) of the Trinity run failed (")
    assert last_line(done).endswith(f"; logs in {folder / 'log'}")


def test_a_resumed_run_skips_a_finished_warmup(cluster, tmp_path):
    """A warm-up Trinity's state manager records as finished, with the Hugging Face
    checkpoint verl leaves: the resume skips it and starts RL from that checkpoint."""
    from trinity.manager.state_manager import StateManager

    launch(cluster, tmp_path, *WARMUP)
    folder = run_folder(tmp_path)
    warmup = folder / "sft_warmup"
    (warmup / "global_step_2" / "actor" / "huggingface").mkdir(parents=True)
    (warmup / "latest_checkpointed_iteration.txt").write_text("2")
    StateManager(path=str(folder)).save_stage(1)
    done = launch(cluster, tmp_path, *WARMUP, resume=folder)
    assert "stage 1/2 (sft_warmup): finished before; skipped" in done.stderr
    assert f"stage 2/2 (rl): starting from {warmup / 'global_step_2/actor/huggingface'}" \
        in done.stderr
    assert done.returncode == 1  # where RL's engines start


def test_trinitys_runner_cannot_get_an_external_auxiliary_model(cluster, tmp_path,
                                                               monkeypatch):
    """Why tunedsl calls endpoint models itself: Trinity 0.6.0's WorkflowRunner asks
    Allocator.get_model for every auxiliary model, which looks up a Ray actor that an
    external engine never creates. (A canary: if Trinity changes this, this test says so.
    The endpoint tests are in tests/test_endpoints.py; this one needs the module's Ray.)"""
    import ray

    from . import trinity_runner  # noqa: F401 - puts the vLLM import shim in place if needed
    from .trinity_support import validate

    from trinity.common.models.allocator import Allocator  # noqa: I001 - after the shim

    graph = tunedsl.load_experiment("examples.llm_judge.experiment:LLMJudged", overrides=[
        "trinity.explorer.auxiliary_models.grader.engine_type=external"])
    config = validate(graph, tmp_path)
    external = config.explorer.auxiliary_models[0]
    assert (external.name, external.engine_type) == ("grader", "external")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    from ray._private.authentication.authentication_token_setup import _enable_token_auth

    _enable_token_auth()  # what setting RAY_AUTH_MODE before starting Python does
    ray.init(address=cluster, log_to_driver=False)
    try:
        with pytest.raises(ValueError, match="Failed to look up actor"):
            Allocator(config.explorer).get_model(external, "auxiliary_0", 0)
    finally:
        ray.shutdown()


def test_a_cluster_running_here_is_joined_with_its_token_authentication(cluster):
    """Found on this machine (no address given), a cluster that authenticates by token is
    joined as ray.init(address="auto") joins it, with nothing set in the environment."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    script = ("from tunedsl.backends.trinity.launch import connect_ray\n"
              "import ray\n"
              "connection = connect_ray(None, {}, 'probe', 0)\n"
              "print(connection.how, connection.head, ray.cluster_resources()['GPU'])\n"
              "connection.close('probe')\n")
    done = subprocess.run([os.sys.executable, "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "connected to the running Ray cluster None 8.0"
