"""The local backend's batches (batches.py): rows and passes that share a call's or a
group's prompt train with the loss, entropy and gradients of training them apart; the
clipped loss on them, worked by hand."""

from __future__ import annotations

import math

import attrs
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tunedsl.backends.local.batches import (  # noqa: E402
    Batch,
    TrainingSample,
    shared_rows,
    token_logprobs,
)
from tunedsl.backends.local.losses import PolicyLoss, StepShape  # noqa: E402
from tunedsl.backends.local.models import load_policy  # noqa: E402
from tunedsl.dsl.algorithms import resolve  # noqa: E402
from tunedsl.dsl.records import Algorithm  # noqa: E402

from .local_support import graph_for  # noqa: E402


def ppo_loss(logprobs: torch.Tensor, batch: Batch) -> torch.Tensor:
    """GRPO's clipped loss (clip 0.2, no KL), token-mean over the batch's responses."""
    algorithm = resolve(Algorithm("grpo", kl_loss_fn="none"))
    shape = StepShape("token-mean", tokens=int(batch.mask.sum()), sequences=0, longest=0)
    return PolicyLoss(algorithm, shape)(logprobs, old=batch.old_logprobs,
                                        advantages=batch.advantages, mask=batch.mask,
                                        sample=batch.sample).loss


def mean_entropy(entropy: torch.Tensor, batch: Batch) -> torch.Tensor:
    return entropy.sum() / batch.mask.sum()


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
    expected = [[-2.0 * 1.2, -2.0 * math.exp(-0.5)], [1.0 * 0.8, 0.0]]
    token_mean = sum(sum(row) for row in expected) / 3
    assert float(ppo_loss(logprobs, batch)) == pytest.approx(token_mean, abs=1e-6)
    assert token_mean == pytest.approx((-2.4 - 2.0 * math.exp(-0.5) + 0.8) / 3)


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
        loss = ppo_loss(logprobs, batch)
        loss.backward()
        return loss.detach(), mean_entropy(entropy, batch), [p.grad.clone()
                                                             for p in model.parameters()]

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
        loss = ppo_loss(logprobs, batch)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        return (batch, logprobs[batch.mask.bool()].detach(), mean_entropy(entropy, batch),
                loss.detach(), grads)

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
