"""Startup cost of tunedsl, measured against a bare interpreter in the same run.

    python benchmarks/startup.py [--runs N]

Prints, for each command, the median wall time over N alternating runs, the
difference to its reference and the ratio, with the budgets: ``import tunedsl`` <= 50 ms
over a bare interpreter; ``tunedsl config`` on the example <= 0.4 s over importing
Trinity's config validator, which it must run to write what ``run`` launches (the
engine count fitted to the cluster) and which imports transformers. It also lists any
heavy library ``import tunedsl`` pulls in (there must be none). Exits 1 when a budget is
missed.
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
    "trinity": [sys.executable, "-c", "import trinity.common.config_validator"],
    "config": [sys.executable, "-m", "tunedsl", "config", "examples.math_agent.experiment:MathAgent"],
}
#: Seconds over the reference each command may take, and that reference.
BUDGETS = {"import": (0.050, "bare"), "config": (0.400, "trinity")}


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
    medians = {name: statistics.median(times) for name, times in samples.items()}
    failed = False
    for name in ("bare", "trinity"):
        print(f"{' '.join(COMMANDS[name][1:])}: median {medians[name] * 1000:.1f} ms over "
              f"{runs} runs ({name}, a reference)")
    for name, (budget, reference) in BUDGETS.items():
        median, base = medians[name], medians[reference]
        over = median - base
        ok = over <= budget
        failed |= not ok
        print(f"{' '.join(COMMANDS[name][1:])}: median {median * 1000:.1f} ms, "
              f"+{over * 1000:.1f} ms over {reference} (budget +{budget * 1000:.0f} ms), "
              f"ratio {median / base:.2f}x  {'ok' if ok else 'OVER BUDGET'}")
    heavy = heavy_imports()
    failed |= bool(heavy)
    print(f"heavy modules imported by 'import tunedsl': {', '.join(heavy) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
