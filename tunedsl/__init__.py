"""tunedsl: RL fine-tuning of LLM agent code, declared with decorators.

Write an async ``@workflow`` (the agent), an async ``@judge`` (the reward) and an
``@experiment`` class naming the data, model and algorithm; tunedsl turns them
into a checked experiment graph and a Trinity-RFT config. Importing this package
imports no heavy library (torch, transformers, datasets, ray, trinity, openai).
"""

from ._api import load_experiment, tune
from ._chat import ChatModel, ChatResponse, ToolCall
from ._decorators import experiment, judge, workflow
from ._graph import ExperimentGraph
from ._outputs import JudgeOutput, WorkflowOutput
from ._run import run
from ._records import (
    Algorithm,
    AlgorithmConfig,
    Dataset,
    DatasetConfig,
    Model,
    TunerModelConfig,
)

__version__ = "0.1.0"

__all__ = [
    "Algorithm",
    "AlgorithmConfig",
    "ChatModel",
    "ChatResponse",
    "Dataset",
    "DatasetConfig",
    "ExperimentGraph",
    "JudgeOutput",
    "Model",
    "ToolCall",
    "TunerModelConfig",
    "WorkflowOutput",
    "experiment",
    "judge",
    "load_experiment",
    "run",
    "tune",
    "workflow",
]
