"""Every metric the local backend logs (``metrics.jsonl`` and the monitor), with what it
measures: the source of the documentation's metrics reference, and tested against the
metrics real runs log (a name no row matches fails ``tests/test_metric_names.py``).

Names are Trinity-RFT's where both backends measure the same thing, so one dashboard reads
either backend's runs. A ``{placeholder}`` stands for one path segment or more.
"""

from __future__ import annotations

import re

#: (name pattern, what it measures), in the order the reference lists them.
LOCAL_METRICS: tuple[tuple[str, str], ...] = (
    ("step", "The training step the line is for (1, 2, ...)."),
    # rollouts
    ("rollout/reward/{stat}", "The step's rollout rewards: `mean`, `max`, `min`, `std`."),
    ("rollout/{metric}/{stat}", "A number your workflow or judge returned in `metrics`, "
                                "over the step's rollouts: `mean`, `max`, `min`."),
    ("rollout/errors", "Rollouts whose workflow or judge raised, timed out or returned a "
                       "bad reward."),
    ("rollout/groups_skipped", "Groups not trained on because every rollout of theirs "
                               "failed."),
    ("rollout/groups_dropped_for_failures", "Groups dropped whole because one rollout "
                                            "failed (`on_failed_rollout = \"drop_group\"`)."),
    ("rollout/truncated", "Replies cut by `max_tokens` (finish reason `length`)."),
    ("rollout/masked", "Truncated replies left out of the loss "
                       "(`on_truncated_reply = \"mask\"`)."),
    ("rollout/prefix_cache_hit", "The share of prompt tokens the engine took from its "
                                 "prefix cache instead of computing."),
    ("response_length/{stat}", "Reply length in tokens over the step's samples: `mean`, "
                               "`max`, `min`."),
    # what trains
    ("train/samples", "Samples (model calls, or conversations for `sft`) the step trained on."),
    ("train/carried_samples", "Samples kept for a later step while a dynamic-sampling "
                              "batch (`dapo`) is not yet full."),
    ("advantage/filtered_count", "Samples of groups whose rewards all agreed, dropped by "
                                 "`std_threshold` (DAPO's dynamic sampling)."),
    ("advantage/skipped_groups", "Groups dropped by `std_threshold`."),
    ("advantage/kl/{stat}", "`on_policy_distill`: the teacher-minus-student log-prob per "
                            "sample: `mean`, `std`."),
    ("advantage/advantages/mean", "`on_policy_distill`: the mean summed advantage per "
                                  "sample."),
    # the update
    ("actor/pg_loss", "The policy loss (`ppo`, `gspo`, `rec`)."),
    ("actor/{loss}_loss", "The policy loss under its part's name: `cispo_loss`, "
                          "`sapo_loss`, `opmd_loss`, `topr_loss`, `sft_loss`."),
    ("actor/kl_loss", "The KL loss to the frozen reference model (before its weight)."),
    ("actor/entropy_loss", "The entropy bonus, where `entropy_loss_fn` adds one."),
    ("actor/final_loss", "The loss the step's gradient came from: policy loss, KL and "
                         "entropy terms combined."),
    ("actor/entropy", "The policy's mean token entropy over the trained tokens."),
    ("actor/ppo_kl", "The mean KL between the sampling and the updated policy."),
    ("actor/ppo_kl_seq", "`gspo`: that KL per sequence."),
    ("actor/pg_clipfrac", "The share of tokens whose ratio the clip held."),
    ("actor/pg_clipfrac_lower", "The share held by the lower clip (`ppo` with "
                                "`clip_ratio_c`)."),
    ("actor/unmasked_frac", "`cispo`: the share of tokens that kept a gradient."),
    ("actor/avg_soft_gate", "`sapo`: the mean soft gate."),
    ("actor/avg_ratio", "`sapo`, `topr`: the mean importance ratio."),
    ("actor/pos_adv_frac", "`sapo`: the share of tokens with a positive advantage."),
    ("actor/avg_alpha", "`topr`: the mean weight of a token's gradient (1 for positive "
                               "rewards, the truncated ratio for negative ones)."),
    ("actor/seq_mask/{stat}", "`rec` with a sequence clip: `masked_tokens`, the share "
                              "of tokens masked, and `mean_sequence_kl`."),
    ("actor/grad_norm", "The gradient norm before clipping (`grad_clip`)."),
    ("actor/lr", "The learning rate of the step, after the schedule."),
    # time
    ("time/step_seconds", "Wall time of the step: rollouts and update."),
    ("time/steps_per_second", "Steps per second (1 / `time/step_seconds`)."),
    ("time/samples_per_second", "Rollouts (or conversations) per second."),
    ("time/model_seconds", "Seconds spent in the model's forward and backward passes."),
    # evaluation
    ("eval/{taskset}/{metric}/mean@{repeats}", "Evaluation during training "
                                               "(`eval_interval_steps`): the mean over "
                                               "`eval_dataset` of the reward (`reward`) or "
                                               "a metric your code returned."),
)


def _regex(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[a-z]+\})", pattern)
    return re.compile("".join(".+" if part.startswith("{") else re.escape(part)
                              for part in parts) + r"\Z")


def described(name: str) -> bool:
    """Whether a row of `LOCAL_METRICS` describes the metric ``name``."""
    return any(_regex(pattern).match(name) for pattern, _ in LOCAL_METRICS)


def markdown() -> str:
    """The metrics reference's table."""
    rows = ["| metric | what it measures |", "|---|---|"]
    rows += [f"| `{name}` | {text} |" for name, text in LOCAL_METRICS]
    return "\n".join(rows) + "\n"
