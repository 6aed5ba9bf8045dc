"""SFT on Trinity-RFT: the config tunedsl writes is loaded and checked by real Trinity (its
validators, and its launcher's stage iteration for a warm-up), and Trinity's own SFT reader,
over the file that config names, hands its trainer the very token sequences, in the very
order, that the local backend trains on."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("trinity.common.config")
pytest.importorskip("transformers")

import tunedsl  # noqa: E402
from tunedsl.backends.local.schedule import Schedule, read_rows  # noqa: E402
from tunedsl.backends.local.sft import conversation_samples  # noqa: E402
from tunedsl.backends.trinity.cluster import Cluster  # noqa: E402
from tunedsl.backends.trinity.config import trinity_config  # noqa: E402
from tunedsl.backends.trinity.validate import validate_with_trinity  # noqa: E402
from tunedsl.errors import ConfigError  # noqa: E402

from . import trinity_runner  # noqa: E402,F401 - vLLM's import-only shim, where it is missing
from .local_support import AGENTS  # noqa: E402
from .trinity_support import validate  # noqa: E402


def graph(name, tiny_model, tmp_path, *overrides):
    return tunedsl.load_experiment(f"{AGENTS}:{name}", overrides=[
        f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}", *overrides])


def test_sft_alone_is_trinitys_mode_train_on_the_conversations(tiny_model, tmp_path):
    experiment = graph("Supervised", tiny_model, tmp_path)
    config = validate(experiment, tmp_path)
    assert config.mode == "train"
    algorithm = config.algorithm
    assert (algorithm.algorithm_type, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.entropy_loss_fn, algorithm.loss_agg_mode,
            algorithm.policy_loss_fn_args) == ("sft", "sft", "none", "none", "token-mean",
                                               {"loss_agg_mode": "token-mean"})
    assert algorithm.optimizer.lr == 1e-3
    buffer = config.buffer
    assert (buffer.batch_size, buffer.train_batch_size, buffer.total_steps) == (5, 5, 4)
    assert buffer.explorer_input.taskset is None and not buffer.explorer_input.tasksets
    conversations = buffer.trainer_input.experience_buffer
    assert (conversations.path, conversations.split, conversations.storage_type,
            conversations.schema_type, conversations.format.messages_key,
            conversations.data_selector.selector_type, conversations.data_selector.seed) == (
        experiment.train_dataset.path, "train", "file", "sft", "messages", "shuffle", 1)


def _trinity_batches(experience_buffer, steps):
    """What Trinity's SFT reader hands the trainer, step by step: (tokens, prompt length)."""
    from trinity.buffer import get_buffer_reader

    reader = get_buffer_reader(experience_buffer)

    async def read():
        return [await reader.read() for _ in range(steps)]

    return [[(tuple(e.tokens.tolist()), e.prompt_length) for e in batch]
            for batch in asyncio.run(read())]


def _local_batches(experiment, section, record, steps):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(experiment.model.model_path)
    samples = conversation_samples(tokenizer, read_rows(getattr(experiment, section), section),
                                   section=section, max_model_len=experiment.model.max_model_len)
    schedule = Schedule(len(samples), record.batch_size, record.seed)
    return [[(samples[i].prompt_ids + samples[i].response_ids, len(samples[i].prompt_ids))
             for i in schedule.indices(step)] for step in range(steps)]


def test_trinitys_sft_reader_yields_the_local_trainers_samples_in_its_order(tiny_model,
                                                                            tmp_path):
    """Nine steps of five from 45 conversations: the order crosses an epoch's end."""
    experiment = graph("Supervised", tiny_model, tmp_path, "train_dataset.total_steps=11")
    config = validate(experiment, tmp_path)
    expected = _local_batches(experiment, "train_dataset", experiment.algorithm, 11)
    assert _trinity_batches(config.buffer.trainer_input.experience_buffer, 11) == expected
    assert len({tokens for batch in expected for tokens, _ in batch}) == 45


def test_a_multi_turn_conversation_with_a_system_prompt_is_tokenized_as_trinity_does(
        tiny_model, tmp_path):
    import json

    from transformers import AutoTokenizer
    from trinity.buffer.schema.formatter import SFTFormatter
    from trinity.common.config import FormatConfig

    from tunedsl.backends.local.sft import encode_conversation

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.chat_template = (  # a richer template than the arith model's
        "{% for m in messages %}<user>{{ m['role'][0] }}{{ m['content'] }}"
        "{% if m['role'] == 'assistant' %}<eos>{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}")
    tokenizer.save_pretrained(tmp_path / "tok")
    rows = [{"messages": [{"role": "system", "content": "12"},
                          {"role": "user", "content": "3+4="},
                          {"role": "assistant", "content": "7"},
                          {"role": "user", "content": "1+1="},
                          {"role": "assistant", "content": "2 2"}]},
            {"messages": json.dumps([{"role": "user", "content": "9+0="},
                                     {"role": "assistant", "content": "9"}])}]
    formatter = SFTFormatter(str(tmp_path / "tok"), FormatConfig(messages_key="messages"))
    for row in rows:
        experience = formatter.format(row)
        tokens, prompt = encode_conversation(tokenizer, row)
        assert (tokens, prompt) == (experience.tokens.tolist(), experience.prompt_length)
        assert prompt < len(tokens)


def test_a_warmup_is_two_trinity_stages_each_checked_by_trinity(tiny_model, tmp_path):
    experiment = graph("WarmedUp", tiny_model, tmp_path, "warmup.learning_rate=2e-5",
                       "warmup.lr_scheduler=cosine", "warmup.loss_agg_mode=seq-mean-token-sum",
                       "warmup.batch_size=6")
    config = trinity_config(experiment, name="run")
    warmup, rl = config["stages"]
    assert rl == {"stage_name": "rl"}
    assert (warmup["stage_name"], warmup["mode"]) == ("sft_warmup", "train")
    assert warmup["algorithm"]["optimizer"] == {"lr": 2e-5, "lr_scheduler_type": "cosine"}
    assert warmup["buffer"]["trainer_input"]["experience_buffer"]["path"] == \
        experiment.warmup_dataset.path
    assert validate_with_trinity(config, Cluster(1, 2))[2:] == [
        "trinity: stage 1/2 (sft_warmup): algorithm sft, on 1 node x 2 GPUs, the trainer on 2 "
        "GPUs (mode train: no explorer); verl splits each step's 6 experiences evenly, 3 to "
        "each of its 2 data-parallel ranks",
        "trinity: stage 2/2 (rl): mode both, algorithm grpo, accepted"]
    first, second = _stages(config, tmp_path)
    assert (first.mode, first.algorithm.algorithm_type, first.algorithm.loss_agg_mode,
            first.buffer.train_batch_size, first.algorithm.optimizer.lr) == (
        "train", "sft", "seq-mean-token-sum", 6, 2e-5)
    assert first.name.endswith("/sft_warmup") and second.name.endswith("/rl")
    assert (second.mode, second.algorithm.algorithm_type, second.algorithm.kl_loss_fn,
            second.buffer.train_batch_size) == ("both", "grpo", "k2", 20)
    expected = _local_batches(experiment, "warmup_dataset", experiment.warmup, 3)
    assert _trinity_batches(first.buffer.trainer_input.experience_buffer, 3) == expected


def _stages(config, folder):
    """Trinity's launcher's view of a staged config: each stage as it runs, checked."""
    from trinity.common.config import load_config

    from tunedsl.backends.trinity.config import to_yaml

    config = {**config, "checkpoint_root_dir": str(folder / "ckpt"),
              "cluster": {"node_num": 1, "gpu_per_node": 2}}
    (folder / "config.yaml").write_text(to_yaml(config))
    stages = list(load_config(str(folder / "config.yaml")))
    return [stage.check_and_update() for stage in stages]


def test_a_warmup_batch_verl_cannot_split_is_refused(tiny_model, tmp_path):
    experiment = graph("WarmedUp", tiny_model, tmp_path)
    with pytest.raises(ConfigError) as info:
        validate_with_trinity(trinity_config(experiment, name="run"), Cluster(1, 4))
    assert str(info.value) == (
        "warmup.batch_size = 5: on 1 node x 4 GPUs the warm-up trains on 4 GPUs, and verl "
        "splits each step's conversations evenly over its 4 data-parallel ranks; make "
        "warmup.batch_size a multiple of 4")
