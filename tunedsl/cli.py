"""``tunedsl`` / ``python -m tunedsl``: parse arguments and call the Python API.

Exit codes: 0 success; 2 bad input (usage, import, settings, validation), shown as
``Error: ...`` lines on stderr without a traceback; 1 a run that failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from .errors import ConfigError, RunError, TunedslError, RunInterrupted


def _add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="MODULE:ATTR",
                        help="the @experiment, as pkg.module:Class or path/to/file.py:Class")
    parser.add_argument("--settings", metavar="FILE",
                        help="TOML settings to use instead of the discovered tunedsl.toml")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override one setting, e.g. "
                        "--set algorithm.group_size=8 (repeatable; applied last)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(
        prog="tunedsl", description="RL fine-tuning for agent code, declared in Python.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    config = commands.add_parser("config", help="print or write the Trinity-RFT YAML")
    _add_target(config)
    config.add_argument("-o", "--output", metavar="FILE", help="write the YAML to FILE")

    check = commands.add_parser("check", help="preflight: data, task keys, Trinity validation")
    _add_target(check)

    run = commands.add_parser("run", help="train: Trinity-RFT where GPUs are, else the local "
                              "CPU backend")
    _add_target(run)
    run.add_argument("--backend", default="auto", choices=("auto", "local", "trinity"),
                     help="auto (default): trinity when Trinity-RFT is installed and GPUs are "
                     "visible, else local")
    run.add_argument("--resume", metavar="RUN_DIR", help="continue this run directory")
    run.add_argument("--ray-address", metavar="ADDR", help="Ray cluster for --backend trinity "
                     "(default: RAY_ADDRESS, a running cluster, or a new local one)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    preview = commands.add_parser("preview", help="show the first rows of the training data")
    _add_target(preview)
    preview.add_argument("-n", type=int, default=5, help="rows to show (default 5)")
    preview.add_argument("--split", help="read this split instead of the dataset's own")
    return parser


def _load(args: argparse.Namespace):  # noqa: ANN202 - returns an ExperimentGraph
    from ._api import load_experiment

    return load_experiment(args.target, settings=args.settings, overrides=args.overrides)


def _config(args: argparse.Namespace) -> None:
    from .backends.trinity.config import to_yaml, trinity_config

    text = to_yaml(trinity_config(_load(args)))
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise ConfigError(f"-o {args.output}: cannot write it: {exc.strerror}") from None
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def _check(args: argparse.Namespace) -> None:
    from ._check import check

    for line in check(_load(args)):
        print(f"ok  {line}")


def _preview(args: argparse.Namespace) -> None:
    from ._datasets import first_rows

    if args.n < 1:
        raise ConfigError(f"-n {args.n}: show at least 1 row")
    graph = _load(args)
    rows = first_rows(graph.train_dataset, args.n, args.split, label="train_dataset")
    print(json.dumps(rows, indent=2, ensure_ascii=False, default=str))


def _run(args: argparse.Namespace) -> None:
    from ._run import run

    summary = run(args.target, backend=args.backend, settings=args.settings,
                  overrides=args.overrides, resume=args.resume, progress=not args.no_progress,
                  ray_address=args.ray_address)
    report = getattr(summary, "print", None)
    if report is not None:
        report()


_COMMANDS = {"config": _config, "check": _check, "run": _run, "preview": _preview}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit code."""
    # `python -m tunedsl` puts the working directory on sys.path; the console script
    # does not, yet `tunedsl check pkg.mod:Attr` should find pkg where the user stands.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    args = build_parser().parse_args(argv)
    try:
        _COMMANDS[args.command](args)
    except RunInterrupted as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 130
    except TunedslError as exc:
        user_traceback = getattr(exc, "user_traceback", None)
        if user_traceback:
            sys.stderr.write(user_traceback)
        for line in str(exc).splitlines():
            print(f"Error: {line}", file=sys.stderr)
        return 1 if isinstance(exc, RunError) else 2
    except KeyboardInterrupt:  # outside a run's own handling (which saves a checkpoint)
        print("Error: interrupted", file=sys.stderr)
        return 130
    return 0
