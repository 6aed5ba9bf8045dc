"""Launching on Trinity over a running Ray cluster, as far as a CPU machine goes: one local
Ray instance with 8 declared GPUs, and Trinity's launcher replaced at the GPU boundary (what
it would run is recorded). In a module of its own: the instance lives as long as the module's
tests, and tests elsewhere must find no Ray running (tests/test_trinity_launch.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trinity.common.config")
ray = pytest.importorskip("ray")

import tunedsl  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def _one_ray_instance(ray_on_this_machine):
    """A local Ray instance of one node with 8 (declared) GPUs, started once for the
    module's launches: each start and shutdown of Ray costs seconds."""
    with ray_on_this_machine():
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
    # A step's 256 rollouts run in waves of 4 engines x 16 runners: 4 waves of an hour and
    # 60 s, not the 16 waves of one engine the bounds were once computed for.
    assert (written["explorer"]["max_timeout"], config.explorer.max_timeout) == (4 * 3660,) * 2
    assert config.buffer.trainer_input.experience_buffer.max_read_timeout == \
        2 * 3 * 4 * 3660 + 1800
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


def test_trinitys_runner_cannot_get_an_external_auxiliary_model(ray_with_gpus, tmp_path):
    """Why tunedsl calls endpoint models itself: Trinity 0.6.0's WorkflowRunner asks
    Allocator.get_model for every auxiliary model, which looks up a Ray actor that an
    external engine never creates. (A canary: if Trinity changes this, this test says so.
    The endpoint tests are in tests/test_endpoints.py; this one needs the module's Ray.)"""
    from . import trinity_runner  # noqa: F401 - puts the vLLM import shim in place if needed
    from .trinity_support import validate

    from trinity.common.models.allocator import Allocator  # noqa: I001 - after the shim

    graph = tunedsl.load_experiment("examples.llm_judge.experiment:LLMJudged", overrides=[
        "trinity.explorer.auxiliary_models.grader.engine_type=external"])
    config = validate(graph, tmp_path)
    external = config.explorer.auxiliary_models[0]
    assert (external.name, external.engine_type) == ("grader", "external")
    with pytest.raises(ValueError, match="Failed to look up actor"):
        Allocator(config.explorer).get_model(external, "auxiliary_0", 0)
