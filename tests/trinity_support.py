"""Shared by the tests that have the real Trinity-RFT validate tunedsl's YAML."""

from __future__ import annotations

from pathlib import Path

from trinity.common.config import load_config

from tunedsl.backends.trinity.config import to_yaml, trinity_config
from tunedsl.backends.trinity.validate import gpus_needed


def validate(graph, folder: Path, name: str | None = None, gpus: int | None = None):
    """Write the graph's YAML with a CPU-friendly cluster size and a checkpoint root in
    ``folder``; return Trinity's loaded and checked Config."""
    config = trinity_config(graph, name=name)
    config["cluster"] = {"node_num": 1, "gpu_per_node": gpus or gpus_needed(config)}
    config["checkpoint_root_dir"] = str(Path(folder) / "ckpt")
    path = Path(folder) / "config.yaml"
    path.write_text(to_yaml(config))
    return load_config(str(path)).check_and_update()
