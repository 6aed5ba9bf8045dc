"""A benchmark's run in a fresh interpreter: the script's own ``--worker`` mode, its result
read back from the JSON file it writes (a run's imports and memory never leak into the
next one's measurement)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_worker(script: str, tag: str, workdir: Path, arguments: list[str],
               threads: int) -> dict[str, Any]:
    """``python SCRIPT --worker ... --workdir WORKDIR/TAG --out WORKDIR/TAG.json`` with
    ``arguments`` (its log in ``WORKDIR/TAG.log``), offline and on ``threads`` threads (0:
    torch's default); the JSON it wrote, or a RuntimeError with the log's tail."""
    out, log = workdir / f"{tag}.json", workdir / f"{tag}.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")])), "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "MPLBACKEND": "Agg"}
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    command = [sys.executable, str(Path(script).resolve()), *arguments,
               "--workdir", str(workdir / tag), "--out", str(out), "--threads", str(threads)]
    with log.open("w") as handle:
        code = subprocess.run(command, cwd=ROOT, env=env, stdout=handle,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    if code != 0 or not out.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"{tag} failed with exit {code}:\n{tail}")
    return json.loads(out.read_text())


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """The hidden options `run_worker` hands a script's worker mode (``--worker`` names the
    run, ``--model`` its model folder): each script adds its own beside them."""
    for name in ("--worker", "--model", "--workdir", "--out"):
        parser.add_argument(name, help=argparse.SUPPRESS)
