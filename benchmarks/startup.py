"""Startup cost of tunedsl, measured against a bare interpreter in the same run.

    python benchmarks/startup.py [--runs N]

Prints, for each command, the median wall time over N alternating runs, the
difference to ``python -c pass`` and the ratio, with the budgets from issue 2:
``import tunedsl`` <= 50 ms over a bare interpreter, ``tunedsl config`` on the
example <= 0.4 s over it. It also lists any heavy library ``import tunedsl``
pulls in (there must be none). Exits 1 when a budget is missed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "datasets", "ray", "trinity", "openai")
COMMANDS = {
    "bare": [sys.executable, "-c", "pass"],
    "import": [sys.executable, "-c", "import tunedsl"],
    "config": [sys.executable, "-m", "tunedsl", "config", "examples.math_agent.experiment:MathAgent"],
}
BUDGETS = {"import": 0.050, "config": 0.400}  # seconds over "bare"


def wall_time(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def heavy_imports() -> list[str]:
    probe = f"import sys, tunedsl; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return out.split()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for name, command in COMMANDS.items():
        wall_time(command)  # warm the file cache before measuring
    for _ in range(runs):  # alternate, so machine noise hits every command alike
        for name, command in COMMANDS.items():
            samples[name].append(wall_time(command))
    bare = statistics.median(samples["bare"])
    failed = False
    print(f"python -c pass: median {bare * 1000:.1f} ms over {runs} runs")
    for name in ("import", "config"):
        median = statistics.median(samples[name])
        over = median - bare
        ok = over <= BUDGETS[name]
        failed |= not ok
        print(f"{' '.join(COMMANDS[name][1:])}: median {median * 1000:.1f} ms, "
              f"+{over * 1000:.1f} ms over bare (budget +{BUDGETS[name] * 1000:.0f} ms), "
              f"ratio {median / bare:.2f}x  {'ok' if ok else 'OVER BUDGET'}")
    heavy = heavy_imports()
    failed |= bool(heavy)
    print(f"heavy modules imported by 'import tunedsl': {', '.join(heavy) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
