"""Verdicts on the stages of scripts/gpu_smoke.sh, read from what Trinity-RFT wrote.

    python scripts/gpu_smoke_check.py explore RUN_DIR
    python scripts/gpu_smoke_check.py experiences RUN_DIR --model MODEL_DIR
    python scripts/gpu_smoke_check.py train RUN_DIR
    python scripts/gpu_smoke_check.py warmup RUN_DIR
    python scripts/gpu_smoke_check.py split RUN_DIR --tensor-parallel 2 --engines 1
    python scripts/gpu_smoke_check.py resume RUN_DIR --exit-codes 130 0 \
        --interrupted-output FILE --interrupted-meta FILE

Each prints one line, ``ok  <stage>: ...`` (exit 0) or ``FAIL <stage>: <why>`` (exit 1).
No verdict rests on an exit status: Trinity 0.6.0's explorer and trainer loops log an
error and stop, and its launcher still reports success (``run_logs``). What each stage
reads, all of it written by Trinity 0.6.0 (paths in the ``trinity`` package):

* ``log/explorer.log``, ``log/trainer.log``: each actor's logger (``utils/log.py``); the
  explorer logs "All models are ready." once its vLLM engines answer their OpenAI API
  server's ``/health`` (``explorer/explorer.py`` ``prepare``, ``common/models/
  allocator.py``), "Rollout coordinator is ready." once the experience pipeline and the
  scheduler's workflow runners are up, then "Explorer is ready.";
* ``buffer/explorer_output.db``: the experience pipeline's input, saved before its
  operators run, in modes explore, both and colocate alike (``buffer/pipelines/
  experience_pipeline.py``, ``explorer/rollout_coordinator.py``);
* ``monitor/tensorboard/<role>``: the ``TensorboardMonitor`` (``utils/monitor.py``): the
  step-0 eval (``eval/<taskset>/...``, ``explorer.eval_on_startup``), ``rollout/reward/
  mean`` per explored step, and the trainer's ``actor/pg_loss`` and ``actor/ppo_kl``
  (``trainer/verl/losses.py``) at its step;
* ``global_step_N/``: the verl trainer's checkpoint (``trainer/verl/trainer.py``), with
  ``actor/huggingface`` in a warm-up's last one (``Config.__iter__`` sets
  ``save_hf_checkpoint`` to ``last`` for every stage); ``trainer_meta.json``: the step of
  the trainer's last checkpoint, ``latest_iteration`` (``manager/state_manager.py``);
* ``<run>/sft_warmup/``, ``<run>/rl/``: a warm-up run's stages, each a run folder of its
  own (``Config.__iter__`` names the stage ``<name>/<stage>``), their actors logging in
  ``<run>/log``; ``log/explorer_runner_N.log``: each workflow runner's "> rollout model:
  <path>" (``explorer/workflow_runner.py``), the model the RL stage's engines serve, which
  Trinity's launcher sets to the warm-up's last Hugging Face checkpoint.

The files are read with tunedsl's own readers: the view's config, experience and
TensorBoard readers and the Trinity backend's log reader.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trinity.common.constants import EXPLORER_NAME, TRAINER_NAME  # noqa: E402

from tunedsl.backends.trinity.cluster import counted  # noqa: E402
from tunedsl.backends.trinity.config import RL_STAGE, WARMUP_STAGE  # noqa: E402
from tunedsl.backends.trinity.run_logs import actor_logs, swallowed_error  # noqa: E402
from tunedsl.errors import DatasetError  # noqa: E402
from tunedsl.runs.run_files import (  # noqa: E402
    CONFIG_YAML,
    EXPLORER_OUTPUT_DB,
    LOG_DIR,
    TENSORBOARD_DIR,
    step_dir_name,
)
from tunedsl.view.tensorboard import read_tensorboard  # noqa: E402
from tunedsl.trinity_runs.config import config_value, read_config  # noqa: E402
from tunedsl.trinity_runs.experiences import db_experiences  # noqa: E402

#: What the explorer logs as it comes up (explorer/explorer.py, ``prepare``), in order,
#: with what is missing when a line never comes.
CAME_UP = (
    ("All models are ready.", "the vLLM engine or its OpenAI API server did not come up"),
    ("Rollout coordinator is ready.", "the experience pipeline or the workflow runners "
                                      "did not come up"),
    ("Explorer is ready.", "the explorer did not finish preparing"),
)
#: How far (nats) a saved log-prob may be from the tiny model's own, recomputed in
#: float32 on the CPU. vLLM runs the model in bfloat16 (Trinity's default ``dtype``):
#: on the tiny model that moves log-probs by 0.004 at most (measured on a CPU), while
#: the log-probs of one position spread over about 1 nat, so a wrong token, position,
#: temperature or top_p lands far outside. ``actor/ppo_kl`` at step 1, the mean of
#: (vLLM's - the trainer's) log-prob per token, is held to the same bound.
LOGPROB_TOLERANCE = 0.05
#: The step the train stage trains; it samples with the weights it starts from, so
#: its rollouts are on-policy and ``actor/ppo_kl`` is near 0.
TRAIN_STEP = 1
#: Below this temperature vLLM samples greedily and returns unscaled log-probs.
GREEDY_TEMPERATURE = 1e-5
#: Where Trinity's state manager records the trainer's last checkpointed step.
TRAINER_META = f"{TRAINER_NAME}_meta.json"
#: How each workflow runner names the model it was made for (explorer/workflow_runner.py;
#: a line of a message whose lines Trinity's log formatter each prefixes).
ROLLOUT_MODEL = "> rollout model: "
#: What `tunedsl run` prints when Ctrl-C stopped a Trinity run (launch.py; the CLI spells
#: out the whole command), and the exit status it then has.
INTERRUPTED = "interrupted; resume with"
INTERRUPTED_EXIT = 130


class Failure(Exception):
    """Why a stage fails: the text after ``FAIL <stage>: ``."""


def verdict(stage: str, check: Callable[..., str], *args: Any) -> tuple[str, int]:
    """The stage's one line and exit status: ``check`` returns the ok text or raises
    `Failure`."""
    try:
        return f"ok  {stage}: {check(*args)}", 0
    except Failure as failure:
        return f"FAIL {stage}: {failure}", 1


# ---------------------------------------------------------------------------------------
# reading the run directory


def run_config(run_dir: Path) -> dict[str, Any]:
    """The run's ``config.yaml`` (tunedsl writes it before the run starts)."""
    config = read_config(run_dir / CONFIG_YAML)
    if not isinstance(config, dict):
        raise Failure(f"no readable {run_dir / CONFIG_YAML} (is {run_dir} a run directory?)")
    return config


def setting(config: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """A config value, else ``default``; a Failure when neither exists."""
    value = config_value(config, dotted)
    if value is None and default is None:
        raise Failure(f"{CONFIG_YAML} sets no {dotted}")
    return default if value is None else value


def actor_log(run_dir: Path, actor: str) -> Path:
    """The actor's log file (in a folder per node IP when Trinity makes those)."""
    found = [path for path in actor_logs(run_dir / LOG_DIR, [actor]) if path.is_file()]
    if not found:
        raise Failure(f"no {actor} log in {run_dir / LOG_DIR} (the {actor} never started)")
    return found[0]


def no_swallowed_error(run_dir: Path) -> None:
    """Neither loop logged an error it then swallowed (the run directory is fresh, so the
    whole of each log is this run's)."""
    found = swallowed_error({}, run_dir / LOG_DIR, (EXPLORER_NAME, TRAINER_NAME))
    if found is not None:
        raise Failure(f"Trinity swallowed an error: {found}")


def saved_experiences(run_dir: Path) -> list[Any]:
    """The explorer's experiences as Trinity saved them, as Trinity ``Experience`` s."""
    database = run_dir / EXPLORER_OUTPUT_DB
    if not database.is_file():
        raise Failure(f"no experience database {database} (Trinity's experience pipeline "
                      f"saves the explorer's experiences there)")
    try:
        experiences = list(db_experiences(database))
    except DatasetError as exc:
        raise Failure(str(exc)) from None
    if not experiences:
        raise Failure(f"no experiences in {database}")
    return experiences


def scalar_at(curves: dict[str, list[tuple[int, float]]], name: str, step: int) -> float:
    """The finite value TensorBoard holds for ``name`` at ``step``."""
    value = dict(curves.get(name, [])).get(step)
    if value is None:
        raise Failure(f"tensorboard has no {name} at step {step}")
    if not math.isfinite(value):
        raise Failure(f"{name} at step {step} is {value}, not a finite number")
    return value


def who(experience: Any) -> str:
    """An experience's rollout, as messages name it."""
    eid = experience.eid
    return f"step {eid.batch} task {eid.task} run {eid.run}"


# ---------------------------------------------------------------------------------------
# stage a: explore


def came_up(log: Path) -> None:
    """The explorer logged each `CAME_UP` line."""
    text = log.read_text(encoding="utf-8", errors="replace")
    for line, missing in CAME_UP:
        if line not in text:
            raise Failure(f'{log} never says "{line}" ({missing})')


def rollouts_per_step(experiences: list[Any], config: dict[str, Any]) -> int:
    """Every explored step saved ``batch_size x repeat_times`` rollouts (one
    ``eid.rid`` each); returns the number of steps."""
    steps = int(setting(config, "buffer.total_steps"))
    batch = setting(config, "buffer.batch_size")
    repeats = setting(config, "algorithm.repeat_times", 1)
    rollouts = Counter(str(experience.eid.batch) for experience in
                       {experience.eid.rid: experience for experience in experiences}.values())
    for step in range(1, steps + 1):
        if rollouts[str(step)] != batch * repeats:
            raise Failure(f"step {step} saved {rollouts[str(step)]} rollouts in "
                          f"{EXPLORER_OUTPUT_DB}, expected {batch * repeats} (batch_size "
                          f"{batch} x repeat_times {repeats})")
    return steps


def step0_eval(curves: dict[str, list[tuple[int, float]]], config: dict[str, Any]) -> str:
    """The startup eval's metrics at step 0, or why the config has none."""
    if not setting(config, "buffer.explorer_input.eval_tasksets", []):
        return "no step-0 eval: the config has no eval taskset"
    if not setting(config, "explorer.eval_on_startup", True):
        return "no step-0 eval: explorer.eval_on_startup is false"
    names = sorted(name for name, points in curves.items()
                   if name.startswith("eval/") and any(step == 0 for step, _ in points))
    if not names:
        raise Failure("tensorboard has no eval/ metric at step 0 (Trinity's explorer "
                      "evaluates at startup)")
    return f"{len(names)} eval/ metrics at step 0"


def check_explore(run_dir: Path) -> str:
    """Stage a: the explorer came up and swallowed no error, saved every step's rollouts
    in the experience database, and logged the step-0 eval and each step's reward."""
    config = run_config(run_dir)
    came_up(actor_log(run_dir, EXPLORER_NAME))
    no_swallowed_error(run_dir)
    experiences = saved_experiences(run_dir)
    steps = rollouts_per_step(experiences, config)
    curves = read_tensorboard(run_dir / TENSORBOARD_DIR, finite_only=False)
    evaluated = step0_eval(curves, config)
    rewards = [scalar_at(curves, "rollout/reward/mean", step) for step in range(1, steps + 1)]
    return (f"engine, API server and runners up; {len(experiences)} experiences of steps "
            f"1-{steps} in {EXPLORER_OUTPUT_DB}; {evaluated}; rollout/reward/mean "
            + ", ".join(f"{reward:.4g}" for reward in rewards))


# ---------------------------------------------------------------------------------------
# stage b: the saved experiences


def well_formed(experience: Any) -> None:
    """Token ids, a prompt length inside them, and a log-prob and an action-mask 1 for
    every response token (each arith rollout is one model call)."""
    tokens, prompt = experience.tokens, experience.prompt_length
    if tokens is None or len(tokens) == 0:
        raise Failure(f"{who(experience)}: no token ids")
    if not 0 < prompt < len(tokens):
        raise Failure(f"{who(experience)}: prompt_length {prompt} of {len(tokens)} tokens "
                      f"(needs 0 < prompt_length < tokens)")
    response = len(tokens) - prompt
    if experience.logprobs is None or len(experience.logprobs) != response:
        count = 0 if experience.logprobs is None else len(experience.logprobs)
        raise Failure(f"{who(experience)}: {count} log-probs for {response} response tokens")
    mask = experience.action_mask
    if mask is None or len(mask) != response or not bool(mask.all()):
        shown = None if mask is None else mask.int().tolist()
        raise Failure(f"{who(experience)}: action mask {shown} is not 1 over its {response} "
                      f"response tokens (each rollout is one model call)")


def finite_reward(experience: Any) -> None:
    """The experience carries a reward, and it is a finite number."""
    reward = experience.reward
    if not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise Failure(f"{who(experience)}: reward {reward} is not a finite number")


def one_reward_per_rollout(experiences: list[Any]) -> None:
    """All experiences of one ``(step, task, run)`` carry the same, single reward."""
    rewards: dict[str, set[float]] = {}
    first: dict[str, Any] = {}
    for experience in experiences:
        rewards.setdefault(experience.eid.rid, set()).add(float(experience.reward))
        first.setdefault(experience.eid.rid, experience)
    for rid, found in rewards.items():
        if len(found) > 1:
            shown = ", ".join(f"{reward:g}" for reward in sorted(found))
            raise Failure(f"{who(first[rid])} has {len(found)} rewards ({shown}); a "
                          f"rollout has exactly one")


def processed_logprobs(logits: Any, temperature: float, top_p: float) -> Any:
    """Log-probs as vLLM returns them to Trinity, which starts its engines with
    ``logprobs_mode="processed_logprobs"`` (common/models/vllm_model.py): the log-softmax
    after temperature and top-p, applied as vllm/v1/sample/sampler.py and
    ops/topk_topp_sampler.py (``apply_top_k_top_p_pytorch``) do."""
    if temperature < GREEDY_TEMPERATURE:
        return logits.log_softmax(dim=-1)
    logits = logits / temperature
    if top_p < 1.0:  # drop the least likely tokens holding 1 - top_p of the mass
        ascending, order = logits.sort(dim=-1)
        drop = ascending.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
        drop[..., -1] = False  # the likeliest token always stays
        logits = logits.scatter(-1, order, ascending.masked_fill(drop, -math.inf))
    return logits.log_softmax(dim=-1)


def model_logprobs(model: Any, experience: Any, temperature: float, top_p: float) -> Any:
    """The model's processed log-prob of each response token of ``experience``."""
    import torch

    tokens, prompt = experience.tokens.long(), experience.prompt_length
    vocabulary = model.config.vocab_size
    if int(tokens.max()) >= vocabulary:
        raise Failure(f"{who(experience)}: token id {int(tokens.max())} is outside the "
                      f"model's vocabulary of {vocabulary} (is --model the run's model?)")
    with torch.no_grad():
        logits = model(tokens[None, :-1]).logits[0, prompt - 1:].float()
    logprobs = processed_logprobs(logits, temperature, top_p)
    return logprobs.gather(-1, tokens[prompt:, None])[:, 0]


def rollout_sampling(config: dict[str, Any]) -> tuple[float, float]:
    """The temperature and top_p the rollouts were sampled with: the taskset's
    ``rollout_args`` (each request's), else the model's (the engine's defaults)."""
    values = []
    for key in ("temperature", "top_p"):
        given = config_value(config, f"buffer.explorer_input.taskset.rollout_args.{key}")
        if given is None:
            given = setting(config, f"model.{key}", 1.0)
        values.append(float(given))
    return values[0], values[1]


def load_model(model_dir: Path) -> Any:
    """The model in float32 on the CPU, the reference its bfloat16 serving is held to."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()  # the verdict is the one line
    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def logprobs_match(experiences: list[Any], model_dir: Path, config: dict[str, Any]) -> str:
    """Every saved log-prob is within `LOGPROB_TOLERANCE` of the model's; returns how
    close they came."""
    model = load_model(model_dir)
    temperature, top_p = rollout_sampling(config)
    sampling = f"temperature {temperature:g}, top_p {top_p:g}"
    largest = 0.0
    for experience in experiences:
        expected = model_logprobs(model, experience, temperature, top_p)
        gaps = (experience.logprobs.float() - expected).abs()
        position = int(gaps.argmax())
        if float(gaps[position]) > LOGPROB_TOLERANCE:
            raise Failure(f"{who(experience)}: response token {position} has log-prob "
                          f"{float(experience.logprobs[position]):.4f}, the model gives "
                          f"{float(expected[position]):.4f} at {sampling} (tolerance "
                          f"{LOGPROB_TOLERANCE})")
        largest = max(largest, float(gaps[position]))
    return f"largest |diff| {largest:.4f} at {sampling}"


def check_experiences(run_dir: Path, model_dir: Path) -> str:
    """Stage b: the saved experiences are well formed, carry one finite reward per
    rollout, and their log-probs are the model's own."""
    config = run_config(run_dir)
    experiences = saved_experiences(run_dir)
    for experience in experiences:
        well_formed(experience)
        finite_reward(experience)
    one_reward_per_rollout(experiences)
    closeness = logprobs_match(experiences, model_dir, config)
    return (f"{len(experiences)} experiences: token ids, prompt lengths, action masks and "
            f"one finite reward per rollout sane; log-probs within {LOGPROB_TOLERANCE} of "
            f"the model's ({closeness})")


# ---------------------------------------------------------------------------------------
# stage c: one train step


def trained(run_dir: Path, stage_dir: Path | None = None) -> str:
    """The trainer ran and no loop swallowed an error; in ``stage_dir`` (default: the run
    directory), it logged a finite loss and an on-policy ``ppo_kl`` near 0 at
    `TRAIN_STEP` and saved that step's checkpoint. Returns what it found."""
    stage_dir = stage_dir or run_dir
    actor_log(run_dir, TRAINER_NAME)
    no_swallowed_error(run_dir)
    curves = read_tensorboard(stage_dir / TENSORBOARD_DIR, finite_only=False)
    loss = scalar_at(curves, "actor/pg_loss", TRAIN_STEP)
    kl = scalar_at(curves, "actor/ppo_kl", TRAIN_STEP)
    if abs(kl) > LOGPROB_TOLERANCE:
        raise Failure(f"actor/ppo_kl at step {TRAIN_STEP} is {kl:.4g}, not within "
                      f"{LOGPROB_TOLERANCE} of 0 (step {TRAIN_STEP} trains on rollouts of "
                      f"the same weights: the trainer's log-probs should be vLLM's)")
    checkpoint = stage_dir / step_dir_name(TRAIN_STEP)
    if not checkpoint.is_dir():
        raise Failure(f"no checkpoint folder {checkpoint}")
    return (f"actor/pg_loss {loss:.4g}, actor/ppo_kl {kl:.2g} at step {TRAIN_STEP}; "
            f"checkpoint {checkpoint.name}")


def check_train(run_dir: Path) -> str:
    """Stage c: the trainer ran and swallowed no error, logged a finite loss and an
    on-policy ``ppo_kl`` near 0 at `TRAIN_STEP`, and saved that step's checkpoint."""
    return trained(run_dir)


# ---------------------------------------------------------------------------------------
# stage d: an SFT warm-up, then RL from its weights


def meta_step(meta: Path) -> int:
    """``latest_iteration`` of a ``trainer_meta.json`` (or a copy of one)."""
    try:
        return int(json.loads(meta.read_text(encoding="utf-8"))["latest_iteration"])
    except (OSError, ValueError, KeyError, TypeError):
        raise Failure(f"no readable latest_iteration in {meta} (Trinity's trainer records "
                      f"each checkpoint's step there)") from None


def finished_stage(folder: Path, planned: int) -> Path:
    """The stage's trainer reached its ``planned`` steps and saved that step's
    checkpoint; returns the checkpoint folder."""
    step = meta_step(folder / TRAINER_META)
    if step != planned:
        raise Failure(f"the trainer's last step in {folder} is {step} ({TRAINER_META} "
                      f"latest_iteration), not the planned {planned}")
    checkpoint = folder / step_dir_name(step)
    if not checkpoint.is_dir():
        raise Failure(f"no checkpoint folder {checkpoint}")
    return checkpoint


def rollout_models(run_dir: Path) -> set[str]:
    """The models the workflow runners say they were made for (their logs' "> rollout
    model:" lines), as real paths."""
    folder = run_dir / LOG_DIR
    logs = sorted([*folder.glob(f"{EXPLORER_NAME}_runner_*.log"),
                   *folder.glob(f"*/{EXPLORER_NAME}_runner_*.log")])  # per node IP
    if not logs:
        raise Failure(f"no {EXPLORER_NAME}_runner_N.log in {folder} (the RL stage's "
                      f"workflow runners never started)")
    models = {os.path.realpath(line.partition(ROLLOUT_MODEL)[2].strip())
              for log in logs
              for line in log.read_text(encoding="utf-8", errors="replace").splitlines()
              if ROLLOUT_MODEL in line}
    if not models:
        raise Failure(f'no "{ROLLOUT_MODEL.strip()}" line in {folder}/'
                      f"{EXPLORER_NAME}_runner_*.log")
    return models


def check_warmup(run_dir: Path) -> str:
    """Stage d: both stages ran to their planned steps and saved checkpoints, the warm-up
    a Hugging Face one; the RL stage's engines served that checkpoint and its trainer
    trained from the same weights (``ppo_kl`` near 0 at step 1); no error swallowed."""
    config = run_config(run_dir)
    stages = setting(config, "stages", [])
    names = [stage.get("stage_name") for stage in stages if isinstance(stage, dict)]
    if names != [WARMUP_STAGE, RL_STAGE]:
        raise Failure(f"{CONFIG_YAML} has stages {names}, not a warm-up's "
                      f"{[WARMUP_STAGE, RL_STAGE]}")
    warmup_steps = int(setting(stages[0], "buffer.total_steps"))
    warmed = finished_stage(run_dir / WARMUP_STAGE, warmup_steps)
    huggingface = warmed / "actor" / "huggingface"
    if not huggingface.is_dir():
        raise Failure(f"no Hugging Face checkpoint {huggingface} (the RL stage starts from "
                      f"the warm-up's last one)")
    rl_steps = int(setting(config, "buffer.total_steps"))
    rl_checkpoint = finished_stage(run_dir / RL_STAGE, rl_steps)
    served = rollout_models(run_dir)
    if served != {os.path.realpath(huggingface)}:
        raise Failure(f"the RL stage's workflow runners were made for {', '.join(sorted(served))}"
                      f", not the warm-up's last Hugging Face checkpoint {huggingface}")
    training = trained(run_dir, run_dir / RL_STAGE)
    return (f"{WARMUP_STAGE} trained {counted(warmup_steps, 'step')}, Hugging Face "
            f"checkpoint {warmed.name}/actor/huggingface; {RL_STAGE} served it and trained "
            f"{counted(rl_steps, 'step')} ({training}; last {rl_checkpoint.name})")


# ---------------------------------------------------------------------------------------
# stage e: the rollout engine split over GPUs


def check_split(run_dir: Path, tensor_parallel: int, engines: int) -> str:
    """Stage e: the run's config has ``engines`` rollout engines of ``tensor_parallel``
    GPUs each beside a trainer (mode both), the explorer came up, and the trainer trained
    step 1 on vLLM's rollouts."""
    config = run_config(run_dir)
    mode = setting(config, "mode", "both")
    if mode != "both":
        raise Failure(f"{CONFIG_YAML} has mode {mode}, not both (the engines and the trainer "
                      f"on GPUs of their own)")
    for key, expected in (("tensor_parallel_size", tensor_parallel), ("engine_num", engines)):
        found = setting(config, f"explorer.rollout_model.{key}", 1)
        if int(found) != expected:
            raise Failure(f"{CONFIG_YAML} has explorer.rollout_model.{key} {found}, expected "
                          f"{expected}")
    gpus = int(setting(config, "cluster.node_num")) * int(setting(config, "cluster.gpu_per_node"))
    trainer_gpus = gpus - engines * tensor_parallel
    if trainer_gpus < 1:
        raise Failure(f"{counted(engines, 'rollout engine')} of tensor_parallel_size "
                      f"{tensor_parallel} leave the trainer none of the cluster's "
                      f"{counted(gpus, 'GPU')}")
    came_up(actor_log(run_dir, EXPLORER_NAME))
    training = trained(run_dir)
    return (f"{counted(engines, 'rollout engine')} of tensor_parallel_size {tensor_parallel} "
            f"and a {trainer_gpus}-GPU trainer on {gpus} GPUs ({CONFIG_YAML}); engine, API server "
            f"and runners up; {training}")


# ---------------------------------------------------------------------------------------
# stage f: Ctrl-C after the first checkpoint, then --resume


def resume_line(output: Path, run_dir: Path) -> str:
    """The line of ``output`` that says how to resume ``run_dir`` on Trinity."""
    try:
        lines = output.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        raise Failure(f"no output file {output}") from None
    for line in lines:
        if INTERRUPTED in line and "--backend trinity" in line and \
                line.rstrip().endswith(f"--resume {run_dir}"):
            return line
    raise Failure(f'{output} has no line "{INTERRUPTED} ... --backend trinity ... --resume '
                  f'{run_dir}"')


def check_resume(run_dir: Path, exit_codes: list[int], interrupted_output: Path,
                 interrupted_meta: Path) -> str:
    """Stage f: Ctrl-C after the first checkpoint exited 130 with the line to resume,
    mid-run; ``--resume`` exited 0 with the trainer at the planned last step."""
    config = run_config(run_dir)
    planned = int(setting(config, "buffer.total_steps"))
    interrupted, resumed = exit_codes
    if interrupted != INTERRUPTED_EXIT:
        finished = (" (it finished before Ctrl-C reached it: give it more steps)"
                    if interrupted == 0 else "")
        raise Failure(f"the interrupted run exited {interrupted}, not {INTERRUPTED_EXIT}"
                      f"{finished}; its output is {interrupted_output}")
    resume_line(interrupted_output, run_dir)
    stopped = meta_step(interrupted_meta)
    if not 1 <= stopped < planned:
        raise Failure(f"Ctrl-C came when the trainer's last checkpoint was step {stopped} "
                      f"({interrupted_meta}), not between step 1 and the planned {planned}: "
                      f"the resume had nothing to continue")
    if resumed != 0:
        raise Failure(f"the resumed run exited {resumed}, not 0")
    checkpoint = finished_stage(run_dir, planned)
    return (f"Ctrl-C at step {stopped} exited {INTERRUPTED_EXIT} with the resume line; "
            f"--resume exited 0 with the trainer at step {planned} of {planned} "
            f"({TRAINER_META}); checkpoint {checkpoint.name}")


def main(argv: list[str] | None = None) -> int:
    """Run one stage's check; print its line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=("explore", "experiences", "train", "warmup",
                                          "split", "resume"))
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--model", type=Path, help="the model folder (experiences only)")
    parser.add_argument("--tensor-parallel", type=int, default=1,
                        help="each rollout engine's GPUs (split only)")
    parser.add_argument("--engines", type=int, default=1,
                        help="the rollout engines (split only)")
    parser.add_argument("--exit-codes", type=int, nargs=2, metavar=("INTERRUPTED", "RESUMED"),
                        help="the two runs' exit statuses (resume only)")
    parser.add_argument("--interrupted-output", type=Path,
                        help="the interrupted run's output (resume only)")
    parser.add_argument("--interrupted-meta", type=Path,
                        help="trainer_meta.json as it was at Ctrl-C (resume only)")
    options = parser.parse_args(argv)
    if options.stage == "experiences" and options.model is None:
        parser.error("experiences needs --model MODEL_DIR")
    resume = (options.exit_codes, options.interrupted_output, options.interrupted_meta)
    if options.stage == "resume" and None in resume:
        parser.error("resume needs --exit-codes, --interrupted-output and --interrupted-meta")
    checks = {"explore": (check_explore,), "train": (check_train,),
              "experiences": (check_experiences, options.model), "warmup": (check_warmup,),
              "split": (check_split, options.tensor_parallel, options.engines),
              "resume": (check_resume, *resume)}
    check, *extra = checks[options.stage]
    if not options.run_dir.is_dir():
        print(f"FAIL {options.stage}: {options.run_dir} is not a directory")
        return 1
    line, status = verdict(options.stage, check, options.run_dir, *extra)
    print(line)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
