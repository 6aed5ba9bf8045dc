"""The error catalogue: bad inputs and faults across every command, each one clear line.

Each row is the files of a small project, a command line, the exit code and the exact first
line of stderr that is not progress or information (``Error: ...``, or ``Traceback ...``
when the user's own code raised). A setting that is valid but leaves training nothing to
learn is said, not refused: its row is ``check``'s first ``note  ...`` line, exit 0. Rows run in-process through the CLI's entry function (fast); a few run as
real subprocesses to prove the exit codes. Every row also checks that stderr shows no
traceback through tunedsl's own frames (a traceback of the user's code may come first).

``{dir}`` in an expected line stands for the row's project folder.
"""

from __future__ import annotations

import functools
import http.server
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from tunedsl.cli import main
from tunedsl.errors import ArgumentError, ConfigError

from .cli_support import cli
from .test_prompt_tuning import EXPERIMENT as TUNING_EXPERIMENT

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


OPENAI_CLIENT_HEAD = HEAD.replace(
    'reply = await model.chat([{"role": "user", "content": task["question"]}])',
    'reply = (await model.openai_client.chat.completions.create(model="x", messages=['
    '{"role": "user", "content": task["question"]}])).choices[0].message')


def experiment_file(body: str = BODY, head: str = HEAD, extra: str = "") -> str:
    """A module holding ``@experiment class E`` with ``body`` (line 15 is @experiment)."""
    return head + extra + "@experiment\nclass E:\n" + textwrap.indent(body, "    ")


def replaced(old: str, new: str, text: str = BODY) -> str:
    assert old in text, old
    return text.replace(old, new)


def judged_by(lines: str) -> str:
    """The experiment file with the judge's body (line 10 on) replaced by ``lines``."""
    return experiment_file(head=replaced(
        'return JudgeOutput(reward=float(response == task["answer"]))', lines, HEAD))


#: One judged result of the experiment file's task, for the rows that rescore it.
ONE_RESULT = ('{"task_index": 0, "repeat": 0, "task": {"question": "1+1=", "answer": "2"}, '
              '"response": "2", "reward": 1.0}\n')


#: A file's text, its bytes, how to change the bytes it has (a file of a trained run,
#: `Row.run`), or None to delete it.
FileText = str | bytes | Callable[[bytes], bytes] | None


@attrs.frozen
class Row:
    """One catalogue entry: a project, a command, and what the user must see.

    A row with ``code`` 0 is bad input tunedsl takes: ``first_line`` is then a line its
    output must hold (stdout or stderr), and no ``Error:`` line may appear.
    """

    id: str
    argv: tuple[str, ...]
    code: int
    first_line: str
    files: dict[str, FileText] = attrs.field(factory=lambda: {"exp.py": experiment_file()})
    #: Text no file of the project may hold afterwards (a secret, say).
    absent: str | None = None
    #: The project holds ``run/``, a copy of a two-step local run of `RUN_EXPERIMENT` (with
    #: ``global_step_1`` and ``global_step_2``), before ``files`` change it.
    run: bool = False
    #: A command run first, which must succeed (an eval or a tuning to resume); then
    #: ``then`` changes the project's files (as ``files`` does), and ``argv`` runs.
    before: tuple[str, ...] = ()
    then: dict[str, FileText] = attrs.field(factory=dict)
    #: The copied run keeps the paths it recorded in the trained run's project (a project
    #: folder moved, with its run directory, to another place).
    moved: bool = False


def row(id: str, argv: str, code: int, first_line: str, absent: str | None = None,
        data: str | None = None, run: bool = False, before: str = "",
        then: dict[str, FileText] | None = None, moved: bool = False,
        **files: FileText) -> Row:
    """A row; ``files`` by name with ``__`` for ``.`` (``exp.py`` is the standard experiment
    unless given, `RUN_EXPERIMENT` with ``run``), ``data`` the training data file's text;
    ``before`` a command run first, ``then`` the files changed after it (by path)."""
    return Row(id, tuple(argv.split()), code, first_line,
               {"exp.py": RUN_EXPERIMENT if run else experiment_file(),
                **({"data/train.jsonl": data} if data is not None else {}),
                **{name.replace("__", "."): text for name, text in files.items()}}, absent, run,
               tuple(before.split()), then or {}, moved)


#: The experiment of a row with a trained run: the arith example's tiny model (``{tiny}``)
#: trained two steps, saving each.
RUN_EXPERIMENT = experiment_file(replaced(
    'Dataset("data", split="train")', 'Dataset("data", split="train", total_steps=2)',
    replaced('Model("m", max_model_len=64)', 'Model("{tiny}", max_model_len=32, max_tokens=1)',
             replaced("batch_size=2)", "batch_size=2, save_interval_steps=1)"))))
#: Continue the trained run one step further.
RESUME = "run exp:E --backend local --no-progress --set train_dataset.total_steps=3 --resume run"


def _start_line_settings(value: Any) -> Callable[[bytes], bytes]:
    """A candidates file whose start line's tune_settings were edited to ``value``."""
    def edit(data: bytes) -> bytes:
        first, rest = data.split(b"\n", 1)
        start = json.loads(first)
        start["tune_settings"] = value
        return json.dumps(start).encode() + b"\n" + rest

    return edit


def _start_line_settings_without(*keys: str) -> Callable[[bytes], bytes]:
    """A candidates file whose start line's tune_settings lack ``keys`` (written before
    tunedsl kept them)."""
    def edit(data: bytes) -> bytes:
        first, rest = data.split(b"\n", 1)
        start = json.loads(first)
        start["tune_settings"] = {key: value for key, value in start["tune_settings"].items()
                                  if key not in keys}
        return json.dumps(start).encode() + b"\n" + rest

    return edit


def _cut(keep: float) -> Callable[[bytes], bytes]:
    """A file cut to ``keep`` of its bytes (a crash or a full disk mid-write)."""
    return lambda data: data[:int(len(data) * keep)]


def _safetensors(tensors: int = 1) -> bytes:
    """A small safetensors file: an 8-byte header length, the JSON header, the data."""
    header = json.dumps({f"w{i}": {"dtype": "F32", "shape": [1], "data_offsets": [4 * i,
                                                                                 4 * i + 4]}
                         for i in range(tensors)}).encode()
    return len(header).to_bytes(8, "little") + header + b"\0" * 4 * tensors


def _candidates_edited(kind: str, edit: Callable[[dict], None],
                       **where: Any) -> Callable[[bytes], bytes]:
    """A candidates file whose first line of ``kind`` (with the fields ``where``: lines come
    in the order rollouts finish) was changed by ``edit``."""
    def edited(data: bytes) -> bytes:
        lines = [json.loads(line) for line in data.splitlines()]
        edit(next(line for line in lines if line["kind"] == kind
                  and all(line.get(key) == value for key, value in where.items())))
        return b"".join(json.dumps(line).encode() + b"\n" for line in lines)

    return edited


def tuning(id: str, argv: str, code: int, first_line: str, before: str = "",
           then: dict[str, FileText] | None = None, **files: FileText) -> Row:
    """A ``tune-prompt`` row on the prompt tuning tests' experiment (``exp:Sums``, whose
    workflow reads ``params["system_prompt"]``; ``exp:Plain``'s takes no params), the
    training data its eval split too. Nothing answers at ``127.0.0.1:9``: a row reaching
    the reflection model's probe is refused there."""
    return row(id, argv, code, first_line, exp__py=TUNING_EXPERIMENT, before=before,
               then=then, **{"data/test.jsonl": DATA}, **files)


#: What every tune-prompt row passes: the endpoints, the reflection model with its own URL.
TUNE = ("--base-url http://127.0.0.1:9/v1 --model m "
        "--reflection-model critic@http://127.0.0.1:9/v1")


#: A tuning that finishes: its task model answers "2", and so does its reflection model
#: (a proposal GEPA scores).
TUNED = ("tune-prompt exp:Sums --param system_prompt --base-url {bad}/two/v1 --model m "
         "--reflection-model critic@{bad}/two/v1 --budget 6 --candidates c.jsonl -o p.toml")


#: One line of eval results, as tunedsl eval writes it (the fields readers check).
RESULT_LINE = json.dumps({"task_index": 0, "repeat": 0, "reward": 1.0, "error": None,
                          "task": {"question": "1+1=", "answer": "2"}, "response": "2"})
#: A workflow that answers with a `Reply` (``BODY``: its methods), without the model.
REPLY_HEAD = HEAD.replace("@workflow\n", "class Reply:\n    BODY\n\n\n@workflow\n").replace(
    '    reply = await model.chat([{"role": "user", "content": task["question"]}])\n'
    '    return WorkflowOutput(response=reply.content)',
    "    return WorkflowOutput(response=Reply())").replace(
    'float(response == task["answer"])', "1.0")
#: `Reply` can be rebuilt from its data (`tunedsl.evaluation.responses`), so its to_dict is used.
REPLY_LOADS = "@classmethod\n    def from_dict(cls, data):\n        return cls()\n\n    "


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
    # check passed it ("answers (it lists no models)"), every call a 404 (sweep 37 A-S2)
    row("config-an-endpoint-url-with-its-request-path", "config exp:E --set "
        "auxiliary_models.grader.base_url=http://127.0.0.1:9/v1/chat/completions --set "
        "auxiliary_models.grader.model_path=g", 2,
        "Error: --set: invalid value @ auxiliary_models.grader.base_url: must be the "
        "endpoint's URL alone: http://127.0.0.1:9/v1/chat/completions ends with "
        "/chat/completions, which the client adds to each request (every call would miss); "
        "give http://127.0.0.1:9/v1"),
    # eval's --base-url: every rollout a 404, exit 1 (sweep 38 A-S3)
    row("eval-base-url-with-its-request-path", "eval exp:E --base-url "
        "http://127.0.0.1:9/v1/chat/completions --model m", 2,
        "Error: --base-url: http://127.0.0.1:9/v1/chat/completions ends with /chat/completions, "
        "which the client adds to each request (every call would miss); give "
        "http://127.0.0.1:9/v1"),
    # echoed by check, written twice into config's YAML (sweep 37 A-W3)
    row("config-a-key-in-an-endpoint-url-s-path", "config exp:E --set "
        "auxiliary_models.grader.base_url=http://127.0.0.1:9/v1/"
        "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD --set "
        "auxiliary_models.grader.model_path=g", 2,
        "Error: --set: invalid value @ auxiliary_models.grader.base_url: must be the "
        "endpoint's URL alone: its path holds text that looks like a key, not shown (it would "
        "be written into the results and the run's files); give the URL up to its /v1, and "
        "the key's environment variable with api_key_env", absent="abcdefghijklmnop"),
    # printed in eval's errors and written into its results (sweep 38 A-S3)
    row("eval-a-key-in-a-model-s-url", "eval exp:E --model "
        "m@http://127.0.0.1:9/v1/sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD", 2,
        "Error: --model m@http://127.0.0.1:9/v1/<a key, not shown>: its path holds text that "
        "looks like a key, not shown (it would be written into the results and the run's "
        "files); give the URL up to its /v1, and the key's environment variable with "
        "--api-key-env", absent="abcdefghijklmnop"),
    row("eval-a-key-in-an-aux-url", "eval exp:E --base-url http://127.0.0.1:9/v1 --model m "
        "--aux grader=http://127.0.0.1:9/sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD,g", 2,
        "Error: --aux 'grader=http://127.0.0.1:9/<a key, not shown>,g': its path holds text "
        "that looks like a key, not shown (it would be written into the results and the run's "
        "files); give the URL up to its /v1, and the key's environment variable with "
        "--api-key-env", absent="abcdefghijklmnop"),
    # the usage line echoed the key the well-formed item hides (sweep 40 A-W4)
    row("eval-a-key-in-an-aux-item-without-its-model", "eval exp:E --base-url "
        "http://127.0.0.1:9/v1 --model m --aux "
        "grader=http://127.0.0.1:9/sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD/v1", 2,
        "Error: --aux 'grader=http://127.0.0.1:9/<a key, not shown>/v1': expected "
        "NAME=URL,MODEL, e.g. --aux grader=http://localhost:8001/v1,Qwen/Qwen3-8B",
        absent="abcdefghijklmnop"),
    # said to look like a key (sweep 40 B W5)
    row("eval-an-empty-api-key-variable", "eval exp:E --base-url http://127.0.0.1:9/v1 "
        "--model m --api-key-env=", 2,
        "Error: --api-key-env '': give the name of the environment variable holding the key, "
        "e.g. OPENAI_API_KEY"),
    # read as text: a URL of ${env:...} refused, a model's name sent as typed (sweep 43 A-W4)
    row("eval-an-aux-item-of-an-unset-variable", "eval exp:E --base-url http://127.0.0.1:9/v1 "
        "--model m --aux g=${env:TUNEDSL_UNSET_URL},m", 2,
        "Error: --aux g: environment variable TUNEDSL_UNSET_URL is not set; export it, or give "
        "a default: ${env:TUNEDSL_UNSET_URL,default}"),
    # the [trinity] key won without a word, though --set is applied last (sweep 43 A-S3)
    row("config-a-set-that-a-trinity-key-of-the-settings-beats", "config exp:E --set "
        "model.max_model_len=48", 2,
        "Error: --set model.max_model_len: the [trinity] table of {dir}/tunedsl.toml sets it "
        "too, through its Trinity key, and that table is merged over everything (its value "
        "would be the run's); set it in one place: remove that [trinity] key, or give --set "
        "trinity.KEY=VALUE", tunedsl__toml="[trinity]\nmodel.max_model_len = 64\n"),
    # both on the command line: the Trinity key won without a word (sweep 44 A)
    row("config-a-set-that-a-set-trinity-key-beats", "config exp:E --set "
        "trinity.algorithm.repeat_times=4 --set algorithm.group_size=8", 2,
        "Error: --set algorithm.group_size: a --set trinity.KEY=... of the command line sets it "
        "too, through its Trinity key, which is merged over everything (its value would be the "
        "run's); give one of the two"),
    # said to look like a key (sweep 41 B-W5)
    row("eval-an-api-key-variable-with-a-dash", "eval exp:E --base-url http://127.0.0.1:9/v1 "
        "--model m --api-key-env MY-KEY", 2,
        "Error: --api-key-env 'MY-KEY': an environment variable's name holds only letters, "
        "digits and _ (and does not begin with a digit); give the name of the variable "
        "holding the key, e.g. OPENAI_API_KEY"),
    # echoed whole by the line saying the workflow calls no auxiliary model so named (sweep
    # 41 B-W4)
    row("eval-a-key-given-as-an-aux-name", "eval exp:E --base-url http://127.0.0.1:9/v1 "
        "--model m --aux sk-proj-abcdefghijklmnopqrstuvwxyz0123=http://127.0.0.1:9/v1,m", 2,
        "Error: --aux '<a key, not shown>=http://127.0.0.1:9/v1,m': the auxiliary model's NAME "
        "looks like an API key (not shown); give the name the workflow calls it by, and the "
        "key's environment variable with --api-key-env"),
    # sent as the name, and written whole into the results (sweep 41 B-S3)
    row("eval-a-key-given-as-the-model-s-name", "eval exp:E --base-url http://127.0.0.1:9/v1 "
        "--model sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD", 2,
        "Error: --model '<a key, not shown>': the model's name looks like an API key (not "
        "shown: it would be written into the results); give the model's name, and the key's "
        "environment variable with --api-key-env", absent="abcdefghijklmnop"),
    row("eval-a-key-given-as-an-aux-model-s-name", "eval exp:E --base-url "
        "http://127.0.0.1:9/v1 --model m --aux "
        "grader=http://127.0.0.1:9/v1,sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD", 2,
        "Error: --aux 'grader=http://127.0.0.1:9/v1,<a key, not shown>': the model's name "
        "looks like an API key (not shown: it would be written into the results); give the "
        "model's name, and the key's environment variable with --api-key-env",
        absent="abcdefghijklmnop"),
    row("import-missing-module", "check nowhere:E", 2,
        'Error: Could not import module "nowhere": run from the folder that holds it, or '
        'install your project (pip install -e .).'),
    row("import-missing-file", "check nowhere.py:E", 2,
        'Error: Could not import module "nowhere.py": no such file.'),
    # "run from the folder that holds it", run from there (sweep 33 A-W3)
    row("import-an-upper-case-py-file", "check Exp.PY:E", 2,
        'Error: Could not import module "Exp.PY": Python imports only files ending in .py, in '
        'lower case: rename it to Exp.py.', Exp__PY="E = 1\n"),
    row("import-a-compiled-file", "check exp.pyc:E", 2,
        'Error: Could not import module "exp.pyc": give its source file, "exp.py:NAME".',
        exp__pyc="\x00"),
    row("import-a-file-path-without-py", "check pkg/mod:E", 2,
        'Error: Could not import module "pkg/mod": no such file; give the source file, '
        '"pkg/mod.py:NAME".', **{"pkg/mod.py": "E = 1\n"}),
    # "no such file" alone (sweep 39 A-W8)
    row("import-a-dotted-module-name-with-py", "check pkg.sub.mod.py:E", 2,
        'Error: Could not import module "pkg.sub.mod.py": no such file; pkg/sub/mod.py is a '
        'file: give "pkg/sub/mod.py:NAME", or the module "pkg.sub.mod:NAME".',
        **{"pkg/sub/mod.py": "E = 1\n"}),
    # "run from the folder that holds it", run from there (sweep 34 A-W3)
    row("import-a-module-dot-its-class", "check exp.E", 2,
        'Error: Could not import module "exp.E": exp is a module, and E no module of it; to '
        'name an object in it, write "exp:E".'),
    row("import-a-zip-file", "check exps.zip:E", 2,
        'Error: Could not import module "exps.zip": an archive is imported from sys.path, not '
        'named as a module; run with PYTHONPATH=exps.zip and give the module in it, e.g. '
        '"MODULE:NAME".', exps__zip=b"PK\x05\x06" + b"\x00" * 18),
    # told "exp is a module, and ipynb no module of it; write exp:ipynb" (sweep 35 A-W7)
    row("import-a-notebook", "check exp.ipynb:E", 2,
        'Error: Could not import module "exp.ipynb": Python imports only .py files; give the '
        'experiment in one (a notebook exported as a script), e.g. "exp.py:NAME".',
        exp__ipynb="{}\n"),
    # the generic "run from the folder that holds it", run from there (sweep 36 A-W7)
    row("import-a-missing-notebook-beside-the-py-file", "check exp.ipynb:E", 2,
        'Error: Could not import module "exp.ipynb": there is no file exp.ipynb here; the '
        'experiment\'s file is exp.py: give "exp.py:NAME".'),
    row("import-a-backup-file-name", "check exp.py.bak:E", 2,
        'Error: Could not import module "exp.py.bak": there is no file exp.py.bak here; the '
        'experiment\'s file is exp.py: give "exp.py:NAME".'),
    row("import-a-spec-ending-in-a-dot", "check exp.:E", 2,
        'Error: Could not import module "exp.": there is no file exp. here; the experiment\'s '
        'file is exp.py: give "exp.py:NAME".'),
    # "no such file." alone (sweep 36 A-W7)
    row("import-a-file-path-dot-its-class", "check pkg/mod.E", 2,
        'Error: Could not import module "pkg/mod.E": no such file; pkg/mod.py is a file: to '
        'name an object in it, write "pkg/mod.py:E".', **{"pkg/mod.py": "E = 1\n"}),
    row("import-missing-attribute", "check exp:F", 2,
        'Error: Attribute "F" not found in module "exp". Found: E.'),
    row("import-sys-exit", "check exp:E", 2,
        'Error: module "exp" called sys.exit(3) while being imported (exp.py:3); keep module '
        'level free of exits (guard scripts with if __name__ == "__main__":)',
        exp__py="import sys\n\nsys.exit(3)\n"),
    # exit 0 and no word, config's YAML empty (sweep 37 A-S3)
    row("import-os-exit-in-the-module-s-getattr", "config exp:Lazy", 2,
        'Error: module "exp" called os._exit(0) while being imported (exp.py:5); keep module '
        'level free of exits (guard scripts with if __name__ == "__main__":)',
        exp__py='import os\n\ndef __getattr__(name):\n    if name == "Lazy":\n'
                '        os._exit(0)\n    raise AttributeError(name)\n'),
    # "internal error in tunedsl: RecursionError" in yaml's re.compile (sweep 37 A-T2)
    row("import-a-module-lowering-the-recursion-limit", "config exp:E", 0, "mode: both",
        exp__py=experiment_file(head="import sys\nsys.setrecursionlimit(100)\n" + HEAD)),
    # "internal error in tunedsl: ModuleNotFoundError: No module named 'yaml'" (sweep 38 A-T2)
    row("import-a-module-clearing-sys-path", "config exp:E", 0, "mode: both",
        exp__py=experiment_file(head="import sys\nsys.path.clear()\n" + HEAD)),
    # check printed nothing at all, exit 0 (sweep 38 A-W2)
    row("import-a-module-replacing-standard-output", "check exp:E --backend trinity", 0,
        "ok  experiment: exp:E builds",
        exp__py=experiment_file(head="import io, sys\nsys.stdout = io.StringIO()\n" + HEAD)),
    # "internal error in tunedsl: ValueError: I/O operation on closed file" (sweep 39 A-T1);
    # run in a subprocess, whose standard output is Python's own
    row("import-a-module-closing-standard-output", "check exp:E --backend trinity", 0,
        "ok  experiment: exp:E builds",
        exp__py=experiment_file(head="import sys\nsys.stdout.close()\n" + HEAD)),
    # the common idiom to force UTF-8 output: config died with Python's fatal "lost
    # sys.stderr" (it had given the module standard error as its output), check refused the
    # module (sweep 40 A-T1)
    row("config-a-module-forcing-utf-8-output", "config exp:E", 0, "mode: both",
        exp__py=experiment_file(head="import io, sys\nsys.stdout = io.TextIOWrapper("
                                     "sys.stdout.detach(), encoding='utf-8')\n" + HEAD)),
    row("check-a-module-forcing-utf-8-output", "check exp:E --backend trinity", 0,
        "ok  experiment: exp:E builds",
        exp__py=experiment_file(head="import io, sys\nsys.stdout = io.TextIOWrapper("
                                     "sys.stdout.detach(), encoding='utf-8')\n" + HEAD)),
    # reconfigure(encoding=...) makes the stream strict: check's report of a data key past
    # ASCII was "internal error in tunedsl: UnicodeEncodeError" (sweep 41 A-T2)
    row("check-a-module-making-its-output-ascii", "check exp:E --backend trinity", 0,
        "ok  experiment: exp:E builds",
        exp__py=experiment_file(head="import sys\nsys.stdout.reconfigure(encoding='ascii')\n"
                                     + HEAD),
        data='{"question": "1+1=", "answer": "2", "r\u00e9ponse": "x"}\n' * 2),
    # exit 0 and no word (sweep 33 A-S3)
    row("import-os-exit", "check exp:E", 2,
        'Error: module "exp" called os._exit(0) while being imported (exp.py:3); keep module '
        'level free of exits (guard scripts with if __name__ == "__main__":)',
        exp__py="import os\n\nos._exit(0)\n"),
    # from a thread the module joins, and through posix: exit 0, nothing said (sweep 35 A-S5)
    row("import-os-exit-in-a-thread", "check exp:E", 2,
        'Error: module "exp" called os._exit(0) while being imported (at import); keep module '
        'level free of exits (guard scripts with if __name__ == "__main__":)',
        exp__py="import os, threading\n\nthread = threading.Thread(target=os._exit, "
                "args=(0,))\nthread.start()\nthread.join()\n"),
    row("import-posix-exit", "check exp:E", 2,
        'Error: module "exp" called os._exit(0) while being imported (exp.py:3); keep module '
        'level free of exits (guard scripts with if __name__ == "__main__":)',
        exp__py="import posix\n\nposix._exit(0)\n"),
    row("import-module-hides-a-library", "check exp:E", 2,
        "Error: datasets.py: its name hides the datasets library, which tunedsl and "
        "Trinity-RFT import (its folder comes first on Python's import path); rename it, e.g. "
        "my_datasets", datasets__py="# the user's own helpers\n"),
    Row("import-package-hides-a-library", ("check", "sub/exp.py:E"), 2,
        "Error: sub/torch: its name hides the torch library, which tunedsl and Trinity-RFT "
        "import (its folder comes first on Python's import path); rename it, e.g. my_torch",
        {"sub/exp.py": experiment_file(), "sub/torch/__init__.py": ""}),
    Row("data-beside-the-current-folder-not-the-module", ("check", "sub/exp.py:E"), 2,
        "Error: E (sub/exp.py:15): train_dataset.path: 'data': a relative path is read beside "
        "the file that names it, and {dir}/sub holds no 'data'; the one in the current folder "
        "({dir}/data) is not read: write the path relative to {dir}/sub, or absolute",
        {"sub/exp.py": experiment_file(), "data/train.jsonl": DATA}),
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
    row("experiment-workflow-called", "check exp:E", 2,  # (sweep 43 A-W10: a coroutine's
        # repr, and two lines of "coroutine 'solve' was never awaited")
        "Error: @experiment E (exp.py:15).workflow is a call of solve(...), not the function; "
        "assign the function itself: workflow = solve",
        exp__py=experiment_file(replaced("workflow = solve", "workflow = solve({}, None)"))),
    # a decorator without functools.wraps: told to define at module level a function that
    # was (sweep 46 A-W7)
    row("workflow-a-decorator-s-wrapper", "check exp:E", 2,
        "Error: E (exp.py:27): @workflow wrapper (exp.py:16) is defined inside plain(), so no "
        "other process can import it; in plain(), decorate the wrapper with "
        "@functools.wraps(...) of the function it wraps, so that it is found by that "
        "module-level function's name",
        exp__py=experiment_file(replaced("workflow = solve", "workflow = wrapped"), extra=(
            "def plain(fn):\n    async def wrapper(task, model):\n"
            "        return await fn(task, model)\n    return wrapper\n\n\n"
            "@workflow\n@plain\nasync def wrapped(task, model):\n"
            "        return WorkflowOutput(response='x')\n\n\n"))),
    # a decorator factory's (@retry(3)) was still told to define it at module level (sweep
    # 47 A-W4)
    row("workflow-a-decorator-factory-s-wrapper", "check exp:E", 2,
        "Error: E (exp.py:29): @workflow wrapper (exp.py:17) is defined inside retry(), so no "
        "other process can import it; in retry(), decorate the wrapper with "
        "@functools.wraps(...) of the function it wraps, so that it is found by that "
        "module-level function's name",
        exp__py=experiment_file(replaced("workflow = solve", "workflow = wrapped"), extra=(
            "def retry(times):\n    def deco(fn):\n        async def wrapper(task, model):\n"
            "            return await fn(task, model)\n        return wrapper\n"
            "    return deco\n\n\n"
            "@workflow\n@retry(3)\nasync def wrapped(task, model):\n"
            "        return WorkflowOutput(response='x')\n\n\n"))),
    # told to put @workflow on the wrapper inside the decorator (sweep 49 A-W11)
    row("workflow-under-a-decorator-above-it", "check exp:E", 2,
        "Error: @experiment E (exp.py:27).workflow must be a @workflow function (got the "
        "undecorated function plain.<locals>.wrapper): put @workflow outermost, above the "
        "decorator that wraps wrapped (exp.py:21), which hides it",
        exp__py=experiment_file(replaced("workflow = solve", "workflow = wrapped"), extra=(
            "def plain(fn):\n    async def wrapper(task, model):\n"
            "        return await fn(task, model)\n    return wrapper\n\n\n"
            "@plain\n@workflow\nasync def wrapped(task, model):\n"
            "        return WorkflowOutput(response='x')\n\n\n"))),
    # "(got <exp.Retry object at 0x...> of type Retry): assign a function decorated with
    # @workflow" (sweep 50 A-W8)
    row("workflow-under-a-class-decorator-above-it", "check exp:E", 2,
        "Error: @experiment E (exp.py:29).workflow must be a @workflow function (got a Retry "
        "object): put @workflow outermost, above the decorator that wraps wrapped "
        "(exp.py:23), which hides it",
        exp__py=experiment_file(replaced("workflow = solve", "workflow = wrapped"), extra=(
            "class Retry:\n    def __init__(self, fn):\n        self.fn = fn\n\n"
            "    async def __call__(self, task, model):\n"
            "        return await self.fn(task, model)\n\n\n"
            "@Retry\n@workflow\nasync def wrapped(task, model):\n"
            "        return WorkflowOutput(response='x')\n\n\n"))),
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
    row("record-learning-rate-beyond-float32", "check exp:E --set algorithm.learning_rate=1e39",
        2, "Error: --set: invalid value @ algorithm.learning_rate: must be <= 3.4e+38 (got "
        "1e+39)"),
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
        "Error: @experiment E (exp.py:15).project '../../x' names a folder of the "
        "run's path (checkpoint_root_dir/project/name), so it may hold only ASCII letters, "
        "digits, '_', '.' and '-' (not '..'): write e.g. 'x', and choose where runs go with "
        "checkpoint_root_dir",
        exp__py=experiment_file(BODY + 'project = "../../x"\n')),
    row("project-absolute", "config exp:E --set project=/etc/x", 2,
        "Error: --set: invalid value @ project: '/etc/x' names a folder of the run's path "
        "(checkpoint_root_dir/project/name), so it may hold only ASCII letters, digits, '_', '.' "
        "and '-' (not '..'): write e.g. 'etc-x', and choose where runs go with "
        "checkpoint_root_dir"),
    # ------------------------------------------------------------------ data
    row("data-bad-json-line", "check exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:3: not a JSON line (Expecting "
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
    # The keys are quoted, and a near one named: a trailing space was invisible.
    row("data-key-with-a-trailing-space", "check exp:E", 2,
        "Error: train_dataset: key 'question' read by @workflow solve (exp.py:4) is missing "
        "from {dir}/data (split 'train'); its rows have: 'answer', 'question ' (did you mean "
        "'question '?)",
        data='{"question ": "1", "answer": "2"}\n{"question ": "3", "answer": "4"}\n'),
    row("data-key-missing-everywhere", "check exp:E", 2,
        "Error: train_dataset: key 'question' read by @workflow solve (exp.py:4) is missing "
        "from {dir}/data (split 'train'); its rows have: 'answer', 'q'",
        data='{"q": "1", "answer": "2"}\n{"q": "3", "answer": "4"}\n'),
    # "its rows have: " and nothing after it (sweep 24 A-W6)
    row("data-rows-without-keys", "check exp:E", 2,
        "Error: train_dataset: key 'question' read by @workflow solve (exp.py:4) is missing "
        "from {dir}/data (split 'train'); its rows have no keys at all ({})",
        data='{}\n{}\n'),
    row("data-mixed-types", "check exp:E", 2,
        "Error: train_dataset: key 'answer' read by @judge exact (exp.py:10) has values of "
        "different types across rows of {dir}/data (split 'train'): string (first at "
        "{dir}/data/train.jsonl:1), integer (first at {dir}/data/train.jsonl:3); make them "
        "one type", data=DATA + '{"question": "3+3=", "answer": 6}\n'),
    row("data-fewer-rows-than-a-batch", "check exp:E --set algorithm.batch_size=3", 2,
        "Error: train_dataset: {dir}/data (split 'train') has 2 rows, fewer than "
        "algorithm.batch_size = 3, so not one training step can be filled; lower batch_size "
        "or add tasks"),
    # a file the library does not read, fewer rows than a batch: "lower batch_size or add
    # tasks" (sweep 46 A-W4)
    row("data-upper-case-extension-few-rows", "check exp:E --set train_dataset.path=up", 2,
        "Error: train_dataset: the folder {dir}/up holds no data files (one of .arrow, .csv, "
        ".json, .jsonl, .parquet, .tsv, .txt); rename train.JSONL to train.jsonl (the datasets "
        "library reads extensions in lower case only)",
        **{"up/train__JSONL": '{"question": "1+1=", "answer": "2"}\n'}),
    row("data-empty", "check exp:E", 2,
        "Error: train_dataset: {dir}/data (split 'train') has no rows; point it at a dataset with "
        "tasks", data=""),
    row("data-path-missing", "check exp:E", 2,
        "Error: train_dataset: path ./nowhere does not exist; fix the path, or give a Hugging "
        "Face hub id such as 'openai/gsm8k'",
        exp__py=experiment_file(replaced('Dataset("data"', 'Dataset("./nowhere"'))),
    # both were "not a local path ... switched off here", a hub id (sweep 45 A-W9)
    row("data-path-a-file-url", "check exp:E", 2,
        "Error: train_dataset: path file://data is a file:// URL, which the datasets library "
        "reads as a hub id; give the path itself, data",
        exp__py=experiment_file(replaced('Dataset("data"', 'Dataset("file://data"'))),
    row("data-path-a-shell-variable", "check exp:E", 2,
        "Error: train_dataset: path $PWD/data holds $PWD, which is not expanded here (settings "
        "read ${env:PWD}, and Python code reads none); write the path itself",
        exp__py=experiment_file(replaced('Dataset("data"', 'Dataset("$PWD/data"'))),
    # both were "not a local path ... switched off here" (with the hub on: "does not
    # answer"), a hub id (sweep 48 A-W3)
    row("data-path-a-pattern", "check exp:E", 2,
        "Error: train_dataset: path data/*.jsonl holds the pattern '*', and a dataset's path "
        "is read as a folder, a file or a hub id, not as a pattern; give the folder, data (its "
        "file named after the split, train.jsonl, is read as split 'train'), or one file",
        exp__py=experiment_file(replaced('Dataset("data"', 'Dataset("data/*.jsonl"'))),
    row("data-path-a-pattern-set", "check exp:E --set train_dataset.path=data/train-?.csv", 2,
        "Error: train_dataset: path data/train-?.csv holds the pattern '?', and a dataset's "
        "path is read as a folder, a file or a hub id, not as a pattern; give the folder, data "
        "(its file named after the split, train.csv, is read as split 'train'), or one file"),
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
    row("check-data-not-utf8", "check exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:2: not UTF-8 text (byte 0xff); save the "
        "file as UTF-8",
        data=b'{"question": "1+1=", "answer": "2"}\n{"question": "2+2=", "answer": "\xff"}\n'),
    row("check-huge-reward", "check exp:E", 2,
        "Error: rollout: on the first training task, with a scripted model that always "
        "replies '0': @judge exact (exp.py:10) returned the reward 1e+308; a reward must be at "
        "most 1e+15 in size (larger ones overflow the group's statistics): scale it down",
        exp__py=experiment_file(head=HEAD.replace('float(response == task["answer"])',
                                                  "1e308"))),
    row("check-reward-a-string", "check exp:E", 2,
        "Error: rollout: on the first training task, with a scripted model that always "
        "replies '0': @judge exact (exp.py:10) returned the reward '1' (a str); a reward must "
        "be a finite number",
        exp__py=experiment_file(head=HEAD.replace('float(response == task["answer"])',
                                                  '"1"'))),
    # The user's line with the typo first (tunedsl's frames below it are not shown), then
    # "Error: ... raised TypeError: model.chat() got the unknown option(s) 'temprature' (did
    # you mean 'temperature'?); ..." (tests/test_local_chat.py pins that line).
    row("check-chat-option-typo", "check exp:E", 2, "Traceback (most recent call last):",
        exp__py=experiment_file(head=HEAD.replace(
            'task["question"]}])', 'task["question"]}], temprature=0.5)'))),
    row("check-chat-not-awaited", "check exp:E", 2,
        "Error: rollout: on the first training task, with a scripted model that always "
        "replies '0': @workflow solve (exp.py:4) returned a coroutine as its response: a call "
        "such as model.chat(...) was not awaited; write reply = await model.chat(...)",
        exp__py=experiment_file(head=HEAD.replace(
            "reply = await model.chat(", "reply = model.chat(").replace(
            "response=reply.content", "response=reply"))),
    # ------------------------------------------------------------------ valid, but nothing learned
    row("check-temperature-zero-grpo", "check exp:E --set model.temperature=0", 0,
        "note  model.temperature = 0: every rollout of a task's group gets the same reply, so "
        "grpo's advantages (each reward against its group's) are all 0 and training changes "
        "nothing; sample at a temperature above 0 (1.0 is the usual)"),
    # no note below 0 exactly, where vLLM answers greedily too (sweep 24 A-W8)
    row("check-temperature-below-greedy", "check exp:E --set model.temperature=1e-320", 0,
        "note  model.temperature = 1e-320: every rollout of a task's group gets the same reply "
        "(below 1e-05 the engines answer greedily, as at 0), so grpo's advantages (each reward "
        "against its group's) are all 0 and training changes nothing; sample at a temperature "
        "above 0 (1.0 is the usual)"),
    row("check-chat-temperature-zero-rloo", "check exp:E --set algorithm.algorithm_type=rloo",
        0, "note  the workflow's model calls set temperature=0: every rollout of a task's group "
        "gets the same reply, so rloo's advantages (each reward against its group's) are all 0 "
        "and training changes nothing; sample at a temperature above 0 (1.0 is the usual)",
        exp__py=experiment_file(head=HEAD.replace(
            'task["question"]}])', 'task["question"]}], temperature=0)'))),
    row("check-eval-set-length", "check exp:E", 2,
        "Error: E (exp.py:15): eval_dataset.total_steps = 2: the eval set is read whole at each "
        "evaluation, so it would be ignored; remove it (tunedsl eval -n N evaluates the first N "
        "tasks)",
        exp__py=experiment_file(BODY + 'eval_dataset = Dataset("data", split="train", '
                                       'total_steps=2)\n')),
    row("eval-set-length", "eval exp:E --base-url http://127.0.0.1:9/v1 --model m", 2,
        "Error: E (exp.py:15): eval_dataset.total_epochs = 3: the eval set is read whole at each "
        "evaluation, so it would be ignored; remove it (tunedsl eval -n N evaluates the first N "
        "tasks)",
        exp__py=experiment_file(BODY + 'eval_dataset = Dataset("data", split="train", '
                                       'total_epochs=3)\n')),
    row("check-turns-without-gigpo", "check exp:E", 0,
        "note  the workflow ends turns (model.end_turn), whose rewards and states only the gigpo "
        "advantage reads; grpo (grpo) trains on each rollout's reward alone: use "
        "Algorithm(\"gigpo\", ...) or set algorithm.advantage_fn = 'gigpo' to credit each turn",
        exp__py=experiment_file(head=HEAD.replace(
            'task["question"]}])', 'task["question"]}])\n    model.end_turn(reward=0.5)'))),
    row("check-turns-with-gigpo", "check exp:E --set algorithm.advantage_fn=gigpo", 0,
        "ok  rollout: workflow and judge ran on the first training task with a scripted model "
        "(reward 0, 1 turn ended)", absent="end_turn",
        exp__py=experiment_file(head=HEAD.replace(
            'task["question"]}])', 'task["question"]}])\n    model.end_turn(reward=0.5)'))),
    row("check-lr-warmup-longer-than-run", "check exp:E --set algorithm.lr_warmup_steps=10", 0,
        "note  algorithm.lr_warmup_steps = 10: the run has 1 step, so the learning rate is "
        "still rising when it ends and never reaches algorithm.learning_rate; make "
        "lr_warmup_steps a fraction of the steps (a tenth is usual)"),
    # ------------------------------------------------------------------ eval and rescore
    row("config-a-trinity-cluster-of-no-nodes", "config exp:E", 2,
        "Error: trinity.cluster.node_num = 0: give a whole number of nodes, 1 or more (or "
        "leave it out: the run reads the cluster from Ray)",
        tunedsl__toml="[trinity]\ncluster.node_num = 0\n"),
    # merged unchecked: the run's folder left checkpoint_root_dir, untimed (sweep 28 A-S1)
    row("config-a-trinity-run-name-that-is-a-path", "config exp:E", 2,
        "Error: {dir}/tunedsl.toml: trinity.name '../../elsewhere' names a folder of the run's "
        "path (checkpoint_root_dir/project/name), so it may hold only ASCII letters, digits, "
        "'_', '.' and '-' (not '..'): write e.g. 'elsewhere', and choose where runs go with "
        "checkpoint_root_dir",
        tunedsl__toml='[trinity]\nname = "../../elsewhere"\n'),
    # passed: vLLM would find out once Ray and the GPUs were taken (sweep 24)
    row("check-trinity-model-folder-without-config", "check exp:E --backend trinity", 2,
        "Error: model.model_path: {dir}/weights has no config.json, so it is not a saved model "
        "folder; give the folder of a Hugging Face model (or its hub id)",
        exp__py=experiment_file(replaced('Model("m"', 'Model("weights"')),
        **{"weights/notes.txt": "not a model\n"}),
    # passed, with a model_type no engine knows (sweep 25, sweep 24 A-S4's rest)
    row("check-trinity-model-of-an-unknown-type", "check exp:E --backend trinity", 2,
        "Error: model.model_path: {dir}/weights/config.json: its model_type 'nosuchmodel' is "
        "not one the installed transformers knows; vLLM and verl load it so too: give the "
        "folder of a model transformers knows",
        exp__py=experiment_file(replaced('Model("m"', 'Model("weights"')),
        **{"weights/config.json": '{"model_type": "nosuchmodel"}\n'}),
    # passed: check --backend trinity read no weights, vLLM would fail on them (sweep 33 A-S1)
    row("check-trinity-model-weights-a-git-lfs-pointer", "check exp:E --backend trinity", 2,
        "Error: model.model_path: {dir}/weights/model.safetensors is a git-lfs pointer, not "
        "the file itself (a clone without git-lfs); run git lfs pull in {dir}/weights",
        exp__py=experiment_file(replaced('Model("m"', 'Model("weights"')),
        **{"weights/config.json": '{"model_type": "llama"}\n',
           "weights/model.safetensors": "version https://git-lfs.github.com/spec/v1\n"
                                        "oid sha256:4d7a\nsize 99\n"}),
    row("check-a-trinity-cluster-of-no-gpus", "check exp:E --backend trinity", 2,
        "Error: trinity.cluster.gpu_per_node = 0: give a whole number of GPUs per node, 1 or "
        "more (or leave it out: the run reads the cluster from Ray)",
        tunedsl__toml="[trinity]\ncluster.gpu_per_node = 0\n"),
    # os.stat's "File name too long" was an internal error (sweep 22 T4)
    row("config-output-name-past-255-bytes", "config exp:E -o " + "x" * 300 + ".yaml", 2,
        "Error: -o " + "x" * 300 + ".yaml: cannot use that path (File name too long); a file "
        "or folder name holds at most 255 bytes; give a shorter one"),
    # tomllib's "Exceeds the limit (4300 digits)" was an internal error (sweep 22 T1)
    row("set-an-integer-of-5000-digits", "check exp:E --set model.max_tokens=" + "9" * 5000, 2,
        "Error: --set 'model.max_tokens=" + "9" * 5000 + "': an integer of more than 4,300 "
        "digits, more than Python reads; give a smaller number, or quote it as text"),
    row("config-output-under-a-file", "config exp:E -o afile/x.yaml", 2,
        "Error: -o afile/x.yaml: afile is a file, not a folder; give a file in a folder",
        afile="hi\n"),
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
    # the form was right and was called wrong (sweep 31 W-08)
    row("eval-aux-not-a-url", "eval exp:E --base-url {bad}/html/v1 --model x --aux a=x,y",
        2, "Error: --aux 'a=x,y': 'x' is not an http(s) URL; give the endpoint's, e.g. "
        "--aux a=http://localhost:8001/v1,y"),
    row("eval-endpoint-answers-html", "eval exp:E --base-url {bad}/html/v1 --model x", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/html/v1/ answered an HTML page, not an "
        "OpenAI chat completion; check the URL (an OpenAI-compatible server's ends in /v1)"),
    # Three rollouts start three workers, not a million (tests/test_evaluate.py counts them).
    row("eval-concurrency-beyond-the-rollouts",
        "eval exp:E --base-url {bad}/html/v1 --model x -n 2 --repeat 2 --concurrency 1000000", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/html/v1/ answered an HTML page, not an "
        "OpenAI chat completion; check the URL (an OpenAI-compatible server's ends in /v1)"),
    # "raised NotFoundError: 404: Not Found", naming neither the URL nor /v1 (sweep 25 W-04)
    row("eval-endpoint-without-its-route", "eval exp:E --base-url {bad}/noroute --model x", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/noroute/ answered 404 Not Found for "
        "/chat/completions, not an OpenAI chat completion; check the URL (an "
        "OpenAI-compatible server's ends in /v1)"),
    row("eval-endpoint-without-the-model", "eval exp:E --base-url {bad}/nomodel/v1 --model x",
        1, "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "NotFoundError: Error code: 404 - {'object': 'error', 'message': 'The model `x` does "
        "not exist.', 'type': 'NotFoundError', 'param': None, 'code': 404}"),
    row("eval-endpoint-answers-invalid-json", "eval exp:E --base-url {bad}/json/v1 --model x",
        1, "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/json/v1/ answered invalid JSON, not an "
        "OpenAI chat completion; check the URL (an OpenAI-compatible server's ends in /v1)"),
    # aiohttp's limit said as a 400 the server never sent (sweep 34 W2)
    row("eval-endpoint-answers-a-header-too-long",
        "eval exp:E --base-url {bad}/bigheader/v1 --model x", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/bigheader/v1/ answered a header longer than "
        "the 8190 bytes the HTTP client (aiohttp) reads; a proxy or server in between adds it: "
        "answer without it, or go around that proxy"),
    row("eval-endpoint-answers-latin-1", "eval exp:E --base-url {bad}/latin1/v1 --model x",
        1, "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/latin1/v1/ answered text that is not UTF-8, "
        "not an OpenAI chat completion; check the URL (an OpenAI-compatible server's ends in "
        "/v1)"),
    row("eval-endpoint-answers-a-number-too-long",
        "eval exp:E --base-url {bad}/hugeint/v1 --model x", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/hugeint/v1/ answered a number too long to "
        "read (thousands of digits), not an OpenAI chat completion; check the URL (an "
        "OpenAI-compatible server's ends in /v1)"),
    # the openai client a workflow calls itself is worded as model.chat is
    row("eval-endpoint-answers-latin-1-to-the-openai-client",
        "eval exp:E --base-url {bad}/latin1/v1 --model x", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/latin1/v1/ answered text that is not UTF-8, "
        "not an OpenAI chat completion; check the URL (an OpenAI-compatible server's ends in "
        "/v1)", exp__py=experiment_file(head=HEAD.replace(
            'reply = await model.chat([{"role": "user", "content": task["question"]}])',
            'reply = (await model.openai_client.chat.completions.create(model="x", messages=['
            '{"role": "user", "content": task["question"]}])).choices[0].message'))),
    # the openai client a workflow calls itself: what model.chat refuses, it refuses
    # (it crashed in tunedsl's own recording: sweep 16 W1)
    row("eval-endpoint-answers-no-choices-to-the-openai-client",
        "eval exp:E --base-url {bad}/empty/v1 --model x", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/empty/v1/ answered a completion with no "
        "choices, not an OpenAI chat completion; check the URL (an OpenAI-compatible "
        "server's ends in /v1)", exp__py=experiment_file(head=OPENAI_CLIENT_HEAD)),
    # "raised APITimeoutError: Request timed out.": the openai package's aiohttp transport
    # maps every connection error to a timeout (sweep 50 B-W7)
    row("eval-endpoint-closes-the-connection-to-the-openai-client",
        "eval exp:E --base-url {bad}/close/v1 --model x -n 1", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "APIConnectionError: Connection error: Server disconnected",
        exp__py=experiment_file(head=OPENAI_CLIENT_HEAD)),
    # a 200 carrying an error: the server's words (sweep 16 W2)
    row("eval-endpoint-answers-an-error-with-status-200",
        "eval exp:E --base-url {bad}/error200/v1 --model x", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ConnectionError: the model endpoint {bad}/error200/v1/ answered an error ('model "
        "overloaded') with status 200, not an OpenAI chat completion; check the URL (an "
        "OpenAI-compatible server's ends in /v1)"),
    row("eval-output-is-a-dash", "eval exp:E --base-url http://127.0.0.1:9/v1 --model m -o -",
        2, "Error: tunedsl eval: argument -o/--output: '-' (standard input or output) is not "
        "taken; give a file name; see tunedsl eval --help", absent="-"),
    row("eval-api-key-env-is-the-key", "eval exp:E --base-url http://127.0.0.1:9/v1 --model m "
        "--api-key-env sk-live-123456", 2,
        "Error: --api-key-env: what was given is no environment variable's name (it looks "
        "like a key, which tunedsl takes only from the environment); export the key, e.g. "
        "export OPENAI_API_KEY=..., and give the variable's name"),
    row("eval-base-url-port-out-of-range",
        "eval exp:E --base-url http://127.0.0.1:99999/v1 --model m", 2,
        "Error: --base-url http://127.0.0.1:99999/v1: its port is out of range (1 to 65535); "
        "give the endpoint's, e.g. http://localhost:8000/v1"),
    # port 0 passed, and every rollout failed to connect (sweep 22 W7)
    row("eval-base-url-port-zero",
        "eval exp:E --base-url http://127.0.0.1:0/v1 --model m", 2,
        "Error: --base-url http://127.0.0.1:0/v1: its port is 0, which no endpoint listens on "
        "(1 to 65535); give the endpoint's, e.g. http://localhost:8000/v1"),
    # check refused it; eval read "4" as 4 and scored a right answer 0 (sweep 16 S3)
    row("eval-a-column-of-mixed-types", "eval exp:E --base-url http://127.0.0.1:9/v1 "
        "--model m", 2,
        "Error: train_dataset: key 'answer' read by @judge exact (exp.py:10) has values of "
        "different types across rows of {dir}/data (split 'train'): boolean (first at "
        "{dir}/data/train.jsonl:1), string (first at {dir}/data/train.jsonl:2); make them one "
        "type", data='{"question": "1+1=", "answer": true}\n{"question": "2+2=", '
                     '"answer": "4"}\n'),
    row("config-a-param-spelt-like-a-declared-one", "config exp:E --set params.prefx=Q", 2,
        "Error: --set: params.prefx is not a param of E (exp.py:15) (did you mean 'prefix'?); "
        "its params are prefix (a param of another name is added as a new one)",
        exp__py=experiment_file(BODY + 'params = {"prefix": ""}\n')),
    # a quoted key is read as TOML reads it: one param "pre.fix", not pre -> fix (sweep
    # 16 S1); its line names it so
    row("config-a-quoted-param-key", "config exp:E --set params.\"pre.fix\"=Q", 2,
        "Error: E (exp.py:15), --set: params: pre.fix set, but neither @workflow solve "
        "(exp.py:4) nor @judge exact (exp.py:10) takes them, so they reach nothing; add a "
        "params argument to the function that reads them, or remove them",
        exp__py=experiment_file(BODY + 'params = {"pre.fix": ""}\n')),
    row("config-settings-a-pyproject-without-tunedsl", "config exp:E --settings pp.toml", 2,
        "Error: pp.toml: a project file with no [tool.tunedsl] table, so it holds no tunedsl "
        "settings; add the settings under [tool.tunedsl], or give a tunedsl.toml",
        pp__toml='[project]\nname = "x"\n'),
    row("config-a-models-path", "config exp:E --set model.path=x", 2,
        "Error: --set: extra fields found (path) @ model (did you mean 'model_path'?)"),
    row("config-a-warmups-total-steps", "config exp:E --set warmup.total_steps=1", 2,
        "Error: --set: extra fields found (total_steps) @ warmup: it is a field of "
        "warmup_dataset, train_dataset and eval_dataset; set warmup_dataset.total_steps (in "
        "TOML: under [warmup_dataset])"),
    row("config-an-algorithms-name", "config exp:E --set algorithm.name=x", 2,
        "Error: --set: extra fields found (name) @ algorithm: it is a top-level setting; set "
        "name (in TOML: above every [table])"),
    # told to set the experiment's name, which names its run directories (sweep 47 B-W6)
    row("config-a-models-name", "config exp:E --set model.name=Qwen3-8B", 2,
        "Error: --set: extra fields found (name) @ model: it is not a field of a model, which "
        "is named by its model_path (a folder, a hub id, or the name an endpoint serves); set "
        "model.model_path"),
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
        "eval exp:E --base-url {bad}/html/v1?api-key=SECRET --model x -o o.jsonl", 2,
        "Error: --base-url: {bad}/html/v1 is followed by a query string (?...), which the "
        "client would put before /chat/completions (every request would miss); give the "
        "endpoint's URL alone", absent="SECRET"),
    row("eval-rollout-timeout", "eval exp:E --base-url {bad}/html/v1 --model x "
        "--set rollout_timeout=1", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) timed out "
        "after 1s (rollout_timeout); make it faster or raise rollout_timeout",
        exp__py=experiment_file(head=HEAD.replace(
            "    reply = await model.chat", "    import asyncio\n    await asyncio.sleep(30)\n"
            "    reply = await model.chat"))),
    # "raise rollout_timeout" beside "--resume runs the failed ones again", which refused a
    # raised one (sweep 47 B-W4)
    row("eval-some-rollouts-time-out", "eval exp:E --base-url http://127.0.0.1:9/v1 --model x "
        "--set rollout_timeout=1 -o o.jsonl", 0,
        "Warning: 1 of 2 rollouts failed (each counted as reward 0); the first error: "
        "@workflow solve (exp.py:4) timed out after 1s (rollout_timeout); make it faster or "
        "raise rollout_timeout; the same command with -o o.jsonl --resume runs the failed ones "
        "again, with the rollout_timeout it began with (a larger one needs another -o file)",
        exp__py=experiment_file(head=HEAD.replace(
            "    reply = await model.chat", "    import asyncio\n"
            "    if task['question'] == '1+1=':\n        await asyncio.sleep(30)\n"
            "    return WorkflowOutput(response=task['answer'])\n"
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
            "task_index": 0, "repeat": 0, "reward": 1.0, "error": None, "eval_settings": {
                "split": None, "limit": None, "repeat": 1, "model": "a",
                "base_url": "http://127.0.0.1:9/v1", "checkpoint": None, "aux": []}}) + "\n"),
    row("eval-resume-with-another-rollout-timeout",
        "eval exp:E --base-url http://127.0.0.1:9/v1 --model a -o o.jsonl --resume "
        "--set rollout_timeout=5", 2,
        "Error: --resume o.jsonl: its results were made with other settings (rollout_timeout "
        "3600 -> 5); merging would mix two evaluations, so resume with the same options or "
        "write to another -o file", o__jsonl=json.dumps({
            "task_index": 0, "repeat": 0, "reward": 1.0, "error": None, "eval_settings": {
                "split": None, "limit": None, "repeat": 1, "model": "a",
                "base_url": "http://127.0.0.1:9/v1", "checkpoint": None, "aux": [],
                "rollout_timeout": 3600}}) + "\n"),
    row("eval-resume-with-another-repeat",
        "eval exp:E --base-url http://127.0.0.1:9/v1 --model a -o o.jsonl --resume "
        "--repeat 2 -n 1", 2,
        "Error: --resume o.jsonl: its results were made with other settings (limit None -> "
        "1; repeat 1 -> 2); merging would mix two evaluations, so resume with the same "
        "options or write to another -o file", o__jsonl=json.dumps({
            "task_index": 0, "repeat": 0, "reward": 1.0, "error": None, "eval_settings": {
                "split": None, "limit": None, "repeat": 1, "model": "a",
                "base_url": "http://127.0.0.1:9/v1", "checkpoint": None, "aux": []}}) + "\n"),
    # ------------------------------------------------------------------ more settings, records,
    # experiment classes, decorators and the preflight rollout
    row("config-output-unwritable", 'config exp:E -o /proc/nope/x.yaml', 2,
        'Error: -o /proc/nope/x.yaml: cannot write it (No such file or directory); choose a '
        'file in a folder you can write'),
    row("settings-unknown-key-toml", 'check exp:E', 2,
        'Error: {dir}/tunedsl.toml: extra fields found (grop_size) @ algorithm (did you '
        "mean 'group_size'?)",
        tunedsl__toml="[algorithm]\ngrop_size = 4\n"),
    row("settings-unknown-section-toml", 'check exp:E', 2,
        'Error: {dir}/tunedsl.toml: extra fields found (algorithms) @ <top level> (did '
        "you mean 'algorithm'?)",
        tunedsl__toml="[algorithms]\ngroup_size = 4\n"),
    # A section's field at the top level, or a section in upper case, had no suggestion.
    row("settings-field-at-the-top-level-toml", 'check exp:E', 2,
        "Error: {dir}/tunedsl.toml: extra fields found (learning_rate) @ <top level>: it is a "
        "field of algorithm and warmup; set algorithm.learning_rate (in TOML: under "
        "[algorithm])",
        tunedsl__toml="learning_rate = 1e-3\n"),
    row("set-section-in-upper-case", 'check exp:E --set ALGORITHM.group_size=2', 2,
        "Error: --set: extra fields found (ALGORITHM) @ <top level> (did you mean "
        "'algorithm'?)"),
    row("settings-invalid-toml", 'check exp:E', 2,
        "Error: {dir}/tunedsl.toml: invalid TOML: Expected ']' at the end of a table "
        'declaration (at line 1, column 11)',
        tunedsl__toml="[algorithm\n"),
    row("set-unknown-key", 'check exp:E --set algorithm.grop_size=4', 2,
        'Error: --set: extra fields found (grop_size) @ algorithm (did you mean '
        "'group_size'?)"),
    row("set-no-equals", 'check exp:E --set algorithm.group_size', 2,
        "Error: --set 'algorithm.group_size': expected KEY=VALUE, e.g. --set "
        'algorithm.group_size=8'),
    row("set-wrong-type", 'check exp:E --set algorithm.group_size=four', 2,
        'Error: --set: invalid value @ algorithm.group_size: must be an integer (got '
        "'four')"),
    row("set-bool-for-int", 'check exp:E --set algorithm.batch_size=true', 2,
        'Error: --set: invalid value @ algorithm.batch_size: must be an integer (got '
        'True)'),
    row("unknown-monitor", 'check exp:E --set monitor=wandbb', 2,
        "Error: --set: invalid value @ monitor: 'wandbb' is not a known monitor (did you "
        "mean 'wandb'?); choose one of: mlflow, swanlab, tensorboard, wandb"),
    row("unknown-algorithm", 'check exp:E --set algorithm.algorithm_type=grpoo', 2,
        "Error: --set: invalid value @ algorithm.algorithm_type: 'grpoo' is not a known "
        "algorithm type (did you mean 'grpo'?); choose one of: asymre, cispo, dapo, "
        'gigpo, grpo, grpo_verl, gspo, jsd, mix, mix_chord, multi_step_grpo, '
        'on_policy_distill, opmd, ppo, raft, rec, reinforceplusplus, rloo, sapo, sft, '
        'sppo, topr'),
    row("offline-algorithm-in-capitals", 'check exp:E --set algorithm.algorithm_type=DPO', 2,
        "Error: --set: invalid value @ algorithm.algorithm_type: 'DPO' is not a known "
        "algorithm type, and Trinity trains 'dpo' offline on a dataset of chosen and rejected "
        "replies in pairs, running no workflow, which tunedsl does not set up; learn from the "
        "judge's reward with an RL algorithm (grpo, ...), or from conversations with sft"),
    # a value given by --set was said as the class's line (sweep 46 A-W5)
    row("group-size-one", 'check exp:E --set algorithm.group_size=1', 2,
        "Error: --set, E (exp.py:15): algorithm.group_size = 1: algorithm.algorithm_type "
        "'grpo' compares rollouts of the same task, so it needs group_size >= 2"),
    row("max-tokens-fills-context", 'check exp:E --set model.max_tokens=64', 2,
        'Error: --set, E (exp.py:15): model.max_tokens = 64 leaves no room for the prompt in '
        'model.max_model_len = 64; lower max_tokens or raise max_model_len'),
    row("trained-model-endpoint", 'check exp:E --set model.base_url=http://x/v1', 2,
        'Error: --set: model.base_url: the trained model runs on a local engine, '
        'which training updates; an endpoint can serve auxiliary models only'),
    row("missing-model-path-aux", 'check exp:E', 2,
        "Error: exp.py:22: Model.model_path must be a non-empty string (got '')",
        exp__py=experiment_file(BODY + 'auxiliary_models = {"j": Model("m")}\n').replace('Model("m")}', 'Model(model_path="")}')),
    row("aux-api-key-env-without-url", 'check exp:E', 2,
        'Error: E (exp.py:15): auxiliary_models.j.api_key_env is set without base_url; '
        "give the endpoint's URL too",
        exp__py=experiment_file(BODY + 'auxiliary_models = {"j": Model("m", api_key_env="K")}\n')),
    row("lora-on-aux", 'check exp:E', 2,
        'Error: E (exp.py:15): auxiliary_models.j.lora: auxiliary models are frozen, so '
        "there are no adapters to train (Trinity's lora_configs apply to the rollout "
        'model only); remove it',
        exp__py=experiment_file(BODY + 'auxiliary_models = {"j": Model("m", lora=LoRA())}\n')),
    row("rollout-timeout-zero", 'check exp:E --set rollout_timeout=0', 2,
        'Error: --set: invalid value @ rollout_timeout: must be a positive number of '
        'seconds (got 0)'),
    row("rollout-timeout-fraction", 'check exp:E --set rollout_timeout=1.5', 2,
        'Error: --set: invalid value @ rollout_timeout: must be a whole number of '
        'seconds, as Trinity reads it (got 1.5)'),
    row("keep-rollouts-every-zero", 'check exp:E --set keep_rollouts_every=0', 2,
        'Error: --set: invalid value @ keep_rollouts_every: must be a whole number >= 1 '
        '(got 0)'),
    row("name-with-space", 'check exp:E --set name=a-b/c', 2,
        "Error: --set: invalid value @ name: 'a-b/c' names a folder of the run's path "
        "(checkpoint_root_dir/project/name), so it may hold only ASCII letters, digits, '_', "
        "'.' and '-' (not '..'): write e.g. 'a-b-c', and choose where runs go with "
        "checkpoint_root_dir"),
    row("top-p-above-one", 'check exp:E --set model.top_p=1.5', 2,
        'Error: --set: invalid value @ model.top_p: must be in (0, 1] (got 1.5)'),
    row("negative-temperature", 'check exp:E --set model.temperature=-1', 2,
        'Error: --set: invalid value @ model.temperature: must be >= 0.0 (got -1)'),
    row("max-model-len-zero", 'check exp:E --set model.max_model_len=0', 2,
        'Error: --set: invalid value @ model.max_model_len: must be >= 1 (got 0)'),
    row("enable-thinking-string", 'check exp:E --set model.enable_thinking=maybe', 2,
        'Error: --set: invalid value @ model.enable_thinking: must be true, false or '
        "unset (got 'maybe')"),
    row("base-url-not-http", 'check exp:E', 2,
        'Error: exp.py:22: Model.base_url must be an http(s) URL such as '
        "https://api.example.com/v1 (got 'ftp://x')",
        exp__py=experiment_file(BODY + 'auxiliary_models = {"j": Model("m", base_url="ftp://x")}\n')),
    row("api-key-env-bad-name", 'check exp:E', 2,
        'Error: exp.py:22: Model.api_key_env must name an environment variable, such as '
        "OPENAI_API_KEY (got '1BAD'); the key itself is never written",
        exp__py=experiment_file(BODY + 'auxiliary_models = {"j": Model("m", base_url="http://x/v1", api_key_env="1BAD")}\n')),
    # the key itself, given where its variable's name belongs: never echoed (sweep 30 A-W9)
    row("api-key-env-holding-the-key", 'check exp:E --set auxiliary_models.j.api_key_env='
        'OPENAI_API_KEY=sk-proj-abcdefghijklmnop', 2,
        "Error: --set: invalid value @ auxiliary_models.j.api_key_env: must name an "
        "environment variable, such as OPENAI_API_KEY (got text of 39 characters, not shown: "
        "it looks like a key, which tunedsl takes only from the environment); the key itself "
        "is never written",
        exp__py=experiment_file(BODY + 'auxiliary_models = {"j": Model("m", base_url="http://x/v1")}\n')),
    # a token whose text is a variable's name, too: echoed, and written to the YAML (sweep 31)
    row("api-key-env-holding-a-hugging-face-token", 'config exp:E --set auxiliary_models.j.'
        'api_key_env=hf_abcdefghijklmnopqrstuvwxyz0123456789', 2,
        "Error: --set: invalid value @ auxiliary_models.j.api_key_env: must name an "
        "environment variable, such as OPENAI_API_KEY (got text of 39 characters, not shown: "
        "it looks like a key, which tunedsl takes only from the environment); the key itself "
        "is never written",
        exp__py=experiment_file(BODY + 'auxiliary_models = {"j": Model("m", base_url="http://x/v1")}\n')),
    # inside ${env:...}: shown twice, in the problem and in its fix (sweep 32 A-W1)
    row("env-reference-naming-a-key", "config exp:E --set "
        "model.model_path=${env:hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123}", 2,
        "Error: --set: model.model_path: an ${env:...} names text of 33 characters, not "
        "shown: it looks like a key, not an environment variable's name; export the key as a "
        "variable, e.g. OPENAI_API_KEY, and write ${env:OPENAI_API_KEY}"),
    row("dataset-total-epochs-zero", 'check exp:E --set train_dataset.total_epochs=0', 2,
        'Error: --set: invalid value @ train_dataset.total_epochs: must be >= 1 (got 0)'),
    row("experiment-unknown-attribute", 'check exp:E', 2,
        "Error: @experiment E (exp.py:15) has an unknown attribute 'modle' (did you mean "
        "'model'?); an experiment declares workflow, judge, train_dataset, eval_dataset, "
        'model, auxiliary_models, algorithm, warmup, warmup_dataset, params, project, name, '
        'monitor, '
        'checkpoint_root_dir, rollout_timeout, keep_rollouts_every, '
        'keep_rollouts_per_step, tinker, settings, trinity_config, trinity',
        exp__py=experiment_file(BODY + 'modle = Model("m")\n')),
    row("experiment-model-not-record", 'check exp:E', 2,
        "Error: @experiment E (exp.py:15).model must be a Model(...) (got 'm' of type "
        'str)',
        exp__py=experiment_file(replaced('model = Model("m", max_model_len=64)', 'model = "m"'))),
    row("experiment-dataset-not-record", 'check exp:E', 2,
        'Error: @experiment E (exp.py:15).train_dataset must be a Dataset(...) (got '
        "'data' of type str)",
        exp__py=experiment_file(replaced('train_dataset = Dataset("data", split="train")', 'train_dataset = "data"'))),
    row("experiment-no-dataset", 'check exp:E', 2,
        'Error: E (exp.py:15): required field missing @ train_dataset.path; set '
        'train_dataset = Dataset("path/to/data") on the class, path = ... under '
        '[train_dataset] in tunedsl.toml, or --set train_dataset.path=...',
        exp__py=experiment_file(replaced('train_dataset = Dataset("data", split="train")\n', ''))),
    row("experiment-no-model", 'check exp:E', 2,
        'Error: E (exp.py:15): required field missing @ model.model_path; set model = '
        'Model("org/model", max_model_len=4096) on the class, model_path = ... under '
        '[model] in tunedsl.toml, or --set model.model_path=...',
        exp__py=experiment_file(replaced('model = Model("m", max_model_len=64)\n', ''))),
    row("experiment-judge-is-workflow", 'check exp:E', 2,
        'Error: @experiment E (exp.py:15).judge must be a @judge function (got the '
        '@workflow function solve): assign a function decorated with @judge (or @group_judge)',
        exp__py=experiment_file(replaced('judge = exact', 'judge = solve'))),
    row("experiment-params-not-dict", 'check exp:E', 2,
        'Error: @experiment E (exp.py:15).params must be a dict (got [1] of type list)',
        exp__py=experiment_file(BODY + 'params = [1]\n')),
    row("decorator-on-class", 'check exp:E', 2,
        'Error: @workflow cannot decorate the class W (exp.py:15); decorate a function: '
        'async def f(task, model)',
        exp__py=HEAD + "@workflow\nclass W:\n    pass\n"),
    row("decorator-twice", 'check exp:E', 2,
        'Error: exp.py:15: solve (exp.py:4) is already decorated with @workflow; apply '
        'one tunedsl decorator, once',
        exp__py=HEAD + "judge(solve)\n"),
    row("workflow-missing-model-param", 'check exp:E', 2,
        "Error: @workflow solve (exp.py:4) is missing the parameter 'model': write async "
        'def solve(task, model)',
        exp__py=experiment_file(head=HEAD.replace("solve(task, model)", "solve(task)").replace("reply = await model.chat([{\"role\": \"user\", \"content\": task[\"question\"]}])", "reply = None"))),
    row("workflow-star-args", 'check exp:E', 2,
        'Error: @workflow solve (exp.py:4) takes *rest; tunedsl passes arguments by '
        'name, so list them: async def solve(task, model)',
        exp__py=experiment_file(head=HEAD.replace("solve(task, model)", "solve(task, model, *rest)"))),
    row("workflow-positional-only", 'check exp:E', 2,
        "Error: @workflow solve (exp.py:4) makes 'task' positional-only (/); tunedsl "
        "passes arguments by name, so remove the '/': async def solve(task, model)",
        exp__py=experiment_file(head=HEAD.replace("solve(task, model)", "solve(task, model, /)"))),
    # "decorate the class with @experiment", the module's experiment unnamed (sweep 37 A-W9)
    row("attribute-not-experiment", 'check exp:solve', 2,
        'Error: "exp:solve" is not an @experiment class (got function); the module defines E: '
        'give "exp:E"'),
    row("attribute-not-an-experiment-in-a-module-without-one", 'check exp:solve', 2,
        'Error: "exp:solve" is not an @experiment class (got function); decorate the class '
        'with @experiment', exp__py=HEAD),
    row("check-workflow-raises", 'check exp:E', 2,
        'Traceback (most recent call last):',
        exp__py=experiment_file(head=HEAD.replace("    reply = await model", "    raise ValueError('boom')\n    reply = await model"))),
    row("check-workflow-returns-wrong-type", 'check exp:E', 2,
        'Error: rollout: on the first training task, with a scripted model that always '
        "replies '0': @workflow solve (exp.py:4) returned str; return "
        'WorkflowOutput(response=...)',
        exp__py=experiment_file(head=HEAD.replace("return WorkflowOutput(response=reply.content)", "return reply.content"))),
    row("check-judge-returns-nan", 'check exp:E', 2,
        'Error: rollout: on the first training task, with a scripted model that always '
        "replies '0': @judge exact (exp.py:10) returned the reward nan; a reward must be "
        'a finite number',
        exp__py=experiment_file(head=HEAD.replace('float(response == task["answer"])', 'float("nan")'))),
    row("check-judge-metrics-not-numbers", 'check exp:E', 2,
        'Error: rollout: on the first training task, with a scripted model that always '
        "replies '0': @judge exact (exp.py:10) returned metrics {'a': 'b'}; metrics must "
        'map names to numbers',
        exp__py=experiment_file(head=HEAD.replace('reward=float(response == task["answer"])', 'reward=1.0, metrics={"a": "b"}'))),
    row("check-no-judge-no-reward", 'check exp:E', 2,
        'Error: rollout: on the first training task, with a scripted model that always '
        "replies '0': @workflow solve (exp.py:4) returned no reward and the experiment "
        'has no judge; return WorkflowOutput(reward=...) or add a @judge',
        exp__py=experiment_file(replaced("judge = exact\n", ""))),
    row("check-workflow-sys-exit", 'check exp:E', 2,
        'Traceback (most recent call last):',
        exp__py=experiment_file(head=HEAD.replace("    reply = await model", "    import sys\n    sys.exit(4)\n    reply = await model"))),
    row("check-workflow-sys-exit-in-a-plain-task", 'check exp:E', 2,
        'Traceback (most recent call last):',
        exp__py=experiment_file(head=HEAD.replace("    reply = await model", "    import asyncio, sys\n    async def tool():\n        sys.exit(4)\n    await asyncio.Task(tool())\n    reply = await model"))),
    row("check-workflow-sys-exit-in-a-callback", 'check exp:E', 2,
        "Error: rollout: on the first training task, with a scripted model that always "
        "replies '0': sys.exit(4) in a callback the rollouts' code scheduled with call_soon, "
        "call_later or as a done callback (exp.py:8, in bye) ended the command; raise an "
        "exception there instead, or exit from the workflow (which fails its rollout)",
        exp__py=experiment_file(head=HEAD.replace("    reply = await model", "    import asyncio, sys\n    def bye():\n        sys.exit(4)\n    asyncio.get_running_loop().call_soon(bye)\n    await asyncio.sleep(0)\n    reply = await model"))),

    # ------------------------------------------------------------------ run, eval, rescore, usage
    row("run-local-model-not-a-folder", 'run exp:E --backend local', 2,
        'Error: model.model_path: nowhere is not a folder; the local backend loads a local '
        'Hugging Face model folder and never downloads: download it and give its folder (for '
        'a run on GPUs, check with --backend trinity)',
        exp__py=experiment_file(replaced('Model("m"', 'Model("nowhere"'))),
    row("run-local-unsupported-algorithm", 'run exp:E --backend local --set algorithm.algorithm_type=ppo', 2,
        "Error: algorithm.algorithm_type = 'ppo': the local backend runs grpo, multi_step_grpo, "
        "dapo, gspo, cispo, sapo, rloo, reinforceplusplus, opmd, topr, gigpo, on_policy_distill, sft; use "
        "--backend trinity for the others"),
    # "cannot create ...: Not a directory" named no file (sweep 23 B-15)
    row("run-project-folder-is-a-file",
        "run exp:E --backend local --no-progress --set checkpoint_root_dir=ckpt --set project=p",
        2, "Error: checkpoint_root_dir: cannot make the run directory: ckpt/p is a file, not a "
        "folder; move it, or set checkpoint_root_dir (or project) to a folder", run=True,
        **{"ckpt/p": "notes\n"}),
    row("run-resume-missing-dir", 'run exp:E --backend local --resume data', 2,
        'Error: --resume data: not a tunedsl run directory (it has no '
        'experiment.yaml); give the folder a run printed when it started'),
    # A checkpoint folder was "not a tunedsl run directory", without the run holding it.
    row("run-resume-a-checkpoint-folder", 'run exp:E --backend local --no-progress --resume '
        '{run}/global_step_2', 2,
        "Error: --resume {run}/global_step_2: a checkpoint of the run {run}; give that run "
        "directory (a resume goes on from its newest whole checkpoint)", run=True),
    row("run-good-checkpoint-on-trinity", 'run exp:E --backend trinity --resume out --from-good-checkpoint', 2,
        'Error: --from-good-checkpoint applies to the local backend; Trinity chooses the '
        'checkpoint it continues from itself'),
    row("run-tinker-on-local", 'run exp:E --backend local', 2,
        'Error: tinker: the experiment trains through Tinker, which runs on the Trinity '
        'backend; use --backend trinity (or auto), or remove tinker to train locally',
        exp__py=experiment_file(BODY + "tinker = Tinker()\n")),
    row("eval-checkpoint-not-a-model", 'eval exp:E --checkpoint data', 2,
        'Error: --checkpoint data: not a saved model folder (no config.json); give '
        'RUN_DIR/global_step_N'),
    # a file (data/train.jsonl here, a model's config.json likewise) was "not a saved model
    # folder (no config.json)", which it holds beside it (sweep 45 B-W)
    row("eval-checkpoint-a-file", 'eval exp:E --checkpoint data/train.jsonl', 2,
        'Error: --checkpoint data/train.jsonl: a file, not a model folder; give a saved model '
        'folder, RUN_DIR/global_step_N'),
    row("eval-output-exists", 'eval exp:E --base-url http://127.0.0.1:9/v1 --model x -o o.jsonl', 2,
        'Error: -o o.jsonl already holds results; add --resume to continue it, or choose '
        'another file',
        o__jsonl=ONE_RESULT),
    row("eval-output-holds-a-yaml", 'eval exp:E --base-url http://127.0.0.1:9/v1 --model x -o o.yaml --resume', 2,
        "Error: -o o.yaml holds something else (its first line: 'model: x'), not eval results; "
        "tunedsl never writes over it, so give another file", o__yaml="model: x\n"),
    # plain text written under a .gz name, without a word (sweep 26 W-01)
    row("eval-output-named-as-compressed", "eval exp:E --base-url http://127.0.0.1:9/v1 "
        "--model x -o r.jsonl.gz", 2, "Error: -o r.jsonl.gz: tunedsl writes plain JSON Lines, "
        "which a .gz name would misname; give r.jsonl and compress it afterwards if you like"),
    # JSON Lines written under a name the next command reads its settings from (sweep 49's
    # known list)
    row("eval-output-named-as-settings", "eval exp:E --base-url http://127.0.0.1:9/v1 "
        "--model x -o tunedsl.toml", 2, "Error: -o tunedsl.toml: eval writes its results as "
        "JSON Lines, which that name would misname; give a .jsonl name, e.g. -o tunedsl.jsonl"),
    row("rescore-output-named-as-a-page", "rescore r.jsonl exp:E -o r.html", 2,
        "Error: -o r.html: rescore writes results as JSON Lines, which that name would "
        "misname; give a .jsonl name, e.g. -o r.jsonl", r__jsonl=ONE_RESULT),
    row("eval-base-url-with-a-query-string",
        "eval exp:E --base-url http://127.0.0.1:9/v1?api-version=2024 --model x", 2,
        "Error: --base-url: http://127.0.0.1:9/v1 is followed by a query string (?...), which "
        "the client would put before /chat/completions (every request would miss); give the "
        "endpoint's URL alone"),
    # the password was shown in clear here, masked everywhere else (sweep 25 W-03)
    row("eval-base-url-with-a-password-and-a-query-string",
        "eval exp:E --base-url http://user:sekret@127.0.0.1:9/v1?key=sekret2 --model x", 2,
        "Error: --base-url: http://***@127.0.0.1:9/v1 is followed by a query string "
        "(?...), which the client would put before /chat/completions (every request would "
        "miss); give the endpoint's URL alone"),
    row("aux-base-url-with-a-fragment", "check exp:E", 2,
        "Error: exp.py:22: Model.base_url must be the endpoint's URL alone: "
        "http://127.0.0.1:9/v1 is followed by a fragment (#...), which the client would put "
        "before /chat/completions (every request would miss); give the endpoint's URL alone",
        exp__py=experiment_file(BODY + 'auxiliary_models = {"g": Model("g", '
                                       'base_url="http://127.0.0.1:9/v1#x")}\n')),
    row("eval-api-key-env-unset", 'eval exp:E --base-url http://127.0.0.1:9/v1 --model x --api-key-env TUNEDSL_NO_SUCH_KEY', 2,
        'Error: --api-key-env TUNEDSL_NO_SUCH_KEY: that environment variable is not set; '
        'export it (the key is never read from a file)'),
    row("eval-no-endpoint", 'eval exp:E', 2,
        'Error: give --base-url URL and --model NAME (or --checkpoint DIR)'),
    row("eval-resume-without-output", 'eval exp:E --base-url http://127.0.0.1:9/v1 --model x --resume', 2,
        'Error: --resume continues a results file: give it with -o FILE'),
    row("eval-aux-unknown-name", 'eval exp:E --base-url http://127.0.0.1:9/v1 --model x --aux critic=http://x/v1,m', 2,
        "Error: --aux 'critic=http://x/v1,m': the experiment declares no auxiliary model "
        "'critic' (it has: none)"),
    row("eval-aux-missing", 'eval exp:E --base-url http://127.0.0.1:9/v1 --model x', 2,
        'Error: the experiment uses auxiliary model(s) j: give each one with --aux '
        'NAME=URL,MODEL',
        exp__py=experiment_file(BODY + 'auxiliary_models = {"j": Model("m")}\n')),
    row("rescore-a-line-without-a-response", "rescore r.jsonl exp:E", 2,
        "Error: r.jsonl:1: the line has no response (eval writes one on every line that has no "
        "error); the file was edited or not written by tunedsl eval",
        r__jsonl=ONE_RESULT.replace('"response": "2", ', '')),
    row("rescore-of-rollouts-that-all-failed-in-eval", "rescore r.jsonl exp:E", 1,
        "Error: r.jsonl: every rollout in it failed in eval, so there is no response to judge "
        "again; the first error: ConnectionError: cannot reach the model endpoint",
        r__jsonl='{"task_index": 0, "repeat": 0, "task": {"question": "1+1=", "answer": "2"}, '
                 '"response": null, "reward": null, "error": "ConnectionError: cannot reach '
                 'the model endpoint"}\n'),
    # a key pasted into base_url echoed, or its USER:KEY@ written to the YAML (sweep 35 A-W8)
    row("config-base-url-holding-a-key", "config exp:E --set "
        "auxiliary_models.j.base_url=sk-proj-abcdefghijklmnopqrstuv --set "
        "auxiliary_models.j.model_path=m", 2,
        "Error: --set: invalid value @ auxiliary_models.j.base_url: must be an http(s) URL "
        "such as https://api.example.com/v1 (got text of 30 characters, not shown: it looks "
        "like a key, which belongs in the environment, named by api_key_env)"),
    row("config-base-url-with-a-key-before-its-host", "config exp:E --set "
        "auxiliary_models.j.base_url=https://sk-proj-abcdefghijklmnopqrstuv@host/v1 --set "
        "auxiliary_models.j.model_path=m", 2,
        "Error: --set: invalid value @ auxiliary_models.j.base_url: must be the endpoint's URL "
        "alone: https://***@host/v1 holds a user or key before its host (USER:KEY@), which is "
        "never sent; give the key's environment variable with api_key_env"),
    # a key given as the user was shown whole (sweep 42 A-S3)
    row("eval-base-url-with-a-key-as-its-user",
        "eval exp:E --base-url http://sk-proj-abcdefghijklmnopqrstuvwxyz0123@127.0.0.1:9/v1 "
        "--model x -o o.jsonl", 2,
        "Error: endpoint http://***@127.0.0.1:9/v1: a user and password in the URL are not "
        "sent (the client sends an API key as a bearer token); give the URL without them, and "
        "the key's environment variable with --api-key-env"),
    row("eval-base-url-with-a-password",
        "eval exp:E --base-url http://user:secret@127.0.0.1:9/v1 --model x -o o.jsonl", 2,
        "Error: endpoint http://***@127.0.0.1:9/v1: a user and password in the URL are not "
        "sent (the client sends an API key as a bearer token); give the URL without them, and "
        "the key's environment variable with --api-key-env"),
    tuning("tune-prompt-candidates-is-eval-results",
           f"tune-prompt exp:Sums --param system_prompt {TUNE} --candidates r.jsonl --resume", 2,
           "Error: --candidates r.jsonl holds eval results, not a candidates file; tunedsl "
           "never writes over it, so give another file", r__jsonl=RESULT_LINE + "\n"),
    # Python skips it, the datasets library fails on it: check passed (sweep 32 A-S2)
    row("check-data-line-of-a-form-feed", "check exp:E --backend trinity", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:2: a line of blank characters other than "
        "spaces and tabs ('\\x0c'), which the datasets library (Trinity's reader too) cannot "
        "read; delete that line",
        data='{"question": "1+1=", "answer": "2"}\n\f\n{"question": "2+2=", "answer": "4"}\n'),
    # Trinity's reader, datasets.load_dataset(path), takes folders only (sweep 32 A-S3)
    row("check-trinity-dataset-a-single-file",
        "check exp:E --backend trinity --set train_dataset.path=data/train.jsonl", 2,
        "Error: train_dataset.path: {dir}/data/train.jsonl is one file, which Trinity's reader "
        "(datasets.load_dataset(path, split=...)) cannot read; give the folder that holds it, "
        "its files named by split (train.jsonl)"),
    row("check-single-file-named-for-another-split",
        "check exp:E --backend trinity --set train_dataset.path=data/train.jsonl "
        "--set train_dataset.split=test", 2,
        "Error: train_dataset: {dir}/data/train.jsonl is one file, read whole whatever the "
        "split, and its name says it is the 'train' split, not 'test'; give the 'test' file "
        "itself, or the folder that holds the split files"),
    row("check-max-model-len-beyond-the-model",
        "check exp:E --backend local --set model.max_model_len=100000", 2,
        "Error: model.max_model_len = 100000: more than {dir}/m takes (64 positions in its "
        "config.json), which vLLM refuses and the local backend never trained; set it to 64 "
        "or less"),
    row("check-workflow-reward-the-judge-replaces", "check exp:E --backend trinity", 0,
        "ok  rollout: workflow and judge ran on the first training task with a scripted model "
        "(reward 0); @workflow solve (exp.py:4) also returned reward 0.25, which the judge's "
        "replaces (the judge decides a rollout's reward)",
        exp__py=experiment_file(head=replaced("WorkflowOutput(response=reply.content)",
                                              "WorkflowOutput(response=reply.content, "
                                              "reward=0.25)", HEAD))),
    row("check-import-string-of-two-colons", "check exp.py:E:F", 2,
        'Error: Import string "exp.py:E:F" has more than one ":"; give one between the module '
        'and the attribute, in format "<module>:<attribute>" or "<path/to/file.py>:<attribute>".'),
    row("eval-judge-raises-an-exception-that-cannot-be-printed",
        "eval exp:E --base-url {bad}/two/v1 --model x -o o.jsonl", 1,
        "Error: every rollout failed; the first error: @judge exact (exp.py:10) raised "
        "Unprintable: <exception str() failed>; the judge failed on 2 of them after the "
        "workflow finished, whose responses are kept: once the judge is fixed, tunedsl "
        "rescore o.jsonl exp:E -o NEW.jsonl judges them again without calling the model",
        exp__py=judged_by("class Unprintable(Exception):\n        def __str__(self):\n"
                          "            raise RuntimeError('no text')\n"
                          "    raise Unprintable()")),
    row("view-two-evaluations-in-one-file", "view both.jsonl -o page.html", 2,
        "Error: both.jsonl:2: its eval_settings differ from line 1's, so the file mixes two "
        "evaluations and a summary of it would mix them; keep one evaluation's lines per file",
        both__jsonl=ONE_RESULT.replace("}\n", ', "eval_settings": {"model": "a"}}\n')
        + ONE_RESULT.replace('"repeat": 0', '"repeat": 1').replace(
            "}\n", ', "eval_settings": {"model": "b"}}\n')),
    row("preview-a-split-that-is-a-path", "preview exp:E --split ../x", 2,
        "Error: train_dataset: split '../x' is not a split's name; give one such as 'train' or "
        "'test'"),
    # json reads 1e400 as infinity; eval saved the task with null and rescore judged None
    # (sweep 18 S1)
    row("eval-a-number-past-floats-range", "eval exp:E --base-url http://127.0.0.1:9/v1 "
        "--model m", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:3: answer is a number past a float's "
        "range, read as infinity, which no results file (JSON) can hold; write it as a "
        "string, or a smaller number", data=DATA + '{"question": "big", "answer": 1e400}\n'),
    row("check-a-nested-number-past-floats-range", "check exp:E --backend local", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:3: x.y is a number past a float's "
        "range, read as infinity, which no results file (JSON) can hold; write it as a "
        "string, or a smaller number",
        data=DATA + '{"question": "big", "answer": "1", "x": {"y": -1e999}}\n'),
    # a NaN metric was saved as null without a word (sweep 18 S2)
    row("check-judge-metric-nan", "check exp:E --backend local", 2,
        "Error: rollout: on the first training task, with a scripted model that always "
        "replies '0': @judge exact (exp.py:10) returned the metric 'ratio' = nan; a metric "
        "must be a finite number (leave out one that has no value)",
        exp__py=judged_by('return JudgeOutput(reward=1.0, metrics={"ratio": float("nan")})')),
    row("view-output-given-twice", "view r.jsonl -o a.html -o b.html", 2,
        "Error: tunedsl view: -o/--output is given twice (or with --out); give one file; see "
        "tunedsl view --help", r__jsonl=ONE_RESULT),
    row("preview-an-integer-beyond-64-bits", "preview exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:3: answer is an integer beyond 64 bits, "
        "which the datasets library (Trinity's reader too) turns into a float, so its digits "
        "are lost; write it as a string",
        data=DATA + '{"question": "big", "answer": 123456789012345678901234567890}\n'),
    # pyarrow's JSON reader crashed the process on a file of JSON null (exit 139, nothing
    # said; sweep 16 T1)
    row("preview-a-data-file-of-json-null", "preview exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:1: the file holds JSON null, not rows; "
        "a row must be a JSON object with the task's keys", data="null\n"),
    # in the parser's words, no word of git-lfs (sweep 33 A-W2)
    row("check-a-data-file-a-git-lfs-pointer", "check exp:E --backend local", 2,
        "Error: train_dataset: {dir}/data/train.jsonl is a git-lfs pointer, not the file "
        "itself (a clone without git-lfs); run git lfs pull in {dir}/data",
        data="version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 99\n"),
    # (eval reads the rows as check does first)
    row("eval-a-data-file-of-json-null", "eval exp:E --base-url http://127.0.0.1:9/v1 "
        "--model m", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:1: the file holds JSON null, not rows; "
        "a row must be a JSON object with the task's keys", data="\ufeff null \n"),
    # Past what the standard library reads, a line went to pyarrow, which crashed (exit
    # 139, nothing said) or kept the integer as null.
    row("preview-a-row-nested-ten-thousand-deep", "preview exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:3: nested deeper than a JSON reader goes "
        "(about a thousand levels); flatten or delete that line",
        data=DATA + '{"question": "deep", "answer": "1", "x": ' + "[" * 10000 + "]" * 10000
        + "}\n"),
    row("check-a-json-array-row-nested-five-thousand-deep", "check exp:E --backend local", 2,
        "Error: train_dataset: {dir}/d.json: nested deeper than a JSON reader goes (about a "
        "thousand levels); flatten or delete that row",
        d__json='[{"question": "q", "answer": "a", "x": ' + "[" * 5000 + "]" * 5000 + "}]",
        exp__py=experiment_file(replaced('Dataset("data", split="train")', 'Dataset("d.json")'))),
    row("preview-an-integer-of-5000-digits", "preview exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:3: holds an integer of more digits than "
        "Python reads (4300), far beyond the 64 bits the datasets library keeps; write it as a "
        "string", data=DATA + '{"question": "big", "answer": ' + "7" * 5000 + "}\n"),
    row("check-an-integer-of-5000-digits", "check exp:E --backend local", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:3: holds an integer of more digits than "
        "Python reads (4300), far beyond the 64 bits the datasets library keeps; write it as a "
        "string", data=DATA + '{"question": "big", "answer": ' + "7" * 5000 + "}\n"),
    # tunedsl's own check of a row's shape recursed past Python's limit on a 2 KB file
    # (an internal RecursionError); Arrow takes 63 levels.
    row("preview-a-row-nested-250-deep", "preview exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:3: nested 251 levels deep, past the 63 "
        "the datasets library (Trinity's reader too) takes; flatten it, or keep the deep part "
        "as JSON text",
        data=DATA + '{"question": "deep", "answer": "1", "x": ' + "[" * 250 + "]" * 250
        + "}\n"),
    row("check-a-row-nested-64-deep", "check exp:E --backend local", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:3: nested 64 levels deep, past the 63 "
        "the datasets library (Trinity's reader too) takes; flatten it, or keep the deep part "
        "as JSON text",
        data=DATA + '{"question": "deep", "answer": "1", "x": ' + "[" * 63 + "]" * 63 + "}\n"),
    # A .json array's deep row passed check (tunedsl's readers took it, and the datasets
    # library streams it), while Trinity's reader, which loads the file whole, fails on it.
    row("check-a-json-array-row-nested-300-deep", "check exp:E --backend trinity", 2,
        "Error: train_dataset: {dir}/d.json row 2: nested 301 levels deep, past the 63 the "
        "datasets library (Trinity's reader too) takes; flatten it, or keep the deep part as "
        "JSON text",
        d__json='[{"question": "q", "answer": "a"}, {"question": "q", "answer": "a", "x": '
        + "[" * 300 + "]" * 300 + "}]",
        exp__py=experiment_file(replaced('Dataset("data", split="train")', 'Dataset("d.json")'))),
    # The datasets library then read the column as numbers: "2" became 2, and eval scored
    # the wrong type without a word.
    row("preview-a-nan-in-a-row", "preview exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:3: NaN is not JSON (Python's json writes "
        "it for a float NaN or infinity; the datasets library then reads the whole column as "
        'numbers, "2" as 2); write null, or a number',
        data=DATA + '{"question": "nan", "answer": NaN}\n'),
    row("check-an-infinity-in-a-row", "check exp:E --backend local", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:2: Infinity is not JSON (Python's json "
        "writes it for a float NaN or infinity; the datasets library then reads the whole "
        'column as numbers, "2" as 2); write null, or a number',
        data=DATA.splitlines(keepends=True)[0] + '{"question": "inf", "answer": Infinity}\n'),
    # The datasets library reads extensions case by case: the file was not found, in its words.
    row("preview-a-data-file-with-an-upper-case-extension", "preview exp:E", 2,
        "Error: train_dataset: the folder {dir}/up holds no data files (one of .arrow, .csv, "
        ".json, .jsonl, .parquet, .tsv, .txt); rename train.JSONL to train.jsonl (the datasets "
        "library reads extensions in lower case only)",
        exp__py=experiment_file(replaced('Dataset("data", split="train")',
                                         'Dataset("up", split="train")')),
        **{"up/train__JSONL": DATA}),
    row("config-env-reference-without-a-name", "config exp:E --set model.model_path=${env:}", 2,
        "Error: --set: model.model_path: '${env:}' names no environment variable in its "
        "${env:...}; write ${env:NAME} or ${env:NAME,default}, or $${env:...} for the text "
        "itself"),
    row("check-data-folder-of-two-formats", "check exp:E --backend trinity", 2,
        "Error: train_dataset: {dir}/data holds data files of 2 formats (train.csv, "
        "train.jsonl), and only one format of a folder is read (the rest would be left out "
        "without a word); keep one format in it",
        **{"data/train.csv": "question,answer\n9+9=,18\n"}),
    # an older copy beside the split, sharing most of its rows in another order: read with
    # it, each of those tasks twice, check saying ok (sweep 48 A-S2)
    row("check-data-an-older-copy-beside-the-split", "check exp:E", 2,
        "Error: train_dataset: train-old.jsonl and train.jsonl share 3 rows (3 of the 4 in "
        "train-old.jsonl), and the datasets library reads both as {dir}/data's split "
        "'train', so each of those tasks would be read twice; remove the older copy, or move "
        "it out of the folder",
        data=DATA + '{"question": "3+3=", "answer": "6"}\n{"question": "4+4=", "answer": "8"}\n',
        **{"data/train-old.jsonl": '{"question": "3+3=", "answer": "6"}\n'
                                   '{"question": "9+9=", "answer": "18"}\n'
                                   '{"answer": "4", "question": "2+2="}\n' + DATA[:36]}),
    # blamed on the whole number the float column misreads, not on the empty cell (sweep 33)
    row("check-a-csv-column-of-whole-numbers-and-an-empty-cell", "check exp:E", 2,
        "Error: train_dataset: {dir}/csv/train.csv:2: 'answer' is empty, so the datasets "
        "library (through which eval, a local run and Trinity read the data) reads the column "
        "as numbers with a fraction ('7' at {dir}/csv/train.csv:3 as 7.0); fill the cell, or "
        "write the data as JSON Lines",
        exp__py=experiment_file(replaced('Dataset("data", split="train")',
                                         'Dataset("csv", split="train")')),
        **{"csv/train.csv": "question,answer\n2+2=,\n3+4=,7\n"}),
    # Across splits too (train.jsonl, test.csv): it was the library's "Couldn't infer the
    # same data file format for all splits".
    row("check-data-splits-of-two-formats", "check exp:E --backend trinity", 2,
        "Error: train_dataset: {dir}/data holds data files of 2 formats (test.csv, "
        "train.jsonl), and only one format of a folder is read (the rest would be left out "
        "without a word); keep one format in it",
        **{"data/test.csv": "question,answer\n9+9=,18\n"}),
    # a .txt split (check_one_format leaves .txt files, notes as often): the library's words
    # (sweep 44 A)
    row("check-data-splits-of-text-and-json-lines", "check exp:E --backend trinity", 2,
        "Error: train_dataset: {dir}/data's splits are files of different formats (train: "
        "json, test: text), and the datasets library reads a folder's splits in one format; "
        "keep one format in it (a .txt file is read as lines of plain text)",
        **{"data/test.txt": "9+9=\n"}),
    row("check-data-with-a-null-the-workflow-reads", "check exp:E --backend trinity", 0,
        "ok  train_dataset: {dir}/data (split 'train'): 3 rows readable, keys answer, "
        "question; key 'question' is null in 1 of 3 rows (the first at "
        "{dir}/data/train.jsonl:3), which the workflow or judge gets as None",
        data=DATA + '{"question": null, "answer": "1"}\n'),
    # The user's traceback first, then the line (test_a_judge_raising_a_base_exception).
    row("check-judge-raises-keyboard-interrupt", "check exp:E --backend trinity", 2,
        "Traceback (most recent call last):", exp__py=judged_by("raise KeyboardInterrupt")),
    row("check-judge-raises-generator-exit", "check exp:E --backend trinity", 2,
        "Traceback (most recent call last):", exp__py=judged_by("raise GeneratorExit")),
    row("rescore-a-line-without-a-task", "rescore r.jsonl exp:E", 2,
        "Error: r.jsonl:1: the line has no task (the row its rollout ran on), so the judge has "
        "nothing to judge against; the file was edited or not written by tunedsl eval",
        r__jsonl=ONE_RESULT.replace('"task": {"question": "1+1=", "answer": "2"}, ', '')),
    row("check-local-a-chat-option-the-local-backend-refuses", "check exp:E --backend local", 2,
        "Error: @workflow solve (exp.py:4): its call 1 of the trained model on the first task: "
        "tool_choice 'required': the local backend cannot force a tool call (that needs "
        "constrained decoding); use 'auto' or 'none'",
        exp__py=experiment_file(head=replaced(
            'task["question"]}])', 'task["question"]}], tool_choice="required")', HEAD))),
    row("eval-checkpoint-that-does-not-exist", "eval exp:E --checkpoint nowhere", 2,
        "Error: --checkpoint nowhere: no such folder; give a saved model folder, "
        "RUN_DIR/global_step_N"),
    row("check-checkpoint-root-inside-the-data", "check exp:E --set checkpoint_root_dir=data/runs",
        2, "Error: checkpoint_root_dir = 'data/runs' is inside train_dataset.path's folder "
        "({dir}/data), where a run's files would join the data; give a folder elsewhere"),
    row("check-auxiliary-endpoint-answers-a-web-page",
        "check exp:E --backend trinity --set auxiliary_models.g.base_url={bad}/html/v1", 2,
        "Error: auxiliary_models.g.base_url: {bad}/html/v1 answers GET /models with an HTML "
        "page, not an OpenAI-compatible API; check the URL (such endpoints usually end in /v1)",
        exp__py=experiment_file(
            BODY + 'auxiliary_models = {"g": Model("g", max_model_len=64)}\n',
            head=replaced("async def exact(task, response):",
                          "async def exact(task, response, auxiliary_models):", HEAD))),
    row("check-auxiliary-endpoint-answers-a-server-error",
        "check exp:E --backend trinity --set auxiliary_models.g.base_url={bad}/down/v1", 2,
        "Error: auxiliary_models.g.base_url: {bad}/down/v1 answers GET /models with HTTP 500, "
        "a server error; check that the server behind it is healthy",
        exp__py=experiment_file(
            BODY + 'auxiliary_models = {"g": Model("g", max_model_len=64)}\n',
            head=replaced("async def exact(task, response):",
                          "async def exact(task, response, auxiliary_models):", HEAD))),
    row("run-resume-given-the-experiment", "run --resume exp:E", 2,
        "Error: tunedsl run: argument --resume: 'exp:E' is the experiment, not a run directory; "
        "give the experiment first: tunedsl run exp:E --resume (alone, it continues the newest "
        "run); see tunedsl run --help"),
    tuning("tune-prompt-output-under-a-file", f"tune-prompt exp:Sums --param system_prompt "
           f"{TUNE} -o afile/best.toml", 2,
           "Error: -o afile/best.toml: afile is a file, not a folder; give a file in a folder",
           afile="hi\n"),
    row("run-resume-of-a-folder-that-does-not-exist", "run exp:E --resume nowhere", 2,
        "Error: --resume nowhere: no such folder; give the run directory a run printed when it "
        "started"),
    # (the user's line first, as for any exception a workflow raises under check)
    row("check-workflow-sends-a-number-as-content", "check exp:E --backend trinity", 2,
        "Traceback (most recent call last):",
        exp__py=experiment_file(head=replaced('"content": task["question"]', '"content": 7',
                                              HEAD))),
    row("check-auxiliary-model-no-function-takes", "check exp:E --backend trinity", 0,
        "note  auxiliary_models: grader declared, but no workflow or judge takes "
        "auxiliary_models, so each is served for nothing; add the argument to the function "
        "that calls them, or remove them", exp__py=experiment_file(BODY + 'auxiliary_models = {"grader": Model("m", '
                                        'max_model_len=64)}\n')),
    tuning("tune-prompt-resume-of-a-candidate-with-a-number-param", f"{TUNED} --resume", 2,
           "Error: c.jsonl:4: not a tunedsl candidates line: its params is not an object of "
           "text params", before=TUNED, then={"c.jsonl": lambda data: re.sub(
               rb'("kind": "candidate", "candidate": "[0-9a-f]+", "params": \{"system_prompt": )'
               rb'"[^"]*"', rb'\g<1>5', data, count=1)}),
    row("rescore-results-missing", 'rescore nope.jsonl exp:E', 2,
        'Error: nope.jsonl: cannot read the results file: No such file or directory'),
    row("rescore-bad-line", 'rescore r.jsonl exp:E', 2,
        'Error: r.jsonl:2: not a JSON line (Expecting property name enclosed in double '
        'quotes); fix or delete that line',
        r__jsonl='{"task_index": 0, "repeat": 0, "reward": 1.0}\n{oops\n'),
    row("rescore-not-a-result", 'rescore r.jsonl exp:E', 2,
        'Error: r.jsonl:1: not a tunedsl result (it needs task_index and repeat); was '
        'this file written by tunedsl eval?',
        r__jsonl='{"a": 1}\n'),
    # tunedsl's own files of other kinds were "not a tunedsl result" (sweep 27 B W-05)
    row("rescore-a-run-s-rollouts", 'rescore rollouts.jsonl exp:E', 2,
        "Error: rollouts.jsonl:1: a line of a run's rollouts.jsonl (scored as they trained: "
        "tunedsl view shows its run directory), not an eval result; give a results file "
        "tunedsl eval wrote",
        rollouts__jsonl='{"step": 1, "task_index": 0, "group": 0, "run": 0, "calls": [], '
                        '"reward": 1.0}\n'),
    row("rescore-a-candidates-file", 'rescore c.jsonl exp:E', 2,
        "Error: c.jsonl:1: a line of a tune-prompt candidates file (tune-prompt --resume reads "
        "it), not an eval result; give a results file tunedsl eval wrote",
        c__jsonl='{"kind": "start", "settings": {}}\n'),
    row("rescore-empty-results", 'rescore r.jsonl exp:E', 2,
        "Error: r.jsonl: holds no results to rescore; give a results file that tunedsl eval "
        "wrote", r__jsonl=""),
    row("rescore-every-judgement-fails", 'rescore r.jsonl exp:E', 1,
        "Error: every judgement failed; the first error: @judge exact (exp.py:10) raised "
        "ValueError: the grader is down",
        exp__py=judged_by('raise ValueError("the grader is down")'), r__jsonl=ONE_RESULT),
    row("rescore-judge-hangs", 'rescore r.jsonl exp:E --set rollout_timeout=1', 1,
        "Error: every judgement failed; the first error: @judge exact (exp.py:10) timed out "
        "after 1s (rollout_timeout); make it faster or raise rollout_timeout",
        exp__py=judged_by('import asyncio\n    await asyncio.sleep(3600)'), r__jsonl=ONE_RESULT),
    # A byte-order mark is read past, as preview, run and Trinity's reader read it.
    row("check-data-with-a-byte-order-mark", "check exp:E", 0,
        "ok  train_dataset: {dir}/data (split 'train'): 2 rows readable, keys answer, question",
        data="\ufeff" + DATA),
    row("rescore-no-judge", 'rescore r.jsonl exp:E', 2,
        'Error: exp:E: the experiment has no @judge, so there is nothing to rescore '
        'with; add judge = <your @judge function>',
        r__jsonl="",
        exp__py=experiment_file(replaced("judge = exact\n", ""))),
    row("usage-unknown-command", 'train exp:E', 2,
        "Error: tunedsl: argument COMMAND: invalid choice: 'train' (choose from "
        "'config', 'check', 'run', 'eval', 'rescore', 'view', 'tune-prompt', 'preview'); see "
        "tunedsl --help"),
    # argparse quoted it whole (sweep 42 A-S6)
    row("usage-a-key-given-to-an-option-there-is-not", "eval exp:E --base-url "
        "http://127.0.0.1:9/v1 --model m --token sk-proj-abcdefghijklmnopqrstuvwxyz0123", 2,
        "Error: tunedsl: unrecognized arguments: --token <a key, not shown>; see tunedsl "
        "--help"),
    row("usage-missing-target", 'check', 2,
        'Error: tunedsl check: the following arguments are required: MODULE:ATTR; see '
        'tunedsl check --help'),
    row("usage-bad-backend", 'run exp:E --backend gpu', 2,
        "Error: tunedsl run: argument --backend: invalid choice: 'gpu' (choose from "
        "'auto', 'local', 'trinity'); see tunedsl run --help"),

    row("usage-no-command", "", 2,
        "Error: give a command (config, check, run, eval, rescore, view, tune-prompt, preview); "
        "see tunedsl COMMAND --help"),
    # ---- found as a new user: check, config, preview, run
    row("pyproject-tool-tunedsl-not-a-table", "check exp:E", 2,
        "Error: {dir}/pyproject.toml: tool.tunedsl must be a table (got 3); write the "
        "settings under [tool.tunedsl]", pyproject__toml="[tool]\ntunedsl = 3\n"),
    row("set-key-with-an-empty-part", "check exp:E --set algorithm..group_size=4", 2,
        "Error: --set 'algorithm..group_size=4': the key 'algorithm..group_size' has an empty "
        "part; write a dotted setting name, e.g. --set algorithm.group_size=8"),
    row("record-unknown-argument", "check exp:E", 2,
        "Error: exp.py:20: Model() has no field 'temprature' (did you mean 'temperature'?)",
        exp__py=experiment_file(replaced('Model("m", max_model_len=64)',
                                         'Model("m", max_model_len=64, temprature=0.5)'))),
    row("record-required-field-left-out", "check exp:E", 2,
        "Error: exp.py:20: Model() needs model_path: write Model(model_path=..., ...)",
        exp__py=experiment_file(replaced('Model("m", max_model_len=64)',
                                         "Model(max_model_len=64)"))),
    row("seed-beyond-32-bits", "run exp:E --backend local --set algorithm.seed=4294967296", 2,
        "Error: --set: invalid value @ algorithm.seed: must be <= 4294967295 (got "
        "4294967296)"),
    row("workflow-decorator-with-parentheses", "check exp:E", 2,
        "Error: exp.py:4: @workflow() takes no arguments: write @workflow without parentheses "
        "above async def f(task, model)",
        exp__py=experiment_file().replace("@workflow\n", "@workflow()\n")),
    row("auxiliary-model-with-an-empty-name", "check exp:E", 2,
        "Error: @experiment E (exp.py:15).auxiliary_models names a model ''; a name must be a "
        'non-empty string, such as {"judge": Model(...)}',
        exp__py=experiment_file(BODY + 'auxiliary_models = {"": Model("m")}\n')),
    row("data-json-list-of-non-objects", "check exp:E", 2,
        "Error: train_dataset: {dir}/d.json row 1: a row must be a JSON object with the "
        "task's keys (got int)", d__json="[1, 2]",
        exp__py=experiment_file(replaced('Dataset("data", split="train")', 'Dataset("d.json")'))),
    # one object of columns, or of rows under one key: read as one row of lists, the fix
    # offered was batch_size, and the workflow failed on the first list (sweep 21b W1)
    row("data-json-one-object-of-columns", "check exp:E", 2,
        "Error: train_dataset: {dir}/d.json: one JSON object whose values are lists "
        "(question, answer), which is read as a single row, not as a column per key; write one "
        "object per task (JSON Lines, or a JSON list of objects)",
        d__json='{"question": ["1+1=", "2+2="], "answer": ["2", "4"]}',
        exp__py=experiment_file(replaced('Dataset("data", split="train")', 'Dataset("d.json")'))),
    # beside a version, as SQuAD's files are (sweep 30 A-W14)
    row("data-json-rows-under-data-beside-a-version", "check exp:E", 2,
        "Error: train_dataset: {dir}/d.json: one JSON object holding its rows under 'data', "
        "which is read as a single row; write the list of rows itself (a JSON list of objects, "
        "or JSON Lines: one object per line)",
        d__json='{"version": "1.1", "data": [{"question": "1+1=", "answer": "2"}]}',
        exp__py=experiment_file(replaced('Dataset("data", split="train")', 'Dataset("d.json")'))),
    row("data-json-rows-under-one-key", "check exp:E", 2,
        "Error: train_dataset: {dir}/d.json: one JSON object holding its rows under 'data', "
        "which is read as a single row; write the list of rows itself (a JSON list of objects, "
        "or JSON Lines: one object per line)",
        d__json='{"data": [{"question": "1+1=", "answer": "2"}]}',
        exp__py=experiment_file(replaced('Dataset("data", split="train")', 'Dataset("d.json")'))),
    row("data-split-missing", "check exp:E --set train_dataset.split=test", 2,
        "Error: train_dataset: {dir}/data has no split 'test' (it has: train); give one of "
        "those as the split"),
    row("data-configuration-of-a-local-folder", "check exp:E --set train_dataset.name=main", 2,
        "Error: train_dataset: {dir}/data has no configuration 'main' (the Dataset's name); it "
        "has only the default one, so remove name"),
    row("data-folder-without-data-files", "check exp:E", 2,
        "Error: train_dataset: the folder {dir}/notes holds no data files (one of .arrow, "
        ".csv, .json, .jsonl, .parquet, .tsv, .txt); put the tasks in a file such as "
        "train.jsonl there, or point the path at the data", **{"notes/tasks.md": "# tasks\n"},
        exp__py=experiment_file(replaced('Dataset("data", split="train")', 'Dataset("notes")'))),
    row("data-empty-csv", "check exp:E", 2,
        "Error: train_dataset: {dir}/d.csv (split 'train') has no rows; point it at a dataset "
        "with tasks", d__csv="",
        exp__py=experiment_file(replaced('Dataset("data", split="train")', 'Dataset("d.csv")'))),
    row("preview-bad-json-line", "preview exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:3: not a JSON line (Expecting property "
        "name enclosed in double quotes); fix or delete that line", data=DATA + "{oops\n"),
    row("preview-data-not-utf8", "preview exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:2: not UTF-8 text (byte 0xff); save the "
        "file as UTF-8",
        data=b'{"question": "1+1=", "answer": "2"}\n{"question": "2+2=", "answer": "\xff"}\n'),
    row("min-lr-ratio-without-cosine", "check exp:E --set algorithm.min_lr_ratio=0.5", 2,
        "Error: algorithm.min_lr_ratio = 0.5: only the cosine schedule decays to it, and "
        "algorithm.lr_scheduler is 'constant', so it would be ignored; set "
        "algorithm.lr_scheduler = 'cosine', or remove min_lr_ratio"),
    row("checkpoint-root-is-a-file", "run exp:E --backend local --set checkpoint_root_dir=exp.py",
        2, "Error: checkpoint_root_dir = 'exp.py': exp.py is a file, and run folders are made "
        "inside that path; give a folder (it is created if missing)"),
    # YAML written under a JSON name (sweep 30 A-W10)
    row("config-output-named-json", "config exp:E -o out.json", 2,
        "Error: -o out.json: config writes the Trinity config as YAML, which that name would "
        "misname; give a .yaml name, e.g. -o out.yaml"),
    # ignored without a word: the served viewer pages through every rollout (sweep 30 W-03)
    row("view-max-rollouts-without-output", "view r.jsonl --max-rollouts 5 --no-browser", 2,
        "Error: --max-rollouts 5 applies to a page written with -o FILE; the served viewer "
        "pages through every rollout, so leave it out, or add -o FILE"),
    # run ended in an internal error (File name too long) (sweep 31 A-T2)
    row("checkpoint-root-name-too-long", "check exp:E --set checkpoint_root_dir=runs/" + "x" * 300,
        2, "Error: --set: invalid value @ checkpoint_root_dir: " + repr("runs/" + "x" * 55)
        + "...: its part " + repr("x" * 40) + "... is 300 bytes, longer than a file or folder "
        "name may be (255); give a shorter path"),
    # an internal error ("embedded null byte") in check, config and run (sweep 31 A-T3)
    Row("checkpoint-root-holds-a-nul", ("check", "exp:E", "--set",
                                        'checkpoint_root_dir="a\\u0000b"'), 2,
        "Error: --set: invalid value @ checkpoint_root_dir: holds a NUL character (\\x00), "
        "which no path or name may hold (got 'a\\x00b')", {"exp.py": experiment_file()}),
    # check passed a folder run cannot make (sweep 30 A-S2)
    row("checkpoint-root-cannot-be-made", "check exp:E --backend local --set "
        "checkpoint_root_dir=/proc/tunedsl-check", 2,
        "Error: checkpoint_root_dir = '/proc/tunedsl-check': cannot make folders in /proc (No "
        "such file or directory), where run makes the run's folder; give a folder you can "
        "write to"),
    row("data-pretty-printed-objects-with-a-bad-value", "check exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:4: not valid JSON (Expecting value); fix "
        "that line", data='{"question": "1+1=",\n "answer": "2"}\n{"question": "2+2=",\n '
                         '"answer": }\n'),

    # ------------------------------------------------------------------ outputs never replace inputs
    row("config-output-is-the-source", "config exp:E -o exp.py", 2,
        "Error: -o exp.py: that is the experiment's source ({dir}/exp.py); tunedsl never "
        "writes over what it reads, so give a file elsewhere"),
    row("config-output-in-the-data", "config exp:E -o data/train.jsonl", 2,
        "Error: -o data/train.jsonl: that is inside train_dataset's data ({dir}/data), where a "
        "new file would join the data; give a file elsewhere"),
    row("config-output-new-file-in-the-data", "config exp:E -o data/config.yaml", 2,
        "Error: -o data/config.yaml: that is inside train_dataset's data ({dir}/data), where a "
        "new file would join the data; give a file elsewhere"),
    row("config-output-is-the-settings", "config exp:E -o tunedsl.toml", 2,
        "Error: -o tunedsl.toml: that is the experiment's settings file ({dir}/tunedsl.toml); "
        "tunedsl never writes over what it reads, so give a file elsewhere",
        tunedsl__toml="[algorithm]\nlearning_rate = 1e-5\n"),
    row("view-output-is-the-results", "view r.jsonl -o r.jsonl", 2,
        "Error: -o r.jsonl: that is the results being viewed (r.jsonl); tunedsl never "
        "writes over what it reads, so give a file elsewhere", r__jsonl="x\n"),
    row("eval-output-is-the-source",
        "eval exp:E --base-url http://127.0.0.1:9/v1 --model x -o exp.py", 2,
        "Error: -o exp.py: that is the experiment's source ({dir}/exp.py); tunedsl never "
        "writes over what it reads, so give a file elsewhere"),
    row("rescore-output-is-the-results", "rescore r.jsonl exp:E -o r.jsonl", 2,
        "Error: -o r.jsonl: that is the results being re-scored (r.jsonl); tunedsl never "
        "writes over what it reads, so give a file elsewhere", r__jsonl=""),
    row("rescore-arguments-swapped-results-not-there", "rescore exp:E nope.jsonl", 2,
        "Error: rescore takes RESULTS.jsonl first, then MODULE:ATTR: tunedsl rescore nope.jsonl "
        "exp:E"),
    row("eval-output-given-twice", "eval exp:E --base-url http://127.0.0.1:9/v1 --model m "
        "-o a.jsonl -o b.jsonl", 2,
        "Error: tunedsl eval: -o/--output is given twice; give it once; see tunedsl eval --help"),
    row("eval-base-url-given-twice", "eval exp:E --base-url http://127.0.0.1:9/v1 --model m "
        "--base-url http://127.0.0.1:8/v1", 2,
        "Error: tunedsl eval: --base-url is given twice; give it once; see tunedsl eval --help"),
    row("rescore-output-exists", "rescore r.jsonl exp:E -o o.jsonl", 2,
        "Error: -o o.jsonl already holds results; choose another file (the re-scored results "
        "never overwrite a file)", exp__py=experiment_file(), r__jsonl="", o__jsonl=ONE_RESULT),
    # ---- found as a new user: eval, rescore, view, run directories
    row("run-resume-optimizer-garbage", RESUME, 2,
        "Error: --resume run: the newest checkpoint global_step_2 is damaged (optimizer.pt: not "
        "a saved optimizer state (File is not a zip file)); add --from-good-checkpoint to "
        "resume from global_step_1, the newest good one",
        run=True, **{"run/global_step_2/optimizer.pt": b"garbage, not an archive"}),
    row("run-resume-optimizer-cut", RESUME, 2,
        "Error: --resume run: the newest checkpoint global_step_2 is damaged (optimizer.pt: not "
        "a saved optimizer state (File is not a zip file)); add --from-good-checkpoint to "
        "resume from global_step_1, the newest good one",
        run=True, **{"run/global_step_2/optimizer.pt": _cut(0.5)}),
    row("run-from-good-checkpoint-past-a-garbage-optimizer", RESUME + " --from-good-checkpoint",
        0, "resume: skipping global_step_2 (optimizer.pt: not a saved optimizer state (File is "
        "not a zip file))", run=True, **{"run/global_step_2/optimizer.pt": b"garbage"}),
    row("run-resume-metrics-not-utf8", RESUME, 0, "checkpoint     run/global_step_3",
        run=True, **{"run/metrics.jsonl": lambda data: data + b"\xff\xfe garbage\n"}),
    row("run-resume-rollouts-step-not-a-number", RESUME, 0, "checkpoint     run/global_step_3",
        run=True, **{"run/rollouts.jsonl": lambda data: data + b'{"step": "two"}\n'}),
    row("run-resume-a-file-where-a-checkpoint-belongs", RESUME, 2,
        "Error: --resume run: global_step_3 is a file where the run writes a folder of that "
        "name; move it out of the run directory, then resume",
        run=True, **{"run/global_step_3": "not a checkpoint\n"}),
    row("run-resume-a-folder-where-the-rollout-log-goes", RESUME, 2,
        "Error: --resume run: log/rollouts.log is a folder where the run writes a file of that "
        "name; move it out of the run directory, then resume",
        run=True, **{"run/log/rollouts.log": None, "run/log/rollouts.log/keep.txt": "x\n"}),
    row("run-resume-a-folder-where-the-reward-curve-goes", RESUME, 2,
        "Error: --resume run: reward_curve.png is a folder where the run writes a file of that "
        "name; move it out of the run directory, then resume",
        run=True, **{"run/reward_curve.png": None, "run/reward_curve.png/keep.txt": "x\n"}),
    row("run-resume-a-checkpoint-under-another-steps-name", RESUME, 2,
        "Error: --resume run: the newest checkpoint global_step_2 is damaged (trainer_state.json: "
        "it is the checkpoint of step 1, not 2: a folder renamed or copied from another step); "
        "add --from-good-checkpoint to resume from global_step_1, the newest good one",
        run=True, **{"run/global_step_2/trainer_state.json":
                     '{"step": 1, "seed": 0, "total_steps": 2}'}),
    row("run-resume-metrics-without-their-last-newline", RESUME, 0,
        "checkpoint     run/global_step_3",
        run=True, **{"run/metrics.jsonl": lambda data: data.rstrip(b"\n"),
                     "run/rollouts.jsonl": lambda data: data.rstrip(b"\n")}),
    row("run-resume-experiment-yaml-not-yaml", RESUME, 2,
        "Error: --resume run: experiment.yaml is damaged (not valid YAML at line 3: expected the "
        "node content, but found '<stream end>'); tunedsl wrote it when the run started: "
        "restore it from a copy, or start a new run",
        **{"run/experiment.yaml": "name: E\nsource: [\n"}),
    row("run-resume-experiment-yaml-a-list", RESUME, 2,
        "Error: --resume run: experiment.yaml is damaged (holds a list, not the mapping tunedsl "
        "writes); tunedsl wrote it when the run started: restore it from a copy, or start a new "
        "run", **{"run/experiment.yaml": "- E\n"}),
    row("run-resume-experiment-yaml-not-utf8", RESUME, 2,
        "Error: --resume run: experiment.yaml is damaged (not UTF-8 text (byte 0xff)); tunedsl "
        "wrote it when the run started: restore it from a copy, or start a new run",
        **{"run/experiment.yaml": b"name: E\xff\n"}),
    # the rest of the run was there: "not a tunedsl run directory" denied it was one
    row("run-resume-experiment-yaml-missing", RESUME, 2,
        "Error: --resume run: experiment.yaml is missing from this run directory; tunedsl wrote "
        "it when the run started: restore it from a copy, or start a new run",
        run=True, **{"run/experiment.yaml": None}),
    row("run-resume-config-yaml-missing", RESUME, 2,
        "Error: run directory run: config.yaml is missing; tunedsl wrote it when the run "
        "started: restore it from a copy, or start a new run",
        run=True, **{"run/config.yaml": None}),
    row("eval-checkpoint-header-cut", "eval exp:E --checkpoint ckpt", 2,
        "Error: --checkpoint ckpt: the saved model is damaged (model.safetensors: Error while "
        "deserializing header: invalid header length); evaluate another checkpoint",
        **{"ckpt/config.json": "{}", "ckpt/model.safetensors": _safetensors()[:20]}),
    # said "the saved model is damaged" (sweep 32, weak)
    row("eval-checkpoint-weights-a-git-lfs-pointer", "eval exp:E --checkpoint ckpt", 2,
        "Error: --checkpoint ckpt: ckpt/model.safetensors is a git-lfs pointer, not the file "
        "itself (a clone without git-lfs); run git lfs pull in ckpt",
        **{"ckpt/config.json": "{}", "ckpt/model.safetensors": "version https://git-lfs."
                                                               "github.com/spec/v1\n"}),
    row("eval-checkpoint-unknown-architecture", "eval exp:E --checkpoint ckpt", 2,
        "Error: --checkpoint ckpt: ckpt is not a causal language model this transformers loads "
        "(model_type 'nope' in its config.json); give a folder of one, e.g. a Qwen or Llama "
        "checkpoint",
        **{"ckpt/config.json": '{"model_type": "nope"}', "ckpt/model.safetensors": _safetensors()}),
    row("eval-checkpoint-without-tokenizer", "eval exp:E --checkpoint run/global_step_2", 2,
        "Error: --checkpoint run/global_step_2: run/global_step_2 has no tokenizer "
        "(tokenizer.json, tokenizer_config.json, tokenizer.model, vocab.json); copy the "
        "tokenizer files from the model it was trained from",
        run=True, **{"run/global_step_2/tokenizer.json": None,
                     "run/global_step_2/tokenizer_config.json": None}),
    # its tokenizer_config.json kept: transformers' "(1) ... (2) ... (3)" (sweep 44 A-W11)
    row("eval-checkpoint-without-tokenizer-json", "eval exp:E --checkpoint run/global_step_2", 2,
        "Error: --checkpoint run/global_step_2: cannot load the tokenizer of run/global_step_2: "
        "none of the files it is built from is there (tokenizer.json; or tokenizer.model, or "
        "vocab.json and merges.txt); copy them from the model it was trained from",
        run=True, **{"run/global_step_2/tokenizer.json": None}),
    row("eval-checkpoint-is-a-run-directory", "eval exp:E --checkpoint run", 2,
        "Error: --checkpoint run: not a saved model folder (no config.json); give "
        "run/global_step_10 (its newest checkpoint)",
        **{"run/experiment.yaml": "name: E\n", "run/global_step_2/config.json": "{}",
           "run/global_step_10/config.json": "{}",
           # (weights: only a checkpoint whose model is whole is named; sweep 50 B-W2)
           "run/global_step_10/model.safetensors": _safetensors()}),
    row("eval-output-is-a-folder", "eval exp:E --base-url http://127.0.0.1:9/v1 --model x "
        "-o out", 2, "Error: -o out: that is a folder; give a file, e.g. out/results.jsonl",
        **{"out/earlier.jsonl": "x\n"}),
    row("eval-resume-results-not-utf8", "eval exp:E --base-url http://127.0.0.1:9/v1 --model x "
        "-o o.jsonl --resume", 2,
        "Error: o.jsonl:2: not UTF-8 text (byte 0xff); fix or delete that line",
        o__jsonl=(RESULT_LINE + "\n").encode()
        + b'{"task_index": 1, "repeat": 0, "reward": \xff}\n'),
    row("eval-resume-settings-not-a-mapping", "eval exp:E --base-url http://127.0.0.1:9/v1 "
        "--model x -o o.jsonl --resume", 2,
        "Error: o.jsonl:1: not a tunedsl result: its eval_settings is ['x'], not a mapping; fix "
        "or delete that line",
        o__jsonl=RESULT_LINE[:-1] + ', "eval_settings": ["x"]}\n'),
    row("rescore-reward-not-a-number", "rescore r.jsonl exp:E", 2,
        "Error: r.jsonl:2: not a tunedsl result: its reward is 'high', not a finite number (a "
        "result without an error has one); fix or delete that line",
        r__jsonl=RESULT_LINE + "\n"
        + RESULT_LINE.replace('"reward": 1.0', '"reward": "high"') + "\n"),
    row("view-results-task-index-a-list", "view r.jsonl -o page.html", 2,
        "Error: r.jsonl:1: not a tunedsl result: its task_index is [0], not a whole number >= "
        "0; fix or delete that line",
        r__jsonl=RESULT_LINE.replace('"task_index": 0', '"task_index": [0]') + "\n"),
    row("view-results-error-not-text", "view r.jsonl -o page.html", 2,
        "Error: r.jsonl:1: not a tunedsl result: its error is 500, not text or null; fix or "
        "delete that line",
        r__jsonl=RESULT_LINE.replace('"error": null', '"error": 500') + "\n"),
    row("check-reward-beyond-float", "check exp:E", 2,
        "Error: rollout: on the first training task, with a scripted model that always "
        "replies '0': @judge exact (exp.py:10) returned the reward "
        "100000000000000000...0000000000000000000; a reward must be at most 1e+15 in size "
        "(larger ones overflow the group's statistics): scale it down",
        exp__py=experiment_file(head=HEAD.replace('float(response == task["answer"])',
                                                  "10 ** 400"))),
    row("check-reward-an-array", "check exp:E", 2,
        "Error: rollout: on the first training task, with a scripted model that always "
        "replies '0': @judge exact (exp.py:10) returned the reward array(0.5) (a ndarray); a "
        "reward must be a finite number: convert it with float(...)",
        exp__py=experiment_file(head=HEAD.replace('float(response == task["answer"])',
                                                  '__import__("numpy").array(0.5)'))),
    row("check-reward-a-long-string", "check exp:E", 2,
        "Error: rollout: on the first training task, with a scripted model that always "
        "replies '0': @judge exact (exp.py:10) returned the reward "
        "'yyyyyyyyyyyyyyyyyyyyyyyyyyy...yyyyyyyyyyyyyyyyyyyyyyyyyyyy' (a str); a reward must "
        "be a finite number",
        exp__py=experiment_file(head=HEAD.replace('float(response == task["answer"])',
                                                  '"y" * 100_000'))),
    row("check-many-metrics-one-wrong", "check exp:E", 2,
        "Error: rollout: on the first training task, with a scripted model that always "
        "replies '0': @judge exact (exp.py:10) returned metrics {'m0': 0.0, 'm1': 1.0, "
        "'m10': 10.0, 'm11': 11.0, ...} (among them 'm99': 'n/a'); metrics must map names to "
        "numbers",
        exp__py=experiment_file(head=HEAD.replace(
            'reward=float(response == task["answer"])',
            'reward=1.0, metrics={**{f"m{i}": float(i) for i in range(99)}, "m99": "n/a"}'))),
    row("check-reward-numpy-float32", "check exp:E", 0,
        "ok  rollout: workflow and judge ran on the first training task with a scripted model "
        "(reward 0.5)",
        exp__py=experiment_file(head=HEAD.replace('float(response == task["answer"])',
                                                  '__import__("numpy").float32(0.5)'))),
    row("eval-response-to-dict-raises", "eval exp:E --base-url http://127.0.0.1:9/v1 --model x "
        "-o o.jsonl", 0, "rollouts     2 (0 errors)",
        exp__py=experiment_file(head=REPLY_HEAD.replace("BODY", REPLY_LOADS + "def to_dict(self):\n"
                                                        "        raise TypeError('no')"))),
    row("eval-response-repr-raises", "eval exp:E --base-url http://127.0.0.1:9/v1 --model x "
        "-o o.jsonl", 0, "rollouts     2 (0 errors)",
        exp__py=experiment_file(head=REPLY_HEAD.replace("BODY", "def __repr__(self):\n"
                                                        "        raise TypeError('no')"))),
    # ------------------------------------------------------------------ model selection
    # eval with several --model: each candidate's endpoint, checked before any rollout.
    row("select-model-given-twice", "eval exp:E --base-url http://x/v1 --model a --model a", 2,
        "Error: --model a is given twice; give each candidate once"),
    row("select-model-given-twice-with-its-url",
        "eval exp:E --base-url http://x/v1 --model a --model a@http://x/v1", 2,
        "Error: --model a@http://x/v1 is given twice; give each candidate once"),
    row("select-model-url-empty", "eval exp:E --model a@ --model b@http://x/v1", 2,
        "Error: --model a@: give the endpoint's URL after @, e.g. --model "
        "a@http://localhost:8000/v1"),
    row("select-model-url-without-scheme",
        "eval exp:E --model a@localhost:8000/v1 --model b@http://x/v1", 2,
        "Error: --model a@localhost:8000/v1: localhost:8000/v1 is not an http(s) URL; give "
        "e.g. a@http://localhost:8000/v1"),
    row("select-model-url-not-http", "eval exp:E --model a@ftp://x/v1 --model b@http://x/v1", 2,
        "Error: --model a@ftp://x/v1: ftp://x/v1 is not an http(s) URL; give e.g. "
        "a@http://x/v1"),
    row("select-model-name-empty", "eval exp:E --model @http://x/v1 --model b@http://x/v1", 2,
        "Error: --model @http://x/v1: give the model name before @, e.g. --model "
        "Qwen/Qwen3-8B@http://x/v1"),
    row("select-model-without-endpoint", "eval exp:E --model a --model b@http://x/v1", 2,
        "Error: --model a has no endpoint: give --base-url URL for every --model without one, "
        "or --model a@URL"),
    row("select-base-url-used-by-no-model",
        "eval exp:E --base-url http://x/v1 --model a@http://y/v1 --model b@http://y/v1", 2,
        "Error: --base-url http://x/v1 is used by no --model (each gives its own @URL); drop "
        "it, or drop the @URL of the models it serves"),
    row("select-one-model-base-url-unused",
        "eval exp:E --base-url http://x/v1 --model a@http://y/v1", 2,
        "Error: --base-url http://x/v1 is used by no --model (each gives its own @URL); drop "
        "it, or drop the @URL of the models it serves"),
    row("select-base-url-not-a-url", "eval exp:E --base-url x --model a --model b", 2,
        "Error: --base-url x: not an http(s) URL; give the endpoint's, e.g. "
        "http://localhost:8000/v1"),
    row("select-with-checkpoint",
        "eval exp:E --base-url http://x/v1 --model a --model b --checkpoint d", 2,
        "Error: --checkpoint evaluates one local model; compare endpoints with several "
        "--model, without --checkpoint"),
    row("select-resume-without-output",
        "eval exp:E --base-url http://x/v1 --model a --model b --resume", 2,
        "Error: --resume continues a model selection: give its folder with -o DIR"),
    row("select-output-is-a-file",
        "eval exp:E --base-url http://x/v1 --model a --model b -o picks.jsonl", 2,
        "Error: -o picks.jsonl: with several --model, -o names a folder (one results file per "
        "candidate), not a file; give e.g. -o picks"),
    # an existing results file: "-o picks.jsonl/a.jsonl: picks.jsonl is a file, not a
    # folder", a path the user never typed (sweep 45 B-W3)
    row("select-output-is-an-existing-results-file",
        "eval exp:E --base-url http://x/v1 --model a --model b -o picks.jsonl", 2,
        "Error: -o picks.jsonl: with several --model, -o names a folder (one results file per "
        "candidate), not a file; give e.g. -o picks", **{"picks.jsonl": RESULT_LINE + "\n"}),
    row("select-output-holds-results",
        "eval exp:E --base-url http://127.0.0.1:9/v1 --model a --model b -o picks", 2,
        "Error: -o picks already holds results for b (picks/b.jsonl); add --resume to continue "
        "them, or choose another folder", **{"picks/b.jsonl": RESULT_LINE + "\n"}),
    # ------------------------------------------------------------------ tune-prompt
    tuning("tune-prompt-no-param", f"tune-prompt exp:Sums {TUNE}", 2,
           "Error: give the text param(s) to tune with --param NAME (the experiment's text "
           "params: system_prompt; set one in its params = {...})"),
    tuning("tune-prompt-param-unknown", f"tune-prompt exp:Sums --param system_promt {TUNE}", 2,
           "Error: --param system_promt: the experiment has no param 'system_promt' (did you "
           "mean 'system_prompt'?), so the workflow cannot read it (its params: retries, "
           "system_prompt); add it to the class's params = {...}"),
    tuning("tune-prompt-param-not-text", f"tune-prompt exp:Sums --param retries {TUNE}", 2,
           "Error: --param retries: its value 2 (an int) is not text; only text params can be "
           "tuned (text params: system_prompt)"),
    tuning("tune-prompt-workflow-takes-no-params",
           f"tune-prompt exp:Plain --param system_prompt {TUNE}", 2,
           "Error: Plain (exp.py:36): params: system_prompt set, but neither @workflow plain "
           "(exp.py:14) nor @judge exact (exp.py:20) takes them, so they reach nothing; add a "
           "params argument to the function that reads them, or remove them"),
    tuning("tune-prompt-budget-zero", f"tune-prompt exp:Sums --param system_prompt {TUNE} "
           "--budget 0", 2,
           "Error: --budget 0: give a number of rollouts, at least one evaluation of the "
           "validation split"),
    tuning("tune-prompt-budget-below-validation", f"tune-prompt exp:Sums --param system_prompt "
           f"{TUNE} --budget 1", 2,
           "Error: --budget 1: below one evaluation of the validation split (2 rollouts); give "
           "at least 2, and room for proposals, e.g. --budget 100"),
    tuning("tune-prompt-concurrency-zero", f"tune-prompt exp:Sums --param system_prompt {TUNE} "
           "--concurrency 0", 2, "Error: --concurrency 0: give at least 1 rollout at a time"),
    tuning("tune-prompt-minibatch-zero", f"tune-prompt exp:Sums --param system_prompt {TUNE} "
           "--minibatch 0", 2,
           "Error: --minibatch 0: give at least 1 training example per proposal"),
    # no minibatch could be evaluated: tuning ended at once, advising a larger --budget
    tuning("tune-prompt-minibatch-above-the-budget",
           f"tune-prompt exp:Sums --param system_prompt {TUNE} --minibatch 100000 --budget 40",
           2, "Error: --minibatch 100000: more than the 38 rollouts --budget 40 leaves after "
           "the validation split's 2, so no proposal would ever be made; give --minibatch 2 "
           "or a larger budget"),
    tuning("tune-prompt-budget-of-the-validation-alone",
           f"tune-prompt exp:Sums --param system_prompt {TUNE} --budget 2", 2,
           "Error: --minibatch 3: more than the 0 rollouts --budget 2 leaves after the "
           "validation split's 2, so no proposal would ever be made; give a larger budget, "
           "e.g. --budget 100"),
    tuning("tune-prompt-resume-without-candidates",
           f"tune-prompt exp:Sums --param system_prompt {TUNE} --resume", 2,
           "Error: --resume continues a candidates file: give it with --candidates FILE"),
    # Path('.').with_suffix: an internal error (sweep 22 T2)
    tuning("tune-prompt-candidates-the-current-folder",
           f"tune-prompt exp:Sums --param system_prompt {TUNE} --candidates .", 2,
           "Error: --candidates .: that is a folder; give a file, e.g. prompts/candidates.jsonl"),
    # refused only after the whole search, exit 1 (sweep 22 W2)
    tuning("tune-prompt-output-a-folder",
           f"tune-prompt exp:Sums --param system_prompt {TUNE} -o data", 2,
           "Error: -o data: that is a folder; give a file in it, e.g. data/best.toml"),
    tuning("tune-prompt-output-is-the-source",
           f"tune-prompt exp:Sums --param system_prompt {TUNE} -o exp.py", 2,
           "Error: -o exp.py: that is the experiment's source ({dir}/exp.py); tunedsl never "
           "writes over what it reads, so give a file elsewhere"),
    tuning("tune-prompt-reflection-model-without-name",
           "tune-prompt exp:Sums --param system_prompt --base-url http://127.0.0.1:9/v1 "
           "--model m --reflection-model @http://127.0.0.1:9/v1", 2,
           "Error: --reflection-model @http://127.0.0.1:9/v1: give the model name before @, "
           "e.g. --reflection-model Qwen/Qwen3-8B@http://127.0.0.1:9/v1"),
    tuning("tune-prompt-reflection-model-without-endpoint",
           "tune-prompt exp:Sums --param system_prompt --checkpoint ckpt --reflection-model "
           "critic", 2,
           "Error: --reflection-model critic: give its endpoint as NAME@URL, e.g. "
           "critic@http://localhost:8001/v1 (there is no --base-url to share)"),
    tuning("tune-prompt-reflection-model-unreachable",
           f"tune-prompt exp:Sums --param system_prompt {TUNE}", 2,
           "Error: --reflection-model critic@http://127.0.0.1:9/v1: http://127.0.0.1:9/v1 did "
           "not answer (ConnectError: Cannot connect to host 127.0.0.1:9 ssl:default "
           "[Connect call failed ('127.0.0.1', 9)]); check its URL, and that it is up"),
    # probed, and its URL kept in the candidates file (sweep 39 B-06)
    tuning("tune-prompt-a-key-in-the-reflection-model-s-url",
           "tune-prompt exp:Sums --param system_prompt --base-url http://127.0.0.1:9/v1 "
           "--model m --reflection-model "
           "critic@http://127.0.0.1:9/sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD/v1", 2,
           "Error: --reflection-model critic@http://127.0.0.1:9/<a key, not shown>/v1: its "
           "path holds text that looks like a key, not shown (it would be written into the "
           "results and the run's files); give the URL up to its /v1, and the key's "
           "environment variable with --reflection-api-key-env"),
    tuning("tune-prompt-a-key-given-as-the-reflection-model-s-name",
           "tune-prompt exp:Sums --param system_prompt --base-url http://127.0.0.1:9/v1 "
           "--model m --reflection-model sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD", 2,
           "Error: --reflection-model '<a key, not shown>': the model's name looks like an API "
           "key (not shown: it would be written into the results); give the model's name, and "
           "the key's environment variable with --reflection-api-key-env"),
    tuning("tune-prompt-a-request-path-in-the-reflection-model-s-url",
           "tune-prompt exp:Sums --param system_prompt --base-url http://127.0.0.1:9/v1 "
           "--model m --reflection-model critic@http://127.0.0.1:9/v1/chat/completions", 2,
           "Error: --reflection-model critic@http://127.0.0.1:9/v1/chat/completions: "
           "http://127.0.0.1:9/v1/chat/completions ends with /chat/completions, which the "
           "client adds to each request (every call would miss); give http://127.0.0.1:9/v1"),
    tuning("tune-prompt-reflection-model-answers-html",
           "tune-prompt exp:Sums --param system_prompt --base-url http://127.0.0.1:9/v1 "
           "--model m --reflection-model critic@{bad}/html/v1", 2,
           "Error: --reflection-model critic@{bad}/html/v1: {bad}/html/v1 answered no chat "
           "completion (ConnectionError: the model endpoint {bad}/html/v1/ answered an HTML "
           "page, not an OpenAI chat completion; check the URL (an OpenAI-compatible server's "
           "ends in /v1)); check its URL and the model's name"),
    # ---------------------------------------- nothing lost: odd text, odd replies, resumes
    # Text JSON allows but UTF-8 does not (a lone surrogate) is kept, escaped, everywhere.
    row("eval-reply-holds-a-lone-surrogate",
        "eval exp:E --base-url {bad}/surrogate/v1 --model x -o o.jsonl", 0,
        "results      o.jsonl"),
    # Valid JSON, and no text: refused by file and line by every reader (check = run).
    row("check-data-holds-a-lone-surrogate", "check exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:1: the value at 'question' holds a lone "
        "surrogate (a \\ud800-\\udfff escape without its pair), which is not text a model, a "
        "tokenizer or the datasets library can take; fix that line",
        data='{"question": "\\ud800", "answer": "2"}\n' + DATA),
    row("preview-data-holds-a-lone-surrogate", "preview exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:1: the value at 'question' holds a lone "
        "surrogate (a \\ud800-\\udfff escape without its pair), which is not text a model, a "
        "tokenizer or the datasets library can take; fix that line",
        data='{"question": "\\ud800", "answer": "2"}\n' + DATA),
    row("view-results-hold-a-lone-surrogate", "view r.jsonl -o page.html", 0,
        "wrote page.html",
        r__jsonl=RESULT_LINE.replace('"2"}', '"\\ud800"}') + "\n"),
    row("rescore-results-hold-a-lone-surrogate", "rescore r.jsonl exp:E -o o.jsonl", 0,
        "results      o.jsonl",
        r__jsonl=RESULT_LINE.replace('"2"}', '"\\ud800"}') + "\n"),
    # Endpoint replies that are JSON of the wrong types: read at the boundary.
    row("eval-reply-usage-is-a-word",
        "eval exp:E --base-url {bad}/usageword/v1 --model x -o o.jsonl", 0,
        "tokens       prompt 0  completion 0"),
    row("eval-reply-content-is-a-list-of-parts",
        "eval exp:E --base-url {bad}/parts/v1 --model x -o o.jsonl", 0,
        "reward       mean 0.5000  std 0.5000"),
    row("eval-reply-content-is-null",
        "eval exp:E --base-url {bad}/null/v1 --model x -o o.jsonl", 0,
        "reward       mean 0.0000  std 0.0000"),
    row("eval-reply-content-is-a-number",
        "eval exp:E --base-url {bad}/number/v1 --model x -o o.jsonl", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "TypeError: the endpoint's reply has content 42 (a int), not text; it does not answer "
        "as an OpenAI chat completion"),
    row("eval-reply-tool-call-without-a-name",
        "eval exp:E --base-url {bad}/toolnoname/v1 --model x -o o.jsonl", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "TypeError: the endpoint's reply has tool call 0 without a function name; it does "
        "not answer as an OpenAI chat completion"),
    # Some rollouts fail: the first error is named, and the mean counts each failure as 0.
    row("eval-endpoint-fails-some-rollouts",
        "eval exp:E --base-url {bad}/flaky/v1 --model x -o o.jsonl --repeat 2", 0,
        "Warning: 2 of 4 rollouts failed (each counted as reward 0); the first error: "
        "@workflow solve (exp.py:4) raised BadRequestError: Error code: 400 - {'error': "
        "{'message': 'the model is overloaded', 'type': 'server_error'}}; the same command "
        "with -o o.jsonl --resume runs the failed ones again"),
    row("eval-mean-counts-a-failed-rollout-as-0",
        "eval exp:E --base-url {bad}/flaky/v1 --model x -o o.jsonl --repeat 2", 0,
        "reward       mean 0.5000  std 0.5000  (a failed rollout counts 0; 1.0000 over the 2 "
        "that finished)"),
    row("select-endpoint-fails-some-rollouts",
        "eval exp:E --base-url {bad}/flaky/v1 --model a --model b -o picks", 0,
        "Warning: rollouts failed (a 1 of 2, b 1 of 2), each counted as reward 0; the first "
        "error: a: @workflow solve (exp.py:4) raised BadRequestError: Error code: 400 - "
        "{'error': {'message': 'the model is overloaded', 'type': 'server_error'}}; the same "
        "command with -o picks --resume runs the failed ones again"),
    # Outputs never replace a file tunedsl did not write for that same output.
    tuning("tune-prompt-output-is-eval-results",
           f"tune-prompt exp:Sums --param system_prompt {TUNE} -o results.jsonl", 2,
           # ("or remove that file" was said of another output's file: sweep 48 B-W3)
           "Error: -o results.jsonl: that file holds eval results; tunedsl never writes over "
           "it, so give another path",
           results__jsonl=RESULT_LINE + "\n"),
    tuning("tune-prompt-default-output-is-the-users-file",
           f"tune-prompt exp:Sums --param system_prompt {TUNE} --candidates c.jsonl", 2,
           "Error: the default output (no -o) c.toml: that file is not a [params] settings "
           "file this command wrote (it lacks tunedsl's mark '# tunedsl tune-prompt'; its "
           "first line: \"my = 'notes'\"); tunedsl replaces only a file it wrote for this same output, so "
           "give another path or remove that file",
           c__toml="my = 'notes'\n"),
    tuning("tune-prompt-output-is-a-candidates-file",
           f"tune-prompt exp:Sums --param system_prompt {TUNE} -o old.jsonl", 2,
           "Error: -o old.jsonl: that file holds a tune-prompt candidates file; tunedsl never "
           "writes over it, so give another path",
           old__jsonl='{"kind": "start", "experiment": "Sums", "tune_settings": {}}\n'),
    # plain YAML under a compressed name, exit 0, as eval -o r.jsonl.gz was (sweep 28 A-W7)
    row("config-output-named-like-a-compressed-file", "config exp:E -o a.yaml.gz", 2,
        "Error: -o a.yaml.gz: tunedsl writes a Trinity config as plain text, which a .gz name "
        "would misname; give a.yaml and compress it afterwards if you like"),
    row("config-output-is-eval-results", "config exp:E -o results.jsonl", 2,
        "Error: -o results.jsonl: that file holds eval results; tunedsl never writes over it, "
        "so give another path",
        results__jsonl=RESULT_LINE + "\n"),
    tuning("tune-prompt-reflection-model-later-answers-nothing",
           "tune-prompt exp:Sums --param system_prompt --base-url {bad}/two/v1 --model m "
           "--reflection-model critic@{bad}/okthennull/v1 --budget 8 --candidates c.jsonl",
           1, "Error: the reflection model failed 3 times in a row, so tuning stopped; the "
           "last error: ValueError: the reflection model answered no text (finish reason "
           "stop); --candidates c.jsonl --resume continues when it answers again"),
    # it said "answered no text", not that it refused, nor its words (sweep 27 W-03)
    tuning("tune-prompt-reflection-model-refuses",
           "tune-prompt exp:Sums --param system_prompt --base-url {bad}/two/v1 --model m "
           "--reflection-model critic@{bad}/okthenrefusal/v1 --budget 8 --candidates c.jsonl",
           1, "Error: the reflection model failed 3 times in a row, so tuning stopped; the "
           "last error: ValueError: the reflection model refused: \"I can't help with that.\"; "
           "--candidates c.jsonl --resume continues when it answers again"),
    # taken as a prompt: every rollout with it failed, blamed on the workflow (sweep 23 B-08)
    tuning("tune-prompt-reflection-model-answers-a-lone-surrogate",
           "tune-prompt exp:Sums --param system_prompt --base-url {bad}/two/v1 --model m "
           "--reflection-model critic@{bad}/okthensurrogate/v1 --budget 8 --candidates c.jsonl",
           1, "Error: the reflection model failed 3 times in a row, so tuning stopped; the "
           "last error: ValueError: the reflection model answered text with a lone surrogate "
           "(a \\ud800-\\udfff escape without its pair), which no model can take as a prompt; "
           "--candidates c.jsonl --resume continues when it answers again"),
    # A resume checks what it resumes.
    row("eval-resume-after-the-dataset-changed",
        "eval exp:E --base-url {bad}/two/v1 --model x -o o.jsonl --resume", 2,
        "Error: --resume o.jsonl: its results were made with other settings (the tasks "
        "(their digest c64a9a2919e06cef -> ca211a9863296dab: the dataset's rows changed)); "
        "merging would mix two evaluations, so resume with the same options or write to "
        "another -o file",
        before="eval exp:E --base-url {bad}/two/v1 --model x -o o.jsonl",
        then={"data/train.jsonl": DATA.replace('"answer": "2"', '"answer": "3"')}),
    row("eval-resume-of-a-line-of-no-task",
        "eval exp:E --base-url {bad}/two/v1 --model x -o o.jsonl --resume", 2,
        "Error: --resume o.jsonl: it holds task_index 7, repeat 0, which is no rollout of this "
        "evaluation (2 tasks x 1 repeats); the file was edited, so resume cannot trust it: "
        "write to another -o file",
        before="eval exp:E --base-url {bad}/two/v1 --model x -o o.jsonl",
        then={"o.jsonl": lambda data: data.replace(b'"task_index": 0', b'"task_index": 7', 1)}),
    row("eval-resume-after-a-param-changed",
        "eval exp:E --base-url {bad}/two/v1 --model x -o o.jsonl --resume "
        "--set params.hint=longer", 2,
        "Error: --resume o.jsonl: its results were made with other settings (params.hint (its "
        "digest 45c64a701df8ff2b -> f3d49011fa1c0729)); merging would mix two evaluations, so "
        "resume with the same options or write to another -o file",
        before="eval exp:E --base-url {bad}/two/v1 --model x -o o.jsonl --set params.hint=short",
        exp__py=experiment_file(head=replaced("async def solve(task, model):",
                                              "async def solve(task, model, params):", HEAD))),
    row("check-params-that-reach-nothing", "check exp:E --set params.hint=x", 2,
        "Error: --set: params: hint set, but neither @workflow solve (exp.py:4) nor "
        "@judge exact (exp.py:10) takes them, so they reach nothing; add a params argument to "
        "the function that reads them, or remove them"),
    row("params-from-a-settings-file-that-reach-nothing", "check exp:E --settings p.toml", 2,
        "Error: p.toml: params: hint set, but neither @workflow solve (exp.py:4) nor "
        "@judge exact (exp.py:10) takes them, so they reach nothing; add a params argument to "
        "the function that reads them, or remove them", p__toml='[params]\nhint = "x"\n'),
    row("eval-resume-after-the-temperature-changed",
        "eval exp:E --base-url {bad}/two/v1 --model x -o o.jsonl --resume "
        "--set model.temperature=0.2", 2,
        "Error: --resume o.jsonl: its results were made with other settings "
        "(sampling.temperature 1.0 -> 0.2); merging would mix two evaluations, so resume with "
        "the same options or write to another -o file",
        before="eval exp:E --base-url {bad}/two/v1 --model x -o o.jsonl"),
    tuning("tune-prompt-resume-after-a-task-changed",
           f"{TUNED} --resume", 2,
           "Error: --resume c.jsonl: its results were made with other settings (the tasks "
           "(their digest 0c66caa7278e68a1 -> 9fdc520550e4ff9f: the dataset's rows changed)); "
           "merging would mix two tunings, so resume with the same options or write to "
           "another --candidates file", before=TUNED,
           then={"data/test.jsonl": DATA.replace('"answer": "4"', '"answer": "5"')}),
    # what scores a rollout is kept as eval keeps it, and a resume with another is refused
    tuning("tune-prompt-resume-after-the-temperature-changed",
           f"{TUNED} --resume --set model.temperature=0.2", 2,
           "Error: --resume c.jsonl: its results were made with other settings "
           "(sampling.temperature 1.0 -> 0.2); merging would mix two tunings, so resume with "
           "the same options or write to another --candidates file", before=TUNED),
    tuning("tune-prompt-resume-after-max-tokens-changed",
           f"{TUNED} --resume --set model.max_tokens=3", 2,
           "Error: --resume c.jsonl: its results were made with other settings "
           "(sampling.max_tokens None -> 3); merging would mix two tunings, so resume with "
           "the same options or write to another --candidates file", before=TUNED),
    tuning("tune-prompt-resume-after-the-rollout-timeout-changed",
           f"{TUNED} --resume --set rollout_timeout=5", 2,
           "Error: --resume c.jsonl: its results were made with other settings "
           "(rollout_timeout 3600 -> 5); merging would mix two tunings, so resume with the "
           "same options or write to another --candidates file", before=TUNED),
    tuning("tune-prompt-resume-after-a-param-not-tuned-changed",
           f"{TUNED} --resume --set params.retries=3", 2,
           "Error: --resume c.jsonl: its results were made with other settings "
           "(params.retries (its digest d4735e3a265e16ee -> 4e07408562bedb8b)); merging would "
           "mix two tunings, so resume with the same options or write to another --candidates "
           "file", before=TUNED),
    tuning("tune-prompt-resume-after-the-judge-changed", f"{TUNED} --resume", 2,
           "Error: --resume c.jsonl: its results were made with other settings "
           "(functions.judge 'exact@bcf646335dc4a379' -> 'exact@17fa42101d80a214' (its code: "
           "its file, a project file imported from it, an environment variable they "
           "read, or a data file they read by name)); merging "
           "would mix two tunings, so resume with the same options or write to another "
           "--candidates file", before=TUNED,
           then={"exp.py": TUNING_EXPERIMENT.replace("1.0 if response.strip()",
                                                     "1.0 if response.strip(' ')")}),
    tuning("tune-prompt-resume-of-a-file-from-before-the-scoring-settings",
           f"{TUNED} --resume --set model.temperature=0.2", 0,
           "candidates   c.jsonl (1 scored; 0 rollouts run, 5 from the file, 0 failed)",
           before=TUNED, then={"c.jsonl": _start_line_settings_without(
               "sampling", "experiment", "functions", "untuned_params", "rollout_timeout")}),
    tuning("tune-prompt-resume-of-a-file-without-its-start-line",
           f"{TUNED.replace('--model m', '--model other')} --resume", 2,
           "Error: --candidates c.jsonl: it has no start line (the line that records the "
           "settings a tuning began with), so a resume cannot tell whether it continues the "
           "same tuning; restore that line, or start a new file", before=TUNED,
           then={"c.jsonl": lambda data: data[data.index(b"\n") + 1:]}),
    tuning("tune-prompt-resume-of-an-edited-start-line", f"{TUNED} --resume", 2,
           "Error: --resume c.jsonl: its tune_settings is 'oops' (a str), not the settings "
           "object tunedsl writes; the file was edited, so a resume cannot tell what it "
           "continues: start a new file",
           before=TUNED, then={"c.jsonl": _start_line_settings("oops")}),
    tuning("tune-prompt-val-fraction-beside-an-eval-dataset",
           f"tune-prompt exp:Sums --param system_prompt {TUNE} --val-fraction 0.5", 2,
           "Error: --val-fraction 0.5: the experiment has an eval_dataset, whose rows are the "
           "validation set, so no share of the training data is held out; drop --val-fraction"),
    tuning("tune-prompt-resume-of-an-edited-val-reward", f"{TUNED} --resume", 2,
           "Error: --candidates c.jsonl: candidate 0's val_reward 0.99 is not what its "
           "validation rollouts in the file score (0.5000); the file was edited or mixes two "
           "tunings, so it cannot be resumed: start a new file",
           before=TUNED, then={"c.jsonl": lambda data: re.sub(
               rb'"val_reward": [0-9.]+', b'"val_reward": 0.99', data)}),
    # the edited text was crowned the best, never validated (sweep 23 B-07)
    tuning("tune-prompt-resume-of-edited-candidate-params", f"{TUNED} --resume", 2,
           "Error: --candidates c.jsonl: candidate 0's params are not the texts its id "
           "2d4e487641b3 was made from; the file was edited, so it cannot be resumed: start a "
           "new file",
           before=TUNED, then={"c.jsonl": _candidates_edited(
               "candidate", lambda line: line["params"].update(system_prompt="never tried"))}),
    tuning("tune-prompt-resume-of-a-rollout-of-another-task", f"{TUNED} --resume", 2,
           "Error: --candidates c.jsonl: its val rollout of task_index 0 holds another task "
           "than that row; the file was edited, so it cannot be resumed: start a new file",
           before=TUNED, then={"c.jsonl": _candidates_edited(
               "rollout", lambda line: line.update(task={"a": 1, "b": 1, "answer": "2"}),
               split="val", task_index=0)}),
    # "already holds results; add --resume", which then refused it (sweep 47 B-W7)
    row("eval-output-a-runs-rollouts", "eval exp:E --base-url http://127.0.0.1:9/v1 --model x "
        "-o {run}/rollouts.jsonl", 2,
        "Error: -o {run}/rollouts.jsonl holds a run's rollouts (its rollouts.jsonl), not eval "
        "results; tunedsl never writes over it, so give another file", run=True),
    row("run-resume-after-the-data-changed", RESUME, 2,
        "Error: --resume run: train_dataset's data (train.jsonl changed; its digest "
        "d54c794a8bd2f3c7 -> 3787134e4c7bedc0) changed since the run started, so it would go on over other rows "
        "(or evaluate others) than it began with; restore the data it started with, or start "
        "a new run", run=True,
        data=DATA.replace('"answer": "2"', '"answer": "3"')),
    # the rewards of two judges in one run, without a word (sweep 24)
    row("run-resume-after-the-judge-changed", RESUME, 2,
        "Error: --resume run: the code of @judge exact (its file, a project file imported "
        "from it, an environment variable they read, or a data file they read by name) "
        "changed since the run started (judge 'exact@2a7de4556990191b' -> "
        "'exact@09ef788dd2f9283b'), so its rewards would come from two judges; restore that "
        "code, or start a new run from its last checkpoint (model.model_path = "
        "RUN_DIR/global_step_N)", run=True,
        exp__py=RUN_EXPERIMENT.replace("float(response ==", "float(response.strip() ==")),
    row("run-resume-with-its-data-digests-emptied", RESUME, 2,
        "Error: --resume run: data_digests.json has no digest of train_dataset's data, which a "
        "run keeps for each local dataset when it starts, so the file was edited; restore it "
        "from a copy, or start a new run", run=True, **{"run/data_digests.json": "{}\n"}),
    row("run-resume-without-its-data-digests", RESUME, 0,
        "note: run keeps no data_digests.json (a run from before tunedsl kept one, or the "
        "file was removed), so this resume cannot check that the data is the data the run "
        "started with", run=True, **{"run/data_digests.json": None}),
    row("run-resume-without-any-checkpoint", RESUME, 0,
        "note: run has no checkpoint (global_step_N) to go on from, so training starts again "
        "at step 1, replacing what it recorded of earlier steps", run=True,
        **{"run/global_step_1": None, "run/global_step_2": None}),
    row("run-resume-after-the-project-moved", RESUME.replace("--resume run", "--resume {run}"),
        0, "checkpoint     {run}/global_step_3", run=True, moved=True),
    tuning("tune-prompt-output-is-the-users-own-params-file",
           f"tune-prompt exp:Sums --param system_prompt {TUNE} -o prod.toml", 2,
           "Error: -o prod.toml: that file is not a [params] settings file this command wrote "
           "(it lacks tunedsl's mark '# tunedsl tune-prompt'; its first line: '[params]'); "
           "tunedsl replaces only a file it wrote for this same output, so give another path "
           "or remove that file", prod__toml='[params]\nsystem_prompt = "Reviewed."\n'),
    row("view-output-is-the-users-own-page", "view r.jsonl -o report.html", 2,
        "Error: -o report.html: that file is not an HTML page this command wrote (it lacks "
        "tunedsl's mark '<meta name=\"generator\" content=\"tunedsl view\">'; its first "
        "line: '<!DOCTYPE html>'); tunedsl replaces only a file it wrote for this same output, "
        "so give another path or remove that file", r__jsonl=RESULT_LINE + "\n",
        report__html="<!DOCTYPE html>\n<html><body><h1>My report</h1></body></html>\n"),
    row("config-output-is-the-users-own-trinity-yaml", "config exp:E -o prod.yaml", 2,
        "Error: -o prod.yaml: that file is not a Trinity config this command wrote (it lacks "
        "tunedsl's mark '# A Trinity-RFT config written by tunedsl config'; its first line: "
        "'# hand-tuned for our cluster'); tunedsl replaces only a file it wrote for this same "
        "output, so give another path or remove that file",
        prod__yaml="# hand-tuned for our cluster\nexplorer: {}\ntrainer: {}\nbuffer: {}\n"),
    # "or remove that file" of a run's own config (sweep 48 B-W3)
    row("config-output-is-a-run-s-config", "config exp:E -o {run}/config.yaml", 2,
        "Error: -o {run}/config.yaml: that file holds a run's config.yaml (in the run "
        "directory {run}); tunedsl never writes over it, so give another path", run=True),
    row("view-output-is-the-experiment-s-module", "view r.jsonl -o exp.py", 2,
        "Error: -o exp.py: that file is not an HTML page this command wrote (it lacks "
        "tunedsl's mark '<meta name=\"generator\" content=\"tunedsl view\">'; its first "
        "line: 'from tunedsl import *'); tunedsl "
        "replaces only a file it wrote for this same output, so give another path",
        r__jsonl=RESULT_LINE + "\n"),
    row("config-output-written-before-is-replaced", "config exp:E -o t.yaml", 0, "wrote t.yaml",
        before="config exp:E -o t.yaml"),
    # check refuses what run would refuse.
    row("check-std-cal-level-unknown", "check exp:E", 2,
        "Error: E (exp.py:15): algorithm.advantage_args.std_cal_level = 'galaxy': "
        "std_cal_level of grpo's advantage (grpo) must be one of 'group', 'batch'",
        exp__py=experiment_file(replaced(
            "batch_size=2)", 'batch_size=2, advantage_args={"std_cal_level": "galaxy"})'))),
    row("check-opmd-baseline-unknown", "check exp:E", 2,
        "Error: E (exp.py:15): algorithm.advantage_args.opmd_baseline = 'median': "
        "opmd_baseline of opmd's advantage (opmd) must be one of 'mean', 'logavgexp'",
        exp__py=experiment_file(replaced(
            'Algorithm("grpo", group_size=2, batch_size=2)',
            'Algorithm("opmd", group_size=2, batch_size=2, '
            'advantage_args={"opmd_baseline": "median"})'))),
    row("check-std-threshold-nan", "check exp:E", 2,
        "Error: exp.py:21: Algorithm.std_threshold must be a finite number (got nan)",
        exp__py=experiment_file(replaced(
            "batch_size=2)", 'batch_size=2, std_threshold=float("nan"))'))),
    row("check-clip-range-low-above-one", "check exp:E", 2,
        "Error: E (exp.py:15): algorithm.clip_range_low = 1.5: clip_range_low of grpo's "
        "policy loss (ppo) must be a number from 0 to 1",
        exp__py=experiment_file(replaced("batch_size=2)", "batch_size=2, clip_range_low=1.5)"))),
    row("check-policy-loss-argument-a-string", "check exp:E", 2,
        "Error: E (exp.py:15): algorithm.policy_loss_args.clip_ratio_c = 'three': "
        "clip_ratio_c of grpo's policy loss (ppo) must be a number above 1",
        exp__py=experiment_file(replaced(
            "batch_size=2)", 'batch_size=2, policy_loss_args={"clip_ratio_c": "three"})'))),
    # check read the first, the YAML kept the second (sweep 23 A-S1)
    row("check-base-yaml-two-eval-tasksets-one-name", "check exp:E", 2,
        "Error: {dir}/base.yaml: buffer.explorer_input.eval_tasksets[1] is named 'a', as an "
        "entry before it is; give each entry a name of its own",
        tunedsl__toml='trinity_config = "base.yaml"\n',
        base__yaml="buffer:\n  explorer_input:\n    eval_tasksets:\n"
                   "      - {name: a, path: data}\n      - {name: a, path: nowhere}\n"),
    # "Trinity-RFT rejects the generated config: Invalid configuration: Key 'bogus_key' not
    # in 'Config' full_key: bogus_key object_type=Config" (sweep 47 A-W10)
    row("check-base-yaml-unknown-key", "check exp:E", 2,
        "Error: trinity: model.bogus_key: Trinity-RFT has no such setting (a key of the base "
        "YAML given as trinity_config, or of the [trinity] table); fix its name, or remove it",
        tunedsl__toml='trinity_config = "base.yaml"\n', base__yaml="model:\n  bogus_key: 1\n"),
    # passed check: Trinity takes trainer_config as any value, and verl's workers read it
    # on the cluster alone (sweep 49's known list)
    row("check-base-yaml-verl-key-of-no-field", "check exp:E", 2,
        "Error: trinity: trainer.trainer_config.actor.ppo_epoch: verl's FSDPActorConfig has "
        "no field 'ppo_epoch', and its workers would stop on it after the cluster started; "
        "fix its name, or remove it",
        tunedsl__toml='trinity_config = "base.yaml"\n',
        base__yaml="trainer:\n  trainer_config:\n    actor:\n      ppo_epoch: 2\n"),
    # passed check, the number dropped for tunedsl's own table (sweep 49)
    row("check-base-yaml-a-section-given-a-number", "check exp:E", 2,
        "Error: {dir}/base.yaml: explorer is 5, where Trinity-RFT reads a table of settings; "
        "give a table, or remove it",
        tunedsl__toml='trinity_config = "base.yaml"\n', base__yaml="explorer: 5\n"),
    # passed check, the number dropped for tunedsl's own table; one level further down in
    # [trinity], an internal error (sweep 50 A-T1, A-W9)
    row("check-base-yaml-a-nested-table-given-a-number", "check exp:E --backend trinity", 2,
        "Error: {dir}/base.yaml: buffer.explorer_input.taskset is 5, where Trinity-RFT reads "
        "a table of settings; give a table, or remove it",
        tunedsl__toml='trinity_config = "base.yaml"\n',
        base__yaml="buffer:\n  explorer_input:\n    taskset: 5\n"),
    row("check-trinity-a-nested-table-given-a-number", "check exp:E --backend trinity", 2,
        "Error: trinity: explorer.rollout_model is given the int 5, where Trinity-RFT reads a "
        "table of settings (InferenceModelConfig); give a table (in the base YAML or "
        "[trinity]), or remove it",
        tunedsl__toml="[trinity]\nexplorer.rollout_model = 5\n"),
    # named algorithm.group_size, the tunedsl setting, not the key in the file (sweep 23 A-W3)
    row("check-base-yaml-bad-value-named-by-its-key", "check exp:E", 2,
        "Error: {dir}/base.yaml: algorithm.repeat_times must be >= 1 (got 0)",
        tunedsl__toml='trinity_config = "base.yaml"\n',
        base__yaml="algorithm:\n  repeat_times: 0\nexplorer:\n  max_timeout: 1.5\n"),
    # named auxiliary_models.g.max_model_len, with no file (sweep 23 A-W8)
    row("check-trinity-auxiliary-model-bad-value", "check exp:E", 2,
        "Error: {dir}/tunedsl.toml: trinity.explorer.auxiliary_models.g.max_model_len must be "
        ">= 1 (got -3)",
        tunedsl__toml="[trinity.explorer.auxiliary_models.g]\nmodel_path = \"m\"\n"
                      "max_model_len = -3\n"),
    # internal errors: RecursionError in the readers and the walks after them (sweep 24)
    row("settings-toml-nested-past-the-reader", "check exp:E", 2,
        "Error: {dir}/tunedsl.toml: nested deeper than the reader goes (about a thousand "
        "levels); flatten it",
        tunedsl__toml="[params]\nx = " + "[" * 2000 + "]" * 2000 + "\n"),
    row("check-base-yaml-alias-of-itself", "check exp:E", 2,
        "Error: {dir}/base.yaml: holds itself (a list or table inside itself), which no YAML "
        "can write; give a copy instead of the container itself",
        tunedsl__toml='trinity_config = "base.yaml"\n',
        base__yaml="explorer: &e\n  runner_per_model: 2\n  self: *e\n"),
    # config hung expanding the aliases (sweep 24)
    row("check-base-yaml-billion-laughs", "check exp:E", 2,
        "Error: {dir}/base.yaml: holds more than 1,000,000 lists and tables once its YAML "
        "aliases are expanded; write it out without them",
        tunedsl__toml='trinity_config = "base.yaml"\n',
        base__yaml="a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefg", "bcdefgh"))),
    # the default was cut at the inner "}" (sweep 23 A-S3)
    row("settings-env-default-holds-a-reference", "check exp:E", 2,
        "Error: {dir}/tunedsl.toml: checkpoint_root_dir: '${env:A,${env:B}}': the default of "
        "${env:A,...} holds another ${...}, which tunedsl does not read; give the default as "
        "plain text",
        tunedsl__toml='checkpoint_root_dir = "${env:A,${env:B}}"\n'),
    # taken as text: runs went under a folder named ${oc.env:HOME} (sweep 23 A-S4)
    row("settings-omegaconf-reference", "check exp:E --set checkpoint_root_dir=${oc.env:HOME}",
        2, "Error: --set: checkpoint_root_dir: '${oc.env:HOME}' holds a ${...} reference "
        "tunedsl does not read (${HOME}, OmegaConf's ${oc.env:...}), which a setting would "
        "keep as text; write ${env:NAME} for an environment variable (tunedsl writes it to "
        "the YAML as ${oc.env:NAME})"),
    # kept as text: the run went into a folder named ${HOME} (sweep 24)
    row("settings-shell-reference", "check exp:E --set checkpoint_root_dir=${HOME}/runs",
        2, "Error: --set: checkpoint_root_dir: '${HOME}/runs' holds a ${...} reference "
        "tunedsl does not read (${HOME}, OmegaConf's ${oc.env:...}), which a setting would "
        "keep as text; write ${env:NAME} for an environment variable (tunedsl writes it to "
        "the YAML as ${oc.env:NAME})"),
    # an internal error: "Event loop stopped before Future completed" (sweep 24)
    row("check-workflow-stops-the-event-loop", "check exp:E", 2,
        "Error: rollout: on the first training task, with a scripted model that always "
        "replies '0': the workflow or judge (or a library it calls) stopped the event loop "
        "(loop.stop()), which ends every rollout; raise an exception to fail one rollout, or "
        "return to end it",
        exp__py=experiment_file(head=HEAD.replace(
            "    reply = await model.chat(",
            "    import asyncio\n    asyncio.get_running_loop().stop()\n"
            "    reply = await model.chat("))),
    # an internal error: division by zero in the step bounds (sweep 24)
    row("check-trinity-runner-per-model-zero", "check exp:E",
        2, "Error: trinity.explorer.runner_per_model must be a whole number >= 1 (got 0)",
        tunedsl__toml="[trinity.explorer]\nrunner_per_model = 0\n"),
    # Trinity's own "list index out of range" (sweep 23 A-W9)
    row("check-trinity-empty-lora-configs", "check exp:E", 2,
        "Error: model.lora_configs is an empty list (in the base YAML or [trinity]), of which "
        "Trinity-RFT reads the first entry; give one LoRA config (or set model.lora), or "
        "remove the key",
        tunedsl__toml="[trinity.model]\nlora_configs = []\n"),
    row("check-trinity-eval-taskset-missing", "check exp:E", 2,
        "Error: buffer.explorer_input.eval_tasksets.hard: nowhere is not a local path, and the "
        "Hugging Face hub is switched off here (HF_HUB_OFFLINE); give a local folder or file",
        tunedsl__toml='[trinity.buffer.explorer_input.eval_tasksets.hard]\npath = "nowhere"\n'),
    row("check-trinity-eval-taskset-lacks-a-key", "check exp:E", 2,
        "Error: buffer.explorer_input.eval_tasksets.hard: key 'question' read by @workflow "
        "solve (exp.py:4) is missing from {dir}/hard (split 'train'); its rows have: 'q'",
        tunedsl__toml='[trinity.buffer.explorer_input.eval_tasksets.hard]\npath = "hard"\n',
        **{"hard/train.jsonl": '{"q": "1+1="}\n'}),
    row("check-sft-tools-not-a-list", "check exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:1: 'tools' is text but not JSON "
        "(Expecting value); give a list of tool objects, or that list as JSON text",
        exp__py=experiment_file(replaced(
            'Algorithm("grpo", group_size=2, batch_size=2)', 'Algorithm("sft", batch_size=2)')),
        data='{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", '
             '"content": "hello"}], "tools": "search"}\n' * 2),
    row("check-sft-tool-calls-text", "check exp:E", 2,
        "Error: train_dataset: {dir}/data/train.jsonl:1: message 1 (assistant) 'tool_calls' "
        'must be a list of calls like {"type": "function", "function": {"name": "...", '
        '"arguments": "{...}"}} (got \'search(tunedsl)\')',
        exp__py=experiment_file(replaced(
            'Algorithm("grpo", group_size=2, batch_size=2)', 'Algorithm("sft", batch_size=2)')),
        data='{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", '
             '"content": null, "tool_calls": "search(tunedsl)"}, {"role": "tool", '
             '"content": "found"}, {"role": "assistant", "content": "done"}]}\n' * 2),
    row("check-local-model-cannot-load", "check exp:E --backend local", 2,
        "Error: model.model_path: {dir}/weights is not a causal language model this "
        "transformers loads (model_type 'no-such-architecture' in its config.json); give a "
        "folder of one, e.g. a Qwen or Llama checkpoint",
        exp__py=experiment_file(replaced('Model("m"', 'Model("weights"')),
        **{"weights/config.json": '{"model_type": "no-such-architecture"}'}),
    # Options that cannot go together, and inputs no command can use.
    row("run-good-checkpoint-without-resume", "run exp:E --from-good-checkpoint", 2,
        "Error: --from-good-checkpoint chooses the checkpoint a resume starts from; give the "
        "run with --resume RUN_DIR too"),
    row("eval-checkpoint-and-base-url",
        "eval exp:E --checkpoint m --base-url {bad}/two/v1 --model x", 2,
        "Error: --checkpoint names a local model folder and --base-url an endpoint's model: "
        "give one of them"),
    row("tune-prompt-checkpoint-and-base-url",
        "tune-prompt exp:E --param hint --checkpoint m --base-url {bad}/two/v1 "
        "--reflection-model r@{bad}/v1", 2,
        "Error: --checkpoint names a local model folder and --base-url an endpoint's model: "
        "give one of them"),
    row("view-a-blank-results-file", "view r.jsonl", 2,
        "Error: r.jsonl: holds nothing to show (no results); give a results file tunedsl eval "
        "wrote, or a run directory", r__jsonl="\n\n"),
    row("set-value-an-unclosed-list", "check exp:E --set params.hint=[1,2", 2,
        "Error: --set 'params.hint=[1,2': the value starts as a list but is not TOML (Unclosed "
        "array); close its brackets and quotes, or quote the whole of a string: --set "
        "'params.hint=\"...\"'"),
    # "close its brackets", which were closed (sweep 37 A-W7)
    row("set-value-a-table-naming-a-key-twice", "check exp:E --set params.hint={a=1,a=2}", 2,
        "Error: --set 'params.hint={a=1,a=2}': the value starts as a table but is not TOML "
        "(Duplicate inline table key 'a'); close its brackets and quotes, or quote the whole of "
        "a string: --set 'params.hint=\"...\"'"),
    # the key shown whole, where a well-formed value hides it (sweep 37 A-W6)
    row("set-value-a-key-in-an-unclosed-list", "check exp:E --set "
        "auxiliary_models.judge.api_key_env=[sk-proj-Ab3dEf6ghijklmnopqrstuvwxyz0123456789", 2,
        "Error: --set 'auxiliary_models.judge.api_key_env=[<a key, not shown>': the value starts "
        "as a list but is not TOML (Invalid value); close its brackets and quotes, or quote the "
        "whole of a string: --set 'auxiliary_models.judge.api_key_env=\"...\"'",
        absent="Ab3dEf6"),
    row("config-cluster-beyond-any-built", "config exp:E --cluster 99999999x8", 2,
        "Error: --cluster '99999999x8': 799999992 GPUs on nodes of 8 is more than tunedsl fits "
        "a run to (at most 64 GPUs a node and 16384 in all); give the cluster's real shape, "
        "such as 1x8 or 2x8"),
    row("group-size-beyond-a-batch", "check exp:E --set algorithm.group_size=100000", 2,
        "Error: --set: invalid value @ algorithm.group_size: must be <= 4096 (got 100000)"),
    row("eval-output-a-device", "eval exp:E --base-url {bad}/two/v1 --model x -o /dev/null", 2,
        "Error: -o /dev/null: not a regular file (a device or a pipe), which writing the output "
        "would replace; give a file"),
    row("run-resume-of-a-finished-run",
        RESUME.replace("total_steps=3", "total_steps=2"), 0,
        "note: run already finished its 2 steps, so nothing was trained; to train further, "
        "resume with a larger train_dataset.total_steps (--set train_dataset.total_steps=N)",
        run=True),
    row("settings-toml-with-a-byte-order-mark", "check exp:E", 2,
        "Error: {dir}/tunedsl.toml: starts with a byte-order mark (U+FEFF), which TOML does not "
        "allow; save it as UTF-8 without one",
        tunedsl__toml=b"\xef\xbb\xbf[model]\nmax_tokens = 8\n"),
    row("import-a-folder", "check pkg/:E", 2,
        'Error: Could not import module "pkg/": that is a folder; name the .py file in it '
        'that defines the experiment', **{"pkg/exp.py": experiment_file()}),
    row("check-epsilon-below-what-float32-keeps", "check exp:E", 2,
        "Error: E (exp.py:15): algorithm.epsilon = 1e-40: epsilon of grpo's advantage (grpo) "
        "must be a number above 0 (1e-30 or more, which float32 keeps)",
        exp__py=experiment_file(replaced(
            "batch_size=2)", "batch_size=2, epsilon=1e-40)"))),
    row("eval-workflow-sends-strings-as-messages",
        "eval exp:E --base-url {bad}/two/v1 --model x -o o.jsonl", 1,
        "Error: every rollout failed; the first error: @workflow solve (exp.py:4) raised "
        "ValueError: model.chat(messages): message 0 must be an object with a role, such as "
        "{\"role\": \"user\", \"content\": \"...\"} (got str '1+1=')",
        exp__py=experiment_file(head=replaced(
            '[{"role": "user", "content": task["question"]}]', '[task["question"]]', HEAD))),
]

#: Rows also run as real subprocesses, proving the exit codes the shell sees.
SUBPROCESS_ROWS = ("usage-no-command", "import-missing-module", "records-every-problem",
                   "import-user-error",
                   "eval-endpoint-answers-html", "usage-unknown-command",
                   # a real stdout, which (unlike a test's capture) cannot take a surrogate
                   "preview-data-holds-a-lone-surrogate", "check-data-holds-a-lone-surrogate",
                   "eval-reply-holds-a-lone-surrogate", "import-a-module-closing-standard-output",
                   "config-a-module-forcing-utf-8-output", "check-a-module-forcing-utf-8-output",
                   "check-a-module-making-its-output-ascii")
TUNEDSL_FRAME = re.compile(r'File "[^"]*[/\\]tunedsl[/\\][^"]*\.py"')


def _completion(content: Any = "2", **message: Any) -> str:
    """A chat completion answering ``content`` (and other ``message`` fields), as JSON."""
    return json.dumps({"id": "x", "object": "chat.completion", "created": 1, "model": "m",
                       "choices": [{"index": 0, "finish_reason": "stop", "message": {
                           "role": "assistant", "content": content, **message}}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 1,
                                 "total_tokens": 4}})


#: What a misconfigured URL or proxy answers instead of a chat completion, and what a
#: server answers that is JSON but not of the protocol's types, by path prefix.
BAD_ANSWERS = {
    "html": ("text/html", "<html><body>Please log in</body></html>"),
    "json": ("application/json", "{not json"),
    "empty": ("application/json", json.dumps({"id": "x", "object": "chat.completion",
                                              "created": 1, "model": "m", "choices": []})),
    "nomessage": ("application/json", json.dumps({
        "id": "x", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop"}]})),
    "two": ("application/json", _completion()),
    "down": ("application/json", json.dumps({"error": {"message": "upstream failed",
                                                       "type": "server_error"}})),
    "surrogate": ("application/json", _completion("\ud800")),
    # (bytes: sent as they are) a reply in Latin-1, as a misconfigured proxy sends it
    "latin1": ("application/json", _completion("caf\u00e9").replace(
        "\\u00e9", "\u00e9").encode("latin-1")),
    # a number past Python's 4,300-digit guard (its advice, to raise the limit, is not ours)
    "hugeint": ("application/json", _completion().replace('"created": 1', '"created": '
                                                            + "9" * 5000)),
    "error200": ("application/json", json.dumps({"error": {"message": "model overloaded",
                                                           "type": "server_error"}})),
    "usageword": ("application/json", _completion().replace(
        '"prompt_tokens": 3, "completion_tokens": 1', '"prompt_tokens": "three", '
        '"completion_tokens": "one"')),
    "parts": ("application/json", _completion([{"type": "text", "text": "2"}])),
    "null": ("application/json", _completion(None)),
    "number": ("application/json", _completion(42)),
    # a header past aiohttp's 8,190 bytes (a proxy's): sent by the server below
    "bigheader": ("application/json", _completion()),
    "toolnoname": ("application/json", _completion(None, tool_calls=[
        {"id": "c1", "type": "function", "function": {"arguments": "{}"}}])),
}
#: Answers that depend on the request: the task ``2+2=`` fails with HTTP 400 (an endpoint
#: that fails some rollouts); a reflection model that answers its probe, then nothing.
CONDITIONAL_ANSWERS = {
    "flaky": lambda body: (400, json.dumps({"error": {
        "message": "the model is overloaded", "type": "server_error"}})) if "2+2=" in body
    else (200, _completion()),
    # a route the server lacks (a URL without /v1), and vLLM's answer for a model it lacks
    "noroute": lambda body: (404, json.dumps({"detail": "Not Found"})),
    "nomodel": lambda body: (404, json.dumps({
        "object": "error", "message": "The model `x` does not exist.", "type": "NotFoundError",
        "param": None, "code": 404})),
    "okthennull": lambda body: (200, _completion("ok" if "Reply with: ok" in body else None)),
    "okthenrefusal": lambda body: (200, _completion(
        "ok" if "Reply with: ok" in body else None, refusal="I can't help with that.")),
    "okthensurrogate": lambda body: (200, _completion(
        "ok" if "Reply with: ok" in body else "```\nAdd \ud800 the numbers.\n```")),
}


@pytest.fixture(scope="module")
def bad_endpoint():
    """A real HTTP server on loopback answering every POST with one of `BAD_ANSWERS`."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the http.server API
            request = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
            prefix = self.path.split("/")[1]
            if prefix == "close":  # a server that closes the connection, answering nothing
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                self.wfile = io.BytesIO()  # (nothing left to flush to the closed socket)
                return
            if prefix in CONDITIONAL_ANSWERS:
                status, body = CONDITIONAL_ANSWERS[prefix](request)
                kind = "application/json"
            else:
                (kind, body), status = BAD_ANSWERS[prefix], 200
            self.send_response(status)
            self.send_header("content-type", kind)
            if prefix == "bigheader":
                self.send_header("x-trace", "a" * 60000)
            self.end_headers()
            self.wfile.write(body if isinstance(body, bytes) else body.encode())

        def do_GET(self):  # noqa: N802 - ``GET /models``: what BAD_ANSWERS' kind answers
            prefix = self.path.split("/")[1]
            kind, body = BAD_ANSWERS.get(prefix, ("text/plain", ""))
            self.send_response(200 if "html" in kind else 500 if prefix == "down" else 404)
            self.send_header("content-type", kind)
            self.end_headers()
            self.wfile.write(body if isinstance(body, bytes) else body.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _project(tmp_path: Path, entry: Row, trained: tuple[Path, Path] | None = None,
             tiny: Path | None = None, model: Path | None = None) -> Path:
    """The row's project folder; ``trained``: a trained run's project and run directory
    (`trained_run`), copied to ``run/`` with its recorded paths moved to this folder;
    ``tiny``: the model folder ``{tiny}`` stands for (by default the trained run's);
    ``model``: the model folder ``m`` links to."""
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train.jsonl").write_text(DATA)
    if model is not None:  # Model("m") is a model folder the local backend can load
        (folder / "m").symlink_to(model, target_is_directory=True)
    if trained is not None:
        project, run_dir = trained
        # A moved project keeps its layout: the run where it was, relative to the project.
        shutil.copytree(run_dir, folder / (run_dir.relative_to(project) if entry.moved
                                           else "run"))
        for name in ("experiment.yaml", "config.yaml") if not entry.moved else ():
            recorded = folder / "run" / name
            recorded.write_text(recorded.read_text().replace(str(project), str(folder)))
    _write(folder, entry.files, tiny or (trained[0].parent / "tiny" if trained else None))
    return folder


def _write(folder: Path, files: dict[str, FileText], tiny: Path | None) -> None:
    """Write, change or delete the project's ``files`` (``{tiny}`` in a text: ``tiny``)."""
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        elif callable(text):
            path.write_bytes(text(path.read_bytes()))
        elif isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text.replace("{tiny}", str(tiny)) if tiny is not None else text)


def _check(entry: Row, folder: Path, code: int, stdout: str, stderr: str, bad: str = "") -> None:
    expected = entry.first_line.replace("{dir}", str(folder)).replace("{bad}", bad)
    assert not TUNEDSL_FRAME.search(stderr), stderr  # never tunedsl's own frames
    if entry.code == 0:  # taken: the line is shown, and no error
        assert code == 0, stderr
        assert not any(line.startswith("Error: ") for line in stderr.splitlines()), stderr
        if expected.startswith("note  "):  # check's report, on stdout: its first note
            notes = [line for line in stdout.splitlines() if line.startswith("note  ")][:1]
            assert notes == [expected], stdout + stderr
        else:
            assert expected in (stdout + stderr).splitlines(), stdout + stderr
        return
    # The first line that is not progress or information (a run names its backend first).
    lines = [line for line in stderr.splitlines()
             if line.startswith(("Error: ", "Traceback "))][:1]
    assert (code, lines) == (entry.code, [expected]), stderr
    assert any(line.startswith("Error: ") for line in stderr.splitlines()), stderr


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, tiny_model):
    """`RUN_EXPERIMENT` run two steps: ``(its project folder, its run directory)``, made once
    for the rows that damage a copy of it."""
    root = tmp_path_factory.mktemp("trained")
    shutil.copytree(tiny_model, root / "tiny")
    project = _project(root, row("trained", "", 0, "", run=True), tiny=root / "tiny")
    sys.modules.pop("exp", None)
    done = cli("run", "exp:E", "--backend", "local", "--no-progress", cwd=project)
    assert done.returncode == 0, done.stderr
    return project, next(project.rglob("experiment.yaml")).parent


#: Rows only a process of their own can run: a module closing Python's own standard output
#: (a test's capture, closed, cannot be read back).
SUBPROCESS_ONLY = ("import-a-module-closing-standard-output",
                   "config-a-module-forcing-utf-8-output", "check-a-module-forcing-utf-8-output",
                   "check-a-module-making-its-output-ascii")
IN_PROCESS = [r for r in ROWS if r.id not in SUBPROCESS_ONLY]


@pytest.mark.parametrize("entry", IN_PROCESS, ids=[r.id for r in IN_PROCESS])
def test_catalogue_row(entry, tmp_path, fresh_modules, bad_endpoint, tiny_model, request):
    folder = _project(tmp_path, entry,
                      request.getfixturevalue("trained_run") if entry.run else None,
                      model=tiny_model)
    quiet = ("eval", "tune-prompt")
    if entry.before:
        before = [word.replace("{bad}", bad_endpoint) for word in entry.before]
        done = cli(*before, *(["--no-progress"] if before[0] in quiet else []), cwd=folder)
        assert done.returncode == 0, done.stderr
        _write(folder, entry.then, None)
    trained = next(folder.rglob("experiment.yaml"), None)
    run = str(trained.parent.relative_to(folder)) if trained else ""  # {run}: its run dir
    entry = attrs.evolve(entry, first_line=entry.first_line.replace("{run}", run))
    argv = [word.replace("{bad}", bad_endpoint).replace("{run}", run) for word in entry.argv]
    done = cli(*argv, *(["--no-progress"] if argv[:1] in (["eval"], ["tune-prompt"]) else []),
               cwd=folder)
    _check(entry, folder, done.returncode, done.stdout, done.stderr, bad_endpoint)
    if entry.absent is not None:
        written = [path for path in folder.rglob("*.jsonl")]
        assert written and not any(entry.absent in path.read_text() for path in written)


IN_A_SUBPROCESS = [r for r in ROWS if r.id in SUBPROCESS_ROWS]


# (ids from the rows themselves: SUBPROCESS_ROWS's order named a row by another's id)
@pytest.mark.parametrize("entry", IN_A_SUBPROCESS, ids=[r.id for r in IN_A_SUBPROCESS])
def test_catalogue_row_in_a_subprocess(entry, tmp_path, bad_endpoint, tiny_model):
    folder = _project(tmp_path, entry, model=tiny_model)
    argv = [word.replace("{bad}", bad_endpoint) for word in entry.argv]
    done = subprocess.run([sys.executable, "-m", "tunedsl", *argv], cwd=folder,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    _check(entry, folder, done.returncode, done.stdout, done.stderr, bad_endpoint)


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

    # an ArgumentError (a TunedslError, a TypeError too): it was a plain RuntimeError
    with pytest.raises(ArgumentError, match=r"^run_rollout\(\) cannot run inside a running "
                                            r"event loop \(an async test or notebook cell\); "
                                            r"there, write: await arun_rollout\(\.\.\.\)$"):
        asyncio.run(in_an_async_test())


async def _kit_solve(task, model):
    from tunedsl import WorkflowOutput

    reply = await model.chat([{"role": "user", "content": task["question"]}])
    return WorkflowOutput(response=reply.content, reward=1.0)


async def _kit_exact(task, response):
    from tunedsl import JudgeOutput

    return JudgeOutput(reward=1.0)


@functools.cache
def _kit_functions():
    """The two decorated (a function is decorated once), leaving the plain ones plain."""
    from tunedsl import judge, workflow

    def copy(fn):
        return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__)

    return workflow(copy(_kit_solve)), judge(copy(_kit_exact))


def _kit_call(case):
    """Each case: a test-kit call a new user gets wrong (found trying them), by name."""
    from tunedsl.testing import ScriptedModel, run_rollout

    solve, exact = _kit_functions()
    task = {"question": "1+1="}
    calls = {
        "replies-a-string": lambda: ScriptedModel("2"),
        "reply-not-text": lambda: ScriptedModel([2]),
        "task-a-list": lambda: run_rollout(solve, ["1+1="], ScriptedModel(["2"])),
        "model-a-name": lambda: run_rollout(solve, task, "gpt-4"),
        "model-the-class": lambda: run_rollout(solve, task, ScriptedModel),
        "pair-swapped": lambda: run_rollout((exact, solve), task, ScriptedModel(["2"])),
        "pair-of-three": lambda: run_rollout((solve, exact, exact), task, ScriptedModel(["2"])),
        "judge-alone": lambda: run_rollout(exact, task, ScriptedModel(["2"])),
        "undecorated": lambda: run_rollout(_kit_solve, task, ScriptedModel(["2"])),
        "timeout-negative": lambda: run_rollout(solve, task, ScriptedModel(["2"]), timeout=-1),
        "timeout-text": lambda: run_rollout(solve, task, ScriptedModel(["2"]), timeout="5"),
        "params-a-list": lambda: run_rollout(solve, task, ScriptedModel(["2"]), params=["a"]),
        "auxiliary-a-list": lambda: run_rollout(solve, task, ScriptedModel(["2"]), ["m"]),
        "auxiliary-a-name": lambda: run_rollout(solve, task, ScriptedModel(["2"]),
                                                {"judge": "qwen-max"}),
    }
    return calls[case]


@pytest.mark.parametrize("case, kind, message", [
    ("replies-a-string", ArgumentError, "ScriptedModel('2'): replies is a list of replies (or a "
     "function of the messages); write ScriptedModel(['2'])"),
    ("reply-not-text", ArgumentError, "ScriptedModel's reply 1 is 2 (an int); a reply is text or a "
     "ChatResponse (for tool calls), e.g. '2'"),
    ("task-a-list", ArgumentError, "run_rollout's task must be a mapping (one dataset row, as a "
     "dict); got ['1+1='] (a list)"),
    ("model-a-name", ArgumentError, "run_rollout's model is 'gpt-4' (a str), which has no chat "
     "method; give a ScriptedModel([...]), say"),
    ("model-the-class", ArgumentError, "run_rollout's model is the class ScriptedModel, not a "
     "model; give an instance, e.g. ScriptedModel([...])"),
    ("pair-swapped", ArgumentError, "run_rollout's pair starts with @judge _kit_exact ({where}), "
     "which is not a @workflow (the pair is (workflow, judge): swap them)"),
    ("pair-of-three", ArgumentError, "run_rollout's (workflow, judge) pair has 3 items; give two: "
     "(a @workflow function, a @judge function or None)"),
    ("judge-alone", ArgumentError, "run_rollout runs a workflow, and @judge _kit_exact ({where}) is "
     "a judge; give (your_workflow, _kit_exact) to judge the workflow's response"),
    ("undecorated", ArgumentError, "run_rollout takes an @experiment, an import string, a graph, a "
     "@workflow function or a (workflow, judge) pair; _kit_solve is a plain function: "
     "decorate it with @workflow"),
    ("timeout-negative", ConfigError, "run_rollout's timeout is seconds, a number above 0; got "
     "-1"),
    ("timeout-text", ArgumentError, "run_rollout's timeout is seconds, a number above 0; got '5' "
     "(a str)"),
    ("params-a-list", ArgumentError, "run_rollout's params must be a dict of names to values; got "
     "['a'] (a list)"),
    ("auxiliary-a-list", ArgumentError, "run_rollout's auxiliary_models must be a dict of names to "
     "models, e.g. {{\"judge\": ScriptedModel([...])}}; got ['m'] (a list)"),
    ("auxiliary-a-name", ArgumentError, "run_rollout's auxiliary_models['judge'] is 'qwen-max' (a "
     "str), which has no chat method; give a ScriptedModel([...]), say"),
])
def test_kit_arguments_a_new_user_gets_wrong_are_named_with_the_fix(case, kind, message):
    """Each was accepted and failed later inside the workflow (an AttributeError there looks
    like the workflow's fault), or ran silently wrong: ScriptedModel("2") replied "2" one
    character at a time, a judge given alone ran as the workflow, timeout=-1 was ignored."""
    from tunedsl.dsl.decorators import where

    with pytest.raises(kind) as caught:  # each a TunedslError, and the builtin it is
        _kit_call(case)()
    assert isinstance(caught.value, ValueError if kind is ConfigError else TypeError)
    assert str(caught.value) == message.format(where=where(_kit_functions()[1]))


def test_kit_a_script_function_that_replies_with_no_text_fails_the_rollout_naming_it():
    from tunedsl.testing import RolloutError, ScriptedModel, run_rollout

    solve, _ = _kit_functions()
    with pytest.raises(RolloutError) as caught:
        run_rollout(solve, {"question": "1+1="}, ScriptedModel(lambda messages: 2))
    assert str(caught.value).endswith(
        "raised TypeError: ScriptedModel 'scripted': its function's reply is 2 (an int); a "
        "reply is text or a ChatResponse (for tool calls), e.g. '2'")


def test_an_unreachable_hub_is_named_at_once(tmp_path, monkeypatch, capsys, fresh_modules,
                                             tiny_model):
    """With the hub switched on but not answering, a hub id fails in one line, at once
    (the hub client retried for half a minute first)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    entry = row("x", "check exp:E", 2, "", exp__py=experiment_file(
        replaced('Dataset("data"', 'Dataset("someorg/somedata"')))
    monkeypatch.chdir(_project(tmp_path, entry, model=tiny_model))
    assert main(list(entry.argv)) == 2
    assert capsys.readouterr().err == (
        "Error: train_dataset: someorg/somedata is not a local path, so it would be read from "
        "the Hugging Face hub (http://127.0.0.1:9), which does not answer from here "
        "(ConnectError); download the dataset and give its folder, or check the network\n")


# ---------------------------------------------------------------------------- tune()
# AgentScope's functional entry raises instead of exiting: the call and the exact message.

async def _answers(task, model):
    from tunedsl import WorkflowOutput

    return WorkflowOutput(response="x", reward=1.0)


def _sync_workflow(task, model):
    return None


@pytest.mark.parametrize("arguments, message", [
    (dict(workflow_func=_sync_workflow), "@workflow _sync_workflow ({file}:{sync_line}) must be "
     "async: write async def _sync_workflow(task, model)"),
    (dict(workflow_func=_answers, algorithm="grpo"),
     "tune() argument algorithm must be an Algorithm(...) (got 'grpo' of type str)"),
    (dict(workflow_func=_answers, experiment_name="../x"),
     "tune() argument experiment_name '../x' names a folder of the "
     "run's path (checkpoint_root_dir/project/name), so it may hold only ASCII letters, digits, "
     "'_', '.' and '-' (not '..'): write e.g. 'x', and choose where runs go with "
     "checkpoint_root_dir"),
    # Found as a new user: each was a confusing message, or (backend, in a dry run) none.
    (dict(workflow_func=None), "tune(workflow_func=None): give your async workflow function, "
     "async def f(task, model) returning WorkflowOutput"),
    (dict(workflow_func=_answers, learning_rte=1e-6), "tune() got an unexpected argument "
     "'learning_rte': learning_rate is a field of Algorithm(...); give "
     "algorithm=Algorithm(learning_rate=...)"),
    (dict(workflow_func=_answers, backend="gpu"), "tune(backend='gpu'): choose one of auto, "
     "local, trinity"),
    (dict(workflow_func=_answers, overrides="algorithm.group_size=4"), "overrides "
     "'algorithm.group_size=4': a list of KEY=VALUE strings is expected, not one string; write "
     "overrides=['algorithm.group_size=4']"),
    (dict(workflow_func=_answers, auxiliary_models=[_answers] * 3),
     "tune() argument auxiliary_models must be a dict of name -> Model(...) "
     "(got 3 items of type list)"),
    # named by tune()'s own arguments, not the class it builds (sweep 29 A-W5)
    (dict(workflow_func=_answers, monitor_type="tb"), "tune() argument monitor_type 'tb' is "
     "not a known monitor; choose one of: mlflow, swanlab, tensorboard, wandb"),
    (dict(workflow_func=_answers, project_name="a/b"), "tune() argument project_name 'a/b' "
     "names a folder of the run's path (checkpoint_root_dir/project/name), so it may hold only "
     "ASCII letters, digits, '_', '.' and '-' (not '..'): write e.g. 'a-b', and choose where "
     "runs go with checkpoint_root_dir"),
])
def test_tune_names_the_call_and_the_fix(arguments, message):
    import inspect

    import tunedsl
    from tunedsl.dsl.decorators import display_path

    file = display_path(__file__)
    sync_line = inspect.getsourcelines(_sync_workflow)[1]
    with pytest.raises(tunedsl.errors.TunedslError) as caught:  # a TypeError too, where one
        tunedsl.tune(**arguments, dry_run=True)
    first = str(caught.value).splitlines()[0]
    assert first == message.format(file=file, sync_line=sync_line)


@pytest.mark.parametrize("raised, line", [
    ("KeyboardInterrupt", "the workflow or judge raised KeyboardInterrupt, which stops a whole "
                          "run; raise an Exception to fail one rollout"),
    ("GeneratorExit", "@judge exact (exp.py:10) raised GeneratorExit"),  # (no ": " of no text)
])
def test_a_judge_raising_a_base_exception(tmp_path, fresh_modules, raised, line):
    """check shows the user's frame only (none of tunedsl's or asyncio's), then one line."""
    folder = _project(tmp_path, row("x", "check", 2, "", exp__py=judged_by(f"raise {raised}")))
    done = cli("check", "exp:E", "--backend", "trinity", cwd=folder)
    assert done.returncode == 2
    assert done.stderr.splitlines()[1:] == [
        f'  File "{folder / "exp.py"}", line 12, in exact', f"    raise {raised}", raised,
        f"Error: rollout: on the first training task, with a scripted model that always "
        f"replies '0': {line}"]



def test_tune_given_its_arguments_by_position_says_how(tmp_path):
    """tune(MyExp) was a bare TypeError (sweep 18 W1); evaluate(MyExp()) called a decorated
    class undecorated (W2)."""
    import tunedsl
    from tests.fixtures.eval_agents import Lenient
    from tunedsl.errors import ArgumentError, ExperimentImportError

    with pytest.raises(ArgumentError) as raised:
        tunedsl.tune(Lenient)
    assert str(raised.value) == ("tune() takes its arguments by name (got 1 by position); to "
                                 "train the @experiment class Lenient, call "
                                 "tunedsl.run(Lenient)")
    with pytest.raises(ArgumentError) as raised:
        tunedsl.tune(print, print)
    assert str(raised.value) == ("tune() takes its arguments by name (got 2 by position); give "
                                 "them by name: tune(workflow_func=..., judge_func=..., ...)")
    with pytest.raises(ExperimentImportError) as raised:
        tunedsl.load_experiment(Lenient())
    assert str(raised.value) == ("Lenient(...) is an instance of the @experiment class "
                                 "Lenient; pass the class itself: Lenient, without ()")


@pytest.mark.parametrize("reply, example", [
    ({"content": "7"}, "'7', or ChatResponse(content='7', tool_calls=[...])"),
    ({"role": "assistant"}, "'4'"),
])
def test_kit_a_reply_given_as_a_message_dict_is_answered_with_its_text(reply, example):
    """``ScriptedModel([{"content": "7"}])`` suggested the dict's repr as the reply, e.g.
    "{'content': '7'}" (sweep 30 W-05)."""
    from tunedsl.errors import ArgumentError
    from tunedsl.testing import ScriptedModel

    with pytest.raises(ArgumentError) as caught:
        ScriptedModel([reply])
    assert str(caught.value).endswith(
        f"a reply is text or a ChatResponse (for tool calls), e.g. {example}")
