"""load_experiment and import strings: the three forms of target and every import error."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import tunedsl
import tunedsl.config.importer as importer
from tunedsl.dsl.decorators import import_string_of
from tests.fixtures.good import Good
from tests.fixtures.two_experiments import Large, Small
from tunedsl import ExperimentGraph, load_experiment
from tunedsl.errors import ConfigError, ExperimentImportError, user_traceback

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
FORMAT = '"<module>:<attribute>" or "<path/to/file.py>:<attribute>"'


@pytest.fixture(autouse=True)
def isolated_imports(monkeypatch: pytest.MonkeyPatch):
    """Run from the repo root; undo sys.path edits and forget fixture files loaded by path."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        file = getattr(sys.modules[name], "__file__", None) or ""
        if not name.startswith("tests.") and file.startswith(str(FIXTURES)):
            del sys.modules[name]


def import_error(target) -> ExperimentImportError:
    """Call load_experiment expecting an ExperimentImportError, and return it."""
    with pytest.raises(ExperimentImportError) as excinfo:
        load_experiment(target)
    return excinfo.value


# ------------------------------------------------------------------------------ the targets


def test_load_by_module_string():
    """A "pkg.mod:Attr" string builds the experiment's graph with its declared values."""
    graph = load_experiment("tests.fixtures.good:Good")
    assert isinstance(graph, ExperimentGraph)
    assert (graph.source, graph.name) == ("tests.fixtures.good:Good", "Good")
    assert (graph.workflow.ref, graph.judge.ref) == (
        "tests.fixtures.good:answer", "tests.fixtures.good:exact")
    assert (graph.algorithm.algorithm_type, graph.algorithm.group_size,
            graph.algorithm.batch_size) == ("grpo", 4, 2)
    assert (graph.model.model_path, graph.model.max_model_len) == ("Qwen/Qwen3-0.6B", 4096)
    # Dataset("tasks") is relative to good.py, not to the working directory.
    assert graph.train_dataset.path == str(FIXTURES / "tasks")


def test_load_by_file_path():
    """A "path/file.py:Attr" string loads the file and refers to it by absolute path."""
    graph = load_experiment("tests/fixtures/good.py:Good")
    good_py = FIXTURES / "good.py"
    assert graph.source == f"{good_py}:Good"
    assert graph.workflow.ref == f"{good_py}:answer"
    assert graph.judge.ref == f"{good_py}:exact"
    assert graph.train_dataset.path == str(FIXTURES / "tasks")
    assert graph.algorithm.group_size == 4


def test_load_by_class_object_matches_the_string_form():
    """Passing the class itself gives the same graph as its import string."""
    assert load_experiment(Good) == load_experiment("tests.fixtures.good:Good")


def test_subclassed_experiment_inherits_and_overrides():
    """Large keeps Small's workflow and data, and uses its own model, name and extras."""
    small, large = load_experiment(Small), load_experiment("tests.fixtures.two_experiments:Large")
    assert (small.name, large.name) == ("Small", "large-run")
    assert large.source == "tests.fixtures.two_experiments:Large"
    assert large.workflow == small.workflow
    assert large.workflow.optional_params == {"auxiliary_models"}
    assert large.train_dataset == small.train_dataset
    assert (small.model.model_path, large.model.model_path) == ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B")
    assert large.model.tensor_parallel_size == 2
    assert large.auxiliary_models["critic"].temperature == 0.1
    assert (large.eval_dataset.split, small.eval_dataset) == ("test", None)
    assert (large.monitor, small.monitor) == ("wandb", "tensorboard")
    assert (large.algorithm.group_size, small.algorithm.group_size) == (8, 8)
    assert (large.algorithm.batch_size, small.algorithm.batch_size) == (16, 32)


# --------------------------------------------------------------------------------- failures


@pytest.mark.parametrize("target", ["tests.fixtures.good:", ":Good"])
def test_malformed_import_string(target):
    """A string without both a module and an attribute names the expected format."""
    assert str(import_error(target)) == f'Import string "{target}" must be in format {FORMAT}.'


def test_a_module_without_attribute_names_the_experiments_it_holds():
    """A bare module names the import strings of the experiments found in it."""
    assert str(import_error("tests.fixtures.good")) == (
        f'Import string "tests.fixtures.good" must be in format {FORMAT}. Found: '
        f'tests.fixtures.good:Good.')


@pytest.mark.parametrize("module", ["tests.fixtures.nope", "tunedsl_nope_pkg.sub"])
def test_module_not_found(module):
    """A module that is not there (or whose package is not) says where to run from."""
    error = import_error(f"{module}:Good")
    assert str(error) == (
        f'Could not import module "{module}": run from the folder that holds it, '
        f"or install your project (pip install -e .).")
    assert error.__cause__ is None and error.__suppress_context__


def test_file_not_found():
    """A .py path that does not exist says so."""
    assert str(import_error("tests/fixtures/nope.py:Good")) == (
        'Could not import module "tests/fixtures/nope.py": no such file.')


@pytest.mark.parametrize("here", [True, False])
def test_a_package_module_with_a_relative_import_given_as_a_file_names_its_dotted_name(
        tmp_path, monkeypatch, here):
    """``pkgx/sub/rel.py:E`` whose module says ``from .exp import E`` failed with the
    user's traceback and Python's "attempted relative import with no known parent package"
    (sweep 29 A-W9): the module is named as the package's, with where to run from."""
    (tmp_path / "pkgx" / "sub").mkdir(parents=True)
    for init in ("pkgx/__init__.py", "pkgx/sub/__init__.py"):
        (tmp_path / init).write_text("")
    (tmp_path / "pkgx" / "sub" / "rel.py").write_text("from .exp import E\n")
    monkeypatch.chdir(tmp_path if here else tmp_path / "pkgx")
    given = "pkgx/sub/rel.py" if here else "sub/rel.py"
    error = import_error(f"{given}:E")
    from tunedsl.dsl.decorators import display_path

    where = "this folder" if here else display_path(str(tmp_path))
    assert str(error) == (
        f'Could not import module "{given}": it is the module pkgx.sub.rel of a package, and '
        f'its relative imports work only when it is imported as one; give "pkgx.sub.rel:NAME" '
        f"from {where}, which holds the package")


@pytest.mark.parametrize("module", ["tests.fixtures.two_experiments",
                                    "tests/fixtures/two_experiments.py"])
def test_missing_attribute_lists_the_experiments_found(module):
    """A missing attribute lists the experiments the module does define, in order."""
    assert str(import_error(f"{module}:Nope")) == (
        f'Attribute "Nope" not found in module "{module}". Found: Small, Large.')


def test_missing_attribute_in_a_module_without_experiments():
    """A module that defines no experiment says so instead of listing names."""
    assert str(import_error("tests.fixtures:Good")) == (
        'Attribute "Good" not found in module "tests.fixtures". '
        "It defines none of the expected kind.")


def test_a_submodule_named_as_the_attribute_says_to_name_the_object_in_it(tmp_path,
                                                                          monkeypatch):
    """``pkg.sub:mod`` for ``pkg.sub.mod:E`` got "Attribute not found ... none of the
    expected kind", or "decorate the class" once imported (sweep 38 A-W3)."""
    import sys

    (tmp_path / "spkg" / "sub").mkdir(parents=True)
    (tmp_path / "spkg" / "__init__.py").write_text("")
    (tmp_path / "spkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "spkg" / "sub" / "mod.py").write_text(
        "from tests.fixtures.two_experiments import Small as E\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert str(import_error("spkg.sub:mod")) == (
            'Attribute "mod" not found in module "spkg.sub". spkg.sub.mod is a module of it: '
            'give the object in that, e.g. "spkg.sub.mod:NAME".')
        import spkg.sub.mod  # noqa: F401 - imported, it is an attribute of spkg.sub

        assert str(import_error("spkg.sub:mod")) == (
            '"spkg.sub:mod" is not an @experiment class (got module); decorate the class '
            'with @experiment')
    finally:
        for name in [name for name in sys.modules if name.startswith("spkg")]:
            del sys.modules[name]


def test_attribute_that_is_not_an_experiment():
    """An attribute that is not an @experiment class is refused with its type, naming the
    module's experiments (it advised decorating a class: sweep 37 A-W9)."""
    target = "tests.fixtures.two_experiments:NOT_AN_EXPERIMENT"
    assert str(import_error(target)) == (
        f'"{target}" is not an @experiment class (got int); the module defines Small, Large: '
        f'give "tests.fixtures.two_experiments:Small" or "tests.fixtures.two_experiments:Large"')


@pytest.mark.parametrize("target, said", [
    ("exp.py E", 'a space parts the module from the name in it; write "exp.py:E".'),
    ("exp  E", 'a space parts the module from the name in it; write "exp:E".'),
    ("sub/exp.py E", 'no such file; a space parts the module from the name in it; write '
                     '"sub/exp.py:E".'),
    ("nope E", "run from the folder that holds it, or install your project (pip install -e "
               ".)."),  # (no such module: no colon to suggest)
])
def test_a_space_for_the_colon_says_where_the_colon_goes(tmp_path, monkeypatch, target, said):
    """``exp.py E`` got the generic advice to run from the folder that holds it (sweep 35
    A-W7)."""
    (tmp_path / "sub").mkdir()
    for file in ("exp.py", "sub/exp.py"):
        (tmp_path / file).write_text("E = 1\n")
    monkeypatch.chdir(tmp_path)
    assert str(import_error(target)) == f'Could not import module "{target}": {said}'


@pytest.mark.parametrize("target, shown", [
    (Path("exp.py"), "PosixPath('exp.py')"), (b"exp.py", "b'exp.py'"),
    (bytearray(b"exp.py"), "bytearray('exp.py')"), (memoryview(b"exp.py"),
                                                    "memoryview('exp.py')")],
    ids=["Path", "bytes", "bytearray", "memoryview"])
def test_a_path_given_for_the_experiment_says_to_name_the_class(target, shown):
    """``load_experiment(Path("exp.py"))`` was told to decorate a class with @experiment
    (sweep 34 A-W4), and so were a bytearray and a memoryview (sweep 36 A-W7)."""
    with pytest.raises(ExperimentImportError) as caught:
        tunedsl.load_experiment(target)
    assert str(caught.value) == (
        f'{shown} is a path; give the experiment as a string naming the file and the class '
        f'in it, e.g. "exp.py:ClassName", or the class itself')


def test_undecorated_subclass_is_not_an_experiment():
    """A subclass of an experiment without its own @experiment is refused."""
    class Variant(Small): ...

    assert str(import_error(Variant)) == (
        f"{Variant!r} is not an @experiment class (got type); "
        f"decorate the class with @experiment")


@pytest.mark.parametrize("target", ["tests.fixtures.import_error:X",
                                    "tests/fixtures/import_error.py:X"])
def test_import_error_inside_the_user_module(target):
    """An ImportError raised by the user's module keeps the user's own traceback."""
    module = target.rsplit(":", 1)[0]
    error = import_error(target)
    assert str(error) == (
        f'Error while importing module "{module}": ModuleNotFoundError: '
        f"No module named 'tunedsl_missing_dependency'")
    assert isinstance(error, ImportError)
    assert isinstance(error.__cause__, ModuleNotFoundError)
    trace = error.user_traceback
    assert trace.startswith("Traceback (most recent call last):\n")
    assert f'File "{FIXTURES / "import_error.py"}", line 3, in <module>' in trace
    assert "import tunedsl_missing_dependency" in trace
    assert trace.endswith("ModuleNotFoundError: No module named 'tunedsl_missing_dependency'\n")
    assert "importlib" not in trace and "config/importer.py" not in trace
    assert "tests.fixtures.import_error" not in sys.modules
    assert "import_error" not in sys.modules


def test_signature_error_inside_the_user_module():
    """A decorator error raised while importing the user's module is tunedsl's own one line,
    at the user's file:line, with no traceback through tunedsl's frames."""
    from tunedsl.errors import SignatureError

    source = (FIXTURES / "bad_judge.py").read_text().splitlines()
    line = source.index("@judge") + 1
    with pytest.raises(SignatureError) as excinfo:
        load_experiment("tests.fixtures.bad_judge:X")
    assert str(excinfo.value) == (
        f"@judge grade (tests/fixtures/bad_judge.py:{line}) has an unknown parameter 'answer'; "
        f"a judge takes task, response and optionally auxiliary_models, params, logger")
    assert excinfo.value.user_traceback is None


def test_record_errors_at_import_name_the_line_and_every_problem(tmp_path):
    """A record refusing values while the user's module is imported names the line that built
    it, and every refused value, one line each."""
    (tmp_path / "bad_records.py").write_text(
        "from tunedsl import Algorithm\n"
        "\n"
        "algorithm = Algorithm('grpo', group_size=0, batch_size=-3, learning_rate=-1)\n")
    with pytest.raises(ConfigError) as excinfo:
        load_experiment(f"{tmp_path / 'bad_records.py'}:X")
    where = f"{tmp_path / 'bad_records.py'}:3"
    assert excinfo.value.problems == (
        f"{where}: Algorithm.group_size must be >= 1 (got 0)",
        f"{where}: Algorithm.batch_size must be >= 1 (got -3)",
        f"{where}: Algorithm.learning_rate must be > 0.0 (got -1)")


def test_sys_exit_at_import_is_named(tmp_path):
    (tmp_path / "exits.py").write_text("import sys\n\nsys.exit(3)\n")
    error = import_error(f"{tmp_path / 'exits.py'}:X")
    assert str(error) == (
        f'module "{tmp_path / "exits.py"}" called sys.exit(3) while being imported '
        f'({tmp_path / "exits.py"}:3); keep module level free of exits (guard scripts with '
        f'if __name__ == "__main__":)')


@pytest.mark.parametrize("folder", [
    os.path.dirname(tunedsl.__file__) + "_experiments",  # beside the package, same prefix
    os.path.join(os.sep, "home", "user", "importlib_demo"),  # "importlib" in a user folder
])
def test_user_traceback_keeps_user_frames_in_folders_with_similar_names(folder):
    """Only tunedsl's and importlib's own frames are dropped, not a user file whose path resembles them."""
    user_file = os.path.join(folder, "experiment.py")
    try:
        exec(compile("raise LookupError('from the user')\n", user_file, "exec"), {})  # noqa: S102
    except LookupError as exc:
        error = exc.with_traceback(exc.__traceback__.tb_next)  # start at the user's frame
    trace = user_traceback(error)
    assert f'File "{user_file}", line 1, in <module>' in trace
    assert trace.endswith("LookupError: from the user\n")


# ---------------------------------------------------------------------------- import strings


def test_import_string_of_a_file_loaded_object_is_an_absolute_path():
    """An object from a module loaded by path is found again by its absolute file path."""
    module = importer.import_module("tests/fixtures/two_experiments.py")
    path = FIXTURES / "two_experiments.py"
    assert import_string_of(module.Large) == f"{path}:Large"
    assert import_string_of(module.self_scoring) == f"{path}:self_scoring"
    assert os.path.isabs(import_string_of(module.Small).rsplit(":", 1)[0])
    assert importer.import_module(str(path)) is module  # loaded once, then reused


def test_import_string_of_a_module_object_and_its_round_trip():
    """An object of an importable module gets "pkg.mod:qualname", which loads it back."""
    assert import_string_of(Good) == "tests.fixtures.good:Good"
    assert importer.load_object(import_string_of(Large)) is Large
    module = importer.import_module("tests/fixtures/good.py")
    assert importer.load_object(import_string_of(module.Good)) is module.Good


def test_a_script_elsewhere_is_told_the_module_is_in_the_current_folder(tmp_path):
    """A script puts its own folder on sys.path, not the current one: "exp:Arith" fails
    from a folder that holds exp.py, and the fix names the file form that works."""
    import subprocess

    project, scripts = tmp_path / "project", tmp_path / "scripts"
    project.mkdir(), scripts.mkdir()
    (project / "exp.py").write_text("x = 1\n")
    (scripts / "go.py").write_text(
        "import tunedsl\n"
        "try:\n"
        "    tunedsl.load_experiment('exp:Arith')\n"
        "except tunedsl.ExperimentImportError as exc:\n"
        "    print(exc)\n")
    done = subprocess.run([sys.executable, str(scripts / "go.py")], cwd=project,
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(Path(tunedsl.__file__).parents[1])})
    assert done.stdout.splitlines() == [
        'Could not import module "exp": exp.py is in the current folder, which is not on '
        'sys.path (a script puts its own folder there); give the file instead, '
        '"exp.py:NAME", or add the folder to sys.path.']


def test_a_script_without_a_main_guard_runs_once(tmp_path):
    """A script that defines its experiment and calls tunedsl at its top level: tunedsl
    imported the file again for its functions, which ran the script again inside the call
    (two trainings; an eval refusing the file its inner self wrote). The running script's
    own module is used; the command line, which imports it, names the missing guard."""
    import subprocess

    from .cli_support import cli

    script = tmp_path / "train_script.py"
    script.write_text(
        "import tunedsl\n"
        "from tunedsl import Algorithm, Dataset, Model, JudgeOutput, WorkflowOutput\n"
        "print('script body ran')\n"
        "@tunedsl.workflow\n"
        "async def add(task, model):\n"
        "    return WorkflowOutput(response=(await model.chat([{'role': 'user', "
        "'content': task['question']}])).content)\n"
        "@tunedsl.judge\n"
        "async def exact(task, response):\n"
        "    return JudgeOutput(reward=float(response == task['answer']))\n"
        "@tunedsl.experiment\n"
        "class Arith:\n"
        "    workflow, judge = add, exact\n"
        f"    train_dataset = Dataset({str(Path(REPO) / 'examples/arith/data')!r})\n"
        "    model = Model('m', max_model_len=64)\n"
        "    algorithm = Algorithm('grpo', group_size=2, batch_size=2)\n"
        "for line in tunedsl.check(Arith, backend='trinity'):\n"
        "    pass\n"
        "print('checked')\n")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.splitlines() == ["script body ran", "checked"], done.stderr[-2000:]
    refused = cli("check", f"{script}:Arith", cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "Error: train_script.py:16: tunedsl.check at module level runs again each time "
        "tunedsl imports train_script.py for the experiment's functions (a call inside "
        'itself); put it under if __name__ == "__main__":')


@pytest.mark.parametrize("module, form", [("random", "-m"), ("json", "-m"), ("signal", "-m"),
                                          ("tempfile", "script"), ("json", "pyc"),
                                          # imported as the package is, under -m: Python's
                                          # traceback before any check (sweep 45 A-T1)
                                          ("math", "-m"), ("typing", "-m")])
def test_a_module_named_like_a_standard_one_beside_the_experiment_is_refused(tmp_path, module,
                                                                            form):
    """``random.py`` (or ``json.py``, ...) where ``python -m tunedsl`` runs, or
    ``tempfile.py`` beside the experiment for the ``tunedsl`` command, was imported in the
    standard module's place later: a raw traceback, and tunedsl's own internal-error line
    failed in turn (sweep 30 A-T1)."""
    import shutil
    import subprocess

    from .cli_support import cli_process

    shutil.copytree(Path(__file__).parents[1] / "examples" / "arith", tmp_path / "arith")
    (tmp_path / "arith" / f"{module}.py").write_text("X = 1\n")
    if form == "pyc":  # a bare .pyc, its source gone: Python imports it too (sweep 31 A-T1)
        import py_compile

        py_compile.compile(str(tmp_path / "arith" / f"{module}.py"),
                           cfile=str(tmp_path / "arith" / f"{module}.pyc"), doraise=True)
        (tmp_path / "arith" / f"{module}.py").unlink()
    if form in ("-m", "pyc"):
        done = cli_process("config", "experiment:Arith", cwd=tmp_path / "arith")
    else:  # the console script: the experiment's folder joins the import path later
        script = tmp_path / "tunedsl-script"  # (its folder, not the project's, on the path)
        script.write_text("import sys\nfrom tunedsl.cli import entry\nsys.exit(entry())\n")
        done = subprocess.run([sys.executable, script, "check", "experiment:Arith",
                               "--backend", "local"], cwd=tmp_path / "arith", capture_output=True,
                              text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    shown = f"{module}.pyc" if form == "pyc" else f"{module}.py"
    # Where Python imports the module as it starts, before any of the working folder's (CI's
    # Python 3.12 environment does math's), the file hides nothing and the command runs
    started_with = subprocess.run([sys.executable, "-c", f"import sys; print({module!r} in "
                                   "sys.modules)"], cwd=tmp_path, capture_output=True,
                                  text=True, timeout=60).stdout.strip()
    if form == "-m" and started_with == "True":
        assert (done.returncode, done.stderr) == (0, "")
        assert done.stdout.startswith("# A Trinity-RFT config written by tunedsl config")
        return
    assert started_with == "False"
    assert (done.returncode, done.stderr) == (2, (
        f"Error: {shown}: its name hides Python's standard module {module}, which tunedsl and "
        f"the libraries it uses import (its folder comes first on Python's import path); "
        f"rename it, e.g. my_{module}\n"))


@pytest.mark.parametrize("module", ["random", "json", "typing"])
def test_the_experiment_in_a_module_named_like_an_imported_standard_one_is_named(tmp_path,
                                                                                 module):
    """The experiment itself in ``random.py``, named ``random:Arith`` for the console
    script: Python gives its own ``random``, imported before, and the line was "Attribute
    "Arith" not found in module "random"" (sweep 43 A-W8)."""
    import shutil
    import subprocess

    shutil.copytree(Path(__file__).parents[1] / "examples" / "arith", tmp_path / "arith")
    (tmp_path / "arith" / "experiment.py").rename(tmp_path / "arith" / f"{module}.py")
    script = tmp_path / "tunedsl-script"  # (its folder, not the project's, on the path)
    script.write_text("import sys\nfrom tunedsl.cli import entry\nsys.exit(entry())\n")
    done = subprocess.run([sys.executable, script, "check", f"{module}:Arith", "--backend",
                           "local"], cwd=tmp_path / "arith", capture_output=True, text=True,
                          timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert (done.returncode, done.stderr) == (2, (
        f"Error: {module}.py: its name is that of Python's standard module {module}, which was "
        f"imported before it, so \"{module}\" is Python's; rename it, e.g. my_{module}, and give "
        f"\"my_{module}:Arith\"\n"))


@pytest.mark.parametrize("raised, said", [
    ("raise GeneratorExit", "GeneratorExit"),
    ("class Stop(BaseException):\n    pass\n\n\nraise Stop('halted')", "Stop: halted")])
@pytest.mark.parametrize("where", ["at import", "in __getattr__"])
def test_a_base_exception_raised_by_the_user_s_module_is_said_as_an_exception_is(
        tmp_path, raised, said, where):
    """GeneratorExit or a BaseException class of the user's, raised at import or by the
    module's ``__getattr__`` as the experiment is looked up, printed Python's own traceback
    through tunedsl's frames (sweep 39 A-T2)."""
    module = tmp_path / "base_exit.py"
    body = raised if where == "at import" else \
        "def __getattr__(name):\n" + "\n".join(f"    {line}" for line in raised.splitlines())
    module.write_text(body + "\n")
    error = import_error(f"{module}:E")
    assert str(error) == f'Error while importing module "{module}": {said}'
    assert isinstance(error, ExperimentImportError)


def test_exception_hooks_a_module_unsets_at_import_are_put_back(tmp_path):
    """``threading.excepthook = None`` at import made every later thread's error fail in
    its place: check blamed transformers' loading threads' on the model's weights (sweep 39
    A-W1). Hooks that are not callable are put back; a hook of the module's own stays."""
    import threading

    before = threading.excepthook, sys.excepthook
    module = tmp_path / "hooks.py"
    module.write_text(Path(FIXTURES / "good.py").read_text().replace(
        "\n", "\nimport sys, threading\nthreading.excepthook = None\nsys.excepthook = None\n", 1))
    try:
        load_experiment(f"{module}:Good")
        assert (threading.excepthook, sys.excepthook) == before
        own = tmp_path / "own_hook.py"
        own.write_text(Path(FIXTURES / "good.py").read_text().replace(
            "\n", "\nimport threading\nthreading.excepthook = print\n", 1))
        load_experiment(f"{own}:Good")
        assert threading.excepthook is print
    finally:
        threading.excepthook, sys.excepthook = before


@pytest.mark.parametrize("spec", ["experiment:Arith", "experiment.py:Arith"])
def test_a_module_here_behind_a_folder_that_cannot_be_searched_names_that_folder(tmp_path,
                                                                                 spec):
    """Run from a project whose parent folder cannot be searched, the module is here
    (``ls`` lists it) yet Python, importing by full paths, cannot reach it: "run from the
    folder that holds it", or "no such file" (sweep 43 A-W6)."""
    import shutil
    import subprocess

    from .cli_support import REPO, unprivileged

    project = tmp_path / "outer" / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    (tmp_path / "outer").chmod(0o600)
    try:
        done = subprocess.run([*unprivileged(), sys.executable, "-m", "tunedsl", "check", spec,
                               "--backend", "local"], cwd=project, capture_output=True,
                              text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        (tmp_path / "outer").chmod(0o755)
    outer = tmp_path / "outer"
    assert (done.returncode, done.stderr) == (2, (
        f'Error: Could not import module "{spec.split(":")[0]}": experiment.py is here, but '
        f"Python imports it by its full path ({project}/experiment.py), and a folder on that "
        f"path cannot be searched; make {outer} searchable (chmod u+rx {outer})\n"))


@pytest.mark.parametrize("spec", ["experiment:Arith", "experiment.py:Arith"])
def test_a_module_that_cannot_be_read_names_its_chmod(tmp_path, spec):
    """An experiment's file of mode 000: Python's PermissionError with its traceback, then
    "Error while importing module", with no fix (sweep 46 A-W6). Root ignores file
    permissions: check runs without the capabilities that let it."""
    import shutil

    from .cli_support import REPO, cli_while_closed

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    done = cli_while_closed(project / "experiment.py", 0, "check", spec, "--backend", "local",
                            cwd=project, restore=0o644)
    assert (done.returncode, done.stderr) == (2, (
        f'Error: Could not import module "{spec.split(":")[0]}": {project}/experiment.py cannot '
        f"be read (Permission denied); make it readable (chmod u+r {project}/experiment.py)\n"))


@pytest.mark.parametrize("closed, spec", [
    ("pkg/sub", "pkg.sub.experiment:Arith"),  # a package's folder
    (".", "experiment:Arith"),  # the working folder itself
])
def test_a_folder_python_cannot_list_names_its_chmod(tmp_path, closed, spec):
    """Python finds a module by listing its folder: a folder of mode 311 hid the module,
    said as "run from the folder that holds it", which the user did (sweep 47 A-W3)."""
    import shutil

    from .cli_support import REPO, cli_while_closed

    project = tmp_path / "p"
    (project / "pkg" / "sub").mkdir(parents=True)
    for folder in (project / "pkg", project / "pkg" / "sub"):
        (folder / "__init__.py").write_text("")
    for where in (project, project / "pkg" / "sub"):
        shutil.copy(REPO / "examples" / "arith" / "experiment.py", where / "experiment.py")
    done = cli_while_closed(project / closed, 0o311, "config", spec, cwd=project)
    shown = "the current folder" if closed == "." else closed
    assert (done.returncode, done.stderr) == (2, (
        f'Error: Could not import module "{spec.split(":")[0]}": {shown} cannot be listed '
        f"(Permission denied), so Python finds no module in it; make it readable (chmod u+rx "
        f"{closed})\n"))


def test_a_module_file_that_is_a_looping_link_is_said_to_loop(tmp_path, monkeypatch):
    """``config loop.py:E`` where loop.py is a link to itself was "no such file" (sweep 49
    A-W5)."""
    from .cli_support import cli

    (tmp_path / "loop.py").symlink_to("loop.py")
    done = cli("config", "loop.py:E", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (2, (
        'Error: Could not import module "loop.py": loop.py is a symbolic link to loop.py, '
        'which loops back to itself; fix the link, or give the .py file itself\n'))


@pytest.mark.parametrize("spec, loop", [
    ("m1:E", "m1.py is a symbolic link to m2.py"),
    ("pk.mod:E", "pk is a symbolic link to pk"),
])
def test_a_module_named_by_its_dotted_name_through_a_looping_link_is_said_to_loop(
        tmp_path, spec, loop):
    """``config m1:E`` where m1.py loops was "run from the folder that holds it, or install
    your project" (sweep 50 A-W4)."""
    from .cli_support import cli

    (tmp_path / "m1.py").symlink_to("m2.py")
    (tmp_path / "m2.py").symlink_to("m1.py")
    (tmp_path / "pk").symlink_to("pk")
    done = cli("config", spec, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (2, (
        f'Error: Could not import module "{spec.split(":")[0]}": {loop}, which loops back to '
        f"itself; fix the link\n"))
