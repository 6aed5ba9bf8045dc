"""The `[gpu]` extra's transformers cap is the one Trinity-RFT 0.6.0's source needs.

Trinity's Qwen3.5 patch (``trinity/common/patch/qwen3_5.py``, loaded on every trainer
worker when the trained model's type is ``qwen3_5`` or ``qwen3_5_moe``:
``trinity/trainer/verl_legacy/monkey_patch.py``) imports ``Qwen3_5CausalLMOutputWithPast``
and ``Qwen3_5ModelOutputWithPast`` from transformers' ``modeling_qwen3_5``: 5.22.0 defines
both, 5.23.0 neither. The CPU tests run a newer transformers than the cap (the `[gpu]`
extra alone carries it), so this checks the side the installed version is on: inside the
cap the patch imports, outside it fails on that class, as README "GPU install" says.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytest.importorskip("trinity")

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def gpu_requirement(name):
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    [found] = [Requirement(line) for line in extras["gpu"] if Requirement(line).name == name]
    return found


def test_the_gpu_extras_transformers_cap_is_where_trinitys_qwen35_patch_stops_importing():
    requirement = gpu_requirement("transformers")
    assert str(requirement.specifier) == "<5.23,>=5.12.1"
    installed = importlib.metadata.version("transformers")
    try:
        import trinity.common.patch.qwen3_5  # noqa: F401
    except ImportError as exc:
        imported, error = False, str(exc)
    else:
        imported, error = True, ""
    if requirement.specifier.contains(installed, prereleases=True):
        assert imported, f"transformers {installed} is inside the cap: {error}"
    else:
        assert not imported, f"transformers {installed} is outside the cap yet the patch imports"
        assert error.startswith("cannot import name 'Qwen3_5CausalLMOutputWithPast' from "
                                "'transformers.models.qwen3_5.modeling_qwen3_5'")
