"""The one rule for every command's output file: never over what the command reads or what
the experiment is made of (`tunedsl.runs.outputs`)."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tunedsl.errors import ConfigError
from tunedsl.runs.outputs import Input, experiment_inputs, refuse_overwriting


def refusal(output, inputs):
    with pytest.raises(ConfigError) as caught:
        refuse_overwriting(output, "--out", inputs)
    return str(caught.value)


def test_a_file_reached_another_way_is_the_same_file(tmp_path, monkeypatch):
    results = tmp_path / "r.jsonl"
    results.write_text("x\n")
    os.symlink(results, tmp_path / "link.jsonl")
    monkeypatch.chdir(tmp_path)
    inputs = [Input("the results being viewed", str(results))]
    for output in ("link.jsonl", "./sub/../r.jsonl", str(results)):
        (tmp_path / "sub").mkdir(exist_ok=True)
        assert refusal(output, inputs) == (
            f"--out {output}: that is the results being viewed ({results}); tunedsl never "
            f"writes over what it reads, so give a file elsewhere")
    refuse_overwriting("other.html", "--out", inputs)  # anything else is fine


def test_a_run_directorys_files_are_kept_and_a_new_file_beside_them_is_not_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "rollouts.jsonl").write_text("x\n")
    inputs = [Input("the run directory being viewed", str(run))]
    assert refusal(run / "rollouts.jsonl", inputs) == (
        f"--out {run / 'rollouts.jsonl'}: that is a file of the run directory being viewed "
        f"({run}); tunedsl never writes over what it reads, so give a file elsewhere")
    refuse_overwriting(run / "page.html", "--out", inputs)


def test_nothing_is_written_inside_a_dataset_folder(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    inputs = [Input("eval_dataset's data", str(data), whole_folder=True)]
    assert refusal(data / "deep" / "new.yaml", inputs) == (
        f"--out {data / 'deep' / 'new.yaml'}: that is inside eval_dataset's data ({data}), "
        f"where a new file would join the data; give a file elsewhere")


def test_an_experiment_is_its_source_functions_settings_base_yaml_and_data(tmp_path):
    import tunedsl

    graph = tunedsl.load_experiment("examples.math_agent.experiment:MathAgent")
    found = {read.label: (read.path, read.whole_folder) for read in experiment_inputs(graph)}
    root = os.path.dirname(os.path.dirname(os.path.abspath(tunedsl.__file__)))
    folder = os.path.join(root, "examples", "math_agent")
    assert found["the experiment's source"] == (os.path.join(folder, "experiment.py"), False)
    assert found["the experiment's settings file"] == (os.path.join(folder, "tunedsl.toml"),
                                                       False)
    assert found["train_dataset's data"][1] is True
    assert any(label.startswith("the source of @workflow") for label in found)


def test_a_params_file_and_the_settings_it_goes_on_top_of_are_both_read(tmp_path):
    import tunedsl

    best = tmp_path / "best.toml"
    best.write_text('[params]\nsystem_prompt = "tuned"\n')
    target = "examples.math_agent.experiment:MathAgent"
    graph = tunedsl.load_experiment(target, settings=str(best))
    read = [item.path for item in experiment_inputs(graph, str(best))
            if item.label == "the experiment's settings file"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(tunedsl.__file__)))
    assert read == [os.path.join(root, "examples", "math_agent", "tunedsl.toml"), str(best)]


RESULTS_LINE = '{"task_index": 0, "repeat": 0, "reward": 1.0}\n'


def written_over(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("args, label, mark", [
    (["config", "examples.arith.experiment:Arith"], "a Trinity config",
     "# A Trinity-RFT config written by tunedsl config"),
    (["tune-prompt", "examples.math_agent.experiment:MathAgent", "--param", "system_prompt",
      "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--reflection-model", "r"],
     "a [params] settings file", "# tunedsl tune-prompt"),
])
@pytest.mark.parametrize("held", [RESULTS_LINE, "model: x\n", "print('code')\n",
                                  "[params]\nsystem_prompt = 1\n[model]\nx = 2\n"])
def test_an_output_never_replaces_a_file_of_another_kind(tmp_path, args, label, mark, held):
    """``-o`` over an eval's results, another YAML, code or a settings file with more than
    [params]: refused, exit 2, the file as it was."""
    from .cli_support import cli

    target = written_over(tmp_path, "target", held)
    done = cli(*args, "-o", target)
    assert done.returncode == 2, done.stderr
    first = held.splitlines()[0]
    # (removing it is no advice for a file that is no output of this kind: sweep 48 B-W3)
    assert done.stderr.strip().splitlines()[-1] == (
        f"Error: -o {target}: that file holds eval results; tunedsl never writes over it, so "
        f"give another path" if held == RESULTS_LINE else
        f"Error: -o {target}: that file is not {label} this command wrote (it lacks "
        f"tunedsl's mark {mark!r}; its first line: {first!r}); tunedsl replaces only a file "
        f"it wrote for this same output, so give another path")
    assert target.read_text() == held


def test_config_replaces_the_config_it_wrote_before_unless_it_was_edited(tmp_path):
    """A config tunedsl wrote is replaced; one edited by hand since (its mark kept) was
    replaced too, the edit lost (sweep 23 A-L1): its last line, a digest of the rest, tells."""
    from .cli_support import cli

    target = tmp_path / "trinity.yaml"
    assert cli("config", "examples.arith.experiment:Arith", "-o", target).returncode == 0
    written = target.read_text()
    assert written.splitlines()[-1].startswith("# tunedsl digest of the lines above: ")
    target.write_text(written.replace("project: tunedsl-examples", "project: staging"))
    target.with_name("before.yaml").write_text(target.read_text())
    done = cli("config", "examples.arith.experiment:Arith", "-o", target)
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: -o {target}: tunedsl wrote that file, but it was changed since (its last "
        f"line is not tunedsl's digest of the rest); tunedsl replaces only a file it wrote "
        f"that nobody changed, so give another path, or remove that file to replace it"))
    assert target.read_text() == target.with_name("before.yaml").read_text()
    target.write_text(written)  # as tunedsl wrote it: replaced
    assert cli("config", "examples.arith.experiment:Arith", "-o", target).returncode == 0
    assert "project: tunedsl-examples" in target.read_text()


@given(text=st.text(), at=st.integers(min_value=0), added=st.characters())
@example(text="# tunedsl digest of the lines above: 0", at=0, added="\n")
def test_a_sealed_file_is_whole_only_as_sealed(text, at, added):
    """`Written.seal` and `Written.edited` agree on any text (lone surrogates included),
    and a character added anywhere, or the last newline dropped, is seen."""
    from tunedsl.runs.outputs import TRINITY_YAML

    sealed = TRINITY_YAML.seal(text + "\n")
    assert not TRINITY_YAML.edited(sealed)
    at %= len(sealed)
    assert TRINITY_YAML.edited(sealed[:at] + added + sealed[at:])
    assert TRINITY_YAML.edited(sealed[:-1])


def test_a_page_is_never_written_over_results_it_does_not_show(tmp_path):
    """``view --out`` over a results file it does not show: refused, the file as it was."""
    from .cli_support import cli

    shown = written_over(tmp_path, "shown.jsonl", "")
    other = written_over(tmp_path, "other.jsonl", RESULTS_LINE)
    done = cli("view", shown, "-o", other)
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: -o {other}: that file holds eval results; tunedsl never writes over it, so "
        f"give another path"))
    assert other.read_text() == RESULTS_LINE


@pytest.mark.parametrize("linked, label", [
    ("data/train.jsonl", "train_dataset's data"),
    ("experiment.py", "the experiment's source"),
])
def test_an_output_that_is_a_hard_link_to_an_input_is_refused(tmp_path, linked, label):
    """``-o`` naming a second name (a hard link) of the data or the code: the same bytes,
    refused as the file itself is, and left as it was."""
    from .cli_support import REPO, cli

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__"))
    source = project / linked
    before = source.read_bytes()
    link = tmp_path / "link.out"
    os.link(source, link)
    done = cli("config", f"{project / 'experiment.py'}:Arith", "-o", link)
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: -o {link}: that is a hard link to {label} ({source}); tunedsl never writes "
        f"over what it reads, so give a file elsewhere"))
    assert source.read_bytes() == before


@pytest.mark.parametrize("args", [
    ["config", "examples.arith.experiment:Arith", "-o"],
    ["view", "RESULTS", "-o"],
    ["tune-prompt", "examples.math_agent.experiment:MathAgent", "--param", "system_prompt",
     "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--reflection-model", "r", "-o"],
])
def test_an_output_over_a_pipe_is_refused_and_the_pipe_kept(tmp_path, args):
    """A named pipe (or a device such as /dev/null) as ``-o``: the output is written
    beside it and renamed into place, which would replace it with a file; refused."""
    import stat

    from .cli_support import cli

    results = written_over(tmp_path, "r.jsonl", RESULTS_LINE)
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    argv = [str(results) if word == "RESULTS" else word for word in args]
    done = cli(*argv, pipe)
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: {argv[-1]} {pipe}: not a regular file (a device or a pipe), which writing "
        f"the output would replace; give a file"))
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)


@pytest.mark.parametrize("args", [
    ["config", "examples.arith.experiment:Arith", "-o"],
    ["view", "RESULTS", "-o"],
    ["rescore", "RESULTS", "examples.arith.experiment:Arith", "-o"],
    ["eval", "examples.arith.experiment:Arith", "--base-url", "http://127.0.0.1:9/v1",
     "--model", "m", "-o"],
])
def test_an_output_ending_in_a_slash_is_refused_as_a_folder(tmp_path, args):
    """``-o newdir/`` means a folder; the file was written under the name ``newdir``."""
    from .cli_support import cli

    results = written_over(tmp_path, "r.jsonl", RESULTS_LINE)
    argv = [str(results) if word == "RESULTS" else word for word in args]
    done = cli(*argv, f"{tmp_path / 'newdir'}/")
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: {argv[-1]} {tmp_path / 'newdir'}/: ends in '/', so it names a folder; give a "
        f"file, e.g. {tmp_path / 'newdir' / 'NAME'}"))
    assert not (tmp_path / "newdir").exists()


@pytest.mark.parametrize("args, option", [
    (["config", "examples.arith.experiment:Arith", "-o", ""], "-o/--output"),
    (["eval", "examples.arith.experiment:Arith", "--checkpoint", ""], "--checkpoint"),
    (["run", "examples.arith.experiment:Arith", "--resume", ""], "--resume"),
    (["view", "-o", "", "r.jsonl"], "-o/--output"),
])
def test_an_empty_path_is_refused_not_read_as_no_option(args, option):
    """``-o ''`` used to print the YAML to stdout (an empty name read as no option) or
    reach an internal error; every path option refuses it."""
    from .cli_support import cli

    done = cli(*args)
    command = args[0]
    assert (done.returncode, done.stderr.strip()) == (2, (
        f"Error: tunedsl {command}: argument {option}: give a file or folder name, not an "
        f"empty string; see tunedsl {command} --help"))


def test_a_page_of_a_run_is_never_written_into_the_runs_data(tmp_path):
    """``view RUN_DIR --out data/test.json``: the page would join the data the run (and any
    resume of it) reads, as ``eval -o`` into the data would; refused before anything is read."""
    from .cli_support import cli

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"question": "1+1=", "answer": "2"}\n')
    run_dir = tmp_path / "runs" / "Arith-20260101000000"
    run_dir.mkdir(parents=True)
    (run_dir / "experiment.yaml").write_text(f"name: Arith\ntrain_dataset:\n  path: {data}\n")
    done = cli("view", run_dir, "-o", data / "test.json")
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: -o {data / 'test.json'}: that is inside the run's train_dataset data "
        f"({data}), where a new file would join the data; give a file elsewhere"))
    assert sorted(p.name for p in data.iterdir()) == ["train.jsonl"]


def test_an_output_that_is_a_symbolic_link_loop_is_refused_in_one_line(tmp_path):
    """Path.resolve raised RuntimeError ("Symlink loop") on Python 3.11: an internal error
    in every command's output check, a bare RuntimeError from the Python API."""
    from tunedsl.errors import ConfigError
    from tunedsl.runs.outputs import refuse_overwriting

    from .cli_support import cli

    (tmp_path / "a.html").symlink_to(tmp_path / "b.html")
    (tmp_path / "b.html").symlink_to(tmp_path / "a.html")
    with pytest.raises(ConfigError) as caught:
        refuse_overwriting(tmp_path / "a.html", "output", [])
    assert str(caught.value) == (f"output={str(tmp_path / 'a.html')!r}: a symbolic link that "
                                 f"loops (itself, or a folder on its way); give a file")
    done = cli("config", "examples.arith.experiment:Arith", "-o", str(tmp_path / "a.html"))
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: -o {tmp_path / 'a.html'}: a symbolic link that loops (itself, or a folder "
        f"on its way); give a file"))


def test_an_experiment_a_function_made_can_be_evaluated_and_written(tmp_path):
    """``Hot = make(1.0)`` (a class made inside a function) passed check and run, but eval
    and ``config -o`` re-imported it by its inner name (make.<locals>.X) to find its source
    file, which failed with a name the user never typed; its module's file is protected
    instead, and both work."""
    from .cli_support import cli
    from .openai_server import OpenAIServer

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"question": "1+1", "answer": "2"}\n' * 2)
    (tmp_path / "made.py").write_text(
        "from tunedsl import Algorithm, Dataset, JudgeOutput, Model, WorkflowOutput, "
        "experiment, judge, workflow\n"
        "@workflow\n"
        "async def add(task, model):\n"
        "    reply = await model.chat([{'role': 'user', 'content': task['question']}])\n"
        "    return WorkflowOutput(response=reply.content)\n"
        "@judge\n"
        "async def exact(task, response):\n"
        "    return JudgeOutput(reward=float(response.strip() == task['answer']))\n"
        "def make(temperature):\n"
        "    @experiment\n"
        "    class X:\n"
        "        workflow = add\n"
        "        judge = exact\n"
        "        train_dataset = Dataset('data')\n"
        "        model = Model('m', max_model_len=32, temperature=temperature)\n"
        "        algorithm = Algorithm('grpo', group_size=2, batch_size=2)\n"
        "    return X\n"
        "Hot = make(1.0)\n")
    written = cli("config", f"{tmp_path / 'made.py'}:Hot", "-o", str(tmp_path / "c.yaml"))
    assert written.returncode == 0, written.stderr
    over = cli("config", f"{tmp_path / 'made.py'}:Hot", "-o", str(tmp_path / "made.py"))
    assert over.returncode == 2 and "the experiment's source" in over.stderr
    with OpenAIServer(lambda messages: "2") as server:
        done = cli("eval", f"{tmp_path / 'made.py'}:Hot", "--base-url", server.base_url,
                   "--model", "m", "-o", str(tmp_path / "r.jsonl"), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "reward       mean 1.0000" in done.stdout


@pytest.mark.parametrize("args, name, writes, ending", [
    (["config", "examples.arith.experiment:Arith", "-o"], "tunedsl.toml",
     "config writes the Trinity config as YAML", ".yaml"),
    (["view", "RESULTS", "-o"], "page.md", "view writes an HTML page", ".html"),
    (["rescore", "RESULTS", "examples.arith.experiment:Arith", "-o"], "again.yaml",
     "rescore writes results as JSON Lines", ".jsonl"),
    (["eval", "examples.arith.experiment:Arith", "--base-url", "http://127.0.0.1:9/v1",
      "--model", "m", "-o"], "tunedsl.toml", "eval writes its results as JSON Lines", ".jsonl"),
    (["tune-prompt", "examples.math_agent.experiment:MathAgent", "--param", "system_prompt",
      "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--reflection-model", "r", "-o"],
     "best.yaml", "tune-prompt writes the best params as TOML", ".toml"),
    (["tune-prompt", "examples.math_agent.experiment:MathAgent", "--param", "system_prompt",
      "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--reflection-model", "r",
      "--candidates"], "cands.csv", "tune-prompt keeps its candidates as JSON Lines", ".jsonl"),
])
def test_an_output_named_as_a_file_of_another_format_is_refused(tmp_path, args, name, writes,
                                                                 ending):
    """Every output is named by the format it writes: ``eval -o tunedsl.toml`` wrote results
    where the next command reads its settings (sweep 49's known list); config and view
    refused such names, and eval, rescore and tune-prompt did not."""
    from .cli_support import cli

    results = written_over(tmp_path, "r.jsonl", RESULTS_LINE)
    argv = [str(results) if word == "RESULTS" else word for word in args]
    output = tmp_path / name
    done = cli(*argv, output)
    option = argv[-1]
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: {option} {output}: {writes}, which that name would misname; give a {ending} "
        f"name, e.g. {option} {output.with_suffix(ending)}"))
    assert not output.exists()


@pytest.mark.parametrize("args, default", [
    (["eval", "EXP", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"], "evals"),
    (["tune-prompt", "EXP", "--param", "system_prompt", "--base-url",
      "http://127.0.0.1:9/v1", "--model", "m", "--reflection-model", "r"], "prompts"),
])
def test_a_default_output_that_cannot_be_written_is_said_as_the_default(tmp_path, args,
                                                                         default):
    """eval's default results file, in a folder it cannot write, was said as "-o
    evals/...", an option the user never gave (sweep 50 B-W5)."""
    from .cli_support import REPO, cli_while_closed

    shutil.copytree(REPO / "examples" / "math_agent", tmp_path / "math")
    folder = tmp_path / "math" / default
    folder.mkdir()
    argv = ["experiment.py:MathAgent" if word == "EXP" else word for word in args]
    done = cli_while_closed(folder, 0o500, *argv, cwd=tmp_path / "math")
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2, done.stderr
    assert last.startswith(f"Error: the default output (no -o) {default}/MathAgent-")
    assert last.endswith(": cannot write it (Permission denied); choose a file in a folder "
                         "you can write")


METRICS_LINE = '{"step": 1, "rollout/reward/mean": 0.25, "train/samples": 4.0}\n'
TRAINER_STATE = '{"step": 1, "seed": 42, "total_steps": 2}\n'
USERS_LOG = '{"step": 3, "loss": 0.5}\n'


@pytest.mark.parametrize("held, said", [
    (METRICS_LINE, "a run's metrics (its metrics.jsonl)"),
    # both were said as a run's metrics: any object with a step was (sweep 50 B-W3)
    (TRAINER_STATE, "a checkpoint's trainer state (its trainer_state.json)"),
    (USERS_LOG, None),
])
@pytest.mark.parametrize("command", ["eval", "rescore", "view"])
def test_an_output_over_a_file_that_holds_a_run_s_or_the_user_s_data_says_which(
        tmp_path, held, said, command):
    """What such a file holds is said before its name is (a trainer_state.json given to
    eval was told to take a .jsonl name)."""
    from .cli_support import cli

    results = written_over(tmp_path, "r.jsonl", RESULTS_LINE)
    target = written_over(tmp_path, "state.json", held)
    args = {"eval": ["eval", "examples.arith.experiment:Arith", "--base-url",
                     "http://127.0.0.1:9/v1", "--model", "m"],
            "rescore": ["rescore", results, "examples.arith.experiment:Arith"],
            "view": ["view", results]}[command]
    done = cli(*args, "-o", target)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2
    if command == "view":
        assert last == (f"Error: -o {target}: that file holds {said}; tunedsl never writes "
                        f"over it, so give another path" if said else
                        f"Error: -o {target}: that file is not an HTML page this command "
                        f"wrote (it lacks tunedsl's mark '<meta name=\"generator\" "
                        f"content=\"tunedsl view\">'; its first line: {held.strip()!r}); "
                        f"tunedsl replaces only a file it wrote for this same output, so give "
                        f"another path")
    else:
        shown = said or f"something else (its first line: {held.strip()!r})"
        assert last == (f"Error: -o {target} holds {shown}, not eval results; tunedsl never "
                        f"writes over it, so give another file")
    assert target.read_text() == held


@pytest.mark.parametrize("blocker", ["file", "dangling link"])
@pytest.mark.parametrize("models", [["m"], ["m", "n"]], ids=["eval", "selection"])
def test_a_default_output_folder_that_is_a_file_is_said_not_looped_on(tmp_path, models,
                                                                     blocker):
    """``./evals`` a file: claiming a default name took its FileExistsError for "this name
    is taken" and tried -2, -3, ... without end, at full CPU (sweep 50 A-W12). A link to
    nowhere was said as "File exists" (sweep 50's known list)."""
    from .cli_support import REPO, cli_process

    shutil.copytree(REPO / "examples" / "arith", tmp_path / "arith")
    evals = tmp_path / "arith" / "evals"
    if blocker == "file":
        evals.write_text("notes\n")
    else:
        evals.symlink_to(tmp_path / "gone")
    done = cli_process("eval", "experiment.py:Arith", "--base-url", "http://127.0.0.1:9/v1",
                       *[part for model in models for part in ("--model", model)],
                       cwd=tmp_path / "arith", timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2
    assert last.startswith("Error: the default output (no -o) evals/Arith-")
    if blocker == "file":
        assert last.endswith(": evals is a file, not a folder; give a file in a folder")
        assert evals.read_text() == "notes\n"
    else:
        assert last.endswith(f": cannot write it (evals is a link to {tmp_path / 'gone'}, "
                             f"which does not exist); choose a file in a folder you can write")
        assert not (tmp_path / "gone").exists()
