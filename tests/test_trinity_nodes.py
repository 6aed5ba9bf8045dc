"""A Trinity run on a Ray cluster of several nodes, for real: ``ray.cluster_utils.Cluster``
starts a raylet per node on this machine, each with its declared GPUs (a KubeRay-like head
with none, and two 8-GPU nodes). Trinity's own reading of the cluster counts every alive
node (``_set_cluster_info`` in ``trinity/common/config_validator.py``); tunedsl counts the
nodes that have GPUs, and checks that each sees the run directory. In a module of its own:
the cluster lives as long as the module's tests."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("trinity.common.config")
ray = pytest.importorskip("ray")

import tunedsl  # noqa: E402
from tunedsl.backends.trinity.cluster import Cluster, ray_cluster, shared_run_dir  # noqa: E402
from tunedsl.backends.trinity.config import trinity_config  # noqa: E402
from tunedsl.backends.trinity.validate import sized_for  # noqa: E402
from tunedsl.errors import ConfigError  # noqa: E402

from .trinity_support import checked  # noqa: E402

EXAMPLE = "examples.math_agent.experiment:MathAgent"  # 32 tasks x 8 rollouts a step


@pytest.fixture(scope="module")
def nodes(ray_on_this_machine):
    """A head node without GPUs and two nodes of 8 (declared) GPUs, this process its
    driver."""
    from ray.cluster_utils import Cluster as RayCluster

    with ray_on_this_machine():
        cluster = RayCluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "num_gpus": 0, "include_dashboard": False})
        try:
            for _ in range(2):
                cluster.add_node(num_cpus=1, num_gpus=8)
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, log_to_driver=False)
            try:
                yield cluster
            finally:
                ray.shutdown()
        finally:
            cluster.shutdown()


def test_a_head_without_gpus_is_not_counted_as_a_gpu_node(nodes, tmp_path):
    """Trinity would read 3 nodes x 8 GPUs (placement groups for 24 GPUs on 16: the run
    waits forever); tunedsl fits the run to the 2 GPU nodes and writes the shape, so
    Trinity's validator keeps it and splits 16 GPUs: 8 engines, an 8-GPU trainer."""
    config = trinity_config(tunedsl.load_experiment(EXAMPLE))
    own = copy.deepcopy(config)
    own["explorer"]["rollout_model"]["engine_num"] = 8
    (tmp_path / "own").mkdir()
    trinitys_own = checked(own, tmp_path / "own")  # no cluster given: Trinity asks Ray
    assert (trinitys_own.cluster.node_num, trinitys_own.cluster.gpu_per_node,
            trinitys_own.cluster.total_gpu_num) == (3, 8, 24)
    assert ray.cluster_resources()["GPU"] == 16

    assert ray_cluster() == Cluster(2, 8)
    fitted, layout = sized_for(config, ray_cluster())
    assert fitted["cluster"] == {"node_num": 2, "gpu_per_node": 8}
    done = checked(fitted, tmp_path)
    assert (done.cluster.node_num, done.cluster.gpu_per_node, done.cluster.trainer_gpu_num,
            done.explorer.rollout_model.engine_num) == (2, 8, 8, 8)
    assert (layout.engines, layout.trainer_gpus) == (8, 8)


def test_gpu_nodes_of_different_sizes_are_refused_in_one_line(nodes):
    """Trinity sizes the trainer in whole nodes of cluster.gpu_per_node GPUs: with nodes of
    8, 8 and 4 GPUs no one size is the cluster's, so the run names the fix."""
    node = nodes.add_node(num_cpus=1, num_gpus=4)
    try:
        nodes.wait_for_nodes()
        with pytest.raises(ConfigError) as info:
            ray_cluster()
    finally:
        nodes.remove_node(node)
    assert str(info.value) == (
        "cluster: the Ray cluster's GPU nodes differ in size (2 nodes x 8 GPUs, 1 node x 4 "
        "GPUs), and Trinity splits a cluster as nodes of one size; run on nodes of one size, "
        "or name the part to use: overrides=['trinity.cluster.node_num=3', "
        "'trinity.cluster.gpu_per_node=4']")


def test_each_gpu_node_is_asked_whether_it_sees_the_run_directory(nodes, tmp_path):
    """A task placed on each GPU node reads a file the driver wrote in the run directory
    (here every node shares this machine's filesystem), and the file is gone after."""
    assert shared_run_dir(tmp_path) == [
        "cluster: the run directory is on a filesystem all 3 nodes see, as a run on several "
        "nodes needs for logs, checkpoints and resume: Trinity's trainer writes checkpoints "
        "on its node, and its explorer and synchronizer read them and the run's state files "
        "from theirs (each GPU node read a file the driver wrote there)"]
    assert list(tmp_path.iterdir()) == []
