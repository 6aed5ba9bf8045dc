"""tunedsl: RL fine-tuning of LLM agent code, declared with decorators.

Write an async ``@workflow`` (the agent), an async ``@judge`` (the reward) and an
``@experiment`` class naming the data, model and algorithm; tunedsl turns them
into a checked experiment graph and a Trinity-RFT config. Importing this package
imports no heavy library (torch, transformers, datasets, ray, trinity, openai).
"""

from .api import load_experiment, run, tune, tune_prompt
from .config.graph import ExperimentGraph
from .dsl.chat import ChatModel, ChatResponse, ModelCall, ToolCall
from .dsl.decorators import experiment, judge, workflow
from .dsl.outputs import JudgeOutput, WorkflowOutput
from .dsl.records import (
    Algorithm,
    AlgorithmConfig,
    Dataset,
    DatasetConfig,
    LoRA,
    Model,
    Tinker,
    TunerModelConfig,
)
from .runtime.models.agentscope import as_agentscope
from .tools.prompt_tuning import TuneResult
from .tools.select import Ranking, select_model

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
    "LoRA",
    "Model",
    "ModelCall",
    "Ranking",
    "Tinker",
    "ToolCall",
    "TuneResult",
    "TunerModelConfig",
    "WorkflowOutput",
    "as_agentscope",
    "experiment",
    "judge",
    "load_experiment",
    "run",
    "select_model",
    "tune",
    "tune_prompt",
    "workflow",
]
