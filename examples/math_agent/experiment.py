"""The AgentScope tuner tutorial's math agent, written with tunedsl.

Run from the repository root:

    python -m tunedsl preview examples.math_agent.experiment:MathAgent
    python -m tunedsl config  examples.math_agent.experiment:MathAgent
    python -m tunedsl check   examples.math_agent.experiment:MathAgent

Its system prompt is a param, so ``tunedsl tune-prompt ... --param system_prompt`` tunes it
against any OpenAI-compatible endpoint (docs/guides/prompt-tuning.md).

Settings that are not code (algorithm, project, ...) live in ``tunedsl.toml``
beside this file; the class below overrides it, and ``--set`` overrides both.
"""

from __future__ import annotations

import re

from tunedsl import Dataset, JudgeOutput, Model, WorkflowOutput, experiment, judge, workflow

SYSTEM_PROMPT = (
    "You are a helpful math problem solving agent. Think step by step, then give the "
    "final number on its own line as 'Answer: <number>'."
)


def final_answer(text: str) -> str | None:
    """The number after the last 'Answer:' in ``text`` (or its last number)."""
    marked = re.findall(r"Answer:\s*(-?[\d,]+)", text)
    numbers = marked or re.findall(r"-?\d[\d,]*", text)
    return numbers[-1].replace(",", "") if numbers else None


@workflow
async def solve(task, model, params):
    """Ask the model the question once, under the experiment's system prompt (a param, so
    ``tunedsl tune-prompt --param system_prompt`` can tune it), and hand its reply to the
    judge."""
    reply = await model.chat([
        {"role": "system", "content": params["system_prompt"]},
        {"role": "user", "content": task["question"]},
    ])
    return WorkflowOutput(response=reply.content)


@judge
async def exact_answer(task, response):
    """Reward 1 when the final number equals the reference answer, else 0."""
    correct = final_answer(response) == task["answer"]
    return JudgeOutput(reward=1.0 if correct else 0.0, metrics={"answered": float(
        final_answer(response) is not None)})


@experiment
class MathAgent:
    """GRPO on arithmetic word questions; data ships in ``data/`` (train and test splits)."""

    workflow = solve
    judge = exact_answer
    train_dataset = Dataset("data", split="train")
    eval_dataset = Dataset("data", split="test")
    model = Model("Qwen/Qwen3-0.6B", max_model_len=16384)
    params = {"system_prompt": SYSTEM_PROMPT}
