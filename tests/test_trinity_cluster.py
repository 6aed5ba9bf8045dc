"""The GPU split of a Trinity run on common clusters: Trinity-RFT's own cluster validator
decides it, and verl's own batch balancer and data dispatch must accept each step's
experiences over the trainer's data-parallel ranks (``verl/utils/seqlen_balancing.py``,
``verl/protocol.py``): tunedsl fits the rollout engines so they do, or refuses in one line."""

from __future__ import annotations

import pytest

pytest.importorskip("trinity.common.config")

import tunedsl  # noqa: E402
from tunedsl.backends.trinity.cluster import Cluster, parse_cluster  # noqa: E402
from tunedsl.backends.trinity.config import trinity_config  # noqa: E402
from tunedsl.backends.trinity.validate import sized_for  # noqa: E402
from tunedsl.errors import ConfigError  # noqa: E402

from .cli_support import cli  # noqa: E402
from .trinity_support import checked  # noqa: E402

EXAMPLE = "examples.math_agent.experiment:MathAgent"  # 32 tasks x 8 rollouts a step

#: cluster -> (rollout engines, trainer GPUs, mode) tunedsl picks for the example.
SPLITS = {"1x1": (1, 1, "colocate"), "1x2": (1, 1, "both"), "1x4": (2, 2, "both"),
          "1x8": (4, 4, "both"), "2x8": (8, 8, "both")}


def verl_splits(experiences, ranks):
    """verl's balancer and its dispatch over ``ranks`` data-parallel ranks, on a step of
    ``experiences`` sequences; raises AssertionError where verl's trainer would."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions

    lengths = [100 + 7 * i for i in range(experiences)]
    parts = get_seqlen_balanced_partitions(lengths, k_partitions=ranks, equal_size=True)
    batch = DataProto.from_dict({"attention_mask": torch.ones(experiences, 4)},
                                non_tensors={"uid": np.arange(experiences)})
    return [len(part) for part in parts], [len(chunk) for chunk in batch.chunk(ranks)]


@pytest.mark.parametrize("shape", sorted(SPLITS))
def test_the_example_gets_a_split_verl_can_train_on(shape, tmp_path):
    """On each common cluster Trinity accepts the written config with the split tunedsl
    chose, and verl's balancer and dispatch divide each step evenly."""
    graph = tunedsl.load_experiment(EXAMPLE)
    config, layout = sized_for(trinity_config(graph), parse_cluster(shape))
    done = checked(config, tmp_path)
    engines, trainer_gpus, mode = SPLITS[shape]
    assert (done.explorer.rollout_model.engine_num, done.cluster.trainer_gpu_num,
            done.mode) == (engines, trainer_gpus, mode)
    assert (layout.engines, layout.trainer_gpus, layout.data_parallel) == \
        (engines, trainer_gpus, trainer_gpus)
    per_rank = done.buffer.train_batch_size // trainer_gpus
    assert verl_splits(done.buffer.train_batch_size, trainer_gpus) == \
        ([per_rank] * trainer_gpus, [per_rank] * trainer_gpus)


def test_one_engine_on_eight_gpus_would_fail_verl_and_is_refused(tmp_path):
    """With the engine count fixed at 1, Trinity gives the trainer 7 GPUs: verl's own
    balancer refuses 256 experiences over 7 ranks at the first step; tunedsl refuses the
    shape before anything starts, naming the split that works."""
    with pytest.raises(AssertionError, match="256 % 7 != 0"):
        verl_splits(256, 7)
    graph = tunedsl.load_experiment(EXAMPLE, overrides=["model.inference_engine_num=1"])
    with pytest.raises(ConfigError) as info:
        sized_for(trinity_config(graph), Cluster(1, 8))
    assert str(info.value) == (
        "cluster: on 1 node x 8 GPUs with 1 rollout engine the trainer gets 7 GPUs, and verl "
        "splits each step's 256 experiences evenly over its 7 data-parallel ranks, which 256 "
        "does not allow; leave model.inference_engine_num unset (tunedsl then runs 4 engines "
        "and a 4-GPU trainer), or make algorithm.batch_size x group_size a multiple of 7")


def test_a_step_no_split_divides_is_refused_naming_the_fix():
    """35 experiences a step and engines of 4 GPUs on a 6-GPU node: one engine leaves a
    2-GPU trainer, which 35 does not divide, and Trinity refuses two engines."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=["algorithm.batch_size=7",
                                                        "algorithm.group_size=5"])
    config = trinity_config(graph)
    config["explorer"]["rollout_model"]["tensor_parallel_size"] = 4
    with pytest.raises(ConfigError) as info:
        sized_for(config, Cluster(1, 6))
    assert str(info.value) == (
        "cluster: on 1 node x 6 GPUs with 1 rollout engine the trainer gets 2 GPUs, and verl "
        "splits each step's 35 experiences evenly over its 2 data-parallel ranks, which 35 "
        "does not allow, for any number of rollout engines; make algorithm.batch_size x "
        "group_size a multiple of the trainer's GPU count, or give the run a cluster it "
        "divides (trinity.cluster.gpu_per_node)")


def test_check_on_two_gpus_refuses_a_two_gpu_engine_with_trinitys_words(tmp_path):
    """A tensor-parallel engine of 2 GPUs leaves a 1 x 2 cluster no trainer GPU: Trinity's
    own refusal, and the count it needs."""
    done = cli("check", EXAMPLE, "--backend", "trinity", "--cluster", "1x2",
               "--set", "trinity.explorer.rollout_model.tensor_parallel_size=2")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "Error: trinity: Trinity-RFT rejects the generated config: Not enough GPUs for "
        "trainer. Explorer requires 2 GPUs, but total available GPUs are 2. (the config "
        "needs 3 GPUs on one node as Trinity counts them)")


def test_check_on_an_eight_gpu_node_names_its_split():
    """tunedsl check --cluster 1x8 validates the split a run on that node gets."""
    done = cli("check", EXAMPLE, "--backend", "trinity", "--cluster", "1x8")
    assert done.returncode == 0, done.stderr
    assert "ok  trinity: on 1 node x 8 GPUs, 4 rollout engines on 4 GPUs, the trainer on 4 " \
           "GPUs; verl splits each step's 256 experiences evenly, 64 to each of its 4 " \
           "data-parallel ranks" in done.stdout.splitlines()


@pytest.mark.parametrize("command", ["check", "config"])
@pytest.mark.parametrize("shape", ["8", ""])
def test_a_cluster_that_is_not_nodes_x_gpus_is_one_line(command, shape):
    """``--cluster ''`` (a script's unset shape) was ignored by config, which fitted the run
    to this machine, and refused by check in the Python API's words (sweep 29 A-W6)."""
    done = cli(command, EXAMPLE, "--cluster", shape)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"Error: --cluster {shape!r}: give nodes x GPUs per node, such as 1x8 or 2x8"]


def test_a_run_sizes_itself_to_the_ray_cluster_it_joins(ray_on_this_machine):
    """The shape Trinity would read from Ray: alive nodes, the first GPU node's GPUs."""
    import ray

    from tunedsl.backends.trinity.cluster import ray_cluster

    with ray_on_this_machine():
        # "local": an instance of its own even while another test's runs (ray.init() would
        # join that one, and refuses to join with resources given: CI, 3.12).
        ray.init("local", num_cpus=1, num_gpus=8, include_dashboard=False,
                 log_to_driver=False)
        try:
            assert ray_cluster() == Cluster(1, 8)
        finally:
            ray.shutdown()


def written_yaml(*args):
    """The YAML ``tunedsl config`` prints for the example, as a dict."""
    import yaml

    done = cli("config", EXAMPLE, *args)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_the_step_bounds_are_for_the_engines_the_fit_chose():
    """A step of 256 rollouts runs in waves of engine_num x 16 runners: one engine makes 16
    waves of an hour (and 60 s), the 4 engines a 1 x 8 node gets make 4. The bounds are
    written for the 4, as the run launches them."""
    one = written_yaml("--set", "model.inference_engine_num=1", "--cluster", "1x2")
    four = written_yaml("--cluster", "1x8")
    assert (one["explorer"]["rollout_model"]["engine_num"],
            one["explorer"]["max_timeout"]) == (1, 16 * 3660)
    assert (four["explorer"]["rollout_model"]["engine_num"],
            four["explorer"]["max_timeout"]) == (4, 14_640)
    assert four["buffer"]["trainer_input"]["experience_buffer"]["max_read_timeout"] == \
        2 * 3 * 14_640 + 1800


@pytest.mark.parametrize("shape", ["1x8", "1x4", "2x8"])
def test_config_writes_the_split_of_the_cluster_the_config_names(shape, tmp_path):
    """With trinity.cluster set, `tunedsl config` writes the engines a run on it launches
    (not one engine: a 7- or 3-GPU trainer verl cannot split 256 experiences over, or a
    config Trinity refuses on 2 x 8), and Trinity accepts it with that split."""
    nodes, gpus = shape.split("x")
    written = written_yaml("--set", f"trinity.cluster.node_num={nodes}",
                           "--set", f"trinity.cluster.gpu_per_node={gpus}")
    engines, trainer_gpus, mode = SPLITS[shape]
    done = checked(written, tmp_path)
    assert (done.explorer.rollout_model.engine_num, done.cluster.trainer_gpu_num,
            done.mode) == (engines, trainer_gpus, mode)
    assert written["explorer"]["max_timeout"] == 58_560 // engines


def test_check_on_several_nodes_says_the_run_directory_must_be_shared():
    """On 2 x 8 the trainer writes checkpoints on its node and the explorer reads them on
    another: check says so (a run checks it on the Ray cluster: tests/test_trinity_nodes.py)."""
    done = cli("check", EXAMPLE, "--backend", "trinity", "--cluster", "2x8")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "ok  trinity: on 2 nodes x 8 GPUs, 8 rollout engines on 8 GPUs, the trainer on 8 " \
           "GPUs; verl splits each step's 256 experiences evenly, 32 to each of its 8 " \
           "data-parallel ranks" in lines
    assert "note  trinity: the run spans 2 nodes: its run directory (checkpoint_root_dir) " \
           "must be on a filesystem every node shares, for logs, checkpoints and resume: " \
           "Trinity's trainer writes checkpoints on its node, and its explorer and " \
           "synchronizer read them and the run's state files from theirs; run checks each " \
           "node sees it before it starts" in lines
    assert not any("spans" in line for line in cli(
        "check", EXAMPLE, "--backend", "trinity", "--cluster", "1x8").stdout.splitlines())


@pytest.mark.parametrize("gpus, split", [
    (2, "on 1 node x 3 GPUs, 1 rollout engine on 2 GPUs, the trainer on 1 GPU; verl trains "
        "each step's 256 experiences on one data-parallel rank"),
    (8, "on 1 node x 8 GPUs, 2 rollout engines on 4 GPUs, the trainer on 4 GPUs; verl splits "
        "each step's 256 experiences evenly, 64 to each of its 4 data-parallel ranks")])
def test_check_validates_on_this_machines_gpus_only_when_they_are_enough(gpus, split,
                                                                          monkeypatch):
    """An engine of 2 GPUs needs 3: on a 2-GPU machine check validates the smallest cluster
    that fits (a run could not start here), not the 2 GPUs Trinity then refuses; on an
    8-GPU machine it validates the 8 a run here gets."""
    from tunedsl.backends.trinity import cluster

    monkeypatch.setattr(cluster, "visible_gpus", lambda: gpus)
    done = cli("check", EXAMPLE, "--backend", "trinity",
               "--set", "trinity.explorer.rollout_model.tensor_parallel_size=2")
    assert done.returncode == 0, done.stderr
    assert f"ok  trinity: {split}" in done.stdout.splitlines()


def test_a_trinity_table_may_give_the_cluster_as_a_shape():
    """``[trinity] cluster = "1x8"`` (``--help`` says the cluster defaults to the config's
    trinity.cluster, in the shape --cluster takes) failed with Trinity-RFT's merge error;
    it is read as --cluster 1x8 is, and text that is no shape is refused in one line."""
    shaped = written_yaml("--set", 'trinity.cluster="1x8"')
    given = written_yaml("--cluster", "1x8")
    del shaped["name"], given["name"]  # each run's name holds the time it was written
    assert shaped == given
    assert shaped["cluster"]["node_num"] == 1 and shaped["cluster"]["gpu_per_node"] == 8
    done = cli("config", EXAMPLE, "--set", 'trinity.cluster="eight"')
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "Error: trinity.cluster = 'eight': give nodes x GPUs per node, such as \"1x8\", or "
        "Trinity's table: [trinity.cluster] node_num = 1, gpu_per_node = 8"]
