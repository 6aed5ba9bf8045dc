"""The local backend's chat model (chat.py): the chat template, the OpenAI client, replies
within max_model_len, tool calls and reasoning read from the reply."""

from __future__ import annotations

import asyncio
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tunedsl.backends.local.chat import ChatCodec, LocalChatModel  # noqa: E402
from tunedsl.backends.local.engine import Engine  # noqa: E402
from tunedsl.backends.local.models import load_policy  # noqa: E402

from .local_support import graph_for  # noqa: E402


def test_openai_client_reaches_the_same_model_and_is_recorded(tiny_model):
    """A workflow that uses model.openai_client trains like one that uses model.chat."""
    model, tokenizer = load_policy(graph_for("Arith", tiny_model, "/tmp"))
    engine = Engine(model.eval(), eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id)
    chat = LocalChatModel(engine, ChatCodec(tokenizer), name="tiny", sampling={"max_tokens": 3})
    completion = asyncio.run(chat.openai_client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "2+2="}], max_tokens=1))
    assert len(chat.calls) == 1 and len(chat.calls[0].response_ids) == 1
    assert completion.choices[0].message.content == tokenizer.decode(
        list(chat.calls[0].response_ids), skip_special_tokens=True)
    assert completion.usage.completion_tokens == 1


def test_max_model_len_bounds_prompt_and_reply(tiny_model):
    """A prompt that fills max_model_len fails that call, naming both lengths; a shorter one
    gets a reply cut to the room left."""
    from tunedsl.models.server import BadRequest

    model, tokenizer = load_policy(graph_for("Arith", tiny_model, "/tmp"))
    engine = Engine(model.eval(), eos_token_id=len(tokenizer) + 1,  # no EOS: fill the room
                    pad_token_id=tokenizer.pad_token_id)
    chat = LocalChatModel(engine, ChatCodec(tokenizer), name="tiny", sampling={"max_tokens": 64},
                          max_model_len=32)
    long = [{"role": "user", "content": "1+1=" * 2000}]
    with pytest.raises(BadRequest) as info:
        asyncio.run(chat.chat(long))
    assert str(info.value) == ("the prompt is 8002 tokens, and max_model_len = 32 leaves no room "
                               "for a reply; shorten the prompt or raise max_model_len")
    asyncio.run(chat.chat([{"role": "user", "content": "12+7=12+7="}]))
    call = chat.calls[-1]
    assert len(call.prompt_ids) + len(call.response_ids) == 32


class ScriptedEngine:
    """Stands in for the sampler where a test needs a known reply: it "samples" the tokens of
    ``text`` (with made-up log-probs); everything after it is the real LocalChatModel."""

    def __init__(self, tokenizer, text):
        self.ids = tuple(tokenizer(text, add_special_tokens=False)["input_ids"])

    async def generate(self, prompt_ids, *, temperature, top_p, max_tokens):
        from tunedsl.backends.local.engine import Sample

        ids = self.ids[:max_tokens]
        return Sample(ids, tuple(-0.5 for _ in ids), "stop")


def test_reasoning_parsers_split_thinking_from_the_answer_as_vllm_does():
    """qwen3 needs both tags; deepseek_r1 reads up to </think>, and an unclosed think is all
    reasoning."""
    from tunedsl.backends.local.chat import split_reasoning

    assert split_reasoning("<think>add</think> 5", "qwen3") == ("5", "add")
    assert split_reasoning("add</think> 5", "qwen3") == ("add</think> 5", None)
    assert split_reasoning("add</think> 5", "deepseek_r1") == ("5", "add")
    assert split_reasoning("<think>still adding", "deepseek_r1") == ("", "still adding")
    assert split_reasoning("<think>x</think>5", None) == ("<think>x</think>5", None)


def test_the_local_model_moves_thinking_into_reasoning_content(tmp_path):
    """With reasoning_parser set, the reply's thinking is reasoning_content, through chat and
    through openai_client, as on Trinity; the trained tokens are the whole reply."""
    from examples.react_agent.tiny_model import CHARACTERS, CHAT_TEMPLATE, SPECIALS
    from examples.arith.tiny_model import build_tokenizer

    tokenizer = build_tokenizer(SPECIALS, CHARACTERS, CHAT_TEMPLATE)
    text = "<think>3 and 2 make 5</think>The answer is 5."
    chat = LocalChatModel(ScriptedEngine(tokenizer, text), ChatCodec(tokenizer), name="m",
                          sampling={}, reasoning_parser="qwen3")
    reply = asyncio.run(chat.chat([{"role": "user", "content": "3+2?"}]))
    assert (reply.content, reply.reasoning_content) == ("The answer is 5.", "3 and 2 make 5")
    assert len(chat.calls[0].response_ids) == len(text)
    completion = asyncio.run(chat.openai_client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "3+2?"}]))
    message = completion.choices[0].message
    assert (message.content, message.reasoning_content) == ("The answer is 5.", "3 and 2 make 5")


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


def test_a_typo_in_a_chat_option_is_refused_not_sampled_with_the_default(tiny_model):
    """``temprature=0.5`` ran at the default temperature (exit 0): the local model, the
    test kit's scripted model and a direct endpoint model now refuse an option they do not
    take, naming the closest one."""
    from tunedsl.models.endpoint import OpenAIChatModel
    from tunedsl.models.scripted import ScriptedModel
    from tunedsl.models.server import BadRequest

    model, tokenizer = load_policy(graph_for("Arith", tiny_model, "/tmp"))
    engine = Engine(model.eval(), eos_token_id=1, pad_token_id=tokenizer.pad_token_id)
    local = LocalChatModel(engine, ChatCodec(tokenizer), name="tiny", sampling={})
    messages = [{"role": "user", "content": "1+1="}]
    with pytest.raises(BadRequest) as info:
        asyncio.run(local.chat(messages, temprature=0.5))
    assert str(info.value) == (
        "model.chat() got the unknown option(s) 'temprature' (did you mean 'temperature'?); "
        "it takes chat_template_kwargs, max_tokens, stop, temperature, tool_choice, tools, "
        "top_p")
    with pytest.raises(BadRequest, match="the unknown option.s. 'seed'; it takes"):
        asyncio.run(local.chat(messages, seed=3))  # an OpenAI option it cannot honour
    openai_typo = ("model.chat() got the unknown option(s) 'max_token' (did you mean "
                   "'max_tokens'?); it takes the OpenAI chat-completions parameters (a "
                   "server's own go in extra_body)")
    with pytest.raises(TypeError) as info:
        asyncio.run(ScriptedModel(["2"]).chat(messages, max_token=3))
    assert str(info.value) == openai_typo
    endpoint = OpenAIChatModel(client=None, model="m", direct=True)  # refused before sending
    with pytest.raises(TypeError) as info:
        asyncio.run(endpoint.chat(messages, max_token=3))
    assert str(info.value) == openai_typo
