"""A local run (run.py): its run directory, Ctrl-C and resume, the checkpoints kept, the
end-of-run summary, and runs that stop."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import tunedsl  # noqa: E402
from tunedsl.backends.local.summary import print_summary  # noqa: E402
from tunedsl.errors import ConfigError  # noqa: E402

from .cli_support import cli, unprivileged  # noqa: E402
from .local_support import (  # noqa: E402
    AGENTS,
    REPO,
    SMALL_TWO_CALLS,
    decorated_at,
    graph_for,
    interrupted_and_resumed,
    load_weights,
    run_local,
)


@pytest.mark.parametrize("name, overrides", [("Arith", ()), ("TwoCalls", SMALL_TWO_CALLS)])
def test_interrupted_and_resumed_run_ends_with_the_same_weights(tiny_model, tmp_path, name,
                                                                overrides):
    """Ctrl-C after step 2 saves a checkpoint; resuming reaches the uninterrupted weights
    (with two calls per trajectory, the second reusing the first's KV cache)."""
    straight, resumed, interruption = interrupted_and_resumed(tiny_model, tmp_path,
                                                              *overrides, name=name)
    assert "interrupted at step 2" in str(interruption) and \
        f"resume='{resumed.run_dir}'" in str(interruption)
    assert resumed.steps == 4
    expected, got = load_weights(straight.checkpoint), load_weights(resumed.checkpoint)
    assert all(torch.allclose(expected[k], got[k], atol=1e-6) for k in expected)
    # the summary is the whole run's, as the uninterrupted one's, and says what this session ran
    assert (resumed.first_step, len(resumed.rewards)) == (2, 4)
    assert resumed.rewards == pytest.approx(straight.rewards, abs=1e-6)
    assert resumed.eval_rewards == pytest.approx(straight.eval_rewards, abs=1e-6)
    shown = io.StringIO()
    print_summary(resumed, shown)
    assert "steps          4 (2 this session, resumed after step 2) in " in shown.getvalue()


def test_cli_run_reports_bad_input_in_one_line(tmp_path):
    """`tunedsl run --backend local` with a missing model exits 2 with one Error line."""
    done = cli("run", f"{AGENTS}:Arith", "--backend", "local", "--set",
               f"model.model_path={tmp_path / 'nope'}", "--set", f"checkpoint_root_dir={tmp_path}")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].startswith("Error: model.model_path: ")
    assert "Traceback" not in done.stderr


def test_a_step_whose_every_rollout_fails_stops_the_run_with_the_first_error(tiny_model,
                                                                             tmp_path):
    """Nothing to learn from: exit 1 with the first error; the step's lines are written."""
    from tests.fixtures.local import agents
    from tunedsl.errors import RunError

    agents._CALLS["count"] = 0
    with pytest.raises(RunError) as info:
        run_local(graph_for("GoesAway", tiny_model, tmp_path), progress=False)
    [run_dir] = (tmp_path / "tunedsl").iterdir()
    assert str(info.value) == (
        "step 1: every rollout failed, so there is nothing to learn from; the first error: "
        f"@workflow fails_after_preflight (tests/fixtures/local/agents.py:"
        f"{decorated_at('fails_after_preflight')}) raised "
        "RuntimeError: the service went away; all of them in "
        f"{run_dir / 'log' / 'rollouts.log'}")
    lines = (run_dir / "rollouts.jsonl").read_text().splitlines()
    assert len(lines) == 20 and all(json.loads(line)["error"] for line in lines)


def test_a_run_directory_being_written_cannot_be_resumed_by_another_process(tiny_model,
                                                                            tmp_path):
    """While one process holds a run directory, a --resume of it is refused, naming it."""
    import os

    from tunedsl.errors import ConfigError
    from tunedsl.runs.rundir import locked

    summary = run_local(graph_for("Arith", tiny_model, tmp_path, "train_dataset.total_steps=1"),
                        progress=False)
    graph = graph_for("Arith", tiny_model, tmp_path, "train_dataset.total_steps=2")
    with locked(summary.run_dir):  # as the first process holds it while it writes
        with pytest.raises(ConfigError) as info:
            run_local(graph, resume=summary.run_dir, progress=False)
    assert str(info.value) == (f"run directory {summary.run_dir} is being written by process "
                               f"{os.getpid()}; wait for it to end (or stop it) before resuming")
    assert run_local(graph, resume=summary.run_dir, progress=False).steps == 2  # free again


def test_resuming_after_a_crash_runs_again_the_steps_past_the_checkpoint_once(tiny_model,
                                                                             tmp_path):
    """A process killed after logging steps 3 and 4 but before saving them: the resume drops
    their lines and runs them again, so each step is in metrics.jsonl and rollouts.jsonl once."""
    import shutil

    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.save_interval_steps=2")
    run_dir = run_local(graph, progress=False).run_dir
    shutil.rmtree(run_dir / "global_step_4")  # as if killed before the last save
    run_local(graph, resume=run_dir, progress=False)
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text()
             .splitlines() if "loss" in line]
    assert steps == [1, 2, 3, 4]
    logged = [json.loads(line)["step"] for line in (run_dir / "rollouts.jsonl").read_text()
              .splitlines()]
    assert logged == sorted(logged) and set(logged) == {1, 2, 3, 4} and len(logged) == 4 * 20


def test_resuming_a_finished_run_adds_nothing_to_its_metrics(tiny_model, tmp_path):
    """A resume of a run that trained all its steps trains nothing and writes nothing: its
    last evaluation is not logged a second time for the same step."""
    import tunedsl

    graph = tunedsl.load_experiment("examples.arith.experiment:Arith", overrides=[
        f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}",
        "model.max_model_len=32", "model.max_tokens=1", "train_dataset.total_steps=2",
        "algorithm.group_size=2", "algorithm.batch_size=2"])
    run_dir = run_local(graph, progress=False).run_dir
    before = (run_dir / "metrics.jsonl").read_text()
    assert '"eval/' in before.splitlines()[-1]  # the run's last evaluation, at step 2
    for _ in range(2):
        run_local(graph, resume=run_dir, progress=False)
    assert (run_dir / "metrics.jsonl").read_text() == before


def test_a_failed_preflight_shows_a_huge_first_task_abbreviated(tiny_model, tmp_path):
    """A first task of megabytes is shown by its start and its length, not whole on one line
    of stderr (a 20 MB task printed 20 MB)."""
    from tunedsl.errors import PreflightFailed

    data = tmp_path / "data"
    data.mkdir()
    question = "1+1=" + " " * 100_000
    rows = [{"question": question, "answer": "2"}] * 5
    (data / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    graph = graph_for("Refuses", tiny_model, tmp_path, f"train_dataset.path={data}")
    with pytest.raises(PreflightFailed) as caught:
        run_local(graph, progress=False)
    message = str(caught.value)
    shown = str({"question": question, "answer": "2"})
    assert message.startswith(f"before training, on the first training task ({shown[:300]}... "
                              f"({len(shown)} characters)): @workflow refuses "), message[:600]
    assert len(message) < 1000


def test_only_the_newest_checkpoints_and_the_best_are_kept_when_asked(tiny_model, tmp_path):
    """keep_checkpoints=2 keeps the newest two; keep_best_checkpoint also the best-evaluated."""
    graph = graph_for("Arith", tiny_model, tmp_path, "train_dataset.total_steps=6",
                      "algorithm.save_interval_steps=1", "algorithm.keep_checkpoints=2",
                      "algorithm.keep_best_checkpoint=true",
                      f"eval_dataset.path={REPO / 'examples/arith/data'}",
                      "eval_dataset.split=test", "algorithm.eval_interval_steps=1")
    summary = run_local(graph, progress=False)
    evals = {row["step"]: row["eval/eval/reward/mean@1"] for row in (
        json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text()
        .splitlines()) if "eval/eval/reward/mean@1" in row and row["step"] >= 1}
    best = max((reward, step) for step, reward in evals.items())[1]
    kept = sorted(int(p.name.split("_")[-1]) for p in summary.run_dir.glob("global_step_*"))
    assert kept == sorted({5, 6, best})


def test_the_summary_names_the_command_that_shows_the_rollouts(tiny_model, tmp_path):
    """The end-of-run summary ends with the `tunedsl view` command for the run directory,
    and that directory is one the viewer reads."""
    import io

    from tunedsl.backends.local.summary import print_summary
    from tunedsl.view import open_source

    graph = graph_for("Arith", tiny_model, tmp_path, "train_dataset.total_steps=2")
    summary = run_local(graph, progress=False)
    out = io.StringIO()
    print_summary(summary, out)
    assert out.getvalue().splitlines()[-1] == f"rollouts       tunedsl view {summary.run_dir}"
    source = open_source(summary.run_dir)
    per_step = graph.algorithm.batch_size * graph.algorithm.group_size
    assert (source.kind, len(source.entries)) == ("run", 2 * per_step)


def test_local_preflight_failure_leaves_no_run_folder(tmp_path, tiny_model):
    """A batch larger than the data is refused and nothing is left behind."""
    done = cli("run", "tests.fixtures.local.agents:Arith", "--backend", "local", "--set",
               f"model.model_path={tiny_model}", "--set", f"checkpoint_root_dir={tmp_path / 'c'}",
               "--set", "algorithm.batch_size=500")
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: train_dataset: {REPO}/examples/arith/data (split 'train') has 45 rows, fewer "
        f"than algorithm.batch_size = 500, so not one training step can be filled; lower "
        f"batch_size or add tasks"))
    assert not list((tmp_path / "c").rglob("experiment.yaml"))


def test_a_disk_that_fills_as_the_run_directory_is_made_leaves_none(tmp_path, tiny_model,
                                                                       small_disk):
    """A full disk while the run's files were written left a half-made run directory,
    which a --resume took for the newest run, then missed files "tunedsl wrote when the run
    started" (sweep 44 B-W2): the line names what could not be written, and no run
    directory is left."""
    disk = small_disk("8k")
    done = cli("run", "tests.fixtures.local.agents:Arith", "--backend", "local", "--set",
               f"model.model_path={tiny_model}", "--set", f"checkpoint_root_dir={disk}")
    assert done.returncode == 2, done.stderr
    assert "cannot write it (No space left on device; 0.0 MB free on its device); choose a " \
           "checkpoint_root_dir on a device with room that you can write" in \
           done.stderr.splitlines()[-1], done.stderr
    assert [path.name for path in disk.rglob("*")] == ["tunedsl"]
    resumed = cli("run", "tests.fixtures.local.agents:Arith", "--backend", "local", "--set",
                  f"model.model_path={tiny_model}", "--set", f"checkpoint_root_dir={disk}",
                  "--resume")
    assert resumed.returncode == 2
    assert "has no run to continue" in resumed.stderr.splitlines()[-1], resumed.stderr


def test_unsupported_algorithm_points_to_trinity(tiny_model, tmp_path):
    """PPO needs a critic: the local backend says so and names the alternative."""
    graph = graph_for("Arith", tiny_model, tmp_path, 'algorithm.algorithm_type="ppo"')
    with pytest.raises(ConfigError, match="the local backend runs grpo, multi_step_grpo, "
                                          "dapo, .*, on_policy_distill, sft; use backend='trinity' for the others"):
        run_local(graph, progress=False)


def test_a_reasoning_parser_the_local_backend_cannot_read_is_refused_at_start(tiny_model,
                                                                             tmp_path):
    """Only the parsers it reads run locally: the rest are named, with the choices."""
    with pytest.raises(ConfigError) as info:
        run_local(graph_for("Arith", tiny_model, tmp_path, "model.reasoning_parser=granite"),
                  progress=False)
    assert str(info.value) == (
        "model.reasoning_parser = 'granite': the local backend reads deepseek_r1 and qwen3 (as "
        "vLLM's parsers of those names do); use one of them, or backend='trinity'")


def test_ctrl_c_while_rollouts_wait_to_begin_leaves_none_never_awaited(tiny_model, tmp_path):
    """An interrupt as a step's first rollout begins leaves the other nineteen waiting: they
    are cancelled and closed, so Python has no "coroutine ... was never awaited" or "Task was
    destroyed but it is pending" to print after the line that says how to resume."""
    from .cli_support import cli_started

    running = cli_started("run", f"{AGENTS}:InterruptedInStepTwo", "--backend", "local",
                          "--no-progress", "--set", f"model.model_path={tiny_model}", "--set",
                          f"checkpoint_root_dir={tmp_path}", stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    _, stderr = running.communicate(timeout=180)
    assert running.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("Error: interrupted at step 1; saved "), \
        stderr[-3000:]


@pytest.mark.parametrize("handler", ["default", "the script's own"])
def test_sigterm_to_a_script_calling_tunedsl_run_saves_the_run(tiny_model, tmp_path, handler):
    """tunedsl.run in a user's script handles SIGTERM as the command does: the run saves a
    checkpoint and raises RunInterrupted (the script was killed, losing its steps). A
    script with a Ctrl-C handler of its own: SIGTERM is not handed to it (its handler
    printed, the run went on, and the scheduler's SIGKILL lost every step)."""
    import signal
    import sys

    from .cli_support import REPO, stopped_when

    script = tmp_path / "train.py"
    own = ("import signal\nsignal.signal(signal.SIGINT, lambda *_: print('got SIGINT'))\n"
           if handler != "default" else "")
    script.write_text(
        "import sys\nimport tunedsl\n" + own +
        "try:\n"
        f"    tunedsl.run('{AGENTS}:Arith', backend='local', progress=False, overrides=[\n"
        f"        'model.model_path={tiny_model}', 'checkpoint_root_dir={tmp_path}',\n"
        "        'train_dataset.total_steps=400'])\n"
        "except tunedsl.RunInterrupted as stopped:\n"
        "    print(stopped)\n    sys.exit(130)\n")
    import os

    running = subprocess.Popen([sys.executable, str(script)], cwd=REPO, text=True,
                               env={**os.environ, "PYTHONPATH": str(REPO)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = stopped_when(running, lambda: any(
        len(path.read_text().splitlines()) >= 2 for path in tmp_path.rglob("metrics.jsonl")),
        signal.SIGTERM, timeout=180)
    assert running.returncode == 130, stderr[-3000:]
    assert stdout.startswith("interrupted at step "), stdout
    assert "got SIGINT" not in stdout
    assert any(tmp_path.rglob("global_step_*"))


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_ends_a_local_run_as_ctrl_c_does(tiny_model, tmp_path, sigint):
    """SIGTERM (a scheduler, `kill`, a container stopping) mid-run: exit 130, a checkpoint
    of the last whole step saved, and the one line that says how to resume (it was killed
    outright, losing the steps since the last save). A background job of a script starts
    with Ctrl-C ignored: SIGTERM saves it all the same (it was killed silently)."""
    import signal

    from .cli_support import cli_started, stopped_when

    running = cli_started("run", f"{AGENTS}:Arith", "--backend", "local", "--no-progress",
                          "--set", f"model.model_path={tiny_model}", "--set",
                          f"checkpoint_root_dir={tmp_path}", "--set",
                          "train_dataset.total_steps=400", stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE,
                          sigint={"default": signal.SIG_DFL, "ignored": signal.SIG_IGN}[sigint])
    _, stderr = stopped_when(running, lambda: any(len(path.read_text().splitlines()) >= 2
                                                  for path in tmp_path.rglob("metrics.jsonl")),
                             signal.SIGTERM, timeout=180)
    last = stderr.strip().splitlines()[-1]
    assert running.returncode == 130, stderr[-3000:]
    assert last.startswith("Error: interrupted at step ") and "; resume with: " in last, last
    assert any(tmp_path.rglob("global_step_*"))


def test_a_terminal_that_closes_saves_a_local_run_as_sigterm_does(tiny_model, tmp_path):
    """The run's terminal closes (an SSH session drops): the kernel sends SIGHUP, and every
    write to the terminal fails from then on. The run saves its last whole step as on
    SIGTERM (it was killed, losing the steps since the last save) and resumes from it."""
    import fcntl
    import os
    import select
    import sys
    import termios
    import time

    from .cli_support import REPO

    terminal, its_end = os.openpty()

    def on_that_terminal() -> None:  # a login shell's job: its session's terminal
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    running = subprocess.Popen(
        [sys.executable, "-m", "tunedsl", "run", f"{AGENTS}:Arith", "--backend", "local",
         "--set", f"model.model_path={tiny_model}", "--set", f"checkpoint_root_dir={tmp_path}",
         "--set", "train_dataset.total_steps=100000"], cwd=REPO, stdin=its_end,
        stdout=its_end, stderr=its_end, preexec_fn=on_that_terminal,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    os.close(its_end)
    try:
        deadline = time.monotonic() + 180
        while not any(len(path.read_text().splitlines()) >= 3
                      for path in tmp_path.rglob("metrics.jsonl")):
            assert running.poll() is None and time.monotonic() < deadline
            if select.select([terminal], [], [], 0.1)[0]:
                os.read(terminal, 1 << 16)  # the progress bar, as a terminal shows it
        os.close(terminal)  # the terminal hangs up
        assert running.wait(timeout=120) == 130
    finally:
        running.kill()
    [run_dir] = {path.parent for path in tmp_path.rglob("metrics.jsonl")}
    [saved] = [path.name for path in run_dir.glob("global_step_*")]
    step = int(saved.rpartition("_")[2])
    resumed = cli("run", f"{AGENTS}:Arith", "--resume", run_dir, "--backend", "local",
                  "--no-progress", "--set", f"model.model_path={tiny_model}", "--set",
                  f"checkpoint_root_dir={tmp_path}", "--set",
                  f"train_dataset.total_steps={step + 1}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    steps = [json.loads(line)["step"] for line in
             (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, step + 2))  # each step once: none lost, none twice


def interrupted_at(call: str, nth: int, overrides: list[str], tmp_path: Path) -> Path:
    """Run ``tunedsl.run`` in a script that sends itself Ctrl-C as the ``nth`` call of
    ``call`` (``"torch.optim.AdamW.step"``) begins; the run directory it says to resume."""
    import os
    import sys

    from .cli_support import REPO

    owner, _, name = call.rpartition(".")
    module, _, cls = owner.rpartition(".")
    script = tmp_path / "train.py"
    script.write_text(
        "import os, signal, sys\n"
        "import tunedsl\n"
        f"from {module} import {cls}\n"
        f"real, calls = {cls}.{name}, []\n"
        "def interrupting(*args, **kwargs):\n"
        "    calls.append(1)\n"
        f"    if len(calls) == {nth}:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(*args, **kwargs)\n"
        f"{cls}.{name} = interrupting\n"
        "try:\n"
        f"    tunedsl.run('{AGENTS}:Arith', backend='local', progress=False,\n"
        f"                overrides={overrides!r})\n"
        "except tunedsl.RunInterrupted as stopped:\n"
        "    print(stopped.run_dir)\n"
        "    sys.exit(130)\n")
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 130, done.stderr[-3000:]
    return Path(done.stdout.strip())


def test_ctrl_c_inside_a_weight_update_ends_the_step_then_saves_it(tiny_model, tmp_path):
    """Ctrl-C landing inside the optimizer's step saved half-updated weights (or an
    optimizer state a resume could not read, KeyError 'exp_avg'): the step ends whole, is
    recorded, saved, and the resume goes on from it."""
    overrides = [f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path / 'c'}",
                 "train_dataset.total_steps=3", "algorithm.save_interval_steps=100"]
    run_dir = interrupted_at("torch.optim.AdamW.step", 2, overrides, tmp_path)
    assert sorted(path.name for path in run_dir.glob("global_step_*")) == ["global_step_2"]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text()
             .splitlines() if "actor/lr" in line]
    assert steps == [1, 2]
    summary = tunedsl.run(f"{AGENTS}:Arith", backend="local", progress=False,
                          resume=str(run_dir), overrides=overrides)
    assert (summary.first_step, summary.steps) == (2, 3)


@pytest.mark.parametrize("interval, nth, saved, note", [
    (1, 1, 0, None), (1, 2, 1, None),
    (2, 3, 3, "note: the evaluation of step 3, which the interrupt cut, is made now")],
    ids=["step-0 evaluation", "step-1 evaluation", "last evaluation"])
def test_ctrl_c_as_an_evaluation_begins_is_made_up_by_the_resume(interval, nth, saved, note,
                                                                 tiny_model, tmp_path, capsys):
    """Interrupted as the evaluation after step 1 began, the run saved step 1 and its
    resume went on without it (evaluations at 0, 2, 3); interrupted before step 1, the
    resume evaluated step 0 again; interrupted in the last one, after the last step, the
    resume said the run had finished and never made it. Each evaluation is in
    metrics.jsonl once, and the resume from global_step_0 does not say the run had no
    checkpoint (it said so, and that it would replace what it recorded)."""
    from .cli_support import REPO

    overrides = [f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path / 'c'}",
                 "train_dataset.total_steps=3", f"algorithm.eval_interval_steps={interval}",
                 f"eval_dataset.path={REPO / 'examples/arith/data'}", "eval_dataset.split=test"]
    run_dir = interrupted_at("tunedsl.backends.local.trainer.LocalTrainer.evaluate", nth,
                             overrides, tmp_path)
    assert f"global_step_{saved}" in [path.name for path in run_dir.glob("global_step_*")]
    summary = tunedsl.run(f"{AGENTS}:Arith", backend="local", progress=False,
                          resume=str(run_dir), overrides=overrides)
    assert (summary.first_step, summary.steps) == (saved, 3)
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes[-1:] == ([note] if note else [])
    evaluated = [row["step"] for row in map(json.loads, (run_dir / "metrics.jsonl")
                                            .read_text().splitlines())
                 if any(key.startswith("eval/") for key in row)]
    assert evaluated == list(range(0, 3, interval)) + [3]


def test_a_run_that_trains_nothing_says_so(tiny_model, tmp_path, capsys):
    """dapo drops a group whose rewards all agree and masks replies cut by max_tokens; a run
    where that leaves no token in any step exited 0 with the usual summary and the starting
    weights. It ends with a warning naming the steps and the settings that cause it."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"question": "1+1"}\n' * 4)
    (tmp_path / "same.py").write_text(
        "from tunedsl import Algorithm, Dataset, Model, WorkflowOutput, experiment, workflow\n"
        "@workflow\n"
        "async def same(task, model):\n"
        "    reply = await model.chat([{'role': 'user', 'content': task['question']}])\n"
        "    return WorkflowOutput(response=reply.content, reward=1.0)\n"
        "@experiment\n"
        "class Same:\n"
        "    workflow = same\n"
        "    train_dataset = Dataset('data', total_steps=2)\n"
        f"    model = Model({str(tiny_model)!r}, max_model_len=32, max_tokens=2)\n"
        "    algorithm = Algorithm('dapo', group_size=2, batch_size=2)\n")
    tunedsl.run(f"{tmp_path / 'same.py'}:Same", backend="local", progress=False,
                overrides=[f"checkpoint_root_dir={tmp_path / 'c'}"])
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("warning: every step trained nothing")]
    assert warnings == [
        "warning: every step trained nothing: no reply was left to learn from (metrics.jsonl's "
        "rollout/masked: replies cut by max_tokens, masked by on_truncated_reply = 'mask', "
        "dapo's default; rollout/groups_skipped: groups whose rewards all agree, dropped by "
        "std_threshold); raise model.max_tokens, set algorithm.on_truncated_reply = 'train', "
        "or vary the rewards"]


def test_a_resume_under_another_name_says_which_to_give(tiny_model, tmp_path):
    """A run started with --set name=... and resumed without it: the run's own functions
    under that name, so the fix is that name (sweep 16 W6); another experiment's run is
    refused as such."""
    from tunedsl.errors import ConfigError

    common = [f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}",
              "train_dataset.total_steps=1"]
    target = "tests.fixtures.local.agents:Arith"
    tunedsl.run(target, backend="local", progress=False, overrides=[*common, "name=renamed"])
    [run_dir] = (tmp_path / "tunedsl").iterdir()
    with pytest.raises(ConfigError) as raised:
        tunedsl.run(target, backend="local", progress=False, resume=run_dir, overrides=common)
    assert str(raised.value) == (
        f"resume={str(run_dir)!r}: that run is of experiment 'renamed', not 'Arith'; it ran "
        f"these functions under that name: resume with overrides item name=renamed")
    with pytest.raises(ConfigError) as raised:  # other functions: another experiment's run
        tunedsl.run("tests.fixtures.local.agents:Flaky", backend="local", progress=False,
                    resume=run_dir, overrides=common)
    assert str(raised.value) == (
        f"resume={str(run_dir)!r}: that run is of experiment 'renamed', not 'Flaky'; resume "
        f"it with the experiment that started it")


def test_resume_alone_continues_the_newest_run_of_the_experiment(tiny_model, tmp_path,
                                                                 capsys):
    """``run --resume`` with no directory (``resume=True``) continues the newest run
    directory of this experiment, as ``eval --resume`` and ``tune-prompt --resume`` are
    flags; an experiment with no run says where it looked and how to name one."""
    from tunedsl.cli import main

    common = [f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}",
              "train_dataset.total_steps=1", "algorithm.save_interval_steps=1"]
    target = "tests.fixtures.local.agents:Arith"
    with pytest.raises(ConfigError) as raised:
        tunedsl.run(target, backend="local", progress=False, resume=True, overrides=common)
    assert str(raised.value) == (
        f"resume=True: Arith has no run to continue in {tmp_path / 'tunedsl'} (runs are named "
        f"Arith-YYYYmmddHHMMSS); name the run directory: resume=RUN_DIR")
    tunedsl.run(target, backend="local", progress=False, overrides=common)
    [run_dir] = (tmp_path / "tunedsl").iterdir()
    (tmp_path / "tunedsl" / "Arith-20000101000000").mkdir()  # older, and no run's files
    (tmp_path / "tunedsl" / "Arith-notes").mkdir()  # not a run's name
    capsys.readouterr()
    words = ["run", target, "--backend", "local", "--no-progress", "--resume"]
    for item in [*common[:2], "train_dataset.total_steps=2", "algorithm.save_interval_steps=1"]:
        words += ["--set", item]
    assert main(words) == 0
    assert f"resume: {run_dir} (the newest run of Arith)" in capsys.readouterr().err
    assert sorted(p.name for p in run_dir.glob("global_step_*")) == ["global_step_1",
                                                                     "global_step_2"]


def test_ctrl_c_while_a_resume_loads_its_checkpoint_names_that_checkpoint(tiny_model, tmp_path,
                                                                          monkeypatch):
    """A resume interrupted while its checkpoint loaded said "a resume goes on at step 1",
    though the next resume went on from the run's checkpoint (sweep 30 W-01)."""
    from tunedsl.backends.local.trainer import LocalTrainer
    from tunedsl.errors import RunInterrupted

    common = [f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}",
              "train_dataset.total_steps=2", "algorithm.save_interval_steps=1"]
    first = tunedsl.run(f"{AGENTS}:Arith", backend="local", progress=False, overrides=common)

    def loading(self, **options):  # Ctrl-C pressed while the weights load
        raise KeyboardInterrupt

    monkeypatch.setattr(LocalTrainer, "restore", loading)
    with pytest.raises(RunInterrupted) as raised:
        tunedsl.run(f"{AGENTS}:Arith", backend="local", progress=False, resume=first.run_dir,
                    overrides=[*common, "train_dataset.total_steps=3"])
    assert str(raised.value) == (f"interrupted before training began (a resume goes on from "
                                 f"step 2); resume with resume={str(first.run_dir)!r}")


def test_ctrl_c_before_the_first_step_says_where_a_resume_goes_on(tiny_model, tmp_path):
    """Interrupted during the checks before step 1 (the preflight's rollout), the run said
    only "interrupted", without its run directory (sweep 19 W5); a resume starts at step 1."""
    from tunedsl.errors import RunInterrupted

    common = [f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}",
              "train_dataset.total_steps=1"]
    target = f"{AGENTS}:InterruptedInPreflight"
    with pytest.raises(RunInterrupted) as raised:
        tunedsl.run(target, backend="local", progress=False, overrides=common)
    [run_dir] = (tmp_path / "tunedsl").iterdir()
    assert str(raised.value) == (f"interrupted before training began (a resume goes on at "
                                 f"step 1); resume with resume={str(run_dir)!r}")
    summary = tunedsl.run(target, backend="local", progress=False, overrides=common,
                          resume=run_dir)
    assert summary.steps == 1


def test_a_ray_address_given_to_a_local_run_is_said_to_apply_elsewhere(tiny_model, tmp_path,
                                                                      capsys):
    """``--ray-address`` with the local backend was ignored without a word (sweep 20 W10)."""
    tunedsl.run(f"{AGENTS}:Arith", backend="local", progress=False,
                ray_address="10.0.0.1:6379",
                overrides=[f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}",
                           "train_dataset.total_steps=1"])
    assert ("note: ray_address='10.0.0.1:6379' is for the Trinity backend; the local backend "
            "runs in this process") in capsys.readouterr().err.splitlines()


def test_a_workflow_that_stops_the_event_loop_on_a_later_task_fails_the_run_in_one_line(
        tiny_model, tmp_path):
    """``loop.stop()`` on a task check's preflight does not run passed check, and run ended
    in an internal error ("Event loop stopped before Future completed")."""
    from tunedsl.rollout.run import LOOP_STOPPED

    from .test_evaluate import arith_copy

    source = arith_copy(tmp_path)
    source.write_text(source.read_text().replace(
        "    reply = await model.chat(",
        "    import asyncio\n    if task['question'] != '2+7=':  # not the first: check passes\n"
        "        asyncio.get_running_loop().stop()\n    reply = await model.chat(", 1))
    done = cli("run", "experiment.py:Arith", "--backend", "local", "--no-progress", "--set",
               f"model.model_path={tiny_model}", "--set", f"checkpoint_root_dir={tmp_path}",
               "--set", "train_dataset.total_steps=1", cwd=source.parent)
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (1, f"Error: {LOOP_STOPPED}")


def test_training_rollouts_that_fail_are_said_at_the_first_step_and_summed_up(
        tiny_model, tmp_path, capsys):
    """A run whose training rollouts failed one or two of each group ended exit 0 with no
    word of them: the train reward was computed over the rest (sweep 29 W-04)."""
    import json

    summary = run_local(graph_for("FailsLate", tiny_model, tmp_path,
                                  "train_dataset.total_steps=3"), progress=False)
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("warning:")]
    errors = [(row["step"], int(row["rollout/errors"])) for row in map(
        json.loads, (summary.run_dir / "metrics.jsonl").read_text().splitlines())]
    failing = [(step, count) for step, count in errors if count]
    assert len(failing) >= 2, errors  # the seed gives failures in more than one step
    graph = graph_for("FailsLate", tiny_model, tmp_path)
    per_step = graph.algorithm.batch_size * graph.algorithm.group_size
    log = summary.run_dir / "log" / "rollouts.log"
    first_error = (f"@workflow fails_after_odd_reply (tests/fixtures/local/agents.py:"
                   f"{decorated_at('fails_after_odd_reply')}) raised ValueError: an odd reply")
    assert warnings == [
        f"warning: step {failing[0][0]}: {failing[0][1]} of {per_step} training rollouts "
        f"failed (left out of training, as on Trinity); the first error: {first_error}; all "
        f"of them in {log} (rollout/errors in metrics.jsonl counts them by step)",
        f"warning: {sum(count for _, count in failing)} training rollouts failed in "
        f"{len(failing)} steps ({', '.join(str(step) for step, _ in failing)}); all of them "
        f"in {log}"]


def test_an_evaluation_whose_rollouts_fail_says_so(tiny_model, tmp_path, capsys):
    """Every eval rollout failing ended the run "eval reward nan at step 0 -> nan at step 1",
    exit 0, the errors only in the rollout log (sweep 28 W-04)."""
    summary = run_local(graph_for("FailsEval", tiny_model, tmp_path), progress=False)
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("warning: step")]
    log = summary.run_dir / "log" / "rollouts.log"
    said = (f"every eval rollout failed; the first error: @workflow fails_on_eval_tasks "
            f"(tests/fixtures/local/agents.py:{decorated_at('fails_on_eval_tasks')}) raised "
            f"LookupError: not a sum I know; all of them in {log}")
    assert warnings == [f"warning: step 0: {said}", f"warning: step 1: {said}"]


def test_a_workflow_changing_the_working_folder_leaves_the_run_directory_whole(tiny_model,
                                                                               tmp_path):
    """A workflow's ``os.chdir`` into a sandbox (as a coding agent's) split a run with a
    relative ``checkpoint_root_dir``: its checkpoints, metrics and rollouts went under the
    sandbox, the run named a checkpoint that was not there, and a resume began again at
    step 0 (sweep 34 B-02). The working folder is put back when the rollouts end."""
    import shutil

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    source = project / "experiment.py"
    source.write_text(source.read_text().replace(
        "    reply = await model.chat(", "    import os\n    os.makedirs('/' + "
        f"{str(tmp_path / 'scratch')[1:]!r}, exist_ok=True)\n    os.chdir("
        f"{str(tmp_path / 'scratch')!r})\n    reply = await model.chat(", 1))
    settings = ["--set", f"model.model_path={tiny_model}", "--set", "checkpoint_root_dir=ck",
                "--set", "train_dataset.total_steps=2", "--set", "algorithm.batch_size=2",
                "--set", "algorithm.group_size=2", "--set", "model.max_tokens=4",
                "--set", "algorithm.save_interval_steps=1"]
    done = cli("run", "experiment.py:Arith", "--backend", "local", "--no-progress",
               *settings, cwd=project)
    assert done.returncode == 0, done.stderr
    run_dir, = (project / "ck").glob("*/Arith-*")
    assert sorted(path.name for path in run_dir.glob("global_step_*")) == [
        "global_step_1", "global_step_2"]
    assert (run_dir / "metrics.jsonl").is_file() and not (tmp_path / "scratch" / "ck").exists()


def test_an_exit_in_a_loop_callback_mid_run_saves_the_run_and_says_how_to_resume(
        tiny_model, tmp_path, monkeypatch):
    """``sys.exit()`` in a callback the workflow scheduled, in step 2's rollouts, ended the
    run in one line that named no run directory and no resume (sweep 37 W2). The run is
    saved as after Ctrl-C, and the line says how to resume it."""
    import shutil

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    source = project / "experiment.py"
    source.write_text(source.read_text().replace(
        "    reply = await model.chat(",
        "    import asyncio, os, sys\n"
        "    CALLS.append(1)\n"
        "    def bye():\n"
        "        sys.exit(3)\n"
        "    if len(CALLS) > 15 and 'EX' + 'IT' in os.environ:\n"  # (step 2: the preflight's
        # 1, the step-0 evaluation's 10 and step 1's 4 rollouts before; the variable named
        # by a computed name, as the code digest counts one named by a literal, and this
        # one only steers the test)
        "        asyncio.get_running_loop().call_soon(bye)\n"
        "    reply = await model.chat(", 1).replace("\n\n@workflow", "\n\nCALLS = []\n\n\n@workflow", 1))
    settings = ["--set", f"model.model_path={tiny_model}", "--set", "checkpoint_root_dir=ck",
                "--set", "train_dataset.total_steps=2", "--set", "algorithm.batch_size=2",
                "--set", "algorithm.group_size=2", "--set", "model.max_tokens=4",
                "--set", "algorithm.save_interval_steps=1"]
    monkeypatch.setenv("EXIT", "1")
    stopped = cli("run", "experiment.py:Arith", "--backend", "local", "--no-progress",
                  *settings, cwd=project)
    monkeypatch.delenv("EXIT")
    run_dir, = (project / "ck").glob("*/Arith-*")
    run = run_dir.relative_to(project)
    line = next(number for number, text in enumerate(source.read_text().splitlines(), 1)
                if "sys.exit(3)" in text)
    assert (stopped.returncode, stopped.stderr.splitlines()[-1]) == (1, (
        f"Error: sys.exit(3) in a callback the rollouts' code scheduled with call_soon, "
        f"call_later or as a done callback (experiment.py:{line}, in bye) ended the command; "
        f"raise an exception there instead, or exit from the workflow (which fails its "
        f"rollout); saved {run}/global_step_1 (step 1); resume with --resume {run}"))
    resumed = cli("run", "experiment.py:Arith", "--backend", "local", "--no-progress",
                  *settings, "--resume", str(run), cwd=project)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(path.name for path in run_dir.glob("global_step_*")) == [
        "global_step_1", "global_step_2"]


def test_a_resume_with_a_read_only_log_or_chart_says_so_in_one_line(tiny_model, tmp_path):
    """``run --resume`` with a read-only log/rollouts.log ended in "internal error in tunedsl:
    PermissionError" before training, and with a read-only reward_curve.png after the last
    step was saved, its closing report lost (sweep 38 B-03). Root ignores file permissions:
    the command runs without the capabilities that let it (setpriv)."""
    import os
    import shutil
    import sys

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    settings = ["--set", f"model.model_path={tiny_model}", "--set", "checkpoint_root_dir=ck",
                "--set", "algorithm.batch_size=2", "--set", "algorithm.group_size=2",
                "--set", "model.max_tokens=4", "--set", "algorithm.save_interval_steps=1",
                "--set", "algorithm.eval_interval_steps=100", "--no-progress"]
    first = cli("run", "experiment.py:Arith", "--backend", "local", *settings,
                "--set", "train_dataset.total_steps=1", cwd=project)
    assert first.returncode == 0, first.stderr
    run_dir, = (project / "ck").glob("*/Arith-*")
    run = run_dir.relative_to(project)
    prefix = unprivileged()

    def resumed(steps, *more):
        return subprocess.run([*prefix, sys.executable, "-m", "tunedsl", "run",
                               "experiment.py:Arith", "--backend", "local", *settings,
                               "--set", f"train_dataset.total_steps={steps}", "--resume",
                               str(run), *more], cwd=project, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)

    run_dir.chmod(0o555)  # found once the step had trained, at its checkpoint (sweep 39)
    refused = resumed(2)
    run_dir.chmod(0o755)
    assert (refused.returncode, refused.stderr.splitlines()[-1]) == (2, (
        f"Error: run directory {run}: cannot be written (Permission denied); make it "
        f"writable (chmod u+w {run})")), refused.stderr
    log = run_dir / "log" / "rollouts.log"
    log.chmod(0o444)
    refused = resumed(2)
    assert (refused.returncode, refused.stderr.splitlines()[-1]) == (2, (
        f"Error: run directory {run}: log/rollouts.log cannot be written (Permission denied); "
        f"make it writable (chmod u+w {run}/log/rollouts.log)")), refused.stderr
    log.chmod(0o644)
    lock = run_dir / ".lock"  # blamed on the folder, which was writable (sweep 44 B-W3)
    lock.chmod(0o444)
    refused = resumed(2)
    lock.chmod(0o644)
    assert (refused.returncode, refused.stderr.splitlines()[-1]) == (2, (
        f"Error: run directory {run}: its lock {run}/.lock cannot be written (Permission "
        f"denied); make it writable (chmod u+w {run}/.lock), or remove it (tunedsl makes it "
        f"again)")), refused.stderr
    for kept in ("rollouts.jsonl", "metrics.jsonl"):  # no other file to give (sweep 38 W3)
        (run_dir / kept).chmod(0o444)
        refused = resumed(2)
        assert (refused.returncode, refused.stderr.splitlines()[-1]) == (2, (
            f"Error: run directory {run}: {kept}: cannot write it (Permission denied); it is "
            f"read-only: make it writable (chmod u+w {run / kept})")), refused.stderr
        (run_dir / kept).chmod(0o644)
    # tensorboard's writer thread printed its traceback, and the line advised setting the
    # monitor it was (sweep 39 B-04)
    monitor = sorted(run_dir.joinpath("monitor").rglob("*"), reverse=True)
    for path in monitor:
        path.chmod(0o555 if path.is_dir() else 0o444)
    refused = resumed(2)
    for path in monitor:
        path.chmod(0o755 if path.is_dir() else 0o644)
    assert (refused.returncode, refused.stderr.splitlines()[-1]) == (2, (
        f"Error: {run}/monitor/tensorboard/trainer: the monitor's folder cannot be written "
        f"(Permission denied); make it writable (chmod -R u+rwX {run}/monitor)")), refused.stderr
    assert "Traceback" not in refused.stderr
    (run_dir / "reward_curve.png").chmod(0o444)
    done = resumed(2)
    assert done.returncode == 0, done.stderr
    assert (f"warning: {run}/reward_curve.png was not drawn (Permission denied); the run is "
            f"complete: --resume {run} draws it once it can be written (and trains nothing)"
            ) in done.stderr.splitlines()
    assert "run directory" in done.stdout and (run_dir / "global_step_2").is_dir()
    # a resume of the finished run with its checkpoint read-only trains nothing, and wrote
    # that checkpoint again: "internal error" once it had removed part of it (sweep 41 B-T3)
    last = run_dir / "global_step_2"
    files = {path.name: path.read_bytes() for path in last.iterdir()}
    for path in (*last.iterdir(), last):
        path.chmod(0o555 if path.is_dir() else 0o444)
    done = resumed(2)
    assert done.returncode == 0, done.stderr
    assert {path.name: path.read_bytes() for path in last.iterdir()} == files
    # and a step saved where a folder of its name that cannot be removed whole is (a damaged
    # checkpoint, resumed past): that folder is set aside whole, the new one takes its name
    stale = run_dir / "global_step_3"
    shutil.copytree(last, stale, ignore=shutil.ignore_patterns("model.safetensors"))
    for path in (*stale.iterdir(), stale):
        path.chmod(0o555 if path.is_dir() else 0o444)
    done = resumed(3, "--from-good-checkpoint")
    assert done.returncode == 0, done.stderr
    aside, = run_dir.glob(".global_step_3.replaced-*")
    assert (f"warning: the checkpoint global_step_3 replaced is left in {run / aside.name} (it "
            f"could not be removed whole); remove it") in done.stderr.splitlines()
    assert json.loads((stale / "trainer_state.json").read_text())["step"] == 3
    assert {path.name: path.read_bytes() for path in last.iterdir()} == files


def test_ctrl_c_while_a_finished_run_waits_for_its_rollouts_threads_says_the_run_is_whole(
        tiny_model, tmp_path):
    """A run whose steps were all saved, interrupted while it waited for a thread a rollout
    left: it said a bare "interrupted", nothing of its saved checkpoint (sweep 41 B-W1)."""
    import shutil
    import signal

    from .cli_support import cli_started, stopped_when

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    source = project / "experiment.py"
    source.write_text(source.read_text().replace(
        "    reply = await model.chat(",
        "    asyncio.get_running_loop().run_in_executor(None, time.sleep, 3600)\n"
        "    reply = await model.chat(", 1).replace(
        "@workflow", "import asyncio\nimport time\n\n\n@workflow", 1))
    errors = tmp_path / "stderr.txt"
    with open(errors, "w") as stderr:
        running = cli_started("run", "experiment.py:Arith", "--backend", "local",
                              "--no-progress", "--set", f"model.model_path={tiny_model}",
                              "--set", "checkpoint_root_dir=ck", "--set",
                              "train_dataset.total_steps=1", "--set", "algorithm.batch_size=2",
                              "--set", "algorithm.group_size=2", "--set", "model.max_tokens=4",
                              "--set", "algorithm.eval_interval_steps=100", cwd=project,
                              stdout=subprocess.PIPE, stderr=stderr)
        stopped_when(running, lambda: "note: waiting for threads" in errors.read_text(),
                     signal.SIGINT, timeout=300)
    run_dir, = (project / "ck").glob("*/Arith-*")
    run = run_dir.relative_to(project)
    said = [line for line in errors.read_text().splitlines() if not line.startswith("note: ")]
    assert (running.returncode, said[-1]) == (130, (
        f"Error: interrupted as the run ended, while the rollouts' threads were waited for; "
        f"the run is whole, saved {run}/global_step_1 (a resume trains nothing, and draws its "
        f"chart and summary); resume with: tunedsl run experiment.py:Arith --backend local "
        f"--set model.model_path={tiny_model} --set checkpoint_root_dir=ck --set "
        f"train_dataset.total_steps=1 --set algorithm.batch_size=2 --set "
        f"algorithm.group_size=2 --set model.max_tokens=4 --set "
        f"algorithm.eval_interval_steps=100 --resume {run}")), errors.read_text()
    assert (run_dir / "global_step_1" / "trainer_state.json").is_file()
