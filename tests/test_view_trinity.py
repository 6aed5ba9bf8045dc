"""``tunedsl view`` over a Trinity run directory, made by Trinity's own writers: its
``Config.save``, its buffer writers (SQLite by default, JSON Lines when the pipeline's
``input_save_path`` names a file) and its ``TensorboardMonitor``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trinity")

import torch  # noqa: E402
from trinity.common.config import Config, StorageConfig  # noqa: E402
from trinity.common.experience import EID, Experience  # noqa: E402
from trinity.utils.monitor import TensorboardMonitor  # noqa: E402

from tunedsl.errors import DatasetError  # noqa: E402
from tunedsl.view.sources import open_source  # noqa: E402

from .trinity_support import pipeline_store, write_with_trinity  # noqa: E402

TOOL_CALL = {"id": "call_1", "type": "function",
             "function": {"name": "search", "arguments": '{"q": "capital of France"}'}}
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
TRAIN_REWARD = [(1, 0.25), (2, 0.5), (3, 0.75)]
EVAL_REWARD = [(0, 0.1), (3, 0.6)]


def experience(batch, task, run, *, reward, messages=None, prompt_length=3, metrics=None,
               info=None, **extra):
    """A real Trinity experience: 3 prompt tokens, 2 reply tokens."""
    return Experience(eid=EID(batch=batch, task=task, run=run),
                      tokens=torch.tensor([1, 2, 3, 4, 5]), prompt_length=prompt_length,
                      reward=reward, messages=messages, metrics=metrics, info=info, **extra)


def experiences() -> list[Experience]:
    """Three rollouts at step 1 and 2: one call with a tool call and reasoning, a
    two-call multi-turn rollout (one experience per call, in call order, as tunedsl's
    workflow emits them), and one recorded from the OpenAI API (reply text only)."""
    question = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Capital of France?"}]
    return [
        experience(1, 0, 0, reward=0.0, tools=TOOLS, messages=question + [
            {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL],
             "reasoning_content": "I should search."}]),
        experience(1, 0, 1, reward=1.0, messages=question + [
            {"role": "assistant", "content": "Let me think."}]),
        experience(1, 0, 1, reward=1.0, metrics={"reward": 1.0, "turns": 2.0},
                   messages=question + [{"role": "assistant", "content": "Let me think."},
                                        {"role": "user", "content": "Go on."},
                                        {"role": "assistant", "content": "Paris."}]),
        experience(2, 1, 0, reward=0.5, response_text="Lyon?",
                   info={"task_index": {"taskset_id": 0, "index": 7}}),
    ]


def make_run(run_dir: Path, store: str) -> Path:
    """A Trinity run directory: config.yaml, explorer and trainer TensorBoard events and
    the pipeline's saved input, in SQLite (``store="sql"``) or JSON Lines."""
    config = Config()
    config.project, config.name = "proj", "run1"
    config.algorithm.algorithm_type = "grpo"
    config.model.model_path = "Qwen/Qwen3-0.6B"
    config.monitor.cache_dir = str(run_dir / "monitor")
    if store == "sql":
        storage = StorageConfig(name="pipeline_input", storage_type="sql",
                                path=f"sqlite:///{run_dir / 'buffer' / 'explorer_output.db'}",
                                schema_type="experience", wrap_in_ray=False)
    else:
        saved = run_dir / "buffer" / "explorer_output.jsonl"
        config.data_processor.experience_pipeline.input_save_path = str(saved)
        storage = StorageConfig(storage_type="file", path=str(saved), schema_type="experience",
                                wrap_in_ray=False)
    (run_dir / "buffer").mkdir(parents=True)
    config.save(str(run_dir / "config.yaml"))
    write_with_trinity(storage, experiences())

    explorer = TensorboardMonitor("proj", "", "run1", "explorer", config)
    for step, value in TRAIN_REWARD:
        explorer.log({"rollout/reward/mean": value, "shared": 1.0}, step)
    for step, value in EVAL_REWARD:
        explorer.log({"eval/eval/reward/mean@1": value}, step)
    explorer.close()
    trainer = TensorboardMonitor("proj", "", "run1", "trainer", config)
    trainer.log({"actor/loss": 0.3, "shared": 2.0}, 1)  # written after the explorer's
    trainer.close()
    return run_dir


@pytest.fixture(scope="module", params=["sql", "jsonl"])
def source(request, tmp_path_factory):
    run_dir = make_run(tmp_path_factory.mktemp(request.param) / "proj" / "run1", request.param)
    return open_source(run_dir)


def test_kind_and_curves(source):
    assert source.kind == "trinity"
    assert source.curves["rollout/reward/mean"] == TRAIN_REWARD
    assert source.curves["eval/eval/reward/mean@1"] == EVAL_REWARD
    assert source.curves["actor/loss"] == [(1, pytest.approx(0.3))]
    # One name in two roles: the later-written value wins at a shared step.
    assert source.curves["shared"] == [(1, 2.0), (2, 1.0), (3, 1.0)]


def test_summary(source):
    rows = dict(source.summary)
    assert rows["algorithm"] == "grpo"
    assert rows["model"] == "Qwen/Qwen3-0.6B"
    assert (rows["name"], rows["project"]) == ("run1", "proj")
    assert rows["train reward"] == "0.2500 (step 1) -> 0.7500 (step 3)"
    assert rows["eval/eval/reward/mean@1"] == "0.1000 (step 0) -> 0.6000 (step 3)"
    assert rows["rollouts kept"] == "3 (0 errors)"
    assert rows["experiences from"] in ("buffer/explorer_output.db (4)",
                                        "buffer/explorer_output.jsonl (4)")


def test_entries_are_rollouts(source):
    assert [(e.step, e.task_index, e.run, e.reward, e.error) for e in source.entries] == [
        (1, 0, 0, 0.0, False), (1, 0, 1, 1.0, False), (2, 7, 0, 0.5, False)]
    assert source.meta()["steps"] == [(1, 2), (2, 1)]


def test_record_with_tool_call_and_reasoning(source):
    record = source.record(0)
    assert (record["id"], record["step"], record["group"], record["run"]) == (0, 1, 0, 0)
    assert record["reward"] == 0.0 and record["error"] is None and record["task"] is None
    [call] = record["calls"]
    assert call["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Capital of France?"}]
    assert call["tool_calls"] == [{"id": "call_1", "name": "search",
                                   "arguments": '{"q": "capital of France"}'}]
    assert call["reasoning"] == "I should search."
    assert call["reply"] == ""
    assert (call["prompt_tokens"], call["completion_tokens"]) == (3, 2)
    assert call["sampling"] == {"tools": TOOLS}
    assert set(call) == {"messages", "reply", "tool_calls", "reasoning", "finish_reason",
                         "prompt_tokens", "completion_tokens", "sampling"}


def test_multi_turn_rollout_keeps_call_order(source):
    record = source.record(1)
    assert [call["reply"] for call in record["calls"]] == ["Let me think.", "Paris."]
    assert record["calls"][1]["messages"][-1] == {"role": "user", "content": "Go on."}
    assert record["reward"] == 1.0
    assert record["metrics"] == {"reward": 1.0, "turns": 2.0}


def test_reply_text_only_experience(source):
    record = source.record(2)
    assert (record["step"], record["task_index"], record["group"]) == (2, 7, 1)
    [call] = record["calls"]
    assert call["messages"] == [] and call["reply"] == "Lyon?" and call["tool_calls"] == []


def test_without_trinity_or_tensorboard(source, monkeypatch):
    """Without Trinity the JSON Lines store still reads and the SQLite one says why it
    cannot; without tensorboard there are no curves and a row says so."""
    monkeypatch.setitem(sys.modules, "trinity.common.experience", None)
    monkeypatch.setitem(sys.modules,
                        "tensorboard.backend.event_processing.event_file_loader", None)
    bare = open_source(source.path)
    rows = dict(bare.summary)
    assert bare.curves == {} and rows["curves"].startswith("not shown: the tensorboard")
    assert rows["algorithm"] == "grpo"
    if (source.path / "buffer" / "explorer_output.db").exists():
        assert bare.entries == []
        assert rows["experiences (explorer_output.db)"].startswith(
            "not read: it needs trinity-rft to decode")
    else:
        assert bare.entries == source.entries


def test_step_explored_again_replaces_the_earlier(tmp_path):
    """A resumed run appends step 1 again: its later rollouts are shown, once each."""
    store = tmp_path / "run" / "buffer" / "explorer_output.jsonl"
    config = StorageConfig(storage_type="file", path=str(store), schema_type="experience",
                           wrap_in_ray=False)
    write_with_trinity(config, experiences())
    write_with_trinity(config, [experience(1, 0, 0, reward=0.9, response_text="Paris.")])
    source = open_source(tmp_path / "run")
    assert [(e.step, e.run, e.reward) for e in source.entries] == [(1, 0, 0.9), (2, 0, 0.5)]
    assert [call["reply"] for call in source.record(0)["calls"]] == ["Paris."]
    assert dict(source.summary)["experiences replaced"].startswith("3 ")


def test_corrupt_jsonl_line_is_one_line_error(tmp_path):
    store = tmp_path / "run" / "buffer" / "explorer_output.jsonl"
    write_with_trinity(StorageConfig(storage_type="file", path=str(store),
                                     schema_type="experience", wrap_in_ray=False),
                       experiences()[:2])
    with open(store, "a", encoding="utf-8") as handle:
        handle.write('{"eid": {"batch": 1,\n')  # a line cut short, as by a killed run
    with pytest.raises(DatasetError) as caught:
        open_source(tmp_path / "run")
    assert str(caught.value) == (f"{store}:3: not a JSON line (Expecting property name "
                                 f"enclosed in double quotes); fix or delete that line")
    assert "\n" not in str(caught.value)


def test_not_a_trinity_run(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "config.yaml").write_text("lr: 0.1\n")
    with pytest.raises(DatasetError, match=re.escape(f"{tmp_path / 'notes'}: not a run")):
        open_source(tmp_path / "notes")


def test_module_imports_no_trinity_torch_or_tensorboard():
    """The viewer's Trinity readers must stay light until a Trinity run is opened."""
    code = ("import sys, tunedsl.view.trinity_run, tunedsl.trinity_runs.config, "
            "tunedsl.view.tensorboard, tunedsl.trinity_runs.experiences; "
            "print(sorted({'trinity', 'torch', 'tensorboard'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).resolve().parents[1])
    assert result.stdout.strip() == "[]"


def test_a_rollout_without_a_model_call_shows_its_reward_and_no_call(tmp_path):
    """The placeholder tunedsl's workflow returns for a rollout that called no model is no
    call in the view; the rollout's reward is the one its metrics carry."""
    from tunedsl.backends.trinity.workflow import placeholder_experience
    from tunedsl.rollout.run import RolloutResult

    run_dir = tmp_path / "proj" / "run2"
    (run_dir / "buffer").mkdir(parents=True)
    config = Config()
    config.project, config.name = "proj", "run2"
    config.save(str(run_dir / "config.yaml"))
    placeholder = placeholder_experience(
        RolloutResult(response="8", reward=1.0, metrics={"lookups": 1.0}), trained=True)
    placeholder.eid = EID(batch=1, task=0, run=0)
    write_with_trinity(pipeline_store(run_dir),
                       [placeholder, experience(1, 0, 1, reward=0.0, response_text="7")])
    source = open_source(run_dir)
    assert [(e.step, e.run, e.reward) for e in source.entries] == [(1, 0, 1.0), (1, 1, 0.0)]
    record = source.record(0)
    assert (record["calls"], record["metrics"]) == ([], {"lookups": 1.0, "reward": 1.0})
