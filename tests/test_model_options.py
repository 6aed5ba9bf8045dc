"""Per-model Trinity options and auxiliary sampling settings reach the validated Trinity config."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("trinity.common.config")

import tunedsl  # noqa: E402
from tunedsl.runs.rundir import create_run_dir, run_name  # noqa: E402
from tunedsl.errors import ConfigError  # noqa: E402

from .trinity_support import validate  # noqa: E402

MODULE = '''
from tunedsl import Dataset, Model, WorkflowOutput, experiment, workflow

@workflow
async def agent(task, model, auxiliary_models):
    return WorkflowOutput(response="", reward=0.0)

@experiment
class Game:
    workflow = agent
    train_dataset = Dataset("data")
    model = Model("/models/player", max_model_len=4096, trinity={"dtype": "float16"})
    auxiliary_models = {"opponent": Model("/models/opponent", max_model_len=2048,
                                          temperature=0.1, top_p=0.9, max_tokens=128)}
'''

TOML = '''
[model.trinity]
enable_prefix_caching = false
gpu_memory_utilization = 0.7

[auxiliary_models.opponent.trinity]
enforce_eager = true
extra_engine_args = { swap_space = 4 }
'''


def project(tmp_path, toml=TOML):
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "train.jsonl").write_text('{"q": 1}\n')
    (tmp_path / "exp.py").write_text(MODULE)
    (tmp_path / "tunedsl.toml").write_text(textwrap.dedent(toml))
    return f"{tmp_path / 'exp.py'}:Game"


def validated(tmp_path, target, *overrides):
    return validate(tunedsl.load_experiment(target, overrides=overrides), tmp_path)


def test_model_options_merge_from_class_and_toml_into_each_models_entry(tmp_path):
    """The class's and the TOML's trinity options both reach the right engine entry."""
    config = validated(tmp_path, project(tmp_path))
    rollout = config.explorer.rollout_model
    assert (rollout.dtype, rollout.enable_prefix_caching, rollout.gpu_memory_utilization) == (
        "float16", False, 0.7)
    (opponent,) = config.explorer.auxiliary_models
    assert (opponent.name, opponent.enforce_eager, opponent.extra_engine_args) == (
        "opponent", True, {"swap_space": 4})
    assert opponent.enable_prefix_caching is True  # untouched: Trinity's default


def test_auxiliary_models_keep_their_own_sampling(tmp_path):
    """AgentScope drops these; an opponent asked for at temperature 0.1 plays at 0.1."""
    (opponent,) = validated(tmp_path, project(tmp_path)).explorer.auxiliary_models
    assert (opponent.temperature, opponent.top_p, opponent.max_response_tokens,
            opponent.max_model_len) == (0.1, 0.9, 128, 2048)


def test_set_reaches_a_model_option(tmp_path):
    """--set model.trinity.KEY=VALUE merges with the rest, field by field."""
    config = validated(tmp_path, project(tmp_path), "model.trinity.enforce_eager=true")
    rollout = config.explorer.rollout_model
    assert (rollout.enforce_eager, rollout.dtype, rollout.enable_prefix_caching) == (
        True, "float16", False)


def test_unknown_option_names_the_model_and_suggests_the_field(tmp_path):
    """A misspelled option is refused with the model's key path and a did-you-mean."""
    target = project(tmp_path, "[auxiliary_models.opponent.trinity]\nenable_prefix_cache = 1\n")
    with pytest.raises(ConfigError) as caught:
        tunedsl.load_experiment(target)
    assert caught.value.problems == (
        f"{tmp_path / 'tunedsl.toml'}: invalid value @ auxiliary_models.opponent.trinity: has "
        f"'enable_prefix_cache', which is not a field of Trinity's InferenceModelConfig (did you "
        f"mean 'enable_prefix_caching'?)",)


def test_an_option_a_model_field_owns_points_to_that_field(tmp_path):
    """Setting temperature inside trinity would be a second place for one value."""
    target = project(tmp_path, "[model.trinity]\ntemperature = 0.3\n")
    with pytest.raises(ConfigError, match=r"@ model.trinity: sets 'temperature', which belongs "
                                          r"to Model\(temperature=...\); set it there$"):
        tunedsl.load_experiment(target)


def test_a_named_run_gets_its_own_folder_and_never_reuses_one(tmp_path):
    """Run names carry a timestamp; an existing run folder is refused, not resumed."""
    import datetime

    graph = tunedsl.load_experiment(project(tmp_path), overrides=[
        f"checkpoint_root_dir={tmp_path / 'runs'}", "name=ladder"])
    first = run_name(graph, datetime.datetime(2026, 1, 2, 3, 4, 5))
    second = run_name(graph, datetime.datetime(2026, 1, 2, 3, 4, 6))
    assert (first, second) == ("ladder-20260102030405", "ladder-20260102030406")
    folder = create_run_dir(graph, first)
    assert folder == tmp_path / "runs" / "tunedsl" / first
    with pytest.raises(ConfigError, match="already exists; resume it with resume='"):
        create_run_dir(graph, first)
