"""The local CPU backend: sampling, GRPO arithmetic, learning, checkpoints, resume, failures."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import tunedsl  # noqa: E402
from tunedsl.backends.local.chat import ChatCodec, LocalChatModel  # noqa: E402
from tunedsl.backends.local.engine import PREFIX_CACHE_BYTES, Engine  # noqa: E402
from tunedsl.backends.local.grpo import (  # noqa: E402
    Batch,
    TrainingSample,
    clipped_policy_loss,
    group_advantages,
    shared_rows,
    token_logprobs,
)
from tunedsl.backends.local.run import run_local as _run_local  # noqa: E402
from tunedsl.backends.trinity.config import to_yaml, trinity_config  # noqa: E402
from tunedsl.runtime.rundir import run_name  # noqa: E402
from tunedsl.backends.local.models import load_policy  # noqa: E402
from tunedsl.errors import ConfigError, RunInterrupted  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
AGENTS = "tests.fixtures.local.agents"


def graph_for(name, tiny_model, tmp_path, *overrides):
    return tunedsl.load_experiment(f"{AGENTS}:{name}", overrides=[
        f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}", *overrides])


def run_local(graph, resume=None, **options):
    """The local backend, handed what tunedsl.run hands it."""
    name = Path(resume).name if resume is not None else run_name(graph)
    return _run_local(graph, resume=resume, run_name=name,
                      trinity_yaml=to_yaml(trinity_config(graph, name=name)), **options)


def weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def load_weights(folder):
    from transformers import AutoModelForCausalLM

    return weights(AutoModelForCausalLM.from_pretrained(folder, local_files_only=True))


# ---------------------------------------------------------------------------- arithmetic


def test_group_advantages_match_hand_computed_values():
    """Rewards 1,0,0,1: mean 0.5, sample std sqrt(1/3), so advantages are +-0.866."""
    advantages = group_advantages([1.0, 0.0, 0.0, 1.0], eps=0.0)
    assert advantages == pytest.approx([0.8660254, -0.8660254, -0.8660254, 0.8660254])
    assert group_advantages([0.5, 0.5, 0.5]) == [0.0, 0.0, 0.0]


def test_clipped_loss_matches_hand_computed_values():
    """Ratio e^0.5 is clipped to 1.2 for a positive advantage; e^-0.5 stays for a negative one."""
    samples = [TrainingSample((5,), (6, 7), (0.0, 0.0), 2.0),
               TrainingSample((5,), (6,), (0.0,), -1.0)]
    batch = Batch.collate(samples, pad_token_id=0)
    # Position 0 predicts the first response token; row 0 has two response positions. A
    # row's last token predicts nothing and is not fed.
    assert batch.input_ids.tolist() == [[5, 6], [5, 0]]
    assert batch.targets.tolist() == [[6, 7], [6, 0]]
    assert batch.mask.tolist() == [[1.0, 1.0], [1.0, 0.0]]
    logprobs = torch.tensor([[0.5, -0.5], [-0.5, 0.0]])
    per_token = clipped_policy_loss(logprobs, batch, clip=0.2)
    expected = [[-2.0 * 1.2, -2.0 * math.exp(-0.5)], [1.0 * 0.8, 0.0]]
    assert torch.allclose(per_token, torch.tensor(expected))
    token_mean = per_token.sum() / batch.mask.sum()
    assert float(token_mean) == pytest.approx((-2.4 - 2.0 * math.exp(-0.5) + 0.8) / 3)


def test_a_call_extending_the_one_before_shares_its_training_row_with_the_same_loss(
        tiny_model):
    """A call whose prompt starts with the call before's prompt and reply is trained in that
    call's row (one pass over the longer sequence), with its own advantage, temperature and
    top-p per token: loss, entropy and gradients are those of training them apart."""
    model, tokenizer = load_policy(graph_for("Arith", tiny_model, "/tmp"))
    model.eval()
    question = tokenizer("<user>12+7=<assistant>")["input_ids"]
    again = tokenizer("<eos><user>3+4=<assistant>")["input_ids"]
    first = TrainingSample(tuple(question), (5, 6, 7), (-2.0, -3.0, -2.5), 1.5, 0.7, 1.0)
    second = TrainingSample(tuple(question) + (5, 6, 7) + tuple(again), (8, 9), (-2.2, -3.1),
                            -0.5, 1.0, 0.5)
    other = TrainingSample(tuple(question), (9, 1), (-2.0, -1.0), -1.0)
    differs = attrs.evolve(second, prompt_ids=tuple(question) + (5, 6, 8) + tuple(again))
    rows = shared_rows([first, second, other, first, differs])
    assert rows == [(first, second), (other,), (first,), (differs,)]

    def train(part):
        model.zero_grad()
        batch = Batch.collate(part, tokenizer.pad_token_id)
        logprobs, entropy = token_logprobs(model, batch)
        loss = clipped_policy_loss(logprobs, batch).sum() / batch.mask.sum()
        loss.backward()
        return loss.detach(), entropy, [p.grad.clone() for p in model.parameters()]

    apart, shared = train([first, second, other]), train(rows[:2])
    assert len(Batch.collate(rows[:2], tokenizer.pad_token_id).input_ids) == 2
    assert torch.allclose(apart[0], shared[0], atol=1e-6)
    assert torch.allclose(apart[1], shared[1], atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(apart[2], shared[2]))
    assert any(bool(g.abs().sum() > 0) for g in shared[2])


def _sliding_window_model(tiny_model):
    """A tiny Mistral whose attention looks 4 tokens back: its cache cannot be cut into
    rows and columns, so its batches run each row whole."""
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    return MistralForCausalLM(MistralConfig(
        vocab_size=20, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, sliding_window=4,
        max_position_embeddings=64, pad_token_id=0))


@pytest.mark.parametrize("kind", ["llama", "sliding window"])
def test_a_group_shares_its_prompt_in_one_pass_with_the_same_loss(tiny_model, kind):
    """GRPO groups repeat their task's prompt: the batch runs each distinct prompt once and
    fans its keys and values out to the group's rows. Log-probs, entropy, loss and every
    gradient are those of running each row whole (prompts of different lengths, a
    two-call row, temperatures and top-p per sample); a model whose cache cannot be shared
    gets the same numbers from whole rows."""
    llama, tokenizer = load_policy(graph_for("Arith", tiny_model, "/tmp"))
    model = (llama if kind == "llama" else _sliding_window_model(tiny_model)).eval()
    short = tuple(tokenizer("<user>1+2=<assistant>")["input_ids"])
    long = tuple(tokenizer("<user>12+7=<assistant>")["input_ids"])
    again = tuple(tokenizer("<eos><user>3+4=<assistant>")["input_ids"])
    samples = []
    for run in range(3):
        samples += [TrainingSample(short, (5 + run,), (-2.0,), 0.5 - run, 1.0, 1.0),
                    TrainingSample(long, (5, 6 + run, 7), (-2.0, -3.0, -1.0), run - 1.0,
                                   0.7, 0.9)]
    first = TrainingSample(long, (8, 9), (-1.5, -2.5), 1.2, 1.0, 0.5)
    samples += [first, TrainingSample(long + (8, 9) + again, (4,), (-0.5,), 1.2, 1.0, 0.5)]
    rows = shared_rows(samples)

    def train(share):
        model.zero_grad()
        batch = Batch.collate(rows, tokenizer.pad_token_id, share_prefixes=share)
        logprobs, entropy = token_logprobs(model, batch)
        loss = clipped_policy_loss(logprobs, batch).sum() / batch.mask.sum()
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        return batch, logprobs[batch.mask.bool()].detach(), entropy, loss.detach(), grads

    shared, whole = train(True), train(False)
    assert shared[0].prefixes is not None and whole[0].prefixes is None
    # two distinct first prompts for 7 rows; each row keeps its own tokens from the
    # prompt's last one on
    assert shared[0].prefixes.input_ids.shape == (2, len(long) - 1)
    assert shared[0].input_ids.shape[1] == len(again) + 3 < whole[0].input_ids.shape[1]
    for mine, theirs in zip(shared[1:4], whole[1:4]):
        assert torch.allclose(mine, theirs, atol=1e-5), (mine, theirs)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(shared[4], whole[4]))
    assert all(bool(torch.isfinite(g).all()) for g in shared[4])
    assert sum(float(g.abs().sum()) for g in shared[4]) > 0


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


def test_openai_client_reaches_the_same_model_and_is_recorded(tiny_model):
    """A workflow that uses model.openai_client trains like one that uses model.chat."""
    model, tokenizer = load_policy(graph_for("Arith", tiny_model, "/tmp"))
    engine = Engine(model.eval(), eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id)
    chat = LocalChatModel(engine, ChatCodec(tokenizer), name="tiny", sampling={"max_tokens": 3})
    completion = asyncio.run(chat.openai_client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "2+2="}], max_tokens=1))
    assert len(chat.calls) == 1 and len(chat.calls[0].response_ids) == 1
    assert completion.choices[0].message.content == tokenizer.decode(
        list(chat.calls[0].response_ids), skip_special_tokens=True)
    assert completion.usage.completion_tokens == 1


# ------------------------------------------------------------------------------- training


def test_the_example_learns(tiny_model, tmp_path):
    """With a fixed seed, the arith example's reward rises clearly within 150 steps."""
    graph = tunedsl.load_experiment("examples.arith.experiment:Arith", overrides=[
        f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}",
        "train_dataset.total_steps=150", "algorithm.eval_interval_steps=1000"])
    summary = run_local(graph, progress=False)
    first, last = summary.rewards[:15], summary.rewards[-15:]
    assert sum(last) / 15 > sum(first) / 15 + 0.15, (sum(first) / 15, sum(last) / 15)
    lines = (summary.run_dir / "metrics.jsonl").read_text().splitlines()
    assert len([1 for line in lines if "rollout/reward/mean" in json.loads(line)]) == 150
    assert (summary.run_dir / "reward_curve.png").stat().st_size > 0
    assert list((summary.run_dir / "monitor" / "tensorboard" / "trainer").iterdir())
    assert {"experiment.yaml", "config.yaml"} <= {p.name for p in summary.run_dir.iterdir()}


def test_checkpoint_reloads_with_the_trained_weights(tiny_model, tmp_path):
    """global_step_N holds a Hugging Face model equal to the one trained, plus optimizer state."""
    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.save_interval_steps=2")
    summary = run_local(graph, progress=False)
    names = sorted(p.name for p in summary.run_dir.glob("global_step_*"))
    assert names == ["global_step_2", "global_step_4"]
    final = summary.checkpoint
    assert json.loads((final / "trainer_state.json").read_text())["step"] == 4
    assert "state" in torch.load(final / "optimizer.pt")
    before = load_weights(tiny_model)
    after = load_weights(final)
    assert any(not torch.equal(before[k], after[k]) for k in before)  # it did learn something


def interrupted_and_resumed(model, tmp_path, *overrides, name="Arith"):
    """The ``name`` run straight through, and again stopped by Ctrl-C after step 2 and
    resumed: ``(straight, resumed, the interruption)``."""
    straight = run_local(graph_for(name, model, tmp_path / "a", *overrides), progress=False)

    def stop_after_two(report):
        if report.step == 2:
            raise KeyboardInterrupt

    graph = graph_for(name, model, tmp_path / "b", *overrides)
    with pytest.raises(RunInterrupted) as caught:
        run_local(graph, progress=False, on_step_end=stop_after_two)
    run_dir = next((tmp_path / "b" / "tunedsl").iterdir())
    return straight, run_local(graph, resume=run_dir, progress=False), caught.value


SMALL_TWO_CALLS = ("train_dataset.total_steps=4", "algorithm.group_size=4",
                   "algorithm.batch_size=5")


@pytest.mark.parametrize("name, overrides", [("Arith", ()), ("TwoCalls", SMALL_TWO_CALLS)])
def test_interrupted_and_resumed_run_ends_with_the_same_weights(tiny_model, tmp_path, name,
                                                                overrides):
    """Ctrl-C after step 2 saves a checkpoint; resuming reaches the uninterrupted weights
    (with two calls per trajectory, the second reusing the first's KV cache)."""
    straight, resumed, interruption = interrupted_and_resumed(tiny_model, tmp_path,
                                                              *overrides, name=name)
    assert "interrupted at step 2" in str(interruption) and \
        f"--resume {resumed.run_dir}" in str(interruption)
    assert resumed.steps == 4
    expected, got = load_weights(straight.checkpoint), load_weights(resumed.checkpoint)
    assert all(torch.allclose(expected[k], got[k], atol=1e-6) for k in expected)


def test_a_step_reuses_earlier_turns_and_drops_the_kept_caches_before_its_update(tiny_model,
                                                                                 tmp_path):
    """Within a step, each trajectory's second call reuses the first call's prompt from the
    kept KV cache (the step reports the share reused); the cache is dropped before the
    update changes the weights that computed it; the step reports the seconds spent in the
    model's passes."""
    from tunedsl.backends.local.trainer import LocalTrainer

    trainer = LocalTrainer(graph_for("TwoCalls", tiny_model, tmp_path, *SMALL_TWO_CALLS),
                           tmp_path)
    kept_at_update = []
    update = trainer.update
    trainer.update = lambda samples: kept_at_update.append(
        list(trainer.engine.prefixes.kept)) or update(samples)
    report = trainer.train_step()
    rollouts = [rollout for group in report.groups for rollout in group]
    assert {len(rollout.calls) for rollout in rollouts} == {2}
    firsts = {tuple(r.calls[1].prompt_ids): len(r.calls[0].prompt_ids) for r in rollouts}
    assert trainer.engine.reused_tokens >= sum(firsts.values())
    assert report.metrics["rollout/prefix_cache_hit"] == trainer.engine.reused_tokens / (
        trainer.engine.reused_tokens + trainer.engine.prefilled_tokens)
    assert kept_at_update == [[]]
    assert 0 < report.metrics["time/model_seconds"] < report.metrics["time/step_seconds"]
    trainer.close()


def test_params_reach_the_workflow_on_the_local_backend(tiny_model, tmp_path):
    """The experiment's params arrive in the workflow (its reward is params["bonus"])."""
    summary = run_local(graph_for("Params", tiny_model, tmp_path, "params.bonus=0.75"),
                        progress=False)
    assert set(summary.rewards) == {0.75}


def test_openai_client_workflow_trains(tiny_model, tmp_path):
    """Model calls made through the OpenAI client become training samples too."""
    summary = run_local(graph_for("OpenAIClient", tiny_model, tmp_path), progress=False)
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert rows and all(row["response_length/mean"] == 1.0 for row in rows)
    assert all(row["rollout/errors"] == 0.0 for row in rows)


def test_tune_runs_agentscope_tuners_functional_api_on_the_local_backend(tiny_model, tmp_path):
    """tune(workflow_func=..., judge_func=...) trains, as AgentScope's tune() does."""
    from examples.arith.experiment import add, exact

    summary = tunedsl.tune(
        workflow_func=add, judge_func=exact,
        train_dataset=tunedsl.DatasetConfig(str(REPO / "examples/arith/data"), total_steps=3),
        model=tunedsl.TunerModelConfig(tiny_model, max_model_len=32, max_tokens=1),
        algorithm=tunedsl.AlgorithmConfig("grpo", group_size=4, batch_size=5),
        experiment_name="seed-style", backend="local",
        overrides=[f"checkpoint_root_dir={tmp_path}"],
    )
    assert summary.steps == 3 and summary.run_dir.name.startswith("seed-style-")


# ------------------------------------------------------------------------------- failures


def test_failed_and_nan_rollouts_are_dropped_logged_and_counted(tiny_model, tmp_path):
    """A raising workflow and a NaN reward drop that rollout; the run goes on."""
    graph = graph_for("Flaky", tiny_model, tmp_path, "train_dataset.total_steps=9",
                      "algorithm.batch_size=5")
    summary = run_local(graph, progress=False)
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert summary.steps == 9 and len(rows) == 9
    errors = sum(row["rollout/errors"] for row in rows)
    skipped = sum(row["rollout/groups_skipped"] for row in rows)
    # Every task whose answer is 3 or 4 loses its whole group (4 rollouts) and is skipped.
    assert errors == 4 * skipped and skipped > 0
    log = (summary.run_dir / "log" / "rollouts.log").read_text()
    assert "@workflow flaky" in log and "ValueError: no threes" in log
    assert 'raise ValueError("no threes")' in log  # the user's traceback
    assert "returned the reward nan" in log and "'answer': '4'" in log


def test_missing_model_path_is_an_error_before_training(tmp_path):
    """A model folder that is not there: one line, nothing downloaded."""
    graph = graph_for("Arith", str(tmp_path / "nope"), tmp_path)
    with pytest.raises(ConfigError) as caught:
        run_local(graph, progress=False)
    assert str(caught.value) == (
        f"model.model_path: {tmp_path / 'nope'} is not a folder; the local backend loads a "
        f"local Hugging Face model folder and never downloads")


def test_a_model_that_is_not_a_causal_lm_is_an_error(tmp_path):
    """A vision model folder is refused by name before training."""
    from transformers import ViTConfig, ViTModel

    folder = tmp_path / "vit"
    ViTModel(ViTConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                       intermediate_size=8, image_size=8, patch_size=4)).save_pretrained(folder)
    with pytest.raises(ConfigError, match=r"is not a causal language model \(ViTConfig: "):
        run_local(graph_for("Arith", str(folder), tmp_path), progress=False)


def test_batch_larger_than_the_dataset_is_an_error(tiny_model, tmp_path):
    """45 training rows cannot fill a batch of 50."""
    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.batch_size=50")
    with pytest.raises(ConfigError) as caught:
        run_local(graph, progress=False)
    assert str(caught.value) == ("algorithm.batch_size = 50 is larger than train_dataset "
                                 "(45 rows); lower batch_size")


def test_workflow_that_never_calls_the_model_is_an_error(tiny_model, tmp_path):
    """Nothing to train: said before the first step."""
    with pytest.raises(ConfigError, match=r"@workflow silent \(.*agents.py:\d+\) never called "
                                          r"the model on the first task"):
        run_local(graph_for("Silent", tiny_model, tmp_path), progress=False)


def test_unsupported_algorithm_points_to_trinity(tiny_model, tmp_path):
    """PPO needs a critic: the local backend says so and names the alternative."""
    graph = graph_for("Arith", tiny_model, tmp_path, 'algorithm.algorithm_type="ppo"')
    with pytest.raises(ConfigError, match="the local backend runs grpo and multi_step_grpo; "
                                          "use --backend trinity for the others"):
        run_local(graph, progress=False)


def test_cli_run_reports_bad_input_in_one_line(tmp_path):
    """`tunedsl run --backend local` with a missing model exits 2 with one Error line."""
    done = subprocess.run(
        [sys.executable, "-m", "tunedsl", "run", f"{AGENTS}:Arith", "--backend", "local",
         "--set", f"model.model_path={tmp_path / 'nope'}", "--set",
         f"checkpoint_root_dir={tmp_path}"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].startswith("Error: model.model_path: ")
    assert "Traceback" not in done.stderr


def test_auxiliary_models_reach_workflow_and_judge_and_stay_frozen(tiny_model, tmp_path):
    """The helper answers in both functions; only the trained model's calls are learned from."""
    graph = graph_for("WithHelper", tiny_model, tmp_path,
                      f"auxiliary_models.helper.model_path={tiny_model}")
    summary = run_local(graph, progress=False)
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert all(row["rollout/errors"] == 0.0 for row in rows) and len(rows) == 4
    assert all(row["response_length/mean"] == 1.0 for row in rows)  # helper's 2-token replies: not
    from tunedsl.backends.local.trainer import LocalTrainer

    trainer = LocalTrainer(graph, summary.run_dir)
    helper_engine = trainer.auxiliary["helper"].engine
    assert not any(p.requires_grad for p in helper_engine.model.parameters())
    assert trainer.auxiliary["helper"].sampling == {"temperature": 0.5, "top_p": 1.0, "max_tokens": 2}


def test_missing_auxiliary_model_is_named_in_the_error(tiny_model, tmp_path):
    """An auxiliary model path that is not a folder is reported with its name."""
    graph = graph_for("WithHelper", tiny_model, tmp_path,
                      "auxiliary_models.helper.model_path=/nowhere/helper")
    with pytest.raises(ConfigError, match=r"^auxiliary_models\.helper\.model_path: /nowhere/helper"
                                          r" is not a folder"):
        run_local(graph, progress=False)


@pytest.mark.parametrize("name, cause", [
    ("Slow", "timed out after 1s"),
    ("Blocks", "raised RolloutBlocked: held the event loop past rollout_timeout = 1s: "
               "blocking code (time.sleep, a synchronous HTTP call, a long computation) in an "
               "async workflow or judge stops every rollout; await asyncio.to_thread(...) or "
               "use an async client"),
    ("Spins", "raised RolloutBlocked: held the event loop past rollout_timeout = 1s"),
])
def test_a_rollout_that_times_out_is_dropped_and_logged(tiny_model, tmp_path, name, cause):
    """explorer.max_timeout bounds each rollout, even one that blocks the event loop (a
    synchronous sleep, a pure-Python loop that swallows Exceptions): that rollout fails and
    is named, the step's other rollouts are trained on, the run goes on."""
    import time

    graph = graph_for(name, tiny_model, tmp_path, "trinity.explorer.max_timeout=1",
                      "train_dataset.total_steps=9")  # one epoch: every training seven
    started = time.perf_counter()
    summary = run_local(graph, progress=False)
    assert time.perf_counter() - started < 25  # nobody waited the 30 s sleep out
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    log = (summary.run_dir / "log" / "rollouts.log").read_text()
    sevens = sum(1 for line in log.splitlines() if "rollout failed" in line)
    assert sevens == sum(row["rollout/errors"] for row in rows) > 0
    assert cause in log and "'answer': '7'" in log
    kept = [json.loads(line) for line in (summary.run_dir / "rollouts.jsonl").read_text()
            .splitlines()]
    failed = [r for r in kept if r["error"]]
    assert len(failed) == sevens and {r["task"]["answer"] for r in failed} == {"7"}
    # A blocking rollout keeps the user's traceback, at the line that held the loop.
    assert all((r["traceback"] is None) == (name == "Slow") for r in failed)
    # The blocked step's other rollouts were scored, not lost with it.
    assert all(r["reward"] is not None for r in kept if not r["error"])
    assert sum(row["train/samples"] for row in rows) == len(kept) - sevens


def test_kl_to_the_initial_model_is_measured_and_penalised(tiny_model, tmp_path):
    """With kl_coef the reference stays frozen; KL is 0 at the first update, then grows."""
    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.kl_coef=0.5",
                      "algorithm.learning_rate=0.01")
    summary = run_local(graph, progress=False)
    kls = [json.loads(line)["actor/kl_loss"] for line in (summary.run_dir / "metrics.jsonl")
           .read_text().splitlines() if '"actor/kl_loss"' in line]
    assert kls[0] == pytest.approx(0.0, abs=1e-6) and kls[-1] > 1e-4
    from tunedsl.backends.local.trainer import LocalTrainer

    trainer = LocalTrainer(graph, summary.run_dir)
    assert trainer.reference is not None
    assert not any(p.requires_grad for p in trainer.reference.parameters())


def test_an_auxiliary_model_on_an_endpoint_is_called_there_not_loaded(tiny_model, tmp_path):
    """A helper with base_url is never loaded locally: each of its calls reaches the endpoint
    (its sampling settings with it), and training goes on as with a local helper."""
    from .openai_server import OpenAIServer

    with OpenAIServer(lambda messages: "3") as helper:
        graph = graph_for("WithHelper", tiny_model, tmp_path,
                          f"auxiliary_models.helper.base_url={helper.base_url}",
                          "auxiliary_models.helper.model_path=served")
        summary = run_local(graph, progress=False)
        requests = list(helper.requests)
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert len(rows) == 4 and all(row["rollout/errors"] == 0.0 for row in rows)
    rollouts = 4 * graph.algorithm.batch_size * graph.algorithm.group_size
    preflight = 1  # the one rollout before training, on the first task
    assert len(requests) == 2 * (rollouts + preflight)  # in the workflow and in the judge
    assert {(r["model"], r["temperature"], r["max_tokens"]) for r in requests} == {
        ("served", 0.5, 2)}


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


def test_max_model_len_bounds_prompt_and_reply(tiny_model):
    """A prompt that fills max_model_len fails that call, naming both lengths; a shorter one
    gets a reply cut to the room left."""
    from tunedsl.runtime.models.server import BadRequest

    model, tokenizer = load_policy(graph_for("Arith", tiny_model, "/tmp"))
    engine = Engine(model.eval(), eos_token_id=len(tokenizer) + 1,  # no EOS: fill the room
                    pad_token_id=tokenizer.pad_token_id)
    chat = LocalChatModel(engine, ChatCodec(tokenizer), name="tiny", sampling={"max_tokens": 64},
                          max_model_len=32)
    long = [{"role": "user", "content": "1+1=" * 2000}]
    with pytest.raises(BadRequest) as info:
        asyncio.run(chat.chat(long))
    assert str(info.value) == ("the prompt is 8002 tokens, and max_model_len = 32 leaves no room "
                               "for a reply; shorten the prompt or raise max_model_len")
    asyncio.run(chat.chat([{"role": "user", "content": "12+7=12+7="}]))
    call = chat.calls[-1]
    assert len(call.prompt_ids) + len(call.response_ids) == 32


def test_no_dropout_in_the_passes_that_compute_the_ratio(tiny_model, tmp_path):
    """With dropout in the model, the update's policy still equals the sampling policy before
    the step's update (Trinity's actor/ppo_kl is ~0), as TRL's disable_dropout does."""
    import shutil

    folder = tmp_path / "dropout-model"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "attention_dropout": 0.5}))
    summary = run_local(graph_for("Arith", str(folder), tmp_path, "train_dataset.total_steps=2"),
                        progress=False)
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert len(rows) == 2 and all(abs(row["actor/ppo_kl"]) < 1e-4 for row in rows)


def test_a_failing_preflight_says_why_and_keeps_its_log(tiny_model, tmp_path):
    """The cause (the user's error, with their traceback, and the task) is printed, and the
    run directory keeps the log of the failed rollout."""
    from tunedsl.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        run_local(graph_for("Broken", tiny_model, tmp_path), progress=False)
    [run_dir] = (tmp_path / "tunedsl").iterdir()
    log = run_dir / "log" / "rollouts.log"
    first = json.loads((REPO / "examples/arith/data/train.jsonl").read_text().splitlines()[0])
    assert str(info.value) == (
        f"before training, on the first training task ({first}): @workflow broken "
        f"(tests/fixtures/local/agents.py:{decorated_at('broken')}) raised ValueError: no "
        f"model today; the log is kept in {log}")
    assert 'raise ValueError("no model today")' in info.value.user_traceback
    assert "no model today" in log.read_text()


def test_a_step_whose_every_rollout_fails_stops_the_run_with_the_first_error(tiny_model,
                                                                             tmp_path):
    """Nothing to learn from: exit 1 with the first error; the step's lines are written."""
    from tests.fixtures.local import agents
    from tunedsl.errors import RunError

    agents._CALLS["count"] = 0
    with pytest.raises(RunError) as info:
        run_local(graph_for("GoesAway", tiny_model, tmp_path), progress=False)
    [run_dir] = (tmp_path / "tunedsl").iterdir()
    assert str(info.value) == (
        "step 1: every rollout failed, so there is nothing to learn from; the first error: "
        f"@workflow fails_after_preflight (tests/fixtures/local/agents.py:"
        f"{decorated_at('fails_after_preflight')}) raised "
        "RuntimeError: the service went away; all of them in "
        f"{run_dir / 'log' / 'rollouts.log'}")
    lines = (run_dir / "rollouts.jsonl").read_text().splitlines()
    assert len(lines) == 20 and all(json.loads(line)["error"] for line in lines)


def decorated_at(name):
    """The line of the decorator above ``async def name`` in the local agents fixture."""
    lines = (REPO / "tests/fixtures/local/agents.py").read_text().splitlines()
    return lines.index(next(line for line in lines if line.startswith(f"async def {name}(")))


def test_weights_that_stop_being_finite_stop_the_run_before_saving(tiny_model, tmp_path,
                                                                   monkeypatch):
    """An update that diverges (here one made to write NaN, as an exploding step would):
    exit 1 naming the step; the broken weights are never saved."""
    from tunedsl.errors import RunError

    step = torch.optim.AdamW.step

    def diverging(self, *args, **kwargs):
        result = step(self, *args, **kwargs)
        self.param_groups[0]["params"][0].data.fill_(float("nan"))
        return result

    monkeypatch.setattr(torch.optim.AdamW, "step", diverging)
    with pytest.raises(RunError) as info:
        run_local(graph_for("Arith", tiny_model, tmp_path), progress=False)
    assert str(info.value) == (
        "step 1: the weights are no longer finite after the update (learning_rate = 0.001); "
        "the run stopped before saving them, and the newest checkpoint is as it was; lower "
        "learning_rate")
    [run_dir] = (tmp_path / "tunedsl").iterdir()
    assert not list(run_dir.glob("global_step_*"))


def test_a_run_directory_being_written_cannot_be_resumed_by_another_process(tiny_model,
                                                                            tmp_path):
    """While one process holds a run directory, a --resume of it is refused, naming it."""
    import os

    from tunedsl.errors import ConfigError
    from tunedsl.runtime.rundir import locked

    summary = run_local(graph_for("Arith", tiny_model, tmp_path, "train_dataset.total_steps=1"),
                        progress=False)
    graph = graph_for("Arith", tiny_model, tmp_path, "train_dataset.total_steps=2")
    with locked(summary.run_dir):  # as the first process holds it while it writes
        with pytest.raises(ConfigError) as info:
            run_local(graph, resume=summary.run_dir, progress=False)
    assert str(info.value) == (f"run directory {summary.run_dir} is being written by process "
                               f"{os.getpid()}; wait for it to end (or stop it) before resuming")
    assert run_local(graph, resume=summary.run_dir, progress=False).steps == 2  # free again


def test_resuming_after_a_crash_runs_again_the_steps_past_the_checkpoint_once(tiny_model,
                                                                             tmp_path):
    """A process killed after logging steps 3 and 4 but before saving them: the resume drops
    their lines and runs them again, so each step is in metrics.jsonl and rollouts.jsonl once."""
    import shutil

    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.save_interval_steps=2")
    run_dir = run_local(graph, progress=False).run_dir
    shutil.rmtree(run_dir / "global_step_4")  # as if killed before the last save
    run_local(graph, resume=run_dir, progress=False)
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text()
             .splitlines() if "loss" in line]
    assert steps == [1, 2, 3, 4]
    logged = [json.loads(line)["step"] for line in (run_dir / "rollouts.jsonl").read_text()
              .splitlines()]
    assert logged == sorted(logged) and set(logged) == {1, 2, 3, 4} and len(logged) == 4 * 20


def test_algorithm_settings_mean_the_same_locally_and_unused_trinity_ones_are_named(
        tiny_model, tmp_path, capsys):
    """clip_range, weight_decay and grad_clip (also read from their [trinity] keys) drive the
    local trainer; [trinity] keys no field reads are named once, at the start."""
    from tunedsl.backends.local.trainer import LocalTrainer

    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.clip_range=0.1",
                      "trinity.algorithm.optimizer.weight_decay=0.05",
                      "trinity.trainer.grad_clip=0.5", "trinity.synchronizer.sync_interval=2",
                      "model.tensor_parallel_size=2", "model.trinity.enforce_eager=true",
                      "train_dataset.total_steps=1")
    summary = run_local(graph, progress=False)
    trainer = LocalTrainer(graph, summary.run_dir)
    assert (trainer.clip, trainer.grad_clip) == (0.1, 0.5)
    assert trainer.optimizer.param_groups[0]["weight_decay"] == 0.05
    assert capsys.readouterr().err.count(
        "local backend: these Trinity settings apply to Trinity runs only and are not used "
        "here: trinity.synchronizer.sync_interval, model.tensor_parallel_size, "
        "model.trinity.enforce_eager\n") == 1


def test_the_learning_rate_follows_trinitys_schedule(tiny_model, tmp_path):
    """Warmup and cosine decay (set through their Trinity keys too) give each update the
    learning rate verl's schedule gives it: 0 during warmup, then a half cosine from
    learning_rate to min_lr_ratio x learning_rate over the remaining steps."""
    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.lr_warmup_steps=1",
                      "trinity.algorithm.optimizer.lr_scheduler_type=cosine",
                      "algorithm.min_lr_ratio=0.1")
    summary = run_local(graph, progress=False)
    rates = [json.loads(line)["actor/lr"] for line in (summary.run_dir / "metrics.jsonl")
             .read_text().splitlines() if "actor/lr" in line]
    # 4 steps, 1 of warmup: progress 0, 1/3, 2/3 -> 0.55 + 0.45 cos(pi * progress).
    assert rates == pytest.approx([0.0, 1e-3, 1e-3 * 0.775, 1e-3 * 0.325])


def test_only_the_newest_checkpoints_and_the_best_are_kept_when_asked(tiny_model, tmp_path):
    """keep_checkpoints=2 keeps the newest two; keep_best_checkpoint also the best-evaluated."""
    graph = graph_for("Arith", tiny_model, tmp_path, "train_dataset.total_steps=6",
                      "algorithm.save_interval_steps=1", "algorithm.keep_checkpoints=2",
                      "algorithm.keep_best_checkpoint=true",
                      f"eval_dataset.path={REPO / 'examples/arith/data'}",
                      "eval_dataset.split=test", "algorithm.eval_interval_steps=1")
    summary = run_local(graph, progress=False)
    evals = {row["step"]: row["eval/eval/reward/mean@1"] for row in (
        json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
        .splitlines()) if "eval/eval/reward/mean@1" in row and row["step"] >= 1}
    best = max((reward, step) for step, reward in evals.items())[1]
    kept = sorted(int(p.name.split("_")[-1]) for p in summary.run_dir.glob("global_step_*"))
    assert kept == sorted({5, 6, best})


class ScriptedEngine:
    """Stands in for the sampler where a test needs a known reply: it "samples" the tokens of
    ``text`` (with made-up log-probs); everything after it is the real LocalChatModel."""

    def __init__(self, tokenizer, text):
        self.ids = tuple(tokenizer(text, add_special_tokens=False)["input_ids"])

    async def generate(self, prompt_ids, *, temperature, top_p, max_tokens):
        from tunedsl.backends.local.engine import Sample

        ids = self.ids[:max_tokens]
        return Sample(ids, tuple(-0.5 for _ in ids), "stop")


def test_reasoning_parsers_split_thinking_from_the_answer_as_vllm_does():
    """qwen3 needs both tags; deepseek_r1 reads up to </think>, and an unclosed think is all
    reasoning."""
    from tunedsl.backends.local.chat import split_reasoning

    assert split_reasoning("<think>add</think> 5", "qwen3") == ("5", "add")
    assert split_reasoning("add</think> 5", "qwen3") == ("add</think> 5", None)
    assert split_reasoning("add</think> 5", "deepseek_r1") == ("5", "add")
    assert split_reasoning("<think>still adding", "deepseek_r1") == ("", "still adding")
    assert split_reasoning("<think>x</think>5", None) == ("<think>x</think>5", None)


def test_the_local_model_moves_thinking_into_reasoning_content(tmp_path):
    """With reasoning_parser set, the reply's thinking is reasoning_content, through chat and
    through openai_client, as on Trinity; the trained tokens are the whole reply."""
    from examples.react_agent.tiny_model import CHARACTERS, CHAT_TEMPLATE, SPECIALS
    from examples.arith.tiny_model import build_tokenizer

    tokenizer = build_tokenizer(SPECIALS, CHARACTERS, CHAT_TEMPLATE)
    text = "<think>3 and 2 make 5</think>The answer is 5."
    chat = LocalChatModel(ScriptedEngine(tokenizer, text), ChatCodec(tokenizer), name="m",
                          sampling={}, reasoning_parser="qwen3")
    reply = asyncio.run(chat.chat([{"role": "user", "content": "3+2?"}]))
    assert (reply.content, reply.reasoning_content) == ("The answer is 5.", "3 and 2 make 5")
    assert len(chat.calls[0].response_ids) == len(text)
    completion = asyncio.run(chat.openai_client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "3+2?"}]))
    message = completion.choices[0].message
    assert (message.content, message.reasoning_content) == ("The answer is 5.", "3 and 2 make 5")


def test_a_reasoning_parser_the_local_backend_cannot_read_is_refused_at_start(tiny_model,
                                                                             tmp_path):
    """Only the parsers it reads run locally: the rest are named, with the choices."""
    with pytest.raises(ConfigError) as info:
        run_local(graph_for("Arith", tiny_model, tmp_path, "model.reasoning_parser=granite"),
                  progress=False)
    assert str(info.value) == (
        "model.reasoning_parser = 'granite': the local backend reads deepseek_r1 and qwen3 (as "
        "vLLM's parsers of those names do); use one of them, or --backend trinity")


def test_learning_with_multi_token_replies_and_two_calls_per_trajectory(tiny_model, tmp_path):
    """Each trajectory makes two calls of up to two tokens (the digits and the end of the
    reply), and both are trained on: the reward rises from chance within 200 steps."""
    summary = run_local(graph_for("TwoCalls", tiny_model, tmp_path), progress=False)
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert {row["train/samples"] for row in rows} == {15 * 8 * 2}
    assert max(row["response_length/mean"] for row in rows) > 1.5  # replies of more than a token
    first, last = (sum(row["rollout/reward/mean"] for row in part) / 20 for part in (rows[:20],
                                                                           rows[-20:]))
    assert first < 0.1 and last > first + 0.1  # measured: 0.033 -> 0.237 (seed 0: 0.156)


def test_a_damaged_newest_checkpoint_is_named_and_the_good_one_used_on_request(tiny_model,
                                                                              tmp_path):
    """A checkpoint cut short (a crash or a full disk mid-save): --resume names the file
    that is wrong; --from-good-checkpoint continues from the newest good one."""
    graph_args = ["--set", f"model.model_path={tiny_model}", "--set",
                  f"checkpoint_root_dir={tmp_path}", "--set", "algorithm.save_interval_steps=2"]
    first = subprocess.run([sys.executable, "-m", "tunedsl", "run", f"{AGENTS}:Arith",
                            "--backend", "local", "--no-progress", *graph_args], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    [run_dir] = (tmp_path / "tunedsl").iterdir()
    weights = run_dir / "global_step_4" / "model.safetensors"
    data = weights.read_bytes()
    header = 8 + int.from_bytes(data[:8], "little")  # safetensors: 8-byte length, then JSON
    weights.write_bytes(data[:header + 10])  # the header whole, the tensors cut short
    resume = [sys.executable, "-m", "tunedsl", "run", f"{AGENTS}:Arith", "--backend", "local",
              "--no-progress", *graph_args, "--resume", str(run_dir)]
    refused = subprocess.run(resume, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"Error: --resume {run_dir}: the newest checkpoint global_step_4 is damaged "
        "(model.safetensors: Error while deserializing header: incomplete metadata, file not "
        "fully covered); add --from-good-checkpoint to resume from global_step_2, the newest "
        "good one")
    resumed = subprocess.run([*resume, "--from-good-checkpoint"], cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resume: skipping global_step_4 (model.safetensors:" in resumed.stderr
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text()
             .splitlines() if "loss" in line]
    assert steps == [1, 2, 3, 4]  # steps 3 and 4 ran again, once each in the file
    assert load_weights(run_dir / "global_step_4")  # whole again


def test_the_summary_names_the_command_that_shows_the_rollouts(tiny_model, tmp_path):
    """The end-of-run summary ends with the `tunedsl view` command for the run directory,
    and that directory is one the viewer reads."""
    import io

    from tunedsl.backends.local.run import print_summary
    from tunedsl.tools.view import open_source

    graph = graph_for("Arith", tiny_model, tmp_path, "train_dataset.total_steps=2")
    summary = run_local(graph, progress=False)
    out = io.StringIO()
    print_summary(summary, out)
    assert out.getvalue().splitlines()[-1] == f"rollouts       tunedsl view {summary.run_dir}"
    source = open_source(summary.run_dir)
    per_step = graph.algorithm.batch_size * graph.algorithm.group_size
    assert (source.kind, len(source.entries)) == ("run", 2 * per_step)
