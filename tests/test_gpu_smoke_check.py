"""scripts/gpu_smoke_check.py judges run directories made by Trinity-RFT 0.6.0's own writers.

What a GPU run leaves behind is rebuilt on the CPU by the code that writes it there:

* ``config.yaml``: tunedsl's YAML for examples/arith, as its launcher writes it;
* ``log/<actor>.log``: Trinity's actor logger, in a subprocess with ``TRINITY_LOG_DIR``
  set (as Ray's runtime environment sets it), logging the lines Trinity's explorer and
  trainer log, and the error their loops swallow;
* ``buffer/explorer_output.db``: experiences made by Trinity's ``WorkflowRunner``
  running tunedsl's workflow for examples/arith against a loopback engine that serves
  the tiny model as vLLM would (its chat template; each token sampled from the model at
  the request's temperature and top_p; the log-prob after both, vLLM's
  ``processed_logprobs``), saved by Trinity's SQL writer as its pipeline saves its input;
* ``monitor/tensorboard``: Trinity's ``TensorboardMonitor``, with the rollout and eval
  metrics Trinity's own aggregation makes of the runner's statuses;
* ``trainer_meta.json``: Trinity's ``StateManager.save_trainer``;
* the interrupted run's output: tunedsl's CLI, handed the ``RunInterrupted`` the Trinity
  launch raises on Ctrl-C.

Only the checkpoint folders (verl's, on a GPU) are made by hand. The runs sample at
temperature 0.7 (arith's own is 1.0; a training run on Trinity samples at top_p 1.0, the
only one its trainer scores, as tunedsl requires), so the log-prob check passes only if it
applies the run's temperature as vLLM does. A good run passes each stage; each fault fails
its stage with its exact line.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trinity.common.config")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from aiohttp import web  # noqa: E402
from trinity.common.config import Config  # noqa: E402
from trinity.common.experience import Experience  # noqa: E402
from trinity.manager.state_manager import StateManager  # noqa: E402
from trinity.utils.metrics import aggregate_metrics  # noqa: E402
from trinity.utils.monitor import TensorboardMonitor  # noqa: E402

import tunedsl  # noqa: E402
from tunedsl import api, cli  # noqa: E402
from tunedsl.backends.trinity.config import to_yaml, trinity_config  # noqa: E402
from tunedsl.errors import RunInterrupted  # noqa: E402

from .trinity_runner import VLLMServer, run_eval, run_training_batch, serve_models  # noqa: E402
from .trinity_support import (  # noqa: E402
    log_as_trinity as trinity_log,
    pipeline_store,
    validate,
    write_with_trinity,
)

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_smoke_check.py"
spec = importlib.util.spec_from_file_location("gpu_smoke_check", SCRIPT)
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

STEPS, BATCH, GROUP, TEMPERATURE, TOP_P = 2, 3, 2, 0.7, 1.0
#: arith's max_tokens: the engine's own bound (``max_response_tokens``), which the trained
#: model's requests leave to it.
REPLY_TOKENS = 1
DB = "buffer/explorer_output.db"

#: What Trinity 0.6.0's explorer logs on a good run (explorer/explorer.py), in order.
EXPLORER_LINES = ["Finished initializing Explorer.", "All models are ready.",
                  "Rollout coordinator is ready.", "Explorer is ready.",
                  "Explore step 1 started.", "Explore step 2 started.",
                  "No more tasks to explore. Stop exploring."]
#: What its trainer logs on a good run of one step (trainer/trainer.py).
TRAINER_LINES = ["Trainer is ready.", "Sample data for step 1 started.",
                 "Training at step 1 started.", "Training at step 1 finished.",
                 "--------------------\n> Trainer finished.\n--------------------"]

def log_as_trinity(run_dir: Path, actor: str, lines: list[str], error: str = "") -> None:
    """Append to ``run_dir/log/<actor>.log`` through Trinity's own logger."""
    trinity_log(run_dir / "log", actor, lines, error)


def nucleus_logprobs(logits: Any, temperature: float, top_p: float) -> Any:
    """The log-probs vLLM samples from and reports: at ``temperature``, over the likeliest
    tokens, each kept while the probability ranked above it is below ``top_p``."""
    scaled = logits / temperature
    probs = scaled.softmax(-1)
    order = probs.argsort(descending=True)
    kept = order[probs[order].cumsum(0) - probs[order] < top_p]
    nucleus = torch.full_like(scaled, -math.inf)
    nucleus[kept] = scaled[kept]
    return nucleus.log_softmax(-1)


class TinyModelEngine(VLLMServer):
    """Answers chat completions as vLLM serving the tiny model answers Trinity's recording
    client (``return_token_ids``, ``logprobs``): the prompt is the model's chat template,
    each reply token is sampled from the model (seeded), its log-prob the processed one."""

    def __init__(self, folder: str) -> None:
        super().__init__(lambda messages: "")
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32).eval()
        self.generator = torch.Generator().manual_seed(0)

    def _sample(self, prompt: list[int], body: dict[str, Any]) -> dict[str, Any]:
        ids: list[int] = []
        logprobs: list[float] = []
        limit = body.get("max_tokens") or REPLY_TOKENS
        while len(ids) < limit and self.tokenizer.eos_token_id not in ids:
            with torch.no_grad():
                logits = self.model(torch.tensor([prompt + ids])).logits[0, -1]
            processed = nucleus_logprobs(logits, body["temperature"], body["top_p"])
            token = int(torch.multinomial(processed.exp(), 1, generator=self.generator))
            ids.append(token)
            logprobs.append(float(processed[token]))
        content = self.tokenizer.decode(ids, skip_special_tokens=True)
        return {"message": {"role": "assistant", "content": content}, "token_ids": ids,
                "logprobs": logprobs, "finish_reason": "length"}

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        text = self.tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True,
                                                  tokenize=False)
        prompt = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        choices = [self._sample(prompt, body) for _ in range(body.get("n") or 1)]
        return web.json_response({
            "id": "chatcmpl-vllm", "object": "chat.completion", "created": 0,
            "model": body["model"], "prompt_token_ids": prompt,
            "choices": [{"index": i, "message": c["message"], "finish_reason": c["finish_reason"],
                         "logprobs": self._logprobs(c, body), "token_ids": c["token_ids"]}
                        for i, c in enumerate(choices)],
            "usage": self._usage(prompt, choices)})


def save_experiences(run_dir: Path, experiences: list[Any]) -> None:
    """Write ``experiences`` where and as Trinity's experience pipeline saves its input
    (buffer/pipelines/experience_pipeline.py: table ``pipeline_input``)."""
    (run_dir / DB).unlink(missing_ok=True)
    write_with_trinity(pipeline_store(run_dir), experiences)


def monitor(run_dir: Path, role: str, steps: dict[int, dict[str, float]]) -> None:
    """Log each step's metrics with Trinity's TensorboardMonitor for ``role``."""
    config = Config()
    config.monitor.cache_dir = str(run_dir / "monitor")
    writer = TensorboardMonitor("tunedsl-examples", "", run_dir.name, role, config)
    for step, metrics in steps.items():
        writer.log(metrics, step)
    writer.close()


def copied(experience: Any) -> Any:
    """A copy of a Trinity experience, through its own serialization."""
    return Experience.deserialize(experience.serialize())


@dataclass
class ExploreRun:
    """The explore stage's run directory and what was written into it."""

    path: Path
    experiences: list[Any]
    rollout_metrics: dict[int, dict[str, float]]
    eval_metrics: dict[str, float]
    requests: list[dict[str, Any]]


def explore_experiences(config: Any, model: str) -> tuple[list[Any], dict, list]:
    """Each step's batch through Trinity's runner against the tiny model; the experiences,
    Trinity's rollout metrics per step (explorer/rollout_coordinator.py) and the requests."""
    experiences, metrics = [], {}
    with pytest.MonkeyPatch.context() as patch, TinyModelEngine(model) as engine:
        serve_models(patch, {"rollout": engine})
        for step in range(1, STEPS + 1):
            outcome = run_training_batch(config, step)
            experiences += outcome.experiences
            metrics[step] = aggregate_metrics(
                [status.metrics[0] for status in outcome.statuses if status.metrics],
                prefix="rollout")
        metrics[0] = run_eval(config)
    return experiences, metrics, engine.requests


@pytest.fixture(scope="module")
def explore_run(tiny_model, tmp_path_factory) -> ExploreRun:
    """A good explore stage: ``STEPS`` steps of ``BATCH`` tasks x ``GROUP`` runs."""
    graph = tunedsl.load_experiment("examples.arith.experiment:Arith", overrides=[
        f'model.model_path="{tiny_model}"', f"algorithm.batch_size={BATCH}",
        f"algorithm.group_size={GROUP}", f"train_dataset.total_steps={STEPS}",
        f"model.temperature={TEMPERATURE}", f"model.top_p={TOP_P}", "trinity.mode=explore"])
    run_dir = tmp_path_factory.mktemp("explore") / "tunedsl-examples" / "Arith-1"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(to_yaml(trinity_config(graph, name=run_dir.name)))
    config = validate(graph, tmp_path_factory.mktemp("validate"))
    experiences, metrics, requests = explore_experiences(config, tiny_model)
    save_experiences(run_dir, experiences)
    eval_metrics = metrics.pop(0)
    monitor(run_dir, "explorer", {0: eval_metrics, **metrics})
    log_as_trinity(run_dir, "explorer", EXPLORER_LINES)
    return ExploreRun(run_dir, experiences, metrics, eval_metrics, requests)


def variant(run_dir: Path, tmp_path: Path) -> Path:
    """A copy of a run directory to break."""
    copy = tmp_path / "tunedsl-examples" / run_dir.name
    shutil.copytree(run_dir, copy)
    return copy


def train_run(folder: Path, *, pg_loss: float = 0.0123, ppo_kl: float = 0.0004,
              checkpoint: bool = True, error: str = "") -> Path:
    """A train stage's run directory: both actors' logs, the trainer's step-1 metrics and
    (unless told) its checkpoint folder."""
    run_dir = folder / "tunedsl-examples" / "Arith-2"
    log_as_trinity(run_dir, "explorer", EXPLORER_LINES[:5])
    log_as_trinity(run_dir, "trainer", TRAINER_LINES, error)
    monitor(run_dir, "trainer", {1: {"actor/pg_loss": pg_loss, "actor/ppo_kl": ppo_kl,
                                     "actor/pg_clipfrac": 0.0}})
    if checkpoint:  # verl writes it (trainer/verl/trainer.py, save_checkpoint)
        (run_dir / "global_step_1" / "actor").mkdir(parents=True)
    return run_dir


# ---------------------------------------------------------------------------------------
# the good runs


def test_the_engine_was_asked_with_the_runs_sampling(explore_run):
    """The experiences were sampled at the YAML's temperature and top_p, one token each
    (the engine's own bound: the requests name no max_tokens)."""
    asked = {(r["temperature"], r["top_p"], r.get("max_tokens")) for r in explore_run.requests}
    assert asked == {(TEMPERATURE, TOP_P, None)}
    assert len(explore_run.experiences) == STEPS * BATCH * GROUP


def test_a_good_explore_stage_passes(explore_run):
    rewards = ", ".join(f"{explore_run.rollout_metrics[step]['rollout/reward/mean']:.4g}"
                        for step in range(1, STEPS + 1))
    evals = sum(name.startswith("eval/") for name in explore_run.eval_metrics)
    assert evals > 0
    assert check.verdict("explore", check.check_explore, explore_run.path) == (
        f"ok  explore: engine, API server and runners up; {STEPS * BATCH * GROUP} "
        f"experiences of steps 1-{STEPS} in {DB}; {evals} eval/ metrics at step 0; "
        f"rollout/reward/mean {rewards}", 0)


def test_good_experiences_pass_with_the_models_own_logprobs(explore_run, tiny_model):
    line, status = check.verdict("experiences", check.check_experiences, explore_run.path,
                                 Path(tiny_model))
    assert status == 0, line
    match = re.fullmatch(
        rf"ok  experiences: {STEPS * BATCH * GROUP} experiences: token ids, prompt lengths, "
        rf"action masks and one finite reward per rollout sane; log-probs within 0\.05 of "
        rf"the model's \(largest \|diff\| (\d\.\d{{4}}) at temperature 0\.7, top_p 1\)",
        line)
    assert match and float(match.group(1)) < 1e-4  # the same float32 model, recomputed


def test_a_good_train_stage_passes(tmp_path):
    run_dir = train_run(tmp_path)
    assert check.verdict("train", check.check_train, run_dir) == (
        "ok  train: actor/pg_loss 0.0123, actor/ppo_kl 0.0004 at step 1; checkpoint "
        "global_step_1", 0)


def test_the_lines_it_waits_for_are_the_ones_trinitys_explorer_logs():
    """Each line `CAME_UP` names is logged as such by Trinity 0.6.0's explorer."""
    source = Path(importlib.util.find_spec("trinity").origin).parent / "explorer/explorer.py"
    text = source.read_text()
    for line, _ in check.CAME_UP:
        assert f'self.logger.info("{line}")' in text


def test_the_command_line_prints_the_verdict_and_exits_with_it(tmp_path):
    good, bad = train_run(tmp_path / "good"), train_run(tmp_path / "bad", checkpoint=False)
    results = [subprocess.run([sys.executable, str(SCRIPT), "train", str(run_dir)],
                              capture_output=True, text=True, timeout=300)
               for run_dir in (good, bad)]
    assert [(r.returncode, r.stdout) for r in results] == [
        (0, "ok  train: actor/pg_loss 0.0123, actor/ppo_kl 0.0004 at step 1; checkpoint "
            "global_step_1\n"),
        (1, f"FAIL train: no checkpoint folder {bad / 'global_step_1'}\n")]


# ---------------------------------------------------------------------------------------
# explore faults


def test_an_error_the_explorer_swallowed_fails_explore(explore_run, tmp_path):
    run_dir = variant(explore_run.path, tmp_path)
    log_as_trinity(run_dir, "explorer", ["Explore step 3 started."], "reward is not a number")
    assert check.verdict("explore", check.check_explore, run_dir) == (
        f"FAIL explore: Trinity swallowed an error: {run_dir / 'log/explorer.log'}: "
        f"ValueError: reward is not a number", 1)


def test_an_explorer_whose_runners_never_came_up_fails_explore(explore_run, tmp_path):
    run_dir = variant(explore_run.path, tmp_path)
    shutil.rmtree(run_dir / "log")
    log_as_trinity(run_dir, "explorer", EXPLORER_LINES[:2])
    assert check.verdict("explore", check.check_explore, run_dir) == (
        f'FAIL explore: {run_dir / "log/explorer.log"} never says "Rollout coordinator is '
        f'ready." (the experience pipeline or the workflow runners did not come up)', 1)


def test_a_step_short_of_rollouts_fails_explore(explore_run, tmp_path):
    run_dir = variant(explore_run.path, tmp_path)
    save_experiences(run_dir, explore_run.experiences[:-1])
    assert check.verdict("explore", check.check_explore, run_dir) == (
        f"FAIL explore: step {STEPS} saved {BATCH * GROUP - 1} rollouts in {DB}, expected "
        f"{BATCH * GROUP} (batch_size {BATCH} x repeat_times {GROUP})", 1)


def test_no_experience_database_fails_explore(explore_run, tmp_path):
    run_dir = variant(explore_run.path, tmp_path)
    (run_dir / DB).unlink()
    assert check.verdict("explore", check.check_explore, run_dir) == (
        f"FAIL explore: no experience database {run_dir / DB} (Trinity's experience "
        f"pipeline saves the explorer's experiences there)", 1)


def test_no_eval_at_step_0_fails_explore(explore_run, tmp_path):
    run_dir = variant(explore_run.path, tmp_path)
    shutil.rmtree(run_dir / "monitor")
    monitor(run_dir, "explorer", explore_run.rollout_metrics)
    assert check.verdict("explore", check.check_explore, run_dir) == (
        "FAIL explore: tensorboard has no eval/ metric at step 0 (Trinity's explorer "
        "evaluates at startup)", 1)


# ---------------------------------------------------------------------------------------
# experience faults


def test_logprobs_that_disagree_with_the_model_fail_experiences(explore_run, tiny_model,
                                                               tmp_path):
    run_dir = variant(explore_run.path, tmp_path)
    experiences = [copied(experience) for experience in explore_run.experiences]
    wrong = experiences[4]
    given = float(wrong.logprobs[0])
    wrong.logprobs[0] += 0.5
    save_experiences(run_dir, experiences)
    eid = wrong.eid
    assert check.verdict("experiences", check.check_experiences, run_dir, Path(tiny_model)) == (
        f"FAIL experiences: step {eid.batch} task {eid.task} run {eid.run}: response token 0 "
        f"has log-prob {given + 0.5:.4f}, the model gives {given:.4f} at temperature 0.7, "
        f"top_p 1 (tolerance 0.05)", 1)


def test_logprobs_judged_at_another_temperature_fail_experiences(explore_run, tiny_model,
                                                                tmp_path):
    """The check applies the run's temperature: the same log-probs, said to be sampled at
    1.0, are not the model's."""
    run_dir = variant(explore_run.path, tmp_path)
    yaml = (run_dir / "config.yaml").read_text()
    (run_dir / "config.yaml").write_text(yaml.replace(f"temperature: {TEMPERATURE}",
                                                      "temperature: 1.0"))
    line, status = check.verdict("experiences", check.check_experiences, run_dir,
                                 Path(tiny_model))
    assert status == 1 and re.fullmatch(
        r"FAIL experiences: step \d task \d run \d: response token 0 has log-prob -\d\.\d{4}, "
        r"the model gives -\d\.\d{4} at temperature 1, top_p 1 \(tolerance 0\.05\)", line)


def test_two_rewards_in_one_run_fail_experiences(explore_run, tiny_model, tmp_path):
    run_dir = variant(explore_run.path, tmp_path)
    twin = copied(explore_run.experiences[0])
    twin.reward = 1.0 - explore_run.experiences[0].reward
    save_experiences(run_dir, [*explore_run.experiences, twin])
    eid = twin.eid
    assert check.verdict("experiences", check.check_experiences, run_dir, Path(tiny_model)) == (
        f"FAIL experiences: step {eid.batch} task {eid.task} run {eid.run} has 2 rewards "
        f"(0, 1); a rollout has exactly one", 1)


def test_a_prompt_length_past_the_tokens_fails_experiences(explore_run, tiny_model, tmp_path):
    run_dir = variant(explore_run.path, tmp_path)
    experiences = [copied(experience) for experience in explore_run.experiences]
    broken = experiences[1]
    broken.prompt_length = len(broken.tokens)
    save_experiences(run_dir, experiences)
    eid = broken.eid
    assert check.verdict("experiences", check.check_experiences, run_dir, Path(tiny_model)) == (
        f"FAIL experiences: step {eid.batch} task {eid.task} run {eid.run}: prompt_length "
        f"{len(broken.tokens)} of {len(broken.tokens)} tokens (needs 0 < prompt_length < "
        f"tokens)", 1)


# ---------------------------------------------------------------------------------------
# train faults


def test_an_error_the_trainer_swallowed_fails_train(tmp_path):
    run_dir = train_run(tmp_path, error="CUDA error: an illegal memory access")
    assert check.verdict("train", check.check_train, run_dir) == (
        f"FAIL train: Trinity swallowed an error: {run_dir / 'log/trainer.log'}: ValueError: "
        f"CUDA error: an illegal memory access", 1)


def test_a_nan_loss_fails_train(tmp_path):
    run_dir = train_run(tmp_path, pg_loss=math.nan)
    assert check.verdict("train", check.check_train, run_dir) == (
        "FAIL train: actor/pg_loss at step 1 is nan, not a finite number", 1)


def test_an_off_policy_first_step_fails_train(tmp_path):
    run_dir = train_run(tmp_path, ppo_kl=0.3)
    assert check.verdict("train", check.check_train, run_dir) == (
        "FAIL train: actor/ppo_kl at step 1 is 0.3, not within 0.05 of 0 (step 1 trains on "
        "rollouts of the same weights: the trainer's log-probs should be vLLM's)", 1)


def test_a_missing_checkpoint_fails_train(tmp_path):
    run_dir = train_run(tmp_path, checkpoint=False)
    assert check.verdict("train", check.check_train, run_dir) == (
        f"FAIL train: no checkpoint folder {run_dir / 'global_step_1'}", 1)


# ---------------------------------------------------------------------------------------
# stages d-f: a warm-up, the engine split, Ctrl-C and --resume

WARMUP_STEPS, RESUME_STEPS = 2, 4


def write_config(run_dir: Path, target: str, tiny_model: str, *overrides: str) -> None:
    """``run_dir/config.yaml`` as tunedsl's launcher writes it for ``target``."""
    graph = tunedsl.load_experiment(target, overrides=[f'model.model_path="{tiny_model}"',
                                                       *overrides])
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(to_yaml(trinity_config(graph, name=run_dir.name)))


def save_trainer(folder: Path, step: int) -> Path:
    """``folder/trainer_meta.json`` through Trinity's state manager (its constructor, which
    makes an actor logger, left out)."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = folder / "trainer_meta.json"
    StateManager.save_trainer(type("State", (), {"trainer_state_path": str(meta)})(), step, {})
    return meta


def trained_stage(folder: Path, steps: int, *, ppo_kl: float = 0.0004,
                  huggingface: bool = False) -> Path:
    """A stage folder whose trainer ran ``steps`` steps: step 1's metrics, a checkpoint of
    the last step (with its Hugging Face copy when told) and ``trainer_meta.json``."""
    monitor(folder, "trainer", {1: {"actor/pg_loss": 0.0123, "actor/ppo_kl": ppo_kl}})
    for step in {1, steps}:
        (folder / f"global_step_{step}" / "actor").mkdir(parents=True, exist_ok=True)
    last = folder / f"global_step_{steps}" / "actor" / "huggingface"
    if huggingface:
        last.mkdir()
    save_trainer(folder, steps)
    return last


def runner_initialized(model: Path | str) -> str:
    """What Trinity 0.6.0's workflow runner logs when it is made (explorer/
    workflow_runner.py)."""
    return (f"WorkflowRunner [explorer_runner_0](asynchronous) initialized:\n"
            f"  > rollout model: {model}\n  > auxiliary models: []")


def warmup_run(folder: Path, tiny_model: str, *, served: Path | None = None,
               huggingface: bool = True, ppo_kl: float = 0.0004) -> Path:
    """A warm-up stage's run directory: config.yaml with both stages, the warm-up trained
    ``WARMUP_STEPS`` steps (its last checkpoint with a Hugging Face copy unless told), the
    RL stage one step; its runners made for ``served`` (default: that copy)."""
    run_dir = folder / "tunedsl-examples" / "ArithWarmup-1"
    write_config(run_dir, "examples.arith.experiment:ArithWarmup", tiny_model,
                 f"warmup_dataset.total_steps={WARMUP_STEPS}", "train_dataset.total_steps=1")
    hf = trained_stage(run_dir / "sft_warmup", WARMUP_STEPS, huggingface=huggingface)
    trained_stage(run_dir / "rl", 1, ppo_kl=ppo_kl)
    log_as_trinity(run_dir, "trainer", TRAINER_LINES)
    log_as_trinity(run_dir, "explorer", EXPLORER_LINES[:5])
    log_as_trinity(run_dir, "explorer_runner_0", [runner_initialized(served or hf)])
    return run_dir


def split_run(folder: Path, tiny_model: str, *, gpus: int = 4, tensor_parallel: int = 2,
              engines: int = 1) -> Path:
    """A split stage's run directory, its config fitted as a run on ``gpus`` GPUs writes
    it (the cluster and the engine count), both actors up, the trainer's step 1."""
    run_dir = folder / "tunedsl-examples" / "Arith-3"
    write_config(run_dir, "examples.arith.experiment:Arith", tiny_model,
                 "trinity.mode=both", "train_dataset.total_steps=1",
                 "trinity.cluster.node_num=1", f"trinity.cluster.gpu_per_node={gpus}",
                 f"model.tensor_parallel_size={tensor_parallel}",
                 f"model.inference_engine_num={engines}")
    log_as_trinity(run_dir, "explorer", EXPLORER_LINES[:5])
    log_as_trinity(run_dir, "trainer", TRAINER_LINES)
    trained_stage(run_dir, 1)
    return run_dir


def interrupted_output(run_dir: Path, target: str = "examples.arith.experiment:Arith") -> str:
    """What `tunedsl run ... --backend trinity` prints on Ctrl-C: its CLI, handed what the
    Trinity launch raises (launch.py)."""
    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise RunInterrupted(f"interrupted; resume with --backend trinity --resume {run_dir}",
                             run_dir=str(run_dir))

    errors = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(errors):
        patch.setattr(api, "run", interrupted)
        assert cli.main(["run", target, "--backend", "trinity", "--no-progress", "--set",
                         f"train_dataset.total_steps={RESUME_STEPS}"]) == 130
    return errors.getvalue()


@dataclass
class ResumeRun:
    """The resume stage: its run directory and what the script leaves beside it."""

    path: Path
    output: Path
    meta: Path

    def verdict(self, interrupted: int = 130, resumed: int = 0) -> tuple[str, int]:
        return check.verdict("resume", check.check_resume, self.path, [interrupted, resumed],
                             self.output, self.meta)


def resume_run(folder: Path, tiny_model: str, *, stopped: int = 1,
               reached: int = RESUME_STEPS, output: str | None = None) -> ResumeRun:
    """A run of ``RESUME_STEPS`` steps stopped by Ctrl-C with its trainer's last checkpoint
    at ``stopped`` (the copy of trainer_meta.json the script keeps), then resumed to
    ``reached``."""
    run_dir = folder / "resume" / "tunedsl-examples" / "Arith-4"
    write_config(run_dir, "examples.arith.experiment:Arith", tiny_model,
                 f"train_dataset.total_steps={RESUME_STEPS}", "algorithm.save_interval_steps=1")
    meta = save_trainer(folder / "interrupted", stopped)
    out = folder / "resume-interrupted.out"
    out.write_text(f"run directory  {run_dir}\n"
                   + (interrupted_output(run_dir) if output is None else output))
    log_as_trinity(run_dir, "trainer", TRAINER_LINES)
    trained_stage(run_dir, reached)
    return ResumeRun(run_dir, out, meta)


def test_the_interrupted_line_is_the_clis(tmp_path):
    """The line the resume check looks for is the one tunedsl's CLI prints on Ctrl-C."""
    run_dir = tmp_path / "Arith-4"
    assert interrupted_output(run_dir) == (
        f"Error: interrupted; resume with: tunedsl run examples.arith.experiment:Arith "
        f"--backend trinity --set train_dataset.total_steps={RESUME_STEPS} --resume "
        f"{run_dir}\n")


def test_the_runner_line_is_the_one_trinitys_workflow_runner_logs():
    source = Path(importlib.util.find_spec("trinity").origin).parent / \
        "explorer/workflow_runner.py"
    assert 'f"  > rollout model: {self.config.explorer.rollout_model.model_path}\\n"' in \
        source.read_text()


def test_a_good_warmup_stage_passes(tmp_path, tiny_model):
    run_dir = warmup_run(tmp_path, tiny_model)
    assert check.verdict("warmup", check.check_warmup, run_dir) == (
        "ok  warmup: sft_warmup trained 2 steps, Hugging Face checkpoint "
        "global_step_2/actor/huggingface; rl served it and trained 1 step (actor/pg_loss "
        "0.0123, actor/ppo_kl 0.0004 at step 1; checkpoint global_step_1; last "
        "global_step_1)", 0)


def test_an_rl_stage_serving_the_base_model_fails_warmup(tmp_path, tiny_model):
    run_dir = warmup_run(tmp_path, tiny_model, served=Path(tiny_model))
    hf = run_dir / "sft_warmup/global_step_2/actor/huggingface"
    assert check.verdict("warmup", check.check_warmup, run_dir) == (
        f"FAIL warmup: the RL stage's workflow runners were made for "
        f"{Path(tiny_model).resolve()}, not the warm-up's last Hugging Face checkpoint {hf}",
        1)


def test_a_warmup_without_a_hugging_face_checkpoint_fails_warmup(tmp_path, tiny_model):
    run_dir = warmup_run(tmp_path, tiny_model, huggingface=False)
    assert check.verdict("warmup", check.check_warmup, run_dir) == (
        f"FAIL warmup: no Hugging Face checkpoint "
        f"{run_dir / 'sft_warmup/global_step_2/actor/huggingface'} (the RL stage starts "
        f"from the warm-up's last one)", 1)


def test_a_warmup_cut_short_fails_warmup(tmp_path, tiny_model):
    run_dir = warmup_run(tmp_path, tiny_model)
    save_trainer(run_dir / "sft_warmup", 1)
    assert check.verdict("warmup", check.check_warmup, run_dir) == (
        f"FAIL warmup: the trainer's last step in {run_dir / 'sft_warmup'} is 1 "
        f"(trainer_meta.json latest_iteration), not the planned 2", 1)


def test_an_rl_stage_that_never_ran_fails_warmup(tmp_path, tiny_model):
    run_dir = warmup_run(tmp_path, tiny_model)
    shutil.rmtree(run_dir / "rl")
    assert check.verdict("warmup", check.check_warmup, run_dir) == (
        f"FAIL warmup: no readable latest_iteration in {run_dir / 'rl/trainer_meta.json'} "
        f"(Trinity's trainer records each checkpoint's step there)", 1)


def test_rl_trained_on_other_weights_than_it_served_fails_warmup(tmp_path, tiny_model):
    run_dir = warmup_run(tmp_path, tiny_model, ppo_kl=0.9)
    assert check.verdict("warmup", check.check_warmup, run_dir) == (
        "FAIL warmup: actor/ppo_kl at step 1 is 0.9, not within 0.05 of 0 (step 1 trains on "
        "rollouts of the same weights: the trainer's log-probs should be vLLM's)", 1)


def test_a_run_without_stages_fails_warmup(tmp_path, tiny_model):
    run_dir = split_run(tmp_path, tiny_model)
    assert check.verdict("warmup", check.check_warmup, run_dir) == (
        "FAIL warmup: config.yaml has stages [], not a warm-up's ['sft_warmup', 'rl']", 1)


@pytest.mark.parametrize("gpus, trainer", [(3, 1), (4, 2)])
def test_a_good_split_stage_passes(tmp_path, tiny_model, gpus, trainer):
    run_dir = split_run(tmp_path, tiny_model, gpus=gpus)
    assert check.verdict("split", check.check_split, run_dir, 2, 1) == (
        f"ok  split: 1 rollout engine of tensor_parallel_size 2 and a {trainer}-GPU "
        f"trainer on {gpus} GPUs (config.yaml); engine, API server and runners up; "
        f"actor/pg_loss 0.0123, actor/ppo_kl 0.0004 at step 1; checkpoint global_step_1", 0)


def test_an_engine_on_one_gpu_fails_split(tmp_path, tiny_model):
    run_dir = split_run(tmp_path, tiny_model, tensor_parallel=1)
    assert check.verdict("split", check.check_split, run_dir, 2, 1) == (
        "FAIL split: config.yaml has explorer.rollout_model.tensor_parallel_size 1, "
        "expected 2", 1)


def test_another_engine_count_fails_split(tmp_path, tiny_model):
    run_dir = split_run(tmp_path, tiny_model, tensor_parallel=1, engines=2)
    assert check.verdict("split", check.check_split, run_dir, 1, 3) == (
        "FAIL split: config.yaml has explorer.rollout_model.engine_num 2, expected 3", 1)


def test_a_split_whose_trainer_never_trained_fails_split(tmp_path, tiny_model):
    run_dir = split_run(tmp_path, tiny_model)
    shutil.rmtree(run_dir / "monitor")
    assert check.verdict("split", check.check_split, run_dir, 2, 1) == (
        "FAIL split: tensorboard has no actor/pg_loss at step 1", 1)


def test_a_good_resume_stage_passes(tmp_path, tiny_model):
    run = resume_run(tmp_path, tiny_model)
    assert run.verdict() == (
        f"ok  resume: Ctrl-C at step 1 exited 130 with the resume line; --resume exited 0 "
        f"with the trainer at step {RESUME_STEPS} of {RESUME_STEPS} (trainer_meta.json); "
        f"checkpoint global_step_{RESUME_STEPS}", 0)


def test_a_run_that_ignored_ctrl_c_fails_resume(tmp_path, tiny_model):
    run = resume_run(tmp_path, tiny_model)
    assert run.verdict(interrupted=0) == (
        f"FAIL resume: the interrupted run exited 0, not 130 (it finished before Ctrl-C "
        f"reached it: give it more steps); its output is {run.output}", 1)


def test_an_interrupt_without_the_resume_line_fails_resume(tmp_path, tiny_model):
    run = resume_run(tmp_path, tiny_model, output="Error: interrupted\n")
    assert run.verdict() == (
        f'FAIL resume: {run.output} has no line "interrupted; resume with ... --backend '
        f'trinity ... --resume {run.path}"', 1)


def test_an_interrupt_after_the_last_step_fails_resume(tmp_path, tiny_model):
    run = resume_run(tmp_path, tiny_model, stopped=RESUME_STEPS)
    assert run.verdict() == (
        f"FAIL resume: Ctrl-C came when the trainer's last checkpoint was step "
        f"{RESUME_STEPS} ({run.meta}), not between step 1 and the planned {RESUME_STEPS}: "
        f"the resume had nothing to continue", 1)


def test_a_failed_resume_fails_resume(tmp_path, tiny_model):
    run = resume_run(tmp_path, tiny_model)
    assert run.verdict(resumed=1) == ("FAIL resume: the resumed run exited 1, not 0", 1)


def test_a_resume_that_stopped_short_fails_resume(tmp_path, tiny_model):
    run = resume_run(tmp_path, tiny_model, reached=RESUME_STEPS - 1)
    assert run.verdict() == (
        f"FAIL resume: the trainer's last step in {run.path} is {RESUME_STEPS - 1} "
        f"(trainer_meta.json latest_iteration), not the planned {RESUME_STEPS}", 1)


def test_the_command_line_checks_resume(tmp_path, tiny_model):
    run = resume_run(tmp_path, tiny_model)
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "resume", str(run.path), "--exit-codes", "130", "0",
         "--interrupted-output", str(run.output), "--interrupted-meta", str(run.meta)],
        capture_output=True, text=True, timeout=300)
    assert (result.returncode, result.stdout) == (0, run.verdict()[0] + "\n")
