"""Write ``docs/figures.md``: the figures that change with each release, measured, never
typed into prose (issue 35).

``python scripts/figures.py`` counts the tests (``pytest --collect-only``) and keeps the
set-up timings of the last measurement; ``python scripts/figures.py --setup`` measures those
too: it clones the repository into a temporary folder and runs README's two set-up commands
there with empty pip and uv caches (several minutes), recording each command's wall time and
the main job's summary lines (steps, reward first and last).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures.md"
#: The measured values, kept at the end of the page so a count-only run keeps the timings.
DATA = re.compile(r"<!-- figures: (\{.*\}) -->", re.S)


def readme_commands() -> tuple[str, str]:
    """README's two set-up commands: the main job and the tests."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"),
                        re.S)
    main_job = next(b for b in blocks if "tunedsl run examples.arith" in b)
    tests = next(b for b in blocks if "pytest" in b and "tinker_server_env" in b)
    return main_job.strip(), tests.strip()


def count_tests() -> int:
    """How many tests pytest collects here (every file, the skipped ones included)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    found = re.search(r"(\d+) tests? collected", done.stdout)
    if found is None:
        raise SystemExit(f"pytest printed no count:\n{done.stdout[-2000:]}")
    return int(found.group(1))


def time_setup() -> dict[str, object]:
    """Each README command's wall time on a fresh clone with empty caches, and the main
    job's summary lines."""
    main_job, tests = readme_commands()
    figures: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as scratch:
        clone = Path(scratch) / "tunedsl"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        env = {**os.environ, "PIP_CACHE_DIR": f"{scratch}/pip-cache",
               "UV_CACHE_DIR": f"{scratch}/uv-cache"}
        for name, command in (("main job", main_job), ("tests", tests)):
            started = time.monotonic()
            done = subprocess.run(["bash", "-c", command], cwd=clone, env=env,
                                  capture_output=True, text=True)
            figures[f"{name} seconds"] = round(time.monotonic() - started)
            figures[f"{name} exit"] = done.returncode
            if name == "main job":
                figures["main job summary"] = [
                    line for line in done.stdout.splitlines()
                    if line.startswith(("steps ", "train reward ", "eval reward "))]
            else:
                lines = done.stdout.strip().splitlines()
                figures["tests summary"] = [line for line in lines
                                            if line.startswith("FAILED ")] + lines[-1:]
    figures["measured on"] = (f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
                              f"{platform.system()} {platform.machine()}")
    return figures


def page(tests: int, setup: dict[str, object]) -> str:
    """The page, from the figures."""
    lines = ["# Figures", "",
             "Written by `python scripts/figures.py` (`--setup` measures the set-up commands "
             "on a fresh clone with empty caches); never edited by hand.", "",
             f"- Tests collected: {tests}."]
    if setup:
        lines += [f"- Set-up measured on {setup['measured on']}:",
                  f"    - README's main job: {setup['main job seconds']} s, install included "
                  f"(exit {setup['main job exit']}).",
                  f"    - README's test command: {setup['tests seconds']} s, install included "
                  f"(exit {setup['tests exit']}).",
                  "", "The main job's summary:", "", "```text",
                  *[str(line) for line in setup.get("main job summary", [])], "```", "",
                  "The tests' failures, if any, and last line:", "", "```text",
                  *[str(line) for line in setup.get("tests summary", [])], "```"]
    lines += ["", f"<!-- figures: {json.dumps(setup, sort_keys=True)} -->", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", action="store_true",
                        help="also time README's set-up commands on a fresh clone")
    args = parser.parse_args()
    kept = DATA.search(FIGURES.read_text(encoding="utf-8")) if FIGURES.exists() else None
    setup = time_setup() if args.setup else (json.loads(kept.group(1)) if kept else {})
    FIGURES.write_text(page(count_tests(), setup), encoding="utf-8")
    print(f"{FIGURES.relative_to(ROOT)} written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
