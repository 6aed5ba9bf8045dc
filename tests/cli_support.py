"""Shared by the tests that read what the command line prints: `python -m tunedsl` run in a
subprocess from the repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "tunedsl", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
