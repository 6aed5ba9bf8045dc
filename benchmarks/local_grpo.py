"""GRPO on the CPU: tunedsl's local backend against TRL's GRPOTrainer and a bare torch loop.

    python benchmarks/local_grpo.py [--steps N] [--repeats R] [--seed S] [--threads T]
                                    [--contenders tunedsl,trl,bare] [--keep]

needs the ``bench`` extra (``pip install -e '.[bench]'``, which brings TRL); takes about
a minute and a half with the defaults (100 steps, 3 rounds) on 2 CPU cores.

Every contender trains the SAME tiny model (``examples/arith/tiny_model.py``: a 2-layer
Llama with a character-level tokenizer, built once into a temporary folder from a fixed
seed, so all of them start from identical weights) on the same task (the 45 single-digit
sums of ``examples/arith/data/train.jsonl``, reward 1 when the reply is the sum), with
the same hyper-parameters: GRPO, 15 prompts per step x 8 samples per prompt, one AdamW
step per batch (lr 1e-3, weight decay 0.01, gradient-norm clip 1.0, constant lr), at
most 1 new token, temperature 1.0, no KL term, the same number of steps and seeds:

  tunedsl  ``run_local`` on ``examples.arith.experiment:Arith`` (periodic eval and
           checkpoints switched off, as they are for TRL);
  trl      ``trl.GRPOTrainer`` (CPU, transformers ``generate``, no vLLM, beta=0, the
           token-mean "dapo" loss, conversational prompts through the chat template);
  bare     the simplest correct GRPO: ``model.generate(do_sample=True)``, group-normalized
           advantages, loss = -(A * logprob) averaged over response tokens.

Each run is a fresh subprocess that reports the wall time of its training loop only
(from the start of the first step to the end of the last; imports, model loading and
trainer construction are excluded), the mean training reward per step, and its peak
resident memory (``ru_maxrss``, which includes the interpreter and each library's
imports). The benchmark runs R rounds; round i runs every contender once with seed S+i,
in a rotated order. The table gives per contender: the best and the median loop time,
rollouts per second (steps x 15 x 8 / best loop time), the mean reward over the first
and the last 10% of the steps (averaged over the rounds' seeds), the peak RSS, and the
subprocess's whole wall time. Below it, the ratios measured in that same run against the
goals: tunedsl >= 1.5x TRL's rollouts per second, >= 0.8x the bare loop's, and a reward
curve no worse (a last-10% mean reward not lower than the other's by more than two
standard errors of the seed-to-seed spread). A missed goal prints a "GOAL MISSED" line;
the exit status is 0 all the same (this is a measurement), and non-zero only when a
contender fails to run.

Torch runs on 1 thread in every contender by default (``--threads 0`` keeps torch's
default of one per core): on a 2-core VM, 2-thread runs of the same work vary up to 5x
from run to run, 1-thread runs within about 10%, and the model is too small to gain from
a second thread. Nothing is downloaded: the model is built in code and every subprocess
runs with the Hugging Face hub offline.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "arith" / "data" / "train.jsonl"
EXPERIMENT = "examples.arith.experiment:Arith"

GROUP = 8  # samples per prompt
BATCH = 15  # prompts per step
LR = 1e-3
WEIGHT_DECAY = 0.01
GRAD_CLIP = 1.0
MAX_NEW_TOKENS = 1
TEMPERATURE = 1.0
CONTENDERS = ("tunedsl", "trl", "bare")
GOAL_VS_TRL = 1.5
GOAL_VS_BARE = 0.8


# --------------------------------------------------------------------------- shared


def arith_reward(reply: str, answer: str) -> float:
    """The arith judge (``examples.arith.experiment.exact``): 1 when the reply is the sum."""
    return 1.0 if reply.strip() == answer else 0.0


def train_rows() -> list[dict[str, str]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def window_mean(values: list[float], first: bool) -> float:
    """Mean over the first (or last) 10% of the steps, at least one step."""
    size = max(1, len(values) // 10)
    part = values[:size] if first else values[-size:]
    return sum(part) / len(part) if part else float("nan")


# --------------------------------------------------------------------------- contenders
# Each returns (loop seconds, mean reward per step).


def run_tunedsl(model_dir: str, steps: int, seed: int, workdir: str) -> tuple[float, list[float]]:
    import tunedsl
    from tunedsl.backends.local.run import run_local
    from tunedsl.backends.trinity.config import to_yaml, trinity_config
    from tunedsl.runtime.rundir import run_name

    never = str(steps + 1)  # no periodic eval or checkpoint inside the timed loop (as for TRL)
    graph = tunedsl.load_experiment(EXPERIMENT, overrides=[
        f"train_dataset.total_steps={steps}", f"model.model_path={model_dir}",
        f"checkpoint_root_dir={workdir}", f"algorithm.seed={seed}",
        f"algorithm.eval_interval_steps={never}", f"algorithm.save_interval_steps={never}",
    ])
    algorithm = graph.algorithm
    assert (algorithm.group_size, algorithm.batch_size) == (GROUP, BATCH)
    assert algorithm.learning_rate == LR
    assert (graph.model.max_tokens, graph.model.temperature) == (MAX_NEW_TOKENS, TEMPERATURE)
    assert not algorithm.kl_coef
    ends: list[float] = []
    first_step_seconds: list[float] = []

    def on_step_end(report: Any) -> None:
        ends.append(time.perf_counter())
        if not first_step_seconds:
            first_step_seconds.append(report.metrics["time/step_seconds"])

    name = run_name(graph)
    summary = run_local(graph, run_name=name, trinity_yaml=to_yaml(trinity_config(graph, name=name)),
                        progress=False, on_step_end=on_step_end)
    # run_local's own clock also covers the eval before the first step, and the final eval,
    # checkpoint and reward plot; the loop starts where the first step's own timer started.
    seconds = ends[-1] - (ends[0] - first_step_seconds[0])
    return seconds, list(summary.rewards)


def run_trl(model_dir: str, steps: int, seed: int, workdir: str) -> tuple[float, list[float]]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rewards: list[float] = []

    def reward(prompts: list, completions: list, answer: list[str], **_: Any) -> list[float]:
        # Called once per step (steps_per_generation = num_iterations = 1) with its 120 samples.
        values = [arith_reward(c[0]["content"], a) for c, a in zip(completions, answer)]
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

    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": row["question"]}],
                                  "answer": row["answer"]} for row in train_rows()])
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    config = GRPOConfig(
        output_dir=os.path.join(workdir, "trl"),
        # one step = 15 prompts x 8 generations: TRL's batch sizes count completions
        per_device_train_batch_size=BATCH * GROUP, gradient_accumulation_steps=1,
        num_generations=GROUP, max_completion_length=MAX_NEW_TOKENS, max_steps=steps,
        temperature=TEMPERATURE, top_p=1.0, top_k=0,
        beta=0.0, num_iterations=1, epsilon=0.2, loss_type="dapo",  # token-mean, like tunedsl
        learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
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
    return clock.end - clock.start, rewards


def run_bare(model_dir: str, steps: int, seed: int, workdir: str) -> tuple[float, list[float]]:
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    rows = train_rows()
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": r["question"]}],
                                             add_generation_prompt=True, tokenize=True,
                                             return_dict=True)["input_ids"] for r in rows]
    generation = GenerationConfig(do_sample=True, temperature=TEMPERATURE, top_k=0, top_p=1.0,
                                  max_new_tokens=MAX_NEW_TOKENS, pad_token_id=pad, eos_token_id=eos)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)

    def order(step: int) -> list[int]:  # a seeded shuffle per epoch, BATCH rows a step
        out = []
        for position in range(step * BATCH, (step + 1) * BATCH):
            epoch, offset = divmod(position, len(rows))
            shuffled = list(range(len(rows)))
            random.Random(seed * 1000 + epoch).shuffle(shuffled)
            out.append(shuffled[offset])
        return out

    rewards: list[float] = []
    start = time.perf_counter()
    for step in range(steps):
        chosen = [i for i in order(step) for _ in range(GROUP)]
        width = max(len(prompts[i]) for i in chosen)
        input_ids = torch.tensor([[pad] * (width - len(prompts[i])) + prompts[i] for i in chosen])
        attention = (torch.arange(width) >= torch.tensor(
            [width - len(prompts[i]) for i in chosen]).unsqueeze(-1)).long()
        model.eval()
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=attention,
                                 generation_config=generation)
        response = out[:, width:]
        # a response ends at its first eos (kept, it was sampled); what follows is padding
        after_eos = (response == eos).long().cumsum(-1) - (response == eos).long()
        mask = (after_eos == 0).float()
        texts = tokenizer.batch_decode(response.masked_fill(mask == 0, pad),
                                       skip_special_tokens=True)
        reward = torch.tensor([arith_reward(t, rows[i]["answer"]) for t, i in zip(texts, chosen)])
        rewards.append(float(reward.mean()))
        grouped = reward.view(-1, GROUP)
        advantages = ((grouped - grouped.mean(-1, keepdim=True))
                      / (grouped.std(-1, keepdim=True) + 1e-6)).view(-1)
        model.train()
        full = torch.cat([input_ids, response], dim=1)
        full_attention = torch.cat([attention, mask.long()], dim=1)
        positions = (full_attention.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=full, attention_mask=full_attention, position_ids=positions).logits
        logits = logits[:, width - 1:-1].float() / TEMPERATURE
        logprobs = logits.log_softmax(-1).gather(-1, response.unsqueeze(-1)).squeeze(-1)
        loss = -(advantages.unsqueeze(-1) * logprobs * mask).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
    return time.perf_counter() - start, rewards


RUNNERS = {"tunedsl": run_tunedsl, "trl": run_trl, "bare": run_bare}


def worker(args: argparse.Namespace) -> int:
    import resource

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    seconds, rewards = RUNNERS[args.worker](args.model, args.steps, args.seed, args.workdir)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    result = {"name": args.worker, "seed": args.seed, "steps": len(rewards), "seconds": seconds,
              "rewards": rewards, "peak_rss_mb": peak_mb, "threads": torch.get_num_threads()}
    Path(args.out).write_text(json.dumps(result))
    return 0


# --------------------------------------------------------------------------- parent


def launch(name: str, model_dir: str, steps: int, seed: int, threads: int | None,
           workdir: Path) -> dict[str, Any]:
    """Run one contender in a fresh interpreter; its result, with the subprocess's wall time."""
    tag = f"{name}-seed{seed}"
    out, log = workdir / f"{tag}.json", workdir / f"{tag}.log"
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path,
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false",
           "WANDB_DISABLED": "true", "MPLBACKEND": "Agg"}
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", name,
               "--model", model_dir, "--steps", str(steps), "--seed", str(seed),
               "--workdir", str(workdir / tag), "--out", str(out)]
    if threads:
        command += ["--threads", str(threads)]
    started = time.perf_counter()
    with log.open("w") as handle:
        code = subprocess.run(command, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL).returncode
    wall = time.perf_counter() - started
    if code != 0 or not out.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"{name} (seed {seed}) failed with exit {code}; the end of its log "
                           f"{log}:\n{tail}")
    result = json.loads(out.read_text())
    result["process_seconds"] = wall
    return result


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One contender over its rounds: best and median loop time, rewards averaged over seeds."""
    seconds = sorted(r["seconds"] for r in runs)
    firsts = [window_mean(r["rewards"], True) for r in runs]
    lasts = [window_mean(r["rewards"], False) for r in runs]
    steps = runs[0]["steps"]
    # the standard error of the mean last-window reward: the spread between seeds (it dwarfs
    # the sampling noise within a run), but never below the binomial noise of the samples
    p = min(max(statistics.fmean(lasts), 0.0), 1.0)
    spread = math.sqrt(p * (1 - p) / (max(1, steps // 10) * BATCH * GROUP * len(lasts)))
    if len(lasts) > 1:
        spread = max(spread, statistics.stdev(lasts) / math.sqrt(len(lasts)))
    return {"steps": steps, "rounds": len(runs), "best": seconds[0],
            "median": statistics.median(seconds),
            "samples_per_second": steps * BATCH * GROUP / seconds[0],
            "reward_first": statistics.fmean(firsts), "reward_last": statistics.fmean(lasts),
            "reward_last_each": lasts, "reward_last_se": spread,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "process_seconds": statistics.median(r["process_seconds"] for r in runs),
            "threads": runs[0]["threads"]}


def report(results: dict[str, dict[str, Any]], seeds: list[int]) -> list[str]:
    """Print the table and the goals; return the GOAL MISSED lines."""
    header = (f"{'contender':<10}{'steps':>6}{'loop s best':>13}{'loop s median':>15}"
              f"{'samples/s':>11}{'reward first10%':>17}{'reward last10%':>16}{'peak RSS MB':>13}"
              f"{'process s':>11}")
    print(header)
    print("-" * len(header))
    for name, r in results.items():
        print(f"{name:<10}{r['steps']:>6}{r['best']:>13.2f}{r['median']:>15.2f}"
              f"{r['samples_per_second']:>11.0f}{r['reward_first']:>17.3f}{r['reward_last']:>16.3f}"
              f"{r['peak_rss_mb']:>13.0f}{r['process_seconds']:>11.1f}")
    print(f"one step = {BATCH} prompts x {GROUP} samples; loop s = the training steps only, "
          f"best and median of {len(seeds)} round(s); samples/s = steps x {BATCH * GROUP} / "
          f"best loop s; "
          f"rewards = mean training reward over the first / last 10% of the steps, averaged over "
          f"seeds {', '.join(map(str, seeds))}; peak RSS = max ru_maxrss of the subprocess; "
          f"process s = median wall time of the whole subprocess (imports, model loading, "
          f"trainer set-up included)")
    if len(seeds) > 1:
        print("last-10% reward per seed: " + "; ".join(
            f"{name} " + " ".join(f"{v:.3f}" for v in r["reward_last_each"])
            for name, r in results.items()))
    missed: list[str] = []
    mine = results.get("tunedsl")
    if mine is None:
        return missed
    print()
    for other, goal in (("trl", GOAL_VS_TRL), ("bare", GOAL_VS_BARE)):
        if other in results:
            ratio = mine["samples_per_second"] / results[other]["samples_per_second"]
            median_ratio = results[other]["median"] / mine["median"]
            ok = ratio >= goal
            print(f"speed   tunedsl / {other:<4} = {ratio:5.2f}x samples/s (on median loop "
                  f"times {median_ratio:.2f}x)   goal >= {goal}x   {'ok' if ok else 'GOAL MISSED'}")
            if not ok:
                missed.append(f"GOAL MISSED: tunedsl's samples/s is {ratio:.2f}x {other}'s "
                              f"(goal >= {goal}x)")
    what = "seed-to-seed" if len(seeds) > 1 else "sampling"
    for other in ("trl", "bare"):
        if other in results:
            theirs = results[other]
            delta = mine["reward_last"] - theirs["reward_last"]
            margin = 2 * math.hypot(mine["reward_last_se"], theirs["reward_last_se"])
            ok = delta >= -margin
            print(f"reward  tunedsl - {other:<4} = {delta:+.3f} last-10% mean reward   goal >= "
                  f"-{margin:.3f} (2 s.e. of {what} noise)   {'ok' if ok else 'GOAL MISSED'}")
            if not ok:
                missed.append(f"GOAL MISSED: tunedsl's last-10% reward {mine['reward_last']:.3f} "
                              f"is below {other}'s {theirs['reward_last']:.3f} by more than "
                              f"{margin:.3f}")
    return missed


def check_judge() -> None:
    """The reward function the others use must score exactly as the experiment's judge."""
    import asyncio

    from examples.arith.experiment import exact

    async def both() -> None:
        for row in train_rows():
            for reply in ("", " ", row["answer"], f" {row['answer']}", "1", "10", "=", "<eos>"):
                expected = (await exact(row, reply)).reward
                if arith_reward(reply, row["answer"]) != expected:
                    raise SystemExit(f"arith_reward disagrees with the judge on {row} / {reply!r}")

    asyncio.run(both())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100,
                        help="training steps per run (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first round (default 0)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds; round i runs every contender once with seed SEED+i, in a "
                             "rotated order (default 3)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads in every contender; 0 keeps torch's default (one per "
                             "core). Default 1: on a 2-core VM, 2-thread runs of the same work "
                             "vary up to 5x between runs")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help=f"comma-separated subset of {','.join(CONTENDERS)}")
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
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be at least 1")

    sys.path.insert(0, str(ROOT))
    from examples.arith.tiny_model import build_tiny_model

    check_judge()
    import transformers

    transformers.utils.logging.disable_progress_bar()  # "Writing model shards" on stderr
    workdir = Path(tempfile.mkdtemp(prefix="tunedsl-bench-"))
    model_dir = build_tiny_model(str(workdir / "tiny-model"), seed=0)
    seeds = [args.seed + i for i in range(args.repeats)]
    print(f"GRPO on examples/arith: {args.steps} steps x {BATCH} prompts x {GROUP} samples, "
          f"lr {LR}, {args.repeats} round(s) (seeds {', '.join(map(str, seeds))}), torch threads "
          f"{args.threads or 'default (one per core)'}; one tiny model for all: {model_dir}",
          flush=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    keep = args.keep
    began = time.perf_counter()
    try:
        for round_, seed in enumerate(seeds):
            order = names[round_ % len(names):] + names[:round_ % len(names)]
            for name in order:
                print(f"round {round_ + 1}/{len(seeds)} seed {seed}: {name:<8} ...", end=" ",
                      flush=True)
                r = launch(name, model_dir, args.steps, seed, args.threads, workdir)
                runs[name].append(r)
                rate = args.steps * BATCH * GROUP / r["seconds"]
                print(f"loop {r['seconds']:6.2f} s ({rate:7.0f} samples/s), "
                      f"process {r['process_seconds']:5.1f} s", flush=True)
            if round_ == 0 and args.repeats > 1:
                projected = (time.perf_counter() - began) * args.repeats
                if projected > 600:
                    print(f"note: the whole benchmark will take about {projected / 60:.0f} min; "
                          f"--steps or --repeats lower it", flush=True)
    except RuntimeError:
        keep = True  # the failed contender's log stays for reading
        raise
    finally:
        if keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    slow = [name for name, rs in runs.items() if min(r["seconds"] for r in rs) / args.steps > 1.0]
    if slow:
        print(f"note: {', '.join(slow)} took over 1 s a step; --steps lowers the benchmark's time")
    print()
    missed = report({name: summarize(rs) for name, rs in runs.items()}, seeds)
    if missed:
        print()
        for line in missed:
            print(line)
    print(f"\nbenchmark wall time {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
