"""Credit per turn: GiGPO on the corridor's turns against the same walks credited whole.

    python benchmarks/turn_credit.py [--steps N] [--seeds K] [--threads T]

Needs the ``local`` extra only; about 5 minutes with the defaults on 2 CPU cores (3
experiments x 3 seeds x 300 steps). Nothing is downloaded.

The workload is ``examples/corridor/experiment.py``: the arith example's tiny model (2
layers, 64 wide, random weights from a fixed seed) walks a corridor of six doors in up to
eight one-digit turns, 4 tasks (door codes) x 8 walks a step, lr 1e-3. A turn that opens
its door earns 1 and ends with ``model.end_turn(reward=..., state=cell)``:

  gigpo       ``Corridor``: each move's advantage is its walk's total against its group's,
              plus its turn's return against the moves made from the same cell;
  by_walk     ``CorridorByWalk``: ``multi_step_grpo``, every move of a walk carries the
              walk's normalised total, the doors it opened (the turns are ignored);
  to_the_end  ``CorridorToTheEnd``: ``multi_step_grpo`` on a sparse reward, 1 for reaching
              the end and 0 short of it (no step rewards).

Each run is a fresh subprocess (``run_local``, periodic eval and checkpoints off) reporting
the doors its walks opened per step (their mean over the step, whatever the walks'
reward). The table gives per experiment, averaged over the seeds: the mean doors of the
first and last 10% of the steps, the first step whose 10-step mean reached 3 doors (of 6;
"-" if never), and the loop time. Below it, gigpo's last-10% doors as a ratio of the
others' measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EXPERIMENTS = {"gigpo": "Corridor", "by_walk": "CorridorByWalk", "to_the_end": "CorridorToTheEnd"}
THRESHOLD = 3.0  # doors a walk opens, as a 10-step mean


def worker(args: argparse.Namespace) -> int:
    import torch

    import tunedsl
    from benchmarks.local_grpo import timed_local_run

    if args.threads:
        torch.set_num_threads(args.threads)
    never = str(args.steps + 1)
    graph = tunedsl.load_experiment(
        f"examples.corridor.experiment:{EXPERIMENTS[args.worker]}", overrides=[
            f"train_dataset.total_steps={args.steps}", f"model.model_path={args.model}",
            f"checkpoint_root_dir={args.workdir}", f"algorithm.seed={args.seed}",
            f"algorithm.eval_interval_steps={never}", f"algorithm.save_interval_steps={never}"])
    seconds, _, reports = timed_local_run(graph)
    # doors opened per walk, whatever the walk's reward (to_the_end's is 0 or 1)
    Path(args.out).write_text(json.dumps({"seconds": seconds, "rewards": [
        report["rollout/doors/mean"] for report in reports]}))
    return 0


def launch(name: str, model: str, steps: int, seed: int, threads: int,
           workdir: Path) -> dict[str, Any]:
    """One experiment's run in a fresh interpreter."""
    from benchmarks.workers import run_worker

    return run_worker(__file__, f"{name}-seed{seed}", workdir, [
        "--worker", name, "--model", model, "--steps", str(steps), "--seed", str(seed)],
        threads)


def first_reaching(rewards: list[float], threshold: float, window: int = 10) -> int | None:
    """The first step (1-based) whose trailing ``window``-step mean reward is ``threshold``
    or more."""
    for end in range(window, len(rewards) + 1):
        if statistics.fmean(rewards[end - window:end]) >= threshold:
            return end
    return None


def main() -> int:
    from benchmarks.workers import add_worker_arguments

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    add_worker_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    from benchmarks.local_grpo import window_mean
    from examples.arith.tiny_model import build_tiny_model

    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in EXPERIMENTS}
    with tempfile.TemporaryDirectory(prefix="tunedsl-turn-credit-") as folder:
        workdir = Path(folder)
        model = build_tiny_model(str(workdir / "model"))
        for seed in range(args.seeds):
            order = list(EXPERIMENTS) if seed % 2 == 0 else list(reversed(EXPERIMENTS))
            for name in order:
                runs[name].append(launch(name, model, args.steps, seed, args.threads,
                                         workdir))
    header = (f"{'experiment':<12}{'doors first10%':>17}{'doors last10%':>16}"
              f"{'steps to ' + format(THRESHOLD, 'g') + ' doors':>18}{'loop s':>9}")
    print(header)
    print("-" * len(header))
    last = {}
    for name, rs in runs.items():
        last[name] = statistics.fmean(window_mean(r["rewards"], False) for r in rs)
        reached = [first_reaching(r["rewards"], THRESHOLD) for r in rs]
        shown = "-" if None in reached else f"{statistics.fmean(reached):.0f}"
        print(f"{name:<12}"
              f"{statistics.fmean(window_mean(r['rewards'], True) for r in rs):>17.3f}"
              f"{last[name]:>16.3f}{shown:>18}"
              f"{statistics.fmean(r['seconds'] for r in rs):>9.1f}")
    print(f"{args.steps} steps of 4 tasks x 8 walks; seeds 0..{args.seeds - 1} (mean); torch "
          f"threads: {args.threads or 'default'}")
    print(f"gigpo's last-10% doors / by_walk's: {last['gigpo'] / max(last['by_walk'], 1e-9):.2f}x, "
          f"/ to_the_end's: {last['gigpo'] / max(last['to_the_end'], 1e-9):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
