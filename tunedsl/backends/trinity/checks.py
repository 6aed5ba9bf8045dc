"""What the Trinity backend cannot run, found from the graph alone: every problem at once.

Each check is a small function over the experiment graph returning its problems, one line
each (as `tunedsl.config.graph.GRAPH_CHECKS`); `TRINITY_CHECKS` lists them. ``tunedsl check
--backend trinity`` and `run_trinity` run them before the preflight, before Ray or a GPU
is asked for. Trinity's own validation of the YAML follows (`validate`). Nothing here
imports Trinity but `check_trinity_tables`, which reads its config classes.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...checks.preflight import Note, PreflightReport, check_model_called
from ...config.graph import TRAINING_CHECKS, ExperimentGraph
from ...config.nested import get_path
from ...config.trinity_base import read_base_config
from ...data.quality import MAX_ROWS
from ...dsl.algorithms import CONVERSATION_ALGORITHMS, TRINITY_TYPES
from ...dsl.chat import ModelCall
from ...dsl.trinity_fields import ROLLOUT_MODEL, TASKSET
from ...models.context import check_model_lengths
from ...models.folder import (
    adapter_only_problem,
    config_shape_problem,
    folder_problem,
    generates_text,
    model_file_problem,
    unreachable_problem,
)
from ...wording import option, said
from .cluster import shared_note
from .config import RL_STAGE, WARMUP_STAGE, explorer_steps

INSTALL_HINT = 'pip install "tunedsl[trinity]"'

#: Why ``model.lora`` cannot train on Trinity-RFT 0.6.0 through tunedsl. Trinity passes the
#: adapter (a vLLM ``LoRARequest``) with its own ``ModelWrapper.chat``/``generate`` calls
#: only; the OpenAI API server it starts for workflows (vllm_patch/api_patch*.py) gets
#: ``--model <path>`` and no ``--lora-modules``, and tunedsl's workflows call that server.
LORA_ON_TRINITY = (
    "model.lora: Trinity-RFT 0.6.0 applies LoRA adapters to its own ModelWrapper.chat calls "
    "only; the OpenAI API server that tunedsl's workflows call is started without them, so "
    "every rollout would sample the base model while the adapters trained; train LoRA with "
    "{local}, or remove model.lora for Trinity")


def _local() -> str:
    """The local backend, named as the reader chooses it."""
    return said("--backend local", "backend='local'")


def check_installed(graph: ExperimentGraph) -> list[str]:
    """Trinity-RFT is importable (the install command otherwise)."""
    if importlib.util.find_spec("trinity") is None:
        return [f"Trinity-RFT is not installed; install it with: {INSTALL_HINT}"]
    return []


def check_no_lora(graph: ExperimentGraph) -> list[str]:
    """LoRA adapters would never be sampled on Trinity 0.6.0 (`LORA_ON_TRINITY`)."""
    return [LORA_ON_TRINITY.format(local=_local())] if graph.model.lora is not None else []


def check_keep_best(graph: ExperimentGraph) -> list[str]:
    """Trinity keeps the newest checkpoints only (``trainer.max_checkpoints_to_keep``)."""
    if not graph.algorithm.keep_best_checkpoint:
        return []
    return ["algorithm.keep_best_checkpoint: Trinity-RFT 0.6.0 keeps only the newest "
            "trainer.max_checkpoints_to_keep checkpoints and has no notion of the best; "
            f"remove it for {option('backend', 'trinity')} (algorithm.keep_checkpoints "
            f"still applies)"]


#: Sampling options that change the distribution a token is drawn from, with the value
#: that leaves it alone (vLLM's sampler: penalties, min-tokens, then min-p, top-k, top-p).
_NEUTRAL = {"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0,
            "frequency_penalty": 0.0, "presence_penalty": 0.0, "min_tokens": 0}


def ratio_bias(sampling: Mapping[str, Any], temperature: float) -> str | None:
    """Why sampling a training reply with ``sampling`` would bias Trinity's PPO ratio, or
    None. vLLM returns each token's log-probability after penalties, temperature, min-p,
    top-k and top-p (Trinity starts it with ``logprobs_mode="processed_logprobs"``;
    ``vllm/v1/sample/sampler.py``), while verl's trainer recomputes it from the logits at
    ``model.temperature`` alone (``trainer/verl/trainer.py``)."""
    extra = sampling.get("extra_body") or {}
    given = sampling.get("temperature")
    if given is not None and not math.isclose(float(given), temperature):
        return (f"temperature={given:g}, while Trinity's trainer recomputes log-probs at "
                f"model.temperature = {temperature:g}")
    for key, neutral in _NEUTRAL.items():
        value = sampling.get(key, extra.get(key))
        if value is not None and value != neutral and not (key == "top_k" and value < 0):
            return f"{key}={value:g}, which Trinity's trainer never applies"
    if sampling.get("logit_bias", extra.get("logit_bias")):
        return "a logit_bias, which Trinity's trainer never applies"
    return None


#: Where a Trinity config sets the trained model's per-call sampling (what the workflow
#: sends: `tunedsl.backends.trinity.workflow.sampling_settings`).
_SAMPLING_PLACES = (ROLLOUT_MODEL, f"{TASKSET}.rollout_args")


def _table(value: Any) -> Mapping[str, Any]:
    """``value`` where it is a table, else an empty one: a number or list where Trinity
    reads a table is `check_trinity_tables`'s to refuse, and the checks after it run all
    the same (every problem at once), so they must not fail on it."""
    return value if isinstance(value, Mapping) else {}


def check_trinity_tables(graph: ExperimentGraph) -> list[str]:
    """No Trinity table of the user's settings (the base YAML's, ``[trinity]``'s) is given a
    number, text or a list, at any depth (`tunedsl.backends.trinity.tables.table_problems`,
    which reads Trinity's own config classes; nothing without Trinity, which
    `check_installed` says)."""
    if importlib.util.find_spec("trinity") is None:
        return []
    from .tables import table_problems

    return table_problems(graph)


def check_engine_sampling(graph: ExperimentGraph) -> list[str]:
    """The trained model's engine samples as the trainer scores (`ratio_bias`): the
    workflow refuses every training call that does not (`with_stream_contexts`), so a
    ``top_k`` or ``repetition_penalty`` anywhere in the config would fail every rollout.
    A base Trinity YAML (``trinity_config``) is read too; its lines name the file."""
    base = read_base_config(graph.trinity_config) if graph.trinity_config else {}
    from_base = {f"{path}.{key}": value for path in _SAMPLING_PLACES
                 for key, value in _table(get_path(base, path)[1]).items()
                 if key in ("top_k", "repetition_penalty")}
    places = (graph.model.trinity, _table(get_path(graph.trinity, ROLLOUT_MODEL)[1]),
              _table(get_path(graph.trinity, f"{TASKSET}.rollout_args")[1]))
    given = {key: value for place in places for key, value in place.items()
             if key in ("top_k", "repetition_penalty")}
    fix = "train on Trinity with model.top_p = 1.0 and neither top_k nor a repetition_penalty"
    why = ratio_bias({"top_p": graph.model.top_p, **given}, graph.model.temperature)
    if why is not None:
        return [f"model: sampling with {why}, so the PPO ratio of every trained token would "
                f"be biased; {fix}"]
    for dotted, value in from_base.items():
        why = ratio_bias({dotted.rsplit(".", 1)[1]: value}, graph.model.temperature)
        if why is not None:
            return [f"trinity_config {graph.trinity_config}: {dotted} = {value} samples the "
                    f"trained model with {why}, so the PPO ratio of every trained token "
                    f"would be biased; remove it ({fix})"]
    return []


def check_tinker_sft(graph: ExperimentGraph) -> list[str]:
    """What Trinity 0.6.0 cannot train through Tinker: a checkpoint every step (no weight
    sync would ever reach the explorer), and an algorithm without a reference model (SFT,
    dapo, on_policy_distill): its Tinker trainer reads ``ref_logprob`` for the KL term of
    every micro-batch, and computes it only for an algorithm with a reference model
    (``trainer/tinker/tinker_trainer.py``), so the first step fails with
    ``KeyError: 'ref_logprob'``. A warm-up would also
    hand the next stage verl's Hugging Face checkpoint (``get_latest_hf_checkpoint_path``),
    which a Tinker trainer never writes."""
    if graph.tinker is None:
        return []
    if graph.warmup is not None:
        return ["warmup: Trinity-RFT 0.6.0 cannot train an SFT warm-up through Tinker (its "
                "Tinker trainer fails at the first step, and the RL stage would need a "
                "checkpoint Tinker does not write); remove warmup, or remove tinker to train on "
                "GPUs"]
    if graph.algorithm.save_interval_steps == 1:
        # trainer/trainer.py: "For CHECKPOINT sync, save_checkpoint is a superset of
        # save_state_dict" holds for verl, but the Tinker trainer's save_checkpoint saves
        # the training state only, never sampler weights (trainer/tinker/tinker_trainer.py).
        return ["algorithm.save_interval_steps = 1: on Tinker, Trinity-RFT 0.6.0 syncs no "
                "weights to the explorer at a step it saves a checkpoint (its trainer lets "
                "the checkpoint stand for the sync, and a Tinker checkpoint holds no sampler "
                "weights), so with a checkpoint every step the explorer would sample the "
                "starting model all run; save every 2 steps or more"]
    kind = graph.algorithm.algorithm_type
    known = TRINITY_TYPES.get(kind)
    if kind in CONVERSATION_ALGORITHMS or (known is not None and not known.reference):
        # dapo and on_policy_distill too: measured, dapo's first step fails so
        return [f"algorithm.algorithm_type = {kind!r}: Trinity-RFT 0.6.0 cannot train it "
                f"through Tinker (its Tinker trainer reads the reference model's log-probs at "
                f"every step, which an algorithm without a reference model never computes, so "
                f"the first step fails with KeyError 'ref_logprob'); remove tinker to train "
                f"it on GPUs or with {option('backend', 'local')}"
                + (", or take grpo with std_threshold = 0 (dapo's group filter)"
                   if kind == "dapo" else "")]
    return []


#: Why a GPU install without flash-attn cannot train on Trinity-RFT 0.6.0 (with verl 0.8):
#: every training step unpads its batch with ``left_right_2_no_padding``
#: (``trinity/trainer/verl/trainer.py``, ``_update_actor``), whose ``unpad_input`` imports
#: ``flash_attn.bert_padding`` on every device but an NPU (``verl/utils/attention_utils.py``),
#: whatever the attention implementation or ``trainer.use_remove_padding``.
FLASH_ATTN_ON_TRINITY = (
    "trinity: Trinity-RFT 0.6.0's verl trainer imports flash_attn on every training step, "
    "whatever the attention (its padding helper calls verl's unpad_input), and flash-attn "
    "does not import here ({why}); install flash-attn built for this torch and CUDA (pip "
    "install flash-attn --no-build-isolation, see docs/getting-started/install.md, \"GPU "
    "install\"), or train with tinker or {local}")


def _distribution(name: str) -> bool:
    """An installed distribution (its metadata, not just an importable folder)."""
    import importlib.metadata

    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def check_paths_from_the_environment(graph: ExperimentGraph) -> list[str]:
    """A path read from an environment variable that Trinity reads otherwise than tunedsl:
    the Trinity config keeps the ``${oc.env:...}`` it came from for Trinity to read on its
    nodes, which takes a leading ``~`` as a folder's name (its checkpoint folder made as
    ``./~/...``; a dataset path taken for a hub id), and a relative path from the folder it
    runs in, where tunedsl read it beside the settings file that named it."""
    import attrs

    from ...config.environment import EnvValue

    problems: list[str] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, EnvValue):
            from omegaconf import OmegaConf
            from omegaconf.errors import OmegaConfBaseException

            try:  # as Trinity reads the config
                read = OmegaConf.create({"value": value.template})["value"]
            except OmegaConfBaseException:  # (an unset variable: said by its own check)
                return
            if isinstance(read, str) and read.startswith("~"):
                problems.append(f"{where}: the Trinity config keeps {value.template} for "
                                f"Trinity to read, {read!r}, which it takes as a path under "
                                f"a folder named '~', not the home folder (tunedsl read "
                                f"{str(value)!r}); give the variable (or its default) an "
                                f"absolute path")
            elif isinstance(read, str) and read != str(value) and \
                    not os.path.isabs(read) and os.path.abspath(read) != str(value):
                # tunedsl read it beside the file that named it, Trinity reads it from the
                # folder it runs in (a settings file of another folder)
                problems.append(f"{where}: the Trinity config keeps {value.template} for "
                                f"Trinity to read, {read!r}, a relative path it reads from "
                                f"the folder it runs in, where tunedsl read it beside the "
                                f"file that names it ({str(value)!r}); give the variable (or "
                                f"its default) an absolute path")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, f"{where}.{key}" if where else str(key))

    walk(attrs.asdict(graph, recurse=True), "")
    return problems


def check_dataset_folders(graph: ExperimentGraph, report: PreflightReport) -> list[str]:
    """Each dataset is a folder (or a hub id): Trinity's readers call
    ``datasets.load_dataset(path, split=...)``, which cannot read a single data file's path,
    where tunedsl's readers (check, eval, the local backend) can. (Checked once the data
    is: a file's own problems are said first.)"""
    from ...config.graph import DATASET_SECTIONS
    from ...config.paths import local_path

    problems = []
    for section in DATASET_SECTIONS:
        dataset = getattr(graph, section)
        path = local_path(dataset) if dataset is not None else None
        if path and os.path.isfile(path):
            problems.append(f"{section}.path: {path} is one file, which Trinity's reader "
                            f"(datasets.load_dataset(path, split=...)) cannot read; give the "
                            f"folder that holds it, its files named by split ("
                            f"{dataset.split}.jsonl)")
    return problems


def check_flash_attn(graph: ExperimentGraph) -> list[str]:
    """On a GPU install (vLLM installed: ``tunedsl[gpu]``), a verl-trained run needs
    flash-attn to import (`FLASH_ATTN_ON_TRINITY`); Tinker trains elsewhere."""
    if graph.tinker is not None or not _distribution("vllm"):
        return []
    try:
        import flash_attn.bert_padding  # noqa: F401
    except Exception as exc:  # not installed, or built for another torch (undefined symbol)
        why = " ".join(f"{type(exc).__name__}: {exc}".split())
        return [FLASH_ATTN_ON_TRINITY.format(why=why, local=_local())]
    return []


def _model_paths(graph: ExperimentGraph) -> list[tuple[str, str]]:
    """``(setting, model_path)`` of each model the run loads (not those at an endpoint)."""
    return [("model", graph.model.model_path),
            *((f"auxiliary_models.{name}", model.model_path)
              for name, model in graph.auxiliary_models.items() if model.base_url is None)]


def check_model_folders(graph: ExperimentGraph) -> list[str]:
    """A model_path that is a folder on this machine is a saved model (a ``config.json``
    transformers reads, weights and tokenizer files whole, not git-lfs pointers): vLLM
    would find out only once Ray and the GPUs are taken. One that is not here may be on
    the GPU nodes, or a hub id (`trinity_notes` says so of an absolute path)."""
    import os

    problems = []
    for setting, path in _model_paths(graph):
        unreachable = unreachable_problem(path) if os.path.isabs(path) or \
            os.path.exists(path.split("/")[0]) else None  # (a hub id's org is no folder)
        if unreachable is not None:
            problems.append(f"{setting}.model_path: {unreachable}")
            continue
        if os.path.exists(path) and not os.path.isdir(path):  # (a file here is no hub id)
            named = os.path.dirname(path) if os.path.basename(path) == "config.json" or \
                os.path.isfile(os.path.join(os.path.dirname(path), "config.json")) else None
            problems.append(f"{setting}.model_path: {path} is a file, not a model's folder; "
                            + (f"give the folder that holds it, {named}" if named else
                               "give the folder of a Hugging Face model (or its hub id)"))
            continue
        if not os.path.isdir(path):
            continue
        if not os.path.exists(os.path.join(path, "config.json")):  # (a folder of that name
            # is said by model_file_problem, as the local backend says it)
            adapter = adapter_only_problem(Path(path), path, trained=setting == "model")
            problems.append(f"{setting}.model_path: {adapter}" if adapter else
                            f"{setting}.model_path: {path} has no config.json, so it is not a "
                            f"saved model folder; give the folder of a Hugging Face model (or "
                            f"its hub id)")
            continue
        files = model_file_problem(Path(path) / "config.json", path)
        shape = config_shape_problem(Path(path), path) if files is None else None
        if shape is not None:  # (said as the local backend says it)
            problems.append(f"{setting}.model_path: {shape}")
            continue
        unreadable = _configuration_problem(path) if files is None else None
        if unreadable is not None:
            problems.append(f"{setting}.model_path: {path}/config.json: {unreadable}; vLLM and "
                            f"verl load it so too: give the folder of a model transformers "
                            f"knows")
            continue
        architecture = _architectures_problem(path) if files is None else None
        # what it is before what it holds when it is a classifier: a reward model's weights
        # have a score head its config.json was blamed for (sweep 45 A-W7)
        if architecture is not None and _a_classifier(path):
            problems.append(f"{setting}.model_path: {path}/config.json: {architecture}")
            continue
        files = files or folder_problem(Path(path), path)  # what vLLM would load
        if files is not None:
            problems.append(f"{setting}.model_path: {files}")
            continue
        if architecture is not None:
            problems.append(f"{setting}.model_path: {path}/config.json: {architecture}")
    return problems


def _a_classifier(path: str) -> bool:
    """Whether a model folder's configuration names one architecture, of a model that
    generates no text and is no encoder-decoder (a classifier, a reward model, an embedding
    model)."""
    import json
    import os

    with open(os.path.join(path, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    named = config.get("architectures")
    return isinstance(named, list) and len(named) == 1 and isinstance(named[0], str) and \
        not generates_text(config) and config.get("is_encoder_decoder") is not True and \
        not named[0].endswith("ForConditionalGeneration")


def _configuration_problem(path: str) -> str | None:
    """Why transformers (which vLLM and verl load a model's configuration with) cannot
    read the configuration of the model folder ``path`` (an unknown ``model_type``, JSON
    that is not one), in a line; None when it can."""
    import logging
    import os

    from transformers import AutoConfig
    from transformers.utils import logging as transformers_logging

    quiet = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity(logging.ERROR)
    try:
        AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure: no engine loads it either
        import json

        from ...models.folder import config_field_problem

        field = config_field_problem(path)
        if field is not None:
            return field
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        try:
            with open(os.path.join(path, "config.json"), encoding="utf-8") as handle:
                kind = json.load(handle).get("model_type")
        except (OSError, ValueError, AttributeError):
            kind = None
        if isinstance(kind, str) and kind not in CONFIG_MAPPING:
            return f"its model_type {kind!r} is not one the installed transformers knows"
        return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300].rstrip(".")
    finally:
        transformers_logging.set_verbosity(quiet)
    return None


def _architectures_problem(path: str) -> str | None:
    """Why the ``architectures`` of a model folder's configuration (one transformers reads)
    is not the one class verl and vLLM build the model by: verl asserts exactly one ("Expect
    only one architecture, got None"), vLLM finds its model class by it; transformers alone
    builds by ``model_type`` (a configuration saved without a model has none). None when it
    names one."""
    import json
    import os

    with open(os.path.join(path, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    )

    known = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.get("model_type"))
    example = f'"architectures": ["{known}"]' if isinstance(known, str) else \
        '"architectures": ["NAME"], the model\'s class in transformers'
    named = config.get("architectures")
    if not (isinstance(named, list) and len(named) == 1 and isinstance(named[0], str)
            and named[0]):
        said = "it names no architectures" if named in (None, []) else \
            f"its architectures is {json.dumps(named)[:80]}"
        return (f"{said}, and verl (Trinity's trainer) and vLLM build the model by exactly "
                f"one; set {example}")
    # vLLM builds the class it names: a classifier's or an embedding model's generates
    # nothing (`generates_text`)
    if generates_text(config):
        return None
    kind = config.get("model_type")
    encoder_decoder = config.get("is_encoder_decoder") is True or (
        kind in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
        and kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    if encoder_decoder:
        return (f"its architectures names {named[0][:80]!r}, and its model_type {kind!r} is an "
                f"encoder-decoder's, which vLLM (Trinity's rollout engine) and verl do not "
                f"train as a causal language model; give a decoder-only model's folder")
    return (f"its architectures names {named[0][:80]!r}, no causal language model's class: "
            f"vLLM (Trinity's rollout engine) builds the model by it, and a classifier or an "
            f"embedding model generates no text; give a causal language model's folder (if "
            f"these weights are one's, set {example})")


TRINITY_CHECKS = (check_installed, check_trinity_tables, check_no_lora, check_keep_best,
                  check_engine_sampling, check_tinker_sft, check_flash_attn, check_model_lengths,
                  check_model_folders, check_paths_from_the_environment, *TRAINING_CHECKS)


def check_calls_made(graph: ExperimentGraph, report: PreflightReport) -> list[str]:
    """The scripted rollout called the trained model (`check_model_called`); SFT alone
    trains on conversations, whatever its workflow does."""
    if graph.algorithm.algorithm_type in CONVERSATION_ALGORITHMS:
        return []
    return check_model_called(graph, report.calls)


def check_call_sampling(graph: ExperimentGraph, report: PreflightReport) -> list[str]:
    """No call of the scripted rollout overrides the trained model's sampling in a way
    Trinity's trainer cannot score (`ratio_bias`)."""
    for number, call in enumerate(report.calls, start=1):
        why = ratio_bias(call.sampling, graph.model.temperature)
        if why is not None:
            return [f"@workflow {graph.workflow.qualname} ({graph.workflow.where}): its call "
                    f"{number} of the trained model on the first task sets {why}; the PPO "
                    f"ratio of its tokens would be biased, so set the sampling on Model(...) "
                    f"and drop it from the call"]
    return []


def check_schedule(graph: ExperimentGraph, report: PreflightReport) -> list[str]:
    """A cosine schedule can be given its length: verl decays over ``trainer.total_steps``,
    which tunedsl writes as the explorer's step count (one trainer step per explorer step
    for a workflow that calls the model once per rollout)."""
    if graph.algorithm.lr_scheduler != "cosine" or \
            get_path(graph.trinity, "trainer.total_steps")[0]:  # the user's own length
        return []
    if len(report.calls) > 1:
        return [f"algorithm.lr_scheduler = 'cosine': on Trinity a trainer step takes "
                f"buffer.train_batch_size model calls, and this workflow's rollout made "
                f"{len(report.calls)} on the first task, so the trainer's step count (over "
                f"which verl decays the learning rate) is not known before the run; use "
                f"'constant', or set trinity.trainer.total_steps to the steps you expect"]
    if explorer_steps(graph, report.rows) is None:
        return [f"algorithm.lr_scheduler = 'cosine': train_dataset has more rows than "
                f"tunedsl counts ({MAX_ROWS:,}), so the schedule's length is unknown; set "
                f"train_dataset.total_steps"]
    return []


#: What Trinity-RFT 0.6.0's Tinker client drops: its OpenAI client routes ``create()`` to
#: ``TinkerModel.chat`` (``common/models/model.py``, ``get_openai_async_client``), which
#: applies the chat template to the messages alone and returns plain text
#: (``common/models/tinker_model.py``, ``chat`` and ``generate``): no tools in the prompt,
#: no tool calls parsed.
TINKER_TOOLS = (
    "@workflow {workflow} ({where}): its call {number} of the trained model on the first "
    "task sends tools, which Trinity-RFT 0.6.0's Tinker client drops (it applies the chat "
    "template to the messages only and parses no tool calls); call the model without "
    "tools, or train without tinker")
#: What its Tinker client ignores: ``stream``. ``create(stream=True)`` returns the whole
#: ``ChatCompletion`` that ``TinkerModel.generate`` builds, never chunks, so a client that
#: streams (AgentScope's ``OpenAIChatModel`` by default) fails to read the reply.
TINKER_STREAM = (
    "@workflow {workflow} ({where}): its call {number} of the trained model on the first "
    "task streams (stream=True), which Trinity-RFT 0.6.0's Tinker client ignores (it "
    "answers with a whole chat completion, never chunks, so a streaming client fails to "
    "read it); do not stream: build the AgentScope model with "
    "tunedsl.as_agentscope(model, stream=False) (an AgentScope ChatModelBase parameter "
    "gets one that does not stream), or call the model without stream=True, or train "
    "without tinker")


def _streams(call: ModelCall) -> bool:
    """The call streamed: through the ``openai_client`` (recorded by the in-process
    server) or with ``stream=True`` given to ``chat``."""
    return call.streamed or bool(call.sampling.get("stream"))


def check_tinker_calls(graph: ExperimentGraph, report: PreflightReport) -> list[str]:
    """On Tinker, no call of the scripted rollout sends tools (`TINKER_TOOLS`) or streams
    (`TINKER_STREAM`): one line for each, naming the first call that does."""
    if graph.tinker is None:
        return []
    problems = []
    for message, sends in ((TINKER_TOOLS, lambda call: bool(call.sampling.get("tools"))),
                           (TINKER_STREAM, _streams)):
        number = next((n for n, call in enumerate(report.calls, start=1) if sends(call)),
                      None)
        if number is not None:
            problems.append(message.format(workflow=graph.workflow.qualname,
                                           where=graph.workflow.where, number=number))
    return problems


#: Checks of what the preflight found (the rows, the scripted rollout's calls).
TRINITY_REPORT_CHECKS = (check_calls_made, check_call_sampling, check_schedule,
                         check_tinker_calls, check_dataset_folders)


def trinity_notes(graph: ExperimentGraph, report: PreflightReport,
                  config: Mapping[str, Any]) -> list[Note]:
    """What a run on Trinity does differently from the same experiment on the local
    backend, where this experiment meets it (the settings reference says the rest)."""
    import os

    notes = [Note(f"trinity: {setting}.model_path {path} is not on this machine; the run "
                  f"reads it on the GPU nodes, so it must be there")
             for setting, path in _model_paths(graph)
             if os.path.isabs(path) and not os.path.exists(path)]
    nodes = get_path(config, "cluster.node_num")[1] or 1
    if isinstance(nodes, int) and nodes > 1:
        notes.append(Note(shared_note(nodes)))
    calls = len(report.calls)
    rollouts = graph.algorithm.batch_size * graph.algorithm.group_size
    per_step = get_path(config, "buffer.train_batch_size")[1] or rollouts
    trainer_steps = rollouts * max(calls, 1) / per_step if isinstance(per_step, int) else 1
    if calls and trainer_steps != 1:
        # from the real train batch: an explicit buffer.train_batch_size changes the count
        notes.append(Note(
            f"trinity: the first task's rollout made {calls} call{'s' if calls != 1 else ''} "
            f"of the trained model; on Trinity each call is one experience, an explorer step "
            f"makes about {rollouts * calls} ({rollouts} rollouts) and a trainer step takes "
            f"{per_step} of them (buffer.train_batch_size), so each explorer step trains "
            f"about {trainer_steps:.3g} trainer steps, and algorithm.save_interval_steps counts "
            f"trainer steps (the local backend trains once per step on every call)"))
    if graph.algorithm.algorithm_type in CONVERSATION_ALGORITHMS:
        if graph.eval_dataset is not None:
            notes.append(Note(
                f"trinity: {graph.algorithm.algorithm_type} runs in Trinity's mode train, "
                f"which has no explorer, so eval_dataset is not evaluated during the run (the "
                f"local backend evaluates it); evaluate checkpoints with tunedsl eval"))
        return notes
    if graph.warmup is not None:
        notes.append(Note(
            f"trinity: the warm-up and RL run as two Trinity stages, each in a folder of its "
            f"own inside the run directory ({WARMUP_STAGE}/ and {RL_STAGE}/, each counting "
            f"steps from 1; the local backend counts the run's steps straight through)"))
    steps = explorer_steps(graph, report.rows)
    interval = graph.algorithm.eval_interval_steps
    if graph.eval_dataset is not None and steps is not None and steps % interval:
        notes.append(Note(
            f"trinity: Trinity evaluates at step 0 and every {interval} steps but not after "
            f"the last one, so step {steps} is not evaluated (the local backend evaluates "
            f"after its last step too); evaluate the last checkpoint with tunedsl eval"))
    return notes
