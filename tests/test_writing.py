"""`tunedsl.runs.writing`, the one writer: whole files renamed into place, JSON Lines
flushed a record at a time, odd text escaped, and a machine's faults (a full disk, a
read-only folder) as one line that says what was kept."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunedsl.errors import ConfigError, RunError
from tunedsl.runs.writing import JsonLines, write_whole

from .cli_support import cli

#: Any text, lone surrogates (valid in JSON, not in UTF-8) included.
TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=200)


@settings(deadline=None, max_examples=60)
@given(text=TEXT)
def test_a_whole_file_takes_any_text_escaping_what_utf8_cannot_hold(tmp_path_factory, text):
    folder = tmp_path_factory.mktemp("whole")
    write_whole(folder / "out.txt", text, label="-o out.txt")
    assert (folder / "out.txt").read_bytes().decode("utf-8") == text.encode(
        "utf-8", "backslashreplace").decode("utf-8")
    assert [p.name for p in folder.iterdir()] == ["out.txt"]  # nothing partial is left


@settings(deadline=None, max_examples=60)
@given(records=st.lists(st.dictionaries(st.text(max_size=5), TEXT, max_size=3), max_size=5))
def test_json_lines_read_back_as_written_one_record_a_line(tmp_path_factory, records):
    path = tmp_path_factory.mktemp("lines") / "out.jsonl"
    with JsonLines(path, label="-o out.jsonl", then="-") as out:
        for record in records:
            out.write(record)
        assert out.written == len(records)
    # lines end at "\n" only (text may hold U+0085 or U+2028, which str.splitlines splits at)
    assert [json.loads(line) for line in path.read_bytes().split(b"\n")[:-1]] == records


@settings(deadline=None, max_examples=40)
@given(before=st.lists(st.dictionaries(st.text(max_size=5), TEXT, max_size=3), min_size=1,
                       max_size=3),
       after=st.lists(st.dictionaries(st.text(max_size=5), TEXT, max_size=3), max_size=3),
       ended=st.booleans())
def test_a_file_continued_after_a_last_line_without_its_newline_keeps_each_record(
        tmp_path_factory, before, after, ended):
    """A last line without its newline (a full disk took every byte but that one, an
    editor saved it so) is ended before the next record: never two records glued into one
    line (sweep 19 L1)."""
    path = tmp_path_factory.mktemp("lines") / "out.jsonl"
    text = "\n".join(json.dumps(record) for record in before) + ("\n" if ended else "")
    path.write_bytes(text.encode("utf-8"))
    with JsonLines(path, label="-o out.jsonl", then="-") as out:
        for record in after:
            out.write(record)
    data = path.read_bytes()
    assert data.endswith(b"\n")
    assert [json.loads(line) for line in data.split(b"\n")[:-1]] == before + after


def test_a_whole_file_that_does_not_fit_leaves_the_old_one_whole(small_disk):
    """The new text is written beside the target and renamed: a full disk keeps the old
    file as it was, and no partial file is left."""
    disk = small_disk("64k")
    (disk / "config.yaml").write_text("old: true\n")
    with pytest.raises(ConfigError) as caught:
        write_whole(disk / "config.yaml", "x" * 200_000, label="-o config.yaml")
    assert re.fullmatch(r"-o config\.yaml: cannot write it \(No space left on device; "
                        r"\d+\.\d MB free on its device\); choose a file in a folder you can "
                        r"write", str(caught.value)), caught.value
    assert (disk / "config.yaml").read_text() == "old: true\n"
    assert [p.name for p in disk.iterdir()] == ["config.yaml"]


def test_json_lines_on_a_full_disk_keep_every_line_written_before(small_disk):
    disk = small_disk("64k")
    out = JsonLines(disk / "o.jsonl", label="-o o.jsonl", then="make room and resume")
    with pytest.raises(RunError) as caught:
        for index in range(10_000):
            out.write({"index": index, "text": "y" * 100})
    out.close()
    assert re.fullmatch(r"-o o\.jsonl: cannot write it \(No space left on device; \d+\.\d MB "
                        r"free on its device\); every line written before is kept; make room "
                        r"and resume", str(caught.value)), caught.value
    kept = [json.loads(line) for line in (disk / "o.jsonl").read_text().splitlines()]
    assert len(kept) == out.written > 0  # whole lines only, each one as written
    assert [row["index"] for row in kept] == list(range(len(kept)))


def test_eval_on_a_full_disk_is_one_line_and_keeps_its_finished_rollouts(small_disk,
                                                                       fresh_modules):
    """``eval -o`` on a device that fills: exit 1, one line saying what is kept and how to
    go on, and the results file holds only whole lines of finished rollouts."""
    from .test_error_catalogue import DATA, experiment_file
    from .openai_server import OpenAIServer

    disk = small_disk("64k")
    project = disk.parent / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "train.jsonl").write_text(DATA)
    (project / "exp.py").write_text(experiment_file())
    with OpenAIServer() as server:
        done = cli("eval", "exp:E", "--base-url", server.base_url, "--model", "served",
                   "-o", str(disk / "o.jsonl"), "--repeat", "500", "--no-progress",
                   cwd=project)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1, done.stderr[-2000:]
    assert re.fullmatch(rf"Error: -o {re.escape(str(disk / 'o.jsonl'))}: cannot write it \(No "
                        r"space left on device; \d+\.\d MB free on its device\); every line "
                        r"written before is kept; make room \(or fix the folder\) and run the "
                        r"same command with --resume to go on", last), last
    kept = [json.loads(line) for line in (disk / "o.jsonl").read_text().splitlines()]
    assert kept and all(row["error"] is None for row in kept)


def test_a_run_directory_on_a_read_only_disk_is_one_line(small_disk, tiny_model, tmp_path):
    """Resuming a run whose folder cannot be written (a read-only mount) says so, exit 2."""
    from .local_support import graph_for, run_local

    run_local(graph_for("Arith", tiny_model, tmp_path, "train_dataset.total_steps=1"),
              progress=False)
    run_dir = next(tmp_path.rglob("experiment.yaml")).parent
    disk = small_disk("8m", read_only=True, holding=run_dir)
    done = cli("run", "tests.fixtures.local.agents:Arith", "--backend", "local",
               "--no-progress", "--resume", str(disk), "--set", f"model.model_path={tiny_model}",
               "--set", f"checkpoint_root_dir={tmp_path}", "--set",
               "train_dataset.total_steps=2")
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: run directory {disk}: cannot write it (Read-only file system); a run writes "
        f"its checkpoints there: make it writable, or copy it to a folder that is and resume "
        f"the copy")), done.stderr[-2000:]


def test_a_partial_file_is_never_mistaken_for_the_output(tmp_path):
    """The file written beside the target is hidden and named for this process, so two
    writers never share one and a listing of the folder shows only outputs."""
    write_whole(tmp_path / "a" / "page.html", "<html></html>", label="--out page.html")
    assert sorted(p.name for p in Path(tmp_path / "a").iterdir()) == ["page.html"]


def test_a_whole_file_written_through_a_link_updates_what_the_link_names(tmp_path):
    """The page was renamed onto the link itself: the link became a file, and the file it
    named was never updated (run as root, /dev/stdout's link was replaced so)."""
    import os

    from tunedsl.runs.writing import write_whole

    (tmp_path / "real.html").write_text("old")
    (tmp_path / "link.html").symlink_to(tmp_path / "real.html")
    write_whole(tmp_path / "link.html", "new", label="--out link.html")
    assert os.path.islink(tmp_path / "link.html")
    assert (tmp_path / "real.html").read_text() == "new"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link.html", "real.html"]


@pytest.mark.parametrize("folder", [".", "..", "sub/.."])
def test_an_output_that_is_a_folder_is_refused_in_one_line(folder, tmp_path, monkeypatch):
    """``config -o .`` was an internal error (Path.with_name of "."), and ``-o ..`` said
    "Device or resource busy"; each says it names a folder."""
    from .cli_support import cli

    (tmp_path / "work" / "sub").mkdir(parents=True)
    done = cli("config", "examples.arith.experiment:Arith", "-o", folder,
               cwd=tmp_path / "work")
    assert (done.returncode, done.stderr.strip()) == (
        2, f"Error: -o {folder}: that is a folder; give a file in it, e.g. "
           f"{folder}/NAME")


def said_as_nobody(attempt):
    """What ``attempt()`` returns run by a user other than root (whom no file permission
    stops), in a forked child process."""
    import multiprocessing
    import os

    def child_runs(answer):
        if os.getuid() == 0:
            os.setgid(65534)
            os.setuid(65534)  # nobody
        answer.send(attempt())

    context = multiprocessing.get_context("fork")
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=child_runs, args=(sending,))
    child.start()
    said = receiving.recv()
    child.join()
    return said


@pytest.mark.parametrize("folder_mode", [0o777, 0o555], ids=["writable", "read-only"])
def test_a_read_only_json_lines_file_is_said_read_only(tmp_path, folder_mode):
    """``eval -o r.jsonl --resume`` (or a run's ``rollouts.jsonl``) made read-only was told
    "choose a file in a folder you can write": the folder could be written, and another file
    gives up the resume (sweep 37 W4), in a read-only folder too, where the file alone
    needs to be made writable (sweep 38 W2). Tried as a user other than root, whom no file
    permission stops, in a child process."""
    import tempfile

    folder = Path(tempfile.mkdtemp())  # (tmp_path's folders are root's alone)
    try:
        results = folder / "r.jsonl"
        results.write_text('{"task_index": 0}\n')
        results.chmod(0o444)
        folder.chmod(folder_mode)

        def attempt():
            try:
                JsonLines(results, label=f"-o {results}", then="")
            except ConfigError as error:
                return str(error)
            return "opened"

        assert said_as_nobody(attempt) == (
            f"-o {results}: cannot write it (Permission denied); it is read-only: make it "
            f"writable (chmod u+w {results}), or give another file")
    finally:
        import shutil

        folder.chmod(0o755)
        shutil.rmtree(folder)


def test_an_output_in_a_read_only_folder_is_refused_before_any_work(tmp_path):
    """tune-prompt found a read-only folder of its -o only once the tuning was over, its
    budget spent (sweep 37): `refuse_unwritable` finds it first, in the nearest folder that
    exists (the one the output's folders would be made in). Tried as a user other than
    root, whom no file permission stops, in a child process."""
    import shutil
    import tempfile

    from tunedsl.runs.writing import refuse_unwritable

    folder = Path(tempfile.mkdtemp())  # (tmp_path's folders are root's alone)
    try:
        (folder / "ro").mkdir()
        (folder / "ro").chmod(0o555)
        folder.chmod(0o777)

        def attempt():
            said = []
            for output in (folder / "best.toml", folder / "ro" / "best.toml",
                           folder / "ro" / "new" / "best.toml"):
                try:
                    refuse_unwritable(output, f"-o {output}")
                except ConfigError as error:
                    said.append(str(error))
                else:
                    said.append("writable")
            return said

        assert said_as_nobody(attempt) == ["writable", *(
            f"-o {folder / 'ro' / tail}: cannot write it (Permission denied); choose a file in a "
            f"folder you can write" for tail in ("best.toml", "new/best.toml"))]
        assert sorted(path.name for path in folder.iterdir()) == ["ro"]  # no probe left
    finally:
        (folder / "ro").chmod(0o755)
        shutil.rmtree(folder)
