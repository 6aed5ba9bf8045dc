"""The code digest (rollout/code.py) a resume compares: which edits of the user's code it
sees (any that can change what a workflow or judge computes), and what it leaves out so that
unedited code can be resumed (values made anew by each import, comments, settings)."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from tunedsl.rollout.code import code_digest

from .cli_support import cli


@pytest.fixture
def load(tmp_path, monkeypatch):
    """``load(source, helpers="", scoring="")``: ``source`` imported afresh as the module
    ``judged`` of a project folder of its own (as a new process imports it), beside
    ``helpers.py`` and, given ``scoring``, the package ``pkg`` holding ``scoring.py``; the
    modules are forgotten after the test."""
    folders = iter(tmp_path / f"project{number}" for number in range(1000))
    names = ("judged", "helpers", "pkg", "pkg.scoring", "pkg.weights")

    def load(source: str, helpers: str = "", scoring: str = "",
             files: dict[str, str] | None = None) -> object:
        folder = next(folders)
        (folder / "pkg").mkdir(parents=True)
        (folder / "helpers.py").write_text(textwrap.dedent(helpers))
        (folder / "pkg" / "__init__.py").write_text("")
        (folder / "pkg" / "scoring.py").write_text(textwrap.dedent(scoring))
        (folder / "judged.py").write_text(textwrap.dedent(source))
        for name, text in (files or {}).items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
        for name in names:
            sys.modules.pop(name, None)
        monkeypatch.syspath_prepend(str(folder))
        importlib.invalidate_caches()
        return importlib.import_module("judged")

    yield load
    for name in names:
        sys.modules.pop(name, None)


def _digest(load, source: str, helpers: str = "", scoring: str = "",
            role: str = "judge", files: dict[str, str] | None = None) -> str:
    return code_digest(getattr(load(source, helpers, scoring, files), role))


#: Each way a judge reaches code or a value (sweeps 50 and 51 found each missed by a walk of
#: values), as ``(source, helpers, scoring)`` and an edit, old -> new, in one of them.
REACHED = {
    "compiled pattern": ("import re\nNUM = re.compile(r'(\\d+)')\n"
                         "async def judge(task, response):\n"
                         "    return float(bool(NUM.search(response)))\n", "", "",
                         ("(\\d+)", "(\\d)")),
    "partial": ("import functools\ndef close(a, b, tol):\n    return abs(a - b) <= tol\n"
                "CHECK = functools.partial(close, tol=0)\n"
                "async def judge(task, response):\n    return float(CHECK(1, 1))\n", "", "",
                ("tol=0)", "tol=1)")),
    "default argument": ("TOL = 0\ndef close(a, b, tol=TOL):\n    return abs(a - b) <= tol\n"
                         "async def judge(task, response):\n    return float(close(1, 2))\n",
                         "", "", ("TOL = 0", "TOL = 1")),
    "class attribute": ("LIMIT = 1\nclass G:\n    tol = LIMIT\n"
                        "async def judge(task, response):\n    return G.tol\n", "", "",
                        ("LIMIT = 1", "LIMIT = 2")),
    "made from a dict": ("SETTINGS = {'tol': 0}\nclass Grader:\n"
                         "    def __init__(self, tol):\n        self.tol = tol\n"
                         "G = Grader(**SETTINGS)\n"
                         "async def judge(task, response):\n    return G.tol\n", "", "",
                         ("'tol': 0", "'tol': 1")),
    "closure": ("def make(cfg):\n    def score(r):\n        return cfg['tol']\n"
                "    return score\nSCORE = make({'tol': 0})\n"
                "async def judge(task, response):\n    return SCORE(response)\n", "", "",
                ("'tol': 0", "'tol': 1")),
    "later statement": ("CFG = {}\nCFG['reward'] = 0.0\n"
                        "async def judge(task, response):\n    return CFG['reward']\n", "",
                        "", ("= 0.0", "= 1.0")),
    "decimal": ("from decimal import Decimal\nRIGHT = Decimal('1.0')\n"
                "async def judge(task, response):\n    return float(RIGHT)\n", "", "",
                ("'1.0'", "'0.5'")),
    "namespace": ("import types\nCFG = types.SimpleNamespace(right=1.0)\n"
                  "async def judge(task, response):\n    return CFG.right\n", "", "",
                  ("right=1.0", "right=0.5")),
    "base class in a helper": ("from helpers import Sub\n"
                               "async def judge(task, response):\n"
                               "    return Sub().score(response)\n",
                               "THRESH = 1.0\nclass Base:\n    def score(self, r):\n"
                               "        return THRESH\nclass Sub(Base):\n    pass\n", "",
                               ("THRESH = 1.0", "THRESH = 0.5")),
    "module attribute": ("import pkg.scoring\nasync def judge(task, response):\n"
                         "    return pkg.scoring.score(response)\n", "",
                         "def score(r):\n    return 1.0\n", ("return 1.0", "return 0.5")),
    "imported inside the judge": ("async def judge(task, response):\n"
                                  "    from pkg.scoring import score\n"
                                  "    return score(response)\n", "",
                                  "def score(r):\n    return 1.0\n",
                                  ("return 1.0", "return 0.5")),
    "decorator in a helper": ("from helpers import scaled\n@scaled\n"
                              "async def judge(task, response):\n    return 1.0\n",
                              "import functools\ndef scaled(fn):\n"
                              "    @functools.wraps(fn)\n    async def wrapper(*a):\n"
                              "        return 0.5 * await fn(*a)\n    return wrapper\n", "",
                              ("0.5 *", "0.25 *")),
}


@pytest.mark.parametrize("case", sorted(REACHED))
def test_an_edit_of_what_the_judge_reaches_changes_its_digest(load, case):
    """Each of these edits was resumed without a word, the rewards after the resume coming
    from the edited judge (sweeps 50 and 51): code the judge reaches, or a value made from
    a literal it reads, however it reaches it."""
    source, helpers, scoring, (old, new) = REACHED[case]
    assert sum(old in text for text in (source, helpers, scoring)) == 1, old
    first = _digest(load, source, helpers, scoring)
    again = _digest(load, source, helpers, scoring)
    edited = _digest(load, *(text.replace(old, new) for text in (source, helpers, scoring)))
    assert again == first != edited


def test_a_file_reached_by_a_relative_import_counts(load):
    """``pkg/scoring.py`` importing ``from .weights import W``: an edit of ``weights.py``
    changes the judge's digest."""
    source = "from pkg.scoring import score\nasync def judge(task, response):\n" \
             "    return score(response)\n"
    scoring = "from .weights import W\ndef score(r):\n    return W\n"
    first, again, edited = (
        _digest(load, source, scoring=scoring, files={"pkg/weights.py": f"W = {w}\n"})
        for w in ("1.0", "1.0", "0.5"))
    assert again == first != edited


#: A judge whose module makes values anew at each import (sweep 51: each refused a resume
#: of code nobody had edited).
MADE_AT_IMPORT = """\
    import os
    import random
    import time
    import uuid

    STARTED = time.time()
    try:
        RUN_ID = os.environ["TUNEDSL_TEST_RUN"]
    except KeyError:
        RUN_ID = uuid.uuid4().hex
    if STARTED:
        LATER = time.time()
    TOTAL = 0
    TOTAL += time.time()


    def make():
        seed = random.random()

        def score(response):
            return seed
        return score


    H = make()


    async def judge(task, response):
        return (H(response), RUN_ID, LATER, TOTAL, time.time() - STARTED)
    """


def test_values_made_anew_by_each_import_keep_the_digest(load):
    """Code left as it was keeps its digest in a new process, whatever values its import
    makes (a time, a uuid, a random number, a closure holding one)."""
    first = load(MADE_AT_IMPORT)
    second = load(MADE_AT_IMPORT)
    assert first.RUN_ID != second.RUN_ID and first.H("") != second.H("")
    assert code_digest(first.judge) == code_digest(second.judge)


@pytest.mark.parametrize("old, new", [
    ("    return SCALE", "    # scaled\n    return SCALE"),  # a comment
    ("async def judge(task, response):\n",
     "async def judge(task, response):\n    \"\"\"Doc.\"\"\"\n"),  # a docstring
    ("SCALE = 1.0\n", "SCALE = 1.0  # the scale\n\n\n"),  # blank lines
    ("total_steps=1", "total_steps=5"),  # the experiment's settings: compared as settings
])
def test_comments_layout_docstrings_and_the_experiment_s_settings_do_not_count(load, old, new):
    source = ("def experiment(cls):  # (tunedsl's would check the class)\n    return cls\n"
              "SCALE = 1.0\n\n\n"
              "async def judge(task, response):\n    return SCALE\n\n\n"
              "@experiment\nclass E:\n    judge = judge\n    total_steps=1\n")
    assert old in source
    assert _digest(load, source) == _digest(load, source.replace(old, new))


SOLVE_AND_EXACT = """\
    from tunedsl import judge, workflow


    def norm(text):
        return text.strip()


    @workflow
    async def solve(task, model):
        return norm(task["question"])


    @judge
    async def exact(task, response):
        return float(norm(response) == task["answer"])
    """


def test_an_edit_of_the_judge_is_not_said_of_the_workflow_beside_it(load):
    """A workflow and a judge in one file: an edit of one changes its digest alone; of what
    both use, both."""
    def digests(source: str) -> tuple[str, str]:
        module = load(source)
        return code_digest(module.solve), code_digest(module.exact)

    solve, exact = digests(SOLVE_AND_EXACT)
    assert digests(SOLVE_AND_EXACT) == (solve, exact)
    edited_judge = digests(SOLVE_AND_EXACT.replace("float(norm(response)", "float(response"))
    assert edited_judge[0] == solve and edited_judge[1] != exact
    edited_norm = digests(SOLVE_AND_EXACT.replace("text.strip()", "text.lower()"))
    assert edited_norm[0] != solve and edited_norm[1] != exact


def test_an_environment_variable_the_code_names_counts_by_value_but_a_secret_s(load,
                                                                             monkeypatch):
    """A variable that may change what the judge computes counts; a key rotated between
    a run and its resume does not (it is no other code)."""
    source = ("import os\nSCALE = float(os.environ.get('TUNEDSL_TEST_SCALE', '1'))\n"
              "async def judge(task, response):\n"
              "    key = os.getenv('TUNEDSL_TEST_API_KEY')\n    return SCALE\n")
    monkeypatch.setenv("TUNEDSL_TEST_API_KEY", "sk-" + "a1" * 20)
    first = _digest(load, source)
    monkeypatch.setenv("TUNEDSL_TEST_API_KEY", "sk-" + "b2" * 20)
    assert _digest(load, source) == first
    monkeypatch.setenv("TUNEDSL_TEST_SCALE", "0.5")
    assert _digest(load, source) != first


@pytest.mark.parametrize("read", [
    "json.load(open(HERE / 'judge.json'))",
    "json.loads((HERE / 'judge.json').read_text())",
    "json.loads(Path(HERE, 'judge.json').read_bytes())",
])
def test_a_data_file_the_judge_reads_by_name_counts_by_its_bytes(load, read):
    """A judge's config read at import, edited between a run and its resume, changed every
    reward without a word (sweep 51 B-S3)."""
    source = ("import json\nfrom pathlib import Path\nHERE = Path(__file__).parent\n"
              f"CFG = {read}\n"
              "async def judge(task, response):\n    return CFG['right']\n")
    first = _digest(load, source, files={"judge.json": '{"right": 1.0}'})
    assert _digest(load, source, files={"judge.json": '{"right": 1.0}'}) == first
    assert _digest(load, source, files={"judge.json": '{"right": 0.25}'}) != first


def test_a_file_the_code_writes_does_not_count(load):
    """A log or cache the workflow writes changes as the run goes: counted, it would refuse
    every resume."""
    source = ("from pathlib import Path\nHERE = Path(__file__).parent\n"
              "async def judge(task, response):\n"
              "    with open(HERE / 'log.txt', 'a') as log:\n        log.write(response)\n"
              "    return 1.0\n")
    assert _digest(load, source, files={"log.txt": "one"}) == \
        _digest(load, source, files={"log.txt": "one and two"})


@pytest.mark.parametrize("name, value, other", [
    ("PASS_THRESHOLD", "1", "5"), ("JUDGE_MAX_TOKENS", "5", "0"),
    ("ANSWER_KEY", "answer", "question")])
def test_a_setting_named_like_a_secret_counts(load, monkeypatch, name, value, other):
    """Named like a secret's, but a short setting: it counts (sweep 52 A-S4)."""
    source = (f"from os import environ as env\nasync def judge(task, response):\n"
              f"    return env.get('{name}')\n")  # (under another name: sweep 52 A-S7)
    monkeypatch.setenv(name, value)
    first = _digest(load, source)
    monkeypatch.setenv(name, other)
    assert _digest(load, source) != first


@pytest.mark.parametrize("read", [
    "json.load(open(HERE / 'data2' / 'rubric.json'))",
    "json.load(open(os.path.join(HERE, 'data2', 'rubric.json')))",
    "json.loads(RUBRIC.read_text())",
    "json.load(open(HERE / RUBRIC_PATH))",
    "json.load((HERE / 'data2' / 'rubric.json').open())",
    "genfromtxt(RUBRIC_PATH)",
])
def test_a_data_file_named_in_pieces_or_by_a_module_name_counts(load, monkeypatch, read):
    """Paths in pieces, a module-level name for the path, a reader of any name, an
    ``open()`` method (sweep 52 A-S1..A-S3, B-S1)."""
    source = ("import json\nimport os\nfrom pathlib import Path\n"
              "HERE = Path(__file__).parent\nRUBRIC = HERE / 'data2' / 'rubric.json'\n"
              "RUBRIC_PATH = os.path.join('data2', 'rubric.json')\n"
              "def genfromtxt(path):\n    return json.load(open(HERE / path))\n"
              f"CFG = {read}\nasync def judge(task, response):\n    return CFG['right']\n")
    digests = [_digest_with_data(load, source, right, monkeypatch)
               for right in ("1.0", "1.0", "0.5")]
    assert digests[0] == digests[1] != digests[2]


def _digest_with_data(load, source: str, right: str, monkeypatch) -> str:
    """``source``'s judge's digest, its folder holding ``data2/rubric.json`` (the working
    folder too, as a command run from the project)."""
    import tempfile

    with tempfile.TemporaryDirectory() as elsewhere:
        monkeypatch.chdir(elsewhere)  # (the module's folder is found from any folder)
        return _digest(load, source, files={"data2/rubric.json": f'{{"right": {right}}}'})


def test_a_cache_the_code_reads_and_writes_does_not_count(load):
    """Read at import and written as the run goes: counted, it refused every resume of
    unedited code (sweep 52 A-L1)."""
    source = ("import json\nfrom pathlib import Path\nCACHE = Path(__file__).parent / "
              "'cache.json'\nSEEN = json.load(open(CACHE))\n"
              "async def judge(task, response):\n"
              "    json.dump(SEEN, open(CACHE, 'w'))\n    return 1.0\n")
    assert _digest(load, source, files={"cache.json": "{}"}) == \
        _digest(load, source, files={"cache.json": '{"a": 1}'})
    # the workflow beside the judge that writes it: its digest leaves the judge out, not
    # the write (sweep 52 B-L1 refused the workflow's resume)
    roles = ("def workflow(fn):\n    return fn\ndef judge(fn):\n    return fn\n"
             + source.replace("async def judge(", "@judge\nasync def exact(")
             + "@workflow\nasync def solve(task, model):\n    return SEEN\n")
    assert _digest(load, roles, role="solve", files={"cache.json": "{}"}) == \
        _digest(load, roles, role="solve", files={"cache.json": '{"a": 1}'})


def test_a_dotenv_file_does_not_count_but_a_flag_tested_in_the_environment_does(
        load, monkeypatch):
    """``load_dotenv(".env")``: a rotated key changes the file, which is no other code
    (sweep 52 B-L1); ``"HALF" in os.environ`` is a flag that changes rewards (B-S2)."""
    source = ("import os\nfrom pathlib import Path\ndef load_dotenv(path):\n    return path\n"
              "load_dotenv(Path(__file__).parent / '.env')\n"
              "async def judge(task, response):\n"
              "    return 0.5 if 'TUNEDSL_TEST_HALF' in os.environ else 1.0\n")
    monkeypatch.delenv("TUNEDSL_TEST_HALF", raising=False)
    first = _digest(load, source, files={".env": "OPENAI_API_KEY=sk-one\n"})
    assert _digest(load, source, files={".env": "OPENAI_API_KEY=sk-two\n"}) == first
    monkeypatch.setenv("TUNEDSL_TEST_HALF", "1")
    assert _digest(load, source, files={".env": "OPENAI_API_KEY=sk-one\n"}) != first


def test_a_judge_imported_from_a_file_of_judges_counts(load):
    """``from helpers import strict``, a @judge beside others in that file: only the
    judge's own file leaves other roles out (sweep 52 A-S5)."""
    source = "from helpers import strict\nasync def judge(task, response):\n" \
             "    return await strict(task, response)\n"
    helpers = ("def judge(fn):\n    return fn\n@judge\nasync def strict(task, response):\n"
               "    return 1.0\n")
    first = _digest(load, source, helpers)
    assert _digest(load, source, helpers.replace("return 1.0", "return 0.0")) != first


def test_a_module_imported_by_a_literal_name_or_lazily_through_a_package_counts(load):
    """``importlib.import_module("helpers")``, and ``import pkg`` inside the judge whose
    ``__init__`` imports ``from .scoring import S`` (sweep 52 A-S6)."""
    source = ("import importlib\nasync def judge(task, response):\n    import pkg\n"
              "    return importlib.import_module('helpers').S + pkg.S\n")
    helpers, scoring = "S = 1.0\n", "S = 1.0\n"
    init = {"pkg/__init__.py": "from .scoring import S\n"}
    first = _digest(load, source, helpers, scoring, files=init)
    assert _digest(load, source, helpers.replace("1.0", "0.5"), scoring, files=init) != first
    assert _digest(load, source, helpers, scoring.replace("1.0", "0.5"), files=init) != first


def test_a_function_without_a_source_file_is_named_alone():
    """A function made by ``exec`` (a prompt's) has no file to read: its name alone."""
    namespace: dict = {}
    exec("async def judge(task, response):\n    return 1.0\n", namespace)
    assert code_digest(namespace["judge"]) == "judge"


EXPERIMENT = """\
    import time

    from tunedsl import *

    STARTED = time.time()


    @workflow
    async def solve(task, model):
        reply = await model.chat([{"role": "user", "content": task["question"]}])
        return WorkflowOutput(response=reply.content, metrics={"up": time.time() - STARTED})


    @judge
    async def exact(task, response):
        return JudgeOutput(reward=float(response == task["answer"]))


    @experiment
    class E:
        workflow = solve
        judge = exact
        train_dataset = Dataset("data", split="train", total_steps=1)
        model = Model("TINY", max_model_len=32, max_tokens=1)
        algorithm = Algorithm("grpo", group_size=2, batch_size=2, save_interval_steps=1)
    """


def test_a_resume_names_the_function_whose_code_changed(tmp_path, tiny_model):
    """A run whose workflow reads a value made at import resumes; after an edit of the
    workflow the refusal names it (it said "the workflow's or judge's code" and "two
    judges" of any change: sweep 50 B-L1)."""
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "train.jsonl").write_text(
        '{"question": "1+1=", "answer": "2"}\n{"question": "2+2=", "answer": "4"}\n')
    exp = project / "exp.py"
    exp.write_text(textwrap.dedent(EXPERIMENT).replace("TINY", str(tiny_model)))
    sys.modules.pop("exp", None)
    run = ["run", "exp:E", "--backend", "local", "--no-progress"]
    done = cli(*run, cwd=project)
    assert done.returncode == 0, done.stderr
    (run_dir,) = (path.parent for path in Path(project).glob("**/code_digests.json"))
    resumed = cli(*run, "--set", "train_dataset.total_steps=2", "--resume", run_dir,
                  cwd=project)
    assert resumed.returncode == 0, resumed.stderr
    exp.write_text(exp.read_text().replace('task["question"]}]', 'task["question"] + " "}]'))
    refused = cli(*run, "--set", "train_dataset.total_steps=3", "--resume", run_dir,
                  cwd=project)
    assert _errors(refused) == (2, [
        f"Error: --resume {run_dir}: the code of @workflow solve (its file, a project file "
        f"imported from it, an environment variable they read, or a data file they read by "
        f"name) changed since the run started (workflow 'solve@HASH' -> 'solve@HASH'), so "
        f"its rollouts would come from two workflows; restore that code, or start a new "
        f"run from its last checkpoint (model.model_path = RUN_DIR/global_step_N)"]), \
        refused.stderr
    exp.write_text(exp.read_text().replace("float(response ==", "float(response.strip() =="))
    refused = cli(*run, "--set", "train_dataset.total_steps=3", "--resume", run_dir,
                  cwd=project)
    assert _errors(refused) == (2, [
        f"Error: --resume {run_dir}: the code of @judge exact and of @workflow solve (their "
        f"files, a project file imported from them, an environment variable they read, or a "
        f"data file they read by name) changed since the run started (judge 'exact@HASH' -> "
        f"'exact@HASH'; workflow 'solve@HASH' -> 'solve@HASH'), so its rewards would come "
        f"from two judges and its rollouts would come from two workflows; restore that "
        f"code, or start a new run from its last checkpoint (model.model_path = "
        f"RUN_DIR/global_step_N)"]), refused.stderr


def _errors(done) -> tuple[int, list[str]]:
    """A command's exit code and its ``Error:`` lines, each digest said as ``@HASH`` (the
    digests of one function before and after its edit told apart)."""
    import re

    lines = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    for line in lines:
        for before, after in re.findall(r"'\w+@(\w+)' -> '\w+@(\w+)'", line):
            assert before != after, line
    return done.returncode, [re.sub(r"@[0-9a-f]{16}'", "@HASH'", line) for line in lines]
