"""What the local backend cannot run, found from the graph alone: every problem at once.

Each check is a small function over the experiment graph returning its problems, one line
each (as `tunedsl.config.graph.GRAPH_CHECKS`); `LOCAL_CHECKS` lists them. ``tunedsl check
--backend local``, ``tunedsl run`` and `run_local` run them all before any model is
loaded, so a typo costs no model load (the model folders are read, not their weights).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from ...config.graph import TRAINING_CHECKS, ExperimentGraph
from ...dsl.algorithms import ALGORITHMS
from ...dsl.chat import unknown_options
from ...errors import ConfigError
from ...models.context import check_model_lengths
from ...wording import option
from .monitors import monitor_args

#: What the local backend loads, samples and trains models with (its ``local`` extra).
LOCAL_STACK = ("torch", "transformers")
INSTALL_HINT = 'pip install "tunedsl[local]"'


def missing_local_stack() -> list[str]:
    """The packages of `LOCAL_STACK` this environment lacks."""
    return [name for name in LOCAL_STACK if importlib.util.find_spec(name) is None]


def check_installed(graph: ExperimentGraph | None = None) -> list[str]:
    """torch and transformers are importable (the install command otherwise); the checks
    that load a model's files need them, and say nothing more without them."""
    missing = missing_local_stack()
    if not missing:
        return []
    return [f"the local backend needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed; install "
            f"{'it' if len(missing) == 1 else 'them'} with: {INSTALL_HINT}"]


#: Algorithms the local backend implements (with Trinity's parts); others run on Trinity.
LOCAL_ALGORITHMS = tuple(ALGORITHMS)
#: The reasoning parsers the local backend reads (as vLLM's parsers of those names do).
REASONING_PARSERS = ("deepseek_r1", "qwen3")
#: The package each monitor type needs.
MONITOR_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow",
                    "swanlab": "swanlab"}


#: The parts of Trinity's the local trainer computes, by the `Algorithm` field naming each
#: (``tests/test_local_algorithms.py`` checks them against the losses and advantage
#: functions it has); the sample strategies read a step's own rollouts, which are never
#: stale here (``staleness_control`` drops none).
LOCAL_PARTS: dict[str, tuple[str, ...]] = {
    "policy_loss_fn": ("cispo", "gspo", "opmd", "ppo", "rec", "sapo", "sft", "topr"),
    "advantage_fn": ("gigpo", "grpo", "on_policy_distill", "opmd", "reinforce",
                     "reinforceplusplus", "rloo", "step_wise_grpo"),
    "entropy_loss_fn": ("default", "none"),
    "sample_strategy": ("default", "staleness_control", "warmup"),
}


def check_algorithm(graph: ExperimentGraph) -> list[str]:
    """The algorithm is one the local trainer implements, built of parts it computes."""
    record = graph.algorithm
    algorithm = record.algorithm_type
    if algorithm not in LOCAL_ALGORITHMS:
        return [f"algorithm.algorithm_type = {algorithm!r}: the local backend runs "
                f"{', '.join(LOCAL_ALGORITHMS)}; use {option('backend', 'trinity')} for the "
                f"others"]
    return [f"algorithm.{field} = {getattr(record, field)!r}: the local backend computes "
            f"{', '.join(names)}; use {option('backend', 'trinity')}, or one of those"
            for field, names in LOCAL_PARTS.items()
            if getattr(record, field) is not None and getattr(record, field) not in names]


def check_reasoning_parsers(graph: ExperimentGraph) -> list[str]:
    """Each model run here (the trained one, auxiliary ones not at an endpoint) names a
    reasoning parser the local chat codec reads."""
    models = [("model", graph.model), *((f"auxiliary_models.{name}", spec)
                                        for name, spec in graph.auxiliary_models.items()
                                        if spec.base_url is None)]
    return [f"{setting}.reasoning_parser = {model.reasoning_parser!r}: the local backend "
            f"reads {' and '.join(REASONING_PARSERS)} (as vLLM's parsers of those names do); "
            f"use one of them, or {option('backend', 'trinity')}"
            for setting, model in models
            if model.reasoning_parser not in (None, *REASONING_PARSERS)]


def check_not_tinker(graph: ExperimentGraph) -> list[str]:
    """Tinker trains on its own service, through Trinity."""
    if graph.tinker is None:
        return []
    return ["tinker: the experiment trains through Tinker, which runs on the Trinity backend; "
            f"use {option('backend', 'trinity')} (or auto), or remove tinker to train "
            f"locally"]


def check_monitor(graph: ExperimentGraph) -> list[str]:
    """The monitor's package is installed and it can start (SwanLab's cloud needs a key)."""
    package = MONITOR_PACKAGES[graph.monitor]
    if importlib.util.find_spec(package) is None:
        if graph.monitor == "tensorboard":  # the default: the local extra installs it
            return [] if missing_local_stack() else [
                f"monitor = 'tensorboard': the tensorboard package is not installed; "
                f"install it with: {INSTALL_HINT}"]
        return [f"monitor = {graph.monitor!r}: the {package} package is not installed; pip "
                f"install {package}, or set monitor = \"tensorboard\""]
    mode = monitor_args(graph).get("mode") or "cloud"
    if graph.monitor == "swanlab" and mode == "cloud" and not os.environ.get("SWANLAB_API_KEY"):
        return ["monitor = 'swanlab' logs to SwanLab's cloud, which needs the SWANLAB_API_KEY "
                "environment variable; set it, or set trinity.monitor.monitor_args.mode = "
                "\"offline\""]
    return []


def check_checkpoint_root_writable(graph: ExperimentGraph) -> list[str]:
    """Run folders can be made under checkpoint_root_dir on this machine: a folder is made
    (and removed) in the deepest part of it that exists, as run makes its own there."""
    import tempfile

    root = graph.checkpoint_root_dir
    existing = root
    while existing and not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not existing or not os.path.isdir(existing):  # (a file in the way: said by graph)
        return []
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".tunedsl-check-", dir=existing))
    except OSError as exc:
        return [f"checkpoint_root_dir = {root!r}: cannot make folders in {existing} "
                f"({exc.strerror}), where run makes the run's folder; give a folder you can "
                f"write to"]
    return []


def check_model_folders(graph: ExperimentGraph) -> list[str]:
    """Each model the local backend loads (the trained one, auxiliary ones not at an
    endpoint) is a model folder it can load (`models.model_folder_problem`; the weights are
    not read here)."""
    if missing_local_stack():
        return []  # said once, by check_installed
    from .models import model_folder_problem

    models = [("model", graph.model), *((f"auxiliary_models.{name}", spec)
                                        for name, spec in graph.auxiliary_models.items()
                                        if spec.base_url is None)]
    problems = [(setting, model_folder_problem(model.model_path)) for setting, model in models]
    return [f"{setting}.model_path: {problem}" for setting, problem in problems if problem]


def check_lora_layers(graph: ExperimentGraph) -> list[str]:
    """The LoRA target modules name layers of the trained model, and no layer it ties to
    another (what `lora.add_lora` refuses when a run starts), tried on an empty copy built
    from its config.json on the meta device: no weights are read."""
    if missing_local_stack():
        return []  # said once, by check_installed
    from .models import model_folder_problem

    if graph.model.lora is None or model_folder_problem(graph.model.model_path) is not None:
        return []  # a folder that cannot be loaded is said by check_model_folders
    from ...interrupts import import_whole

    import_whole("torch", "transformers")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from .lora import add_lora

    config = AutoConfig.from_pretrained(graph.model.model_path, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    try:
        add_lora(model, graph.model.lora, graph.model.model_path, seed=graph.algorithm.seed)
    except ConfigError as refused:
        return list(refused.problems)
    return []


def check_local_calls(graph: ExperimentGraph, report: Any) -> list[str]:
    """The scripted rollout's calls of the trained model ask nothing the local backend's
    model refuses when the run calls it (an option it does not take, such as ``n`` or
    ``stream``; a forced tool call): the first such call, in one line."""
    from .chat import LOCAL_CHAT_OPTIONS, forced_tool_problem

    for number, call in enumerate(report.calls, start=1):
        problem = unknown_options(call.sampling, LOCAL_CHAT_OPTIONS) or \
            forced_tool_problem(call.sampling.get("tool_choice", "auto"))
        if problem is not None:
            return [f"@workflow {graph.workflow.qualname} ({graph.workflow.where}): its call "
                    f"{number} of the trained model on the first task: {problem}"]
    return []


def check_teacher_scores(graph: ExperimentGraph) -> list[str]:
    """A distillation teacher at an endpoint scores token ids, as a local run asks of it
    every step (the probe ``check`` reports): refused before the run directory, not after
    the first evaluation."""
    from ...checks.preflight import check_teacher_endpoint
    from ...dsl.algorithms import teacher_name

    teacher = teacher_name(graph.algorithm, graph.auxiliary_models)
    if teacher is None or graph.auxiliary_models[teacher].base_url is None:
        return []
    try:
        check_teacher_endpoint(teacher, graph.auxiliary_models[teacher])
    except ConfigError as exc:
        return list(exc.problems)
    return []


def check_conversation_lengths(graph: ExperimentGraph, report: Any) -> list[str]:
    """The conversations SFT (or a warm-up) learns from fit the model as the run encodes
    them: each through the model's chat template, within ``model.max_model_len``, the
    reply left tokens (`sft.conversation_samples`, the run's own encoding)."""
    if missing_local_stack():
        return []  # said once, by check_installed
    from ...dsl.algorithms import CONVERSATION_ALGORITHMS
    from .schedule import read_rows
    from .sft import conversation_samples

    section = "train_dataset" if graph.algorithm.algorithm_type in CONVERSATION_ALGORITHMS \
        else "warmup_dataset" if graph.warmup is not None else None
    if section is None or not os.path.isdir(graph.model.model_path):
        return []  # no conversations, or a model folder check_model_folders refused
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(graph.model.model_path, local_files_only=True)
    try:
        conversation_samples(tokenizer, read_rows(getattr(graph, section), section),
                             section=section, max_model_len=graph.model.max_model_len,
                             enable_thinking=graph.model.enable_thinking)
    except ConfigError as refused:
        return list(refused.problems)
    return []


#: Checks of what the preflight found (the scripted rollout's calls; the conversations).
LOCAL_REPORT_CHECKS = (check_local_calls, check_conversation_lengths)


def check_adaptive_kl(graph: ExperimentGraph) -> list[str]:
    """An adaptive KL coefficient (Trinity's ``kl_loss_fn_args.adaptive``) changes during a
    Trinity run; the local trainer keeps ``kl_coef`` constant."""
    from ...config.nested import get_path
    from ...config.trinity_base import read_base_config

    sources = [("[trinity]", graph.trinity)]
    if graph.trinity_config is not None:
        sources.insert(0, (graph.trinity_config, read_base_config(graph.trinity_config)))
    return [f"{label}: algorithm.kl_loss_fn_args.adaptive = true: the local backend keeps "
            f"kl_coef constant (an adaptive coefficient is Trinity's); use "
            f"{option('backend', 'trinity')}, or drop adaptive"
            for label, config in sources
            if get_path(config, "algorithm.kl_loss_fn_args.adaptive")[1] is True]


LOCAL_CHECKS = (check_installed, check_not_tinker, check_algorithm, check_adaptive_kl,
                check_reasoning_parsers, check_monitor, *TRAINING_CHECKS,
                check_checkpoint_root_writable, check_model_folders,
                check_model_lengths, check_lora_layers, check_teacher_scores)
