"""Eval throughput against a loopback endpoint that answers after 50 ms.

    python benchmarks/eval_throughput.py

Runs ``tunedsl eval``'s engine (`tunedsl.evaluation.evaluate.evaluate`, the arith example's
workflow and judge, concurrency 64) for N = 500 and N = 2000 rollouts, each in its
own process so peak memory is measured apart, against the test suite's OpenAI-protocol
server running in another process. Prints the wall time of the rollouts (from the
first request to the last line written; loading the dataset is not counted) against
the ideal
N x 0.05 / 64 s (goal for N = 2000: within 1.25x; at N = 500 opening the 64
connections weighs more) and peak RSS for both N (goal: flat).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DELAY, CONCURRENCY = 0.05, 64

CHILD = r'''
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import tunedsl
from tunedsl.models.endpoint import OpenAIChatModel, endpoint_client
from tunedsl.evaluation.evaluate import evaluate

root, base_url, data, n, out = sys.argv[1:6]
graph = tunedsl.load_experiment("examples.arith.experiment:Arith",
                                overrides=[f"eval_dataset.path={data}"])
client = endpoint_client(base_url)
sampling = {"temperature": 1.0, "max_tokens": 1}
from tunedsl.evaluation.evaluate import EvalScope
from tunedsl.evaluation.execution import Execution
from tunedsl.models.reached import Reached
summary = evaluate(graph, Reached(model=lambda: OpenAIChatModel(client, "m", sampling=sampling,
                                                               direct=True), clients=[client]),
                   output=out, scope=EvalScope(limit=int(n)),
                   execution=Execution(concurrency=64, progress=False))
print(json.dumps({"seconds": summary.seconds, "rollouts": summary.rollouts,
                  "errors": summary.errors,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def main() -> int:
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "openai_server.py"),
                               "--delay", str(DELAY)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[-1])
        with tempfile.TemporaryDirectory() as folder:
            data = Path(folder) / "data"
            data.mkdir()
            with (data / "test.jsonl").open("w") as rows:
                for i in range(2000):
                    rows.write(json.dumps({"question": f"{i % 10}+{i % 7}=",
                                           "answer": str(i % 10 + i % 7)}) + "\n")
            results = {}
            for n in (500, 2000):
                out = Path(folder) / f"results-{n}.jsonl"
                done = subprocess.run(
                    [sys.executable, "-c", CHILD, str(ROOT), f"http://127.0.0.1:{port}/v1",
                     str(data), str(n), str(out)], cwd=ROOT, capture_output=True, text=True,
                    check=True)
                results[n] = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        server.kill()
    missed = False
    for n, got in results.items():
        ideal = n * DELAY / CONCURRENCY
        ratio = got["seconds"] / ideal
        goal = ", goal <= 1.25x" if n == 2000 else ", for comparison"
        missed |= n == 2000 and ratio > 1.25
        print(f"N={n:5d}: {got['seconds']:.3f} s (ideal {ideal:.3f} s, ratio {ratio:.2f}x{goal}), "
              f"{got['errors']} errors, peak RSS {got['rss_mb']:.1f} MB")
    growth = results[2000]["rss_mb"] / results[500]["rss_mb"]
    print(f"peak RSS N=2000 / N=500: {growth:.2f}x (goal: flat)")
    if missed:
        print("GOAL MISSED: wall time over 1.25x the ideal")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
