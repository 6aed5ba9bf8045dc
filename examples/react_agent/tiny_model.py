"""A tiny model for the ReAct example: printable-ASCII characters and a chat template
that renders a system prompt, tools, tool calls (Hermes ``<tool_call>`` format) and tool
results, built in code (no downloads).

    python -m examples.react_agent.tiny_model [FOLDER]

It only lets the example run end to end on a CPU (its random weights do not solve
maths); for real training name a real model, such as ``Qwen/Qwen3-0.6B``.
"""

from __future__ import annotations

import os
import string
import sys

from examples.arith.tiny_model import build_tiny_model, build_tokenizer

DEFAULT_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny-model")
SPECIALS = ["<pad>", "<eos>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]
CHARACTERS = sorted(set(string.printable) - set("\t\r\x0b\x0c"))
# Compact on purpose: every character is a token, and the tools line is in every prompt.
CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}<|system|>{{ messages[0].content }}{% endif %}"
    "{%- if tools %} Tools: {% for tool in tools %}{{ tool.function.name }}("
    "{{ tool.function.parameters.properties | list | join(', ') }}) {% endfor %}"
    " Call one as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>{% endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}<|user|>{{ message.content }}"
    "{%- elif message.role == 'assistant' %}<|assistant|>{{ message.content or '' }}"
    "{%- for call in message.tool_calls or [] %}<tool_call>{\"name\": \"{{ call.function.name }}"
    "\", \"arguments\": {{ call.function.arguments | tojson }}}</tool_call>{% endfor %}<eos>"
    "{%- elif message.role == 'tool' %}<|tool|>{{ message.content }}{% endif %}"
    "{%- endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build(folder: str = DEFAULT_FOLDER, seed: int = 0) -> str:
    """Write the tiny model and its tokenizer to ``folder`` (skipped if already there)."""
    tokenizer = build_tokenizer(SPECIALS, CHARACTERS, CHAT_TEMPLATE)
    return build_tiny_model(folder, seed, tokenizer=tokenizer, max_positions=1024)


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_FOLDER))
