"""Behaviour found missing in review: each test pins one promise of the README."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tunedsl
from tunedsl.backends.trinity.config import trinity_config
from tunedsl.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "tunedsl", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


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


def test_resume_refuses_changed_settings_but_allows_a_longer_run(tmp_path):
    """Resuming with another learning rate is refused by name; more steps are fine."""
    pytest.importorskip("torch")
    from examples.arith.tiny_model import build_tiny_model

    model = build_tiny_model(str(tmp_path / "model"))
    base = [f"model.model_path={model}", f"checkpoint_root_dir={tmp_path}",
            "train_dataset.total_steps=2"]
    first = tunedsl.run("tests.fixtures.local.agents:Arith", backend="local", overrides=base,
                        progress=False)
    with pytest.raises(ConfigError) as caught:
        tunedsl.run("tests.fixtures.local.agents:Arith", backend="local", progress=False,
                    overrides=[*base, "algorithm.learning_rate=0.5"], resume=first.run_dir)
    assert ("the run was started with other settings: algorithm.learning_rate (run: 0.001, "
            "now: 0.5)") in str(caught.value)
    longer = tunedsl.run("tests.fixtures.local.agents:Arith", backend="local", progress=False,
                         overrides=[*base[:-1], "train_dataset.total_steps=4"],
                         resume=first.run_dir)
    assert longer.steps == 4 and longer.run_dir == first.run_dir


def test_local_preflight_failure_leaves_no_run_folder(tmp_path):
    """A batch larger than the data is refused and nothing is left behind."""
    done = cli("run", "tests.fixtures.local.agents:Arith", "--backend", "local", "--set",
               f"model.model_path={tmp_path}", "--set", f"checkpoint_root_dir={tmp_path / 'c'}",
               "--set", "algorithm.batch_size=500")
    assert done.returncode == 2
    assert done.stderr.strip().endswith("lower batch_size")
    assert not list((tmp_path / "c").rglob("experiment.yaml"))


def test_user_metrics_reach_the_local_run_metrics(tmp_path):
    """WorkflowOutput/JudgeOutput metrics are averaged per step into metrics.jsonl."""
    pytest.importorskip("torch")
    from examples.arith.tiny_model import build_tiny_model

    summary = tunedsl.run("tests.fixtures.local.agents:Params", backend="local", progress=False,
                          overrides=[f"model.model_path={build_tiny_model(str(tmp_path / 'm'))}",
                                     f"checkpoint_root_dir={tmp_path}", "params.bonus=0.5"])
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]
    assert [row["rollout/seen_bonus/mean"] for row in rows] == [0.5] * 4


def test_hermes_tool_calls_are_read_from_local_replies():
    """The local backend reads Qwen's <tool_call> blocks as tool calls."""
    from tunedsl.backends.local.chat import parse_hermes

    text = ('Let me add.<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n'
            '</tool_call>')
    content, calls = parse_hermes(text)
    assert content == "Let me add."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("add", {"a": 2, "b": 3})]
    assert parse_hermes("<tool_call>not json</tool_call>") == (
        "<tool_call>not json</tool_call>", ())


def test_enable_thinking_reaches_the_local_chat_template():
    """The codec renders the template with enable_thinking, as Qwen3 templates expect."""
    pytest.importorskip("transformers")
    from examples.arith.tiny_model import build_tokenizer
    from tunedsl.backends.local.chat import ChatCodec

    tokenizer = build_tokenizer()
    tokenizer.chat_template += "{% if enable_thinking is defined and not enable_thinking %}0" \
                               "{% endif %}"
    messages = [{"role": "user", "content": "1+1="}]
    off = ChatCodec(tokenizer, enable_thinking=False).prompt_ids(messages)
    default = ChatCodec(tokenizer).prompt_ids(messages)
    assert off == default + (tokenizer.convert_tokens_to_ids("0"),)


def test_enable_thinking_is_sent_to_eval_endpoints(tmp_path):
    """eval sends chat_template_kwargs so the endpoint thinks as the experiment says."""
    from .openai_server import OpenAIServer

    with OpenAIServer() as server:
        done = cli("eval", "examples.arith.experiment:Arith", "--base-url", server.base_url,
                   "--model", "m", "-n", "1", "--set", "model.enable_thinking=false", "-o",
                   str(tmp_path / "r.jsonl"), "--no-progress")
        sent = server.requests[0]
    assert done.returncode == 0, done.stderr
    assert sent["chat_template_kwargs"] == {"enable_thinking": False}


def test_eval_keeps_task_values_json_cannot_hold(tmp_path):
    """A timestamp column is written as text instead of crashing the eval."""
    import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    from .openai_server import OpenAIServer

    (tmp_path / "pq").mkdir()
    pq.write_table(pa.table({"question": ["1+1="], "answer": ["2"],
                             "when": [datetime.datetime(2026, 1, 2, 3, 4)]}),
                   tmp_path / "pq" / "test.parquet")
    out = tmp_path / "r.jsonl"
    with OpenAIServer() as server:
        done = cli("eval", "examples.arith.experiment:Arith", "--base-url", server.base_url,
                   "--model", "m", "--set", f"eval_dataset.path={tmp_path / 'pq'}", "-o",
                   str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert (record["reward"], record["task"]["when"]) == (1.0, "2026-01-02 03:04:00")


@pytest.mark.parametrize("args, message", [
    (["rescore", "/nonexistent/results.jsonl", "examples.arith.experiment:Arith"],
     "Error: /nonexistent/results.jsonl: cannot read the results file: No such file or "
     "directory"),
    (["config", "examples.arith.experiment:Arith", "--settings", "/tmp"],
     "Error: /tmp: cannot read the settings file: Is a directory"),
    (["run", "tests.fixtures.local.agents:Arith", "--backend", "local", "--set",
      "checkpoint_root_dir=/proc/nope"],
     "Error: checkpoint_root_dir: cannot create /proc/nope/tunedsl/Arith-"),
])
def test_bad_input_is_one_line_not_a_traceback(args, message):
    """Files and folders that cannot be read or made are reported, exit 2."""
    done = cli(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(message)


def test_a_malformed_jsonl_row_is_a_dataset_error(tmp_path):
    """preview (and check, run) name the dataset when a row cannot be parsed."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"question": "1+1="}\n{broken\n')
    done = cli("preview", "examples.arith.experiment:Arith", "--set",
               f"train_dataset.path={tmp_path / 'data'}")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"Error: train_dataset: cannot read {tmp_path / 'data'} "
                                  f"(split 'train'): ")
    assert len(done.stderr.strip().splitlines()) == 1


def test_max_timeout_must_be_a_number_on_the_local_backend(tmp_path):
    """A non-numeric rollout timeout is refused before training."""
    done = cli("run", "tests.fixtures.local.agents:Arith", "--backend", "local", "--set",
               "trinity.explorer.max_timeout=ten", "--set", f"checkpoint_root_dir={tmp_path}",
               "--set", "model.model_path=/nowhere")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "Error: trinity.explorer.max_timeout must be a positive number of seconds (got 'ten')")


def test_resuming_a_moved_trinity_run_points_trinity_at_that_folder(tmp_path):
    """Trinity continues the folder given to --resume, wherever it has moved."""
    pytest.importorskip("trinity.common.config")
    from tunedsl.backends.trinity.launch import relocate

    config = {"project": "p", "group": "", "name": "x", "checkpoint_root_dir": "checkpoints"}
    relocate(config, tmp_path / "moved" / "proj" / "Arith-20250101000000")
    assert config == {"project": "proj", "group": "", "name": "Arith-20250101000000",
                      "checkpoint_root_dir": str(tmp_path / "moved")}
