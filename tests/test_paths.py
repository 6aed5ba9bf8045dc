"""Relative paths mean "beside the file that names them" (config/paths.py), whichever source
names them."""

from __future__ import annotations

import pytest

import tunedsl
from tunedsl.backends.trinity.config import trinity_config


def test_relative_paths_in_a_base_yaml_are_anchored_to_its_folder(tmp_path):
    """A base YAML's `path: data` means the folder beside the YAML in the written config."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"q": 1}\n')
    (tmp_path / "base.yaml").write_text(
        "model: {model_path: hub/model, max_model_len: 64}\n"
        "buffer: {explorer_input: {taskset: {path: data}}}\n")
    (tmp_path / "exp.py").write_text(
        "from tunedsl import WorkflowOutput, experiment, workflow\n"
        "@workflow\nasync def w(task, model):\n    return WorkflowOutput(reward=0.0)\n"
        "@experiment\nclass E:\n    workflow = w\n    trinity_config = 'base.yaml'\n")
    config = trinity_config(tunedsl.load_experiment(f"{tmp_path / 'exp.py'}:E"))
    assert config["buffer"]["explorer_input"]["taskset"]["path"] == str(tmp_path / "data")
    assert config["model"]["model_path"] == "hub/model"  # not on disk: a hub id, untouched


def test_a_dataset_built_in_a_shared_module_is_read_beside_that_module(tmp_path):
    """Relative record paths mean the file that built the record, not the experiment's."""
    shared, exps = tmp_path / "shared", tmp_path / "exps"
    (shared / "data").mkdir(parents=True)
    exps.mkdir()
    (shared / "data" / "train.jsonl").write_text('{"q": 1}\n')
    (shared / "common.py").write_text("from tunedsl import Dataset\nTRAIN = Dataset('data')\n")
    (exps / "e.py").write_text(
        "import sys; sys.path.insert(0, %r)\n" % str(shared)
        + "from common import TRAIN\nfrom tunedsl import Model, WorkflowOutput, experiment, "
        "workflow\n@workflow\nasync def w(task, model):\n    return WorkflowOutput(reward=0.0)\n"
        "@experiment\nclass E:\n    workflow = w\n    train_dataset = TRAIN\n"
        "    model = Model('m', max_model_len=64)\n")
    graph = tunedsl.load_experiment(f"{exps / 'e.py'}:E")
    assert graph.train_dataset.path == str(shared / "data")


def test_a_leading_tilde_is_the_home_folder_in_settings_outputs_and_options(tmp_path,
                                                                           monkeypatch):
    """``~`` is read as a shell reads it (Python's file functions made a folder named
    ``~`` in the current one, and messages printed ``~/...`` as if it were home)."""
    from .cli_support import cli
    from .openai_server import OpenAIServer

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    graph = tunedsl.load_experiment("examples.arith.experiment:Arith",
                                    overrides=["checkpoint_root_dir=~/runs"])
    assert graph.checkpoint_root_dir == str(tmp_path / "home" / "runs")
    with OpenAIServer() as server:
        summary = tunedsl.evaluate("examples.arith.experiment:Arith",
                                   f"m@{server.base_url}", output="~/r.jsonl", limit=1,
                                   progress=False)
        done = cli("eval", "examples.arith.experiment:Arith", "--base-url", server.base_url,
                   "--model", "m", "-n", "1", "-o", "~/s.jsonl", "--no-progress",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert summary.results == tmp_path / "home" / "r.jsonl"
    assert sorted(path.name for path in (tmp_path / "home").iterdir()) == ["r.jsonl",
                                                                          "s.jsonl"]
    assert not (tmp_path / "~").exists()


def test_tilde_reads_inputs_too_and_an_unknown_users_home_is_refused(tmp_path, monkeypatch):
    """Inputs given with a quoted ``~`` were not found (outputs were); ``~nosuchuser/x``
    was an internal error as an output and a folder named ``~nosuchuser`` as
    ``checkpoint_root_dir``."""
    from tunedsl.errors import ConfigError
    from tunedsl.view import view

    from .cli_support import cli
    from .openai_server import OpenAIServer

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "s.toml").write_text('[params]\nhint = "from home"\n')
    with pytest.raises(ConfigError) as caught:  # read: its params reach no function
        tunedsl.load_experiment("examples.arith.experiment:Arith", settings="~/s.toml")
    assert str(caught.value).startswith(f"{tmp_path / 'home' / 's.toml'}: params: hint set")
    with OpenAIServer() as server:
        tunedsl.evaluate("examples.arith.experiment:Arith", f"m@{server.base_url}",
                         output="~/r.jsonl", limit=1, progress=False)
    rescored = cli("rescore", "~/r.jsonl", "examples.arith.experiment:Arith",
                   "-o", "~/again.jsonl")
    assert rescored.returncode == 0, rescored.stderr
    view(["~/r.jsonl"], out="~/page.html")
    assert (tmp_path / "home" / "page.html").read_text().startswith("<!doctype html>")
    refused = cli("config", "examples.arith.experiment:Arith", "-o", "~nosuchuser8/c.yaml")
    assert (refused.returncode, refused.stderr.strip().splitlines()[-1]) == (2, (
        "Error: tunedsl config: argument -o/--output: ~nosuchuser8/c.yaml: there is no user "
        "'nosuchuser8' here, so no home folder ~nosuchuser8; give the folder itself; see "
        "tunedsl config --help"))
    with pytest.raises(ConfigError, match=r"^~nosuchuser8/ck: there is no user 'nosuchuser8' "):
        tunedsl.load_experiment("examples.arith.experiment:Arith",
                                overrides=["checkpoint_root_dir=~nosuchuser8/ck"])
