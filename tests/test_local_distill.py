"""On-policy distillation on the local backend: a teacher (an auxiliary model) scores the
student's own samples in batched passes, each reply token's advantage is Trinity's
(``OnPolicyDistillAdvantage`` over the DataProto Trinity's trainer builds), and the student
learns the arith sums from a teacher that knows them."""

from __future__ import annotations

import logging
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import tunedsl  # noqa: E402
from tunedsl.backends.local.batches import TrainingSample, sample_logprobs  # noqa: E402
from tunedsl.backends.local.models import load_policy  # noqa: E402

from .local_support import graph_for, run_local  # noqa: E402


@pytest.fixture(scope="session")
def arith_teacher(tiny_model, tmp_path_factory):
    """The arith example's model after 150 GRPO steps (a reward near 0.6): a teacher."""
    folder = tmp_path_factory.mktemp("teacher")
    graph = tunedsl.load_experiment("examples.arith.experiment:Arith", overrides=[
        f"model.model_path={tiny_model}", f"checkpoint_root_dir={folder}",
        "train_dataset.total_steps=150", "algorithm.eval_interval_steps=1000",
        "algorithm.save_interval_steps=150", "algorithm.kl_loss_fn=none"])
    summary = run_local(graph, progress=False)
    assert sum(summary.rewards[-15:]) / 15 > 0.4
    return str(summary.run_dir / "global_step_150")


def distilled(tiny_model, teacher, tmp_path, *overrides):
    return graph_for("Arith", tiny_model, tmp_path, "algorithm.algorithm_type=on_policy_distill",
                     f"auxiliary_models.teacher.model_path={teacher}", *overrides)


def test_the_student_learns_from_the_teacher(tiny_model, arith_teacher, tmp_path):
    """No reward reaches the loss; the student's reward rises toward the teacher's, and its
    KL to the teacher (Trinity's advantage/kl/mean) falls."""
    graph = tunedsl.load_experiment("examples.arith.experiment:Arith", overrides=[
        f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}",
        "train_dataset.total_steps=100", "algorithm.eval_interval_steps=1000",
        "algorithm.algorithm_type=on_policy_distill",
        f"auxiliary_models.teacher.model_path={arith_teacher}"])
    kl = []
    summary = run_local(graph, progress=False,
                        on_step_end=lambda report: kl.append(report.metrics["advantage/kl/mean"]))
    first, last = summary.rewards[:10], summary.rewards[-10:]
    assert sum(last) / 10 > sum(first) / 10 + 0.15, (sum(first) / 10, sum(last) / 10)
    assert sum(kl[-10:]) / 10 < sum(kl[:10]) / 10 / 2, (kl[:10], kl[-10:])


def test_the_teachers_pass_is_batched_and_scores_each_call_as_alone(tiny_model, arith_teacher,
                                                                   tmp_path):
    """The step's calls go through the teacher in the trainer's packed passes (here one
    forward pass for 12 calls of different prompts, two of them continuing the one before),
    with each call's log-probs those of scoring it alone."""
    teacher, tokenizer = load_policy(graph_for("Arith", arith_teacher, tmp_path))
    teacher.eval()
    samples = []
    for index in range(12):
        prompt = tuple(tokenizer(f"<user>{index % 9}+{index // 3}=<assistant>")["input_ids"])
        if index in (4, 9):  # the next turn of the call before
            prompt = samples[-1].prompt_ids + samples[-1].response_ids + prompt
        samples.append(TrainingSample(prompt, (5 + index % 4, 6), (-1.0, -1.0), 0.0, 1.0, 1.0))
    passes = []
    hook = teacher.register_forward_hook(lambda *args: passes.append(1))
    together = sample_logprobs(teacher, samples, tokenizer.pad_token_id)
    hook.remove()
    alone = [sample_logprobs(teacher, [sample], tokenizer.pad_token_id)[0] for sample in samples]
    assert len(passes) <= 2 < len(samples)  # a pass over shared prompts, then the rows
    for mine, theirs in zip(together, alone):
        assert mine == pytest.approx(theirs, abs=1e-5)


def test_each_tokens_advantage_is_trinitys(tiny_model, arith_teacher, tmp_path):
    """One local step's per-token advantages and KL metrics equal what Trinity's
    ``OnPolicyDistillAdvantage`` computes from the same calls, the student's sampled
    log-probs as ``old_log_probs`` and the teacher's as ``teacher_logprobs``."""
    pytest.importorskip("trinity.common.config")
    from trinity.algorithm.advantage_fn import ADVANTAGE_FN
    from trinity.common.experience import EID, Experience
    from trinity.trainer.verl.utils import to_data_proto

    from tunedsl.backends.local.trainer import LocalTrainer

    trainer = LocalTrainer(distilled(tiny_model, arith_teacher, tmp_path,
                                     "algorithm.advantage_args.kl_coef=0.5"), tmp_path)
    report = trainer.train_step()
    teacher = trainer.explorer.auxiliary["teacher"].engine.model
    experiences, local = [], []
    for task, group in enumerate(report.groups):
        for run, rollout in enumerate(group):
            for step, (call, advantages) in enumerate(zip(rollout.calls, rollout.advantages)):
                [scores] = sample_logprobs(teacher, [TrainingSample(
                    call.prompt_ids, call.response_ids, call.logprobs, 0.0)],
                    trainer.tokenizer.pad_token_id)
                experiences.append(Experience(
                    eid=EID(batch=0, task=task, run=run, step=step),
                    tokens=torch.tensor(call.prompt_ids + call.response_ids),
                    prompt_length=len(call.prompt_ids), logprobs=torch.tensor(call.logprobs),
                    teacher_logprobs=torch.tensor(scores), reward=0.0))
                local.append(advantages)
    trainer.close()
    assert experiences and all(len(a) == len(e.logprobs) for a, e in zip(local, experiences))
    batch = to_data_proto(experiences, pad_token_id=0, model=types.SimpleNamespace(),
                          logger=logging.getLogger(__name__))
    # Trinity's trainer takes the rollout's log-probs as the old ones
    # (bypass_old_logprobs, its default: trainer/verl/trainer.py:517-519).
    batch.batch["old_log_probs"] = batch.batch["rollout_log_probs"]
    batch, metrics = ADVANTAGE_FN.get("on_policy_distill")(kl_coef=0.5)(batch)
    for mine, row, mask in zip(local, batch.batch["advantages"],
                               batch.batch["response_mask"]):
        assert mine == pytest.approx(row[mask.bool()].tolist(), abs=1e-6)
    for key in ("kl/mean", "kl/std", "advantages/mean"):
        assert report.metrics[f"advantage/{key}"] == pytest.approx(metrics[key], abs=1e-5), key


def test_a_teacher_with_another_tokenizer_is_refused(tiny_model, tmp_path):
    """The teacher scores the student's token ids: another vocabulary is refused before
    any step, naming it."""
    from examples.arith.tiny_model import CHARACTERS, build_tiny_model, build_tokenizer

    from tunedsl.backends.local.trainer import LocalTrainer
    from tunedsl.errors import ConfigError

    other = build_tiny_model(str(tmp_path / "other"), seed=0,
                             tokenizer=build_tokenizer(characters=CHARACTERS + ["x"]))
    with pytest.raises(ConfigError) as caught:
        LocalTrainer(distilled(tiny_model, other, tmp_path), tmp_path)
    assert str(caught.value) == (
        "auxiliary_models.teacher: the teacher's tokenizer differs from model.model_path's, "
        "so it cannot score the student's tokens; distill from a teacher of the same model "
        "family (same tokenizer)")


def served_teacher(folder):
    """The teacher's model behind a loopback completions endpoint (echo and logprobs over
    token ids, as vLLM answers): each token's log-prob given the ones before, from its own
    forward pass."""
    from transformers import AutoModelForCausalLM

    from .openai_server import OpenAIServer

    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()

    def score(tokens):
        with torch.no_grad():
            logits = model(torch.tensor([tokens])).logits[0].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        return [None] + [float(logprobs[i - 1, tokens[i]]) for i in range(1, len(tokens))]

    return OpenAIServer(score=score)


def test_a_teacher_at_an_endpoint_scores_as_the_same_model_run_here(tiny_model, arith_teacher,
                                                                    tmp_path):
    """The same step with the teacher run locally and served at an endpoint: the same
    per-token advantages, the endpoint asked once for the whole step's calls."""
    from tunedsl.backends.local.trainer import LocalTrainer

    def step(*overrides):
        trainer = LocalTrainer(distilled(tiny_model, arith_teacher, tmp_path, *overrides),
                               tmp_path)
        report = trainer.train_step()
        trainer.close()
        return [rollout.advantages for group in report.groups for rollout in group], report

    local, _ = step()
    with served_teacher(arith_teacher) as server:
        remote, report = step(f"auxiliary_models.teacher.base_url={server.base_url}",
                              "auxiliary_models.teacher.model_path=teacher")
    calls = sum(len(rollout.calls) for group in report.groups for rollout in group)
    [request] = [r for r in server.requests if "prompt" in r]
    assert (len(request["prompt"]), request["echo"], request["logprobs"]) == (calls, True, 0)
    assert len(local) == len(remote) == 20
    for mine, theirs in zip(local, remote):
        for a, b in zip(mine, theirs):
            assert a == pytest.approx(b, abs=1e-5)


def teachers_step_error(tiny_model, tmp_path, server) -> str:
    """What stops a local training step whose teacher is ``server``'s endpoint."""
    from tunedsl.backends.local.trainer import LocalTrainer
    from tunedsl.errors import RunError

    trainer = LocalTrainer(distilled(tiny_model, "teacher", tmp_path,
                                     f"auxiliary_models.teacher.base_url={server.base_url}"),
                           tmp_path)
    with pytest.raises(RunError) as caught:
        trainer.train_step()
    trainer.close()
    return str(caught.value)


def test_a_teacher_endpoint_that_gives_no_logprobs_stops_the_step_in_one_line(
        tiny_model, tmp_path):
    from .openai_server import OpenAIServer

    with OpenAIServer() as server:  # chat only: completions is not served
        stopped = teachers_step_error(tiny_model, tmp_path, server)
    assert stopped.startswith(
        "auxiliary_models.teacher: the teacher's endpoint did not score the student's tokens "
        "(NotFoundError: ")
    assert stopped.endswith(
        "it must answer completions with echo and logprobs over token-id prompts (vLLM's "
        "OpenAI server does)")


@pytest.mark.parametrize("score, shown", [
    (50.0, "50.0"),  # trained on, silently: a log-prob is at most 0
    ("abc", "'abc'"),  # an internal error deep in the loss
    (float("-inf"), "-inf"),  # "the loss is nan (check the rewards ...)"
])
def test_a_teacher_log_prob_that_is_not_one_stops_the_step_and_check(tiny_model, tmp_path,
                                                                   score, shown):
    """What a teacher endpoint answers as log-probs is read at the boundary, by the run's
    scorer and by check's probe alike: anything but a finite number at most 0 is one line
    naming the value."""
    from .cli_support import cli
    from .openai_server import OpenAIServer

    with OpenAIServer(score=lambda tokens: [None] + [score] * (len(tokens) - 1)) as server:
        stopped = teachers_step_error(tiny_model, tmp_path, server)
        done = cli("check", "tests.fixtures.local.agents:Arith", "--backend", "local",
                   "--set", f"model.model_path={tiny_model}",
                   "--set", "algorithm.algorithm_type=on_policy_distill",
                   "--set", "auxiliary_models.teacher.model_path=teacher",
                   "--set", f"auxiliary_models.teacher.base_url={server.base_url}")
    protocol = ("it must answer completions with echo and logprobs over token-id prompts "
                "(vLLM's OpenAI server does)")
    assert stopped.startswith(f"auxiliary_models.teacher: the teacher's endpoint answered "
                              f"{shown} as the log-prob of token 1 of sequence ")
    assert stopped.endswith(f"where a log-prob is a finite number at most 0; {protocol}")
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: auxiliary_models.teacher: {server.base_url} does not score token ids as a "
        f"teacher must (ValueError: a log-prob of {shown}, where a log-prob is a finite "
        f"number at most 0); {protocol}"))


def test_check_asks_a_teacher_endpoint_to_score_before_the_run(tiny_model, tmp_path):
    """``check`` (as ``run``) has the teacher's endpoint score a token-id prompt: one that
    cannot is named in one line, exit 2; one that can is reported."""
    from .cli_support import cli
    from .openai_server import OpenAIServer

    def check(server):
        return cli("check", "tests.fixtures.local.agents:Arith", "--backend", "local",
                   "--set", f"model.model_path={tiny_model}",
                   "--set", "algorithm.algorithm_type=on_policy_distill",
                   "--set", "auxiliary_models.teacher.model_path=teacher",
                   "--set", f"auxiliary_models.teacher.base_url={server.base_url}")

    with OpenAIServer() as server:  # chat only
        done = check(server)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"Error: auxiliary_models.teacher: {server.base_url} does not score token ids as a "
        f"teacher must (HTTP 404); it must answer completions with echo and logprobs over "
        f"token-id prompts (vLLM's OpenAI server does)")
    with OpenAIServer(score=lambda tokens: [None] + [-0.5] * (len(tokens) - 1)) as server:
        done = check(server)
    assert done.returncode == 0, done.stderr
    assert f"ok  auxiliary_models.teacher: {server.base_url} scores token ids (the teacher)" \
        in done.stdout


def test_run_refuses_a_teacher_endpoint_that_cannot_score_before_any_work(tiny_model, tmp_path):
    """``run`` probes the teacher as ``check`` does: exit 2 and no run directory (it failed
    with exit 1 after the first evaluation, leaving a run directory behind)."""
    from .cli_support import cli
    from .openai_server import OpenAIServer

    with OpenAIServer() as server:  # chat only
        done = cli("run", "tests.fixtures.local.agents:Arith", "--backend", "local",
                   "--set", f"model.model_path={tiny_model}",
                   "--set", "algorithm.algorithm_type=on_policy_distill",
                   "--set", "auxiliary_models.teacher.model_path=teacher",
                   "--set", f"auxiliary_models.teacher.base_url={server.base_url}",
                   "--set", f"checkpoint_root_dir={tmp_path}")
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: auxiliary_models.teacher: {server.base_url} does not score token ids as a "
        f"teacher must (HTTP 404); it must answer completions with echo and logprobs over "
        f"token-id prompts (vLLM's OpenAI server does)"))
    assert not any(tmp_path.iterdir())
