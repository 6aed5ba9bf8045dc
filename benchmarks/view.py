"""``tunedsl view`` on a run with 100k rollouts, against reading the whole file.

    python benchmarks/view.py [--rollouts 100000]

Writes a run directory with the local backend's own writer (``RolloutLog``: two-call
rollouts, about 1.6 kB a line, 100 per step), then measures, in this one run:

- reference: ``json.loads`` of every line of ``rollouts.jsonl``, what a viewer that reads
  everything into memory would do (time, and memory held afterwards);
- index: ``open_source`` (the viewer's start-up: one pass that keeps offsets and rewards);
- the page's requests over HTTP on loopback: ``/api/meta``, the newest step's first page,
  a later page of all rollouts, a text search over all of them and its second page.

- in Chromium (Debian's, through Playwright, when both are installed): the time from
  opening the page to its first rollout shown, for this run and for a run of as many
  steps with one rollout each (the same curves and step menu, 100x fewer rollouts;
  median of 5 loads each).

Goals (issue 14): the index holds <= 0.2x the reference's memory; the first page answers in
<= 0.1x the reference's load time and sends the browser < 1% of the file; a search of
every rollout costs <= 1.5x the reference load; the big run's page shows its first rollout
within 1.5x the time of the run with one rollout a step. Exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tunedsl.backends.local.rollouts import RolloutLog  # noqa: E402
from tunedsl.backends.local.steps import Rollout  # noqa: E402
from tunedsl.dsl.chat import ChatResponse, ModelCall, ToolCall  # noqa: E402
from tunedsl.rollout.run import RolloutResult  # noqa: E402
from tunedsl.view import Viewer, open_source  # noqa: E402
from tunedsl.view.server import make_server, url_of  # noqa: E402

PER_STEP = 100
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def build_run(folder: Path, rollouts: int, name: str = "run", per_step: int = PER_STEP) -> Path:
    """A run directory of ``rollouts`` two-call rollouts, ``per_step`` a step (groups of
    up to 4), written by the real writer."""
    run = folder / name
    run.mkdir()
    rng = random.Random(0)
    log = RolloutLog(run)
    metrics = []
    group_size = min(4, per_step)
    for step in range(1, rollouts // per_step + 1):
        groups, rows = [], []
        for task in range(per_step // group_size):
            question = " ".join(rng.choice(WORDS) for _ in range(40))
            rows.append({"question": question, "answer": str(task)})
            group = []
            for _ in range(group_size):
                first = ModelCall(messages=[{"role": "system", "content": "Use the tool."},
                                            {"role": "user", "content": question}],
                                  response=ChatResponse(content="", tool_calls=(
                                      ToolCall(id="c1", name="lookup", arguments='{"q": 1}'),),
                                      reasoning_content="Look it up first."),
                                  prompt_tokens=60, completion_tokens=12)
                reply = " ".join(rng.choice(WORDS) for _ in range(30))
                second = ModelCall(messages=[*first.messages,
                                             {"role": "tool", "content": "found it"}],
                                   response=ChatResponse(content=reply, finish_reason="stop"),
                                   prompt_tokens=80, completion_tokens=40)
                reward = float(rng.random() < 0.5)
                group.append(Rollout(task_index=task, calls=[first, second],
                                     result=RolloutResult(response=reply, reward=reward, metrics={}),
                                     advantages=[reward - 0.5, reward - 0.5]))
            groups.append(group)
        log.write(step, groups, rows)
        metrics.append({"step": step, "rollout/reward/mean": rng.random()})
    log.close()
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return run


def measured(work):
    """(seconds, bytes still allocated afterwards, result) of ``work()``: timed on its own,
    then run again under tracemalloc (which slows allocation) for the memory."""
    gc.collect()
    start = time.perf_counter()
    work()
    seconds = time.perf_counter() - start
    gc.collect()
    tracemalloc.start()
    result = work()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return seconds, held, result


def page_seconds(urls: list[str], loads: int = 5) -> list[float] | None:
    """Median seconds from opening each URL in Chromium to its first rollout shown; None
    without Playwright or Debian's chromium."""
    import shutil
    import statistics

    executable = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if executable is None:
        return None
    medians = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        page = browser.new_page()
        for url in urls:
            times = []
            for _ in range(loads):
                start = time.perf_counter()
                page.goto(url)
                page.wait_for_selector(".rollout")
                times.append(time.perf_counter() - start)
            medians.append(statistics.median(times))
        browser.close()
    return medians


def get(url: str) -> tuple[float, int, dict]:
    start = time.perf_counter()
    with urllib.request.urlopen(url) as response:
        body = response.read()
    return time.perf_counter() - start, len(body), json.loads(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        run = build_run(Path(scratch), args.rollouts)
        size = (run / "rollouts.jsonl").stat().st_size
        print(f"run: {args.rollouts} rollouts, {size / 1e6:.1f} MB rollouts.jsonl "
              f"(written in {time.perf_counter() - started:.1f} s)")

        def read_all():
            with open(run / "rollouts.jsonl", encoding="utf-8") as handle:
                return [json.loads(line) for line in handle]

        ref_s, ref_mem, everything = measured(read_all)
        del everything
        index_s, index_mem, source = measured(lambda: open_source(run))
        server = make_server(Viewer([source]), "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = url_of(server) + "api/"
        last = source.entries[-1].step
        meta_s, meta_bytes, _ = get(url + "meta")
        page_s, page_bytes, page = get(url + f"rollouts?step={last}")
        later_s, _, _ = get(url + "rollouts?offset=50000")
        word = "zeta beta zeta"
        search_s, _, found = get(url + f"rollouts?q={word.replace(' ', '+')}")
        again_s, _, _ = get(url + f"rollouts?q={word.replace(' ', '+')}&offset=50")
        # The same number of steps (curves, step menu), 100x fewer rollouts.
        steps = args.rollouts // PER_STEP
        small = make_server(Viewer([open_source(build_run(Path(scratch), steps, "small", 1))]),
                            "127.0.0.1", 0)
        threading.Thread(target=small.serve_forever, daemon=True).start()
        shown = page_seconds([url_of(server), url_of(small)])
        server.shutdown()
        small.shutdown()
        first_s, first_bytes = meta_s + page_s, meta_bytes + page_bytes

    rows = [
        ("reference: json.loads every line", f"{ref_s:.2f} s", f"{ref_mem / 1e6:.0f} MB held", ""),
        ("index (open_source)", f"{index_s:.2f} s ({index_s / ref_s:.2f}x)",
         f"{index_mem / 1e6:.1f} MB held ({index_mem / ref_mem:.3f}x)", "memory <= 0.2x"),
        ("first page: meta + newest step", f"{first_s * 1000:.1f} ms ({first_s / ref_s:.4f}x)",
         f"{first_bytes / 1e3:.0f} kB sent ({first_bytes / size:.4%} of the file)",
         "<= 0.1x, < 1%"),
        ("a later page (offset 50000)", f"{later_s * 1000:.1f} ms", "", ""),
        (f"search {word!r} ({found['total']} found)", f"{search_s:.2f} s ({search_s / ref_s:.2f}x)",
         "", "<= 1.5x"),
        ("its second page (cached)", f"{again_s * 1000:.1f} ms", "", ""),
    ]
    if shown is not None:
        rows.append(("Chromium: first rollout shown", f"{shown[0] * 1000:.0f} ms",
                     f"same steps, 1 rollout each: {shown[1] * 1000:.0f} ms "
                     f"({shown[0] / shown[1]:.2f}x)", "<= 1.5x"))
    else:
        rows.append(("Chromium: not measured", "", "(no playwright or chromium)", ""))
    for row in rows:
        print(f"{row[0]:<36} {row[1]:<22} {row[2]:<40} {row[3]}")
    goals = {"index memory": index_mem <= 0.2 * ref_mem,
             "first page time": first_s <= 0.1 * ref_s, "first page bytes": first_bytes < 0.01 * size,
             "search time": search_s <= 1.5 * ref_s, "page holds 50": len(page["items"]) == 50}
    if shown is not None:
        goals["page in Chromium"] = shown[0] <= 1.5 * shown[1]
    missed = [name for name, met in goals.items() if not met]
    print("goals: " + ("all met" if not missed else "missed: " + ", ".join(missed)))
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
