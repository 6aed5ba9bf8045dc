"""The local backend's sampler (engine.py): batched requests, the log-probs it records, the
KV caches it keeps and reuses, and the replies' ends."""

from __future__ import annotations

import asyncio

import attrs
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tunedsl.backends.local.chat import ChatCodec, LocalChatModel  # noqa: E402
from tunedsl.backends.local.engine import PREFIX_CACHE_BYTES, Engine  # noqa: E402
from tunedsl.backends.local.batches import Batch, TrainingSample, token_logprobs  # noqa: E402
from tunedsl.backends.local.models import load_policy  # noqa: E402

from .local_support import graph_for  # noqa: E402


@pytest.mark.parametrize("top_p", [1.0, 0.5])
def test_sampled_logprobs_match_a_fresh_forward_pass(tiny_model, top_p):
    """What the batched sampler records equals the trainer's recomputation: the log-probs
    of the distribution sampled from (temperature 0.7, then top-p, as vLLM's processed
    log-probs)."""
    model, tokenizer = load_policy(graph_for("Arith", tiny_model, "/tmp"))
    model.eval()
    engine = Engine(model, eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id, seed=3)
    chat = LocalChatModel(engine, ChatCodec(tokenizer), name="tiny",
                          sampling={"temperature": 0.7, "top_p": top_p, "max_tokens": 4})

    async def ask():
        # Different lengths (left padding in one batch) and a repeated prompt (encoded once,
        # its cache fanned out to both rows).
        prompts = ["1+2=", "3+4=", "12+7=", "3+4="]
        return await asyncio.gather(*(chat.chat([{"role": "user", "content": p}])
                                      for p in prompts))

    asyncio.run(ask())
    assert engine.batches == 1  # the four concurrent requests were sampled as one batch
    assert {(c.sampling["temperature"], c.sampling["top_p"]) for c in chat.calls} == \
        {(0.7, top_p)}
    assert_recorded_logprobs_are_a_fresh_pass(model, tokenizer, chat.calls, top_p)


def assert_recorded_logprobs_are_a_fresh_pass(model, tokenizer, calls, top_p):
    """The log-probs recorded with each call equal the trainer's recomputation over the
    whole prompt and reply (within 1e-4), in the distribution sampled (top-p applied)."""
    samples = [TrainingSample(c.prompt_ids, c.response_ids, c.logprobs, 1.0,
                              c.sampling["temperature"], c.sampling["top_p"]) for c in calls]
    batch = Batch.collate(samples, tokenizer.pad_token_id)
    with torch.no_grad():
        fresh, _ = token_logprobs(model, batch)
        everything = attrs.evolve(batch, top_p=torch.ones_like(batch.top_p))
        unfiltered, _ = token_logprobs(model, everything)
    response = batch.mask.bool()
    recorded = batch.old_logprobs[response]
    assert torch.allclose(fresh[response], recorded, atol=1e-4)
    # The nucleus renormalises: with top_p < 1 every sampled token is likelier than in the
    # full distribution (the recorded numbers are not the unfiltered ones).
    gained = recorded - unfiltered[response]
    if top_p < 1:
        assert bool((gained > 1e-3).all()), gained
    else:
        assert torch.allclose(gained, torch.zeros_like(gained), atol=1e-4)


@pytest.mark.parametrize("top_p", [1.0, 0.5])
def test_logprobs_sampled_on_a_reused_prefix_match_a_fresh_forward_pass(tiny_model, top_p):
    """Three-call conversations of different lengths, sampled concurrently: each later call's
    prompt starts with the conversation so far, whose keys and values the engine reuses;
    what it records still equals a fresh pass over the whole prompt and reply."""
    model, tokenizer = load_policy(graph_for("Arith", tiny_model, "/tmp"))
    engine = Engine(model.eval(), eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id, seed=5)
    codec = ChatCodec(tokenizer)
    sessions = [LocalChatModel(engine, codec, name="tiny",
                               sampling={"temperature": 0.7, "top_p": top_p, "max_tokens": 4})
                for _ in range(4)]

    async def converse(chat, question):
        messages = [{"role": "user", "content": question}]
        for follow_up in ("1+1=", "22+2="):
            reply = await chat.chat(messages)
            messages += [{"role": "assistant", "content": reply.content},
                         {"role": "user", "content": follow_up}]
        await chat.chat(messages)

    async def ask():
        await asyncio.gather(*(converse(chat, question) for chat, question in
                               zip(sessions, ["1+2=", "3+4=", "12+7=", "3+4="])))

    asyncio.run(ask())
    assert engine.batches == 3  # each turn of the four conversations was one batch
    turns = [{tuple(chat.calls[turn].prompt_ids): chat.calls[turn - 1].prompt_ids if turn else ()
              for chat in sessions} for turn in range(3)]  # distinct prompts: prefilled once
    assert engine.prefilled_tokens + engine.reused_tokens == \
        sum(len(prompt) for turn in turns for prompt in turn)
    # A later prompt reuses at least the call before's prompt (its reply too, unless the
    # reply held special tokens the chat template does not render back).
    assert sum(len(before) for turn in turns for before in turn.values()) <= \
        engine.reused_tokens < sum(len(prompt) for turn in turns[1:] for prompt in turn)
    calls = [call for chat in sessions for call in chat.calls]
    assert_recorded_logprobs_are_a_fresh_pass(model, tokenizer, calls, top_p)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_prompt_extending_a_finished_request_reuses_its_cache_and_samples_the_same(
        tiny_model, temperature):
    """The second turn's prompts start with the first turn's prompt and reply: their keys and
    values are reused (all that was computed: the longest reply's last token never went
    through the model), and the replies and log-probs are those sampled without reuse."""
    model, tokenizer = load_policy(graph_for("Arith", tiny_model, "/tmp"))
    model.eval()
    first = [tokenizer("<user>12+7=<assistant>")["input_ids"],
             tokenizer("<user>3+4=<assistant>")["input_ids"]]
    follow_up = tokenizer("<user>1+1=<assistant>")["input_ids"]

    def converse(prefix_cache_bytes):
        engine = Engine(model, eos_token_id=frozenset(), pad_token_id=tokenizer.pad_token_id,
                        seed=7, prefix_cache_bytes=prefix_cache_bytes)

        async def turn(prompts, limits):
            return await asyncio.gather(*(engine.generate(p, temperature=temperature,
                                                          max_tokens=n)
                                          for p, n in zip(prompts, limits)))

        replies = asyncio.run(turn(first, [2, 5]))
        before = engine.reused_tokens
        second = [p + list(r.response_ids) + follow_up for p, r in zip(first, replies)]
        replies += asyncio.run(turn(second, [3, 3]))
        return engine, engine.reused_tokens - before, replies

    engine, reused, replies = converse(PREFIX_CACHE_BYTES)
    # Row 0's 2 tokens were both fed (row 1 went on); row 1's fifth was sampled last.
    assert reused == (len(first[0]) + 2) + (len(first[1]) + 5 - 1)
    assert len(engine.prefixes.kept) == 1  # the first batch, taken whole, was dropped
    plain, none_reused, expected = converse(0)
    assert none_reused == 0 and plain.reused_tokens == 0
    assert [r.response_ids for r in replies] == [r.response_ids for r in expected]
    for got, want in zip(replies, expected):
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
    engine.forget()
    assert engine.prefixes.kept == [] and engine.prefixes.nbytes == 0


def test_kept_caches_stay_within_their_byte_bound(tiny_model):
    """The oldest kept batch is dropped to make room; a batch larger than the bound is not
    kept at all (and nothing is reused from it)."""
    model, tokenizer = load_policy(graph_for("Arith", tiny_model, "/tmp"))
    prompt = tokenizer("<user>12+7=<assistant>")["input_ids"]

    def batches(bound):
        engine = Engine(model.eval(), eos_token_id=frozenset(),
                        pad_token_id=tokenizer.pad_token_id, prefix_cache_bytes=bound)
        sizes = []
        for limit in (3, 4):  # two batches (one request each, run one after the other)
            asyncio.run(engine.generate(prompt, max_tokens=limit))
            sizes.append(engine.prefixes.kept[-1].nbytes if engine.prefixes.kept else 0)
        return engine, sizes

    roomy, sizes = batches(PREFIX_CACHE_BYTES)
    assert len(roomy.prefixes.kept) == 2 and sizes[0] < sizes[1]
    one, _ = batches(sizes[1])  # room for the second batch only
    assert [k.nbytes for k in one.prefixes.kept] == [sizes[1]]
    assert one.prefixes.nbytes <= sizes[1]
    none, _ = batches(sizes[0] - 1)
    assert none.prefixes.kept == []
    asyncio.run(none.generate(prompt + [5, 6], max_tokens=1))
    assert none.reused_tokens == 0


def test_greedy_repeated_prompts_get_the_same_reply(tiny_model):
    """At temperature 0 the rows that share a prompt (and its cache) decode identically."""
    model, tokenizer = load_policy(graph_for("Arith", tiny_model, "/tmp"))
    engine = Engine(model.eval(), eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id)

    async def ask():
        prompt = ChatCodec(tokenizer).prompt_ids([{"role": "user", "content": "2+2="}])
        return await asyncio.gather(*(engine.generate(list(prompt), temperature=0.0,
                                                      max_tokens=5) for _ in range(3)))

    first, second, third = asyncio.run(ask())
    assert first.response_ids == second.response_ids == third.response_ids
    assert len(first.response_ids) == 5 or first.response_ids[-1] == tokenizer.eos_token_id


def test_every_eos_id_of_the_generation_config_ends_a_reply(tiny_model):
    """The generation config may list several EOS ids (as Qwen's does): each ends a reply."""
    from tunedsl.backends.local.engine import eos_ids

    model, tokenizer = load_policy(graph_for("Arith", tiny_model, "/tmp"))
    model.generation_config.eos_token_id = list(range(len(tokenizer)))  # any token ends it
    ids = eos_ids(model, tokenizer)
    assert tokenizer.eos_token_id in ids and len(ids) == len(tokenizer)
    engine = Engine(model.eval(), eos_token_id=ids, pad_token_id=tokenizer.pad_token_id)

    async def ask():
        return await asyncio.gather(*(engine.generate(tokenizer("2+2=")["input_ids"],
                                                      max_tokens=5) for _ in range(4)))

    assert {(len(s.response_ids), s.finish_reason) for s in asyncio.run(ask())} == {(1, "stop")}
