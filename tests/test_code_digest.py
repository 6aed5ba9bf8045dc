"""The code digest (rollout/code.py) a resume compares: what of the user's code it takes in,
and what it leaves out so that an unedited workflow can be resumed."""

from __future__ import annotations

import importlib
import itertools
import sys
import textwrap
from pathlib import Path

import pytest

from tunedsl.rollout.code import code_digest

from .cli_support import cli

_numbers = itertools.count()


@pytest.fixture
def load(tmp_path, monkeypatch):
    """``load(source, helpers="")``: ``source`` imported afresh as a module of its own (a
    new name each time, as a new process imports it), beside ``helpers``, a module it may
    import as ``HELPERS``; the modules are forgotten after the test."""
    loaded: list[str] = []

    def load(source: str, helpers: str = "") -> object:
        number = next(_numbers)
        folder = tmp_path / f"project{number}"
        folder.mkdir()
        helpers_name, name = f"helpers_{number}", f"judged_{number}"
        (folder / f"{helpers_name}.py").write_text(textwrap.dedent(helpers))
        (folder / f"{name}.py").write_text(textwrap.dedent(source).replace("HELPERS",
                                                                           helpers_name))
        monkeypatch.syspath_prepend(str(folder))
        loaded.extend((helpers_name, name))
        return importlib.import_module(name)

    yield load
    for name in loaded:
        sys.modules.pop(name, None)


def _digests(load, source: str, *edits: tuple[str, str], helpers: str = "") -> list[str]:
    """The digest of ``judge`` in ``source`` (beside ``helpers``) as written, then with each
    edit (old text -> new text, in either file) made alone."""
    found = [code_digest(load(source, helpers).judge)]
    for old, new in edits:
        assert (old in source) != (old in helpers), old  # (each edit changes one file)
        found.append(code_digest(load(source.replace(old, new),
                                      helpers.replace(old, new)).judge))
    return found


#: Code that scores through classes: a base class whose method reads a module-level value
#: and calls a module-level function, a subclass, a holder of an instance given to it,
#: and a function and a value the judge never reaches.
GRADERS = """\
    THRESH = 1.0
    UNUSED = 1


    def norm(text):
        return text.strip()


    def unrelated():
        return "unrelated"


    class Base:
        def score(self, response):
            return THRESH if norm(response) == "2" else 0.0


    class Sub(Base):
        pass


    class Holder:
        def __init__(self, inner):
            self.inner = inner
    """

#: The edits each way of reaching `GRADERS`' code must see, then those it must not.
SEEN = [("return THRESH if", "return 0.5 * THRESH if"), ("THRESH = 1.0", "THRESH = 0.25"),
        ("return text.strip()", "return text.strip(' ')")]
UNSEEN = [("UNUSED = 1", "UNUSED = 2"), ('return "unrelated"', 'return "other"')]


@pytest.mark.parametrize("held, scored", [
    ("G = Sub()", "G.score(response)"),  # an instance of a subclass: its base's method
    ("", "Base().score(response)"),  # the class itself: what its methods use
    ("", "Sub().score(response)"),
    ("GS = {'strict': Base()}", "GS['strict'].score(response)"),  # instances in containers
    ("G = [Sub()]", "G[0].score(response)"),
    ("G = (1, (Sub(),))", "G[1][0].score(response)"),
    ("G = frozenset({Sub()})", "next(iter(G)).score(response)"),
    ("G = Holder(Base())", "G.inner.score(response)"),  # an instance another one holds
    ("G = Holder({'all': [Sub()]})", "G.inner['all'][0].score(response)"),
])
@pytest.mark.parametrize("split", [False, True])
def test_an_edit_of_what_a_class_it_reaches_uses_changes_the_digest(load, held, scored,
                                                                    split):
    """Each of these edits was resumed without a word, and the rewards after the resume
    came from the edited judge (sweep 50 B-S1): the digest took in a class's own source
    only. Now it takes in its bases, what its methods use, and the user's classes held in
    containers and instances (the classes in the judge's module, or in one it imports)."""
    judge = f"{held}\n\n\nasync def judge(task, response):\n    return {scored}\n"
    if split:
        source, helpers = f"from HELPERS import *\n{judge}", GRADERS
    else:
        source, helpers = textwrap.dedent(GRADERS) + judge, ""
    first, *seen = _digests(load, source, *SEEN, helpers=helpers)
    again, *unseen = _digests(load, source, *UNSEEN, helpers=helpers)
    assert again == first
    assert unseen == [first] * len(UNSEEN)
    assert first not in seen and len(set(seen)) == len(SEEN)


@pytest.mark.parametrize("member", [
    "@staticmethod\n    def score(response):\n        return THRESH",
    "@classmethod\n    def score(cls, response):\n        return THRESH",
    "@property\n    def score(self):\n        return lambda response: THRESH",
])
def test_a_static_or_class_method_s_or_a_property_s_values_count(load, member):
    """A method behind a decorator is a function of the class's ``__dict__`` all the same."""
    source = (f"THRESH = 1.0\n\n\nclass Grader:\n    {member}\n\n\n"
              "async def judge(task, response):\n    return Grader().score(response)\n")
    first, edited = _digests(load, source, ("THRESH = 1.0", "THRESH = 0.5"))
    assert first != edited


def test_a_cycle_or_a_raising_attribute_or_a_large_table_ends_the_walk(load):
    """The walk follows ``vars()`` only (a property or ``__getattr__`` of the user's object
    may raise), each object once (an instance holding itself), and a bounded share of a
    large container; it still sees an edit of a method."""
    source = """\
        class Loop:
            def __init__(self):
                self.me = self
                self.rows = list(range(100_000))

            def __getattr__(self, name):
                raise RuntimeError("never asked")

            @property
            def broken(self):
                raise RuntimeError("never asked")

            def score(self, response):
                return 1.0


        G = Loop()
        TABLE = [[{"row": [Loop()] * 1000}] * 1000] * 1000


        async def judge(task, response):
            return G.score(response) + len(TABLE)
        """
    first, again, edited = _digests(load, source, ("return 1.0", "return 1.0"),
                                    ("return 1.0", "return 0.5"))
    assert again == first != edited


STARTED = """\
    import os
    import time
    import uuid

    STARTED = time.time()
    PID = os.getpid()
    RUN_ID = uuid.uuid4().hex
    SCALE = 1.0
    BASE = 2
    LIMIT = BASE * 3
    FROM_ENV = float(os.environ.get("TUNEDSL_TEST_SCALE", "1"))


    async def judge(task, response):
        return {"since": time.time() - STARTED, "pid": PID, "run": RUN_ID,
                "reward": SCALE * FROM_ENV * (len(response) < LIMIT)}
    """


def test_a_value_made_at_import_keeps_its_digest_in_a_new_process(load, monkeypatch):
    """A workflow reading ``STARTED = time.time()`` (a pid, a uuid) could never be resumed:
    the value differs in every process (sweep 50 B-L1). Such a value counts as the text
    of the expression that makes it, which an edit changes; a literal counts as its value,
    and so does one read from the environment."""
    first, again, expression, literal, used = _digests(
        load, STARTED, ("SCALE = 1.0", "SCALE = 1.0"), ("time.time()", "time.monotonic()"),
        ("SCALE = 1.0", "SCALE = 0.5"), ("BASE = 2", "BASE = 4"))
    assert load(STARTED).RUN_ID != load(STARTED).RUN_ID  # (each import makes its own)
    assert again == first
    assert len({first, expression, literal, used}) == 4
    monkeypatch.setenv("TUNEDSL_TEST_SCALE", "0.5")
    assert code_digest(load(STARTED).judge) != first


def test_a_value_made_at_import_in_a_module_it_imports_keeps_its_digest(load):
    """``from HELPERS import STARTED``: the expression is found where the value is made."""
    helpers = "import time\n\nSTARTED = time.time()\n"
    source = ("from HELPERS import STARTED\n\n\n"
              "async def judge(task, response):\n    return STARTED\n")
    first, again, edited = _digests(load, source, ("STARTED\n", "STARTED\n"),
                                    ("time.time()", "time.monotonic()"), helpers=helpers)
    assert again == first != edited


def test_a_literal_value_hashes_as_before():
    """A function reading a literal keeps the digest an older tunedsl recorded (a run it
    began can still be resumed): its source, then the value as it was hashed."""
    import inspect

    from tunedsl.data.json_text import digest

    text = inspect.getsource(_reads_a_literal) + "\n_LITERAL = (1, -2.5)"
    assert code_digest(_reads_a_literal) == f"_reads_a_literal@{digest(text)}"


_LITERAL = (1, -2.5)


def _reads_a_literal():
    return _LITERAL


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
        f"Error: --resume {run_dir}: the code of @workflow solve, or a function, class or "
        f"plain value it reads (a module-level number or text, as one read from an "
        f"environment variable), changed since the run started (workflow "
        f"'solve@8ee39eb9e6d74d49' -> 'solve@c895c054cda2c63d'), so its rollouts would come "
        f"from two workflows; restore that code, or start a new run from its last checkpoint "
        f"(model.model_path = RUN_DIR/global_step_N)"]), refused.stderr
    exp.write_text(exp.read_text().replace("float(response ==", "float(response.strip() =="))
    refused = cli(*run, "--set", "train_dataset.total_steps=3", "--resume", run_dir,
                  cwd=project)
    assert _errors(refused) == (2, [
        f"Error: --resume {run_dir}: the code of @judge exact and of @workflow solve, or a "
        f"function, class or plain value they read (a module-level number or text, as one "
        f"read from an environment variable), changed since the run started (judge "
        f"'exact@57029e8ba6b8b963' -> 'exact@c664c8e137cf1af2'; workflow "
        f"'solve@8ee39eb9e6d74d49' -> 'solve@c895c054cda2c63d'), so its rewards would come "
        f"from two judges and its rollouts would come from two workflows; restore that code, "
        f"or start a new run from its last checkpoint (model.model_path = "
        f"RUN_DIR/global_step_N)"]), refused.stderr


def _errors(done) -> tuple[int, list[str]]:
    """A command's exit code and its ``Error:`` lines."""
    return done.returncode, [line for line in done.stderr.splitlines()
                             if line.startswith("Error: ")]
