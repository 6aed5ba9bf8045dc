"""GRPO's arithmetic: group-normalized advantages and the clipped policy-gradient loss.

Pure functions over tensors, so tests can check them against numbers worked by hand.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Sequence
from typing import Any

import attrs
import torch

from .engine import top_p_filter


def group_advantages(rewards: Sequence[float], eps: float = 1e-6) -> list[float]:
    """``(r - mean) / (std + eps)`` within one task's group (std with Bessel's correction,
    as Trinity's GRPO advantage computes it); a group of equal rewards teaches nothing."""
    n = len(rewards)
    if n < 2:
        raise ValueError("a group needs at least 2 rewards to compare")
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [(r - mean) / (std + eps) for r in rewards]


@attrs.frozen
class TrainingSample:
    """One model call to learn from: its tokens, how it was sampled, and its advantage."""

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    old_logprobs: tuple[float, ...]
    advantage: float
    temperature: float = 1.0
    top_p: float = 1.0


def shared_rows(samples: Sequence[TrainingSample]) -> list[tuple[TrainingSample, ...]]:
    """Samples in rows for the training passes: a sample whose prompt starts with the
    sample before's prompt and response (a trajectory's next call, which repeats the
    conversation so far) joins that sample's row, so one pass over the row's last sequence
    computes the log-probs of every response in it, as a causal model's would apart."""
    rows: list[list[TrainingSample]] = []
    for sample in samples:
        if rows:
            before = rows[-1][-1]
            size = len(before.prompt_ids)
            if sample.prompt_ids[:size] == before.prompt_ids and \
                    sample.prompt_ids[size:size + len(before.response_ids)] == \
                    before.response_ids:
                rows[-1].append(sample)
                continue
        rows.append([sample])
    return [tuple(row) for row in rows]


@attrs.frozen
class Batch:
    """Right-padded tensors for rows of samples; ``mask`` marks response tokens.

    A row is one sample, or samples of which each extends the one before (`shared_rows`):
    the row holds the last one's tokens and every sample's response positions, so the
    advantages, sampling temperatures and top-p are per token, like the old log-probs.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    targets: torch.Tensor  # the token each position predicts (input shifted left)
    mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    temperature: torch.Tensor
    top_p: torch.Tensor

    @classmethod
    def collate(cls, rows: Sequence[TrainingSample | Sequence[TrainingSample]],
                pad_token_id: int) -> Batch:
        """Pack samples (or rows of them); position ``t`` predicts token ``t + 1``."""
        rows = [(row,) if isinstance(row, TrainingSample) else tuple(row) for row in rows]
        samples = [sample for row in rows for sample in row]
        width = max(len(row[-1].prompt_ids) + len(row[-1].response_ids) for row in rows)
        columns: dict[str, list[list[Any]]] = {name: [] for name in (
            "input", "attention", "target", "old", "sample")}
        index = 0
        for row in rows:  # plain lists and one tensor each: fast for many short rows
            tokens = [*row[-1].prompt_ids, *row[-1].response_ids]
            pad = width - len(tokens)
            columns["input"].append(tokens + [pad_token_id] * pad)
            columns["attention"].append([1] * len(tokens) + [0] * pad)
            columns["target"].append(tokens[1:] + [pad_token_id] * (pad + 1))
            old, which, end = [], [], 0  # which: the sample a response position is of, or -1
            for sample in row:
                before = len(sample.prompt_ids) - 1 - end
                old += [0.0] * before + list(sample.old_logprobs)
                which += [-1] * before + [index] * len(sample.response_ids)
                end = len(sample.prompt_ids) - 1 + len(sample.response_ids)
                index += 1
            columns["old"].append(old + [0.0] * (width - end))
            columns["sample"].append(which + [-1] * (width - end))
        tensors = {name: torch.tensor(values) for name, values in columns.items()}
        mask = (tensors["sample"] >= 0).float()
        which = tensors["sample"].clamp(min=0)  # padding reads the first sample's settings

        def per_token(values: list[float]) -> torch.Tensor:
            return torch.tensor(values)[which]

        return cls(
            input_ids=tensors["input"], attention_mask=tensors["attention"],
            targets=tensors["target"], mask=mask, old_logprobs=tensors["old"],
            advantages=per_token([s.advantage for s in samples]) * mask,
            temperature=per_token([s.temperature for s in samples]),
            top_p=per_token([s.top_p for s in samples]),
        )


def token_logprobs(model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of each target token under ``model``, in the distribution the
    engine sampled from (temperature, then top-p), and the mean entropy over response
    tokens (a statistic, not differentiated)."""
    # Only the columns from the first response token on can hold a response token: the
    # vocabulary's logits, their softmax and its backward pass are computed there only (the
    # prompt's columns come back as zeros, outside the mask).
    columns = batch.mask.any(0).nonzero()
    first = int(columns[0]) if len(columns) else 0
    keep = batch.input_ids.shape[1] - first
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                   **({"logits_to_keep": keep} if _keeps_logits(type(model)) else {})
                   ).logits[:, -keep:]
    scaled = logits.float() / batch.temperature[:, first:].clamp(min=1e-5).unsqueeze(-1)
    targets = batch.targets[:, first:].unsqueeze(-1)
    filtered = top_p_filter(scaled, batch.top_p[:, first:])
    if filtered is not scaled:
        # The sampled token stays in the nucleus even where the full-sequence pass ranks it
        # a hair differently from the cached pass that sampled it (a -inf log-prob would
        # zero its ratio and poison the gradient).
        filtered = filtered.scatter(-1, targets, scaled.gather(-1, targets))
    logprobs = filtered.log_softmax(-1)
    chosen = torch.nn.functional.pad(logprobs.gather(-1, targets).squeeze(-1), (first, 0))
    with torch.no_grad():
        response = logprobs[batch.mask[:, first:].bool()].exp()
        # 0 * log 0 is 0: tokens outside the nucleus add nothing.
        entropy = -torch.special.xlogy(response, response).sum(-1).mean() \
            if len(response) else torch.tensor(0.0)
    return chosen, entropy


@functools.lru_cache(maxsize=None)
def _keeps_logits(model_type: type) -> bool:
    """Whether a model class's forward takes ``logits_to_keep`` (transformers' causal LMs
    do; wrappers such as peft's, or the adapters-off reference, are called without it)."""
    forward = getattr(model_type, "forward", None) or model_type.__call__
    try:
        return "logits_to_keep" in inspect.signature(forward).parameters
    except (TypeError, ValueError):  # a callable whose signature Python cannot read
        return False


def clipped_policy_loss(logprobs: torch.Tensor, batch: Batch, clip: float = 0.2) -> torch.Tensor:
    """PPO's clipped surrogate per token: ``max(-A r, -A clip(r, 1-e, 1+e))``,
    zero outside the response (sum it and divide by the token count: token-mean)."""
    ratio = torch.exp(logprobs - batch.old_logprobs)
    unclipped = -batch.advantages * ratio
    clipped = -batch.advantages * ratio.clamp(1.0 - clip, 1.0 + clip)
    return torch.maximum(unclipped, clipped) * batch.mask


def kl_to_reference(logprobs: torch.Tensor, reference: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
    """Per-token low-variance KL estimate (k3): ``exp(ref - lp) - (ref - lp) - 1``."""
    delta = reference - logprobs
    return (torch.exp(delta) - delta - 1.0) * mask


def lr_factor(step: int, total: int, *, warmup: int = 0, schedule: str = "constant",
              min_ratio: float = 0.01) -> float:
    """The share of the learning rate at update ``step`` (0-based) of ``total``: linear
    warmup from 0 over ``warmup`` updates, then constant, or a half cosine down to
    ``min_ratio`` at ``total`` (verl's constant and cosine schedules, which Trinity's
    trainer uses)."""
    if step < warmup:
        return step / max(1, warmup)
    if schedule == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    return max(min_ratio, math.cos(math.pi * progress) * (1 - min_ratio) / 2 + (1 + min_ratio) / 2)
