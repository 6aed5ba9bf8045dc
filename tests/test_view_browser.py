"""`tunedsl view` in a real browser: Debian's Chromium, headless, driven by Playwright.

CI installs the ``chromium`` package (``.ci/run``); the tests use that executable, never
a browser Playwright downloads. Each page is served by the real server on loopback, or
opened as the ``--out`` file with the network off.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from tunedsl.view import Viewer, open_source, write_report
from tunedsl.view.server import make_server, url_of

from .fixtures.view_agent import write_results

playwright = pytest.importorskip("playwright.sync_api")
expect = playwright.expect
REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# The flags keep a headless Chromium from reaching for the network on its own.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser(arith_run, results):
    # Playwright's sync API keeps an event loop running in this thread, and training and
    # eval run their own: the data is made before the browser starts.
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (see .ci/run)")
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    with playwright.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1300, "height": 1000})
    opened = context.new_page()
    problems = []
    opened.on("pageerror", lambda error: problems.append(error))
    yield opened
    context.close()
    assert problems == []  # the page's script never threw


def served(viewer):
    server = make_server(viewer, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def arith_run(tmp_path_factory, tiny_model):
    """The arith example trained for 60 steps on the local backend (about 3 s)."""
    import tunedsl

    root = tmp_path_factory.mktemp("runs")
    summary = tunedsl.run("examples.arith.experiment:Arith", backend="local", progress=False,
                          overrides=[f"model.model_path={tiny_model}", f"checkpoint_root_dir={root}",
                                     "train_dataset.total_steps=60",
                                     "algorithm.eval_interval_steps=20",
                                     "algorithm.save_interval_steps=60"])
    return Path(summary.run_dir)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("evals")
    return (write_results(folder / "before.jsonl", wrong_on={5, 12}),
            write_results(folder / "after.jsonl", wrong_on={11, 8}))


def metric_points(run_dir, name):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(row["step"], row[name]) for row in rows if name in row]


def drawn_points(page, series):
    dots = page.locator(f'#reward-chart .curve-point[data-series="{series}"]')
    return [(int(d.get_attribute("data-step")), float(d.get_attribute("data-value")))
            for d in dots.all()]


def test_run_page_draws_the_reward_curves_and_shows_a_clicked_steps_rollouts(page, arith_run):
    """The arith run: train and eval reward as logged; clicking step 30 lists that step's
    rollouts, and a rollout opens on the task's question and the model's reply."""
    server = served(Viewer([open_source(arith_run)]))
    try:
        page.goto(url_of(server))
        page.wait_for_selector("#reward-chart svg")
        assert drawn_points(page, "rollout/reward/mean") == metric_points(arith_run, "rollout/reward/mean")
        assert drawn_points(page, "eval/eval/reward/mean@1") == metric_points(arith_run, "eval/eval/reward/mean@1")
        # The page opens on the newest step.
        assert page.inner_text("#page-info") == "1–50 of 120 rollouts"
        assert page.locator(".task-group").first.get_attribute("data-step") == "60"

        page.click('#reward-chart .curve-point[data-series="rollout/reward/mean"][data-step="30"]')
        page.wait_for_selector('.task-group[data-step="30"]')
        lines = [json.loads(line) for line in (arith_run / "rollouts.jsonl").read_text().splitlines()]
        step30 = [line for line in lines if line["step"] == 30]
        assert page.inner_text("#page-info") == f"1–50 of {len(step30)} rollouts"
        assert page.input_value("#step-select") == "30"
        first = page.locator(".rollout").first
        first.locator("summary").click()
        assert first.locator(".role-user .content").inner_text() == step30[0]["task"]["question"]
        assert first.locator(".reply .content").inner_text() == step30[0]["calls"][0]["reply"]
        assert f"reward {step30[0]['reward']:.4f}" in first.locator("summary").inner_text()

        page.select_option("#step-select", "")  # all steps, paged
        expect(page.locator("#page-info")).to_have_text(f"1–50 of {len(lines)} rollouts")
        page.click("#next")
        expect(page.locator("#page-info")).to_have_text(f"51–100 of {len(lines)} rollouts")
        # Past the search box's 250 ms pause: picking a step must not leave a re-query
        # pending that puts the page back at 1 after "next" was clicked.
        page.wait_for_timeout(400)
        assert page.inner_text("#page-info") == f"51–100 of {len(lines)} rollouts"
    finally:
        server.shutdown()


def test_a_rollout_with_per_token_advantages_shows_their_mean(page, arith_run, tmp_path):
    """Distillation gives each reply token its own advantage (rollouts.jsonl holds a list
    per call): the rollout's summary shows the first call's mean."""
    run = tmp_path / "run"
    shutil.copytree(arith_run, run)
    lines = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    newest = max(line["step"] for line in lines)
    first = next(line for line in lines if line["step"] == newest)
    first["advantages"] = [[0.5, -0.1]]
    (run / "rollouts.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    server = served(Viewer([open_source(run)]))
    try:
        page.goto(url_of(server))
        page.wait_for_selector(".rollout")
        assert "mean advantage +0.2000" in page.locator(".rollout summary").first.inner_text()
    finally:
        server.shutdown()


def test_the_page_pages_by_the_size_the_meta_answer_gives(page, browser, arith_run, tmp_path,
                                                          monkeypatch):
    """Served or as an --out file, the page asks for as many rollouts a page as the
    server's meta answer says (it holds no page size of its own)."""
    from tunedsl.view import app

    monkeypatch.setattr(app, "PAGE_SIZE", 7)
    viewer = Viewer([open_source(arith_run)])
    server = served(viewer)
    try:
        page.goto(url_of(server))
        page.wait_for_selector(".rollout")
        expect(page.locator("#page-info")).to_have_text("1–7 of 120 rollouts")
        page.click("#next")
        expect(page.locator("#page-info")).to_have_text("8–14 of 120 rollouts")
        assert page.locator(".rollout").count() == 7
    finally:
        server.shutdown()
    out = tmp_path / "report.html"
    write_report(viewer, out, max_rollouts=240)
    context = browser.new_context(offline=True)
    try:
        opened = context.new_page()
        opened.goto(out.as_uri())
        opened.wait_for_selector(".rollout")
        expect(opened.locator("#page-info")).to_have_text("1–7 of 120 rollouts")
    finally:
        context.close()


def test_transcript_shows_roles_reasoning_tool_calls_and_errors(page, results):
    server = served(Viewer([open_source(results[0])]))
    try:
        page.goto(url_of(server))
        page.wait_for_selector(".rollout")
        expect(page.locator("#charts")).to_be_hidden()  # an eval has no curves
        labels = page.locator(".summary-table td:first-child").all_inner_texts()
        assert labels[:2] == ["rollouts", "reward"] and "latency (s)" in labels
        rollout = page.locator('.rollout[data-id="0"]')
        rollout.locator("summary").click()
        roles = rollout.locator(".message .role").all_inner_texts()
        assert roles == ["SYSTEM", "USER", "ASSISTANT · REPLY", "TOOL · FOR #CALL-1",
                         "ASSISTANT · REPLY"]
        assert rollout.locator(".reasoning").inner_text() == "reasoning: I should add 2 and 3 with the tool."
        assert rollout.locator(".tool-call").inner_text() == 'add({"a": 2, "b": 3})  #call-1'
        assert rollout.locator(".role-tool .content").inner_text() == "5"
        assert rollout.locator(".reply .content").last.inner_text() == "The sum is 6"
        assert "3 earlier messages not repeated" in rollout.inner_text()

        failed = page.locator(".rollout", has=page.locator("summary .bad")).first
        failed.locator("summary").click()
        assert failed.locator(".error").first.inner_text().endswith(
            "raised ZeroDivisionError: the calculator cannot divide by zero")
        traceback = failed.locator(".traceback").inner_text()
        assert traceback.startswith("Traceback (most recent call last):")
        assert 'raise ZeroDivisionError("the calculator cannot divide by zero")' in traceback
    finally:
        server.shutdown()


def shown(page):
    return sorted(int(r.get_attribute("data-id")) for r in page.locator(".rollout").all())


def test_filters_change_what_is_shown(page, results):
    source = open_source(results[0])
    server = served(Viewer([source]))
    try:
        page.goto(url_of(server))
        page.wait_for_selector(".rollout")
        assert shown(page) == list(range(12))
        page.check("#errors-only")
        expect(page.locator(".rollout")).to_have_count(2)
        assert shown(page) == [i for i, e in enumerate(source.entries) if e.error]
        page.uncheck("#errors-only")
        page.fill("#reward-min", "1")
        expect(page.locator("#page-info")).to_have_text("1–6 of 6 rollouts")
        assert shown(page) == [i for i, e in enumerate(source.entries) if e.reward == 1.0]
        page.fill("#reward-min", "")
        page.fill("#search", "add 10 and 1")
        expect(page.locator(".rollout")).to_have_count(2)
        assert {source.record(i)["task_index"] for i in shown(page)} == {2}
        page.fill("#search", "nothing says this")
        expect(page.locator("#page-info")).to_have_text("no rollouts match")
    finally:
        server.shutdown()


def test_compare_lists_tasks_by_change_in_reward_regressions_first(page, results):
    viewer = Viewer([open_source(path) for path in results])
    server = served(viewer)
    try:
        page.goto(url_of(server))
        page.wait_for_selector(".compare-row")
        deltas = [float(r.get_attribute("data-delta")) for r in page.locator(".compare-row").all()]
        assert deltas == sorted(deltas) and deltas[0] == -1.0
        expected = [row["task_index"] for row in viewer.compare_rows()]
        assert [int(r.get_attribute("data-task")) for r in page.locator(".compare-row").all()] == expected
        page.locator(".compare-row").first.click()
        page.wait_for_selector(".side-after .rollout")
        assert page.locator(".side-before .reply .content").last.inner_text() == "The sum is 11"
        assert page.locator(".side-after .reply .content").last.inner_text() == "The sum is 12"
    finally:
        server.shutdown()


def test_out_file_renders_with_the_network_off(browser, tmp_path, arith_run):
    """The --out file draws the curves and shows rollouts with no server and no network,
    and says how many rollouts it left out."""
    out = tmp_path / "report.html"
    left_out = write_report(Viewer([open_source(arith_run)]), out, max_rollouts=240)
    context = browser.new_context(offline=True)
    asked = []
    context.route("**/*", lambda route: (asked.append(route.request.url), route.abort())
                  if not route.request.url.startswith("file:") else route.continue_())
    page = context.new_page()
    problems = []
    page.on("pageerror", lambda error: problems.append(error))
    try:
        page.goto(out.as_uri())
        page.wait_for_selector(".rollout")
        assert len(drawn_points(page, "rollout/reward/mean")) == 60
        assert page.inner_text("#page-info") == "1–50 of 120 rollouts"  # step 60, embedded
        # The step menu offers the steps the file holds: 60 and 59 (120 rollouts each).
        assert page.locator("#step-select option").all_inner_texts() == [
            "all steps", "60 (120)", "59 (120)"]
        page.select_option("#step-select", "59")
        page.wait_for_selector('.task-group[data-step="59"]')
        total = 60 * 120
        assert left_out == total - 240
        assert page.inner_text("#left-out") == (f"This file holds 240 of {total} rollouts: "
                                                f"{left_out} left out (tunedsl view "
                                                f"--max-rollouts sets how many a file keeps).")
        page.fill("#search", "7+2=")
        page.wait_for_selector(".task-group")
        assert asked == [] and problems == []
    finally:
        context.close()


def test_out_file_of_a_comparison_works_offline(browser, tmp_path, results):
    """A comparison's --out file lists the tasks by change and opens both sides' rollouts
    with the network off."""
    viewer = Viewer([open_source(path) for path in results])
    out = tmp_path / "compare.html"
    write_report(viewer, out, max_rollouts=100)
    context = browser.new_context(offline=True)
    page = context.new_page()
    try:
        page.goto(out.as_uri())
        page.wait_for_selector(".compare-row")
        assert [int(r.get_attribute("data-task")) for r in page.locator(".compare-row").all()] == [
            row["task_index"] for row in viewer.compare_rows()]
        page.locator(".compare-row").first.click()
        expect(page.locator(".side-after .reply .content").last).to_have_text("The sum is 12")
        expect(page.locator("#left-out")).to_be_hidden()  # all 24 rollouts fit
    finally:
        context.close()


def test_out_file_renders_a_printed_page_that_opens_a_comment_and_a_script(page, tmp_path,
                                                                            results):
    """A rollout that printed ``<!-- ... <script`` (a page cut short, as a scraping agent
    prints it) made the --out file blank: the data's own end tag was read as text inside
    it, and the page's script never ran (sweep 30 B-03)."""
    printed = 'fetched: <html><!-- nav: <script src="menu.js">'
    lines = [json.loads(line) for line in Path(results[0]).read_text().splitlines()]
    lines[0]["output"] = printed
    odd = tmp_path / "odd.jsonl"
    odd.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "odd.html"
    write_report(Viewer([open_source(odd)]), out, max_rollouts=100)
    page.goto(out.as_uri())  # (the fixture fails the test on any error of the page's script)
    page.wait_for_selector(".rollout")
    assert page.locator(".rollout").count() == len(lines)
