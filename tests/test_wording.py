"""One check, two readers: a message names an option as a flag on the command line and as
an argument in Python (`tunedsl.wording`). The command line's wording is pinned by the
error catalogue; here, the Python API's, for the same checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tunedsl
from tunedsl.backends.trinity.ray_head import free_port
from tunedsl.errors import ConfigError
from tunedsl.wording import OPTIONS, for_the_command_line, option, options, said

from .cli_support import cli
from .openai_server import OpenAIServer

ARITH = "examples.arith.experiment:Arith"
CLOSED_PORT = free_port()  # not port 1: as root, anything may listen there


@given(st.sampled_from(sorted(OPTIONS)), st.text())
def test_an_option_with_a_value_is_a_flag_and_its_value_or_an_argument_and_its_literal(
        name, value):
    flag, argument = OPTIONS[name]
    assert option(name, value) == f"{argument}={value!r}"
    with for_the_command_line():
        assert option(name, value) == f"{flag} {value}"
    assert option(name, value) == f"{argument}={value!r}"  # the audience is restored


def test_switches_numbers_paths_and_several_options():
    from pathlib import Path

    assert (option("resume"), option("perfect_reward", 2.0), option("candidates", Path("c"))) \
        == ("resume=True", "search.perfect_reward=2.0", "candidates='c'")
    assert options(("candidates", "c.jsonl"), "resume") == "candidates='c.jsonl', resume=True"
    with for_the_command_line():
        assert (option("resume"), option("perfect_reward", 2.0), option("output", Path("c"))) \
            == ("--resume", "--perfect-reward 2", "-o c")
        assert options(("candidates", "c.jsonl"), "resume") == "--candidates c.jsonl --resume"
        assert said("flag", "argument") == "flag"
    assert said("flag", "argument") == "argument"


def _refused(call) -> str:
    with pytest.raises(ConfigError) as caught:
        call()
    return str(caught.value)


def test_evaluate_names_its_arguments_where_eval_names_its_flags(tmp_path):
    """The same refusal of a results file without resume, from `tunedsl.evaluate` and from
    `tunedsl eval`."""
    results = tmp_path / "r.jsonl"
    with OpenAIServer() as server:
        model = f"m@{server.base_url}"
        tunedsl.evaluate(ARITH, model, output=results, limit=1, progress=False)
        python = _refused(lambda: tunedsl.evaluate(ARITH, model, output=results, limit=1,
                                                   progress=False))
        done = cli("eval", ARITH, "--base-url", server.base_url, "--model", "m", "-o",
                   results, "-n", "1", "--no-progress")
    assert python == (f"output={str(results)!r} already holds results; add resume=True to "
                      f"continue it, or choose another file")
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == (
        f"Error: -o {results} already holds results; add --resume to continue it, or choose "
        f"another file")


@pytest.mark.parametrize("call, message", [
    (lambda: tunedsl.tune_prompt(ARITH, model="m@http://127.0.0.1:9/v1",
                                 reflection_model="r@http://127.0.0.1:9/v1",
                                 search=tunedsl.PromptSearch(budget=0)),
     "search.budget=0: give a number of rollouts, at least one evaluation of the validation "
     "split"),
    (lambda: tunedsl.tune_prompt(ARITH, model="m@http://127.0.0.1:9/v1",
                                 reflection_model="r@http://127.0.0.1:9/v1",
                                 search=tunedsl.PromptSearch(perfect_reward=float("inf"))),
     "search.perfect_reward=inf: give the best reward your judge gives, a finite number (1 "
     "for a judge scoring 0 to 1)"),
    (lambda: tunedsl.tune_prompt(ARITH, model="m@http://127.0.0.1:9/v1",
                                 reflection_model="r@http://127.0.0.1:9/v1"),
     "give the text param(s) to tune with params=[NAME, ...] (the experiment's text params: "
     "none; set one in its params = {...})"),
    (lambda: tunedsl.tune_prompt(ARITH, model="m@http://127.0.0.1:9/v1",
                                 reflection_model="r@http://127.0.0.1:9/v1",
                                 search=tunedsl.PromptSearch(perfect_reward="1")),
     "search.perfect_reward='1': give a number, not a str"),
    (lambda: tunedsl.run(ARITH, from_good_checkpoint=True),
     "from_good_checkpoint=True chooses the checkpoint a resume starts from; give the run "
     "with resume=RUN_DIR too"),
    (lambda: tunedsl.run(ARITH, resume="no/such/run"),
     "resume='no/such/run': no such folder; give the run directory a run printed when it "
     "started"),
    (lambda: tunedsl.load_experiment(ARITH, overrides=["x"]),
     "overrides item 'x': expected KEY=VALUE, e.g. 'algorithm.group_size=8'"),
    (lambda: tunedsl.run(ARITH, backend="gpu"),
     "backend='gpu': choose one of auto, local, trinity"),
    (lambda: tunedsl.load_experiment(ARITH, overrides=["algorithm.group_size=eight"]),
     "overrides: invalid value @ algorithm.group_size: must be an integer (got 'eight')"),
    (lambda: tunedsl.load_experiment(ARITH, overrides=["nosuch=1"]),
     "overrides: extra fields found (nosuch) @ <top level>"),
    (lambda: tunedsl.check(ARITH, backend="local", cluster="bad"),
     "cluster='bad': give nodes x GPUs per node, such as 1x8 or 2x8"),
    (lambda: tunedsl.run(ARITH, backend="trinity", ray_address=f"127.0.0.1:{CLOSED_PORT}",
                         overrides=["trinity.cluster.node_num=1"]),
     f"ray_address='127.0.0.1:{CLOSED_PORT}': no Ray cluster answers there (Connection "
     f"refused); start one with 'ray start --head', or give its address"),
])
def test_the_python_api_names_arguments_not_flags(call, message):
    assert _refused(call) == message


def test_an_evaluated_model_with_lora_is_refused():
    """LoRA trains adapters; an evaluated model trains nothing (it was silently dropped)."""
    assert _refused(lambda: tunedsl.evaluate(
        ARITH, tunedsl.Model("m", base_url="http://127.0.0.1:9/v1", lora=tunedsl.LoRA()))) == (
        "model: Model(..., lora=...) trains adapters, and an evaluated model trains nothing; "
        "evaluate a run's global_step_N folder (its adapters merged), without lora")


@pytest.mark.parametrize("call, message", [
    (lambda: tunedsl.select_model(ARITH, ["a@http://127.0.0.1:9/v1", "b@http://127.0.0.1:9/v1"],
                                  bootstrap=tunedsl.Bootstrap(resamples=10**11)),
     "bootstrap.resamples=100000000000: give at most 1000000 (the default, 10000, is plenty)"),
    (lambda: tunedsl.select_model(ARITH, ["a@http://127.0.0.1:9/v1", tunedsl.Model(
        "b", base_url="http://127.0.0.1:9/v1", lora=tunedsl.LoRA())]),
     "candidate_models item 'b': Model(..., lora=...) trains adapters, and an evaluated model "
     "trains nothing; drop lora (or evaluate a run's global_step_N folder)"),
    (lambda: tunedsl.evaluate(ARITH, 5),
     "model=5: give NAME@URL, a Model(..., base_url=...), or a local model folder as a "
     "pathlib.Path"),
    (lambda: tunedsl.tune_prompt(ARITH, model="m@http://127.0.0.1:9/v1", reflection_model=5),
     "reflection_model=5: give NAME, NAME@URL or a Model(NAME, base_url=..., "
     "api_key_env=...)"),
    (lambda: tunedsl.tune_prompt(ARITH, model="m@http://127.0.0.1:9/v1",
                                 reflection_model=tunedsl.Model(
                                     "r", base_url="http://127.0.0.1:9/v1", temperature=0.0)),
     "reflection_model: Model(..., temperature=...) is not used; the reflection model is "
     "reached by its name, base_url and api_key_env only"),
])
def test_records_the_python_api_cannot_use_are_refused(call, message):
    """Values that were dropped silently or failed deep inside (numpy's MemoryError)."""
    assert _refused(call) == message


def test_params_named_by_numbers_are_refused():
    """A workflow reads params["name"]; a number as a name became text on the way."""
    from tunedsl import experiment, workflow

    @workflow
    async def reads(task, model, params):
        return None

    @experiment
    class Numbered:
        workflow = reads
        params = {1: "x"}
        train_dataset = tunedsl.Dataset("data")
        model = tunedsl.Model("m", max_model_len=64)

    with pytest.raises(ConfigError) as caught:
        tunedsl.load_experiment(Numbered)
    assert str(caught.value).endswith(
        "params: each name must be text, so it reaches the workflow as it was set (got 1, "
        "int); write params = {'1': ...}")


def test_a_path_ending_in_a_space_is_shown_quoted(tmp_path):
    """``model_path = "/x/tiny-model "`` read "/x/tiny-model  is not a folder", as if the
    real folder were missing; the only hint was a doubled space (sweep 30 A-W7)."""
    from tunedsl.backends.local.models import model_folder_problem
    from tunedsl.data.datasets import _check_hub_reachable
    from tunedsl.errors import DatasetError

    folder = f"{tmp_path} "
    assert model_folder_problem(folder).startswith(f"{folder!r} is not a folder; ")
    assert model_folder_problem(str(tmp_path / "none")).startswith(
        f"{tmp_path / 'none'} is not a folder; ")  # a plain path as it is
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
        with pytest.raises(DatasetError) as caught:
            _check_hub_reachable("data ", "train_dataset")
    assert str(caught.value).startswith("train_dataset: 'data ' is not a local path")
