"""Relative paths mean "beside the file that names them" (config/paths.py), whichever source
names them."""

from __future__ import annotations

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
