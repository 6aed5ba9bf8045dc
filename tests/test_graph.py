"""The experiment graph: cattrs round trip, explicit keys, graph checks, and tune()."""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs
import pytest

import tunedsl
from tunedsl import Algorithm, Dataset, Model
from tunedsl.config.graph import ExperimentGraph, check_group_size, check_response_budget, \
    make_converter
from tunedsl.config.importer import load_object
from tunedsl.backends.trinity.config import trinity_config
from tunedsl.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = "examples.math_agent.experiment:MathAgent"
LARGE = str(REPO / "tests" / "fixtures" / "two_experiments.py") + ":Large"


@pytest.fixture(scope="module")
def math_graph() -> ExperimentGraph:
    return tunedsl.load_experiment(EXAMPLE)


@pytest.fixture(scope="module")
def large_graph() -> ExperimentGraph:
    return tunedsl.load_experiment(LARGE)


# ------------------------------------------------------------------------------ round trip


@pytest.mark.parametrize("target", [EXAMPLE, LARGE])
def test_graph_round_trips_through_cattrs(target):
    """unstructure then structure gives an equal graph."""
    graph = tunedsl.load_experiment(target)
    converter = make_converter()
    again = converter.structure(converter.unstructure(graph), ExperimentGraph)
    assert again == graph
    assert again.explicit == graph.explicit
    assert again.workflow == graph.workflow


@pytest.mark.parametrize("target", [EXAMPLE, LARGE])
def test_unstructured_graph_is_plain_data_with_sets_as_sorted_lists(target):
    """make_converter writes sets as sorted lists, so the data survives JSON and back."""
    graph = tunedsl.load_experiment(target)
    converter = make_converter()
    data = converter.unstructure(graph)
    assert data["explicit"] == sorted(graph.explicit)
    assert data["workflow"]["optional_params"] == sorted(graph.workflow.optional_params)
    assert converter.structure(json.loads(json.dumps(data)), ExperimentGraph) == graph


def test_round_trip_keeps_nested_records(large_graph):
    """The structured copy holds real Model/Dataset/Algorithm records with the same values."""
    converter = make_converter()
    again = converter.structure(converter.unstructure(large_graph), ExperimentGraph)
    critic = again.auxiliary_models["critic"]
    assert isinstance(critic, Model)
    assert (critic.model_path, critic.max_model_len, critic.temperature) == \
        ("Qwen/Qwen3-32B", 8192, 0.1)
    assert isinstance(again.eval_dataset, Dataset) and again.eval_dataset.split == "test"
    assert isinstance(again.algorithm, Algorithm) and again.algorithm.batch_size == 16


def test_structure_refuses_unknown_keys(math_graph):
    """The converter is strict: an extra key in the data is an error."""
    converter = make_converter()
    data = converter.unstructure(math_graph)
    data["bogus"] = 1
    with pytest.raises(Exception) as info:
        converter.structure(data, ExperimentGraph)
    assert "bogus" in repr(info.value) + "".join(
        repr(e) for e in getattr(info.value, "exceptions", ()))


# -------------------------------------------------------------------------------- explicit


def test_explicit_holds_keys_set_by_the_class_layer(large_graph):
    """Large's explicit keys are exactly what its class (and its base class) set."""
    assert large_graph.explicit == {
        "name", "monitor",
        "train_dataset.path", "eval_dataset.path", "eval_dataset.split",
        "model.model_path", "model.max_model_len", "model.tensor_parallel_size",
        "auxiliary_models.critic.model_path", "auxiliary_models.critic.max_model_len",
        "auxiliary_models.critic.temperature",
        "algorithm.algorithm_type", "algorithm.group_size", "algorithm.batch_size",
    }


def test_explicit_includes_toml_and_set_keys_but_not_defaults(math_graph):
    """TOML and --set keys are explicit; fields left at their defaults are not."""
    toml_keys = {"project", "algorithm.algorithm_type", "algorithm.group_size",
                 "algorithm.batch_size", "algorithm.learning_rate",
                 "algorithm.save_interval_steps", "algorithm.eval_interval_steps",
                 "model.temperature", "model.max_tokens", "train_dataset.total_epochs"}
    class_keys = {"train_dataset.path", "train_dataset.split", "eval_dataset.path",
                  "eval_dataset.split", "model.model_path", "model.max_model_len"}
    assert toml_keys | class_keys <= math_graph.explicit
    assert not {"model.top_p", "monitor", "checkpoint_root_dir", "model.enable_thinking",
                "eval_dataset.total_epochs"} & math_graph.explicit
    with_set = tunedsl.load_experiment(EXAMPLE, overrides=["model.top_p=0.9"])
    assert with_set.explicit - math_graph.explicit == {"model.top_p"}


# ---------------------------------------------------------------------------- graph checks


@pytest.mark.parametrize("algorithm_type, group_size, expected", [
    ("grpo", 1, ["algorithm.group_size = 1: algorithm.algorithm_type 'grpo' compares "
                 "rollouts of the same task, so it needs group_size >= 2"]),
    ("multi_step_grpo", 1, ["algorithm.group_size = 1: algorithm.algorithm_type "
                            "'multi_step_grpo' compares rollouts of the same task, so it "
                            "needs group_size >= 2"]),
    ("grpo", 2, []),
    ("ppo", 1, []),
    ("sft", 1, []),
])
def test_check_group_size(math_graph, algorithm_type, group_size, expected):
    """Only group-relative algorithms need group_size >= 2."""
    graph = attrs.evolve(math_graph, algorithm=Algorithm(algorithm_type, group_size=group_size))
    assert check_group_size(graph) == expected


def test_check_response_budget_for_the_trained_model(math_graph):
    """max_tokens equal to max_model_len leaves no room for the prompt."""
    graph = attrs.evolve(math_graph, model=Model("m", max_model_len=4096, max_tokens=4096))
    assert check_response_budget(graph) == [
        "model.max_tokens = 4096 leaves no room for the prompt in model.max_model_len = 4096; "
        "lower max_tokens or raise max_model_len"]
    fine = attrs.evolve(math_graph, model=Model("m", max_model_len=4096, max_tokens=4095))
    assert check_response_budget(fine) == []


def test_check_response_budget_uses_the_trained_model_length_for_auxiliary(math_graph):
    """An auxiliary model on an engine without max_model_len is measured against the trained
    model's, and the message says it inherits it; one at an endpoint is not (its server's
    context is what bounds it)."""
    graph = attrs.evolve(math_graph, auxiliary_models={
        "judge": Model("j", max_tokens=20000), "ok": Model("k", max_model_len=32768,
                                                           max_tokens=20000),
        "hosted": Model("h", base_url="http://127.0.0.1:9/v1", max_tokens=20000)})
    assert check_response_budget(graph) == [
        "auxiliary_models.judge.max_tokens = 20000 leaves no room for the prompt in "
        "model.max_model_len = 16384, the trained model's, which it inherits; lower max_tokens "
        "or set auxiliary_models.judge.max_model_len"]


def test_build_reports_graph_check_with_the_layer_that_gave_the_value(math_graph, monkeypatch):
    """A failing graph check during the build names the layer that gave the setting it
    names: the overrides' value as overrides, a settings file's as that file (both were
    said as the class's line, sweep 46 A-W5), and the class that gave the other setting
    (the second setting was not traced, sweep 49). (The class's own, by its file:line: the
    error catalogue's rows.)"""
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError) as info:
        tunedsl.load_experiment(EXAMPLE, overrides=["model.max_tokens=16384"])
    assert info.value.problems == (
        "overrides, MathAgent (examples/math_agent/experiment.py:55): model.max_tokens = 16384 "
        "leaves no room for the prompt in model.max_model_len = 16384; lower max_tokens or "
        "raise max_model_len",)
    # both settings given by one layer: it is named once
    with pytest.raises(ConfigError) as info:
        tunedsl.load_experiment(EXAMPLE, overrides=["model.max_tokens=100",
                                                    "model.max_model_len=100"])
    assert info.value.problems == (
        "overrides: model.max_tokens = 100 leaves no room for the prompt in "
        "model.max_model_len = 100; lower max_tokens or raise max_model_len",)
    with pytest.raises(ConfigError) as info:
        tunedsl.load_experiment(EXAMPLE, overrides=["algorithm.algorithm_type=sft",
                                                    "train_dataset.path=x"])
    assert info.value.problems[0] == (
        f"{REPO / 'examples/math_agent/tunedsl.toml'}: algorithm.group_size: sft trains on "
        f"train_dataset's conversations, not on rollouts; remove it")


# ------------------------------------------------------------------------------------ tune


FUNCTIONS = '''\
from tunedsl import JudgeOutput, WorkflowOutput


async def solve(task, model):
    return WorkflowOutput(response=task["question"])


async def grade(task, response):
    return JudgeOutput(reward=float(response == task["answer"]))
'''

CLASS = '''\
from tunedsl import Algorithm, Dataset, JudgeOutput, Model, WorkflowOutput, experiment, judge, \\
    workflow


@workflow
async def solve(task, model):
    return WorkflowOutput(response=task["question"])


@judge
async def grade(task, response):
    return JudgeOutput(reward=float(response == task["answer"]))


@experiment
class Exp:
    workflow = solve
    judge = grade
    train_dataset = Dataset("data", split="train")
    model = Model("Qwen/Qwen3-0.6B", max_model_len=4096, temperature=0.7, top_p=0.8,
                  enable_thinking=False)
    algorithm = Algorithm("grpo", group_size=4, batch_size=2)
    name = "my-run"
    project = "my-project"
    monitor = "mlflow"
'''


@pytest.fixture()
def tune_project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"question": "q", "answer": "a"}\n')
    (tmp_path / "tune_funcs.py").write_text(FUNCTIONS)
    (tmp_path / "tune_class.py").write_text(CLASS)
    return tmp_path


def _tune(folder: Path) -> ExperimentGraph:
    module = folder / "tune_funcs.py"
    return tunedsl.tune(
        workflow_func=load_object(f"{module}:solve"),
        judge_func=load_object(f"{module}:grade"),
        train_dataset=Dataset("data", split="train"),
        model=Model("Qwen/Qwen3-0.6B", max_model_len=4096, temperature=0.7, top_p=0.8,
                    enable_thinking=False),
        algorithm=Algorithm("grpo", group_size=4, batch_size=2),
        experiment_name="my-run", project_name="my-project", monitor_type="mlflow",
        dry_run=True,
    )


def test_tune_builds_the_same_graph_as_the_equivalent_class(tune_project):
    """tune() with undecorated functions gives the class's graph values (bar code refs)."""
    from_tune = _tune(tune_project)
    from_class = tunedsl.load_experiment(f"{tune_project / 'tune_class.py'}:Exp")
    assert from_tune.source is None
    assert from_tune.workflow.ref == f"{tune_project / 'tune_funcs.py'}:solve"
    assert (from_tune.judge.kind, from_tune.judge.qualname) == ("judge", "grade")
    same = attrs.evolve(from_tune, source=from_class.source, workflow=from_class.workflow,
                        judge=from_class.judge)
    assert same == from_class
    assert from_tune.explicit == from_class.explicit
    assert from_tune.train_dataset.path == os.path.normpath(tune_project.resolve() / "data")


def test_tune_keeps_experiment_name_and_sampling_settings(tune_project):
    """experiment_name names the run; temperature, top_p, enable_thinking reach Trinity."""
    graph = _tune(tune_project)
    assert (graph.name, graph.project, graph.monitor) == ("my-run", "my-project", "mlflow")
    config = trinity_config(graph)
    assert config["name"].startswith("my-run-")
    assert config["project"] == "my-project"
    assert config["monitor"]["monitor_type"] == "mlflow"
    model = config["model"]
    assert (model["temperature"], model["top_p"], model["enable_thinking"]) == (0.7, 0.8, False)
    rollout = config["buffer"]["explorer_input"]["taskset"]["rollout_args"]
    assert (rollout["temperature"], rollout["top_p"]) == (0.7, 0.8)
    assert config["algorithm"]["repeat_times"] == 4
    assert "experiment" not in config["buffer"]["explorer_input"]["taskset"]["workflow_args"]


def test_the_graph_class_is_the_settings_table(math_graph):
    """The fields written out in `ExperimentGraph` (which type checkers read) are the
    settings table's rows in the graph, in its order, with its types and defaults; then
    ``explicit``, after ``source``."""
    import attrs

    from tunedsl.config.graph import graph_fields

    fields = attrs.fields(ExperimentGraph)
    written = [(f.name, f.type, f.default) for f in fields]
    assert written[0] == ("source", str | None, attrs.NOTHING)
    assert written[-1] == ("explicit", frozenset[str], frozenset())
    assert written[1:-1] == graph_fields()
    assert all(f.kw_only for f in fields)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        math_graph.name = "changed"


@pytest.mark.parametrize("written, suggested", [("Résumé", "Resume"), ("Ünï_2", "Uni_2")])
def test_a_class_name_no_folder_takes_is_said_as_the_run_names_default(tmp_path, monkeypatch,
                                                                       written, suggested):
    """A class ``Résumé`` (a valid Python name) with no name set was refused as "defaults:
    invalid value @ name", and the fix dropped its letters ('R-sum') (sweep 29 A-W1)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"q": "1"}\n')
    (tmp_path / "accented.py").write_text(
        "from tests.fixtures.local.agents import add, exact\n"
        "from tunedsl import Dataset, Model, experiment\n\n\n"
        f"@experiment\nclass {written}:\n    workflow = add\n    judge = exact\n"
        "    train_dataset = Dataset('data', split='train')\n"
        "    model = Model('m', max_model_len=64)\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(REPO))
    with pytest.raises(ConfigError) as info:
        tunedsl.load_experiment(f"{tmp_path / 'accented.py'}:{written}")
    assert str(info.value) == (
        f"the run's name, by default the class name (set name = ... to give another): invalid "
        f"value @ name: {written!r} names a folder of the run's path (checkpoint_root_dir/"
        f"project/name), so it may hold only ASCII letters, digits, '_', '.' and '-' (not "
        f"'..'): write e.g. {suggested!r}, and choose where runs go with checkpoint_root_dir")
