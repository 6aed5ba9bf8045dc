"""tunedsl: RL fine-tuning of LLM agent code, declared with decorators.

Write an async ``@workflow`` (the agent), an async ``@judge`` (the reward) and an
``@experiment`` class naming the data, model and algorithm; tunedsl turns them
into a checked experiment graph and a Trinity-RFT config. Importing this package
imports no heavy library (torch, transformers, datasets, ray, trinity, openai).
"""



def _refuse_a_standard_module_the_working_folder_hides() -> None:
    """Under ``python -m tunedsl`` the working folder comes first on Python's import path,
    before this package is even imported: a ``math.py`` there was imported in the standard
    module's place by the libraries this package imports, and the command ended in Python's
    traceback before any of tunedsl's checks (`check_no_shadowing`) could run."""
    import os  # (both imported by Python itself before any module of the user's)
    import sys

    if sys.argv[:1] != ["-m"] or not sys.path or sys.path[0] not in ("", os.getcwd()):
        return
    folder = sys.path[0] or "."
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return
    spared = {"test", "this", "antigravity", "idlelib", "turtle", "turtledemo"}
    for entry in entries:
        name, dot, ending = entry.partition(".")
        module = ending in ("py", "pyc") or (
            not dot and os.path.isfile(os.path.join(folder, entry, "__init__.py")))
        if module and name in sys.stdlib_module_names and not name.startswith("_") \
                and name not in sys.modules and name not in spared:
            print(f"Error: {entry}: its name hides Python's standard module {name}, which "
                  f"tunedsl and the libraries it uses import (its folder comes first on "
                  f"Python's import path); rename it, e.g. my_{name}", file=sys.stderr)
            raise SystemExit(2)


_refuse_a_standard_module_the_working_folder_hides()
del _refuse_a_standard_module_the_working_folder_hides

from typing import TYPE_CHECKING, Any

from .dsl.chat import ChatModel, ChatResponse, ModelCall, ToolCall
from .dsl.decorators import experiment, group_judge, judge, workflow
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
from .errors import (
    ArgumentError,
    ConfigError,
    DatasetError,
    ExperimentImportError,
    Problem,
    RolloutError,
    RunError,
    RunInterrupted,
    SignatureError,
    TunedslError,
)

if TYPE_CHECKING:  # imported on first use (`__getattr__`): ``import tunedsl`` stays light
    from .api import check, evaluate, load_experiment, run, tune, tune_prompt
    from .config.graph import ExperimentGraph
    from .evaluation.prompt_tuning import PromptSearch, TuneResult
    from .evaluation.select import Bootstrap, Ranking, select_model
    from .models.agentscope import as_agentscope

#: Where each name that is imported on first use lives.
_LAZY = {
    "check": ".api", "evaluate": ".api", "load_experiment": ".api", "run": ".api", "tune": ".api",
    "tune_prompt": ".api",
    "ExperimentGraph": ".config.graph", "as_agentscope": ".models.agentscope",
    "TuneResult": ".evaluation.prompt_tuning", "PromptSearch": ".evaluation.prompt_tuning",
    "Ranking": ".evaluation.select", "Bootstrap": ".evaluation.select",
    "select_model": ".evaluation.select",
}


def __getattr__(name: str) -> Any:
    """The names a decorated experiment does not need, imported when first asked for
    (PEP 562): running, tuning and loading pull in asyncio, the prompt tuner and model
    selection, which declaring an experiment never uses."""
    if name not in _LAZY:
        raise AttributeError(f"module 'tunedsl' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"

__all__ = [
    "Algorithm",
    "AlgorithmConfig",
    "ArgumentError",
    "Bootstrap",
    "ChatModel",
    "ChatResponse",
    "ConfigError",
    "Dataset",
    "DatasetConfig",
    "DatasetError",
    "ExperimentGraph",
    "ExperimentImportError",
    "JudgeOutput",
    "LoRA",
    "Model",
    "ModelCall",
    "Problem",
    "PromptSearch",
    "Ranking",
    "RolloutError",
    "RunError",
    "RunInterrupted",
    "SignatureError",
    "Tinker",
    "ToolCall",
    "TuneResult",
    "TunedslError",
    "TunerModelConfig",
    "WorkflowOutput",
    "as_agentscope",
    "check",
    "evaluate",
    "experiment",
    "group_judge",
    "judge",
    "load_experiment",
    "run",
    "select_model",
    "tune",
    "tune_prompt",
    "workflow",
]
