"""The local trainer's batches: the training rows and the passes they are packed into, the
log-probabilities and entropy a pass computes, and the learning-rate schedule (the
advantages and losses are in `advantages` and `losses`).

Pure functions over tensors, so tests can check them against numbers worked by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
import torch

from .engine import (
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_P,
    cache_of,
    keeps_logits,
    plain_layers,
    positions_of,
    returned_cache,
    top_p_filter,
)

#: Padded tokens per forward/backward pass: many short sequences share one pass (fast on a
#: CPU), long ones get passes of their own (memory).
TOKENS_PER_PASS = 8192


@attrs.frozen
class TrainingSample:
    """One model call to learn from: its tokens, how it was sampled, and its advantage."""

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    old_logprobs: tuple[float, ...]
    advantage: float | tuple[float, ...]  # one for every reply token, or one per token
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    #: Out of the loss (a truncated reply, with ``on_truncated_reply = "mask"``); it still
    #: counts as a sequence where the loss averages over sequences, as on Trinity.
    masked: bool = False

    def token_advantages(self) -> list[float]:
        """The advantage of each reply token."""
        if isinstance(self.advantage, (int, float)):
            return [float(self.advantage)] * len(self.response_ids)
        return list(self.advantage)


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


def pack_into_passes(
        rows: list[tuple[TrainingSample, ...]]) -> list[list[tuple[TrainingSample, ...]]]:
    """Rows (`shared_rows`) in groups whose padded size stays within `TOKENS_PER_PASS`,
    shortest first, so rows of like lengths share a pass and little of it is padding (the
    loss is a sum over tokens: their order does not change it)."""
    def length(row: tuple[TrainingSample, ...]) -> int:
        return len(row[-1].prompt_ids) + len(row[-1].response_ids)

    parts: list[list[tuple[TrainingSample, ...]]] = []
    width = 0
    for row in sorted(rows, key=length):
        if parts and max(width, length(row)) * (len(parts[-1]) + 1) <= TOKENS_PER_PASS:
            parts[-1].append(row)
            width = max(width, length(row))
        else:
            parts.append([row])
            width = length(row)
    return parts


@attrs.frozen
class Prefixes:
    """Prompt tokens that several rows of a batch start with (a GRPO group's rollouts share
    their task's prompt), run through the model once for all of those rows.

    Attributes:
        input_ids: The distinct prefixes, left-padded: ``(prefixes, columns)``.
        attention_mask: 1 where a prefix holds a token.
        index: Which prefix each row of the batch starts with: ``(rows,)``.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    index: torch.Tensor


def _prefix_starts(rows: Sequence[tuple[TrainingSample, ...]]) -> list[int] | None:
    """Where each row's own tokens start when rows share their first prompt but for its last
    token (that token's position predicts the first response token, so it stays with the
    row); None when sharing would not pay: fewer than two rows a prefix on average."""
    prefixes = [row[0].prompt_ids[:-1] for row in rows]
    if not all(prefixes) or len(rows) < 2 * len(set(prefixes)):
        return None
    return [len(prefix) for prefix in prefixes]


@attrs.frozen
class Batch:
    """Right-padded tensors for rows of samples; ``mask`` marks response tokens.

    A row is one sample, or samples of which each extends the one before (`shared_rows`):
    the row holds the last one's tokens and every sample's response positions, so the
    advantages, sampling temperatures and top-p are per token, like the old log-probs.

    With ``prefixes``, each row's tensors hold only its tokens after its shared prefix
    (see `Prefixes`); the loss, log-probs and gradients are those of the whole rows.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    targets: torch.Tensor  # the token each position predicts (input shifted left)
    mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    temperature: torch.Tensor
    top_p: torch.Tensor
    #: Which sample (in the order collated) each position's target belongs to; -1 outside
    #: responses. Masked samples keep their number, with ``mask`` 0.
    sample: torch.Tensor
    prefixes: Prefixes | None = None

    @classmethod
    def collate(cls, given: Sequence[TrainingSample | Sequence[TrainingSample]],
                pad_token_id: int, *, share_prefixes: bool = True) -> Batch:
        """Pack samples (or rows of them); position ``t`` predicts token ``t + 1`` (so a
        row's last token, which predicts nothing, is left out).

        ``share_prefixes``: rows whose first prompts agree (but for the last token) get
        that prefix in `Prefixes`, run once, when each prefix serves two rows or more.
        """
        rows = [(row,) if isinstance(row, TrainingSample) else tuple(row) for row in given]
        samples = [sample for row in rows for sample in row]
        starts = (_prefix_starts(rows) if share_prefixes else None) or [0] * len(rows)
        # A row's last token predicts nothing: it is not fed.
        width = max(len(row[-1].prompt_ids) + len(row[-1].response_ids) - 1 - start
                    for row, start in zip(rows, starts))
        columns: dict[str, list[list[Any]]] = {name: [] for name in (
            "input", "attention", "target", "old", "advantage", "sample")}
        index = 0
        for row, start in zip(rows, starts):  # plain lists and one tensor each: fast
            tokens = [*row[-1].prompt_ids, *row[-1].response_ids]
            # which: a position's sample, or -1
            old: list[float] = []
            advantage: list[float] = []
            which: list[int] = []
            end = 0
            for sample in row:
                before = len(sample.prompt_ids) - 1 - end
                old += [0.0] * before + list(sample.old_logprobs)
                advantage += [0.0] * before + sample.token_advantages()
                which += [-1] * before + [index] * len(sample.response_ids)
                end = len(sample.prompt_ids) - 1 + len(sample.response_ids)
                index += 1
            own = tokens[start:-1]
            pad = width - len(own)
            columns["input"].append(own + [pad_token_id] * pad)
            columns["attention"].append([1] * len(own) + [0] * pad)
            columns["target"].append(tokens[start + 1:] + [pad_token_id] * pad)
            columns["old"].append(old[start:] + [0.0] * pad)
            columns["advantage"].append(advantage[start:] + [0.0] * pad)
            columns["sample"].append(which[start:] + [-1] * pad)
        tensors = {name: torch.tensor(values) for name, values in columns.items()}
        reads = tensors["sample"].clamp(min=0)  # padding reads the first sample's settings
        kept = torch.tensor([not s.masked for s in samples])[reads]
        mask = ((tensors["sample"] >= 0) & kept).float()

        def per_token(values: list[float]) -> torch.Tensor:
            return torch.tensor(values)[reads]

        return cls(
            input_ids=tensors["input"], attention_mask=tensors["attention"],
            targets=tensors["target"], mask=mask, old_logprobs=tensors["old"],
            advantages=tensors["advantage"] * mask,
            temperature=per_token([s.temperature for s in samples]),
            top_p=per_token([s.top_p for s in samples]),
            sample=tensors["sample"],
            prefixes=_prefixes(rows, starts, pad_token_id) if any(starts) else None,
        )


def _prefixes(rows: Sequence[tuple[TrainingSample, ...]], starts: list[int],
              pad_token_id: int) -> Prefixes:
    distinct: dict[tuple[int, ...], int] = {}
    index = [distinct.setdefault(row[0].prompt_ids[:start], len(distinct))
             for row, start in zip(rows, starts)]
    width = max(map(len, distinct))
    return Prefixes(
        input_ids=torch.tensor([[pad_token_id] * (width - len(p)) + list(p) for p in distinct]),
        attention_mask=torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in distinct]),
        index=torch.tensor(index))


#: Model classes whose cache cannot be cut into rows (`plain_layers` is None): their
#: batches run each row whole, prefix included.
_UNSHAREABLE: set[type] = set()


def _model_inputs(model: torch.nn.Module, batch: Batch) -> dict[str, Any]:
    """The arguments of the pass over ``batch``'s rows: with prefixes, their keys and values
    from one pass over the distinct prefixes, fanned out to the rows (differentiably: the
    rows' gradients flow back into that pass)."""
    prefixes = batch.prefixes
    if prefixes is None:
        return {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
    attention = torch.cat([prefixes.attention_mask[prefixes.index], batch.attention_mask], -1)
    if type(model) in _UNSHAREABLE:  # each row whole: its prefix, then its own tokens
        return {"input_ids": torch.cat([prefixes.input_ids[prefixes.index], batch.input_ids],
                                       -1),
                "attention_mask": attention,
                "position_ids": positions_of(attention)}
    output = model(input_ids=prefixes.input_ids, attention_mask=prefixes.attention_mask,
                   position_ids=positions_of(prefixes.attention_mask),
                   use_cache=True,
                   **({"logits_to_keep": 1} if keeps_logits(model) else {}))
    name, past = returned_cache(output)
    layers = plain_layers(past)
    if layers is None:
        _UNSHAREABLE.add(type(model))
        return _model_inputs(model, batch)
    held = prefixes.input_ids.shape[1]
    return {"input_ids": batch.input_ids, "attention_mask": attention,
            "position_ids": positions_of(attention)[:, held:],
            name: cache_of([(keys[prefixes.index], values[prefixes.index])
                            for keys, values in layers])}


def token_logprobs(model: torch.nn.Module, batch: Batch, *,
                   entropy_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of each target token under ``model``, in the distribution the
    engine sampled from (temperature, then top-p), and the entropy of that distribution at
    each response position (zero elsewhere; differentiable with ``entropy_grad``, for an
    entropy bonus, else a statistic)."""
    # Only the columns from the first response token on can hold a response token: the
    # vocabulary's logits, their softmax and its backward pass are computed there only (the
    # prompt's columns come back as zeros, outside the mask).
    columns = batch.mask.any(0).nonzero()
    first = int(columns[0]) if len(columns) else 0
    keep = batch.input_ids.shape[1] - first
    logits = model(**_model_inputs(model, batch),
                   **({"logits_to_keep": keep} if keeps_logits(model) else {})
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
    inside = batch.mask[:, first:].bool()
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        # Only at response positions: the vocabulary-wide product is the costly part.
        probabilities = logprobs[inside].exp()
        # 0 * log 0 is 0: tokens outside the nucleus add nothing.
        values = -torch.special.xlogy(probabilities, probabilities).sum(-1)
        entropy = torch.zeros(inside.shape, dtype=values.dtype).masked_scatter(inside, values)
    return chosen, torch.nn.functional.pad(entropy, (first, 0))


def sample_logprobs(model: torch.nn.Module, samples: Sequence[TrainingSample],
                    pad_token_id: int) -> list[torch.Tensor]:
    """Each sample's reply tokens' log-probabilities under ``model`` (sampled as each
    sample was: temperature, top-p), from the passes the trainer packs them into: one
    batched pass per pack, not a pass per sample (a teacher's view of the step's calls)."""
    found: list[torch.Tensor] = [torch.empty(0)] * len(samples)
    position = {id(sample): index for index, sample in enumerate(samples)}
    with torch.no_grad():
        for part in pack_into_passes(shared_rows(samples)):
            batch = Batch.collate(part, pad_token_id)
            logprobs, _ = token_logprobs(model, batch)
            in_pass = [sample for row in part for sample in row]
            # row by row, left to right: each sample's positions in turn
            flat = logprobs[batch.sample >= 0].split([len(s.response_ids) for s in in_pass])
            for sample, values in zip(in_pass, flat):
                found[position[id(sample)]] = values
    return found


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
