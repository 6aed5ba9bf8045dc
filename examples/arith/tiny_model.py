"""A tiny Llama-style model and a character-level tokenizer, built in code (no downloads).

    python -m examples.arith.tiny_model [FOLDER]

writes a Hugging Face model folder (default ``examples/arith/tiny-model``) that
``transformers.AutoModelForCausalLM`` and ``AutoTokenizer`` load like any other: two
layers, 64 wide, a vocabulary of digits and arithmetic signs, and a chat template.
The weights are random (seeded); RL is what teaches it arithmetic.
"""

from __future__ import annotations

import os
import sys

DEFAULT_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny-model")
SPECIALS = ["<pad>", "<eos>", "<user>", "<assistant>"]
CHARACTERS = list("0123456789+-*=? ")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}<user>{{ message['content'] }}"
    "{% elif message['role'] == 'assistant' %}<assistant>{{ message['content'] }}<eos>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def build_tokenizer(specials: list[str] = SPECIALS, characters: list[str] = CHARACTERS,
                    chat_template: str = CHAT_TEMPLATE):
    """A character-level fast tokenizer whose special tokens frame chat turns (the first two
    specials pad and end a sequence; an unknown character reads as ``?``)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(specials + characters)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="?"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=specials[0], eos_token=specials[1], unk_token="?",
        padding_side="left",
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def build_tiny_model(folder: str = DEFAULT_FOLDER, seed: int = 0, *, tokenizer=None,
                     max_positions: int = 64, hidden_size: int = 64, layers: int = 2,
                     heads: int = 4, intermediate_size: int | None = None,
                     initializer_range: float = 0.02) -> str:
    """Write the tiny model and its tokenizer (`build_tokenizer`'s by default) to
    ``folder``, skipped if already there; the sizes make larger models of the same kind
    (the MLP twice as wide as the model unless told). ``initializer_range`` is the weights'
    standard deviation: at the default, the tied output head's logits stay within about
    +-1.3 (normalized hidden state of norm 8 times embeddings of norm 0.16), so only
    training the embeddings themselves can make a reply likely; LoRA adapters, which leave
    them frozen, need a wider start such as 0.2."""
    if os.path.isfile(os.path.join(folder, "config.json")):
        return folder
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tokenizer or build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=max_positions, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None, initializer_range=initializer_range,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


if __name__ == "__main__":
    print(build_tiny_model(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_FOLDER))
