"""The command line: `python -m tunedsl`, `tunedsl.cli.main` and the `tunedsl` console script."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tunedsl import cli

from .cli_support import cli as run_cli

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
GOOD = "tests.fixtures.good:Good"
SET_HINT = "expected KEY=VALUE, e.g. --set algorithm.group_size=8"


def environment() -> dict[str, str]:
    """The child's environment: offline, and no PYTHONPATH that could hide import problems."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return env


def run(*args: str, command: tuple[str, ...] | None = None, cwd: Path = REPO):
    """Run the CLI in a subprocess from ``cwd`` and return the completed process."""
    command = command or (sys.executable, "-m", "tunedsl")
    return subprocess.run([*command, *args], cwd=cwd, env=environment(), capture_output=True,
                          text=True, timeout=300)


def jsonl_rows(path: Path) -> list[dict]:
    """The rows of a jsonl file, parsed independently of tunedsl."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def console_script() -> str:
    """The installed `tunedsl` script beside this interpreter (the test skips without it)."""
    found = shutil.which("tunedsl", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("the tunedsl console script is not installed beside this interpreter")
    return found


# ------------------------------------------------------------------------------------ config


def test_config_prints_trinity_yaml():
    """`config` prints YAML whose values come from the experiment class."""
    result = run("config", GOOD)
    assert (result.returncode, result.stderr) == (0, "")
    config = yaml.safe_load(result.stdout)
    assert config["project"] == "tunedsl"
    assert re.fullmatch(r"Good-\d{14}", config["name"])
    assert config["algorithm"]["algorithm_type"] == "grpo"
    assert config["algorithm"]["repeat_times"] == 4
    assert config["buffer"]["batch_size"] == 2
    assert config["model"]["max_model_len"] == 4096
    taskset = config["buffer"]["explorer_input"]["taskset"]
    assert taskset["path"] == str(FIXTURES / "tasks")
    assert taskset["workflow_args"] == {"workflow": "tests.fixtures.good:answer",
                                        "rollout_timeout": 3600,
                                        "experiment": GOOD, "judge": "tests.fixtures.good:exact"}


def test_config_of_the_example_applies_toml_and_set():
    """The example's tunedsl.toml applies beneath the class, and --set wins over both."""
    target = "examples.math_agent.experiment:MathAgent"
    base = yaml.safe_load(run("config", target).stdout)
    assert (base["project"], base["algorithm"]["repeat_times"]) == ("tunedsl-examples", 8)
    assert base["buffer"]["total_epochs"] == 2
    assert base["buffer"]["explorer_input"]["eval_tasksets"][0]["split"] == "test"
    result = run("config", target, "--set", "algorithm.group_size=6", "--set", "project=demo")
    assert result.returncode == 0
    changed = yaml.safe_load(result.stdout)
    assert (changed["project"], changed["algorithm"]["repeat_times"]) == ("demo", 6)


def test_config_of_a_module_whose_file_name_is_not_utf8_prints_it(tmp_path):
    """A module file named in bytes that are not UTF-8 (``e\\xff.py``): ``config`` exited 1,
    "cannot write to standard output (... surrogates not allowed)", where ``-o`` wrote it
    (sweep 48 A-W2). Its name is printed back as the bytes it is."""
    root = Path(__file__).resolve().parents[1]
    name = os.fsdecode(b"e\xff.py")
    shutil.copy(root / "examples" / "arith" / "experiment.py", tmp_path / name)
    shutil.copytree(root / "examples" / "arith" / "data", tmp_path / "data")
    done = subprocess.run([sys.executable, "-m", "tunedsl", "config", f"{name}:Arith"],
                          cwd=tmp_path, capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"# A Trinity-RFT config written by tunedsl config "
                                  b"e\xff.py:Arith\nmode: both\n")


def test_config_output_file(tmp_path):
    """`config -o FILE` writes the YAML there, prints nothing on stdout and says where it wrote."""
    out = tmp_path / "trinity.yaml"
    result = run("config", GOOD, "-o", str(out))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", f"wrote {out}\n")
    config = yaml.safe_load(out.read_text())
    assert config["algorithm"]["repeat_times"] == 4
    assert config["buffer"]["explorer_input"]["taskset"]["workflow_args"]["experiment"] == GOOD


def test_config_output_into_a_missing_folder_makes_it(tmp_path):
    """Every output's folder is made, as eval's -o always was (one writer for all)."""
    out = tmp_path / "missing" / "trinity.yaml"
    result = run("config", GOOD, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(out.read_text())["mode"] == "both"
    assert [p.name for p in out.parent.iterdir()] == ["trinity.yaml"]  # no partial left


# ----------------------------------------------------------------------------------- preview


def test_preview_prints_the_first_rows_as_json():
    """`preview -n 2` prints the first two training rows as JSON."""
    result = run("preview", "-n", "2", GOOD)
    assert (result.returncode, result.stderr) == (0, "")
    assert json.loads(result.stdout) == jsonl_rows(FIXTURES / "tasks" / "train.jsonl")[:2]


def test_preview_other_split_and_bad_count():
    """--split reads another split, and -n 0 is refused with exit 2."""
    result = run("preview", "--split", "test", GOOD)
    assert json.loads(result.stdout) == jsonl_rows(FIXTURES / "tasks" / "test.jsonl")
    result = run("preview", "-n", "0", GOOD)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "Error: -n 0: show at least 1 row\n"


# ------------------------------------------------------------------------------------ errors


def test_set_without_equals():
    """--set without '=' exits 2 with exactly one Error line."""
    result = run("config", GOOD, "--set", "oops")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"Error: --set 'oops': {SET_HINT}\n"


@pytest.mark.parametrize(("target", "message"), [
    ("tests.fixtures.good", 'Import string "tests.fixtures.good" must be in format '
                            '"<module>:<attribute>" or "<path/to/file.py>:<attribute>". '
                            'Found: tests.fixtures.good:Good.'),
    ("tests.fixtures.nope:Good", 'Could not import module "tests.fixtures.nope": run from the '
                                 'folder that holds it, or install your project (pip install -e .).'),
    ("tests.fixtures.two_experiments:Nope",
     'Attribute "Nope" not found in module "tests.fixtures.two_experiments". Found: Small, Large.'),
])
def test_bad_import_strings(target, message):
    """A bad import string exits 2 with one Error line and no traceback."""
    result = run("config", target)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"Error: {message}\n"
    assert "Traceback" not in result.stderr


def test_import_error_inside_user_module_shows_the_users_traceback():
    """An ImportError in the user's module prints the user's traceback, then the Error line."""
    result = run("config", "tests.fixtures.import_error:X")
    assert (result.returncode, result.stdout) == (2, "")
    lines = result.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1] == f'  File "{FIXTURES / "import_error.py"}", line 3, in <module>'
    assert lines[-2] == "ModuleNotFoundError: No module named 'tunedsl_missing_dependency'"
    assert lines[-1] == ('Error: Error while importing module "tests.fixtures.import_error": '
                         "ModuleNotFoundError: No module named 'tunedsl_missing_dependency'")
    assert "runpy" not in result.stderr and "_importer.py" not in result.stderr


def test_a_users_traceback_is_shown_with_long_lines_cut_and_escapes_escaped(tmp_path):
    """A 10 MB exception message was printed whole in the user's traceback above the Error
    line (check and run: 10 MB on stderr), and a terminal escape in it reached the
    terminal raw."""
    from tunedsl.errors import MESSAGE_SHOWN

    (tmp_path / "big.py").write_text('raise ValueError("\\x1b[2J" + "x" * 100_000)\n')
    result = run("config", "big.py:X", cwd=tmp_path)
    assert result.returncode == 2 and len(result.stderr) < 3 * MESSAGE_SHOWN
    cut = [line for line in result.stderr.splitlines() if line.startswith("ValueError: ")]
    assert cut == [f"ValueError: \\x1b[2J{'x' * (MESSAGE_SHOWN - 16)}... "
                   f"({100_016 - MESSAGE_SHOWN} characters more, not shown)"]
    assert "\x1b" not in result.stderr


def test_bad_settings_give_one_error_line_per_problem():
    """Several bad --set values exit 2 with one Error line each, all reported at once."""
    result = run("config", GOOD, "--set", "algorithm.group_size=0", "--set", "model.top_p=2.0",
                 "--set", "monitr=wandb")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "Error: --set: invalid value @ algorithm.group_size: must be >= 1 (got 0)",
        "Error: --set: invalid value @ model.top_p: must be in (0, 1] (got 2.0)",
        "Error: --set: extra fields found (monitr) @ <top level> (did you mean 'monitor'?)",
    ]


def test_graph_check_names_the_layer_that_gave_the_value():
    """A group-relative algorithm with one rollout per task is refused, naming the --set
    that gave the group size (it named the class's file:line, sweep 46 A-W5) and the class
    that chose the algorithm (a setting named after the first was not traced, sweep 49)."""
    result = run("config", GOOD, "--set", "algorithm.group_size=1")
    assert result.returncode == 2
    assert result.stderr == (
        "Error: --set, Good (tests/fixtures/good.py:17): algorithm.group_size = 1: "
        "algorithm.algorithm_type 'grpo' compares rollouts of the same task, so it needs "
        "group_size >= 2\n")


@pytest.mark.parametrize(("args", "fragment"), [
    (("bogus", GOOD), "argument COMMAND: invalid choice: 'bogus' (choose from 'config', "
                        "'check', 'run', 'eval', 'rescore', 'view', 'tune-prompt', "
                        "'preview')"),
    (("config",), "the following arguments are required: MODULE:ATTR"),
    (("preview", "-n", "two", GOOD), "argument -n/--limit: invalid int value: 'two'"),
])
def test_usage_errors_exit_2(args, fragment):
    """Usage mistakes print argparse's error as one Error line pointing at --help, exit 2."""
    result = run(*args)
    assert (result.returncode, result.stdout) == (2, "")
    command = " ".join(["tunedsl", *args[:1]]) if args and args[0] in (
        "config", "check", "run", "eval", "rescore", "preview") else "tunedsl"
    assert result.stderr == f"Error: {command}: {fragment}; see {command} --help\n"


# --------------------------------------------------------------------------------- in-process


def test_main_in_process_returns_exit_codes(monkeypatch, capsys):
    """cli.main returns 0 on success and 2 on bad input, printing as the subprocess does."""
    monkeypatch.chdir(REPO)
    assert cli.main(["preview", "-n", "1", GOOD]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == jsonl_rows(FIXTURES / "tasks" / "train.jsonl")[:1]
    assert cli.main(["config", GOOD, "--set", "oops"]) == 2
    assert capsys.readouterr().err == f"Error: --set 'oops': {SET_HINT}\n"
    assert cli.main(["bogus"]) == 2  # a usage error returns its code too, not SystemExit
    assert capsys.readouterr().err.startswith("Error: tunedsl: argument COMMAND: invalid ")


# ---------------------------------------------------------------------------- console script


def test_console_script_runs_a_file_target():
    """The installed `tunedsl` script runs `config` on a path/to/file.py target."""
    result = run("config", "tests/fixtures/good.py:Good", command=(console_script(),))
    assert (result.returncode, result.stderr) == (0, "")
    args = yaml.safe_load(result.stdout)["buffer"]["explorer_input"]["taskset"]["workflow_args"]
    assert args["experiment"] == f"{FIXTURES / 'good.py'}:Good"


def test_console_script_imports_modules_from_the_working_directory():
    """`tunedsl preview pkg.mod:Attr` run from the project folder finds the module, as `python -m` does."""
    result = run("preview", "-n", "1", GOOD, command=(console_script(),))
    assert (result.returncode, result.stderr) == (0, "")
    assert json.loads(result.stdout) == jsonl_rows(FIXTURES / "tasks" / "train.jsonl")[:1]


@pytest.mark.parametrize("args, message", [
    (["rescore", "/nonexistent/results.jsonl", "examples.arith.experiment:Arith"],
     "Error: /nonexistent/results.jsonl: cannot read the results file: No such file or "
     "directory"),
    (["config", "examples.arith.experiment:Arith", "--settings", "/tmp"],
     "Error: /tmp: cannot read the settings file: Is a directory"),
    (["run", "tests.fixtures.local.agents:Arith", "--backend", "local", "--set",
      "checkpoint_root_dir=/proc/nope"],
     "Error: checkpoint_root_dir = '/proc/nope': cannot make folders in /proc (No such file "
     "or directory)"),
])
def test_bad_input_is_one_line_not_a_traceback(args, message, tiny_model):
    """Files and folders that cannot be read or made are reported, exit 2 (a run trains
    the tiny model)."""
    if args[0] == "run":
        args = [*args, "--set", f"model.model_path={tiny_model}"]
    done = run(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(message)


def test_a_bare_tunedsl_shows_its_commands():
    """``tunedsl`` alone prints the usage and every command, then the one Error line."""
    done = run()
    assert done.returncode == 2
    assert done.stderr.startswith("usage: tunedsl [-h] [--version] COMMAND ...")
    for command in ("config", "check", "run", "eval", "rescore", "view", "tune-prompt",
                    "preview"):
        # (a name longer than argparse's column has its help on the next line)
        assert f"    {command} " in done.stderr or f"    {command}\n" in done.stderr, command
    assert done.stderr.strip().splitlines()[-1].startswith("Error: give a command (")


DEFENCE = ("Error: internal error in tunedsl: ZeroDivisionError: division by zero; please "
           "report it, the traceback is in ")


def test_an_exception_no_handler_words_is_one_line_and_exit_1_its_traceback_kept(
        monkeypatch, capsys):
    """The last line of defence: a bug in a command (here one made to divide by zero)
    prints one line naming the exception and the file that keeps its traceback."""
    monkeypatch.setitem(cli._COMMANDS, "config", lambda args: 1 / 0)
    code = cli.main(["config", "examples.arith.experiment:Arith"])
    [line] = capsys.readouterr().err.splitlines()
    assert code == 1 and line.startswith(DEFENCE), line
    kept = Path(line[len(DEFENCE):])
    assert "lambda args: 1 / 0" in kept.read_text()
    assert kept.read_text().rstrip().endswith("ZeroDivisionError: division by zero")
    kept.unlink()


def test_a_test_whose_input_reaches_the_last_line_of_defence_fails(monkeypatch):
    """The suite's CLI helper turns that line into a failed test, with the traceback."""
    monkeypatch.setitem(cli._COMMANDS, "config", lambda args: 1 / 0)
    with pytest.raises(AssertionError) as info:
        run_cli("config", "examples.arith.experiment:Arith")
    assert str(info.value).startswith(
        "tunedsl config examples.arith.experiment:Arith reached the last line of defence:\n"
        "Traceback (most recent call last):")
    assert str(info.value).rstrip().endswith("ZeroDivisionError: division by zero")


def test_version_prints_the_packages_version():
    """``tunedsl --version``, the version the package's metadata has (what was installed)."""
    from importlib.metadata import version

    import tunedsl

    done = run_cli("--version")
    assert (done.returncode, done.stdout) == (0, f"tunedsl {version('tunedsl')}\n")
    assert tunedsl.__version__ == version("tunedsl")


def test_an_old_spelling_still_works_and_says_what_replaced_it(tmp_path):
    """``view --out`` is ``-o/--output`` now, as on every other command (issue 35)."""
    results = tmp_path / "r.jsonl"
    results.write_text('{"task_index": 0, "repeat": 0, "task": {"q": 1}, "response": "2", '
                       '"reward": 1.0}\n', encoding="utf-8")
    done = run_cli("view", results, "--out", tmp_path / "page.html")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == "note: --out is now -o/--output"
    assert (tmp_path / "page.html").read_text(encoding="utf-8").startswith("<!")


def test_every_options_default_is_in_its_help():
    """Each option with a default says it in --help, once (issue 35)."""
    from tunedsl.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    for name, command in commands.items():
        for action in command._actions:
            if not action.option_strings or action.help in (None, "==SUPPRESS=="):
                continue
            if action.default in (None, False, []) or action.dest == "help":
                continue
            shown = command.formatter_class("x")._get_help_string(action)
            assert "default" in shown, (name, action.option_strings, shown)


def test_an_option_is_spelt_alike_on_every_command():
    """An option two commands share has the same short form, value name and kind on each
    (``-o FILE, --output FILE``; ``--model NAME[@URL]``; ``--resume`` a switch, or on
    ``run`` a switch that may name its run): one spelling per concept (issue 35)."""
    from tunedsl.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    seen: dict[str, tuple[str, tuple[str, ...], object]] = {}
    for name, command in commands.items():
        for action in command._actions:
            long = [flag for flag in action.option_strings if flag.startswith("--")]
            if not long or action.dest == "help" or action.help == "==SUPPRESS==":
                continue
            optional_value = action.nargs == "?"  # run --resume [RUN_DIR]: a switch too
            spelling = (tuple(sorted(action.option_strings)),
                        None if optional_value else action.metavar,
                        0 if optional_value else action.nargs)
            first = seen.setdefault(long[0], (name, *spelling[:1], spelling[1:]))
            assert (first[1], first[2]) == (spelling[0], spelling[1:]), (
                long[0], first[0], name)
    counts = [flag for flag in seen if flag in ("--limit", "--repeat", "--concurrency",
                                                "--budget", "--max-rollouts", "--minibatch",
                                                "--seed")]
    metavars = {flag: next(a.metavar for c in commands.values() for a in c._actions
                           if flag in a.option_strings) for flag in counts}
    assert set(metavars.values()) == {"N"}, metavars


def test_a_report_line_holding_an_escape_sequence_is_printed_escaped(capsys):
    """A tuned prompt (or a model's name) holding ESC or BEL, printed in tune-prompt's,
    eval's or a selection's report, reached the terminal raw."""
    from tunedsl.wording import print_lines

    print_lines(["best system_prompt:", "    Be \x1b[31mred\x07 and brief."])
    assert capsys.readouterr().out == ("best system_prompt:\n"
                                       "    Be \\x1b[31mred\\x07 and brief.\n")


PRINTED_AT_IMPORT = {
    "print": "print('loading the arith experiment')",
    # past sys.stdout, to file descriptor 1 (sweep 33 A-S2)
    "sys.__stdout__": "import sys; sys.__stdout__.write('loading the arith experiment\\n')",
    "os.write": "import os; os.write(1, b'loading the arith experiment\\n')",
    "subprocess": "import subprocess, sys; subprocess.run([sys.executable, '-c', "
                  "'print(\"loading the arith experiment\")'])",
    # left to print later, when the data is written or the process ends (sweep 34 A-S3)
    "atexit": "import atexit; atexit.register(print, 'loading the arith experiment')",
    "thread": "import threading, time; threading.Thread(target=lambda: (time.sleep(0.5), "
              "print('loading the arith experiment'))).start()",
}


@pytest.mark.parametrize("how", sorted(PRINTED_AT_IMPORT))
def test_what_the_experiment_prints_on_import_stays_out_of_the_yaml(tmp_path, how):
    """A print() at the experiment module's top level went to standard output, where config
    writes the YAML: its first line was the print, exit 0 (sweep 32 A-S5); so did output
    written to file descriptor 1 by other means (sweep 33 A-S2), and output the module left
    to print later (sweep 34 A-S3)."""
    import shutil

    import yaml

    shutil.copytree(REPO / "examples" / "arith", tmp_path / "arith")
    source = tmp_path / "arith" / "experiment.py"
    source.write_text(source.read_text() + f"\n{PRINTED_AT_IMPORT[how]}\n")
    done = subprocess.run([sys.executable, "-m", "tunedsl", "config", "experiment:Arith"],
                          cwd=tmp_path / "arith", capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# A Trinity-RFT config written by tunedsl config")
    assert yaml.safe_load(done.stdout)["project"] == "tunedsl-examples"
    assert "loading the arith experiment" in done.stderr
    shown = subprocess.run([sys.executable, "-m", "tunedsl", "preview", "experiment:Arith",
                            "-n", "1"], cwd=tmp_path / "arith", capture_output=True, text=True,
                           timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert shown.returncode == 0, shown.stderr  # preview's JSON alone (sweep 33 A-S2)
    assert json.loads(shown.stdout)[0].keys() == {"question", "answer"}


def test_the_data_on_an_ascii_standard_output_reads_back_the_same(tmp_path):
    """``config > file`` and ``preview`` with an ASCII standard output (PYTHONIOENCODING=
    ascii, an old terminal) wrote text past ASCII as Python's ``\\xe9``: a YAML value that
    read back as other text (a data folder's name), JSON no parser reads (sweep 41 A-S2).
    The data is written in the format's own escapes."""
    import shutil

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    (project / "data").rename(project / "données")
    (project / "données" / "train.jsonl").write_text(
        '{"question": "1+1=", "answer": "2", "note": "déjà vu, 中文"}\n' * 4)

    def read(command, *args, encoding):
        done = subprocess.run([sys.executable, "-m", "tunedsl", command, "experiment:Arith",
                               "--set", "train_dataset.path=données", *args], cwd=project,
                              capture_output=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO),
                                   "PYTHONIOENCODING": encoding})
        assert done.returncode == 0, done.stderr
        return done.stdout.decode(encoding)

    for encoding in ("ascii", "latin-1"):
        config, utf_8 = (yaml.safe_load(read("config", encoding=chosen))
                         for chosen in (encoding, "utf-8"))
        assert {**config, "name": None} == {**utf_8, "name": None}  # (named by the time)
        assert config["buffer"]["explorer_input"]["taskset"]["path"] == str(project / "données")
        rows = json.loads(read("preview", "-n", "1", encoding=encoding))
        assert rows[0]["note"] == "déjà vu, 中文"


@pytest.mark.parametrize("command", ["config", "preview"])
def test_a_standard_output_that_cannot_take_the_data_is_said_in_one_line(tmp_path, command):
    """``config > /dev/full`` and ``preview >&-`` ended in "internal error in tunedsl" once
    the data went to a copy of standard output (sweep 35 A-T1)."""
    import shutil

    shutil.copytree(REPO / "examples" / "arith", tmp_path / "arith")
    run = functools.partial(subprocess.run, [sys.executable, "-m", "tunedsl", command,
                                             "experiment:Arith"],
                            cwd=tmp_path / "arith", stderr=subprocess.PIPE, text=True,
                            timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    with open("/dev/full", "w") as full:
        done = run(stdout=full)
    assert (done.returncode, done.stderr) == (1, (
        "Error: cannot write to standard output (No space left on device), so the command's "
        "data was not written whole\n"))
    closed = run(stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    assert (closed.returncode, closed.stderr) == (1, (
        "Error: standard output is closed, so the command's data has nowhere to go; give it "
        "a file (config -o FILE) or a pipe\n"))


def test_an_exit_the_module_arranges_for_the_end_keeps_the_command_s_failure(tmp_path):
    """``atexit.register(os._exit, 0)`` at the experiment's import (to stop threads that
    hang) made a failing check exit 0 after printing its error (sweep 35 A-S5)."""
    import shutil

    shutil.copytree(REPO / "examples" / "arith", tmp_path / "arith")
    source = tmp_path / "arith" / "experiment.py"
    source.write_text(source.read_text() + "\nimport atexit, os\natexit.register(os._exit, 0)\n")
    done = subprocess.run([sys.executable, "-m", "tunedsl", "check", "experiment:Arith",
                           "--set", "algorithm.batch_size=0"], cwd=tmp_path / "arith",
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and done.stderr.startswith("Error: "), done.stderr


@pytest.mark.parametrize("command", [["view", "hid/r.jsonl", "-o", "page.html"],
                                     ["rescore", "hid/r.jsonl", "examples.arith.experiment:Arith",
                                      "-o", "rescored.jsonl"]])
def test_a_path_in_a_folder_that_cannot_be_searched_is_said_in_one_line(tmp_path, command):
    """A results file in a folder whose mode lacks x: looking at it (Path.is_dir) was
    "internal error in tunedsl: PermissionError" in view, rescore, model selection,
    tune-prompt's -o and --checkpoint (sweep 40 B-02). Root ignores file permissions: the
    command runs without the capabilities that let it (setpriv)."""
    from .cli_support import REPO, unprivileged

    hidden = tmp_path / "hid"
    hidden.mkdir()
    (hidden / "r.jsonl").write_text('{"task_index": 0, "repeat": 0, "reward": 1.0}\n')
    hidden.chmod(0)
    try:
        done = subprocess.run([*unprivileged(), sys.executable, "-m", "tunedsl", *command],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        hidden.chmod(0o755)
    assert (done.returncode, done.stderr) == (2, (
        "Error: hid/r.jsonl: cannot use that path (Permission denied); make hid searchable "
        "(chmod u+rx hid), or give a path you can reach\n"))


def _arith_with_a_folder_hid(tmp_path):
    """A copy of the arith example whose ``hid/a`` holds its data and experiment too, for
    the tests that take the permissions of ``hid`` away."""
    import shutil

    from .cli_support import REPO

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    inner = project / "hid" / "a"
    shutil.copytree(project / "data", inner / "data")
    shutil.copy(project / "experiment.py", inner / "experiment.py")
    return project


def _run_with_hid_closed(project, command, mode):
    """``tunedsl COMMAND`` run from ``project`` while its ``hid`` has ``mode``, without the
    capabilities that let root pass permissions (``hid`` opened again afterwards)."""
    from .cli_support import REPO, unprivileged

    (project / "hid").chmod(mode)
    try:
        return subprocess.run([*unprivileged(), sys.executable, "-m", "tunedsl", *command],
                              cwd=project, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        (project / "hid").chmod(0o755)


@pytest.mark.parametrize("command, line", [
    (["config", "experiment:Arith", "-o", "hid/a/c.yaml"],
     "Error: -o hid/a/c.yaml: cannot use that path (Permission denied); make hid searchable "
     "(chmod u+rx hid), or give a path you can reach"),
    (["eval", "experiment:Arith", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "-o",
      "hid/a/r.jsonl"],
     "Error: -o hid/a/r.jsonl: cannot use that path (Permission denied); make hid searchable "
     "(chmod u+rx hid), or give a path you can reach"),
    (["check", "hid/a/experiment.py:Arith"],
     'Error: Could not import module "hid/a/experiment.py": hid cannot be searched, so nothing '
     'in it can be read; make hid searchable (chmod u+rx hid)'),
    (["check", "experiment:Arith", "--settings", "hid/a/t.toml"],
     "Error: hid/a/t.toml: cannot read the settings file: Permission denied; make hid "
     "searchable (chmod u+rx hid)"),
    (["preview", "experiment:Arith", "--set", "train_dataset.path=hid/a/data"],
     "Error: train_dataset: hid/a/data: hid cannot be searched, so nothing in it can be read; "
     "make hid searchable (chmod u+rx hid)"),
    (["check", "experiment:Arith", "--settings", "unreadable.toml"],
     "Error: unreadable.toml: cannot read the settings file: Permission denied; make it "
     "readable (chmod u+r unreadable.toml)")],
    ids=["config-o", "eval-o", "module", "settings", "data", "unreadable-settings"])
def test_a_path_that_permissions_keep_out_of_reach_names_the_chmod(tmp_path, command, line):
    """A path inside a folder whose mode lacks x read as missing (a module "no such file", a
    data folder "not a local path, so it would be read from the Hugging Face hub"), or was
    said with no folder to fix (sweep 41 A-W3, B-W2)."""
    project = _arith_with_a_folder_hid(tmp_path)
    (project / "hid" / "a" / "t.toml").write_text("")
    (project / "unreadable.toml").write_text("")
    (project / "unreadable.toml").chmod(0)
    done = _run_with_hid_closed(project, command, 0)
    assert (done.returncode, done.stderr.splitlines()[-1]) == (2, line), done.stderr


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a folder to another user")
@pytest.mark.parametrize("command", [["config", "experiment:Arith", "-o", "hid/a/c.yaml"],
                                     ["preview", "experiment:Arith", "--set",
                                      "train_dataset.path=hid/a/data"],
                                     ["check", "hid/a/experiment.py:Arith"]])
def test_a_folder_of_another_user_s_that_cannot_be_searched_names_its_owner(tmp_path,
                                                                             command):
    """``chmod u+rx`` changes only the owner's bits, which were not the ones stopping the
    user (sweep 44 A): the line names the owner, who can let others search it."""
    project = _arith_with_a_folder_hid(tmp_path)
    os.chown(project / "hid", 65534, 65534)
    done = _run_with_hid_closed(project, command, 0o700)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1].endswith(
        "make hid searchable: it belongs to nobody, who (or root) can let you (chmod o+rx hid)"
        + (", or give a path you can reach" if command[0] == "config" else "")), done.stderr


@pytest.mark.parametrize("args, said", [
    (("config", GOOD, "--set", "params.x=caf\udce9"), "--set 'params.x=caf\\xe9'"),
    (("eval", GOOD, "--base-url", "http://127.0.0.1:9/v1/\udcff", "--model", "m"),
     "--base-url 'http://127.0.0.1:9/v1/\\xff'"),
    (("eval", GOOD, "--base-url", "http://127.0.0.1:9/v1", "--model", "go\udcffod"),
     "--model 'go\\xffod'"),
    (("eval", GOOD, "--model", "m@http://127.0.0.1:9/\udcff/v1"),
     "--model 'm@http://127.0.0.1:9/\\xff/v1'")])
def test_an_option_in_bytes_that_are_not_utf8_is_named(args, said):
    """A Latin-1 terminal's ``café`` in --set reached every rollout, which failed on it (or
    trained with it); a ``\\xff`` in a URL crashed the HTTP client, an internal error
    (sweep 46 B-W4, B-T2). (Python hands such bytes on as lone surrogates; subprocess
    passes them back as the bytes.)"""
    result = run(*args)
    assert (result.returncode, result.stderr) == (2, (
        f"Error: {said}: holds bytes that are not UTF-8 (the terminal or script passed text "
        f"in another encoding, such as Latin-1); give it in UTF-8\n"))


def test_an_environment_variable_in_bytes_that_are_not_utf8_is_named():
    """``${env:NAME}`` of a variable set in Latin-1 reached the rollouts as lone
    surrogates, as an option's bytes did (sweep 46 B-W4's neighbour)."""
    env = {**environment(), "TUNEDSL_LATIN": "caf\udce9"}
    result = subprocess.run([sys.executable, "-m", "tunedsl", "config", GOOD, "--set",
                             "params.x=${env:TUNEDSL_LATIN}"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert (result.returncode, result.stderr) == (2, (
        "Error: --set: params.x: environment variable TUNEDSL_LATIN holds bytes that are not "
        "UTF-8 (text in another encoding, such as Latin-1); set it in UTF-8\n"))
