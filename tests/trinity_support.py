"""Shared by the tests that have the real Trinity-RFT validate tunedsl's YAML, or that build
what a Trinity run leaves behind with Trinity's own writers."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from trinity.common.config import load_config

from tunedsl.backends.trinity.config import to_yaml, trinity_config
from tunedsl.backends.trinity.validate import gpus_needed


def checked(config: dict[str, Any], folder: Path):
    """Trinity's load and full validation of a config dict, its checkpoints in
    ``folder``."""
    config = {**config, "checkpoint_root_dir": str(Path(folder) / "ckpt")}
    path = Path(folder) / "config.yaml"
    path.write_text(to_yaml(config))
    return load_config(str(path)).check_and_update()


def validate(graph, folder: Path, name: str | None = None, gpus: int | None = None,
             rows: dict[str, int] | None = None):
    """Write the graph's YAML (with the preflight's ``rows``, if given) with a CPU-friendly
    cluster size and a checkpoint root in ``folder``; return Trinity's loaded and checked
    Config."""
    config = trinity_config(graph, name=name, rows=rows)
    config["cluster"] = {"node_num": 1, "gpu_per_node": gpus or gpus_needed(config)}
    return checked(config, folder)


def pipeline_store(run_dir: Path):
    """Where Trinity's experience pipeline saves its input by default: the SQLite store
    ``buffer/explorer_output.db`` (``buffer/pipelines/experience_pipeline.py``)."""
    from trinity.common.config import StorageConfig

    (Path(run_dir) / "buffer").mkdir(parents=True, exist_ok=True)
    return StorageConfig(name="pipeline_input", storage_type="sql", schema_type="experience",
                         path=f"sqlite:///{Path(run_dir) / 'buffer' / 'explorer_output.db'}",
                         wrap_in_ray=False)


def write_with_trinity(storage, items: list[Any]) -> None:
    """Write ``items`` with Trinity's buffer writer for ``storage`` (no Ray)."""
    from trinity.buffer import get_buffer_writer

    async def run() -> None:
        writer = get_buffer_writer(storage)
        await writer.acquire()
        await writer.write(items)
        await writer.release()

    asyncio.run(run())


#: Trinity's actor logger writing lines, then, given an error, what the explorer's and
#: trainer's loops log when a step raises (explorer/explorer.py, trainer/trainer.py), then
#: more lines.
LOG_AS_TRINITY = textwrap.dedent('''\
    import json, sys, traceback
    from trinity.utils.log import get_logger

    actor, before, error, after = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], \\
        json.loads(sys.argv[4])
    logger = get_logger(actor, in_ray_actor=True)
    for line in before:
        logger.info(line)
    if error:
        try:
            raise ValueError(error)
        except Exception:
            if actor == "explorer":
                logger.error(f"Error in Explorer: {traceback.format_exc()}")
            else:
                logger.error(f"Error in Trainer:\\n{traceback.format_exc()}")
    for line in after:
        logger.info(line)
''')


def log_as_trinity(log_dir: Path, actor: str, before: list[str], error: str = "",
                   after: list[str] = ()) -> None:
    """Append to ``log_dir/<actor>.log`` through Trinity's own actor logger, in a process
    whose ``TRINITY_LOG_DIR`` is set as Ray's runtime environment sets it."""
    subprocess.run([sys.executable, "-c", LOG_AS_TRINITY, actor, json.dumps(before), error,
                    json.dumps(list(after))], check=True, capture_output=True, timeout=120,
                   env={"TRINITY_LOG_DIR": str(log_dir), "PATH": "/usr/bin:/bin"})
