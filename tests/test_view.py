"""`tunedsl view`'s data and server: sources, filters, comparison, errors (no browser here;
tests/test_view_browser.py drives the page in Chromium)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tunedsl.errors import ConfigError, DatasetError
from tunedsl.evaluation.evaluate import read_results
from tunedsl.view import Viewer, open_source, write_report
from tunedsl.view.server import make_server, url_of

from .fixtures.view_agent import write_results

REPO = Path(__file__).resolve().parents[1]


def tunedsl(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "tunedsl", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Two real eval results of the calculator agent: before wrong on 5 and 12, after
    wrong on 11 (a regression) and 8."""
    folder = tmp_path_factory.mktemp("evals")
    return (write_results(folder / "before.jsonl", wrong_on={5, 12}),
            write_results(folder / "after.jsonl", wrong_on={11, 8}))


def test_eval_source_reads_every_rollout_with_its_calls(results):
    """Each line is one rollout; its calls are the eval's call records, unchanged."""
    source = open_source(results[0])
    lines = read_results(results[0])
    assert source.kind == "eval"
    assert [(e.task_index, e.run) for e in source.entries] == sorted(
        (line["task_index"], line["repeat"]) for line in lines)
    first = source.record(0)
    assert first["calls"] == lines[0]["messages"]
    assert first["calls"][0]["tool_calls"] == [{"id": "call-1", "name": "add",
                                                 "arguments": '{"a": 2, "b": 3}'}]
    assert first["calls"][0]["reasoning"] == "I should add 2 and 3 with the tool."
    assert dict(source.summary)["rollouts"] == "12 (2 errors)"
    failed = next(source.record(i) for i, e in enumerate(source.entries) if e.error)
    assert failed["error"].endswith("raised ZeroDivisionError: the calculator cannot divide by zero")
    assert failed["traceback"].startswith("Traceback (most recent call last):\n")
    assert 'raise ZeroDivisionError("the calculator cannot divide by zero")' in failed["traceback"]


def test_a_later_line_for_the_same_rollout_replaces_the_earlier(tmp_path, results):
    """A resumed eval's re-run rollout is shown once, as it was last written."""
    lines = Path(results[0]).read_text().splitlines()
    again = json.loads(lines[0])
    again["reward"] = 0.25
    path = tmp_path / "resumed.jsonl"
    path.write_text("\n".join([*lines, json.dumps(again)]) + "\n")
    source = open_source(path)
    assert len(source.entries) == 12
    assert source.record(0)["reward"] == 0.25


def query(viewer, **params):
    return viewer.rollouts({key: str(value) for key, value in params.items()})


def test_filters_select_what_they_name(results):
    """Reward bounds, errors only and text search each pick exactly the matching rollouts."""
    viewer = Viewer([open_source(results[0])])
    lines = read_results(results[0])
    assert query(viewer, min=1)["total"] == sum(line["reward"] == 1.0 for line in lines)
    assert query(viewer, max=0.5)["total"] == sum(line["reward"] == 0.0 for line in lines)
    errors = query(viewer, errors=1)
    assert errors["total"] == 2
    assert all("ZeroDivisionError" in item["error"] for item in errors["items"])
    # Text inside a reply, a tool's answer and a reasoning; case-insensitive.
    assert query(viewer, q="THE SUM IS 13")["total"] == 2  # 7 plus 5, answered wrong, twice
    assert query(viewer, q="add 10 and 1")["total"] == 2
    assert query(viewer, q='"a": 2')["total"] == 2  # JSON-looking text is searched as text
    assert query(viewer, q="no such words")["total"] == 0


def test_paging_returns_each_rollout_once(results):
    viewer = Viewer([open_source(results[0])])
    seen = [item["id"] for offset in range(0, 12, 5)
            for item in query(viewer, offset=offset, limit=5)["items"]]
    assert seen == list(range(12))


def test_compare_orders_tasks_by_change_in_reward_regressions_first(results):
    """Before/after per task from the files; the most negative change first."""
    viewer = Viewer([open_source(path) for path in results])
    rows = viewer.compare({"limit": "100"})["rows"]
    means = []
    for path in results:
        by_task = {}
        for line in read_results(path):
            by_task.setdefault(line["task_index"], []).append(line["reward"] or 0.0)
        means.append({task: sum(r) / len(r) for task, r in by_task.items()})
    expected = sorted(((means[1][t] - means[0][t], t) for t in means[0]))
    assert [(row["delta"], row["task_index"]) for row in rows] == expected
    assert rows[0]["delta"] == -1.0 and "10 plus 1" in rows[0]["task"]


def test_only_eval_results_can_be_compared(tmp_path, results):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "rollout/reward/mean": 0.5}\n')
    with pytest.raises(DatasetError) as caught:
        Viewer([open_source(results[0]), open_source(run)])
    assert str(caught.value) == (f"{run}: only two eval results files can be compared (this is "
                                 f"a run directory); give two tunedsl eval -o files")
    candidates = tmp_path / "c.jsonl"
    candidates.write_text('{"kind": "start", "tune_settings": {}}\n')
    with pytest.raises(DatasetError) as caught:
        Viewer([open_source(candidates), open_source(results[0])])
    assert str(caught.value) == (f"{candidates}: only two eval results files can be compared "
                                 f"(this is a tune-prompt candidates file); give two tunedsl "
                                 f"eval -o files")


def test_the_report_embeds_at_most_the_rollouts_asked_for(tmp_path, results):
    viewer = Viewer([open_source(results[0])])
    out = tmp_path / "report.html"
    assert write_report(viewer, out, max_rollouts=5) == 7
    html = out.read_text()
    blob = html.split('<script id="tunedsl-data" type="application/json">')[1].split("</script>")[0]
    data = json.loads(blob)
    assert [r["id"] for r in data["records"][0]] == [0, 1, 2, 3, 4]
    assert data["left_out"] == 7
    assert "fetch(" in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")


def test_meta_tells_the_page_its_page_size_and_which_curves_are_rewards(tmp_path, monkeypatch):
    """The page restates nothing Python defines: the meta answer (served, and embedded in
    an --out file) carries the page size the rollouts route pages by, the metric charted
    first, and each source's reward curves by Trinity's names (training first, then the
    evals'; other eval metrics and statistics are not rewards), and the page's script
    spells no metric name."""
    from importlib import resources

    from tunedsl.dsl.trinity_fields import EVAL_METRIC, POLICY_LOSS_METRIC, TRAIN_REWARD_METRIC
    from tunedsl.view import app

    run = tmp_path / "run"
    run.mkdir()
    evals = [EVAL_METRIC.format(taskset=taskset, name="reward", repeats=repeats)
             for taskset, repeats in (("eval", 1), ("hard/set", 4))]
    others = [EVAL_METRIC.format(taskset="eval", name="accuracy", repeats=1),
              "eval/eval/reward/std@1", POLICY_LOSS_METRIC]
    metrics = [{"step": 0, **{name: 0.5 for name in others + evals}},
               {"step": 1, TRAIN_REWARD_METRIC: 0.25, POLICY_LOSS_METRIC: 0.1}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in metrics))
    (run / "rollouts.jsonl").write_text("".join(
        json.dumps({"step": 1, "task_index": i, "reward": 1.0}) + "\n" for i in range(10)))
    monkeypatch.setattr(app, "PAGE_SIZE", 4)
    viewer = Viewer([open_source(run)])
    meta = viewer.meta()
    assert meta["sources"][0]["reward_curves"] == [TRAIN_REWARD_METRIC, *evals]
    assert meta["first_metric"] == POLICY_LOSS_METRIC
    assert meta["page_size"] == len(viewer.rollouts({})["items"]) == 4
    assert viewer.embedded(100)["meta"]["page_size"] == 4
    script = (resources.files("tunedsl.view") / "page" / "app.js").read_text()
    for name in (TRAIN_REWARD_METRIC, POLICY_LOSS_METRIC, "reward/mean", "mean@"):
        assert name not in script


def test_server_is_read_only_and_answers_bad_requests_plainly(results):
    viewer = Viewer([open_source(results[0])])
    server = make_server(viewer, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = url_of(server)

    def status(path, method="GET"):
        try:
            with urllib.request.urlopen(urllib.request.Request(url + path, method=method)) as r:
                return r.status, json.loads(r.read()) if path.startswith("api") else None
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    try:
        assert status("api/rollouts?limit=2")[1]["total"] == 12
        assert status("api/rollouts", "POST") == (405, {"error": "the viewer is read-only"})
        assert status("api/nothing") == (404, {"error": "no route /api/nothing"})
        assert status("api/rollouts?min=high") == (400, {"error": "min='high' is not a number"})
        assert status("api/rollout?id=99") == (400, {"error": "id='99': no such rollout"})
    finally:
        server.shutdown()
        server.server_close()


def test_a_file_rewritten_in_place_is_read_again_and_a_bad_line_said_in_one_line(
        tmp_path, results, capfd):
    """An editor saves a shown results file in place (same size, one task edited): the next
    answer is the new text, not a traceback; a line garbled in place is one JSON error and
    the server goes on."""
    shown = tmp_path / "shown.jsonl"
    shown.write_bytes(results[0].read_bytes())
    viewer = Viewer([open_source(shown)])
    server = make_server(viewer, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = url_of(server)

    def get(path):
        try:
            with urllib.request.urlopen(url + path) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    try:
        assert get("api/rollouts?limit=2")[0] == 200
        text = shown.read_text()
        edited = text.replace("What is 2 plus 3?", "What is 3 plus 2?", 1)  # same size
        assert len(edited) == len(text) and edited != text
        with shown.open("r+") as handle:
            handle.write(edited)
        status, rows = get("api/rollouts?limit=100")
        assert status == 200
        ids = [item["id"] for item in rows["items"]]
        assert any("What is 3 plus 2?" in json.dumps(get(f"api/rollout?id={i}")[1])
                   for i in ids)
        lines = edited.splitlines(keepends=True)
        lines[1] = "{" + " " * (len(lines[1]) - 2) + "\n"  # garbled, the size kept
        with shown.open("r+") as handle:
            handle.write("".join(lines))
        status, answer = get("api/rollouts")
        assert status == 409 and answer["error"].startswith(f"{shown}:2: not a JSON line")
        shown.write_text(text)  # fixed again: the server answers again
        assert get("api/rollouts?limit=2")[0] == 200
    finally:
        server.shutdown()
        server.server_close()
    assert "Traceback" not in capfd.readouterr().err


def test_a_results_file_starting_with_a_byte_order_mark_is_shown(tmp_path, results):
    """An editor's byte-order mark before the first line: read as the other readers read
    it (it was an internal error)."""
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + results[0].read_bytes())
    done = tunedsl("view", str(marked), "-o", str(tmp_path / "page.html"))
    assert done.returncode == 0, done.stderr
    viewer = Viewer([open_source(marked)])
    assert viewer.answer("rollout", {"id": "0"})["task_index"] == 0


@pytest.mark.parametrize("case, expected", [
    ("missing", "Error: {dir}/missing: no such file or directory; give a run directory "
                "(checkpoints/<project>/<run>) or an eval results file"),
    ("loop", "Error: {dir}/loop: a symbolic link to loop_back, which loops back to itself; "
             "fix the link, or give the run directory or results file itself"),
    ("empty_dir", "Error: {dir}/empty_dir: not a run directory (no metrics.jsonl, rollouts.jsonl, "
                  "Trinity monitor/tensorboard, buffer/ experiences or config.yaml); give the "
                  "folder tunedsl run printed as 'run directory'"),
    ("bad_line", "Error: {dir}/bad_line.jsonl:2: not a JSON line (Expecting value); fix or "
                 "delete that line"),
    ("not_utf8", "Error: {dir}/not_utf8.jsonl:1: not a JSON line (not UTF-8); fix or delete "
                 "that line"),
    ("not_results", "Error: {dir}/not_results.jsonl:1: not a tunedsl result (it needs task_index "
                    "and repeat); was this file written by tunedsl eval?"),
    ("unreadable_rollouts", "Error: {dir}/unreadable_rollouts/rollouts.jsonl: cannot read it: "
                            "Is a directory"),
    ("three_paths", "Error: view takes one path, or two eval results to compare; got 3"),
    ("pick", "Error: {dir}/pick: a folder of results files (a.jsonl, b.jsonl), not a run "
             "directory; view one of them, or two side by side: tunedsl view {dir}/pick/a.jsonl "
             "{dir}/pick/b.jsonl"),
    # an experiment's data: "a folder of results files", told to view them (sweep 45 B-W4)
    ("data", "Error: {dir}/data: a folder of data files (test.jsonl, train.jsonl), not results; "
             "view shows a run directory or an eval's -o file, and tunedsl preview "
             "MODULE:EXPERIMENT shows a dataset's rows"),
    # a user's own text was "notes.txt:1: not a JSON line ...; fix or delete that line"
    # (sweep 46 A-W9)
    ("notes.txt", "Error: {dir}/notes.txt: text whose first line is no JSON object, not JSON "
                  "Lines tunedsl wrote (an eval's results, a run's files); give the file "
                  "tunedsl wrote"),
    # a model's config.json was told "fix or delete that line" (sweep 47 A-W6)
    ("pretty.json", "Error: {dir}/pretty.json: one JSON document over several lines, not "
                    "JSON Lines tunedsl wrote (an eval's results, a run's files); give the "
                    "file tunedsl wrote"),
    # a run's own file asked "was this file written by tunedsl eval?" (sweep 46 B-W2)
    ("gone_run/metrics.jsonl", "Error: {dir}/gone_run/metrics.jsonl:1: a line of a run's "
                               "metrics.jsonl (tunedsl view shows its run directory, curves "
                               "and all), not an eval result; give a results file tunedsl "
                               "eval wrote"),
    # the page was written, and the address given to serve it on was left unsaid
    ("out_and_port", "Error: --host and --port say where to serve the page, and -o "
                     "{dir}/p.html writes it to a file, serving nothing; drop --host and "
                     "--port, or -o"),
    # a page was written under that name (sweep 49)
    ("out_misnamed", "Error: -o {dir}/page.toml: view writes an HTML page, which that name "
                     "would misname; give a .html name, e.g. -o {dir}/page.html"),
    ("bad_out", "Error: -o /proc/no/such/report.html: cannot write it (No such file or "
                "directory); choose a file in a folder you can write"),
    # a step the page sorts by, given as text: an internal error (TypeError) before
    ("step_text", "Error: {dir}/step_text/rollouts.jsonl:2: not a rollout line: its step is "
                  "'2', not a whole number >= 0; fix or delete that line"),
    ("step_list", "Error: {dir}/step_list/rollouts.jsonl:1: not a rollout line: its step is "
                  "[2], not a whole number >= 0; fix or delete that line"),
    # NUL bytes are what a crash can leave: a page of "0 rollouts" was written, exit 0
    ("nul.jsonl", "Error: {dir}/nul.jsonl: holds nothing to show (no results); give a results "
                  "file tunedsl eval wrote, or a run directory"),
    ("half_out", "Error: {dir}/half.jsonl: nothing to show yet (no finished rollout, no "
                 "metric), so no page was written; watch it as it is written with: tunedsl "
                 "view {dir}/half.jsonl"),
    ("empty_run_out", "Error: {dir}/empty_run: nothing to show yet (no finished rollout, no "
                      "metric), so no page was written; watch it as it is written with: "
                      "tunedsl view {dir}/empty_run"),
    # one line that can never end as results: it was "nothing to show yet" (sweep 27 A-W7)
    ("r.jsonl.gz", "Error: {dir}/r.jsonl.gz: a gzip file, not eval results (JSON Lines) or a "
                   "run directory's file; decompress it first"),
    ("hello.jsonl", "Error: {dir}/hello.jsonl: text whose first line is no JSON object, not "
                    "eval results (JSON Lines) or a run directory's file; give the results file "
                    "eval wrote (-o)"),
    ("bytes.jsonl", "Error: {dir}/bytes.jsonl: bytes that are not UTF-8 text, not eval results "
                    "(JSON Lines) or a run directory's file; give the results file eval wrote "
                    "(-o)"),
    # a device never ends its line: read until memory ran out (an internal MemoryError)
    ("zero_run", "Error: {dir}/zero_run/rollouts.jsonl: not a regular file (a device or a "
                 "link to one); give the file tunedsl wrote"),
    ("zero.jsonl", "Error: {dir}/zero.jsonl: not a regular file (a device or a link to one); "
                   "give a run directory or an eval results file"),
    # a page of "0 rollouts" was written, exit 0 (sweep 24 A-W5)
    ("gone_run", "Error: {dir}/gone_run/rollouts.jsonl: a symbolic link to /nonexistent/r.jsonl, "
                 "which does not exist; point it at the run's rollouts.jsonl, or remove it"),
])
def test_bad_paths_are_one_line_errors_with_exit_code_2(tmp_path, results, case, expected):
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "bad_line.jsonl").write_text(Path(results[0]).read_text().splitlines()[0] + "\noops\n")
    (tmp_path / "not_utf8.jsonl").write_bytes(b'{"task_index": 0, "repeat": 0, "x": "\xff"}\n')
    (tmp_path / "not_results.jsonl").write_text('{"question": "1+1"}\n')
    (tmp_path / "unreadable_rollouts" / "rollouts.jsonl").mkdir(parents=True)
    (tmp_path / "pick").mkdir()  # what eval with two --model writes
    (tmp_path / "loop").symlink_to("loop_back")  # it said "no such file or directory"
    (tmp_path / "loop_back").symlink_to("loop")
    for name in ("b", "a"):
        (tmp_path / "pick" / f"{name}.jsonl").write_text(Path(results[0]).read_text())
    (tmp_path / "data").mkdir()
    # (a data file beside results is not named among them)
    for folder, name in (("data", "train"), ("data", "test"), ("pick", "tasks")):
        (tmp_path / folder / f"{name}.jsonl").write_text('{"question": "1+1", "answer": 2}\n')
    rollout = {"step": 1, "task_index": 0, "group": 0, "run": 0, "calls": [], "reward": 1.0}
    for case_, second in (("step_text", {**rollout, "step": "2"}),
                          ("step_list", {**rollout, "step": [2]})):
        (tmp_path / case_).mkdir()
        lines = [second] if case_ == "step_list" else [rollout, second]
        (tmp_path / case_ / "rollouts.jsonl").write_text(
            "".join(json.dumps(line) + "\n" for line in lines))
    (tmp_path / "nul.jsonl").write_bytes(b"\0" * 4096)
    (tmp_path / "half.jsonl").write_text('{"task_index": 0, "repeat": 0, "task": {"q')
    import gzip

    (tmp_path / "r.jsonl.gz").write_bytes(gzip.compress(Path(results[0]).read_bytes()[:99]))
    (tmp_path / "hello.jsonl").write_text("hello")
    (tmp_path / "notes.txt").write_text("my notes\nmore notes\n")
    (tmp_path / "pretty.json").write_text(json.dumps({"model_type": "llama",
                                                      "hidden_size": 8}, indent=2) + "\n")
    (tmp_path / "bytes.jsonl").write_bytes(b"\xff\xfe\x00 not text" * 10)
    (tmp_path / "empty_run").mkdir()
    (tmp_path / "empty_run" / "rollouts.jsonl").write_text("")
    (tmp_path / "zero_run").mkdir()
    (tmp_path / "zero_run" / "rollouts.jsonl").symlink_to("/dev/zero")
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    (tmp_path / "gone_run").mkdir()
    (tmp_path / "gone_run" / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    (tmp_path / "gone_run" / "rollouts.jsonl").symlink_to("/nonexistent/r.jsonl")
    args = {"three_paths": [str(results[0])] * 3,
            "bad_out": [str(results[0]), "-o", "/proc/no/such/report.html"],
            "out_misnamed": [str(results[0]), "-o", str(tmp_path / "page.toml")],
            "out_and_port": [str(results[0]), "-o", str(tmp_path / "p.html"), "--host",
                             "0.0.0.0", "--port", "8123"],
            "half_out": [str(tmp_path / "half.jsonl"), "-o", str(tmp_path / "h.html")],
            "empty_run_out": [str(tmp_path / "empty_run"), "-o", str(tmp_path / "r.html")]}
    suffix = {"bad_line": ".jsonl", "not_utf8": ".jsonl", "not_results": ".jsonl"}.get(case, "")
    done = tunedsl("view", *args.get(case, [str(tmp_path / (case + suffix))]), "--no-browser")
    assert (done.returncode, done.stderr.strip()) == (2, expected.format(dir=tmp_path))
    assert not list(tmp_path.glob("*.html"))


def candidates_lines(*rewards):
    """A tune-prompt candidates file's lines: its start, then per candidate one rollout on
    the validation split and the candidate's score."""
    lines = [{"kind": "start", "tune_settings": {}}]
    for number, reward in enumerate(rewards):
        lines += [{"kind": "rollout", "candidate": f"c{number}", "split": "val",
                   "task_index": 0, "repeat": 0, "reward": reward},
                  {"kind": "candidate", "candidate": f"c{number}",
                   "params": {"system_prompt": f"text {number}"}, "val_reward": reward}]
    return "".join(json.dumps(line) + "\n" for line in lines)


def test_a_candidates_file_being_written_or_cut_at_its_start_is_shown_as_one(tmp_path):
    """A tuning still writing its candidates file has a half-written last line: left for
    later, as in runs and results (it was "fix or delete that line", HTTP 409 on every
    poll); a file that lost its start line is still a candidates file, not eval results."""
    writing = tmp_path / "writing.jsonl"
    writing.write_text(candidates_lines(0.5, 0.75) + '{"kind": "rollout", "cand')
    viewer = Viewer([open_source(writing)])
    assert (viewer.meta()["sources"][0]["steps"], query(viewer, min=0)["total"]) == (
        [(0, 1), (1, 1)], 2)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(candidates_lines(0.5, 0.75).splitlines(keepends=True)[1:]))
    assert type(open_source(cut)).__name__ == "CandidatesSource"
    assert open_source(cut).summary[1] == ("validation", "start 0.5000 -> best 0.7500 "
                                                         "(step 1)")


def test_an_eval_not_yet_finished_says_none_yet_not_nan(tmp_path, results):
    """A results file whose only line is still being written is served (an eval just
    begun); its reward row says there is none yet (it said "mean nan  std nan")."""
    first = Path(results[0]).read_text().splitlines()[0]
    (tmp_path / "begun.jsonl").write_text(first[:40])
    assert dict(open_source(tmp_path / "begun.jsonl").summary)["reward"] == "none yet"


def write_steps(run_dir, steps, per_step=4):
    """Rollout lines as the local backend writes them (its own RolloutLog)."""
    from tunedsl.backends.local.rollouts import RolloutLog
    from tunedsl.backends.local.steps import Rollout
    from tunedsl.dsl.chat import ChatResponse, ModelCall
    from tunedsl.rollout.run import RolloutResult

    log = RolloutLog(run_dir)
    for step in steps:
        call = ModelCall(messages=[{"role": "user", "content": f"step {step}?"}],
                         response=ChatResponse(content=f"reply {step}", finish_reason="stop"))
        group = [Rollout(task_index=0, calls=[call], advantages=[0.0],
                         result=RolloutResult(response="", reward=step / 10, metrics={}))
                 for _ in range(per_step)]
        log.write(step, [group], [{"question": f"step {step}?"}])
    log.close()


def test_a_run_still_writing_shows_its_new_steps_on_reload(tmp_path):
    """A half-written last line is left for later; the next page load (meta) reads the
    steps written since, and a resume that cut the file back is read afresh."""
    run = tmp_path / "run"
    run.mkdir()
    write_steps(run, [1, 2])
    with open(run / "rollouts.jsonl", "a") as handle:
        handle.write('{"step": 3, "task_index": 0, "gro')  # the writer is mid-line
    viewer = Viewer([open_source(run)])
    assert viewer.meta()["sources"][0]["steps"] == [(1, 4), (2, 4)]
    assert query(viewer, min=0)["total"] == 8

    text = (run / "rollouts.jsonl").read_text()
    (run / "rollouts.jsonl").write_text(text[:text.rindex("\n") + 1])
    write_steps(run, [3])
    assert viewer.meta()["sources"][0]["steps"] == [(1, 4), (2, 4), (3, 4)]
    assert query(viewer, min=0)["total"] == 12  # the cached selection was dropped
    assert query(viewer, step=3)["items"][0]["calls"][0]["reply"] == "reply 3"

    (run / "rollouts.jsonl").write_text("")  # --resume from step 0 truncates
    write_steps(run, [1])
    assert viewer.meta()["sources"][0]["steps"] == [(1, 4)]
    assert [item["calls"][0]["reply"] for item in query(viewer)["items"]] == ["reply 1"] * 4


def test_the_command_serves_on_loopback_until_ctrl_c(results):
    """`tunedsl view PATH --no-browser --port 0` prints its URL, answers there, and stops
    cleanly (exit 0) on Ctrl-C."""
    import signal

    from .cli_support import cli_started

    process = cli_started("view", results[0], "--no-browser", "--port", "0",
                          stderr=subprocess.PIPE)
    try:
        line = process.stderr.readline()
        assert line.startswith("serving http://127.0.0.1:") and line.endswith("(Ctrl-C to stop)\n")
        url = line.split()[1]
        with urllib.request.urlopen(url + "api/meta") as answer:
            assert json.loads(answer.read())["mode"] == "eval"
        with urllib.request.urlopen(url) as answer:
            assert b"<title>tunedsl view</title>" in answer.read()
        process.send_signal(signal.SIGINT)
        # communicate, not wait: the server's stderr is drained, so a full pipe cannot keep
        # it from exiting, and what it wrote is shown if it does not exit
        try:
            _, rest = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail(f"still running 30 s after Ctrl-C; it wrote: {process.communicate()[1]}")
        assert process.returncode == 0, rest
    finally:
        process.kill()


def test_a_port_in_use_is_a_one_line_error(results):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = tunedsl("view", str(results[0]), "--no-browser", "--port", str(port))
    assert (done.returncode, done.stderr.strip()) == (2, (
        f"Error: --host 127.0.0.1 --port {port}: cannot serve there: Address already in use; "
        f"choose another (--port 0 takes any free port)"))


def test_a_host_name_nothing_resolves_is_named_as_such(results):
    """The fix offered was a free port; the host is what is wrong."""
    done = tunedsl("view", str(results[0]), "--no-browser", "--host", "nosuch.invalid")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("Error: --host nosuch.invalid: no such host (")
    assert done.stderr.strip().endswith("); give an address of this machine, such as "
                                        "127.0.0.1")


@pytest.mark.parametrize("host, message", [
    ("::1", "Error: --host ::1: the viewer serves IPv4 addresses only; give 127.0.0.1 (this "
            "machine) or 0.0.0.0 (every interface)"),
    ("", "Error: --host '': give an address to serve on, such as 127.0.0.1 (this machine "
         "only)")])
def test_hosts_the_viewer_cannot_serve_on_are_named(results, host, message):
    """::1 was "no such host", and an empty host served every interface."""
    done = tunedsl("view", str(results[0]), "--no-browser", "--port", "0", "--host", host)
    assert (done.returncode, done.stderr.strip()) == (2, message)


def test_the_python_view_names_its_arguments(results, tmp_path):
    from tunedsl.view import view

    with pytest.raises(ConfigError) as caught:
        view([results[0]], out=tmp_path / "p.html", max_rollouts=-1)
    assert str(caught.value) == "max_rollouts=-1: give 0 or more"
    with pytest.raises(ConfigError) as caught:  # a bare TypeError
        view([results[0]], port="8080x")
    assert str(caught.value) == "port='8080x': give a whole number of at least 0, not a str"
    view(Path(results[0]), out=tmp_path / "one.html")  # one path as itself (no len())
    assert (tmp_path / "one.html").exists()


@pytest.mark.parametrize("depth", [3_000, 100_000])
def test_a_results_line_nested_past_the_reader_is_one_line(tmp_path, depth):
    """A line nested thousands deep was an internal error (RecursionError) in view."""
    results = tmp_path / "r.jsonl"
    results.write_text('{"task_index": 0, "repeat": 0, "reward": 1.0, "error": null, "x": '
                       + "[" * depth + "]" * depth + "}\n")
    with pytest.raises(DatasetError) as caught:
        open_source(results)
    assert str(caught.value) == (f"{results}:1: nested deeper than a JSON reader goes (about "
                                 f"a thousand levels); flatten or delete that line")


def test_a_candidates_file_of_two_tunings_is_refused(tmp_path):
    """Two tunings' files joined (``cat a.jsonl b.jsonl``) were shown as one summary; as for
    eval results of two evaluations, the line where the second begins is named."""
    joined = tmp_path / "c.jsonl"
    starts = [{"kind": "start", "experiment": "Sums", "tune_settings": {"model": model}}
              for model in ("a", "b")]
    joined.write_text("".join(json.dumps(line) + "\n" for line in starts))
    with pytest.raises(DatasetError) as caught:
        open_source(joined)
    assert str(caught.value) == (
        f"{joined}:2: its start line differs from line 1's, so the file mixes two tunings and "
        f"a summary of it would mix them; keep one tuning's lines per file")


def _other_tasks(lines, path, changed=lambda line: line["task"]):
    """``lines`` written to ``path`` as an eval of other tasks: another tasks digest, each
    task as ``changed`` makes it."""
    path.write_text("".join(json.dumps({**line, "task": changed(line), "eval_settings": {
        **line["eval_settings"], "tasks": "0" * 64}}) + "\n" for line in lines))
    return path


def test_two_evals_of_other_tasks_are_not_compared(tmp_path, results):
    """A comparison pairs tasks by index: two evals of other tasks set unrelated questions
    side by side, each a "regression" (sweep 28 B-04). Their tasks' digests differ, and a
    task of one index differs."""
    other = _other_tasks(read_results(results[1]), tmp_path / "other.jsonl", lambda line: {
        **line["task"], "question": "?"} if line["task_index"] == 3 else line["task"])
    with pytest.raises(DatasetError) as caught:
        Viewer([open_source(results[0]), open_source(other)])
    assert str(caught.value) == (
        f"{results[0]} and {other} evaluated other tasks (task 3 is another question in each: "
        f"another dataset or split, or rows changed or reordered), and a comparison pairs them "
        f"task by task; compare two evals of the same tasks")


def test_an_eval_and_its_subset_are_compared_on_the_tasks_they_share(tmp_path, results):
    """``eval -n 2`` of the same command has another tasks digest (it covers the rows it
    read), and was refused as "rows changed or reordered" (sweep 29 W-03); its tasks are
    the first ones of the full eval, which pair as they are."""
    lines = [line for line in read_results(results[1]) if line["task_index"] < 2]
    subset = _other_tasks(lines, tmp_path / "n2.jsonl")
    viewer = Viewer([open_source(results[0]), open_source(subset)])
    assert {row["task_index"] for row in viewer.compare_rows()} >= {0, 1}


def test_the_served_viewer_answers_only_requests_for_this_machine(results):
    """Served on 127.0.0.1, the viewer answered a request naming any host: a web page whose
    own name resolves to 127.0.0.1 (DNS rebinding) could read every rollout (sweep 31
    B-02). Requests naming this machine are answered as before."""
    import http.client

    server = make_server(Viewer([open_source(results[0])]), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]

    def status(host):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/api/rollouts?limit=1", headers={"Host": host})
        answer = connection.getresponse()
        body = json.loads(answer.read())
        connection.close()
        return answer.status, body

    try:
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
            assert status(host)[0] == 200, host
        assert status(f"attacker.example:{port}") == (403, {
            "error": "the viewer answers requests for this machine only (as http://127.0.0.1 "
                     "or http://localhost), not for 'attacker.example'"})
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("unreadable", ["results file", "run directory"])
def test_view_of_what_cannot_be_read_says_so_in_one_line(tmp_path, unreadable):
    """``view`` of a results file or run directory without read permission was "internal
    error in tunedsl: PermissionError" (sweep 39 B-05). Root ignores file permissions: the
    command runs without the capabilities that let it (setpriv)."""
    import os
    import subprocess
    import sys

    from .cli_support import unprivileged

    results, run = tmp_path / "r.jsonl", tmp_path / "run"
    results.write_text('{"task_index": 0, "repeat": 0, "reward": 1.0}\n')
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\n')
    shown, fix = (results, f"chmod u+r {results}") if unreadable == "results file" else \
        (run, f"chmod u+rx {run}")
    shown.chmod(0)
    prefix = unprivileged()
    try:
        done = subprocess.run([*prefix, sys.executable, "-m", "tunedsl", "view",
                               str(shown), "-o", str(tmp_path / "page.html")],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        shown.chmod(0o755)
    assert (done.returncode, done.stderr) == (2, (
        f"Error: {shown}: cannot read it (Permission denied); make it readable ({fix}), or "
        f"view another\n"))


@pytest.mark.parametrize("second", ["same", "dotted", "link"])
def test_a_file_compared_with_itself_is_noted(tmp_path, results, capsys, second):
    """``view a.jsonl a.jsonl`` (a name typed twice) compared each rollout with itself
    without a word (sweep 50's known list): the page is written, with a note why it
    shows no change."""
    from tunedsl.view import view

    other = {"same": results[0], "dotted": Path(results[0]).parent / "." /
             Path(results[0]).name, "link": tmp_path / "link.jsonl"}[second]
    if second == "link":
        other.symlink_to(results[0])
    view([results[0], other], out=tmp_path / "page.html")
    assert capsys.readouterr().err.splitlines()[0] == (
        f"note: {results[0]} and {other} are one file, so each rollout is compared with "
        f"itself; give the results before and after a change")
    assert (tmp_path / "page.html").is_file()


def test_two_files_alike_are_not_said_to_be_one(tmp_path, results, capsys):
    """A copy is another file (the same eval kept twice, say): no note."""
    import shutil

    from tunedsl.view import view

    shutil.copy(results[0], tmp_path / "copy.jsonl")
    view([results[0], tmp_path / "copy.jsonl"], out=tmp_path / "page.html")
    assert "note:" not in capsys.readouterr().err
