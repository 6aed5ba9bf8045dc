"""GRPO on the CPU: tunedsl's local backend against TRL's GRPOTrainer and a bare torch loop.

    python benchmarks/local_grpo.py [--workload small,large,multiturn] [--steps N]
                                    [--repeats R] [--seed S] [--threads T]
                                    [--contenders tunedsl,trl,bare] [--keep]

needs the ``bench`` extra (``pip install -e '.[bench]'``, which brings TRL); takes about
8 minutes with the defaults on 2 CPU cores (small: 100 steps x 3 rounds, 1.5 min; large:
8 steps x 3 rounds, 5 min, few steps because each takes 3-4 s; multiturn: 15 steps x 3
rounds, 2 min). ``--steps`` and ``--repeats`` set every chosen workload's.

Three workloads (``benchmarks/grpo_workloads.py`` builds their models and defines their
tasks and tunedsl experiments), each on the sums of ``examples/arith/data/train.jsonl``,
each model built once into a temporary folder from a fixed seed so that every contender
starts from identical weights:

  small      the arith example: the 2-layer, 64-wide tiny model, one-token replies,
             15 prompts x 8 samples a step, lr 1e-3, reward 1 for the sum;
  large      a 28M-parameter Llama (8 layers, 512 wide, 4,372-token vocabulary) with
             32-token replies, 4 prompts x 8 samples a step, lr 1e-4, rewarded for the
             reply's characters that are digits of the sum; here compute dominates;
  multiturn  a 4-layer, 128-wide model, two calls per trajectory (the sum after ten
             worked examples, then the question again with the first reply in the
             conversation; replies of at most 4 tokens), 15 prompts x 8 samples a step,
             lr 1e-3, multi-step GRPO (each call carries its trajectory's advantage),
             rewarded for each right answer.

Within a workload every contender uses the same hyper-parameters: GRPO, one AdamW step per
batch (weight decay 0.01, gradient-norm clip 1.0, constant lr), temperature 1.0, no KL
term, the same number of steps and seeds:

  tunedsl  ``run_local`` on the workload's experiment (periodic eval and checkpoints
           switched off, as they are for TRL);
  trl      ``trl.GRPOTrainer`` (CPU, transformers ``generate``, no vLLM, beta=0, the
           token-mean "dapo" loss, conversational prompts through the chat template);
           single-call workloads only (its trainer has no multi-call trajectories);
  bare     the simplest correct GRPO: ``model.generate(do_sample=True)`` on every rollout
           of the step as one batch (one batch per turn, each turn's whole prompt encoded
           again), group-normalized advantages, loss = -(A * logprob) averaged over the
           response tokens of every call, one forward and backward pass per turn.

Each run is a fresh subprocess that reports the wall time of its training loop only
(from the start of the first step to the end of the last; imports, model loading and
trainer construction are excluded), the mean training reward per step, and its peak
resident memory (``ru_maxrss``, which includes the interpreter and each library's
imports); tunedsl's also reports its ``time/model_seconds`` (time inside the model's
forward passes, sampling's included, and backward passes). A workload runs R rounds;
round i runs every contender once with seed S+i, in a rotated order. Its table gives per
contender: the best and the median loop time, rollouts per second (steps x rollouts a
step / best loop time), the mean reward over the first and the last 10% of the steps
(averaged over the rounds' seeds), the peak RSS, and the subprocess's whole wall time.
Below it, the ratios measured in that same run against the workload's goals:

  small      tunedsl >= 1.5x TRL's rollouts per second and >= 0.9x the bare loop's;
  large      tunedsl >= 1.0x both, and >= 85% of its loop time in the model's forward
             and backward passes;
  multiturn  tunedsl >= 1.2x the bare loop's (its later prompts reuse the earlier turns'
             KV cache, as vLLM's prefix caching does on Trinity);
  all        a reward curve no worse (a last-10% mean reward not lower than the other's
             by more than two standard errors of the seed-to-seed spread), and a peak RSS
             at most the bare loop's + 100 MB.

A missed goal prints a "GOAL MISSED" line; the exit status is 0 all the same (this is a
measurement), and non-zero only when a contender fails to run.

Torch runs on 1 thread in every contender by default (``--threads 0`` keeps torch's
default of one per core): on a 2-core VM, 2-thread runs of the same work vary up to 5x
from run to run, 1-thread runs within about 10%. Nothing is downloaded: the models are
built in code and every subprocess runs with the Hugging Face hub offline.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import grpo_workloads as tasks  # noqa: E402

DATA = ROOT / "examples" / "arith" / "data" / "train.jsonl"
WEIGHT_DECAY = 0.01
GRAD_CLIP = 1.0
TEMPERATURE = 1.0
CONTENDERS = ("tunedsl", "trl", "bare")
RSS_ABOVE_BARE_MB = 100


@dataclass(frozen=True)
class Workload:
    """One workload: its model, task, hyper-parameters, contenders and goals."""

    name: str
    title: str
    build: Callable[[str], str]  # writes the model folder
    experiment: str  # tunedsl's import string
    algorithm: str
    group: int  # samples per prompt
    batch: int  # prompts per step
    lr: float
    max_tokens: int
    turns: int  # model calls per trajectory
    reward: Callable[[Any, str], float]  # (the reply, or the list of replies; the answer)
    steps: int
    repeats: int
    speed_goals: dict[str, float]  # tunedsl's rollouts/s >= goal x the contender's
    share_goal: float | None = None  # tunedsl's loop time in forward/backward passes
    contenders: tuple[str, ...] = CONTENDERS
    judge: Callable[[], Any] = field(default=lambda: None)  # the experiment's judge

    def messages(self, question: str, replies: list[str]) -> list[dict[str, str]]:
        """The messages of the call after ``replies`` (tunedsl's workflow sends these)."""
        if self.turns == 1:
            return [{"role": "user", "content": question}]
        return tasks.conversation(question, replies)

    def score(self, replies: list[str], answer: str) -> float:
        return self.reward(replies[0] if self.turns == 1 else replies, answer)


def _arith_judge() -> Any:
    from examples.arith.experiment import exact

    return exact


WORKLOADS = {w.name: w for w in (
    Workload("small", "the arith example: tiny model (2 layers, 64 wide), 1-token replies",
             tasks.build_small, "examples.arith.experiment:Arith", "grpo", 8, 15, 1e-3, 1, 1,
             tasks.sum_reward, steps=100, repeats=3, speed_goals={"trl": 1.5, "bare": 0.9},
             judge=_arith_judge),
    Workload("large", "28M-parameter model (8 layers, 512 wide), 32-token replies",
             tasks.build_large, "benchmarks.grpo_workloads:Large", "grpo", 8, 4, 1e-4,
             tasks.LONG_TOKENS, 1, tasks.digits_reward, steps=8, repeats=3,
             speed_goals={"trl": 1.0, "bare": 1.0}, share_goal=0.85,
             judge=lambda: tasks.answer_digits),
    Workload("multiturn", "two calls per trajectory (4 layers, 128 wide), the second "
             "prompt extending the first", tasks.build_multiturn,
             "benchmarks.grpo_workloads:MultiTurn", "multi_step_grpo", 8, 15, 1e-3,
             tasks.TURN_TOKENS, 2, tasks.turns_reward, steps=15, repeats=3,
             speed_goals={"bare": 1.2}, contenders=("tunedsl", "bare"),
             judge=lambda: tasks.each_answer),
)}


# --------------------------------------------------------------------------- shared


def train_rows() -> list[dict[str, str]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def window_mean(values: list[float], first: bool) -> float:
    """Mean over the first (or last) 10% of the steps, at least one step."""
    size = max(1, len(values) // 10)
    part = values[:size] if first else values[-size:]
    return sum(part) / len(part) if part else float("nan")


# --------------------------------------------------------------------------- contenders
# Each returns (loop seconds, mean reward per step, extras: tunedsl's seconds in the model's
# passes and share of prompt tokens taken from the prefix cache).


def timed_local_run(graph: Any) -> tuple[float, Any, list[dict[str, float]]]:
    """``run_local`` on ``graph``: the wall time of its training steps, its summary and each
    step's metrics. run_local's own clock also covers the eval before the first step, and
    the final eval, checkpoint and reward plot; the loop starts where the first step's own
    timer started."""
    from tunedsl.backends.local.run import run_local
    from tunedsl.backends.trinity.config import to_yaml, trinity_config
    from tunedsl.runs.rundir import run_name

    ends: list[float] = []
    reports: list[dict[str, float]] = []

    def on_step_end(report: Any) -> None:
        ends.append(time.perf_counter())
        reports.append(report.metrics)

    name = run_name(graph)
    summary = run_local(graph, run_name=name, progress=False, on_step_end=on_step_end,
                        trinity_yaml=to_yaml(trinity_config(graph, name=name)))
    return ends[-1] - (ends[0] - reports[0]["time/step_seconds"]), summary, reports


def run_tunedsl(work: Workload, model_dir: str, steps: int, seed: int,
                workdir: str) -> tuple[float, list[float], dict[str, float]]:
    import tunedsl
    from tunedsl.dsl.algorithms import resolve

    never = str(steps + 1)  # no periodic eval or checkpoint inside the timed loop (as for TRL)
    graph = tunedsl.load_experiment(work.experiment, overrides=[
        f"train_dataset.total_steps={steps}", f"model.model_path={model_dir}",
        f"checkpoint_root_dir={workdir}", f"algorithm.seed={seed}",
        f"algorithm.eval_interval_steps={never}", f"algorithm.save_interval_steps={never}",
        "algorithm.kl_loss_fn=none",  # as TRL's beta=0 and the bare loop: no reference model
    ])
    algorithm = graph.algorithm
    assert (algorithm.algorithm_type, algorithm.group_size, algorithm.batch_size) == \
        (work.algorithm, work.group, work.batch)
    assert algorithm.learning_rate == work.lr
    assert (graph.model.max_tokens, graph.model.temperature) == (work.max_tokens, TEMPERATURE)
    assert not resolve(algorithm).uses_reference
    seconds, summary, reports = timed_local_run(graph)
    model_seconds = [report["time/model_seconds"] for report in reports]
    cache_hits = [report["rollout/prefix_cache_hit"] for report in reports]
    return seconds, list(summary.rewards), {"model_seconds": sum(model_seconds),
                                           "prefix_cache_hit": statistics.fmean(cache_hits)}


def run_trl(work: Workload, model_dir: str, steps: int, seed: int,
            workdir: str) -> tuple[float, list[float], dict[str, float]]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rewards: list[float] = []

    def reward(prompts: list, completions: list, answer: list[str], **_: Any) -> list[float]:
        # Called once per step (steps_per_generation = num_iterations = 1) with its samples.
        values = [work.score([c[0]["content"]], a) for c, a in zip(completions, answer)]
        rewards.append(sum(values) / len(values))
        return values

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.start: float | None = None
            self.end = 0.0

        def on_step_begin(self, args, state, control, **kwargs):  # before generation
            if self.start is None:
                self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):  # after the optimizer step
            self.end = time.perf_counter()

    dataset = Dataset.from_list([{"prompt": work.messages(row["question"], []),
                                  "answer": row["answer"]} for row in train_rows()])
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    config = GRPOConfig(
        output_dir=os.path.join(workdir, "trl"),
        # one step = batch prompts x group generations: TRL's batch sizes count completions
        per_device_train_batch_size=work.batch * work.group, gradient_accumulation_steps=1,
        num_generations=work.group, max_completion_length=work.max_tokens, max_steps=steps,
        temperature=TEMPERATURE, top_p=1.0, top_k=0,
        beta=0.0, num_iterations=1, epsilon=0.2, loss_type="dapo",  # token-mean, like tunedsl
        learning_rate=work.lr, lr_scheduler_type="constant", warmup_steps=0,
        optim="adamw_torch", weight_decay=WEIGHT_DECAY, max_grad_norm=GRAD_CLIP,
        use_cpu=True, bf16=False, fp16=False,  # TRL defaults bf16=True
        gradient_checkpointing=False,  # TRL defaults it on; the others do not recompute
        use_vllm=False, seed=seed,
        report_to="none", save_strategy="no", eval_strategy="no", logging_strategy="no",
        disable_tqdm=True, push_to_hub=False, log_completions=False,
        dataloader_num_workers=0, dataloader_pin_memory=False,
    )
    clock = Clock()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[clock])
    trainer.train()
    if len(rewards) != steps:
        raise RuntimeError(f"TRL scored {len(rewards)} batches in {steps} steps; "
                           f"expected one a step")
    return clock.end - clock.start, rewards, {}


def run_bare(work: Workload, model_dir: str, steps: int, seed: int,
             workdir: str) -> tuple[float, list[float], dict[str, float]]:
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    rows = train_rows()

    def encode(messages: list[dict[str, str]]) -> list[int]:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                             tokenize=True, return_dict=True)["input_ids"]

    first_prompts = [encode(work.messages(r["question"], [])) for r in rows]
    generation = GenerationConfig(do_sample=True, temperature=TEMPERATURE, top_k=0, top_p=1.0,
                                  max_new_tokens=work.max_tokens, pad_token_id=pad,
                                  eos_token_id=eos)
    optimizer = torch.optim.AdamW(model.parameters(), lr=work.lr, weight_decay=WEIGHT_DECAY)

    def order(step: int) -> list[int]:  # a seeded shuffle per epoch, batch rows a step
        out = []
        for position in range(step * work.batch, (step + 1) * work.batch):
            epoch, offset = divmod(position, len(rows))
            shuffled = list(range(len(rows)))
            random.Random(seed * 1000 + epoch).shuffle(shuffled)
            out.append(shuffled[offset])
        return out

    def sample(prompts: list[list[int]]) -> tuple[torch.Tensor, ...]:
        """One generate call over left-padded prompts: the prompts, their mask, the
        responses and the mask of each response's tokens (through its first eos)."""
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        attention = (torch.arange(width) >= torch.tensor(
            [width - len(p) for p in prompts]).unsqueeze(-1)).long()
        model.eval()
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=attention,
                                 generation_config=generation)
        response = out[:, width:]
        # a response ends at its first eos (kept, it was sampled); what follows is padding
        after_eos = (response == eos).long().cumsum(-1) - (response == eos).long()
        return input_ids, attention, response, (after_eos == 0).float()

    def logprobs(input_ids, attention, response, mask) -> torch.Tensor:
        full = torch.cat([input_ids, response], dim=1)
        full_attention = torch.cat([attention, mask.long()], dim=1)
        positions = (full_attention.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=full, attention_mask=full_attention,
                       position_ids=positions).logits
        logits = logits[:, input_ids.shape[1] - 1:-1].float() / TEMPERATURE
        return logits.log_softmax(-1).gather(-1, response.unsqueeze(-1)).squeeze(-1)

    rewards: list[float] = []
    start = time.perf_counter()
    for step in range(steps):
        chosen = [i for i in order(step) for _ in range(work.group)]
        turns, replies = [], [[] for _ in chosen]
        for turn in range(work.turns):
            prompts = [first_prompts[i] if turn == 0 else
                       encode(work.messages(rows[i]["question"], said))
                       for i, said in zip(chosen, replies)]
            turns.append(sample(prompts))
            _, _, response, mask = turns[-1]
            texts = tokenizer.batch_decode(response.masked_fill(mask == 0, pad),
                                           skip_special_tokens=True)
            for said, text in zip(replies, texts):
                said.append(text)
        reward = torch.tensor([work.score(said, rows[i]["answer"])
                               for said, i in zip(replies, chosen)])
        rewards.append(float(reward.mean()))
        grouped = reward.view(-1, work.group)
        advantages = ((grouped - grouped.mean(-1, keepdim=True))
                      / (grouped.std(-1, keepdim=True) + 1e-6)).view(-1)
        model.train()
        optimizer.zero_grad(set_to_none=True)
        tokens = sum(float(mask.sum()) for *_, mask in turns)
        for input_ids, attention, response, mask in turns:
            chosen_logprobs = logprobs(input_ids, attention, response, mask)
            loss = -(advantages.unsqueeze(-1) * chosen_logprobs * mask).sum() / tokens
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
    return time.perf_counter() - start, rewards, {}


RUNNERS = {"tunedsl": run_tunedsl, "trl": run_trl, "bare": run_bare}


def worker(args: argparse.Namespace) -> int:
    import resource

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    work = WORKLOADS[args.workload]
    seconds, rewards, extras = RUNNERS[args.worker](work, args.model, args.steps, args.seed,
                                                    args.workdir)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    result = {"name": args.worker, "seed": args.seed, "steps": len(rewards), "seconds": seconds,
              "rewards": rewards, "peak_rss_mb": peak_mb, "threads": torch.get_num_threads(),
              **extras}
    Path(args.out).write_text(json.dumps(result))
    return 0


# --------------------------------------------------------------------------- parent


def launch(work: Workload, name: str, model_dir: str, steps: int, seed: int,
           threads: int | None, workdir: Path) -> dict[str, Any]:
    """Run one contender in a fresh interpreter; its result, with the subprocess's wall time."""
    tag = f"{work.name}-{name}-seed{seed}"
    out, log = workdir / f"{tag}.json", workdir / f"{tag}.log"
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path,
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false",
           "WANDB_DISABLED": "true", "MPLBACKEND": "Agg"}
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", name,
               "--workload", work.name, "--model", model_dir, "--steps", str(steps),
               "--seed", str(seed), "--workdir", str(workdir / tag), "--out", str(out)]
    if threads:
        command += ["--threads", str(threads)]
    started = time.perf_counter()
    with log.open("w") as handle:
        code = subprocess.run(command, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL).returncode
    wall = time.perf_counter() - started
    if code != 0 or not out.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"{name} on {work.name} (seed {seed}) failed with exit {code}; the "
                           f"end of its log {log}:\n{tail}")
    result = json.loads(out.read_text())
    result["process_seconds"] = wall
    return result


def summarize(work: Workload, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One contender over its rounds: best and median loop time, rewards averaged over seeds."""
    seconds = sorted(r["seconds"] for r in runs)
    firsts = [window_mean(r["rewards"], True) for r in runs]
    lasts = [window_mean(r["rewards"], False) for r in runs]
    steps = runs[0]["steps"]
    rollouts = work.batch * work.group
    # the standard error of the mean last-window reward: the spread between seeds (it dwarfs
    # the sampling noise within a run), but never below the binomial noise of the samples
    p = min(max(statistics.fmean(lasts), 0.0), 1.0)
    spread = math.sqrt(p * (1 - p) / (max(1, steps // 10) * rollouts * len(lasts)))
    if len(lasts) > 1:
        spread = max(spread, statistics.stdev(lasts) / math.sqrt(len(lasts)))
    shares = [r["model_seconds"] / r["seconds"] for r in runs if "model_seconds" in r]
    hits = [r["prefix_cache_hit"] for r in runs if "prefix_cache_hit" in r]
    return {"steps": steps, "rounds": len(runs), "best": seconds[0],
            "median": statistics.median(seconds),
            "samples_per_second": steps * rollouts / seconds[0],
            "reward_first": statistics.fmean(firsts), "reward_last": statistics.fmean(lasts),
            "reward_last_each": lasts, "reward_last_se": spread,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "process_seconds": statistics.median(r["process_seconds"] for r in runs),
            "model_share": statistics.median(shares) if shares else None,
            "prefix_cache_hit": statistics.fmean(hits) if hits else None,
            "threads": runs[0]["threads"]}


def _goal(missed: list[str], ok: bool, line: str, why: str) -> None:
    print(f"{line}   {'ok' if ok else 'GOAL MISSED'}")
    if not ok:
        missed.append(f"GOAL MISSED: {why}")


def report(work: Workload, results: dict[str, dict[str, Any]], seeds: list[int]) -> list[str]:
    """Print the workload's table and goals; return its GOAL MISSED lines."""
    rollouts = work.batch * work.group
    header = (f"{'contender':<10}{'steps':>6}{'loop s best':>13}{'loop s median':>15}"
              f"{'samples/s':>11}{'reward first10%':>17}{'reward last10%':>16}{'peak RSS MB':>13}"
              f"{'process s':>11}")
    print(f"== {work.name}: {work.title}")
    print(header)
    print("-" * len(header))
    for name, r in results.items():
        print(f"{name:<10}{r['steps']:>6}{r['best']:>13.2f}{r['median']:>15.2f}"
              f"{r['samples_per_second']:>11.1f}{r['reward_first']:>17.3f}"
              f"{r['reward_last']:>16.3f}{r['peak_rss_mb']:>13.0f}{r['process_seconds']:>11.1f}")
    print(f"one step = {work.batch} prompts x {work.group} samples ({work.turns} call(s) each, "
          f"replies of at most {work.max_tokens} token(s)); loop s = the training steps only, "
          f"best and median of {len(seeds)} round(s); samples/s = steps x {rollouts} / best "
          f"loop s; rewards = mean training reward over the first / last 10% of the steps, "
          f"averaged over seeds {', '.join(map(str, seeds))}; peak RSS = max ru_maxrss of the "
          f"subprocess; process s = median wall time of the whole subprocess (imports, model "
          f"loading, trainer set-up included)")
    if len(seeds) > 1:
        print("last-10% reward per seed: " + "; ".join(
            f"{name} " + " ".join(f"{v:.3f}" for v in r["reward_last_each"])
            for name, r in results.items()))
    missed: list[str] = []
    mine = results.get("tunedsl")
    if mine is None:
        return missed
    print()
    for other, goal in work.speed_goals.items():
        if other in results:
            ratio = mine["samples_per_second"] / results[other]["samples_per_second"]
            median_ratio = results[other]["median"] / mine["median"]
            _goal(missed, ratio >= goal,
                  f"speed   tunedsl / {other:<4} = {ratio:6.3f}x samples/s (on median loop "
                  f"times {median_ratio:.3f}x)   goal >= {goal}x",
                  f"{work.name}: tunedsl's samples/s is {ratio:.3f}x {other}'s (goal >= {goal}x)")
    share = mine["model_share"]
    if share is not None:
        line = (f"model   tunedsl's loop time in the model's forward and backward passes = "
                f"{share:.0%} (median of rounds)")
        if work.share_goal is None:
            print(f"{line}   (no goal here)")
        else:
            _goal(missed, share >= work.share_goal, f"{line}   goal >= {work.share_goal:.0%}",
                  f"{work.name}: tunedsl spends {share:.0%} of its loop in the model's passes "
                  f"(goal >= {work.share_goal:.0%})")
    if work.turns > 1 and mine["prefix_cache_hit"] is not None:
        print(f"prefix  tunedsl took {mine['prefix_cache_hit']:.0%} of its prompt tokens' KV "
              f"cache from its earlier calls (mean of steps and rounds)")
    if "bare" in results:
        above = mine["peak_rss_mb"] - results["bare"]["peak_rss_mb"]
        _goal(missed, above <= RSS_ABOVE_BARE_MB,
              f"memory  tunedsl - bare = {above:+.0f} MB peak RSS   goal <= "
              f"+{RSS_ABOVE_BARE_MB} MB",
              f"{work.name}: tunedsl's peak RSS is {above:+.0f} MB above the bare loop's "
              f"(goal <= +{RSS_ABOVE_BARE_MB} MB)")
    what = "seed-to-seed" if len(seeds) > 1 else "sampling"
    for other in ("trl", "bare"):
        if other in results:
            theirs = results[other]
            delta = mine["reward_last"] - theirs["reward_last"]
            margin = 2 * math.hypot(mine["reward_last_se"], theirs["reward_last_se"])
            _goal(missed, delta >= -margin,
                  f"reward  tunedsl - {other:<4} = {delta:+.3f} last-10% mean reward   goal >= "
                  f"-{margin:.3f} (2 s.e. of {what} noise)",
                  f"{work.name}: tunedsl's last-10% reward {mine['reward_last']:.3f} is below "
                  f"{other}'s {theirs['reward_last']:.3f} by more than {margin:.3f}")
    return missed


def check_judges(workloads: list[Workload]) -> None:
    """The reward function the others use must score exactly as each experiment's judge."""
    import asyncio

    async def each(work: Workload) -> None:
        judge = work.judge()
        for row in train_rows():
            answer = row["answer"]
            for reply in ("", " ", answer, f" {answer}", "1", "10", "=", "<eos>", answer * 40):
                response = reply if work.turns == 1 else [reply, answer]
                expected = (await judge(row, response)).reward
                if work.reward(response, answer) != expected:
                    raise SystemExit(f"{work.name}: the benchmark's reward disagrees with the "
                                     f"judge on {row} / {response!r}")

    async def all_of_them() -> None:
        for work in workloads:
            await each(work)

    asyncio.run(all_of_them())


def run_workload(work: Workload, names: list[str], args: argparse.Namespace,
                 workdir: Path) -> list[str]:
    """Every round of one workload, then its table; its GOAL MISSED lines."""
    names = [n for n in names if n in work.contenders]
    if not names:
        print(f"\n{work.name}: none of the chosen contenders runs it (its contenders: "
              f"{', '.join(work.contenders)})")
        return []
    steps, repeats = args.steps or work.steps, args.repeats or work.repeats
    model_dir = work.build(str(workdir / f"{work.name}-model"))
    seeds = [args.seed + i for i in range(repeats)]
    print(f"\n{work.name}: {steps} steps x {work.batch} prompts x {work.group} samples, lr "
          f"{work.lr}, {repeats} round(s) (seeds {', '.join(map(str, seeds))}), torch threads "
          f"{args.threads or 'default (one per core)'}; one model for all: {model_dir}",
          flush=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    began = time.perf_counter()
    for round_, seed in enumerate(seeds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            print(f"round {round_ + 1}/{len(seeds)} seed {seed}: {name:<8} ...", end=" ",
                  flush=True)
            r = launch(work, name, model_dir, steps, seed, args.threads, workdir)
            runs[name].append(r)
            rate = steps * work.batch * work.group / r["seconds"]
            print(f"loop {r['seconds']:7.2f} s ({rate:7.1f} samples/s), "
                  f"process {r['process_seconds']:5.1f} s", flush=True)
        if round_ == 0 and repeats > 1:
            projected = (time.perf_counter() - began) * repeats
            if projected > 600:
                print(f"note: {work.name} will take about {projected / 60:.0f} min; --steps or "
                      f"--repeats lower it", flush=True)
    print()
    return report(work, {name: summarize(work, rs) for name, rs in runs.items()}, seeds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default=",".join(WORKLOADS),
                        help=f"comma-separated subset of {','.join(WORKLOADS)} (default: all)")
    parser.add_argument("--steps", type=int,
                        help="training steps per run, for every chosen workload (default: "
                             + ", ".join(f"{w.name} {w.steps}" for w in WORKLOADS.values()) + ")")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first round (default 0)")
    parser.add_argument("--repeats", type=int,
                        help="rounds; round i runs every contender once with seed SEED+i, in a "
                             "rotated order (default: " + ", ".join(
                                 f"{w.name} {w.repeats}" for w in WORKLOADS.values()) + ")")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads in every contender; 0 keeps torch's default (one per "
                             "core). Default 1: on a 2-core VM, 2-thread runs of the same work "
                             "vary up to 5x between runs")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help=f"comma-separated subset of {','.join(CONTENDERS)} (TRL runs the "
                             f"single-call workloads only)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs)")
    parser.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    unknown = sorted(set(names) - set(CONTENDERS))
    if unknown or not names:
        parser.error(f"--contenders: unknown {', '.join(unknown) or '(none given)'}")
    chosen = [n.strip() for n in args.workload.split(",") if n.strip()]
    unknown = sorted(set(chosen) - set(WORKLOADS))
    if unknown or not chosen:
        parser.error(f"--workload: unknown {', '.join(unknown) or '(none given)'}")
    if (args.steps is not None and args.steps < 1) or (args.repeats is not None
                                                       and args.repeats < 1):
        parser.error("--steps and --repeats must be at least 1")

    workloads = [WORKLOADS[name] for name in chosen]
    check_judges(workloads)
    import transformers

    transformers.utils.logging.disable_progress_bar()  # "Writing model shards" on stderr
    workdir = Path(tempfile.mkdtemp(prefix="tunedsl-bench-"))
    print(f"GRPO on the sums of examples/arith: workloads {', '.join(chosen)}; contenders "
          f"{', '.join(names)}", flush=True)
    keep = args.keep
    began = time.perf_counter()
    missed: list[str] = []
    try:
        for work in workloads:
            missed += run_workload(work, names, args, workdir)
    except RuntimeError:
        keep = True  # the failed contender's log stays for reading
        raise
    finally:
        if keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if missed:
        print()
        for line in missed:
            print(line)
    print(f"\nbenchmark wall time {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
