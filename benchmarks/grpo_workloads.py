"""The workloads of ``benchmarks/local_grpo.py``: models (built in code from a fixed seed),
tasks, rewards and the tunedsl experiments that train on them.

Every workload asks the 45 single-digit sums of ``examples/arith/data/train.jsonl``:

  small      the arith example as it is: the 2-layer, 64-wide tiny model, a one-token
             reply, reward 1 for the sum;
  large      a Llama of 28M parameters (8 layers, 512 wide) whose vocabulary adds every
             pair and triple of the arith characters (4,372 tokens, so a random model
             almost never ends a reply early: replies are 32 tokens), rewarded for how
             many of the reply's characters are digits of the sum (a dense reward, up to 1
             for 32 tokens of three such digits);
  multiturn  a 4-layer, 128-wide model asked the sum after ten worked examples (the
             held-out sums), then asked it
             again with its first answer in the conversation (two calls per trajectory,
             the second prompt starting with the first prompt and reply), rewarded for
             each right answer.
"""

from __future__ import annotations

import itertools
from typing import Any

from examples.arith.tiny_model import CHARACTERS, SPECIALS, build_tiny_model, build_tokenizer
from tunedsl import Algorithm, Dataset, JudgeOutput, Model, WorkflowOutput, experiment, judge, \
    workflow

DATA = "../examples/arith/data"
LONG_TOKENS = 32  # the large workload's reply length
TURN_TOKENS = 4  # the multi-turn workload's reply length at most (the sum, then the end)
#: Worked examples before the multi-turn workload's question: the held-out sums of
#: ``examples/arith/data/test.jsonl`` (none of them a training task).
EXAMPLES = "3+4=7 3+2=5 0+3=3 2+0=2 3+6=9 1+7=8 3+1=4 2+3=5 0+7=7 1+0=1 "


# --------------------------------------------------------------------------- models


def build_small(folder: str) -> str:
    return build_tiny_model(folder, seed=0)


def build_large(folder: str) -> str:
    grams = ["".join(g) for n in (2, 3) for g in itertools.product(CHARACTERS, repeat=n)]
    tokenizer = build_tokenizer(SPECIALS, CHARACTERS + grams)
    return build_tiny_model(folder, seed=0, tokenizer=tokenizer, max_positions=128,
                            hidden_size=512, layers=8, heads=8, intermediate_size=1408)


def build_multiturn(folder: str) -> str:
    return build_tiny_model(folder, seed=0, max_positions=128, hidden_size=128, layers=4)


# --------------------------------------------------------------------------- rewards
# The contenders outside tunedsl score with these same functions.


def sum_reward(reply: str, answer: str) -> float:
    """The arith judge (``examples.arith.experiment.exact``): 1 when the reply is the sum."""
    return 1.0 if reply.strip() == answer else 0.0


def digits_reward(reply: str, answer: str) -> float:
    """The share of the large workload's most a reply can hold (32 tokens of 3 characters)
    that are digits of the sum."""
    return sum(character in answer for character in reply) / (3 * LONG_TOKENS)


def turns_reward(replies: list[str], answer: str) -> float:
    """The share of the multi-turn workload's replies that are the sum."""
    return sum(sum_reward(reply, answer) for reply in replies) / len(replies)


def conversation(question: str, replies: list[str]) -> list[dict[str, str]]:
    """The multi-turn workload's messages for the call after ``replies``: the worked
    examples and the question, then each reply and the question again."""
    messages = [{"role": "user", "content": EXAMPLES + question}]
    for reply in replies:
        messages += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": question}]
    return messages


# --------------------------------------------------------------------------- experiments


@workflow
async def long_reply(task, model):
    reply = await model.chat([{"role": "user", "content": task["question"]}])
    return WorkflowOutput(response=reply.content)


@judge
async def answer_digits(task, response):
    return JudgeOutput(reward=digits_reward(response, task["answer"]))


@workflow
async def answer_twice(task, model):
    replies: list[str] = []
    for _ in range(2):
        replies.append((await model.chat(conversation(task["question"], replies))).content)
    return WorkflowOutput(response=replies)


@judge
async def each_answer(task, response):
    return JudgeOutput(reward=turns_reward(response, task["answer"]))


def _experiment(name: str, **attributes: Any) -> Any:
    return experiment(type(name, (), {
        "train_dataset": Dataset(DATA, split="train", total_steps=10),
        "project": "tunedsl-bench", "__module__": __name__, **attributes}))


Large = _experiment(
    "Large", workflow=long_reply, judge=answer_digits,
    model=Model("set-by-the-benchmark", max_model_len=64, max_tokens=LONG_TOKENS,
                temperature=1.0),
    algorithm=Algorithm("grpo", group_size=8, batch_size=4, learning_rate=1e-4, seed=0))
MultiTurn = _experiment(
    "MultiTurn", workflow=answer_twice, judge=each_answer,
    model=Model("set-by-the-benchmark", max_model_len=128, max_tokens=TURN_TOKENS,
                temperature=1.0),
    algorithm=Algorithm("multi_step_grpo", group_size=8, batch_size=15, learning_rate=1e-3,
                        seed=0))
