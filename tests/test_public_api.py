"""What ``import tunedsl`` gives: every name in ``__all__`` (``check`` and the exceptions
among them, so the Python API reaches what the CLI does), and nothing heavy or unneeded
loaded by the import itself: the names a declared experiment does not use are imported
on first use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tunedsl

REPO = Path(__file__).resolve().parents[1]

#: Never loaded by ``import tunedsl`` (README: "import tunedsl imports no heavy library").
NOT_ON_IMPORT = ("torch", "transformers", "datasets", "ray", "trinity", "openai", "asyncio",
                 "tunedsl.api", "tunedsl.evaluation.prompt_tuning", "tunedsl.evaluation.select")


def test_import_tunedsl_loads_neither_heavy_libraries_nor_the_commands():
    probe = (f"import json, sys, tunedsl; print(json.dumps([m for m in {NOT_ON_IMPORT!r} "
             f"if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, check=True)
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize("name", tunedsl.__all__)
def test_every_public_name_resolves_and_is_listed_by_dir(name):
    assert getattr(tunedsl, name) is not None
    assert name in dir(tunedsl)


def test_the_exceptions_and_check_are_the_librarys_own():
    from tunedsl.api import check
    from tunedsl.errors import ConfigError, RunError, TunedslError

    assert (tunedsl.check, tunedsl.ConfigError, tunedsl.RunError, tunedsl.TunedslError) == (
        check, ConfigError, RunError, TunedslError)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError) as info:
        tunedsl.no_such_name  # noqa: B018
    assert str(info.value) == "module 'tunedsl' has no attribute 'no_such_name'"


@pytest.mark.parametrize("call, arguments", [
    ("run", {}), ("tune", {}), ("evaluate", {"model": "m"}),
    ("tune_prompt", {"model": "m", "reflection_model": "r"}),
    ("select_model", {"candidate_models": ["m"]})])
def test_an_entry_point_called_where_an_event_loop_runs_says_to_use_a_thread(call, arguments):
    """In a notebook cell or an async function, asyncio's "cannot be called from a running
    event loop" (and a coroutine never awaited) named no tunedsl call and no way out; check
    runs its rollout in a thread of its own, so it works there."""
    import asyncio

    from tunedsl.errors import ConfigError

    async def inside():
        with pytest.raises(ConfigError) as caught:
            getattr(tunedsl, call)("examples.arith.experiment:Arith", **arguments)
        return str(caught.value)

    assert asyncio.run(inside()) == (
        f"tunedsl.{call}() runs its own event loop, so it cannot be called where one is "
        f"running (a notebook cell, an async function); there, run it in a thread: await "
        f"asyncio.to_thread(tunedsl.{call}, ...)")
