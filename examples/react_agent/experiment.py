"""The AgentScope tuner tutorial's ReAct maths agent, with a calculator tool, on tunedsl.

The workflow and judge are AgentScope code as the tutorial writes it: ``model`` is
annotated ``ChatModelBase``, so tunedsl hands it an AgentScope chat model whose every
call (the agent's reasoning steps, tool calls included) is recorded and trained on,
on every backend. The response is an AgentScope ``Msg``.

    python -m examples.react_agent.tiny_model     # a tiny CPU model (no downloads)
    python -m tunedsl run examples.react_agent.experiment:ReActMath
    python -m tunedsl eval examples.react_agent.experiment:ReActMath \\
        --base-url http://localhost:8000/v1 --model Qwen/Qwen3-0.6B

Needs ``pip install "tunedsl[agentscope]"``.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg, TextBlock
from agentscope.model import ChatModelBase
from agentscope.tool import Toolkit, ToolResponse

from tunedsl import Algorithm, Dataset, JudgeOutput, Model, WorkflowOutput
from tunedsl import experiment, judge, workflow

SYSTEM_PROMPT = "You are a helpful math problem solving agent."

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.Div: operator.truediv, ast.USub: operator.neg}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    raise ValueError("only numbers and + - * / ( ) are allowed")


def calculate(expression: str) -> ToolResponse:
    """Evaluate an arithmetic expression such as 123+456.

    Args:
        expression (str): Numbers with + - * / and parentheses.
    """
    try:
        value = _evaluate(ast.parse(expression, mode="eval").body)
        text = f"{value:g}" if isinstance(value, float) else str(value)
    except (SyntaxError, ValueError, ZeroDivisionError) as exc:
        text = f"error: {exc}"
    return ToolResponse(content=[TextBlock(type="text", text=text)])


@workflow
async def solve(
    task: dict,
    model: ChatModelBase,
    auxiliary_models: dict[str, ChatModelBase] | None = None,
) -> WorkflowOutput:
    """The tutorial's ReAct agent, with a calculator."""
    toolkit = Toolkit()
    toolkit.register_tool_function(calculate)
    agent = ReActAgent(
        name="react_agent",
        sys_prompt=SYSTEM_PROMPT,
        model=model,
        formatter=OpenAIChatFormatter(),
        toolkit=toolkit,
        max_iters=3,
    )
    agent.set_console_output_enabled(False)
    response = await agent.reply(msg=Msg("user", task["question"], role="user"))
    return WorkflowOutput(response=response)


@judge
async def answer_in_reply(
    task: dict,
    response: Any,
    auxiliary_models: dict[str, ChatModelBase] | None = None,
) -> JudgeOutput:
    """The tutorial's judge: 1 when the right answer is in the agent's reply."""
    ground_truth = task["answer"]
    # get_text_content() is None for a reply without text (a small model's empty answer).
    reward = 1.0 if ground_truth in (response.get_text_content() or "") else 0.0
    return JudgeOutput(reward=reward)


@experiment
class ReActMath:
    """The ReAct agent on two-number sums, trained with multi-step GRPO (every model call
    of a trajectory is a training sample). Runs on the CPU with the tiny model."""

    workflow = solve
    judge = answer_in_reply
    train_dataset = Dataset("data", split="train", total_steps=4)
    eval_dataset = Dataset("data", split="test")
    model = Model("tiny-model", max_model_len=1024, max_tokens=24, temperature=1.0)
    algorithm = Algorithm("multi_step_grpo", group_size=4, batch_size=4, learning_rate=1e-4,
                          save_interval_steps=4, eval_interval_steps=4, seed=0)
    project = "tunedsl-examples"
