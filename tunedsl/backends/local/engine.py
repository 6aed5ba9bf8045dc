"""A batched sampler over a transformers causal LM on the CPU.

Rollouts run concurrently on one asyncio loop and each awaits `Engine.generate`;
requests that arrive while the loop is busy are sampled together in one batch
with a shared KV cache. A batch is flushed by a callback scheduled when its first
request arrives, so which requests share a batch depends only on the order the
loop runs them: with the same seed, a run samples the same tokens every time.

A finished batch's KV cache is kept (`PrefixCache`) until `Engine.forget`: a later
prompt that starts with tokens a row already holds (a multi-turn agent's next call
repeats the conversation so far, reply included) reuses that row's keys and values
and prefills only the rest, as vLLM's prefix caching does on Trinity.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Hashable, Sequence
from typing import Any, cast

import attrs
import torch

from ...dsl.chat import GREEDY_BELOW
from ...dsl.records import Model

#: How a request samples when it does not say: as an experiment's `Model` does unless
#: told otherwise (its field defaults).
DEFAULT_TEMPERATURE: float = cast(float, attrs.fields(Model).temperature.default)
DEFAULT_TOP_P: float = cast(float, attrs.fields(Model).top_p.default)
#: Reply tokens at most when a request does not say (`local_sampling` always says).
DEFAULT_MAX_TOKENS = 64


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
    ``(rows, positions, vocab)`` with ``top_p`` of shape ``(rows, positions)``.
    """
    if bool((top_p >= 1.0).all()):
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    # Keep a token while the mass before it is below top_p (the first token always stays).
    outside = probs.cumsum(dim=-1) - probs >= top_p.unsqueeze(-1)
    sorted_logits = sorted_logits.masked_fill(outside, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


#: Tokens per hashed block of a kept row: a prompt is matched to kept rows block by block
#: (then token by token within the last block), as vLLM's prefix cache hashes its blocks.
PREFIX_BLOCK = 4
#: Bytes of kept KV caches at most (the oldest batch goes first); 0 keeps none.
PREFIX_CACHE_BYTES = 256 * 2**20


def block_hashes(tokens: tuple[int, ...], block: int = PREFIX_BLOCK) -> list[int]:
    """A hash of each block-aligned prefix of ``tokens`` (``tokens[:block]``,
    ``tokens[:2 * block]``, ...), each chained from the one before."""
    hashes, value = [], 0
    for end in range(block, len(tokens) + 1, block):
        value = hash((value, tokens[end - block:end]))
        hashes.append(value)
    return hashes


@attrs.define(eq=False)
class _Kept:
    """One finished batch's KV cache and, per row, the tokens whose keys and values it holds."""

    keys: list[torch.Tensor]  # per layer: (rows, heads, columns, head dim)
    values: list[torch.Tensor]
    attention: torch.Tensor  # (rows, columns): 1 where a row holds a token (not padding)
    tokens: list[tuple[int, ...]]
    blocks: dict[int, list[int]]  # block hash of a prefix -> the rows holding that prefix
    unused: set[int]  # rows whose every token no later prompt has taken yet
    nbytes: int


class PrefixCache:
    """The KV caches of finished batches, kept for prompts that extend their rows.

    Bounded by ``max_bytes`` (the oldest batch is dropped first; a batch larger than the
    bound is not kept), and a batch is dropped as soon as every row of it was taken whole
    into a later batch, which holds those tokens again. Valid only for the weights that
    computed it: `clear` it when they change.
    """

    def __init__(self, max_bytes: int = PREFIX_CACHE_BYTES, block: int = PREFIX_BLOCK) -> None:
        self.max_bytes, self.block = max_bytes, block
        self.kept: list[_Kept] = []

    @property
    def nbytes(self) -> int:
        return sum(kept.nbytes for kept in self.kept)

    def clear(self) -> None:
        self.kept.clear()

    def keep(self, past: Any, attention: torch.Tensor, tokens: list[tuple[int, ...]]) -> None:
        """Keep a finished batch: ``past`` (a transformers cache of plain layers) holds the
        keys and values of row ``i``'s ``tokens[i]`` at the columns where ``attention[i]``
        is 1, in order."""
        layers = plain_layers(past)
        if not self.max_bytes or layers is None:
            return  # sliding windows and other layouts are not reused
        keys = [key for key, _ in layers]
        values = [value for _, value in layers]
        nbytes = sum(t.nbytes for t in keys) + sum(t.nbytes for t in values)
        if nbytes > self.max_bytes:
            return
        while self.kept and self.nbytes + nbytes > self.max_bytes:
            self.kept.pop(0)
        blocks: dict[int, list[int]] = {}
        for row, held in enumerate(tokens):
            for value in block_hashes(held, self.block):
                blocks.setdefault(value, []).append(row)
        self.kept.append(_Kept(keys, values, attention, list(tokens), blocks,
                               set(range(len(tokens))), nbytes))

    def longest(self, prompt: tuple[int, ...]) -> tuple[_Kept, int, int] | None:
        """The kept row sharing the longest prefix with ``prompt``: ``(batch, row, tokens)``."""
        hashes = block_hashes(prompt, self.block)
        best: tuple[_Kept, int, int] | None = None
        for kept in self.kept:
            depth = next((i for i in range(len(hashes) - 1, -1, -1)
                          if hashes[i] in kept.blocks), None)
            if depth is None:
                continue
            start = (depth + 1) * self.block
            for row in kept.blocks[hashes[depth]]:
                held = kept.tokens[row]
                if held[:start] != prompt[:start]:
                    continue  # a hash collision
                end = start
                while end < min(len(held), len(prompt)) and held[end] == prompt[end]:
                    end += 1
                if best is None or end > best[2]:
                    best = (kept, row, end)
        return best

    def prefixes(self, prompts: Sequence[tuple[int, ...]]) -> tuple[list[int], Any]:
        """How many leading tokens of each prompt come from kept rows (always leaving the
        last token to compute), and a cache of plain layers holding them right-aligned in
        ``max`` columns (None when no prompt reuses anything)."""
        found = [self.longest(p) for p in prompts] if self.kept else [None] * len(prompts)
        reused = [min(f[2], len(p) - 1) if f else 0 for f, p in zip(found, prompts)]
        width = max(reused, default=0)
        if width == 0:
            return reused, None
        # the prompts that reuse kept rows, each with its (batch, row, tokens)
        hits = {index: f for index, f in enumerate(found) if f is not None and reused[index]}
        by_batch: dict[int, list[int]] = {}
        for index, f in hits.items():
            by_batch.setdefault(id(f[0]), []).append(index)
        template = next(iter(hits.values()))[0]
        layers = []
        for key, value in zip(template.keys, template.values):
            shape = (len(prompts), key.shape[1], width, key.shape[3])
            layers.append((key.new_zeros(shape), value.new_zeros(shape)))
        for indices in by_batch.values():
            kept = hits[indices[0]][0]
            rows = torch.tensor([hits[i][1] for i in indices])
            columns = torch.zeros(len(indices), width, dtype=torch.long)
            valid = torch.zeros(len(indices), width, dtype=torch.bool)
            for slot, i in enumerate(indices):
                row, count = hits[i][1], reused[i]
                columns[slot, width - count:] = kept.attention[row].nonzero().squeeze(-1)[:count]
                valid[slot, width - count:] = True
                if count == len(kept.tokens[row]):
                    kept.unused.discard(row)
            target, mask = torch.tensor(indices), valid[:, None, :, None]
            for (key, value), source_key, source_value in zip(layers, kept.keys, kept.values):
                # rows x columns picked: (rows, columns, heads, dim) -> (rows, heads, columns, dim)
                for into, source in ((key, source_key), (value, source_value)):
                    into[target] = torch.where(
                        mask, source[rows[:, None], :, columns].transpose(1, 2), 0.0)
        self.kept = [kept for kept in self.kept if kept.unused]
        return reused, cache_of(layers)


def plain_layers(past: Any) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """A transformers cache's ``(keys, values)`` per layer, each ``(rows, heads, columns,
    head dim)``, or None for any other layout (sliding windows, recurrent states...), which
    cannot be cut into rows and columns."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(past, "layers", None)
    if not layers or not all(type(layer) is DynamicLayer and layer.keys is not None
                             and layer.keys.dim() == 4 for layer in layers):
        return None
    return [(layer.keys, layer.values) for layer in layers]


def keeps_logits(model: Any) -> bool:
    """Whether a model's forward takes ``logits_to_keep`` (transformers' causal LMs do;
    wrappers such as peft's, or the adapters-off reference, are called without it)."""
    return _class_keeps_logits(cast(Hashable, type(model)))


@functools.cache
def _class_keeps_logits(model_type: Any) -> bool:
    forward = getattr(model_type, "forward", None) or model_type.__call__
    try:
        return "logits_to_keep" in inspect.signature(forward).parameters
    except (TypeError, ValueError):  # a callable whose signature Python cannot read
        return False


def positions_of(attention: torch.Tensor) -> torch.Tensor:
    """Each column's position in its row: how many tokens the row holds before it (padding
    columns, left or right or between two parts, take no position)."""
    return (attention.cumsum(-1) - 1).clamp(min=0)


def cache_of(layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """A transformers cache holding ``(keys, values)`` per layer (as `plain_layers` gives)."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=layers)


def returned_cache(output: Any) -> tuple[str, Any]:
    """The cache a forward pass returned and the argument that passes it back in
    (transformers 5 names it ``cache``, earlier versions ``past_key_values``)."""
    for name in ("cache", "past_key_values"):
        past = getattr(output, name, None)
        if past is not None:
            return name, past
    return "past_key_values", None


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
        prefix_cache_bytes: Bound of the kept KV caches (`PrefixCache`); 0 keeps none.
    """

    def __init__(self, model: Any, *, eos_token_id: int | frozenset[int], pad_token_id: int,
                 seed: int = 0, prefix_cache_bytes: int = PREFIX_CACHE_BYTES) -> None:
        self.model = model
        self.eos = frozenset({eos_token_id} if isinstance(eos_token_id, int) else eos_token_id)
        self.pad_token_id = pad_token_id
        self.generator = torch.Generator().manual_seed(seed)
        # How the model names its cache (`returned_cache`), learnt from its first output: a
        # cache is passed back in only after the model returned one.
        self._cache_arg = "past_key_values"
        # A prefill needs the last position's logits only (not the vocabulary at every one).
        self._last_only = {"logits_to_keep": 1} if keeps_logits(model) else {}
        self._pending: list[_Request] = []
        self.prefixes = PrefixCache(prefix_cache_bytes)
        self.batches = 0  # how many batched forward loops ran (for metrics and tests)
        self.prefilled_tokens = 0  # prompt tokens run through the model
        self.reused_tokens = 0  # prompt tokens whose keys and values came from kept rows

    def reseed(self, seed: int) -> None:
        """Restart the sampling generator, so a step samples the same after a resume."""
        self.generator.manual_seed(seed)

    def forget(self) -> None:
        """Drop the kept KV caches: call it when the weights change (they computed them)."""
        self.prefixes.clear()

    async def generate(self, prompt_ids: Sequence[int], *,
                       temperature: float = DEFAULT_TEMPERATURE,
                       top_p: float = DEFAULT_TOP_P,
                       max_tokens: int = DEFAULT_MAX_TOKENS) -> Sample:
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

    def _prefill(self, prompts: list[tuple[int, ...]]) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """One forward pass over left-padded prompts: last-position logits, mask, cache.

        A prompt's leading tokens that a kept row holds are not run again: their keys and
        values sit right-aligned in the first columns, the rest of the prompt right-aligned
        after them, with padding (masked out) before each part.
        """
        reused, past = self.prefixes.prefixes(prompts)
        rests = [p[count:] for p, count in zip(prompts, reused)]
        held, width = max(reused), max(len(r) for r in rests)
        input_ids = torch.tensor([[self.pad_token_id] * (width - len(r)) + list(r)
                                  for r in rests])
        attention = torch.tensor([[0] * (held - count) + [1] * count + [0] * (width - len(r))
                                  + [1] * len(r) for count, r in zip(reused, rests)])
        positions = positions_of(attention)[:, held:]
        cache = {} if past is None else {self._cache_arg: past}
        out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                         use_cache=True, **cache, **self._last_only)
        self.prefilled_tokens += sum(len(r) for r in rests)
        self.reused_tokens += sum(reused)
        self._cache_arg, past = returned_cache(out)
        return out.logits[:, -1, :], attention, past

    @torch.no_grad()
    def _sample(self, batch: list[_Request]) -> list[Sample]:
        self.batches += 1
        # A GRPO group asks for the same prompt group_size times: encode each distinct
        # prompt once, then fan its cache out to the rows that share it.
        distinct: dict[tuple[int, ...], int] = {}
        rows = torch.tensor([distinct.setdefault(tuple(r.prompt_ids), len(distinct))
                             for r in batch])
        logits, attention, past = self._prefill(list(distinct))
        if len(distinct) < len(batch):
            logits, attention = logits[rows], attention[rows]
            if hasattr(past, "reorder_cache"):
                past.reorder_cache(rows)
            else:  # a model without a cache object: encode every row after all
                logits, attention, past = self._prefill([tuple(r.prompt_ids) for r in batch])
        temperature = torch.tensor([max(r.temperature, GREEDY_BELOW)
                                    for r in batch]).unsqueeze(-1)
        greedy = torch.tensor([r.temperature < GREEDY_BELOW for r in batch])
        top_p = torch.tensor([r.top_p for r in batch])
        limits = [r.max_tokens for r in batch]
        tokens: list[list[int]] = [[] for _ in batch]
        logprobs: list[list[float]] = [[] for _ in batch]
        finished = [False] * len(batch)
        fed = 0  # sampled tokens run through the model (every row's, finished or not)
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
            logits, (self._cache_arg, past) = out.logits[:, -1, :], returned_cache(out)
            fed += 1
        # Each row holds its prompt and its reply's tokens as far as they were fed (a row
        # that finished early was fed others' tokens since: those columns are not its).
        self.prefixes.keep(past, attention, [tuple(r.prompt_ids) + tuple(t[:fed])
                                             for r, t in zip(batch, tokens)])
        return [
            Sample(tuple(t), tuple(lp), "stop" if t and t[-1] in self.eos else "length")
            for t, lp in zip(tokens, logprobs)
        ]
