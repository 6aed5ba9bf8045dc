"""A batched sampler over a transformers causal LM on the CPU.

Rollouts run concurrently on one asyncio loop and each awaits `Engine.generate`;
requests that arrive while the loop is busy are sampled together in one batch
with a shared KV cache. A batch is flushed by a callback scheduled when its first
request arrives, so which requests share a batch depends only on the order the
loop runs them: with the same seed, a run samples the same tokens every time.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import attrs
import torch


@attrs.frozen
class Sample:
    """What the model generated for one request, with the log-probabilities it sampled."""

    response_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str  # "stop" (end-of-sequence token) or "length"


@attrs.define
class _Request:
    prompt_ids: list[int]
    temperature: float
    top_p: float
    max_tokens: int
    future: asyncio.Future


def top_p_filter(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) the tokens outside each row's nucleus of probability ``top_p``.

    ``logits`` is ``(rows, vocab)`` with ``top_p`` of shape ``(rows,)``, or
    ``(rows, positions, vocab)`` with ``top_p`` of shape ``(rows, 1)``.
    """
    if bool((top_p >= 1.0).all()):
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    # Keep a token while the mass before it is below top_p (the first token always stays).
    outside = probs.cumsum(dim=-1) - probs >= top_p.unsqueeze(-1)
    sorted_logits = sorted_logits.masked_fill(outside, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """Every token id that ends a reply: the generation config's ``eos_token_id`` (one id or
    a list, as vLLM reads it) and the tokenizer's."""
    found = {tokenizer.eos_token_id}
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    found |= set(configured) if isinstance(configured, (list, tuple)) else {configured}
    return frozenset(i for i in found if isinstance(i, int))


class Engine:
    """Samples continuations for many concurrent requests in batches.

    Args:
        model: A causal LM (``transformers`` ``PreTrainedModel``) in eval mode.
        eos_token_id: Ends a response: one id, or a set of them (see `eos_ids`).
        pad_token_id: Pads prompts on the left.
        seed: Seeds the sampling generator; `reseed` restarts it (per training step).
    """

    def __init__(self, model: Any, *, eos_token_id: int | frozenset[int], pad_token_id: int,
                 seed: int = 0) -> None:
        self.model = model
        self.eos = frozenset({eos_token_id} if isinstance(eos_token_id, int) else eos_token_id)
        self.pad_token_id = pad_token_id
        self.generator = torch.Generator().manual_seed(seed)
        # transformers 5 renamed past_key_values to cache; accept either generation.
        parameters = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in parameters else "past_key_values"
        self._pending: list[_Request] = []
        self.batches = 0  # how many batched forward loops ran (for metrics and tests)

    def reseed(self, seed: int) -> None:
        """Restart the sampling generator, so a step samples the same after a resume."""
        self.generator.manual_seed(seed)

    async def generate(self, prompt_ids: list[int], *, temperature: float = 1.0,
                       top_p: float = 1.0, max_tokens: int = 64) -> Sample:
        """Sample a continuation of ``prompt_ids`` (batched with concurrent requests)."""
        loop = asyncio.get_running_loop()
        request = _Request(list(prompt_ids), float(temperature), float(top_p), int(max_tokens),
                           loop.create_future())
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append(request)
        return await request.future

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        try:
            samples = self._sample(batch)
        except Exception as exc:  # fail every waiting rollout, not the event loop
            for request in batch:
                if not request.future.done():
                    request.future.set_exception(exc)
            return
        for request, sample in zip(batch, samples):
            if not request.future.done():  # a rollout may have timed out meanwhile
                request.future.set_result(sample)

    def _prefill(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """One forward pass over left-padded prompts: last-position logits, mask, cache."""
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[self.pad_token_id] * (width - len(p)) + p for p in prompts])
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                         use_cache=True)
        return out.logits[:, -1, :], attention, getattr(out, self._cache_arg)

    @torch.no_grad()
    def _sample(self, batch: list[_Request]) -> list[Sample]:
        self.batches += 1
        # A GRPO group asks for the same prompt group_size times: encode each distinct
        # prompt once, then fan its cache out to the rows that share it.
        distinct: dict[tuple[int, ...], int] = {}
        rows = torch.tensor([distinct.setdefault(tuple(r.prompt_ids), len(distinct))
                             for r in batch])
        logits, attention, past = self._prefill([list(p) for p in distinct])
        if len(distinct) < len(batch):
            logits, attention = logits[rows], attention[rows]
            if hasattr(past, "reorder_cache"):
                past.reorder_cache(rows)
            else:  # a model without a cache object: encode every row after all
                logits, attention, past = self._prefill([r.prompt_ids for r in batch])
        temperature = torch.tensor([max(r.temperature, 1e-5) for r in batch]).unsqueeze(-1)
        greedy = torch.tensor([r.temperature == 0 for r in batch])
        top_p = torch.tensor([r.top_p for r in batch])
        limits = [r.max_tokens for r in batch]
        tokens: list[list[int]] = [[] for _ in batch]
        logprobs: list[list[float]] = [[] for _ in batch]
        finished = [False] * len(batch)
        for _ in range(max(limits)):
            # The log-probs of the distribution actually sampled (temperature, then top-p),
            # as vLLM's processed log-probs are on Trinity; the trainer recomputes the same.
            policy = top_p_filter(logits.float() / temperature, top_p).log_softmax(-1)
            chosen = torch.multinomial(policy.exp(), 1, generator=self.generator).squeeze(-1)
            chosen = torch.where(greedy, policy.argmax(-1), chosen)
            chosen_logprobs = policy.gather(-1, chosen.unsqueeze(-1)).squeeze(-1).tolist()
            for row, (token, logprob) in enumerate(zip(chosen.tolist(), chosen_logprobs)):
                if finished[row]:
                    continue
                tokens[row].append(token)
                logprobs[row].append(logprob)
                finished[row] = token in self.eos or len(tokens[row]) >= limits[row]
            if all(finished):
                break
            attention = torch.cat([attention, torch.ones(len(batch), 1, dtype=attention.dtype)], -1)
            positions = (attention.sum(-1, keepdim=True) - 1)
            out = self.model(input_ids=chosen.unsqueeze(-1), attention_mask=attention,
                             position_ids=positions, use_cache=True, **{self._cache_arg: past})
            logits, past = out.logits[:, -1, :], getattr(out, self._cache_arg)
        return [
            Sample(tuple(t), tuple(lp), "stop" if t and t[-1] in self.eos else "length")
            for t, lp in zip(tokens, logprobs)
        ]
