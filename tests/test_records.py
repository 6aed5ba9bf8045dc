"""The setting records Dataset, Model and Algorithm: defaults, validation, explicit fields, preview."""

from __future__ import annotations

import json
import math
from pathlib import Path

import attrs
import pytest

import tunedsl
from tunedsl import (
    Algorithm,
    AlgorithmConfig,
    Dataset,
    DatasetConfig,
    LoRA,
    Model,
    TunerModelConfig,
)
from tunedsl.dsl.setting import explicit_fields
from tunedsl.dsl.trinity_fields import ALGORITHM_TYPES
from tunedsl.errors import ConfigError, DatasetError

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "tests" / "fixtures" / "tasks"


def jsonl_rows(path: Path) -> list[dict]:
    """The rows of a jsonl file, parsed independently of tunedsl."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def config_error(cls, *args, **kwargs) -> ConfigError:
    """Construct ``cls`` expecting a ConfigError, and return it."""
    with pytest.raises(ConfigError) as excinfo:
        cls(*args, **kwargs)
    return excinfo.value


# --------------------------------------------------------------------------------- defaults


def test_dataset_defaults():
    """A Dataset given only a path reads the train split once, with no subset or step limit."""
    data = Dataset("some/data")
    assert (data.path, data.name, data.split, data.total_epochs, data.total_steps) == (
        "some/data", None, "train", 1, None)
    assert explicit_fields(data) == {"path"}


def test_model_defaults():
    """A Model given only a path samples at temperature 1, top_p 1, with hermes tool parsing."""
    model = Model("Qwen/Qwen3-0.6B")
    assert (model.model_path, model.max_model_len, model.temperature, model.top_p) == (
        "Qwen/Qwen3-0.6B", None, 1.0, 1.0)
    assert (model.max_tokens, model.enable_thinking, model.reasoning_parser) == (None, None, None)
    assert (model.tensor_parallel_size, model.inference_engine_num) == (1, None)
    assert (model.tool_call_parser, model.trinity) == ("hermes", {})
    assert explicit_fields(model) == {"model_path"}


def test_lora_defaults_are_trinitys_and_lists_become_tuples():
    """LoRA() is rank 32, alpha 32 on every linear layer (Trinity's LoRAConfig defaults); a
    list of module names is kept as a tuple, so the frozen record stays hashable."""
    assert (LoRA().rank, LoRA().alpha, LoRA().target_modules) == (32, 32, "all-linear")
    lora = LoRA(8, target_modules=["q_proj", "v_proj"])
    assert lora.target_modules == ("q_proj", "v_proj") and hash(lora) == hash(
        LoRA(8, target_modules=("q_proj", "v_proj")))
    assert explicit_fields(lora) == {"rank", "target_modules"}
    assert Model("m").lora is None and Model("m", lora=lora).lora is lora


def test_algorithm_defaults():
    """Algorithm() is multi_step_grpo with 8 rollouts, 32 tasks a step and lr 1e-6."""
    algo = Algorithm()
    assert (algo.algorithm_type, algo.group_size, algo.batch_size, algo.learning_rate) == (
        "multi_step_grpo", 8, 32, 1e-6)
    assert (algo.save_interval_steps, algo.eval_interval_steps) == (100, 100)
    assert explicit_fields(algo) == frozenset()


def test_first_argument_is_positional():
    """The first field can be given positionally and equals the keyword form."""
    assert Dataset("d").path == "d" and Dataset("d") == Dataset(path="d")
    assert Model("m").model_path == "m" and Model("m") == Model(model_path="m")
    assert Algorithm("grpo").algorithm_type == "grpo"
    assert Algorithm("grpo") == Algorithm(algorithm_type="grpo")
    assert Dataset("d", "sub", "test").name == "sub"
    assert Dataset("d", "sub", "test").split == "test"


def test_agentscope_tuner_aliases_are_the_same_classes():
    """DatasetConfig, TunerModelConfig and AlgorithmConfig are the records under AgentScope
    tuner's names."""
    assert DatasetConfig is Dataset
    assert TunerModelConfig is Model
    assert AlgorithmConfig is Algorithm
    assert {"DatasetConfig", "TunerModelConfig", "AlgorithmConfig"} <= set(tunedsl.__all__)


# ------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(("cls", "kwargs", "message"), [
    (Algorithm, {"group_size": 0}, "Algorithm.group_size must be >= 1 (got 0)"),
    (Algorithm, {"batch_size": True}, "Algorithm.batch_size must be an integer (got True)"),
    (Algorithm, {"save_interval_steps": 2.5},
     "Algorithm.save_interval_steps must be an integer (got 2.5)"),
    (Algorithm, {"learning_rate": 0}, "Algorithm.learning_rate must be > 0.0 (got 0)"),
    # float32 rounds every update to 0: the run trained, the weights unchanged (sweep 24)
    (Algorithm, {"learning_rate": 1e-46}, "Algorithm.learning_rate must be >= 1.1754944e-38 "
                                          "(got 1e-46): below it float32 weights round every "
                                          "update to 0"),
    (Algorithm, {"lr_scheduler": "linear"},
     "Algorithm.lr_scheduler must be one of 'constant', 'cosine' (got 'linear')"),
    (Algorithm, {"min_lr_ratio": 1.5}, "Algorithm.min_lr_ratio must be <= 1.0 (got 1.5)"),
    (Algorithm, {"lr_warmup_steps": -1}, "Algorithm.lr_warmup_steps must be >= 0 (got -1)"),
    (Algorithm, {"learning_rate": "1e-6"}, "Algorithm.learning_rate must be a number (got '1e-6')"),
    (Model, {"model_path": "m", "top_p": 2.0}, "Model.top_p must be in (0, 1] (got 2.0)"),
    (Model, {"model_path": "m", "top_p": 0}, "Model.top_p must be > 0.0 (got 0)"),
    (Model, {"model_path": "m", "temperature": -0.1},
     "Model.temperature must be >= 0.0 (got -0.1)"),
    (Model, {"model_path": "m", "max_model_len": 0}, "Model.max_model_len must be >= 1 (got 0)"),
    (Model, {"model_path": "m", "enable_thinking": "yes"},
     "Model.enable_thinking must be true, false or unset (got 'yes')"),
    (Model, {"model_path": "m", "tool_call_parser": ""},
     "Model.tool_call_parser must be a non-empty string (got '')"),
    (Model, {"model_path": 7}, "Model.model_path must be a non-empty string (got 7)"),
    (Dataset, {"path": ""}, "Dataset.path must be a non-empty string (got '')"),
    (Dataset, {"path": "d", "total_steps": 0}, "Dataset.total_steps must be >= 1 (got 0)"),
    (Dataset, {"path": "d", "total_epochs": None},
     "Dataset.total_epochs must be an integer (got None)"),
    (LoRA, {"rank": 0}, "LoRA.rank must be >= 1 (got 0)"),
    (LoRA, {"alpha": 16.5}, "LoRA.alpha must be an integer (got 16.5)"),
    (LoRA, {"target_modules": []},
     "LoRA.target_modules must list at least one module name, each a non-empty string (got [])"),
    (LoRA, {"target_modules": ["q_proj", ""]}, "LoRA.target_modules must list at least one "
     "module name, each a non-empty string (got ['q_proj', ''])"),
    (LoRA, {"target_modules": 3}, 'LoRA.target_modules must be "all-linear", a list of module '
     'names such as ["q_proj", "v_proj"], or a regular expression over module names (got 3)'),
    (LoRA, {"target_modules": "q_proj|("}, "LoRA.target_modules 'q_proj|(' is not a valid "
     "regular expression (missing ), unterminated subpattern at position 7); give "
     '"all-linear" or a list of module names'),
    (Model, {"model_path": "m", "lora": {"rank": 8}},
     "Model.lora must be a LoRA(...) or None (got {'rank': 8})"),
])
def test_invalid_values_name_the_field(cls, kwargs, message):
    """A refused value raises one ConfigError line '<Record>.<field> <why> (got <value>)'."""
    error = config_error(cls, **kwargs)
    assert str(error) == message
    assert error.problems == (message,)
    assert type(error) is ConfigError and isinstance(error, ValueError)


def test_nan_is_refused_for_float_fields():
    """NaN is not a usable temperature, top_p or learning rate."""
    nan = math.nan
    assert str(config_error(Model, "m", temperature=nan)) == (
        "Model.temperature must be a finite number (got nan)")
    assert str(config_error(Model, "m", top_p=nan)).startswith("Model.top_p must be ")
    assert str(config_error(Algorithm, learning_rate=nan)).startswith(
        "Algorithm.learning_rate must be ")


def test_unknown_algorithm_type_suggests_the_closest():
    """A misspelt algorithm type gets a did-you-mean and the sorted list of known types."""
    message = str(config_error(Algorithm, "grpoo"))
    head = ("Algorithm.algorithm_type 'grpoo' is not a known algorithm type "
            "(did you mean 'grpo'?); choose one of: ")
    assert message.startswith(head)
    listed = message[len(head):].split(", ")
    assert listed == sorted(listed) == sorted(set(ALGORITHM_TYPES) - {"dpo", "cpt"})
    assert {"grpo", "multi_step_grpo", "ppo"} <= set(listed)


@pytest.mark.parametrize("given", ["DPO", "Cpt"])
def test_an_offline_algorithm_type_in_other_letters_says_why_it_is_not_run(given):
    """``Algorithm("DPO")`` was told "did you mean 'dpo'", and offered dpo and cpt, which
    tunedsl refuses next (sweep 43 A-W9): the offline types are no choices."""
    kind = given.lower()
    what = {"dpo": "chosen and rejected replies in pairs",
            "cpt": "plain text (continued pre-training)"}[kind]
    assert str(config_error(Algorithm, given)) == (
        f"Algorithm.algorithm_type {given!r} is not a known algorithm type, and Trinity trains "
        f"{kind!r} offline on a dataset of {what}, running no workflow, which tunedsl does not "
        f"set up; learn from the judge's reward with an RL algorithm (grpo, ...), or from "
        f"conversations with sft")


def test_unknown_algorithm_type_without_a_close_match():
    """A type that resembles nothing gets no suggestion."""
    message = str(config_error(Algorithm, algorithm_type="zzzzzz"))
    assert message.startswith(
        "Algorithm.algorithm_type 'zzzzzz' is not a known algorithm type; choose one of: ")


def test_model_trinity_options_are_checked():
    """Model(trinity=...) accepts Trinity inference options and refuses owned or unknown keys."""
    model = Model("m", trinity={"enable_prefix_caching": True, "dtype": "bfloat16"})
    assert model.trinity == {"enable_prefix_caching": True, "dtype": "bfloat16"}
    assert str(config_error(Model, "m", trinity={"temperature": 0.5})) == (
        "Model.trinity sets 'temperature', which belongs to Model(temperature=...); set it there")
    assert str(config_error(Model, "m", trinity={"enforce_eagr": True})) == (
        "Model.trinity has 'enforce_eagr', which is not a field of Trinity's "
        "InferenceModelConfig (did you mean 'enforce_eager'?)")


# -------------------------------------------------------------------------- explicit fields


def test_explicit_fields_records_positional_and_keyword_arguments():
    """explicit_fields holds exactly the fields passed, positionally or by keyword."""
    assert explicit_fields(Model("m", 4096, top_p=0.5)) == {"model_path", "max_model_len", "top_p"}
    assert explicit_fields(Dataset("d", None, "test")) == {"path", "name", "split"}
    assert explicit_fields(Algorithm(group_size=4, learning_rate=1e-5)) == {
        "group_size", "learning_rate"}
    assert explicit_fields(Algorithm("grpo", 4)) == {"algorithm_type", "group_size"}


def test_explicit_default_value_still_counts_as_explicit():
    """Passing a field's default value marks it explicit, yet the records stay equal."""
    plain, pinned = Model("m"), Model("m", temperature=1.0)
    assert explicit_fields(pinned) == {"model_path", "temperature"}
    assert explicit_fields(plain) == {"model_path"}
    assert plain == pinned
    assert "_explicit" not in repr(pinned)
    assert explicit_fields(object()) == frozenset()


def test_records_are_frozen():
    """Assigning to a record's field raises and leaves the value unchanged."""
    model, data, algo = Model("m", temperature=0.3), Dataset("d"), Algorithm()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        model.temperature = 0.9
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        data.split = "test"
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        algo.group_size = 2
    assert (model.temperature, data.split, algo.group_size) == (0.3, "train", 8)


# ---------------------------------------------------------------------------------- preview


def test_preview_returns_and_prints_the_first_rows(capsys):
    """preview(n) returns the first n rows of the split and prints them as JSON."""
    rows = Dataset(str(TASKS)).preview(2)
    assert rows == jsonl_rows(TASKS / "train.jsonl")[:2]
    assert json.loads(capsys.readouterr().out) == rows


def test_preview_of_another_split_and_more_rows_than_exist(capsys):
    """A larger n returns every row, and split chooses the file read."""
    assert Dataset(str(TASKS)).preview(10) == jsonl_rows(TASKS / "train.jsonl")
    capsys.readouterr()
    rows = Dataset(str(TASKS), split="test").preview()
    assert rows == jsonl_rows(TASKS / "test.jsonl")
    assert json.loads(capsys.readouterr().out) == rows


@pytest.mark.parametrize("n, message", [
    (-1, "n=-1: give a whole number of at least 1"),
    (0, "n=0: give a whole number of at least 1"),
    ("3", "n='3': give a whole number of at least 1, not a str"),
    (2.0, "n=2.0: give a whole number of at least 1, not a float")])
def test_preview_refuses_a_count_that_is_no_count(n, message):
    """-1 returned every row but the last, "3" and 2.0 failed inside the reader."""
    with pytest.raises(ConfigError) as caught:
        Dataset(str(TASKS)).preview(n)
    assert str(caught.value) == message


def test_preview_of_a_single_file(capsys):
    """A Dataset naming one jsonl file previews that file."""
    rows = Dataset(str(TASKS / "test.jsonl"), split="test").preview(1)
    assert rows == jsonl_rows(TASKS / "test.jsonl")[:1]
    assert json.loads(capsys.readouterr().out) == rows


@pytest.mark.parametrize("packed", ["gzip", "bz2", "lzma"])
def test_preview_of_a_single_compressed_file(tmp_path, capsys, packed):
    """A single ``test.jsonl.gz`` was refused as a file of no known format, though a folder
    of them is read (sweep 33 A-W1): its format is the ending before the compression's."""
    import importlib

    module = importlib.import_module(packed)
    ending = {"gzip": ".gz", "bz2": ".bz2", "lzma": ".xz"}[packed]
    file = tmp_path / f"test.jsonl{ending}"
    file.write_bytes(module.compress((TASKS / "test.jsonl").read_bytes()))
    rows = Dataset(str(file), split="test").preview(2)
    assert rows == jsonl_rows(TASKS / "test.jsonl")[:2]
    assert json.loads(capsys.readouterr().out) == rows


def test_preview_of_a_missing_local_path(tmp_path, monkeypatch, capsys):
    """A local-looking path that does not exist raises DatasetError and prints nothing."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetError) as excinfo:
        Dataset("./nope").preview(2)
    assert str(excinfo.value) == (
        "dataset: path ./nope does not exist; fix the path, or give a Hugging Face hub id "
        "such as 'openai/gsm8k'")
    assert capsys.readouterr().out == ""


def test_preview_reads_environment_variables_as_an_experiment_does(monkeypatch, capsys):
    """``${env:NAME[,default]}`` in a Dataset previewed outside an experiment was taken as a
    hub id; it is read as the experiment's settings read it, and an unset one is named."""
    monkeypatch.setenv("TASKS_DIR", str(TASKS))
    assert Dataset("${env:TASKS_DIR}", split="${env:NO_SUCH_SPLIT,test}").preview(1) == \
        jsonl_rows(TASKS / "test.jsonl")[:1]
    assert Dataset(f"${{env:UNSET_TASKS,{TASKS}}}").preview(1) == \
        jsonl_rows(TASKS / "train.jsonl")[:1]
    capsys.readouterr()
    with pytest.raises(ConfigError) as caught:
        Dataset("${env:UNSET_TASKS}/data").preview(1)
    assert str(caught.value) == ("Dataset.path: environment variable UNSET_TASKS is not set; "
                                 "export it, or give a default: ${env:UNSET_TASKS,default}")
    assert capsys.readouterr().out == ""


def test_preview_resolves_a_relative_path_against_the_file_that_names_it(monkeypatch, capsys):
    """MathAgent's Dataset("data") previews examples/math_agent/data whatever the cwd, as documented."""
    from examples.math_agent.experiment import MathAgent

    monkeypatch.chdir(REPO)
    rows = MathAgent.train_dataset.preview(1)
    assert rows == jsonl_rows(REPO / "examples" / "math_agent" / "data" / "train.jsonl")[:1]


def test_infinite_numbers_are_refused():
    """An infinite learning rate or temperature is no setting: it would train NaN weights."""
    assert str(config_error(Algorithm, learning_rate=float("inf"))) == (
        "Algorithm.learning_rate must be a finite number (got inf)")
    assert str(config_error(Model, "m", temperature=float("inf"))) == (
        "Model.temperature must be a finite number (got inf)")


def test_path_settings_take_a_pathlib_path_as_its_text():
    """A path setting given as a ``pathlib.Path`` holds its text (it was refused as "must be
    a non-empty string", though the Python API takes paths elsewhere)."""
    assert Dataset(Path("data") / "math", split="test") == Dataset("data/math", split="test")
    assert Model(Path("/models/tiny")).model_path == "/models/tiny"
    with pytest.raises(ConfigError, match=r"^Model.model_path must be a non-empty string \(got 5\)$"):
        Model(5)


def test_a_number_of_another_kind_is_named_with_its_conversion():
    """numpy's scalars print like Python's numbers: the message names the type, or it
    would read "must be an integer (got 2)"."""
    import numpy as np

    with pytest.raises(ConfigError) as caught:
        Algorithm("grpo", group_size=np.int64(2))
    assert str(caught.value) == ("Algorithm.group_size must be an integer (got 2, a "
                                 "numpy.int64; pass int(...) of it)")
    with pytest.raises(ConfigError) as caught:
        Model("m", temperature=np.float32(0.5))
    assert str(caught.value) == ("Model.temperature must be a number (got 0.5, a "
                                 "numpy.float32; pass float(...) of it)")
