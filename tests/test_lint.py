"""The package passes ruff with the project's settings (``[tool.ruff]`` in pyproject.toml):
a lint finding fails the suite, so CI (which runs the suite) lints too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing_in_the_package():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "tunedsl"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
