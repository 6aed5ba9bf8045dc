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
  metrics Trinity's own aggregation makes of the runner's statuses.

Only the checkpoint folder (verl's, on a GPU) is made by hand. The runs sample at
temperature 0.7 (arith's own is 1.0; a training run on Trinity samples at top_p 1.0, the
only one its trainer scores, as tunedsl requires), so the log-prob check passes only if it
applies the run's temperature as vLLM does. A good run passes each stage; each fault fails
its stage with its exact line.
"""

from __future__ import annotations

import importlib.util
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
from trinity.utils.metrics import aggregate_metrics  # noqa: E402
from trinity.utils.monitor import TensorboardMonitor  # noqa: E402

import tunedsl  # noqa: E402
from tunedsl.backends.trinity.config import to_yaml, trinity_config  # noqa: E402

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
