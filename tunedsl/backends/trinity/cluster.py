"""The cluster a Trinity run gets, and a GPU split that verl can train on.

Trinity gives the trainer every GPU its explorer's engines leave
(``RayClusterConfigValidator`` in ``trinity/common/config_validator.py``), and verl
splits each step's experiences evenly over the trainer's data-parallel ranks: its
batch balancer asserts ``len(seqlen_list) % k_partitions == 0``
(``verl/utils/seqlen_balancing.py``, from ``trainer/verl/trainer.py``'s
``_balance_batch``) and its data dispatch chunks equally (``verl/protocol.py``,
``DataProto.chunk``). One rollout engine on an 8-GPU node leaves 7 ranks, which no
256-experience step divides: the first training step would fail.

`fit_to_cluster` writes the cluster into the config, with the fewest rollout engines
that leave a trainer whose data-parallel size divides the step, when the experiment
leaves the engine count open (``model.inference_engine_num`` unset), and refuses the
shape in one line naming the fix when it does not. Trinity's own validator decides
every split; tunedsl only counts data-parallel ranks as verl does
(``get_data_parallel_size`` in ``verl/workers/engine/*/transformer_impl.py``).
"""

from __future__ import annotations

import copy
import re
import shutil
from collections.abc import Mapping
from typing import Any

import attrs

from ...config.nested import get_path, set_path
from ...dsl.trinity_fields import ROLLOUT_MODEL
from ...errors import ConfigError
from ...wording import said
from .unattended import unattended

_SHAPE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


@attrs.frozen
class Cluster:
    """A cluster shape: ``nodes`` nodes of ``gpus_per_node`` GPUs each."""

    nodes: int
    gpus_per_node: int

    def __str__(self) -> str:
        return f"{counted(self.nodes, 'node')} x {counted(self.gpus_per_node, 'GPU')}"


def counted(number: int, noun: str) -> str:
    """``1 GPU``, ``2 GPUs``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


#: The largest cluster a run is fitted to: a node of more GPUs than any sold, or more GPUs
#: than the largest clusters hold, is a typo (and each engine count up to the cluster's
#: GPUs is tried against Trinity's validator, so a shape of a billion GPUs would hang).
MAX_GPUS_PER_NODE, MAX_GPUS = 64, 16384


def parse_cluster(text: str) -> Cluster:
    """``NODESxGPUS`` (``1x8``, ``2x8``) as a `Cluster`."""
    label = said("--cluster ", "cluster=")
    match = _SHAPE.match(text)
    if match is None or int(match[1]) < 1 or int(match[2]) < 1:
        raise ConfigError(f"{label}{text!r}: give nodes x GPUs per node, such as 1x8 or 2x8")
    nodes, gpus = int(match[1]), int(match[2])
    if gpus > MAX_GPUS_PER_NODE or nodes * gpus > MAX_GPUS:
        raise ConfigError(f"{label}{text!r}: {nodes * gpus} GPUs on nodes of {gpus} is more "
                          f"than tunedsl fits a run to (at most {MAX_GPUS_PER_NODE} GPUs a "
                          f"node and {MAX_GPUS} in all); give the cluster's real shape, such "
                          f"as 1x8 or 2x8")
    return Cluster(nodes, gpus)


def shape_as_table(trinity: Mapping[str, Any]) -> Mapping[str, Any]:
    """A ``[trinity]`` table whose ``cluster`` is written as a shape (``cluster = "1x8"``,
    as ``--cluster`` takes it) with that shape as Trinity's table (``node_num``,
    ``gpu_per_node``); any other table as it is.

    Raises:
        ConfigError: a ``cluster`` text that is no shape.
    """
    shape = trinity.get("cluster")
    if not isinstance(shape, str):
        return trinity
    match = _SHAPE.match(shape)
    if match is None:
        raise ConfigError(f"trinity.cluster = {shape!r}: give nodes x GPUs per node, such as "
                          f"\"1x8\", or Trinity's table: [trinity.cluster] node_num = 1, "
                          f"gpu_per_node = 8")
    return {**trinity, "cluster": {"node_num": int(match[1]), "gpu_per_node": int(match[2])}}


def visible_gpus() -> int:
    """GPUs this machine shows (without importing torch when no driver is installed)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    import torch

    return torch.cuda.device_count()


def default_cluster(config: dict[str, Any], needed: int) -> Cluster:
    """The cluster ``check`` and ``config`` fit a config to when given none: the one the
    config names, else this machine's GPUs on one node when it has the ``needed`` GPUs (a
    run here starts a local Ray of them), else one node of the ``needed`` GPUs (the
    smallest Trinity accepts: a machine with fewer could not run it)."""
    gpus = visible_gpus()
    return explicit_cluster(config) or Cluster(1, gpus if gpus >= needed else needed)


def ray_cluster() -> Cluster:
    """The running Ray cluster's shape for Trinity: its alive nodes that have GPUs, and
    their GPUs each.

    Trinity's own reading (``_set_cluster_info`` in its cluster validator) counts every
    alive node, a GPU-less head (KubeRay's) too, and the first GPU node's GPUs: a CPU head
    and two 8-GPU nodes become 3 x 8, placement groups that never fit, and a run that
    waits on them forever (``await self.pg.ready()`` in ``common/models/allocator.py``).
    tunedsl writes the shape into the config instead (`fit_to_cluster`), so Trinity never
    reads it from Ray.

    Raises:
        ConfigError: no node has a GPU, or the GPU nodes differ in size (Trinity sizes its
            trainer in whole nodes of ``cluster.gpu_per_node`` GPUs).
    """
    import ray

    gpus = [int(node["Resources"]["GPU"]) for node in ray.nodes()
            if node["alive"] and node.get("Resources", {}).get("GPU")]
    if not gpus:
        raise ConfigError("cluster: the Ray cluster has no node with a GPU; add GPU nodes, "
                          "or train through Tinker")
    if len(set(gpus)) > 1:
        sizes = ", ".join(str(Cluster(gpus.count(size), size))
                          for size in sorted(set(gpus), reverse=True))
        raise ConfigError(
            f"cluster: the Ray cluster's GPU nodes differ in size ({sizes}), and Trinity "
            f"splits a cluster as nodes of one size; run on nodes of one size, or name the "
            f"part to use: " + said(
                f"--set trinity.cluster.node_num={len(gpus)} --set "
                f"trinity.cluster.gpu_per_node={min(gpus)}",
                f"overrides=['trinity.cluster.node_num={len(gpus)}', "
                f"'trinity.cluster.gpu_per_node={min(gpus)}']"))
    return Cluster(len(gpus), gpus[0])


def explicit_cluster(config: dict[str, Any]) -> Cluster | None:
    """The cluster a config names itself (``cluster.node_num`` and ``gpu_per_node``); a
    count that is not a whole number of 1 or more is refused (it was replaced by a cluster
    shape of tunedsl's choosing, as if unset)."""
    cluster = config.get("cluster") or {}
    for key in ("node_num", "gpu_per_node"):
        value = cluster.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ConfigError(f"trinity.cluster.{key} = {value!r}: give a whole number of "
                              f"{'nodes' if key == 'node_num' else 'GPUs per node'}, 1 or "
                              f"more (or leave it out: the run reads the cluster from Ray)")
    if cluster.get("node_num") and cluster.get("gpu_per_node"):
        return Cluster(int(cluster["node_num"]), int(cluster["gpu_per_node"]))
    return None


@attrs.frozen(kw_only=True)
class Layout:
    """How Trinity splits a cluster for a config, and what verl makes of each step."""

    cluster: Cluster
    mode: str
    engines: int
    explorer_gpus: int
    trainer_gpus: int
    data_parallel: int
    experiences: int

    @property
    def trains(self) -> bool:
        """Whether the run has a trainer (Trinity's modes ``explore``, ``bench`` and
        ``serve`` have none)."""
        return self.mode in ("both", "colocate", "train")

    @property
    def divides(self) -> bool:
        """Whether verl can split a step's experiences evenly over its ranks."""
        return not self.trains or (self.experiences >= self.data_parallel and
                                   self.experiences % self.data_parallel == 0)

    def line(self) -> str:
        """The report line."""
        engines = counted(self.engines, "rollout engine")
        if not self.trains:
            return (f"trinity: on {self.cluster}, {engines} on "
                    f"{counted(self.explorer_gpus, 'GPU')} (mode {self.mode}: no trainer)")
        where = (f"{engines} and the trainer share the GPU (mode colocate)"
                 if self.mode == "colocate" else
                 f"the trainer on {counted(self.trainer_gpus, 'GPU')} (mode train: no "
                 f"explorer)" if self.mode == "train" else
                 f"{engines} on {counted(self.explorer_gpus, 'GPU')}, the trainer on "
                 f"{counted(self.trainer_gpus, 'GPU')}")
        split = (f"verl trains each step's {self.experiences} experiences on one "
                 f"data-parallel rank" if self.data_parallel == 1 else
                 f"verl splits each step's {self.experiences} experiences evenly, "
                 f"{self.experiences // self.data_parallel} to each of its "
                 f"{self.data_parallel} data-parallel ranks")
        return f"trinity: on {self.cluster}, {where}; {split}"


def _data_parallel(loaded: Any, trainer_gpus: int) -> int:
    """The trainer's data-parallel size, as verl's engine computes it."""
    trainer = loaded.trainer
    if trainer.trainer_strategy.startswith("megatron"):
        megatron = trainer.megatron
        model_parallel = (megatron.tensor_model_parallel_size *
                          megatron.pipeline_model_parallel_size * megatron.context_parallel_size)
    else:
        model_parallel = trainer.ulysses_sequence_parallel_size
    return max(trainer_gpus // max(model_parallel, 1), 1)


def layout_of(prepared: Any, cluster: Cluster, engines: int, experiences: int) -> Layout:
    """Trinity's split of ``cluster`` for ``prepared`` with ``engines`` rollout engines;
    raises ValueError with Trinity's reason when it refuses."""
    from trinity.common.config_validator import RayClusterConfigValidator

    trial = copy.deepcopy(prepared)
    trial.cluster.node_num, trial.cluster.gpu_per_node = cluster.nodes, cluster.gpus_per_node
    trial.explorer.rollout_model.engine_num = engines
    if cluster.nodes * cluster.gpus_per_node == 1 and trial.mode == "both":
        trial.mode = "colocate"  # as Trinity sizes a one-GPU Ray cluster itself
    with unattended():
        RayClusterConfigValidator().validate(trial)
    trainer = trial.cluster.trainer_gpu_num
    return Layout(cluster=cluster, mode=trial.mode, engines=engines,
                  explorer_gpus=trial.cluster.explorer_gpu_num, trainer_gpus=trainer,
                  data_parallel=_data_parallel(trial, trainer), experiences=experiences)


def _candidates(prepared: Any, cluster: Cluster, fixed: int | None,
                experiences: int) -> tuple[list[Layout], str | None]:
    """The layouts Trinity accepts, fewest engines first (only ``fixed`` when set), up to the
    first whose step verl divides (no later one is chosen), and Trinity's reason for
    refusing the first count it refused."""
    counts = [fixed] if fixed else range(1, cluster.nodes * cluster.gpus_per_node + 1)
    layouts, refusal = [], None
    for engines in counts:
        try:
            layouts.append(layout_of(prepared, cluster, engines, experiences))
        except ValueError as exc:
            refusal = refusal or " ".join(str(exc).split())
            continue
        if layouts[-1].divides:
            break
    return layouts, refusal


def _written(config: dict[str, Any], layout: Layout) -> dict[str, Any]:
    config = copy.deepcopy(config)
    config["cluster"] = {**(config.get("cluster") or {}), "node_num": layout.cluster.nodes,
                         "gpu_per_node": layout.cluster.gpus_per_node}
    set_path(config, f"{ROLLOUT_MODEL}.engine_num", layout.engines)
    if layout.mode != config.get("mode", "both"):
        config["mode"] = layout.mode
    return config


def fit_to_cluster(config: dict[str, Any], cluster: Cluster, prepared: Any, *,
                   needed: int) -> tuple[dict[str, Any], Layout]:
    """``config`` for ``cluster`` (its size, and the engine count when the config leaves it
    open), with the layout Trinity and verl will use; see the module docstring.

    Args:
        config: The Trinity config (a dict).
        cluster: The cluster's shape.
        prepared: Trinity's loaded ``Config`` for ``config``, through the validators that
            run before the cluster's (they fill in what it reads).
        needed: The fewest GPUs on one node Trinity accepts the config with (for the
            message when it accepts none of ``cluster``'s splits).

    Raises:
        ConfigError: Trinity refuses every split, or verl could not divide any step.
    """
    found, fixed = get_path(config, f"{ROLLOUT_MODEL}.engine_num")
    fixed = fixed if found else None
    experiences = prepared.buffer.train_batch_size or \
        prepared.buffer.batch_size * prepared.algorithm.repeat_times
    layouts, refusal = _candidates(prepared, cluster, fixed, experiences)
    if not layouts:
        raise ConfigError(f"trinity: Trinity-RFT rejects the generated config: {refusal} (the "
                          f"config needs {needed} GPUs on one node as Trinity counts them)")
    fitting = [layout for layout in layouts if layout.divides]
    if fitting:
        return _written(config, fitting[0]), fitting[0]
    raise ConfigError(_undividable(layouts[0], fixed, prepared, cluster))


def _undividable(layout: Layout, fixed: int | None, prepared: Any, cluster: Cluster) -> str:
    """The one line for a step verl could not split, naming the fix."""
    head = (f"cluster: on {cluster} with {counted(layout.engines, 'rollout engine')} the "
            f"trainer gets {counted(layout.trainer_gpus, 'GPU')}, and verl splits each step's "
            f"{layout.experiences} experiences evenly over its "
            f"{counted(layout.data_parallel, 'data-parallel rank')}, which "
            f"{layout.experiences} does not allow")
    if fixed is not None:
        free, _ = _candidates(prepared, cluster, None, layout.experiences)
        best = next((other for other in free if other.divides), None)
        if best is not None:
            return (f"{head}; leave model.inference_engine_num unset (tunedsl then runs "
                    f"{best.engines} engines and a {best.trainer_gpus}-GPU trainer), or make "
                    f"algorithm.batch_size x group_size a multiple of {layout.data_parallel}")
    return (f"{head}, for any number of rollout engines; make algorithm.batch_size x "
            f"group_size a multiple of the trainer's GPU count, or give the run a cluster "
            f"it divides (trinity.cluster.gpu_per_node)")


#: Seconds the run waits for each node to say whether it sees the run directory.
SEEN_TIMEOUT = 120
#: What several nodes share through the run directory, for the note and the refusal.
SHARED_BY = ("logs, checkpoints and resume: Trinity's trainer writes checkpoints on its node, "
             "and its explorer and synchronizer read them and the run's state files from "
             "theirs")


def shared_note(nodes: int) -> str:
    """The note for a run on ``nodes`` nodes (more than one)."""
    return (f"trinity: the run spans {counted(nodes, 'node')}: its run directory "
            f"(checkpoint_root_dir) must be on a filesystem every node shares, for "
            f"{SHARED_BY}; run checks each node sees it before it starts")


def shared_run_dir(run_dir: Any) -> list[str]:
    """Check that every alive Ray node with GPUs sees ``run_dir`` (made by this driver), by
    a task placed on each node reading a file written here; return the report line (none on
    a cluster of the driver's node alone).

    Raises:
        ConfigError: a node does not see the file (naming it and the fix).
    """
    import os
    import secrets

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    nodes = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()
             if node["alive"] and node.get("Resources", {}).get("GPU")}
    if not set(nodes) - {here}:
        return []
    token = secrets.token_hex(16)
    path = os.path.join(str(run_dir), f".tunedsl-seen-{token[:8]}")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(token)
    def sees(path: str, token: str) -> bool:  # local: pickled by value, not imported there
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read() == token
        except OSError:
            return False

    remote = ray.remote(num_cpus=0, max_retries=0)(sees)
    try:
        asked = {node: remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node, soft=False)).remote(path, token) for node in nodes}
        ready, _ = ray.wait(list(asked.values()), num_returns=len(asked),
                            timeout=SEEN_TIMEOUT)
        answers = {node: ray.get(ref) if ref in ready else None for node, ref in asked.items()}
    finally:
        os.remove(path)
    blind = sorted(nodes[node] for node, seen in answers.items() if seen is False)
    if blind:
        raise ConfigError(
            f"cluster: the run directory {run_dir} is not on a filesystem the node(s) at "
            f"{', '.join(blind)} see, and a run on several nodes shares it for {SHARED_BY}; "
            f"set checkpoint_root_dir to a folder on a filesystem every node mounts at the "
            f"same path (NFS, a shared volume)")
    silent = sorted(nodes[node] for node, seen in answers.items() if seen is None)
    if silent:
        raise ConfigError(
            f"cluster: the node(s) at {', '.join(silent)} did not say within {SEEN_TIMEOUT} s "
            f"whether they see the run directory {run_dir}; check the Ray cluster (ray "
            f"status) and that checkpoint_root_dir is on a filesystem every node mounts")
    count = len(set(nodes) | {here})
    return [f"cluster: the run directory is on a filesystem all {count} nodes see, as a run "
            f"on several nodes needs for {SHARED_BY} (each GPU node read a file the driver "
            f"wrote there)"]
