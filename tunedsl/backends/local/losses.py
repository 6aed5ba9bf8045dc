"""The local trainer's losses: Trinity-RFT 0.6.0's policy losses, KL losses, entropy bonus
and loss aggregation, over the local trainer's packed batches.

Trinity computes a loss over a padded batch, one experience (model call) a row
(``algorithm/policy_loss_fn``, ``kl_fn``, ``entropy_loss_fn``, ``utils.aggregate_loss``).
The local trainer packs a step's calls into several passes, and several calls into one row
(`tunedsl.backends.local.grpo.Batch`), so each aggregation becomes a weight per token
computed from the whole step (`StepShape`): the sum over every pass of weight times
per-token loss is the loss Trinity computes over the step's experiences in one batch, and
so is its gradient. ``tests/test_local_losses.py`` feeds both the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

from ...dsl.algorithms import ResolvedAlgorithm

#: The metric each policy loss reports itself as (Trinity's trainer logs it under actor/).
LOSS_METRICS = {"ppo": "pg_loss", "gspo": "pg_loss", "cispo": "cispo_loss",
                "sapo": "sapo_loss", "opmd": "opmd_loss", "topr": "topr_loss",
                "sft": "sft_loss", "rec": "pg_loss"}
#: An SFT step's loss, as Trinity's trainer logs it.
SFT_LOSS_METRIC = "actor/sft_loss"
#: Trinity's guard against dividing by an empty mask (``masked_mean``, ``aggregate_loss``).
_EMPTY = 1e-8


@attrs.frozen
class StepShape:
    """What aggregating over a whole step needs to know of it.

    Attributes:
        mode: Trinity's ``loss_agg_mode``.
        tokens: Response tokens in the loss (masked replies' tokens are not).
        sequences: Experiences (model calls) in the step, masked ones included (Trinity's
            sequence means count them, with a loss of 0).
        longest: The longest response (Trinity pads the batch's responses to it; its
            ``seq-mean-token-sum-norm`` divides by that width).
    """

    mode: str
    tokens: int
    sequences: int
    longest: int

    @classmethod
    def of(cls, mode: str, lengths: Sequence[int], masked: Sequence[bool]) -> StepShape:
        """The shape of a step whose calls have replies of ``lengths`` tokens, the
        ``masked`` ones out of the loss."""
        return cls(mode=mode, tokens=sum(n for n, out in zip(lengths, masked) if not out),
                   sequences=len(lengths), longest=max(lengths, default=0))

    def weights(self, mask: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
        """Each token's weight in the step's aggregate (0 outside ``mask``); ``sample``
        numbers the call each token belongs to within the pass."""
        if self.mode == "token-mean":
            return mask / (self.tokens + _EMPTY)
        if self.mode == "seq-mean-token-sum":
            return mask / self.sequences
        if self.mode == "seq-mean-token-sum-norm":
            return mask / (self.longest + _EMPTY)
        # seq-mean-token-mean: each call's token mean, averaged over calls
        lengths = per_sample_sum(mask, sample, mask)
        return mask / ((lengths[sample.clamp(min=0)] + _EMPTY) * self.sequences)

    def token_mean(self, values: torch.Tensor, mask: torch.Tensor) -> float:
        """This pass's share of a token mean over the step (Trinity's metrics)."""
        return float((values.detach() * mask).sum()) / (self.tokens + _EMPTY)


def per_sample_sum(values: torch.Tensor, sample: torch.Tensor,
                   mask: torch.Tensor) -> torch.Tensor:
    """The masked sum of ``values`` for each call of the pass (indexed by ``sample``)."""
    count = int(sample.max()) + 1 if sample.numel() and int(sample.max()) >= 0 else 0
    sums = torch.zeros(count, dtype=values.dtype)
    inside = sample >= 0
    return sums.index_add(0, sample[inside], (values * mask)[inside])


def _ratio(logprobs: torch.Tensor, old: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    log_ratio = logprobs - old
    return log_ratio, torch.exp(log_ratio)


@attrs.frozen
class LossPart:
    """One pass's contribution: its share of the step's loss (to differentiate) and of
    each metric, named as Trinity's trainer logs them."""

    loss: torch.Tensor
    metrics: dict[str, float]


class PolicyLoss:
    """The step's loss for a resolved algorithm: policy loss, minus the entropy bonus,
    plus the KL loss (Trinity's ``TrinityPolicyLoss``), each aggregated with the
    algorithm's ``loss_agg_mode``.

    Args:
        algorithm: What to compute.
        shape: The step being trained on.
    """

    def __init__(self, algorithm: ResolvedAlgorithm, shape: StepShape) -> None:
        self.algorithm, self.shape = algorithm, shape
        self.args: Mapping[str, Any] = algorithm.policy_loss_args
        self._policy = getattr(self, f"_{algorithm.policy_loss_fn}")
        # rec aggregates its own way whatever loss_agg_mode says (the KL and entropy terms
        # still follow it): a token mean, or GSPO's mean of sequence means.
        own_mode = ("seq-mean-token-mean" if self.args.get("clip_mode") == "gspo-one-side"
                    else "token-mean") if algorithm.policy_loss_fn == "rec" else shape.mode
        self._policy_shape = attrs.evolve(shape, mode=own_mode)

    def __call__(self, logprobs: torch.Tensor, *, old: torch.Tensor, advantages: torch.Tensor,
                 mask: torch.Tensor, sample: torch.Tensor,
                 reference: torch.Tensor | None = None,
                 entropy: torch.Tensor | None = None) -> LossPart:
        """The contribution of one pass: per-token ``logprobs`` (differentiable), the old
        log-probs they were sampled with, advantages, the loss mask, each token's call
        (``-1`` outside responses), the reference model's log-probs (when the algorithm
        has a KL loss) and each token's entropy (differentiable when it has a bonus)."""
        weights = self.shape.weights(mask, sample)
        per_token, metrics = self._policy(logprobs, old, advantages, mask, sample)
        loss = (per_token * self._policy_shape.weights(mask, sample)).sum()
        if self.algorithm.policy_loss_fn == "opmd":  # regularised towards the current policy
            loss = loss / (1.0 + self.args["tau"])
        metrics[LOSS_METRICS[self.algorithm.policy_loss_fn]] = float(loss.detach())
        if entropy is not None and self.algorithm.entropy_coef:
            bonus = (entropy * weights).sum()
            metrics["entropy_loss"] = float(bonus.detach())
            loss = loss - self.algorithm.entropy_coef * bonus
        if reference is not None and self.algorithm.uses_reference:
            kl = (kl_divergence(self.algorithm.kl_loss_fn, logprobs, reference, old)
                  * weights).sum()
            metrics["kl_loss"] = float(kl.detach())
            loss = loss + self.algorithm.kl_coef * kl
        metrics["final_loss"] = float(loss.detach())
        return LossPart(loss=loss, metrics=metrics)

    # Each policy loss: per-token values (aggregated by the caller) and metric shares.

    def _ppo(self, logprobs, old, advantages, mask, sample):
        args = self.args
        low = args.get("clip_range_low", args.get("clip_range"))
        high = args.get("clip_range_high", args.get("clip_range"))
        low = args["clip_range"] if low is None else low
        high = args["clip_range"] if high is None else high
        log_ratio = logprobs - (logprobs.detach() if args["fallback_to_policy_gradient"]
                                else old)
        log_ratio = log_ratio.clamp(-20.0, 20.0)
        ratio = torch.exp(log_ratio)
        unclipped = -advantages * ratio
        clipped = -advantages * ratio.clamp(1.0 - low, 1.0 + high)
        clip_max = torch.maximum(unclipped, clipped)
        floor = -advantages * args["clip_ratio_c"]
        dual = torch.minimum(floor, clip_max)
        losses = torch.where(advantages < 0, dual, clip_max)
        shape = self.shape
        metrics = {"pg_clipfrac": shape.token_mean((clipped > unclipped).float(), mask),
                   "pg_clipfrac_lower": shape.token_mean(
                       (clip_max > floor).float() * (advantages < 0).float(), mask),
                   "ppo_kl": shape.token_mean(-log_ratio, mask)}
        if args["enable_sequence_masking"]:
            kl = -log_ratio
            sequence_kl = per_sample_sum(kl, sample, mask) / (
                per_sample_sum(torch.ones_like(kl), sample, mask) + 1e-10)
            high_kl = (sequence_kl > args["delta_sequence_masking"])[sample.clamp(min=0)]
            masked = (advantages < 0) & high_kl & (sample >= 0)
            losses = losses * (~masked).float()
            metrics["seq_mask/masked_tokens"] = shape.token_mean(masked.float(), mask)
            metrics["seq_mask/mean_sequence_kl"] = float(sequence_kl.detach().sum()) / \
                shape.sequences
        return losses, metrics

    def _gspo(self, logprobs, old, advantages, mask, sample):
        low = self.args.get("clip_range_low", self.args.get("clip_range"))
        high = self.args.get("clip_range_high", self.args.get("clip_range"))
        log_ratio = logprobs - old
        calls = per_sample_sum(torch.ones_like(log_ratio), sample, mask)
        sequence = per_sample_sum(log_ratio.detach(), sample, mask) / (calls + _EMPTY)
        ratio = torch.exp(logprobs - logprobs.detach() + sequence[sample.clamp(min=0)])
        unclipped = -advantages * ratio
        clipped = -advantages * ratio.clamp(1.0 - low, 1.0 + high)
        shape = self.shape
        metrics = {"pg_clipfrac": shape.token_mean((clipped > unclipped).float(), mask),
                   "ppo_kl": shape.token_mean(-log_ratio, mask),
                   # this pass's calls' share of the mean over the step's calls
                   "ppo_kl_seq": float(-sequence.sum()) / shape.sequences}
        return torch.maximum(unclipped, clipped), metrics

    def _cispo(self, logprobs, old, advantages, mask, sample):
        args = self.args
        log_ratio, ratio = _ratio(logprobs, old)
        weight = ratio.clamp(1.0 - args["clip_range_low"], 1.0 + args["clip_range_high"])
        keep = torch.ones_like(ratio)
        if args["enable_mask_clip"]:
            keep = torch.where((ratio > 1.0 + args["mask_clip_range_high"]) & (advantages > 0),
                               torch.zeros_like(ratio), keep)
            keep = torch.where((ratio < 1.0 - args["mask_clip_range_low"]) & (advantages < 0),
                               torch.zeros_like(ratio), keep)
        losses = -advantages * weight.detach() * keep.detach() * logprobs
        return losses, {"ppo_kl": self.shape.token_mean(-log_ratio, mask),
                        "unmasked_frac": self.shape.token_mean(keep, mask)}

    def _sapo(self, logprobs, old, advantages, mask, sample):
        log_ratio, ratio = _ratio(logprobs, old)
        tau = torch.where(advantages > 0, torch.tensor(float(self.args["tau_pos"])),
                          torch.tensor(float(self.args["tau_neg"])))
        gate = torch.sigmoid(tau * (ratio - 1)) * (4.0 / tau)
        losses = -advantages * gate.detach() * logprobs
        shape = self.shape
        return losses, {"ppo_kl": shape.token_mean(-log_ratio, mask),
                        "avg_soft_gate": shape.token_mean(gate, mask),
                        "avg_ratio": shape.token_mean(ratio, mask),
                        "pos_adv_frac": shape.token_mean((advantages > 0).float(), mask)}

    def _opmd(self, logprobs, old, advantages, mask, sample):
        return -advantages * logprobs, {}

    def _sft(self, logprobs, old, advantages, mask, sample):
        return -logprobs, {}  # the reply's negative log-likelihood

    def _topr(self, logprobs, old, advantages, mask, sample):
        _, ratio = _ratio(logprobs, old)
        alpha = torch.where(advantages <= self.args["advantage_threshold"], ratio.clamp(0.0, 1.0),
                            torch.ones_like(ratio))
        return -alpha.detach() * advantages * logprobs, {
            "avg_alpha": self.shape.token_mean(alpha, mask),
            "avg_ratio": self.shape.token_mean(ratio, mask)}


    def _rec(self, logprobs, old, advantages, mask, sample):
        # Trinity's RECPolicyLossFn: REINFORCE on the log-probs of tokens whose (detached)
        # ratio is in range, with optional weights and a regulariser.
        args = self.args
        low, high = args["epsilon_low"], args["epsilon_high"]
        ratio = torch.exp(logprobs - old).detach()
        gaining, losing = advantages >= 0, advantages <= 0
        mode = args["clip_mode"]
        sequence_ratio = None
        if mode == "gspo-one-side":
            calls = per_sample_sum(torch.ones_like(ratio), sample, mask)
            means = per_sample_sum((logprobs - old).detach(), sample, mask) / (calls + _EMPTY)
            sequence_ratio = torch.exp(means)[sample.clamp(min=0)]
            in_range = (sequence_ratio <= 1 + high) & gaining | \
                (sequence_ratio >= 1 - low) & losing
        elif mode == "two-side":
            in_range = (ratio >= 1 - low) & (ratio <= 1 + high)
        elif mode == "one-side":
            in_range = (ratio <= 1 + high) & gaining | losing & (ratio >= 1 - low)
        elif mode == "ring":
            in_range = (ratio >= 1 - low) & (ratio <= 1 + high) | \
                gaining & (ratio <= 1 - args["epsilon_low_prime"]) | \
                losing & (ratio >= 1 + args["epsilon_high_prime"])
        else:
            in_range = torch.ones_like(ratio, dtype=torch.bool)
        weighted = {"importance_sampling": lambda: advantages * ratio,
                    "gspo_importance_sampling": lambda: advantages * sequence_ratio,
                    "advantage": lambda: advantages * torch.exp(advantages / args["temp"]),
                    }.get(args["weight"], lambda: advantages)()
        losses = -weighted * logprobs * in_range.float()
        if args["regularizer"] == "forward-kl":
            losses = losses - args["regularizer_coef"] * logprobs
        elif args["regularizer"] == "k2":
            losses = losses + args["regularizer_coef"] * (logprobs - old).square()
        return losses, {"pg_clipfrac": self.shape.token_mean((~in_range).float(), mask)}


def kl_divergence(name: str, logprobs: torch.Tensor, reference: torch.Tensor,
                  old: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token KL estimate of the policy from the reference (Trinity's ``kl_fn``)."""
    if name == "k1":
        return logprobs - reference
    if name == "k2":
        return (logprobs - reference).square() * 0.5
    if name == "abs":
        return torch.abs(logprobs - reference)
    log_ratio = reference - logprobs
    if name == "low_var_kl":
        log_ratio = log_ratio.clamp(-20, 20)
        return (torch.exp(log_ratio) - log_ratio - 1).clamp(-10, 10)
    k3 = log_ratio.exp() - 1 - log_ratio
    if name == "corrected_k3" and old is not None:
        return torch.exp(logprobs - old).clamp(0.0, 2.0) * k3
    return k3  # k3 (and corrected_k3 without old log-probs)
