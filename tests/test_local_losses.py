"""The local trainer's losses are Trinity's: for every algorithm both backends run, the
same log-probs, old log-probs, reference log-probs, entropies, advantages and masks go
through Trinity-RFT 0.6.0's own trainer loss (``TrinityPolicyLoss``, built from the
``algorithm`` section Trinity's validator makes of tunedsl's YAML) and through the local
`PolicyLoss`, over the local trainer's packed rows and passes. Loss, gradients and
metrics must agree to 1e-6."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trinity.common.config")

import trinity.trainer.verl.losses as trinity_losses  # noqa: E402
from tensordict import TensorDict  # noqa: E402

import tunedsl  # noqa: E402
from tunedsl.backends.local.batches import Batch, TrainingSample, shared_rows  # noqa: E402
from tunedsl.backends.local.losses import PolicyLoss, StepShape  # noqa: E402
from tunedsl.dsl.algorithms import ALGORITHMS, resolve  # noqa: E402

from .trinity_support import validate  # noqa: E402

#: Settings beyond each algorithm's defaults that change the arithmetic.
VARIANTS = {
    "defaults": [],
    "entropy bonus and k3": ["algorithm.entropy_coef=0.01", "algorithm.kl_loss_fn=k3",
                             "algorithm.kl_coef=0.05"],
    "seq-mean-token-mean": ["algorithm.loss_agg_mode=seq-mean-token-mean",
                            "algorithm.kl_loss_fn=low_var_kl"],
    "seq-mean-token-sum": ["algorithm.loss_agg_mode=seq-mean-token-sum",
                           "algorithm.kl_loss_fn=k1"],
    "seq-mean-token-sum-norm": ["algorithm.loss_agg_mode=seq-mean-token-sum-norm",
                                "algorithm.kl_loss_fn=corrected_k3", "algorithm.kl_coef=0.1"],
    "token-mean, abs KL": ["algorithm.loss_agg_mode=token-mean", "algorithm.kl_loss_fn=abs"],
}
#: What an algorithm needs beyond the fixture experiment: on_policy_distill, a teacher.
NEEDS = {"on_policy_distill": ["auxiliary_models.teacher.model_path=teacher"]}
#: The fixture experiment of an algorithm that needs its own (SFT learns conversations).
EXPERIMENTS = {"sft": "Supervised"}
#: Each loss's own arguments, where they change the arithmetic (the rest: defaults).
OWN_ARGUMENTS = {
    "grpo": ["algorithm.clip_range_high=0.28", "algorithm.policy_loss_args.clip_ratio_c=2.0",
             "algorithm.policy_loss_args.enable_sequence_masking=true",
             "algorithm.policy_loss_args.delta_sequence_masking=0.05"],
    "cispo": ["algorithm.policy_loss_args.enable_mask_clip=true",
              "algorithm.policy_loss_args.mask_clip_range_high=0.1",
              "algorithm.policy_loss_args.mask_clip_range_low=0.1"],
    "sapo": ["algorithm.policy_loss_args.tau_pos=0.8", "algorithm.policy_loss_args.tau_neg=1.3"],
    "topr": ["algorithm.policy_loss_args.advantage_threshold=0.1"],
    "opmd": ["algorithm.policy_loss_args.tau=0.5"],
    "gspo": ["algorithm.clip_range_low=0.05", "algorithm.clip_range_high=0.08"],
}


def step_samples(seed: int) -> tuple[list[TrainingSample], list[torch.Tensor], dict]:
    """Eight calls of one step, one of them masked, two continuing the call before (so the
    local trainer packs them into one row), with new log-probs drawn away from the old
    ones (so ratios clip) and advantages of both signs; returns the samples, each call's
    new log-probs as a leaf tensor, and each call's reference log-probs and entropies."""
    rng = random.Random(seed)
    samples, new, reference, entropy = [], [], [], []
    for index in range(8):
        length = rng.randint(1, 6)
        prompt = tuple(rng.randint(3, 30) for _ in range(rng.randint(2, 4)))
        if index in (3, 6):  # the next turn of the call before
            before = samples[-1]
            prompt = before.prompt_ids + before.response_ids + prompt
        response = tuple(rng.randint(3, 30) for _ in range(length))
        old = tuple(rng.uniform(-3.0, -0.1) for _ in range(length))
        advantage = rng.choice([-1.2, -0.4, 0.0, 0.6, 1.5])
        samples.append(TrainingSample(prompt, response, old, advantage, masked=index == 5))
        new.append((torch.tensor(old) + torch.tensor([rng.uniform(-0.5, 0.5)
                                                       for _ in range(length)])
                    ).requires_grad_(True))
        reference.append(torch.tensor(old) + torch.tensor([rng.uniform(-0.3, 0.3)
                                                            for _ in range(length)]))
        entropy.append(torch.tensor([rng.uniform(0.1, 2.0) for _ in range(length)],
                                    requires_grad=True))
    return samples, new, {"reference": reference, "entropy": entropy}


def padded(values: list[torch.Tensor], width: int) -> torch.Tensor:
    """Trinity's layout: one experience a row, right-padded (differentiable)."""
    return torch.stack([torch.nn.functional.pad(v, (0, width - len(v))) for v in values])


def trinity_loss(algorithm_config, samples, new, extra):
    """Trinity's trainer loss over the step's experiences in one batch. verl's unpadding of
    the model's output is layout plumbing (``no_padding_2_padding``): the log-probs and
    entropies are handed over already padded."""
    width = max(len(s.response_ids) for s in samples)
    mask = padded([torch.full((len(s.response_ids),), 0.0 if s.masked else 1.0)
                   for s in samples], width)
    advantages = padded([torch.full((len(s.response_ids),), s.advantage) for s in samples],
                        width) * mask
    data = TensorDict({
        "response_mask": mask, "old_log_probs": padded([torch.tensor(s.old_logprobs)
                                                         for s in samples], width),
        "advantages": advantages, "ref_log_prob": padded(extra["reference"], width),
    }, batch_size=[len(samples)])
    loss_fn = trinity_losses.build_trinity_loss(algorithm_config)
    output = {"log_probs": padded(new, width), "entropy": padded(extra["entropy"], width)}
    original = trinity_losses.no_padding_2_padding
    trinity_losses.no_padding_2_padding = lambda tensor, data: tensor
    try:
        return loss_fn(output, data)
    finally:
        trinity_losses.no_padding_2_padding = original


def local_loss(algorithm, samples, new, extra):
    """The local trainer's loss over the same calls, in its rows, in two passes."""
    shape = StepShape.of(algorithm.loss_agg_mode, [len(s.response_ids) for s in samples],
                         [s.masked for s in samples])
    loss_fn = PolicyLoss(algorithm, shape)
    rows = shared_rows(samples)
    assert len(rows) == len(samples) - 2  # two rows of two calls
    total, metrics, index = torch.tensor(0.0), {}, 0
    for part in (rows[:3], rows[3:]):
        batch = Batch.collate(part, pad_token_id=0)
        count = sum(len(row) for row in part)
        inside = batch.sample >= 0

        def laid_out(values):  # each call's values at its positions in the rows
            flat = torch.cat(values[index:index + count])
            return torch.zeros(inside.shape).masked_scatter(inside, flat)

        share = loss_fn(laid_out(new), old=batch.old_logprobs, advantages=batch.advantages,
                        mask=batch.mask, sample=batch.sample,
                        reference=laid_out(extra["reference"]), entropy=laid_out(extra["entropy"]))
        total = total + share.loss
        for name, value in share.metrics.items():
            metrics[name] = metrics.get(name, 0.0) + value
        index += count
    return total, metrics


def grads(new, extra) -> list[torch.Tensor]:
    """Each leaf's gradient (zeros where the loss does not reach it, as an entropy weighted
    0 on the local side)."""
    return [torch.zeros_like(t) if t.grad is None else t.grad.clone()
            for t in (*new, *extra["entropy"])]


def assert_the_loss_is_trinitys(graph, folder, seed: int):
    """Trinity's trainer loss (from the YAML tunedsl writes for ``graph``, validated by
    Trinity) and the local one over the same step: loss, gradients and every local metric
    agree to 1e-6. Returns the local metrics, Trinity's (``actor/`` dropped), the local
    gradients and the new log-probs."""
    config = validate(graph, folder)
    algorithm = resolve(graph.algorithm)
    samples, new, extra = step_samples(seed=seed)
    expected, expected_metrics = trinity_loss(config.algorithm, samples, new, extra)
    expected.backward()
    trinity_grads = grads(new, extra)
    for t in (*new, *extra["entropy"]):
        t.grad = None
    found, metrics = local_loss(algorithm, samples, new, extra)
    found.backward()
    local_grads = grads(new, extra)
    assert float(found.detach()) == pytest.approx(float(expected.detach()), abs=1e-6)
    for trinity_grad, local_grad in zip(trinity_grads, local_grads):
        assert torch.allclose(trinity_grad, local_grad, atol=1e-6)
    trinity = {key.removeprefix("actor/"): value for key, value in expected_metrics.items()}
    for key, value in metrics.items():
        assert value == pytest.approx(trinity[key], abs=1e-6), key
    return metrics, trinity, local_grads, new


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_loss_gradients_and_metrics_are_trinitys(name, variant, tmp_path):
    parts = ALGORITHMS[name]
    # an algorithm without a reference model (or an entropy bonus) refuses those settings
    variant_settings = [o for o in VARIANTS[variant]
                        if (parts.reference or not o.startswith("algorithm.kl_"))
                        and (parts.entropy_loss_fn != "none" or "entropy" not in o)]
    overrides = [f"algorithm.algorithm_type={name}", *variant_settings, *NEEDS.get(name, [])]
    if variant == "defaults":
        overrides += OWN_ARGUMENTS.get(name, [])
    experiment = EXPERIMENTS.get(name, "Arith")
    graph = tunedsl.load_experiment(f"tests.fixtures.local.agents:{experiment}", overrides=[
        "model.model_path=tiny", f"checkpoint_root_dir={tmp_path}", *overrides])
    metrics, trinity, local_grads, new = assert_the_loss_is_trinitys(
        graph, tmp_path, seed=len(name) * 31 + len(variant))
    assert any(bool(g.abs().sum() > 0) for g in local_grads[:len(new)])
    assert set(metrics) <= set(trinity)
    # what only Trinity reports: an entropy loss or KL weighted 0, the KL's coefficient
    assert set(trinity) - set(metrics) <= {"entropy_loss", "kl_loss", "kl_coef"}


def test_a_masked_reply_counts_as_a_sequence_but_trains_nothing():
    """With seq-mean-token-mean, a masked call adds 0 to the mean over calls but counts in
    its denominator (Trinity's ``aggregate_loss``): two calls, one masked, halve the
    other's loss."""
    algorithm = resolve(tunedsl.Algorithm("grpo", loss_agg_mode="seq-mean-token-mean"))
    samples = [TrainingSample((5,), (6, 7), (-1.0, -1.0), 1.0),
               TrainingSample((5,), (6,), (-1.0,), 1.0, masked=True)]
    batch = Batch.collate(samples, pad_token_id=0)
    assert batch.mask.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    logprobs = torch.full(batch.mask.shape, -1.0)  # ratio 1: the loss is -A per token
    both = PolicyLoss(algorithm, StepShape.of(algorithm.loss_agg_mode, [2, 1], [False, True]))
    alone = PolicyLoss(algorithm, StepShape.of(algorithm.loss_agg_mode, [2], [False]))
    arguments = dict(old=batch.old_logprobs, advantages=batch.advantages, mask=batch.mask,
                     sample=batch.sample)
    assert float(both(logprobs, **arguments).loss) == pytest.approx(-0.5)
    assert float(alone(logprobs, **arguments).loss) == pytest.approx(-1.0)


#: rec composed into other algorithms (as Trinity's configs compose it), one variant per
#: clip mode, weight and regulariser; the last two with a KL loss and an entropy bonus
#: aggregated by a loss_agg_mode that rec's own term ignores.
REC_VARIANTS = {
    "plain REINFORCE": [],
    "one-side, importance sampling": ["clip_mode=one-side", "weight=importance_sampling"],
    "two-side": ["clip_mode=two-side", "epsilon_low=0.1", "epsilon_high=0.15"],
    "ring": ["clip_mode=ring", "epsilon_low_prime=0.3", "epsilon_high_prime=0.5"],
    "gspo-one-side, sequence weight": ["clip_mode=gspo-one-side",
                                       "weight=gspo_importance_sampling"],
    "advantage weight, forward-kl": ["weight=advantage", "temp=0.7",
                                     "regularizer=forward-kl", "regularizer_coef=0.1"],
    "k2 regulariser, seq-mean-token-sum": ["clip_mode=one-side", "regularizer=k2",
                                           "regularizer_coef=0.2", "@seq-mean-token-sum"],
    "gspo-one-side, token-sum-norm": ["clip_mode=gspo-one-side",
                                      "@seq-mean-token-sum-norm"],
}


@pytest.mark.parametrize("variant", sorted(REC_VARIANTS))
def test_rec_composed_into_another_algorithm_is_trinitys(variant, tmp_path):
    """Trinity's RECPolicyLossFn (a REINFORCE loss on the tokens whose detached ratio is in
    range, its own aggregation) and the local one agree to 1e-6 in loss, gradients and
    metrics, composed into multi_step_grpo as a ported config composes it."""
    arguments = [f"algorithm.policy_loss_args.{item}" for item in REC_VARIANTS[variant]
                 if not item.startswith("@")]
    modes = [setting for item in REC_VARIANTS[variant] if item.startswith("@")
             for setting in (f"algorithm.loss_agg_mode={item[1:]}",
                             "algorithm.entropy_coef=0.01", "algorithm.kl_coef=0.05")]
    graph = tunedsl.load_experiment("tests.fixtures.local.agents:Arith", overrides=[
        "model.model_path=tiny", f"checkpoint_root_dir={tmp_path}",
        "algorithm.algorithm_type=multi_step_grpo", "algorithm.policy_loss_fn=rec",
        *arguments, *modes])
    metrics, _, _, _ = assert_the_loss_is_trinitys(graph, tmp_path, seed=len(variant) * 7)
    assert {"pg_loss", "pg_clipfrac"} <= set(metrics)
