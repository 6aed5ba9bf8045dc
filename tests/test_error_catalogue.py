"""The error catalogue: bad inputs and faults across every command, each one clear line.

Each row is the files of a small project, a command line, the exit code and the exact first
line of stderr. Rows run in-process through the CLI's entry function (fast); a few run as
real subprocesses to prove the exit codes. Every row also checks that stderr shows no
traceback through tunedsl's own frames (a traceback of the user's code may come first).

``{dir}`` in an expected line stands for the row's project folder.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import attrs
import pytest

from tunedsl.cli import main

HEAD = textwrap.dedent('''\
    from tunedsl import *


    @workflow
    async def solve(task, model):
        reply = await model.chat([{"role": "user", "content": task["question"]}])
        return WorkflowOutput(response=reply.content)


    @judge
    async def exact(task, response):
        return JudgeOutput(reward=float(response == task["answer"]))


    ''')  # @experiment is on line 15
BODY = textwrap.dedent('''\
    workflow = solve
    judge = exact
    train_dataset = Dataset("data", split="train")
    model = Model("m", max_model_len=64)
    algorithm = Algorithm("grpo", group_size=2, batch_size=2)
    ''')
DATA = '{"question": "1+1=", "answer": "2"}\n{"question": "2+2=", "answer": "4"}\n'


def experiment_file(body: str = BODY, head: str = HEAD, extra: str = "") -> str:
    """A module holding ``@experiment class E`` with ``body`` (line 15 is @experiment)."""
    return head + extra + "@experiment\nclass E:\n" + textwrap.indent(body, "    ")


def replaced(old: str, new: str, text: str = BODY) -> str:
    assert old in text, old
    return text.replace(old, new)


@attrs.frozen
class Row:
    """One catalogue entry: a project, a command, and what the user must see."""

    id: str
    argv: tuple[str, ...]
    code: int
    first_line: str
    files: dict[str, str | bytes] = attrs.field(factory=lambda: {"exp.py": experiment_file()})
    #: Text no file of the project may hold afterwards (a secret, say).
    absent: str | None = None


def row(id: str, argv: str, code: int, first_line: str, absent: str | None = None,
        data: str | None = None, **files: str | bytes) -> Row:
    """A row; ``files`` by name with ``__`` for ``.`` (``exp.py`` is the standard experiment
    unless given), ``data`` the training data file's text."""
    return Row(id, tuple(argv.split()), code, first_line,
               {"exp.py": experiment_file(),
                **({"data/train.jsonl": data} if data is not None else {}),
                **{name.replace("__", "."): text for name, text in files.items()}}, absent)


ROWS = [
    # ------------------------------------------------------------------ importing the module
    row("import-no-colon", "check exp", 2,
        'Error: Import string "exp" must be in format "<module>:<attribute>" or '
        '"<path/to/file.py>:<attribute>". Found: exp:E.'),
    row("import-no-colon-nothing", "check exp", 2,
        'Error: Import string "exp" must be in format "<module>:<attribute>" or '
        '"<path/to/file.py>:<attribute>". Module "exp" defines none of the expected kind.',
        exp__py="x = 1\n"),
    row("import-empty-attribute", "check exp:", 2,
        'Error: Import string "exp:" must be in format "<module>:<attribute>" or '
        '"<path/to/file.py>:<attribute>".'),
    row("import-missing-module", "check nowhere:E", 2,
        'Error: Could not import module "nowhere": run from the folder that holds it, or '
        'install your project (pip install -e .).'),
    row("import-missing-file", "check nowhere.py:E", 2,
        'Error: Could not import module "nowhere.py": no such file.'),
    row("import-missing-attribute", "check exp:F", 2,
        'Error: Attribute "F" not found in module "exp". Found: E.'),
    row("import-sys-exit", "check exp:E", 2,
        'Error: module "exp" called sys.exit(3) while being imported (exp.py:3); keep module '
        'level free of exits (guard scripts with if __name__ == "__main__":)',
        exp__py="import sys\n\nsys.exit(3)\n"),
    row("import-user-error", "check exp:E", 2,
        "Traceback (most recent call last):", exp__py="x = 1 / 0\n"),
    # ------------------------------------------------------------------ decorators
    row("workflow-not-async", "check exp:E", 2,
        "Error: @workflow solve (exp.py:4) must be async: write async def solve(task, model)",
        exp__py=experiment_file(head=HEAD.replace("async def solve", "def solve").replace(
            "reply = await model", "reply = model"))),
    row("workflow-async-generator", "check exp:E", 2,
        "Error: @workflow solve (exp.py:4) is an async generator (it yields); a workflow "
        "returns once: return WorkflowOutput(...) instead of yielding",
        exp__py=experiment_file(head=HEAD.replace("return WorkflowOutput(",
                                                  "yield WorkflowOutput("))),
    row("judge-unknown-parameter", "check exp:E", 2,
        "Error: @judge exact (exp.py:10) has an unknown parameter 'answer'; a judge takes "
        "task, response and optionally auxiliary_models, params, logger",
        exp__py=experiment_file(head=HEAD.replace("exact(task, response)",
                                                  "exact(task, response, answer)"))),
    row("experiment-without-workflow", "check exp:E", 2,
        "Error: @experiment E (exp.py:15) has no workflow: add 'workflow = <your @workflow "
        "function>'", exp__py=experiment_file(replaced("workflow = solve\n", ""))),
    row("experiment-undecorated-workflow", "check exp:E", 2,
        "Error: @experiment E (exp.py:19).workflow must be a @workflow function (got the "
        "undecorated function plain): add @workflow above 'async def plain'",
        exp__py=experiment_file(replaced("workflow = solve", "workflow = plain"),
                                extra="async def plain(task, model):\n    pass\n\n\n")),
    row("workflow-inside-a-function", "check exp:E", 2,
        "Error: E (exp.py:22): @workflow inner (exp.py:16) is defined inside make(), so no "
        "other process can import it; define it at module level",
        exp__py=experiment_file(replaced("workflow = solve", "workflow = make()"), extra=(
            "def make():\n    @workflow\n    async def inner(task, model):\n"
            "        return WorkflowOutput(response='x')\n    return inner\n\n\n"))),
    # ------------------------------------------------------------------ records
    row("records-every-problem", "check exp:E", 2,
        "Error: exp.py:21: Algorithm.group_size must be >= 1 (got 0)",
        exp__py=experiment_file(replaced("group_size=2, batch_size=2",
                                         "group_size=0, batch_size=-3, learning_rate=-1"))),
    row("record-infinite-learning-rate", "check exp:E --set algorithm.learning_rate=inf", 2,
        "Error: --set: invalid value @ algorithm.learning_rate: must be a finite number "
        "(got inf)"),
    row("record-overflowing-learning-rate", "check exp:E --set algorithm.learning_rate=1e400",
        2, "Error: --set: invalid value @ algorithm.learning_rate: must be a finite number "
        "(got inf)"),
    row("record-infinite-temperature", "check exp:E --set model.temperature=inf", 2,
        "Error: --set: invalid value @ model.temperature: must be a finite number (got inf)"),
    row("record-unknown-scheduler", "check exp:E --set algorithm.lr_scheduler=linear", 2,
        "Error: --set: invalid value @ algorithm.lr_scheduler: must be one of 'constant', "
        "'cosine' (got 'linear')"),
    # ------------------------------------------------------------------ settings files
    row("settings-not-utf8", "check exp:E", 2,
        "Error: {dir}/tunedsl.toml:2: the settings file is not UTF-8 text (byte 0xff); save "
        "it as UTF-8", tunedsl__toml=b"[algorithm]\ngroup_size = 4 # \xff\xfe\n"),
    row("settings-infinite-in-toml", "check exp:E", 2,
        "Error: {dir}/tunedsl.toml: invalid value @ algorithm.learning_rate: must be a finite "
        "number (got inf)", tunedsl__toml="[algorithm]\nlearning_rate = inf\n"),
    row("settings-explicit-file-missing", "check exp:E --settings nope.toml", 2,
        "Error: nope.toml: settings file not found"),
    row("trinity-base-missing", "config exp:E", 2,
        "Error: {dir}/nope.yaml: Trinity config (trinity_config) not found",
        exp__py=experiment_file(BODY + 'trinity_config = "nope.yaml"\n')),
    row("project-escapes-root", "config exp:E", 2,
        "Error: E (exp.py:15): invalid value @ project: '../../x' names a folder of the "
        "run's path (checkpoint_root_dir/project/name), so it may hold only letters, "
        "digits, '_', '.' and '-' (not '..'); choose where runs go with checkpoint_root_dir",
        exp__py=experiment_file(BODY + 'project = "../../x"\n')),
    row("project-absolute", "config exp:E --set project=/etc/x", 2,
        "Error: --set: invalid value @ project: '/etc/x' names a folder of the run's path "
        "(checkpoint_root_dir/project/name), so it may hold only letters, digits, '_', '.' "
        "and '-' (not '..'); choose where runs go with checkpoint_root_dir"),
    # ------------------------------------------------------------------ data
    row("data-bad-json-line", "check exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:3: not a valid JSON line (Expecting "
        "value); fix or delete that line",
        data=DATA + '{"question": "3+3=", "answer": \n'),
    row("data-row-not-an-object", "check exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:2: a row must be a JSON object with the "
        "task's keys (got list)", data=DATA[:DATA.index("\n") + 1] + "[1, 2]\n"),
    row("data-key-missing-in-some-rows", "check exp:E", 2,
        "Error: train_dataset: key 'question' read by @workflow solve (exp.py:4) is missing "
        "from 1 of 3 rows of {dir}/data (split 'train'), the first at {dir}/data/train.jsonl:3; add "
        "it to every row, or read it with task.get()",
        data=DATA + '{"q": "3+3=", "answer": "6"}\n'),
    row("data-key-missing-everywhere", "check exp:E", 2,
        "Error: train_dataset: key 'question' read by @workflow solve (exp.py:4) is missing "
        "from {dir}/data (split 'train'); its rows have: answer, q",
        data='{"q": "1", "answer": "2"}\n{"q": "3", "answer": "4"}\n'),
    row("data-mixed-types", "check exp:E", 2,
        "Error: train_dataset: key 'answer' read by @judge exact (exp.py:10) has values of "
        "different types across rows of {dir}/data (split 'train'): string (first at "
        "{dir}/data/train.jsonl:1), integer (first at {dir}/data/train.jsonl:3); make them "
        "one type", data=DATA + '{"question": "3+3=", "answer": 6}\n'),
    row("data-fewer-rows-than-a-batch", "check exp:E --set algorithm.batch_size=3", 2,
        "Error: train_dataset: {dir}/data (split 'train') has 2 rows, fewer than "
        "algorithm.batch_size = 3, so not one training step can be filled; lower batch_size "
        "or add tasks"),
    row("data-empty", "check exp:E", 2,
        "Error: train_dataset: {dir}/data (split 'train') has no rows; point it at a dataset with "
        "tasks", data=""),
    row("data-path-missing", "check exp:E", 2,
        "Error: train_dataset: path ./nowhere does not exist; fix the path, or give a Hugging "
        "Face hub id such as 'openai/gsm8k'",
        exp__py=experiment_file(replaced('Dataset("data"', 'Dataset("./nowhere"'))),
    row("data-hub-id-offline", "check exp:E", 2,
        "Error: train_dataset: someorg/somedata is not a local path, and the Hugging Face hub "
        "is switched off here (HF_HUB_OFFLINE); give a local folder or file",
        exp__py=experiment_file(replaced('Dataset("data"', 'Dataset("someorg/somedata"'))),
    row("preview-hub-id-offline", "preview exp:E", 2,
        "Error: train_dataset: someorg/somedata is not a local path, and the Hugging Face hub "
        "is switched off here (HF_HUB_OFFLINE); give a local folder or file",
        exp__py=experiment_file(replaced('Dataset("data"', 'Dataset("someorg/somedata"'))),
    row("preview-bad-n", "preview exp:E -n 0", 2, "Error: -n 0: show at least 1 row"),
    # ------------------------------------------------------------------ rollouts in check
    row("check-bool-reward", "check exp:E", 2,
        "Error: rollout: on the first training task, with a scripted model that always "
        "replies '0': @judge exact (exp.py:10) returned the reward True, a bool; a reward "
        "must be a finite number: write float(True) or 1.0 / 0.0",
        exp__py=experiment_file(head=HEAD.replace('float(response == task["answer"])',
                                                  "True"))),
    # ------------------------------------------------------------------ eval and rescore
    row("eval-output-unwritable",
        "eval exp:E --base-url http://127.0.0.1:9/v1 --model x -o /proc/nope/x.jsonl", 2,
        "Error: -o /proc/nope/x.jsonl: cannot write it (No such file or directory); choose a "
        "file in a folder you can write"),
    row("rescore-output-unwritable", "rescore r.jsonl exp:E -o /proc/nope/x.jsonl", 2,
        "Error: -o /proc/nope/x.jsonl: cannot write it (No such file or directory); choose a "
        "file in a folder you can write", exp__py=experiment_file(), r__jsonl=""),
    row("eval-base-url-not-a-url", "eval exp:E --base-url notaurl --model x", 2,
        "Error: --base-url notaurl: not an http(s) URL; give the endpoint's, e.g. "
        "http://localhost:8000/v1"),
    row("eval-aux-not-a-url", "eval exp:E --base-url {bad}/html/v1 --model x --aux a=x,y",
        2, "Error: --aux 'a=x,y': expected NAME=URL,MODEL, e.g. "
        "--aux grader=http://localhost:8001/v1,Qwen/Qwen3-8B"),
    row("eval-endpoint-answers-html", "eval exp:E --base-url {bad}/html/v1 --model x", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/html/v1/ answered an HTML page, not an "
        "OpenAI chat completion; check the URL (an OpenAI-compatible server's ends in /v1)"),
    row("eval-endpoint-answers-invalid-json", "eval exp:E --base-url {bad}/json/v1 --model x",
        1, "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/json/v1/ answered invalid JSON, not an "
        "OpenAI chat completion; check the URL (an OpenAI-compatible server's ends in /v1)"),
    row("eval-endpoint-answers-no-choices",
        "eval exp:E --base-url {bad}/empty/v1 --model x", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/empty/v1/ answered a completion with no "
        "choices, not an OpenAI chat completion; check the URL (an OpenAI-compatible "
        "server's ends in /v1)"),
    row("eval-endpoint-answers-a-choice-without-message",
        "eval exp:E --base-url {bad}/nomessage/v1 --model x", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/nomessage/v1/ answered a choice without "
        "a message, not an OpenAI chat completion; check the URL (an OpenAI-compatible "
        "server's ends in /v1)"),
    row("eval-secret-in-url-is-not-kept",
        "eval exp:E --base-url {bad}/html/v1?api-key=SECRET --model x -o o.jsonl", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/html/v1/?api-key=*** answered an HTML "
        "page, not an OpenAI chat completion; check the URL (an OpenAI-compatible server's "
        "ends in /v1)", absent="SECRET"),
    row("eval-rollout-timeout", "eval exp:E --base-url {bad}/html/v1 --model x "
        "--set rollout_timeout=1", 1,
        "Error: every rollout failed; the first error: timed out after 1s (rollout_timeout)",
        exp__py=experiment_file(head=HEAD.replace(
            "    reply = await model.chat", "    import asyncio\n    await asyncio.sleep(30)\n"
            "    reply = await model.chat"))),
    row("eval-rollout-blocks-the-loop", "eval exp:E --base-url {bad}/html/v1 --model x "
        "--set rollout_timeout=1 --concurrency 1", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "RolloutBlocked: held the event loop past rollout_timeout = 1s: blocking code "
        "(time.sleep, a synchronous HTTP call, a long computation) in an async workflow or "
        "judge stops every rollout; await asyncio.to_thread(...) or use an async client",
        exp__py=experiment_file(head=HEAD.replace(
            "    reply = await model.chat", "    import time\n    time.sleep(30)\n"
            "    reply = await model.chat"))),
    row("eval-resume-with-another-model",
        "eval exp:E --base-url http://127.0.0.1:9/v1 --model b -o o.jsonl --resume", 2,
        "Error: --resume o.jsonl: its results were made with other settings (model 'a' -> "
        "'b'); merging would mix two evaluations, so resume with the same options or write "
        "to another -o file", o__jsonl=json.dumps({
            "task_index": 0, "repeat": 0, "error": None, "eval_settings": {
                "split": None, "limit": None, "repeat": 1, "model": "a",
                "base_url": "http://127.0.0.1:9/v1", "checkpoint": None, "aux": []}}) + "\n"),
    row("eval-resume-with-another-repeat",
        "eval exp:E --base-url http://127.0.0.1:9/v1 --model a -o o.jsonl --resume "
        "--repeat 2 -n 1", 2,
        "Error: --resume o.jsonl: its results were made with other settings (limit None -> "
        "1; repeat 1 -> 2); merging would mix two evaluations, so resume with the same "
        "options or write to another -o file", o__jsonl=json.dumps({
            "task_index": 0, "repeat": 0, "error": None, "eval_settings": {
                "split": None, "limit": None, "repeat": 1, "model": "a",
                "base_url": "http://127.0.0.1:9/v1", "checkpoint": None, "aux": []}}) + "\n"),
    row("rescore-output-exists", "rescore r.jsonl exp:E -o o.jsonl", 2,
        "Error: -o o.jsonl already holds results; choose another file (the re-scored results "
        "never overwrite a file)", exp__py=experiment_file(), r__jsonl="", o__jsonl="x\n"),
]

#: Rows also run as real subprocesses, proving the exit codes the shell sees.
SUBPROCESS_ROWS = ("import-missing-module", "records-every-problem", "import-user-error")
TUNEDSL_FRAME = re.compile(r'File "[^"]*[/\\]tunedsl[/\\][^"]*\.py"')


#: What a misconfigured URL or proxy answers instead of a chat completion, by path prefix.
BAD_ANSWERS = {
    "html": ("text/html", "<html><body>Please log in</body></html>"),
    "json": ("application/json", "{not json"),
    "empty": ("application/json", json.dumps({"id": "x", "object": "chat.completion",
                                              "created": 1, "model": "m", "choices": []})),
    "nomessage": ("application/json", json.dumps({
        "id": "x", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop"}]})),
}


@pytest.fixture(scope="module")
def bad_endpoint():
    """A real HTTP server on loopback answering every POST with one of `BAD_ANSWERS`."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the http.server API
            self.rfile.read(int(self.headers.get("content-length", 0)))
            kind, body = BAD_ANSWERS[self.path.split("/")[1]]
            self.send_response(200)
            self.send_header("content-type", kind)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _project(tmp_path: Path, entry: Row) -> Path:
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train.jsonl").write_text(DATA)
    for name, text in entry.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
    return folder


def _check(entry: Row, folder: Path, code: int, stderr: str, bad: str = "") -> None:
    lines = stderr.splitlines()
    expected = entry.first_line.replace("{dir}", str(folder)).replace("{bad}", bad)
    assert (code, lines[:1]) == (entry.code, [expected]), stderr
    assert not TUNEDSL_FRAME.search(stderr), stderr  # never tunedsl's own frames
    error_lines = [line for line in lines if line.startswith("Error: ")]
    assert error_lines, stderr


@pytest.fixture()
def fresh_modules(tmp_path):
    """Each row imports its own ``exp`` module: forget any other test's ``exp`` first, and
    this row's (and its path) afterwards."""
    path = list(sys.path)
    sys.modules.pop("exp", None)
    yield
    sys.path[:] = path
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


@pytest.mark.parametrize("entry", ROWS, ids=[r.id for r in ROWS])
def test_catalogue_row(entry, tmp_path, monkeypatch, capsys, fresh_modules, bad_endpoint):
    folder = _project(tmp_path, entry)
    monkeypatch.chdir(folder)
    argv = [word.replace("{bad}", bad_endpoint) for word in entry.argv]
    code = main([*argv, *(["--no-progress"] if argv[0] == "eval" else [])])
    _check(entry, folder, code, capsys.readouterr().err, bad_endpoint)
    if entry.absent is not None:
        written = [path for path in folder.rglob("*.jsonl")]
        assert written and not any(entry.absent in path.read_text() for path in written)


@pytest.mark.parametrize("entry", [r for r in ROWS if r.id in SUBPROCESS_ROWS],
                         ids=list(SUBPROCESS_ROWS))
def test_catalogue_row_in_a_subprocess(entry, tmp_path):
    folder = _project(tmp_path, entry)
    done = subprocess.run([sys.executable, "-m", "tunedsl", *entry.argv], cwd=folder,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    _check(entry, folder, done.returncode, done.stderr)


def test_the_catalogue_is_whole():
    """Ids are unique and every subprocess row exists."""
    ids = [r.id for r in ROWS]
    assert len(ids) == len(set(ids)) and set(SUBPROCESS_ROWS) <= set(ids)


# ---------------------------------------------------------------------------- the test kit
# The test kit raises instead of exiting: each row is the call and the exact message.

def _slow_workflow(kind):
    from tunedsl import WorkflowOutput, workflow

    async def slow(task, model):
        import asyncio
        import time

        if kind == "blocks":
            time.sleep(30)
        else:
            await asyncio.sleep(30)
        return WorkflowOutput(response="x")

    slow.__qualname__ = slow.__name__ = f"{kind}_workflow"
    return workflow(slow)


@pytest.mark.parametrize("kind, message", [
    ("awaits", "@workflow awaits_workflow ({where}): the rollout did not finish within 0.5 s "
               "(run_rollout's timeout=); a scripted model answers at once, so it waits on "
               "something else (a network call, a lock, a sleep)"),
    ("blocks", "@workflow blocks_workflow ({where}) raised RolloutBlocked: held the event loop "
               "past rollout_timeout = 0.5s: blocking code (time.sleep, a synchronous HTTP "
               "call, a long computation) in an async workflow or judge stops every rollout; "
               "await asyncio.to_thread(...) or use an async client"),
])
def test_kit_a_hanging_rollout_has_a_time_limit(kind, message):
    from tunedsl.dsl.decorators import where
    from tunedsl.testing import RolloutError, ScriptedModel, run_rollout

    workflow = _slow_workflow(kind)
    with pytest.raises(RolloutError) as caught:
        run_rollout(workflow, {}, ScriptedModel(["x"]), timeout=0.5)
    assert str(caught.value) == message.format(where=where(workflow))


def test_kit_run_rollout_inside_a_running_loop_says_what_to_call():
    import asyncio

    from tunedsl.testing import ScriptedModel, run_rollout

    async def in_an_async_test():
        run_rollout(_slow_workflow("awaits"), {}, ScriptedModel(["x"]))

    with pytest.raises(RuntimeError, match=r"^run_rollout\(\) cannot run inside a running event "
                                           r"loop \(an async test or notebook cell\); there, "
                                           r"write: await arun_rollout\(\.\.\.\)$"):
        asyncio.run(in_an_async_test())


def test_an_unreachable_hub_is_named_at_once(tmp_path, monkeypatch, capsys, fresh_modules):
    """With the hub switched on but not answering, a hub id fails in one line, at once
    (the hub client retried for half a minute first)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    entry = row("x", "check exp:E", 2, "", exp__py=experiment_file(
        replaced('Dataset("data"', 'Dataset("someorg/somedata"')))
    monkeypatch.chdir(_project(tmp_path, entry))
    assert main(list(entry.argv)) == 2
    assert capsys.readouterr().err == (
        "Error: train_dataset: someorg/somedata is not a local path, so it would be read from "
        "the Hugging Face hub (http://127.0.0.1:9), which does not answer from here "
        "(ConnectError); download the dataset and give its folder, or check the network\n")
