"""``reward_curve.png``: the mean training (and eval) reward per step of a whole local run,
plotted from ``metrics.jsonl`` when the run ends."""

from __future__ import annotations

from pathlib import Path

from ...dsl.trinity_fields import TRAIN_REWARD_METRIC
from ...runs.run_files import REWARD_CURVE_PNG
from .monitors import metric_rows


def plot_reward_curve(run_dir: Path, eval_key: str) -> Path | None:
    """Plot mean training reward per step from ``metrics.jsonl`` (the whole run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = metric_rows(run_dir)
    train = [(r["step"], r[TRAIN_REWARD_METRIC]) for r in rows if TRAIN_REWARD_METRIC in r]
    if not train:
        return None
    figure, axes = plt.subplots(figsize=(6, 3.5))
    axes.plot(*zip(*train), label="train reward (mean)")
    evals = [(r["step"], r[eval_key]) for r in rows if eval_key in r]
    if evals:
        axes.plot(*zip(*evals), "o-", label="eval reward (mean)")
    axes.set_xlabel("step")
    axes.set_ylabel("reward")
    axes.legend()
    figure.tight_layout()
    path = run_dir / REWARD_CURVE_PNG
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
