"""An agent graded by a frozen LLM judge: a multi-model experiment.

The trained model answers; an auxiliary model (``grader``, frozen, sampled at
temperature 0) scores the answer against a reference, and its score is the reward.
Both the workflow and the judge can reach ``auxiliary_models[name]``.

    python -m tunedsl check examples.llm_judge.experiment:LLMJudged
    python -m tunedsl run   examples.llm_judge.experiment:LLMJudged   # on GPUs (Trinity)
"""

from __future__ import annotations

import re

from tunedsl import (
    Algorithm,
    Dataset,
    JudgeOutput,
    Model,
    WorkflowOutput,
    experiment,
    judge,
    workflow,
)

GRADER_PROMPT = (
    "You grade answers. Question: {question}\nReference answer: {reference}\n"
    "Candidate answer: {answer}\n"
    "Reply with 'Score: N' where N is 0 (wrong) to 10 (correct and concise)."
)


def parse_score(text: str) -> float | None:
    """The grader's score as a reward in [0, 1], or None when it gave none."""
    found = re.search(r"Score:\s*(\d+(?:\.\d+)?)", text)
    return None if found is None else min(float(found.group(1)), 10.0) / 10.0


@workflow
async def answer(task, model):
    """Answer the question in one go."""
    reply = await model.chat([
        {"role": "system", "content": "Answer briefly and correctly."},
        {"role": "user", "content": task["question"]},
    ])
    return WorkflowOutput(response=reply.content)


@judge
async def graded_by_llm(task, response, auxiliary_models):
    """Ask the frozen grader; an unreadable verdict scores 0 and is counted."""
    verdict = await auxiliary_models["grader"].chat([{"role": "user", "content": GRADER_PROMPT
        .format(question=task["question"], reference=task["reference"], answer=response)}])
    score = parse_score(verdict.content)
    return JudgeOutput(reward=score or 0.0,
                       metrics={"grader_unreadable": float(score is None)})


@experiment
class LLMJudged:
    """GRPO on capital-city questions, rewarded by an 8B grader model."""

    workflow = answer
    judge = graded_by_llm
    train_dataset = Dataset("data", split="train")
    eval_dataset = Dataset("data", split="test")
    model = Model("Qwen/Qwen3-0.6B", max_model_len=4096, max_tokens=512)
    auxiliary_models = {
        "grader": Model("Qwen/Qwen3-8B", max_model_len=8192, temperature=0.0, max_tokens=32,
                        trinity={"enable_prefix_caching": True}),
    }
    algorithm = Algorithm("multi_step_grpo", group_size=8, batch_size=16)
    project = "tunedsl-examples"
