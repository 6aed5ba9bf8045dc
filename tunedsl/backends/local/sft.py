"""Supervised fine-tuning on the local backend: conversations as training samples.

A conversation becomes tokens exactly as Trinity-RFT 0.6.0's SFT reader makes them
(``buffer/schema/formatter.py``, ``SFTFormatter`` for ``messages``): the whole conversation
through the chat template, the prompt being the template of every message but the last
with the generation prompt added, and the reply everything after the prompt's length (the
template's end-of-turn tokens included). The trainer's loss is Trinity's ``SFTLossFn``: the
reply tokens' negative log-likelihood, aggregated with ``loss_agg_mode``
(`tunedsl.backends.local.losses`).
"""

from __future__ import annotations

from typing import Any

from ...data.conversations import conversation, tools
from ...errors import ConfigError
from .batches import TrainingSample


def encode_conversation(tokenizer: Any, row: dict[str, Any], *,
                        enable_thinking: bool | None = None) -> tuple[list[int], int]:
    """A conversation's tokens and its prompt's length, as Trinity's ``SFTFormatter``."""
    messages = conversation(row)
    common = dict(chat_template=None, tools=tools(row), tokenize=True, return_tensors="pt",
                  enable_thinking=enable_thinking)
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=False,
                                           return_dict=True, **common)
    prompt = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True,
                                           return_dict=False, **common)[0]
    return inputs["input_ids"][0].tolist(), len(prompt)


def conversation_samples(tokenizer: Any, rows: list[dict[str, Any]], *, section: str,
                         max_model_len: int | None,
                         enable_thinking: bool | None = None) -> list[TrainingSample]:
    """Every conversation as a training sample (its reply the response; no advantage, no
    sampling), or a `ConfigError` naming the first that cannot be learned from."""
    samples = []
    for number, row in enumerate(rows, start=1):
        tokens, prompt = encode_conversation(tokenizer, row, enable_thinking=enable_thinking)
        if prompt >= len(tokens):
            raise ConfigError(f"{section}: row {number}: the chat template leaves the "
                              f"assistant's reply no tokens after the prompt; check the "
                              f"model's chat template")
        if max_model_len is not None and len(tokens) > max_model_len:
            raise ConfigError(f"{section}: row {number}: the conversation is {len(tokens)} "
                              f"tokens, longer than model.max_model_len = {max_model_len}; "
                              f"shorten it or raise max_model_len")
        reply = tuple(tokens[prompt:])
        samples.append(TrainingSample(tuple(tokens[:prompt]), reply, (0.0,) * len(reply), 0.0,
                                      temperature=1.0, top_p=1.0))
    return samples
