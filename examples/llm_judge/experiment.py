"""An agent graded by a frozen LLM judge: a multi-model experiment.

The trained model answers; an auxiliary model (``grader``, frozen, sampled at
temperature 0) scores the answer against a reference, and its score is the reward.
Both the workflow and the judge can reach ``auxiliary_models[name]``.

``LLMRanked`` grades relatively instead, as RULER does (OpenPipe ART; Trinity's
``math_ruler_workflow``): a ``@group_judge`` shows the grader every answer of a task's
group in one call and asks for a score each, so the answers are compared with each other.

    python -m tunedsl check examples.llm_judge.experiment:LLMJudged
    python -m tunedsl run   examples.llm_judge.experiment:LLMJudged   # on GPUs (Trinity)
    python -m tunedsl run   examples.llm_judge.experiment:LLMRanked
"""

from __future__ import annotations

import ast
import re

from tunedsl import (
    Algorithm,
    Dataset,
    JudgeOutput,
    Model,
    WorkflowOutput,
    experiment,
    group_judge,
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


RANKING_PROMPT = (
    "You are a fair judge. Question: {question}\nReference answer: {reference}\n"
    "{candidates}\nScore each of the {count} candidate answers from 0 to 1 against the "
    "reference and against each other (better answers score higher). Conclude your reply "
    "with the list of scores: [score for candidate 1, ..., score for candidate {count}]"
)


def parse_scores(text: str, count: int) -> list[float] | None:
    """The last ``[...]`` of the grader's reply as ``count`` scores clipped to [0, 1], or
    None when it holds no such list."""
    start, end = text.rfind("["), text.rfind("]")
    try:
        scores = ast.literal_eval(text[start:end + 1]) if 0 <= start < end else None
    except (ValueError, SyntaxError):
        return None
    if not isinstance(scores, (list, tuple)) or len(scores) != count or not all(
            isinstance(s, (int, float)) and not isinstance(s, bool) for s in scores):
        return None
    try:
        return [min(1.0, max(0.0, float(s))) for s in scores]
    except OverflowError:  # an integer past float's range: no score
        return None


@group_judge
async def ranked_by_llm(task, responses, auxiliary_models):
    """One grader call for the task's whole group; an unreadable list scores the group 0
    and is counted."""
    candidates = "\n".join(f"Candidate {i}: {response}"
                           for i, response in enumerate(responses, start=1))
    verdict = await auxiliary_models["grader"].chat([{"role": "user", "content": RANKING_PROMPT
        .format(question=task["question"], reference=task["reference"],
                candidates=candidates, count=len(responses))}])
    scores = parse_scores(verdict.content or "", len(responses))
    return [JudgeOutput(reward=score, metrics={"grader_unreadable": float(scores is None)})
            for score in scores or [0.0] * len(responses)]


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


@experiment
class LLMRanked(LLMJudged):
    """The same, each task's group of 8 answers graded side by side (RULER)."""

    judge = ranked_by_llm
    auxiliary_models = {
        "grader": Model("Qwen/Qwen3-8B", max_model_len=16384, temperature=0.0,
                        max_tokens=256, trinity={"enable_prefix_caching": True}),
    }
