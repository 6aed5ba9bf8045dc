"""Learn single-digit addition with RL, on the CPU, in well under a minute.

    python -m examples.arith.tiny_model        # build the tiny model (no downloads)
    python -m tunedsl run examples.arith.experiment:Arith

The model starts from random weights and answers ``3+4=`` with a random token (a
reward near 0.05); GRPO on the judge's reward teaches it the sums.
"""

from __future__ import annotations

from tunedsl import Algorithm, Dataset, JudgeOutput, Model, WorkflowOutput, experiment, judge, workflow


@workflow
async def add(task, model):
    """Ask the model the sum; its reply is the answer."""
    reply = await model.chat([{"role": "user", "content": task["question"]}])
    return WorkflowOutput(response=reply.content)


@judge
async def exact(task, response):
    """1 when the reply is the sum, else 0."""
    return JudgeOutput(reward=1.0 if response.strip() == task["answer"] else 0.0)


@experiment
class Arith:
    """GRPO on 45 training sums; 10 held-out sums are the eval set."""

    workflow = add
    judge = exact
    train_dataset = Dataset("data", split="train", total_steps=300)
    eval_dataset = Dataset("data", split="test")
    model = Model("tiny-model", max_model_len=32, max_tokens=1, temperature=1.0)
    algorithm = Algorithm("grpo", group_size=8, batch_size=15, learning_rate=1e-3,
                          save_interval_steps=100, eval_interval_steps=50, seed=0)
    project = "tunedsl-examples"


@experiment
class ArithSFT:
    """Supervised fine-tuning instead of RL: the 45 training sums as conversations
    (``conversations/train.jsonl``), the same held-out sums as the eval set."""

    workflow = add
    judge = exact
    train_dataset = Dataset("conversations", split="train", total_steps=100)
    eval_dataset = Dataset("data", split="test")
    model = Model("tiny-model", max_model_len=32, max_tokens=1, temperature=1.0)
    algorithm = Algorithm("sft", batch_size=15, learning_rate=3e-3, save_interval_steps=100,
                          eval_interval_steps=50, seed=0)
    project = "tunedsl-examples"


@experiment
class ArithWarmup:
    """A short SFT warm-up on the conversations, then GRPO from the warmed-up model."""

    workflow = add
    judge = exact
    warmup = Algorithm("sft", batch_size=16, learning_rate=3e-3, seed=0)
    warmup_dataset = Dataset("conversations", split="train", total_steps=30)
    train_dataset = Dataset("data", split="train", total_steps=100)
    eval_dataset = Dataset("data", split="test")
    model = Model("tiny-model", max_model_len=32, max_tokens=1, temperature=1.0)
    algorithm = Algorithm("grpo", group_size=8, batch_size=15, learning_rate=1e-3,
                          save_interval_steps=100, eval_interval_steps=50, seed=0)
    project = "tunedsl-examples"
