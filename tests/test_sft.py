"""Supervised fine-tuning (``Algorithm("sft")``, alone or as a ``warmup`` before RL): the
settings it takes and refuses, the conversations it reads, and the Trinity config it
becomes, loaded and checked by real Trinity-RFT (its validators, its stage iteration, its
SFT reader over the same file)."""

from __future__ import annotations

import json

import pytest

import tunedsl
from tunedsl.errors import ConfigError, DatasetError
from tunedsl.data.conversations import check_conversations, conversation_problem

from .local_support import AGENTS, REPO

LABEL = "{name} (tests/fixtures/local/agents.py:0): "
#: Where a problem with a value the test's overrides gave is said (sweep 46 A-W5).
OVERRIDES = "overrides: "


def load(name, tmp_path, *overrides, model="tiny"):
    return tunedsl.load_experiment(f"{AGENTS}:{name}", overrides=[
        f"model.model_path={model}", f"checkpoint_root_dir={tmp_path}", *overrides])


def refusal(name, tmp_path, *overrides) -> str:
    with pytest.raises(ConfigError) as info:
        load(name, tmp_path, *overrides)
    return str(info.value)


# ------------------------------------------------------------------ settings


def test_settings_sft_cannot_use_are_refused_each_in_one_line(tmp_path):
    found = refusal("Supervised", tmp_path, "algorithm.group_size=4",
                    "algorithm.on_truncated_reply=mask", "algorithm.kl_loss_fn=k2",
                    "algorithm.std_threshold=0.0", "algorithm.entropy_coef=0.01")
    label = OVERRIDES
    assert found.splitlines() == [
        label + "algorithm.std_threshold: sft learns from no reward, so it has no advantage "
                "function to take std_threshold; remove it",
        label + "algorithm.kl_loss_fn: sft trains without a reference model (Trinity's trainer "
                "keeps none for it), so it can have no KL loss; leave kl_loss_fn unset",
        label + "algorithm.entropy_coef: sft has no entropy bonus (Trinity's entropy_loss_fn "
                "'none'); leave it unset",
        label + "algorithm.group_size: sft trains on train_dataset's conversations, not on "
                "rollouts; remove it",
        label + "algorithm.on_truncated_reply: sft trains on train_dataset's conversations, "
                "not on rollouts; remove it",
    ]


def test_a_warmup_must_be_sft_with_a_dataset_and_take_no_run_settings(tmp_path):
    label = OVERRIDES
    assert refusal("Arith", tmp_path, "warmup.algorithm_type=grpo").splitlines() == [
        label + "warmup.algorithm_type = 'grpo': a warm-up is supervised fine-tuning before "
                "RL; use Algorithm(\"sft\", ...)",
        label + "warmup: no warmup_dataset to learn from; add warmup_dataset = "
                "Dataset(\"path/to/conversations\")"]
    assert refusal("Arith", tmp_path, "warmup_dataset.path=data") == (
        label + "warmup_dataset is set without warmup; add warmup = Algorithm(\"sft\", "
                "learning_rate=1e-5) to train on it before RL")
    assert refusal("WarmedUp", tmp_path, "warmup.save_interval_steps=5",
                   "warmup.group_size=2", "warmup.kl_coef=0.1").splitlines() == [
        label + "warmup.kl_coef: sft has no KL loss (kl_loss_fn = 'none'); set "
                "warmup.kl_loss_fn too, e.g. 'k2'",
        label + "warmup.group_size: the warm-up runs no rollouts; remove it",
        label + "warmup.save_interval_steps: the warm-up saves and evaluates as the run does; "
                "set algorithm.save_interval_steps"]
    label = LABEL.format(name="WarmedUp")  # (the settings these name are the class's)
    assert refusal("WarmedUp", tmp_path, "algorithm.algorithm_type=sft",
                   "train_dataset.path=x").splitlines() == [
        label + "algorithm.group_size: sft trains on train_dataset's conversations, not on "
                "rollouts; remove it",
        label + "warmup: the experiment's algorithm is sft already; remove warmup, or choose "
                "an RL algorithm to follow it"]
    # (the warm-up is the class's, the LoRA the override's: both named)
    assert refusal("WarmedUp", tmp_path, "model.lora.rank=4") == (
        label[:-2] + ", " + OVERRIDES + "warmup: model.lora trains adapters, and a warm-up's adapters would have to "
                "be merged before RL adds its own; warm up without LoRA, or run the SFT as an "
                "experiment of its own")


def test_a_warmup_is_read_from_toml_like_any_record(tmp_path):
    settings = tmp_path / "s.toml"
    (tmp_path / "chats").mkdir()
    settings.write_text('[warmup]\nalgorithm_type = "sft"\nlearning_rate = 2e-5\n'
                        'batch_size = 4\n[warmup_dataset]\npath = "chats"\n')
    graph = tunedsl.load_experiment(f"{AGENTS}:Arith", settings=str(settings),
                                    overrides=["model.model_path=tiny"])
    assert (graph.warmup.algorithm_type, graph.warmup.learning_rate,
            graph.warmup.batch_size) == ("sft", 2e-5, 4)
    assert graph.warmup_dataset.path == str(tmp_path / "chats")  # beside the file naming it


# ------------------------------------------------------------------ conversations


@pytest.mark.parametrize("row, problem", [
    ({"message": []}, "no 'messages' column (did you mean 'message'?); its keys are message"),
    ({"messages": "[{"}, "'messages' is text but not JSON (Expecting property name enclosed "
                          "in double quotes)"),
    ({"messages": []}, "'messages' must be a non-empty list of chat messages (got [])"),
    ({"messages": [{"role": "bot", "content": "x"}]},
     "message 0 must be an object with a role of system, user, assistant, tool (got "
     "{'role': 'bot', 'content': 'x'})"),
    ({"messages": [{"role": "user", "content": 3}]},
     "message 0 (user) has no text content (got 3)"),
    ({"messages": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]},
     "the last message is the user's; SFT learns the last message, which must be the "
     "assistant's reply"),
    ({"messages": [{"role": "assistant", "content": "hi"}]},
     "the assistant's reply has no message before it to answer"),
    ({"messages": [{"role": "user", "content": "x"},
                   {"role": "assistant", "content": None, "tool_calls": "get_weather()"}]},
     "message 1 (assistant) 'tool_calls' must be a list of calls like {\"type\": \"function\", "
     "\"function\": {\"name\": \"...\", \"arguments\": \"{...}\"}} (got 'get_weather()')"),
    ({"messages": [{"role": "user", "content": "x"},
                   {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}]},
     "message 1 (assistant) tool call 0 must be like {\"type\": \"function\", \"function\": "
     "{\"name\": \"...\", \"arguments\": \"{...}\"}} (got {'id': '1'})"),
    ({"messages": [{"role": "user", "content": "x"},
                   {"role": "assistant", "content": [{"type": "text", "text": "y"}]}]},
     "message 1 (assistant) has its content as a list of parts; give the text as one string "
     "(SFT's chat template reads text)"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []},
                   {"role": "assistant", "content": "y"}]},
     "message 0 (user) has 'tool_calls'; only the assistant's messages call tools"),
])
def test_what_is_not_a_conversation_is_named(row, problem):
    assert conversation_problem(row) == problem


def test_conversations_as_json_text_and_tool_calls_are_conversations():
    calls = [{"role": "user", "content": "weather?"},
             {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "1", "type": "function",
                  "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]},
             {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "Sunny."}]
    assert conversation_problem({"messages": json.dumps(calls)}) is None
    assert conversation_problem({"messages": calls}) is None


def test_bad_conversations_are_refused_with_file_and_line(tmp_path):
    good = {"messages": [{"role": "user", "content": "1+1="},
                         {"role": "assistant", "content": "2"}]}
    bad = {"messages": [{"role": "user", "content": "1+1="}]}
    lines = [good, bad, good, bad, bad, {"prompt": "x"}, bad]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    dataset = tunedsl.Dataset(str(tmp_path))
    with pytest.raises(DatasetError) as info:
        check_conversations(dataset, "warmup_dataset", 2)
    last = ("the last message is the user's; SFT learns the last message, which must be the "
            "assistant's reply")
    path = tmp_path / "train.jsonl"
    assert str(info.value).splitlines() == [
        f"warmup_dataset: {path}:2: {last}", f"warmup_dataset: {path}:4: {last}",
        f"warmup_dataset: {path}:5: {last} (2 more rows like these)"]
    (tmp_path / "train.jsonl").write_text(json.dumps(good) + "\n")
    with pytest.raises(DatasetError) as info:
        check_conversations(dataset, "train_dataset", 2)
    assert str(info.value) == (
        f"train_dataset: {tmp_path} (split 'train') has 1 conversations, fewer than a step's "
        f"batch_size = 2; lower batch_size or add conversations")


def test_check_reads_conversations_and_tries_the_workflow_on_an_eval_task(tmp_path,
                                                                          tiny_model):
    from .cli_support import cli

    done = cli("check", f"{AGENTS}:Supervised", "--backend", "local", "--set",
               f"model.model_path={tiny_model}", "--set", f"checkpoint_root_dir={tmp_path}")
    assert done.returncode == 0, done.stderr
    data = REPO / "examples/arith"
    assert (f"ok  train_dataset: {data / 'conversations'} (split 'train'): 45 conversations "
            f"readable, each ending in the assistant's reply to learn") in done.stdout
    assert "ok  rollout: workflow and judge ran on the first eval task with a scripted model " \
           "(reward 0)" in done.stdout
