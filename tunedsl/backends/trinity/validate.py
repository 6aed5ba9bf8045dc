"""Real Trinity-RFT loads and validates tunedsl's config, and counts the GPUs it needs.

The count is Trinity's own: the fewest GPUs on one node for which Trinity's cluster
validator accepts the config (each engine's data x tensor x pipeline parallel size,
auxiliary engines, at least one GPU left for the trainer in mode ``both``, ``[trinity]``
overrides included), never an arithmetic of tunedsl's.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ...dsl.algorithms import CONVERSATION_ALGORITHMS
from ...errors import ConfigError, RunError
from ...runs.run_files import CONFIG_YAML
from .checks import INSTALL_HINT
from .cluster import (
    Cluster,
    Layout,
    counted,
    default_cluster,
    explicit_cluster,
    fit_to_cluster,
    layout_of,
)
from .config import to_yaml, trinity_config
from .tables import table_problems
from .tinker_service import (
    check_tinker,
    is_connection_failure,
    is_not_tinker,
    service_address,
    unreachable,
)
from .unattended import unattended
from .verl_overrides import trainer_config_problem, verl_override_problems

if TYPE_CHECKING:
    from ...config.graph import ExperimentGraph

#: The most GPUs one node is tried with when counting (a config needing more is refused).
MOST_GPUS = 1024
#: With ``model.lora_configs`` set, Trinity's validator builds the whole model on the CPU
#: (random float32 weights: 4 bytes a parameter) to save a dummy adapter. Validation lets
#: it do so up to this many parameters (a 400 MB build); above, see `lora_build_limited`.
LORA_BUILD_LIMIT = 100_000_000


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _cannot_write(folder: str, exc: OSError) -> RunError:
    return RunError(f"trinity: cannot write the config for Trinity-RFT to check in {folder} "
                    f"({exc.strerror or exc}); make room in the temporary folder or point "
                    f"TMPDIR elsewhere")


@contextlib.contextmanager
def _scratch(prefix: str) -> Iterator[str]:
    """A temporary folder for Trinity's validators to write in, removed afterwards."""
    try:
        scratch = tempfile.TemporaryDirectory(prefix=prefix)
    except OSError as exc:  # a full disk, a read-only or missing TMPDIR
        raise _cannot_write(tempfile.gettempdir(), exc) from None
    with scratch as folder:
        yield folder


def _load(config: dict[str, Any], folder: str) -> Any:
    """Trinity's ``Config`` for ``config``, its checkpoints under ``folder`` (the validators
    create folders there)."""
    from trinity.common.config import load_config

    config = {**copy.deepcopy(config), "checkpoint_root_dir": folder}
    path = os.path.join(folder, CONFIG_YAML)
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(to_yaml(config))
    except OSError as exc:  # a full disk, a file-size limit: where Trinity reads it from
        raise _cannot_write(folder, exc) from None
    try:
        with unattended():
            return load_config(path)
    except Exception as exc:  # OmegaConf's reason, as a ValueError
        raise ConfigError(_unknown_key(exc) or f"trinity: Trinity-RFT rejects the generated "
                          f"config: {_reason(exc)}") from None


def _unknown_key(exc: BaseException) -> str | None:
    """The line for a key Trinity's ``Config`` has no field for, or a value of a key its
    reader refuses (OmegaConf's, with the key's path), or None. tunedsl writes only keys
    Trinity has, so an unknown key was the user's: of the base YAML or ``[trinity]`` (it
    was "rejects the generated config: Invalid configuration: Key 'k' not in 'Config'
    full_key: k object_type=Config"; sweep 47 A-W10)."""
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    cause = exc.__cause__ or exc.__context__
    key = getattr(cause, "full_key", None)
    merged = re.match(r"Merge error: (\w+) is not a subclass of (\w+?)Config\. value: (.*)",
                      str(getattr(cause, "msg", "")))
    if isinstance(cause, OmegaConfBaseException) and not key and merged:
        # (a table given a scalar: OmegaConf's words, no key named; sweep 49 A-W7)
        section = re.sub(r"(?<!^)(?=[A-Z])", "_", merged[2]).lower()
        return (f"trinity: {section} is given the {merged[1]} {merged[3].strip()}, where "
                f"Trinity-RFT reads a table of settings ({merged[2]}Config); give a table "
                f"(in the base YAML or [trinity]), or remove it")
    if not isinstance(cause, OmegaConfBaseException) or not key:
        return None
    if isinstance(cause, ConfigKeyError):
        return (f"trinity: {key}: Trinity-RFT has no such setting (a key of the base YAML "
                f"given as trinity_config, or of the [trinity] table); fix its name, or "
                f"remove it")
    said = str(getattr(cause, "msg", "") or "").split("\n")[0].strip()
    return f"trinity: Trinity-RFT rejects {key}: {said or _reason(cause)}"


def prepared_for_cluster(loaded: Any) -> Any:
    """A copy of Trinity's loaded ``Config`` through the validators that run before the
    cluster's (they fill in what it reads). The monitor's is skipped: it fills in only the
    monitor's settings and folder, which the cluster's never reads, and it imports every
    monitor Trinity has (torch's TensorBoard writer, mlflow, ...): seconds that ``tunedsl
    config`` would spend for nothing (``check`` and ``run`` validate the whole config)."""
    from trinity.common.config_validator import (
        AlgorithmConfigValidator,
        MonitorConfigValidator,
        RayClusterConfigValidator,
        validators,
    )

    prepared = copy.deepcopy(loaded)
    cluster_check = next(v for v in validators if isinstance(v, RayClusterConfigValidator))
    try:
        with unattended():
            for validator in validators[:validators.index(cluster_check)]:
                if not isinstance(validator, (MonitorConfigValidator, AlgorithmConfigValidator)):
                    validator.validate(prepared)
    except Exception as exc:  # Trinity raises ValueError, KeyError, AssertionError, ...
        _refuse_tinker_service(exc, loaded)
        raise ConfigError(f"trinity: Trinity-RFT rejects the generated config: "
                          f"{_reason(exc)}") from None
    return prepared


def _refuse_tinker_service(exc: BaseException, loaded: Any) -> None:
    """Raise the line for a Tinker validator's failure that is the service's, not the
    config's: no connection to it (after the SDK's retries), or an address that answers,
    but not as Tinker's service does (another server there: sweep 49 A-W9)."""
    if not loaded.model.tinker.enable:
        return
    address = service_address(loaded.model.tinker.base_url)
    if is_connection_failure(exc):
        raise ConfigError(unreachable(address, _reason(exc))) from None
    if is_not_tinker(exc):
        raise ConfigError(f"tinker: {address} answered, but not as Tinker's service does "
                          f"({_reason(exc)}); point tinker.base_url at Tinker's service, or "
                          f"unset it (and TINKER_BASE_URL)") from None


def _fewest_gpus(prepared: Any) -> int:
    from trinity.common.config_validator import RayClusterConfigValidator

    if prepared.model.tinker.enable:  # Tinker trains and samples: no local GPU at all
        return 0
    cluster_check = RayClusterConfigValidator()
    for total in range(1, MOST_GPUS + 1):
        trial = copy.deepcopy(prepared)
        trial.cluster.node_num, trial.cluster.gpu_per_node = 1, total
        try:
            with unattended():
                cluster_check.validate(trial)
        except ValueError:
            continue
        return total
    raise ConfigError(f"trinity: the config needs more than {MOST_GPUS} GPUs on one node")


def _empty_model(model_path: str) -> Any:
    """The model of ``model_path``'s config on PyTorch's meta device: every module and
    parameter shape, no memory and no weights read."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path)
    if not hasattr(config, "vocab_size") and hasattr(config, "get_text_config"):
        config = config.get_text_config()  # as Trinity's create_dummy_lora reads it
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


@contextlib.contextmanager
def lora_build_limited(skipped: list[str]) -> Iterator[None]:
    """Trinity's validation without building a large model on the CPU.

    For ``model.lora_configs``, Trinity's validator calls ``create_dummy_lora``, which builds
    the whole model with random weights to save an adapter that stands in until the trainer
    saves the first real one. Within this context a model of more than `LORA_BUILD_LIMIT`
    parameters is built on the meta device instead, where peft is given the same LoRA
    settings (so target modules that match no layer are still refused) and nothing is
    saved; every other validation runs as it would. A line saying so is added to
    ``skipped``. Smaller models are built and saved as Trinity does.
    """
    from trinity.common import config_validator

    build = config_validator.create_dummy_lora

    def create_dummy_lora(model_path: str, checkpoint_job_dir: str, lora_rank: int,
                          lora_alpha: int, target_modules: str,
                          exclude_modules: str | None = None) -> str:
        empty = _empty_model(model_path)
        count = sum(parameter.numel() for parameter in empty.parameters())
        if count <= LORA_BUILD_LIMIT:
            return build(model_path, checkpoint_job_dir, lora_rank, lora_alpha,
                         target_modules, exclude_modules)
        import torch
        from peft import LoraConfig, TaskType, get_peft_model

        with torch.device("meta"):  # the adapters' own weights are not made either
            get_peft_model(empty, LoraConfig(
                task_type=TaskType.CAUSAL_LM, r=lora_rank, lora_alpha=lora_alpha,
                target_modules=target_modules, exclude_modules=exclude_modules, bias="none"))
        skipped.append(
            f"trinity: skipped building the {count / 1e9:.2f}B-parameter model on the CPU "
            f"({count * 4 / 2**30:.1f} GiB in float32) that Trinity's validator builds for "
            f"model.lora_configs to save a dummy adapter; peft accepted the LoRA target modules "
            f"on an empty (meta-device) copy instead, and every other check ran")
        return os.path.join(checkpoint_job_dir, "dummy_lora")

    config_validator.create_dummy_lora = create_dummy_lora
    try:
        yield
    finally:
        config_validator.create_dummy_lora = build


def gpus_needed(config: dict[str, Any]) -> int:
    """The GPUs a Trinity run of ``config`` needs, as Trinity's own validator counts them."""
    with _scratch("tunedsl-gpus-") as folder:
        return _fewest_gpus(prepared_for_cluster(_load(config, folder)))


def sized_for(config: dict[str, Any], cluster: Cluster | None) -> tuple[dict[str, Any], Layout]:
    """``config`` fitted to ``cluster`` (`fit_to_cluster`; None: `default_cluster`) and its
    layout."""
    fitted = _sized(config, cluster)
    assert fitted.layout is not None  # sized where Trinity runs the config (not on Tinker)
    return fitted.config, fitted.layout


@attrs.frozen(kw_only=True)
class Fitted:
    """A config fitted to a cluster: the config, its layout (None: Tinker, or Trinity not
    installed: nothing to fit) and the GPUs Trinity needs for the experiment before the
    fit chose an engine count (None: not counted)."""

    config: dict[str, Any]
    layout: Layout | None = None
    needed: int | None = None


def _sized(config: dict[str, Any], cluster: Cluster | None) -> Fitted:
    with _scratch("tunedsl-fit-") as folder:
        prepared = prepared_for_cluster(_load(config, folder))
        needed = _fewest_gpus(prepared)
        config, layout = fit_to_cluster(config, cluster or default_cluster(config, needed),
                                        prepared, needed=needed)
        return Fitted(config=config, layout=layout, needed=needed)


def fitted_config(graph: ExperimentGraph, cluster: Cluster | None = None, *,
                  name: str | None = None,
                  rows: Mapping[str, int | None] | None = None) -> Fitted:
    """``graph``'s Trinity config as a run on ``cluster`` launches it (None: the cluster
    the config names, else this machine's GPUs if enough, else the smallest Trinity
    accepts: `default_cluster`): fitted to the
    cluster (`fit_to_cluster`), with the step bounds of the engine count the fit chose
    (`tunedsl.backends.trinity.config.with_bounds`). Tinker runs, and machines without
    Trinity, get the config unfitted."""
    installed = importlib.util.find_spec("trinity") is not None
    problems = table_problems(graph) if installed else []
    if problems:  # before the YAML is made: tunedsl's tables would hide a base YAML's
        raise ConfigError(problems)
    config = trinity_config(graph, name=name, rows=rows)
    not_a_table = trainer_config_problem(config)
    if not_a_table is not None:  # Trinity's loader takes any value there: config wrote it on
        raise ConfigError(not_a_table)
    if graph.tinker is not None or not installed:
        return Fitted(config=config)
    fitted = _sized(config, cluster)
    return attrs.evolve(fitted, config=trinity_config(graph, name=config.get("name"), rows=rows,
                                                      fitted=fitted.config))


def validate_with_trinity(config: dict[str, Any], cluster: Cluster | None = None, *,
                          show_split: bool = True, needed: int | None = None) -> list[str]:
    """Have Trinity-RFT load and validate ``config`` on a cluster; return report lines (the
    verdict, the GPU split unless ``show_split`` is False, then what was skipped, if
    anything: see `lora_build_limited`).

    The cluster is ``cluster``, else the one the config names, else one node with exactly
    the GPUs Trinity says it needs (``check`` needs no cluster); the config is fitted to
    it first (`fit_to_cluster`), as a run is. ``needed`` is the GPU count to report, for a
    config already fitted (`fitted_config`): its engine count is then the fit's, not the
    experiment's.
    """
    from ...interrupts import deferred

    try:
        with deferred():  # a Ctrl-C inside torch's import must not read as "not installed"
            import trinity.common.config  # noqa: F401
    except ImportError:
        return ["trinity: Trinity-RFT is not installed, so the config was not validated; "
                f"{INSTALL_HINT}"]
    check_tinker(config)
    skipped: list[str] = []
    with _scratch("tunedsl-check-") as folder, \
            lora_build_limited(skipped):
        loaded = _load(config, folder)
        prepared = prepared_for_cluster(loaded)
        # A fitted config: the split was accepted in the fit, so no refusal below is the
        # cluster's, and the count is the experiment's, not its fitted engines'.
        fitted, needed = needed is not None, _fewest_gpus(prepared) if needed is None else needed
        split: list[str] = []
        given = cluster or explicit_cluster(config)
        if loaded.model.tinker.enable:  # Trinity reads a cluster of 0 as "ask Ray": 1 x 1
            loaded.cluster.node_num, loaded.cluster.gpu_per_node = 1, 1
        else:
            shape = given or Cluster(1, needed)
            config, layout = fit_to_cluster(config, shape, prepared, needed=needed)
            loaded, split = _load(config, folder), [layout.line()] if show_split else []
        try:
            with unattended():
                validated = loaded.check_and_update()
        except Exception as exc:  # Trinity raises ValueError, KeyError, AssertionError, ...
            _refuse_tinker_service(exc, loaded)
            needs = _needs(needed) if given and not fitted else ""
            raise ConfigError(f"trinity: Trinity-RFT rejects the generated config: "
                              f"{_reason(exc)}{needs}") from None
        problems = verl_override_problems(validated, config)
        if problems:
            raise ConfigError(problems)
        if loaded.stages:
            split += stage_lines(_load(config, folder), None if loaded.model.tinker.enable
                                 else given or Cluster(1, needed))
    algorithm = validated.algorithm
    # Trinity names an advantage function for SFT too, one its trainer never calls.
    advantage = "" if algorithm.algorithm_type in CONVERSATION_ALGORITHMS else \
        f"advantage {algorithm.advantage_fn}, "
    return [f"trinity: Trinity-RFT accepts the config (algorithm {algorithm.algorithm_type}, "
            f"{advantage}train_batch_size {validated.buffer.train_batch_size}, "
            f"{counted(needed, 'GPU')} needed as Trinity counts them)", *split, *skipped]


def stage_lines(loaded: Any, cluster: Cluster | None) -> list[str]:
    """Each stage of a staged config (a warm-up, then RL) as Trinity's launcher makes and
    checks it (``Config.__iter__``, then ``check_and_update``), and how ``cluster`` is split
    for a stage that trains alone (mode ``train``: SFT); one report line each.

    Raises:
        ConfigError: Trinity refuses a stage, or verl could not divide its steps.
    """
    names = [stage.stage_name for stage in loaded.stages]
    lines = []
    for number, stage in enumerate(loaded, start=1):
        label = f"stage {number}/{len(names)} ({names[number - 1]})"
        try:
            with unattended():
                stage.check_and_update()
        except Exception as exc:  # Trinity raises ValueError, KeyError, AssertionError, ...
            raise ConfigError(f"trinity: Trinity-RFT rejects {label}: {_reason(exc)}") from None
        if stage.mode != "train" or cluster is None:
            lines.append(f"trinity: {label}: mode {stage.mode}, algorithm "
                         f"{stage.algorithm.algorithm_type}, accepted")
            continue
        layout = layout_of(stage, cluster, stage.explorer.rollout_model.engine_num,
                           stage.buffer.train_batch_size)
        if not layout.divides:
            raise ConfigError(
                f"warmup.batch_size = {layout.experiences}: on {cluster} the warm-up trains on "
                f"{counted(layout.trainer_gpus, 'GPU')}, and verl splits each step's "
                f"conversations evenly over its {layout.data_parallel} data-parallel ranks; "
                f"make warmup.batch_size a multiple of {layout.data_parallel}")
        lines.append(f"trinity: {label}: algorithm {stage.algorithm.algorithm_type}, "
                     f"{layout.line().removeprefix('trinity: ')}")
    return lines


def _needs(needed: int) -> str:
    return f" (the config needs {needed} GPUs on one node as Trinity counts them)"
