"""The package passes ruff with the project's settings (``[tool.ruff]`` in pyproject.toml):
a lint finding fails the suite, so CI (which runs the suite) lints too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing_in_the_package():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "tunedsl"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


@pytest.mark.skipif(sys.version_info[:2] != (3, 11),
                    reason="types are checked against one Python, 3.11 (README's)")
def test_mypy_finds_nothing_in_the_package(tmp_path):
    """mypy over tunedsl/ with [tool.mypy]'s settings: the graph, the records and every
    function's annotations agree (the cache goes to a temporary folder, not the project)."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
