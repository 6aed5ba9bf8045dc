"""Each backend's checks over the graph: listed, every problem at once, before any model.

`LOCAL_CHECKS` and `TRINITY_CHECKS` are lists of small functions over the experiment graph
(as `GRAPH_CHECKS` are); ``tunedsl check --backend B``, ``tunedsl run`` and the backends
themselves run them before a model is loaded or Ray is asked for anything.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tunedsl
from tunedsl.api import backend_checks, check
from tunedsl.backends.local.checks import LOCAL_CHECKS
from tunedsl.backends.trinity.checks import LORA_ON_TRINITY, TRINITY_CHECKS
from tunedsl.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
ARITH = "examples.arith.experiment:Arith"
PARSER = ("model.reasoning_parser = 'nope': the local backend reads deepseek_r1 and qwen3 "
          "(as vLLM's parsers of those names do); use one of them, or --backend trinity")
ALGORITHM = ("algorithm.algorithm_type = 'ppo': the local backend runs grpo and "
             "multi_step_grpo; use --backend trinity for the others")
#: A model folder that does not exist: a command that tried to load it would fail there.
NO_MODEL = ("--set", "model.model_path=/nonexistent/tunedsl-model",
            "--set", "model.reasoning_parser=nope", "--set", "algorithm.algorithm_type=ppo")


def tunedsl_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tunedsl", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", [("run", ARITH, "--backend", "local", "--no-progress"),
                                     ("check", ARITH, "--backend", "local")])
def test_run_and_check_report_both_local_problems_before_any_model(command, tmp_path):
    """A bad reasoning parser and an algorithm the local backend lacks are both reported,
    exit 2, with the model never loaded (its folder does not even exist) and no run
    directory made."""
    done = tunedsl_cli(*command, *NO_MODEL, "--set", f"checkpoint_root_dir={tmp_path}")
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert (done.returncode, errors) == (2, [f"Error: {ALGORITHM}", f"Error: {PARSER}"])
    assert "Traceback" not in done.stderr
    assert not any(tmp_path.iterdir())


def test_check_defaults_to_the_backend_auto_picks():
    """Without --backend, check runs the checks of the backend run would choose (local on
    this machine) and says which."""
    graph = tunedsl.load_experiment(ARITH, overrides=["model.reasoning_parser=nope"])
    with pytest.raises(ConfigError) as caught:
        check(graph)
    assert caught.value.problems == (PARSER,)
    assert backend_checks("local") is LOCAL_CHECKS
    assert backend_checks("trinity") is TRINITY_CHECKS


def test_check_for_trinity_runs_trinitys_checks_not_the_local_ones():
    """LoRA is fine locally but refused for Trinity 0.6.0; 'ppo' is fine for Trinity."""
    graph = tunedsl.load_experiment(ARITH, overrides=["model.lora.rank=4",
                                                      "algorithm.algorithm_type=ppo"])
    with pytest.raises(ConfigError) as caught:
        check(graph, backend="trinity")
    assert caught.value.problems == (LORA_ON_TRINITY,)
    with pytest.raises(ConfigError) as caught:
        check(graph, backend="local")
    assert caught.value.problems == (ALGORITHM,)


def test_local_checks_list_every_problem_of_every_model():
    """Every check contributes its lines, auxiliary models' parsers included, in the
    list's order."""
    graph = tunedsl.load_experiment(ARITH, overrides=[
        "algorithm.algorithm_type=dapo", "model.reasoning_parser=r1",
        "auxiliary_models.judge.model_path=m", "auxiliary_models.judge.reasoning_parser=x",
        "tinker.rank=8"])
    lines = [line for check_fn in LOCAL_CHECKS for line in check_fn(graph)]
    assert [line.split(":")[0] for line in lines] == [
        "tinker", "algorithm.algorithm_type = 'dapo'", "model.reasoning_parser = 'r1'",
        "auxiliary_models.judge.reasoning_parser = 'x'"]
