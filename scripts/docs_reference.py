"""Write the documentation site's generated references from the code: the settings table
(``docs/reference/settings.md``), every command's ``--help`` (``docs/reference/commands.md``),
every metric the local backend logs (``docs/reference/metrics.md``) and every row of the
error catalogue (``docs/reference/error-catalogue.md``, from ``tests/test_error_catalogue.py``).

Run it after changing a setting or an option (``tests/test_docs.py`` fails until the files
match): ``.venv/bin/python scripts/docs_reference.py``.
"""

from __future__ import annotations

import html
import os
import sys
from collections import defaultdict
from typing import Any
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


def pages() -> dict[Path, str]:
    """Each generated page's path and text."""
    sys.path.insert(0, str(ROOT))
    from tunedsl.cli import build_parser
    from tunedsl.dsl.settings_table import markdown_table

    settings = ("# Settings\n\nEvery setting of an experiment: its default, where it goes in "
                "the Trinity-RFT config, and what it does. Set each in `tunedsl.toml` (or "
                "`[tool.tunedsl]`), on the `@experiment` class, or with `--set key=value`, "
                "each layer over the one before: the class over the TOML file, `--set` "
                "over both ([Settings](../concepts/settings.md) has the details).\n\n"
                + markdown_table())
    parser = build_parser()
    commands = next(action for action in parser._actions if action.dest == "command")
    parts = ["# Commands\n\nEvery command of `python -m tunedsl`, as its `--help` shows it.\n"]
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: one width for all
    try:
        for name, command in commands.choices.items():
            parts.append(f"## {name}\n\n```text\n{command.format_help().rstrip()}\n```\n")
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return {REFERENCE / "settings.md": settings, REFERENCE / "commands.md": "\n".join(parts),
            REFERENCE / "metrics.md": metrics_page(), REFERENCE / "error-catalogue.md":
            error_catalogue_page(), REFERENCE / "algorithm-parts.md": algorithm_parts_page(),
            REFERENCE / "run-directory.md": run_directory_page()}


#: `run_files` names that are not files of a run directory: where run directories and the
#: other commands' outputs go, and the parts other names are built from.
NOT_IN_A_RUN_DIRECTORY = {"CHECKPOINT_ROOT_DIR", "TENSORBOARD_FOLDER", "STEP_DIR_PREFIX",
                          "EVALS_DIR", "PROMPTS_DIR"}


def run_directory_page() -> str:
    """Every file and folder of a run directory, from `tunedsl.runs.run_files`: each
    name's value and the ``#:`` comment above it."""
    import ast

    from tunedsl.runs import run_files

    source = Path(run_files.__file__).read_text(encoding="utf-8")
    lines = source.splitlines()
    rows = []
    for node in ast.parse(source).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        if not isinstance(target, ast.Name):
            continue
        value = getattr(run_files, target.id)
        if not isinstance(value, str) or target.id in NOT_IN_A_RUN_DIRECTORY:
            continue
        comment, at = [], node.lineno - 2
        while at >= 0 and lines[at].startswith("#:"):
            comment.insert(0, lines[at][2:].strip())
            at -= 1
        text = " ".join(comment).replace("``", "`")
        rows.append(f"| `{value}{'/' if target.id.endswith('_DIR') else ''}` | {text} |")
    return ("# Run directory\n\nA run directory is `<checkpoint_root_dir>/<project>/"
            "<name>-<YYYYmmddHHMMSS>/`, laid out as Trinity-RFT lays out its "
            "`checkpoint_job_dir` on both backends, so `tunedsl view`, a resume and Trinity's "
            "own tools read either backend's runs (`checkpoint_root_dir` defaults to "
            "`checkpoints`; `eval` writes to `evals/` and `tune-prompt` to `prompts/`, "
            "outside it). Each name below is defined once, in "
            "`tunedsl/runs/run_files.py`, which this page is written from.\n\n"
            "| name | what it holds |\n|---|---|\n" + "\n".join(rows) + "\n")


def _arguments(arguments: Any) -> str:
    return ", ".join(f"`{name}={value!r}`" for name, value in arguments.items()) or "(none)"


def algorithm_parts_page() -> str:
    """Every part Trinity-RFT 0.6.0 registers, with its default arguments, and whether the
    local backend computes it (`tunedsl.dsl.algorithms`, the local backend's tables)."""
    from tunedsl.backends.local.checks import LOCAL_PARTS
    from tunedsl.dsl import algorithms as parts

    def table(title: str, setting: str, rows: Any, local: Any) -> str:
        name, _, arguments = setting.partition(" ")
        lines = [f"## {title}\n\nSet with `algorithm.{name}`; {arguments}.\n",
                 "| name | default arguments | "
                 "local backend |", "|---|---|---|"]
        lines += [f"| `{name}` | {_arguments(arguments)} | {'yes' if name in local else ''} |"
                  for name, arguments in rows.items()]
        return "\n".join(lines) + "\n"

    return "\n".join([
        "# Algorithm parts\n\nEvery part of an algorithm Trinity-RFT 0.6.0 registers, "
        "under Trinity's names, with the arguments its `default_args()` gives; set one with "
        "the setting under its title and its arguments with the matching `*_args` table "
        "([Algorithms](algorithms.md) says how they compose). The Trinity backend runs "
        "every part; the local backend the ones marked, and refuses another in one line.\n",
        table("Policy losses", "policy_loss_fn its arguments in `algorithm.policy_loss_args`",
              parts.POLICY_LOSS_ARGS, LOCAL_PARTS["policy_loss_fn"]),
        table("Advantage functions", "advantage_fn its arguments in `algorithm.advantage_args`",
              parts.ADVANTAGE_ARGS, LOCAL_PARTS["advantage_fn"]),
        table("KL losses", "kl_loss_fn its weight is `algorithm.kl_coef`",
              {name: parts.KL_ARGS for name in parts.KL_LOSS_FNS}, parts.KL_LOSS_FNS),
        table("Entropy losses", "entropy_loss_fn its weight is `algorithm.entropy_coef`",
              {name: parts.ENTROPY_ARGS for name in parts.ENTROPY_LOSS_FNS},
              LOCAL_PARTS["entropy_loss_fn"]),
        table("Sample strategies", "sample_strategy its arguments in "
              "`algorithm.sample_strategy_args`", parts.SAMPLE_STRATEGY_ARGS,
              LOCAL_PARTS["sample_strategy"]),
    ])


def metrics_page() -> str:
    """The metrics reference, from `tunedsl.backends.local.metric_names`."""
    from tunedsl.backends.local.metric_names import markdown

    return ("# Metrics\n\nEvery metric the local backend logs at each step, in "
            "`<run>/metrics.jsonl` and the monitor (TensorBoard, wandb, MLflow, SwanLab). "
            "Names are Trinity-RFT's where both backends measure the same thing, so one "
            "dashboard reads either backend's runs; on the Trinity backend Trinity logs its "
            "own set (`actor/*`, `critic/*`, `response_length/*`, `timing_s/*`, ...), and "
            "what your workflow or judge returns in `metrics` reaches it as "
            "`rollout/{metric}/{stat}` too. The tests check every metric a local run logs "
            "against this table.\n\n" + markdown())


def _cell(text: str) -> str:
    return "<code>" + html.escape(text).replace("|", "&#124;") + "</code>"


def error_catalogue_page() -> str:
    """Every row of the error catalogue: the command, its exit code and the exact line the
    user sees, grouped by command (the rows are the tests that pin them)."""
    from tests.test_error_catalogue import ROWS

    by_command: dict[str, list[str]] = defaultdict(list)
    for row in ROWS:
        argv = " ".join(row.argv)
        line = row.first_line.replace("{dir}", "<project>").replace("{tiny}", "<model>")
        by_command[row.argv[0] if row.argv else "(no command)"].append(
            f"| {row.id.replace('-', ' ')} | {_cell('tunedsl ' + argv)} | {row.code} | "
            f"{_cell(line)} |")
    parts = ["# Error catalogue\n\nEvery bad input and fault the tests pin "
             f"({len(ROWS)} rows of `tests/test_error_catalogue.py`), with the exact first line "
             "tunedsl prints and its exit code (2 bad input, 1 a failed run, 0 for a setting "
             "that is taken with a note). `<project>` is the project folder, `exp:E` its "
             "experiment. See [Errors and exit codes](errors.md) for the rules they follow.\n"]
    for command in sorted(by_command):
        parts.append(f"## {command}\n\n| situation | command | exit | what tunedsl says |\n"
                     "|---|---|---|---|\n" + "\n".join(by_command[command]) + "\n")
    return "\n".join(parts)


def main() -> int:
    for path, text in pages().items():
        changed = not path.exists() or path.read_text(encoding="utf-8") != text
        path.write_text(text, encoding="utf-8")
        print(f"{path.relative_to(ROOT)}: {'updated' if changed else 'already current'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
