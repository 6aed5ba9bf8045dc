"""AgentScope agents as users write them, on every tunedsl path: the test kit, eval against
loopback servers (a scripted stand-in and `transformers serve`), rescore, and local training.

Also the in-process OpenAI server's protocol as agent frameworks use it: streaming with
stream_options, n, stop, tool_choice, content parts, and a 400 for what it does not support.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

agentscope = pytest.importorskip("agentscope")
if int(agentscope.__version__.split(".")[0]) >= 2:
    pytest.skip("AgentScope 1.0.x tests (tests/test_agentscope2.py covers 2.x)",
                allow_module_level=True)
openai = pytest.importorskip("openai")

from agentscope.message import Msg  # noqa: E402

import tunedsl  # noqa: E402
from tunedsl import ChatResponse, ToolCall  # noqa: E402
from tunedsl.testing import ScriptedModel, run_rollout  # noqa: E402

from .fixtures import agentscope_tutorial as tutorial  # noqa: E402
from .cli_support import cli  # noqa: E402
from .openai_server import OpenAIServer, sums  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURE = "tests.fixtures.agentscope_tutorial"
TASK = {"question": "What is 341 plus 980?", "answer": "1321"}


def lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


# ------------------------------------------------------------------------------- test kit


def test_the_tutorials_agent_scores_in_the_test_kit():
    """The tutorial's ReActAgent gets an AgentScope model; its Msg reaches the judge."""
    right = run_rollout(tutorial.Tutorial, TASK, ScriptedModel(["The answer is 1321."]))
    wrong = run_rollout(tutorial.Tutorial, TASK, ScriptedModel(["I do not know."]))
    assert (right.reward, wrong.reward) == (1.0, 0.0)
    assert isinstance(right.response, Msg)
    assert right.response.get_text_content() == "The answer is 1321."
    [call] = right.calls
    assert [m["role"] for m in call.messages] == ["system", "user"]
    assert call.messages[1]["content"] == [{"type": "text", "text": TASK["question"]}]
    assert call.streamed is False  # an annotated parameter's model does not stream


def test_the_explicit_model_streams_and_every_call_is_recorded():
    """as_agentscope(model, stream=True) streams through the in-process server."""
    model = ScriptedModel(["The answer is 1321."])
    trajectory = run_rollout(tutorial.Streaming, TASK, model)
    assert trajectory.reward == 1.0 and len(trajectory.calls) == 1
    assert trajectory.calls[0].response.content == "The answer is 1321."
    assert trajectory.calls[0].streamed is True  # recorded, though the server answers whole


def test_an_agent_handed_tunedsl_s_model_itself_is_told_how_to_get_an_agentscope_model():
    """A ReActAgent given the workflow's ``model`` without the ``ChatModelBase`` annotation
    failed with "'ScriptedModel' object is not callable", and no word on the fix."""
    from tunedsl.errors import RolloutError

    with pytest.raises(RolloutError) as failed:
        run_rollout(tutorial.Unannotated, TASK, ScriptedModel(["The answer is 1321."]))
    assert str(failed.value).endswith(
        "raised TypeError: 'ScriptedModel' object is not callable; an AgentScope agent calls "
        "its model: annotate the parameter (model: ChatModelBase) to be handed an AgentScope "
        "model, or give the agent tunedsl.as_agentscope(model)")


def test_as_agentscope_of_an_agentscope_model_says_it_is_one_already():
    """``as_agentscope(model, stream=True)`` on the model a ``ChatModelBase``-annotated
    workflow received was told to "give the ChatModel a workflow received", which it had
    (sweep 30 W-02)."""
    import tunedsl
    from tunedsl.errors import ConfigError

    handed = tunedsl.as_agentscope(ScriptedModel(["x"]))  # what the annotation hands over
    with pytest.raises(ConfigError) as caught:
        tunedsl.as_agentscope(handed, stream=True)
    assert str(caught.value) == (
        f"as_agentscope({type(handed).__name__}): the model is an AgentScope model already "
        f"(the workflow's ChatModelBase annotation made it one), so use it as it is; to "
        f"stream, set model.stream = True")


def test_a_tool_call_trajectory_records_each_model_call():
    """A ReAct step that calls a tool, then answers: two calls, the tool's result in the second."""
    from examples.react_agent.experiment import ReActMath

    call = ToolCall(id="c1", name="calculate", arguments='{"expression": "341+980"}')
    model = ScriptedModel([ChatResponse(content="", tool_calls=[call]), "It is 1321."])
    trajectory = run_rollout(ReActMath, TASK, model)
    assert trajectory.reward == 1.0
    first, second = trajectory.calls
    assert first.sampling["tools"][0]["function"]["name"] == "calculate"
    assert second.messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "1321",
                                   "name": "calculate"}


def test_detecting_the_annotation_does_not_import_agentscope():
    """A workflow in a module that never imported AgentScope runs without importing it."""
    code = ("import sys\nfrom tunedsl.testing import ScriptedModel, run_rollout\n"
            "from examples.math_agent.experiment import MathAgent\n"
            "run_rollout(MathAgent, {'question': '2+3?', 'answer': '5'}, "
            "ScriptedModel(['Answer: 5']))\nprint('agentscope' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


# -------------------------------------------------------------------- the in-process server


def ask(model, **request):
    async def go():
        return await model.openai_client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "2+3"}], **request)

    return asyncio.run(go())


def test_streaming_answers_in_chunks_with_usage_last():
    """stream=True with include_usage: role and text, tool calls, finish reason, then usage."""
    call = ToolCall(id="c1", name="add", arguments='{"a": 2}')
    model = ScriptedModel([ChatResponse(content="thinking", tool_calls=[call])])

    async def collect():
        stream = await model.openai_client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "2+3"}], stream=True,
            stream_options={"include_usage": True})
        return [chunk async for chunk in stream]

    chunks = asyncio.run(collect())
    assert chunks[0].choices[0].delta.content == "thinking"
    assert chunks[1].choices[0].delta.tool_calls[0].function.name == "add"
    assert chunks[2].choices[0].finish_reason == "stop"
    assert chunks[3].choices == [] and chunks[3].usage.total_tokens == 0
    assert model.calls[0].sampling == {}


def test_n_choices_are_each_a_recorded_call():
    """n=3 answers three choices, and the model records three calls."""
    model = ScriptedModel(["a", "b", "c"])
    completion = ask(model, n=3)
    assert [c.message.content for c in completion.choices] == ["a", "b", "c"]
    assert len(model.calls) == 3


def test_stop_ends_the_reply_before_the_stop_string():
    """stop cuts the text before the first stop string, with finish_reason stop."""
    completion = ask(ScriptedModel(["5, then more"]), stop=[",", "then"])
    assert (completion.choices[0].message.content, completion.choices[0].finish_reason) == (
        "5", "stop")


def test_an_unsupported_option_is_a_400_that_names_it():
    """Options the server cannot honour are refused, never ignored."""
    with pytest.raises(openai.BadRequestError, match=r"unsupported request option\(s\): "
                                                     r"response_format, seed; "):
        ask(ScriptedModel(["x"]), response_format={"type": "json_object"}, seed=3)


# ----------------------------------------------------------------------------------- eval


def test_eval_keeps_the_msg_and_rescore_hands_the_judge_a_msg_again(tmp_path):
    """The Msg response is saved as its text, data and class; rescore rebuilds it."""
    out, rescored = tmp_path / "results.jsonl", tmp_path / "rescored.jsonl"
    with OpenAIServer(sums) as server:
        done = cli("eval", f"{FIXTURE}:Tutorial", "--base-url", server.base_url,
                   "--model", "served", "-n", "3", "-o", str(out), "--no-progress")
        sent = server.requests[0]
    assert done.returncode == 0, done.stderr
    records = lines(out)
    assert [r["reward"] for r in records] == [1.0, 1.0, 1.0]
    first = records[0]
    assert first["response_class"] == "agentscope.message._message_base:Msg"
    assert first["response_text"] == sums([{"content": first["task"]["question"]}])
    assert first["response"]["content"] == [{"type": "text", "text": first["response_text"]}]
    [call] = first["messages"]
    assert (call["reply"], call["finish_reason"], call["tool_calls"]) == (
        first["response_text"], "stop", [])
    assert call["completion_tokens"] == first["completion_tokens"] == 4
    # The experiment's sampling settings reach the endpoint through the AgentScope model.
    assert (sent["model"], sent["max_tokens"], sent["temperature"]) == ("served", 16, 1.0)
    again = cli("rescore", str(out), f"{FIXTURE}:Tutorial", "-o", str(rescored))
    assert again.returncode == 0, again.stderr
    assert [r["reward"] for r in lines(rescored)] == [1.0, 1.0, 1.0]


def test_eval_records_streamed_calls(tmp_path):
    """A streamed AgentScope call against a real endpoint is recorded, tokens included."""
    out = tmp_path / "results.jsonl"
    with OpenAIServer(sums) as server:
        done = cli("eval", f"{FIXTURE}:Streaming", "--base-url", server.base_url,
                   "--model", "served", "-n", "2", "-o", str(out), "--no-progress")
        sent = server.requests[0]
    assert done.returncode == 0, done.stderr
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    for record in lines(out):
        assert record["reward"] == 1.0
        assert record["messages"][0]["reply"] == record["response_text"]
        assert record["completion_tokens"] == 4


def test_rescore_says_why_a_response_cannot_be_rebuilt(tmp_path):
    """A saved class that no longer imports is named, with the line."""
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps({
        "task_index": 0, "repeat": 0, "task": TASK, "reward": 1.0, "error": None,
        "response": {"content": "x"}, "response_text": "x", "response_is_repr": False,
        "response_class": "vanished_package.messages:Reply"}) + "\n")
    done = cli("rescore", str(results), f"{FIXTURE}:Tutorial")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"Error: {results}:1: the response is a vanished_package.messages:Reply object, which "
        f"cannot be imported here (ModuleNotFoundError: No module named 'vanished_package'); "
        f"install what the workflow used")


# ------------------------------------------------------------------ real servers and models


@pytest.fixture(scope="module")
def react_model(tmp_path_factory):
    pytest.importorskip("torch")
    from examples.react_agent.tiny_model import build

    return build(str(tmp_path_factory.mktemp("react") / "model"))


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_eval_against_transformers_serve(react_model, tmp_path):
    """The example's agent runs against a real OpenAI-compatible server: transformers serve."""
    serve = Path(sys.executable).parent / "transformers"
    if not serve.exists():
        pytest.skip("transformers serve is not installed")
    port = free_port()
    server = subprocess.Popen(
        [str(serve), "serve", react_model, "--host", "127.0.0.1", "--port", str(port),
         "--device", "cpu"], env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "no server"
                time.sleep(0.5)
        out = tmp_path / "results.jsonl"
        done = cli("eval", "examples.react_agent.experiment:ReActMath", "--base-url",
                   f"http://127.0.0.1:{port}/v1", "--model", react_model, "-n", "2",
                   "-o", str(out), "--no-progress")
    finally:
        server.terminate()
        server.wait(30)
    assert done.returncode == 0, done.stderr
    records = lines(out)
    assert len(records) == 2 and all(r["error"] is None for r in records)
    assert all(r["response_class"].endswith(":Msg") for r in records)
    assert all(r["messages"] and r["completion_tokens"] > 0 for r in records)


def train_locally(name, model, folder, steps):
    """The training steps' metrics of a short local run of a fixture experiment."""
    summary = tunedsl.run(f"{FIXTURE}:{name}", backend="local", progress=False, overrides=[
        f"model.model_path={model}", f"checkpoint_root_dir={folder}",
        f"train_dataset.total_steps={steps}"])
    return [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
            .splitlines() if "loss" in line]


def test_the_tutorials_agent_trains_on_the_local_backend(react_model, tmp_path):
    """The tutorial's own workflow and judge train with no failed rollout."""
    rows = train_locally("Tutorial", react_model, tmp_path, 3)
    assert [(row["rollout/errors"], row["train/samples"]) for row in rows] == [(0, 4)] * 3


def test_local_training_learns_from_every_call_of_every_trajectory(react_model, tmp_path):
    """Two calls per trajectory, both trained on: samples = rollouts x 2, no failures."""
    rows = train_locally("TwoTurns", react_model, tmp_path, 2)
    assert len(rows) == 2
    for row in rows:
        assert row["rollout/errors"] == 0 and row["rollout/groups_skipped"] == 0
        assert row["train/samples"] == 2 * 2 * 2  # batch x group x calls


def test_local_server_honours_n_stop_content_parts_and_tool_choice(react_model):
    """The local model's OpenAI surface: n samples, stop cuts tokens, parts join, 400s."""
    from tunedsl.backends.local.chat import ChatCodec, LocalChatModel
    from tunedsl.backends.local.engine import Engine
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(react_model)
    engine = Engine(AutoModelForCausalLM.from_pretrained(react_model).eval(),
                    eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    codec = ChatCodec(tokenizer)
    model = LocalChatModel(engine, codec, name="tiny", sampling={"max_tokens": 8})
    completion = ask(model, n=2)
    assert len(completion.choices) == 2 and len(model.calls) == 2
    assert all(len(call.response_ids) == len(call.logprobs) > 0 for call in model.calls)
    text = model.calls[0].response.content
    if len(text) > 2:  # cut at the reply's own third character: fewer tokens, same sampler
        engine.reseed(0)
        full = ask(model, max_tokens=8).choices[0].message.content
        engine.reseed(0)
        cut = ask(model, max_tokens=8, stop=full[2])
        assert cut.choices[0].message.content == full[:full.index(full[2])]
        assert cut.choices[0].finish_reason == "stop"
        assert len(model.calls[-1].response_ids) < 8
    parts = [{"role": "user", "content": [{"type": "text", "text": "2+"}, {"type": "text",
                                                                          "text": "3"}]}]
    assert codec.prompt_ids(parts) == codec.prompt_ids([{"role": "user", "content": "2+\n3"}])
    with pytest.raises(openai.BadRequestError, match="tool_choice 'required': the local backend "
                                                     "cannot force a tool call"):
        ask(model, tool_choice="required")


def test_rollouts_jsonl_keeps_every_call_with_its_advantage(react_model, tmp_path):
    """Each rollout of each step is one line: its task, both calls (messages and reply), the
    reward, one advantage per call (a trajectory's, under multi_step_grpo) and no error."""
    summary = tunedsl.run(f"{FIXTURE}:TwoTurns", backend="local", progress=False, overrides=[
        f"model.model_path={react_model}", f"checkpoint_root_dir={tmp_path}",
        "train_dataset.total_steps=2"])
    lines = [json.loads(line) for line in
             (summary.run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert [(line["step"], line["group"], line["run"]) for line in lines] == [
        (step, group, run) for step in (1, 2) for group in (0, 1) for run in (0, 1)]
    for line in lines:
        first, second = line["calls"]
        assert line["task"]["question"] in json.dumps(first["messages"])
        assert second["messages"][-1]["content"] == [
            {"type": "text", "text": "Check it, then say the answer again."}]
        assert first["completion_tokens"] > 0 and first["finish_reason"] in ("stop", "length")
        assert line["error"] is None and line["reward"] in (0.0, 1.0)
        assert len(line["advantages"]) == 2 and line["advantages"][0] == line["advantages"][1]


def test_rollouts_jsonl_can_keep_every_nth_step_and_a_sample(react_model, tmp_path):
    """keep_rollouts_every and keep_rollouts_per_step thin the file for long runs."""
    summary = tunedsl.run(f"{FIXTURE}:Tutorial", backend="local", progress=False, overrides=[
        f"model.model_path={react_model}", f"checkpoint_root_dir={tmp_path}",
        "train_dataset.total_steps=4", "keep_rollouts_every=2", "keep_rollouts_per_step=3"])
    lines = [json.loads(line) for line in
             (summary.run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [2, 2, 2, 4, 4, 4]


SYNCHRONOUS_REPLY = """    import threading
    replies = []
    thread = threading.Thread(target=lambda: replies.append(asyncio.run(agent.reply(
        msg=Msg("user", task["question"], role="user")))))
    thread.start()
    thread.join()
    response = replies[0]
"""


def test_a_react_agent_run_synchronously_in_a_thread_reaches_the_endpoint(tmp_path):
    """The example's ReActAgent driven as a synchronous agent (``asyncio.run`` in a thread):
    its calls go through ``model.openai_client``, whose pooled connections belonged to the
    first event loop that used them, so every rollout after the first failed ("Future
    attached to a different loop")."""
    import shutil

    shutil.copytree(REPO / "examples" / "react_agent", tmp_path / "react",
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    source = tmp_path / "react" / "experiment.py"
    text = source.read_text().replace("import ast\n", "import ast\nimport asyncio\n", 1)
    call = '    response = await agent.reply(msg=Msg("user", task["question"], role="user"))\n'
    assert call in text
    source.write_text(text.replace(call, SYNCHRONOUS_REPLY))
    out = tmp_path / "results.jsonl"
    with OpenAIServer(sums) as server:
        done = cli("eval", "experiment.py:ReActMath", "--base-url", server.base_url,
                   "--model", "m", "-n", "4", "--concurrency", "2", "-o", str(out),
                   "--no-progress", cwd=source.parent)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    records = lines(out)
    assert len(records) == 4 and all(r["error"] is None and r["reward"] == 1.0
                                     for r in records)
    assert all(len(r["messages"]) == 1 for r in records)  # each call recorded
