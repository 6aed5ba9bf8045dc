"""``tunedsl`` / ``python -m tunedsl``: parse arguments and call the Python API.

Exit codes: 0 success; 2 bad input (usage, import, settings, validation), shown as
``Error: ...`` lines on stderr without a traceback; 1 a run that failed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .access import searchable
from .api import BACKENDS, DEFAULT_CONCURRENCY, PromptSearch
from .dsl.records import is_http_url, query_problem
from .errors import ConfigError, RunError, RunInterrupted, TunedslError, shortened
from .evaluation.prompt_tuning import DEFAULT_VAL_FRACTION
from .interrupts import terminate_as_interrupt
from .keys import holds_a_key, is_a_key_itself, without_keys
from .runs.outputs import (
    TRINITY_YAML,
    Input,
    experiment_inputs,
    refuse_misnamed,
    refuse_overwriting,
)
from .runs.run_files import STEP_DIR_SHOWN
from .view import DEFAULT_MAX_ROLLOUTS, DEFAULT_PORT
from .wording import default_output, for_the_command_line, printable

if TYPE_CHECKING:
    from .config.graph import ExperimentGraph


def _add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="MODULE:ATTR",
                        help="the @experiment, as pkg.module:Class or path/to/file.py:Class")
    parser.add_argument("--settings", metavar="FILE", type=_path, action=_Once,
                        twice="{option} is given twice; give one file (a [params] file from "
                        "tune-prompt goes on top of the settings found beside the experiment)",
                        help="TOML settings to use instead of the discovered tunedsl.toml (a file "
                             "of [params] alone, as tune-prompt writes, goes on top of it)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override one setting, e.g. "
                        "--set algorithm.group_size=8 (repeatable; applied last)")


class _Formatter(argparse.HelpFormatter):
    """Every option's default in its help, where the help does not say it already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (not text or text == argparse.SUPPRESS or "default" in text or default is None
                or default is False or default == [] or default == argparse.SUPPRESS
                or not action.option_strings):
            return action.help
        return f"{text} (default {default})"


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors in tunedsl's one-line form (exit code 2), and every
    option's default in ``--help``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)
        # An option that takes one value takes it once: argparse would keep the last of
        # two without a word (`-o a.jsonl -o b.jsonl` wrote b.jsonl; a second --base-url
        # sent every rollout elsewhere).
        self.register("action", None, _Once)
        self.register("action", "store", _Once)

    def error(self, message: str) -> Any:  # argparse's hook; it must not return
        # (argparse quotes what it did not take: a key given to an option tunedsl has not,
        # --api-key KEY, was shown whole)
        print(f"Error: {self.prog}: {without_keys(message)}; see {self.prog} --help",
              file=sys.stderr)
        raise SystemExit(2)


def _port(text: str) -> int:
    """A TCP port number (argparse turns the ValueError into a usage error, exit 2)."""
    port = int(text)
    if not 0 <= port <= 65535:
        raise ValueError(text)
    return port


_port.__name__ = "port"  # argparse names the type in its message: "invalid port value"


class _Once(argparse.Action):
    """An option given at most once: argparse keeps the last of two, dropping the first
    without a word. ``twice``: the error when it is given again (or, for an option that
    shares its destination with an old spelling, when both are given)."""

    def __init__(self, *args: Any, twice: str = "{option} is given twice; give it once",
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.twice = twice

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        _set_once(parser, namespace, self.dest, values,
                  self.twice.format(option="/".join(self.option_strings) or self.metavar))


class _Renamed(argparse.Action):
    """An option's old spelling, kept working: it says what replaced it (on stderr)."""

    def __init__(self, *args: Any, renamed: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.renamed = renamed

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"note: {option_string} is now {self.renamed}", file=sys.stderr)
        _set_once(parser, namespace, self.dest, values,
                  f"{option_string} and {self.renamed} name one output; give it once")


def _set_once(parser: argparse.ArgumentParser, namespace: argparse.Namespace, dest: str,
              values: Any, spelled: str) -> None:
    given = namespace.__dict__.setdefault("_given_once", set())  # defaults are not given
    if dest in given:
        parser.error(spelled)
    given.add(dest)
    setattr(namespace, dest, values)


def _run_dir(text: str) -> str:
    """``run --resume``'s optional run directory: the experiment given there instead (the
    option takes the next word) is named as such."""
    if ":" in text and not Path(text).exists():
        raise argparse.ArgumentTypeError(
            f"{text!r} is the experiment, not a run directory; give the experiment first: "
            f"tunedsl run {text} --resume (alone, it continues the newest run)")
    return _path(text)


def _path(text: str) -> str:
    """A file or folder name: an empty one (``-o ''``) would be read as no option at all;
    a quoted ``~/x`` is the home folder's, as the shell reads it unquoted."""
    from .config.paths import home

    if not text.strip():
        raise argparse.ArgumentTypeError("give a file or folder name, not an empty string")
    if text == "-":  # read as a file named "-", not as standard input or output
        raise argparse.ArgumentTypeError("'-' (standard input or output) is not taken; give "
                                         "a file name")
    try:
        return home(text)
    except ConfigError as refused:
        raise argparse.ArgumentTypeError(str(refused)) from None


def _group(parser: argparse.ArgumentParser, groups: dict[str, tuple[str, ...]]) -> None:
    """Show a long command's options in groups (by their destinations), in order."""
    for title, dests in groups.items():
        group = parser.add_argument_group(title)
        for action in [a for a in parser._actions if a.dest in dests]:
            for container in parser._action_groups:
                if action in container._group_actions:
                    container._group_actions.remove(action)
            group._group_actions.append(action)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = _Parser(
        prog="tunedsl", description="RL fine-tuning for agent code, declared in Python.")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"tunedsl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    config = commands.add_parser("config", help="print or write the Trinity-RFT YAML")
    _add_target(config)
    config.add_argument("-o", "--output", metavar="FILE", type=_path, help="write the YAML to FILE")
    config.add_argument("--cluster", metavar="NODESxGPUS",
                        help="fit the run to this cluster shape (1x8, 2x8), as run does; "
                        "default: the config's trinity.cluster, else this machine's GPUs if "
                        "they are enough, else the fewest GPUs Trinity accepts")

    check = commands.add_parser("check", help="preflight: the backend's checks, data, task "
                                "keys, Trinity validation")
    _add_target(check)
    check.add_argument("--backend", default="auto", choices=("auto", "local", "trinity"),
                       help="whose checks to run: auto (default) checks the backend run would "
                       "choose")
    check.add_argument("--cluster", metavar="NODESxGPUS",
                       help="validate the Trinity run on this cluster shape (1x8, 2x8); "
                       "default: the config's trinity.cluster, else this machine's GPUs if "
                       "they are enough, else the fewest GPUs Trinity accepts")

    run = commands.add_parser("run", help="train: Trinity-RFT where GPUs are, else the local "
                              "CPU backend")
    _add_target(run)
    run.add_argument("--backend", default="auto", choices=BACKENDS,
                     help="auto (default): trinity when Trinity-RFT is installed and GPUs are "
                     "visible, else local")
    run.add_argument("--resume", metavar="RUN_DIR", type=_run_dir, nargs="?", const=True,
                     help="continue this run directory; alone: the newest run of this "
                          "experiment")
    run.add_argument("--from-good-checkpoint", action="store_true",
                     help="with --resume: when the newest checkpoint is damaged, continue "
                     "from the newest good one (local backend)")
    run.add_argument("--ray-address", metavar="ADDR", help="Ray cluster for --backend trinity "
                     "(default: RAY_ADDRESS, a running cluster, or a new local one)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    evaluation = commands.add_parser("eval", help="score the agent on its eval tasks with a "
                                     "model endpoint or a local checkpoint, without training")
    _add_target(evaluation)
    evaluation.add_argument("--base-url", metavar="URL", help="an OpenAI-compatible "
                            "endpoint, e.g. http://localhost:8000/v1 (serves each --model "
                            "given without its own @URL)")
    evaluation.add_argument("--model", action="append", metavar="NAME[@URL]",
                            help="the model name the endpoint serves, or NAME@URL for its own "
                            "endpoint; repeat it to compare models on the same tasks and "
                            "rank them (beside --checkpoint: the name its results keep)")
    evaluation.add_argument("--api-key-env", metavar="VAR",
                            help="environment variable holding the API key (never stored)")
    evaluation.add_argument("--checkpoint", metavar="DIR", type=_path,
                            help="evaluate a locally trained "
                            f"model folder (RUN_DIR/{STEP_DIR_SHOWN}) on the CPU instead")
    evaluation.add_argument("--split", help="read this split instead of the dataset's own")
    evaluation.add_argument("-n", "--limit", dest="n", type=int, metavar="N",
                            help="only the first N tasks")
    evaluation.add_argument("--repeat", type=int, default=1, metavar="N",
                            help="rollouts per task (pass@k)")
    evaluation.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY,
                            metavar="N", help="rollouts in flight")
    evaluation.add_argument("--aux", action="append", default=[], metavar="NAME=URL,MODEL",
                            help="an endpoint for an auxiliary model (repeatable; its key: "
                            "auxiliary_models.NAME.api_key_env, else --api-key-env)")
    evaluation.add_argument("-o", "--output", metavar="FILE", type=_path,
                            help="results JSONL (default "
                            "evals/<name>-<timestamp>.jsonl); with several --model, a folder "
                            "holding <model>.jsonl per candidate (default "
                            "evals/<name>-<timestamp>/)")
    evaluation.add_argument("--resume", action="store_true",
                            help="continue -o FILE (or -o DIR), skipping the rollouts it holds")
    evaluation.add_argument("--no-progress", action="store_true", help="no progress bar")
    _group(evaluation, {
        "the experiment": ("settings", "overrides"),
        "the model": ("base_url", "model", "api_key_env", "checkpoint", "aux"),
        "the tasks": ("split", "n", "repeat", "concurrency"),
        "the results": ("output", "resume", "no_progress")})

    rescoring = commands.add_parser("rescore", help="re-score saved results with the current "
                                    "judge, calling no model")
    rescoring.add_argument("results", metavar="RESULTS.jsonl", type=_path)
    _add_target(rescoring)
    rescoring.add_argument("-o", "--output", metavar="FILE", type=_path,
                           help="write re-scored results")
    rescoring.add_argument("--aux", action="append", default=[], metavar="NAME=URL,MODEL",
                           help="an endpoint for an auxiliary model the judge calls (an LLM "
                           "judge; repeatable; its key: auxiliary_models.NAME.api_key_env, "
                           "else --api-key-env)")
    rescoring.add_argument("--api-key-env", metavar="VAR",
                           help="environment variable holding the --aux endpoints' key")

    viewing = commands.add_parser("view", help="a local web page over a run directory or eval "
                                  "results (two results files: compared task by task)")
    viewing.add_argument("paths", nargs="+", metavar="PATH", type=_path,
                         help="a run directory, an eval results file, or two results files")
    viewing.add_argument("--host", help="address to serve on (default "
                         "127.0.0.1: this machine only)")
    viewing.add_argument("--port", type=_port, help=f"port (default {DEFAULT_PORT}, else any "
                         f"free one; 0: any free one)")
    viewing.add_argument("--no-browser", action="store_true", help="do not open a browser")
    viewing.add_argument("-o", "--output", dest="out", metavar="FILE", type=_path,
                         action=_Once, twice="-o/--output is given twice (or with "
                         "--out); give one file",
                         help="write the page as one self-contained "
                         "HTML file instead of serving it")
    viewing.add_argument("--out", dest="out", type=_path, action=_Renamed,
                         help=argparse.SUPPRESS, renamed="-o/--output")
    viewing.add_argument("--max-rollouts", type=int, default=None, metavar="N",
                         help=f"with -o: embed at most N rollouts (default "
                         f"{DEFAULT_MAX_ROLLOUTS})")

    tuning = commands.add_parser("tune-prompt", help="optimise text params the workflow reads "
                                 "(a system prompt) with GEPA; writes them as [params] TOML")
    _add_target(tuning)
    tuning.add_argument("--param", dest="params", action="append", default=[], metavar="NAME",
                        help="a text param to tune, e.g. --param system_prompt (repeatable)")
    tuning.add_argument("--base-url", metavar="URL", help="an OpenAI-compatible endpoint, "
                        "e.g. http://localhost:8000/v1, the rollouts use (serves --model "
                        "given without its own @URL)")
    tuning.add_argument("--model", metavar="NAME[@URL]", help="the model name the endpoint "
                        "serves, or NAME@URL for its own endpoint (one: a prompt is tuned "
                        "for one model)")
    tuning.add_argument("--api-key-env", metavar="VAR",
                        help="environment variable holding the API key (never stored)")
    tuning.add_argument("--checkpoint", metavar="DIR", type=_path,
                        help="roll out a locally trained model "
                        f"folder (RUN_DIR/{STEP_DIR_SHOWN}) on the CPU instead")
    tuning.add_argument("--aux", action="append", default=[], metavar="NAME=URL,MODEL",
                        help="an endpoint for an auxiliary model (repeatable; its key: "
                            "auxiliary_models.NAME.api_key_env, else --api-key-env)")
    tuning.add_argument("--reflection-model", required=True, metavar="NAME[@URL]",
                        help="the model that proposes new text (default URL: --base-url's)")
    tuning.add_argument("--reflection-api-key-env", metavar="VAR", help="environment variable "
                        "holding the reflection model's key (default: --api-key-env when it "
                        "shares --base-url)")
    tuning.add_argument("--budget", type=int, metavar="N", help="rollouts to spend, "
                        "validating the starting prompt included (default: 6 x the validation "
                        "tasks + 60, at least 100)")
    search = PromptSearch()  # its defaults are the options'
    tuning.add_argument("--val-fraction", type=float, default=search.val_fraction,
                        metavar="SHARE", help="without an eval_dataset, the share of the "
                        f"training data held out to select by (default "
                        f"{DEFAULT_VAL_FRACTION})")
    tuning.add_argument("--minibatch", type=int, default=search.minibatch, metavar="N",
                        help="training tasks the reflection model reads per proposal "
                        f"(default {search.minibatch})")
    tuning.add_argument("--seed", type=int, default=search.seed, metavar="N",
                        help="seeds the split and the optimiser")
    tuning.add_argument("--perfect-reward", type=float, default=search.perfect_reward,
                        metavar="R", help=f"the reward no rollout can beat (default "
                        f"{search.perfect_reward:g}): tuning ends once a candidate scores it "
                        "on every validation task")
    tuning.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY,
                        metavar="N", help="rollouts in flight")
    tuning.add_argument("--candidates", metavar="FILE", type=_path,
                        help="every candidate, rollout and "
                        "score as JSON Lines (default prompts/<name>-<timestamp>.jsonl)")
    tuning.add_argument("--resume", action="store_true",
                        help="continue --candidates FILE, running no rollout it holds")
    tuning.add_argument("-o", "--output", metavar="FILE", type=_path,
                        help="the best params as TOML, for "
                        "run/eval --settings FILE (default: the candidates file's .toml)")
    tuning.add_argument("--no-progress", action="store_true", help="no progress bar")
    _group(tuning, {
        "the experiment": ("settings", "overrides", "params"),
        "the model": ("base_url", "model", "api_key_env", "checkpoint", "aux"),
        "the reflection model": ("reflection_model", "reflection_api_key_env"),
        "the search": ("budget", "val_fraction", "minibatch", "seed", "perfect_reward",
                       "concurrency"),
        "the results": ("candidates", "resume", "output", "no_progress")})

    preview = commands.add_parser("preview", help="show the first rows of the training data")
    _add_target(preview)
    preview.add_argument("-n", "--limit", dest="n", type=int, default=5, metavar="N",
                         help="rows to show (default 5)")
    preview.add_argument("--split", help="read this split instead of the dataset's own")
    return parser


def _load(args: argparse.Namespace):  # noqa: ANN202 - returns an ExperimentGraph
    """The experiment, its settings layered. An auxiliary model's endpoint read from an
    unset environment variable is not asked for when ``--aux`` points the model
    elsewhere: the item's URL and model stand in for the settings it replaces."""
    from .config.load import load_experiment
    from .config.settings import UnsetVariables

    items = _aux_items(getattr(args, "aux", []))  # refused first, as the user wrote them
    try:
        return load_experiment(args.target, settings=args.settings, overrides=args.overrides)
    except UnsetVariables as unset:
        stand_ins = [f"auxiliary_models.{name}.{field}={json.dumps(value, ensure_ascii=False)}"
                     for name, (url, model) in items.items()
                     for field, value in (("base_url", url), ("model_path", model))
                     if f"auxiliary_models.{name}.{field}" in unset.paths]
        if not stand_ins:
            raise
    except ConfigError as refused:
        # a key variable set for a model whose endpoint --aux gives (sweep 45 A-W2)
        keyed = {problem.setting.split(".")[1] for problem in refused.details
                 if problem.setting.startswith("auxiliary_models.")
                 and problem.setting.endswith(".api_key_env") and "without base_url" in
                 problem.what}
        stand_ins = [f"auxiliary_models.{name}.base_url={json.dumps(url, ensure_ascii=False)}"
                     for name, (url, _) in items.items() if name in keyed]
        if not stand_ins:
            raise
    # (a variable no item replaces is asked for by this second reading, alone)
    return load_experiment(args.target, settings=args.settings,
                           overrides=[*args.overrides, *stand_ins])


def _aux_items(aux: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``--aux NAME=URL,MODEL`` items as ``{name: (url, model)}``, each checked: its form,
    its URL, and each name once."""
    given = [item.partition("=")[0] for item in aux]
    twice = sorted({name for name in given if given.count(name) > 1})
    if twice:
        raise ConfigError(f"--aux {twice[0]}=... is given {given.count(twice[0])} times; give "
                          f"each auxiliary model once")
    from .config.environment import env_resolved

    items = {}
    for item in aux:
        name, sep, rest = item.partition("=")
        url, comma, model = _last_comma_outside_references(rest)
        if sep and comma and "," in _outside_references(url):  # (URL,MODEL,EXTRA: "URL,MODEL"
            # was the URL; a ${env:VAR,default}'s comma is the reference's)
            raise ConfigError(f"--aux {without_keys(item)!r}: expected NAME=URL,MODEL, one comma "
                              f"(its URL would be {without_keys(url)!r}); e.g. --aux "
                              f"grader=http://localhost:8001/v1,Qwen/Qwen3-8B")
        if sep and comma:  # (${env:...} read, as --base-url's and --model's are)
            url, model = (env_resolved(part, f"--aux {name}") for part in (url, model))
        if not sep or not comma or not name or not url or not model:
            raise ConfigError(f"--aux {without_keys(item)!r}: expected NAME=URL,MODEL, e.g. "
                              f"--aux grader=http://localhost:8001/v1,Qwen/Qwen3-8B")
        if name != name.strip() or url != url.strip():  # ("' URL' is not an http(s) URL")
            raise ConfigError(f"--aux {without_keys(item)!r}: blank space around its NAME or "
                              f"URL, which neither holds; give it without, e.g. --aux "
                              f"{name.strip()}={without_keys(url.strip())},"
                              f"{without_keys(model.strip())}")
        if not is_http_url(url):  # the form is right: the URL is what is wrong
            raise ConfigError(f"--aux {without_keys(item)!r}: {without_keys(url)!r} is not an "
                              f"http(s) URL; give the "
                              f"endpoint's, e.g. --aux {name}=http://localhost:8001/v1,{model}")
        if problem := query_problem(url, "--api-key-env"):
            raise ConfigError(f"--aux {without_keys(item)!r}: {problem}")
        if is_a_key_itself(name):  # (echoed by "no auxiliary model named ..." before)
            raise ConfigError(f"--aux {without_keys(item)!r}: the auxiliary model's NAME looks "
                              f"like an API key (not shown); give the name the workflow "
                              f"calls it by, and the key's environment variable with "
                              f"--api-key-env")
        if holds_a_key(model):
            from .evaluation.select import key_for_a_name

            raise ConfigError(key_for_a_name("--aux", item))
        _refuse_an_aux_model_name(item, name, url, model)
        items[name] = (url, model)
    return items


def _refuse_an_aux_model_name(item: str, name: str, url: str, model: str) -> None:
    """Refuse an ``--aux`` item's model name that no endpoint serves, as ``--model`` refuses
    it: blank space or quotes around it, a control character, a URL, a ``NAME@URL`` (each
    was sent as typed, and every call answered "no such model")."""
    from .evaluation.select import (
        _HOST_AND_PORT,
        _URL_START,
        CONTROL_IN_A_NAME,
        bare_name,
        holds_a_control_character,
        with_invisibles_shown,
    )

    shown = f"--aux {without_keys(item)!r}"
    bare = bare_name(model)
    if bare is not None:
        raise ConfigError(f"{shown}: the model's name has blank space or quotes around it, "
                          f"which no endpoint's model name has; give it without them, e.g. "
                          f"--aux {name}={url},{bare}")
    if holds_a_control_character(model):
        raise ConfigError(f"--aux {with_invisibles_shown(without_keys(item))}: "
                          f"{CONTROL_IN_A_NAME}")
    at_url = _URL_START.search(model.replace("@ ", "@"))  # (m@ URL, blank after @)
    if is_http_url(model) or at_url is not None or _HOST_AND_PORT.match(model):
        fix = (f"--aux {name}={url},{model[:at_url.start()]}" if at_url is not None and
               at_url.start() else f"--aux {name}={url},Qwen/Qwen3-8B")
        raise ConfigError(f"{shown}: the model's name holds a URL; --aux takes the endpoint's "
                          f"URL before the comma and the model's name alone after it, e.g. "
                          f"{fix}")


def _outside_references(text: str) -> str:
    """``text`` without its ``${...}`` references (whose default may hold a comma)."""
    import re

    return re.sub(r"\$\{[^}]*\}", "", text)


def _last_comma_outside_references(text: str) -> tuple[str, str, str]:
    """``text.rpartition(",")``, not counting a comma inside a ``${env:VAR,default}``."""
    depth, last = 0, -1
    for index, character in enumerate(text):
        if text.startswith("${", index):
            depth += 1
        elif character == "}" and depth:
            depth -= 1
        elif character == "," and not depth:
            last = index
    return (text[:last], ",", text[last + 1:]) if last >= 0 else ("", "", text)


def _config(args: argparse.Namespace) -> None:
    with _data_output() as output:  # the YAML goes to standard output
        _write_config(args, _load(args), output)


def _write_config(args: argparse.Namespace, graph: Any, output: Any) -> None:
    from .backends.trinity.cluster import parse_cluster
    from .backends.trinity.config import to_yaml
    from .backends.trinity.validate import fitted_config

    if args.output:
        refuse_overwriting(args.output, "-o", experiment_inputs(graph, args.settings),
                           TRINITY_YAML)
        refuse_misnamed(args.output, "-o", "config writes the Trinity config as YAML",
                        TRINITY_YAML.suffixes)
    # What run launches on that cluster: its engine count and the step bounds it gives.
    shape = parse_cluster(args.cluster) if args.cluster is not None else None
    config = fitted_config(graph, shape).config
    text = TRINITY_YAML.seal(f"{TRINITY_YAML.mark} {args.target}\n" + to_yaml(config))
    if not args.output and not _encodes(output, text):  # (an ASCII terminal or pipe)
        text = TRINITY_YAML.seal(f"{TRINITY_YAML.mark} {args.target}\n"
                                 + to_yaml(config, allow_unicode=False))
    if args.output:
        from .runs.writing import write_whole

        write_whole(args.output, text, label=f"-o {args.output}")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        output.write(text)


def _check(args: argparse.Namespace) -> None:
    from .api import check
    from .checks.preflight import Note

    def shown(line: str) -> None:  # as each check finishes (a rollout can take a while)
        print(f"{'note' if isinstance(line, Note) else 'ok'}  {line}", flush=True)

    if args.cluster is not None:  # --cluster '' (a script's unset shape) said as --cluster
        from .backends.trinity.cluster import parse_cluster

        parse_cluster(args.cluster)
    check(_load(args), backend=args.backend, cluster=args.cluster, on_line=shown)


def _preview(args: argparse.Namespace) -> None:
    from .data.preview import print_first_rows

    if args.n < 1:
        raise ConfigError(f"-n {args.n}: show at least 1 row")
    with _data_output() as output:  # the rows go to standard output, as JSON
        graph = _load(args)
        print_first_rows(graph.train_dataset, args.n, args.split, label="train_dataset",
                         file=output)


@contextlib.contextmanager
def _data_output() -> Iterator[Any]:
    """Standard output for the command's data alone (config's YAML, preview's JSON), as the
    stream yielded. Everything else the process writes there goes to standard error: what
    the experiment's module prints as it is imported, and what it leaves to print later (an
    ``atexit`` function, a thread of its own), past ``sys.stdout`` too (``sys.__stdout__``,
    ``os.write(1, ...)``, a subprocess): file descriptor 1 is pointed at standard error for
    the rest of the process, and the data is written to a copy of it. A standard output
    that is closed or cannot be written (a full device) fails the command in one line."""
    original = sys.stdout
    for stream in (sys.stdout, sys.__stdout__):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # closed, or None
            stream.flush()  # type: ignore[union-attr]
    data: Any = original
    try:
        if original is not None and original.fileno() == 1:
            copy = os.dup(1)
            os.dup2(2, 1)
            # (strict: the data is written so that the stream's encoding takes it, escaped
            # where need be, never with a character replaced)
            data = os.fdopen(copy, "w", encoding=original.encoding)
    except (OSError, ValueError):  # no descriptor (the CLI called in-process), or closed
        pass
    # Over descriptor 1, now standard error's, the stream itself writes there; else (no
    # descriptor of its own) standard error stands in. (Standard error itself, given as
    # standard output, was detached by a module forcing its output to UTF-8, and the
    # command died without a word.)
    sys.stdout = original if data is not original else sys.stderr
    output = _DataStream(data)
    try:
        yield output
        output.flush()
    finally:
        from .config.importer import reopened

        sys.stdout = reopened(original)  # (over descriptor 1, which stays standard error's)
        if data is not original:
            with contextlib.suppress(OSError):  # (what it could not take is said above)
                data.close()


def _encodes(stream: Any, text: str) -> bool:
    """Whether ``stream``'s encoding takes ``text`` whole."""
    try:
        text.encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


class _DataStream:
    """Standard output for a command's data: a write it cannot take (closed, a full device)
    is a `RunError` in one line."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream
        self.encoding = getattr(stream, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        def raw(stream: TextIO) -> int:  # a file name's bytes that are not UTF-8, which
            # Python reads as lone surrogates: written back as those bytes, as -o writes them
            # (it was "cannot write to standard output": sweep 48 A-W2)
            stream.flush()
            stream.buffer.write(text.encode(self.encoding, "surrogateescape"))
            return len(text)

        from .text import holds_a_lone_surrogate

        if holds_a_lone_surrogate(text) and hasattr(self._stream, "buffer"):
            return self._do(raw)
        return self._do(lambda stream: stream.write(text))

    def flush(self) -> None:
        self._do(lambda stream: stream.flush())

    def _do(self, action: Callable[[TextIO], Any]) -> Any:
        if self._stream is None:
            raise RunError("standard output is closed, so the command's data has nowhere to "
                           "go; give it a file (config -o FILE) or a pipe")
        try:
            return action(self._stream)
        except BrokenPipeError:
            raise  # (the reader went away: said where every command's is)
        except (OSError, ValueError) as exc:  # ValueError: a stream closed under it
            reason = getattr(exc, "strerror", None) or exc
            raise RunError(f"cannot write to standard output ({reason}), so the command's "
                           f"data was not written whole") from None


def _resume_command(args: argparse.Namespace, run_dir: str) -> str:
    """The command that continues an interrupted run with the settings it started with."""
    import shlex

    words = ["tunedsl", "run", args.target, "--backend", args.backend]
    if args.settings:
        words += ["--settings", args.settings]
    for item in args.overrides:
        words += ["--set", item]
    return shlex.join([*words, "--resume", run_dir])


def _run(args: argparse.Namespace) -> None:
    from .api import run

    try:
        summary = run(args.target, backend=args.backend, settings=args.settings,
                      overrides=args.overrides, resume=args.resume,
                      progress=not args.no_progress, ray_address=args.ray_address,
                      from_good_checkpoint=args.from_good_checkpoint)
    except RunInterrupted as exc:
        if exc.run_dir is None:
            raise
        raise RunInterrupted(f"{str(exc).split('; resume with')[0]}; resume with: "
                             f"{_resume_command(args, exc.run_dir)}", exc.run_dir) from None
    report = getattr(summary, "print", None)
    if report is not None:
        report()


def _aux_plan(args: argparse.Namespace, graph: ExperimentGraph) -> Any:
    """``--aux`` items (with ``--api-key-env``) and the experiment's served auxiliary
    models, as one `AuxiliaryPlan`."""
    return _auxiliary_from_items(graph, args.aux, args.api_key_env)


def _auxiliary_from_items(graph: ExperimentGraph, aux: Sequence[str],
                         api_key_env: str | None = None) -> Any:
    """The auxiliary models ``NAME=URL,MODEL`` items (``--aux``) point at, each checked
    now, and those the experiment serves from an endpoint (an item may still point one
    elsewhere)."""
    from .models.endpoint import auxiliary_endpoint, endpoint_models
    from .models.reached import AuxiliaryPlan

    items = _aux_items(aux)
    makers: dict[str, Callable[[], tuple[Any, Any]]] = {
        name: functools.partial(auxiliary_endpoint, spec, name)
        for name, spec in graph.auxiliary_models.items()
        if spec.base_url is not None and name not in items}
    for item, (name, (url, model)) in zip(aux, items.items()):
        if name not in graph.auxiliary_models:
            raise ConfigError(f"--aux {without_keys(item)!r}: the experiment declares no "
                              f"auxiliary model "
                              f"{name!r} (it has: {', '.join(graph.auxiliary_models) or 'none'})")
        own_key = graph.auxiliary_models[name].api_key_env  # (a setting: the model's own)
        makers[name] = functools.partial(endpoint_models, graph.auxiliary_models[name],
                                         base_url=url, model_name=model, name=name,
                                         api_key_env=own_key or api_key_env,
                                         label=f"auxiliary_models.{name}.api_key_env"
                                         if own_key else None)
    # every endpoint, the experiment's own too: a resume after one moved would mix graders
    served = [f"{name}={spec.base_url},{spec.model_path}"
              for name, spec in graph.auxiliary_models.items()
              if spec.base_url is not None and name not in items]
    return AuxiliaryPlan(makers=makers, kept=sorted(_aux_settings(list(aux)) + _aux_settings(
        served)))


def _aux_settings(aux: Sequence[str]) -> list[str]:
    """``NAME=URL,MODEL`` items as results keep them: sorted, any secret in a URL masked."""
    from .models.endpoint import redact_url

    shown = []
    for item in aux:
        name, _, rest = item.partition("=")
        url, _, model = rest.rpartition(",")
        shown.append(f"{name}={redact_url(url)},{model}")
    return sorted(shown)


def _reach(args: argparse.Namespace) -> Any:
    """``--base-url`` with one ``--model`` (and ``--api-key-env``), or ``--checkpoint`` (with
    the model name its results keep), as the record of how to reach the model."""
    from .evaluation.select import candidates_from
    from .reach import LocalFolder

    models = args.model if isinstance(args.model, list) else [args.model] if args.model else []
    if args.checkpoint and args.base_url:
        raise ConfigError("--checkpoint names a local model folder and --base-url an "
                          "endpoint's model: give one of them")
    if args.checkpoint and args.api_key_env:
        raise ConfigError("--api-key-env names an endpoint's key, and --checkpoint evaluates a "
                          "local model folder, which takes none: drop --api-key-env")
    if args.checkpoint:
        served = next((model for model in models if "@" in model), None)
        if served is not None:  # (the @URL was dropped, and the results kept it)
            raise ConfigError(f"--model {without_keys(served)!r} names an endpoint's model, "
                              f"and --checkpoint evaluates a local model folder: give one of "
                              f"them (--model NAME alone beside --checkpoint names the "
                              f"checkpoint's model in the results)")
        return LocalFolder(args.checkpoint, models[0] if models else None)
    if not models:
        raise ConfigError("give --base-url URL and --model NAME (or --checkpoint DIR)")
    (reach,) = candidates_from(models, args.base_url, args.api_key_env)
    return reach


def _eval(args: argparse.Namespace) -> None:
    from .api import evaluate_reached

    concurrency = args.concurrency
    for flag, count in (("--repeat", args.repeat), ("--concurrency", concurrency),
                        ("-n", args.n)):
        if count is not None and count < 1:
            raise ConfigError(f"{flag} {count}: give a whole number of at least 1")
    if len(args.model or []) > 1:
        return _select(args)
    if args.resume and not args.output:
        raise ConfigError("--resume continues a results file: give it with -o FILE")
    reach = _reach(args)
    graph = _load(args)
    _note_nothing_to_resume(args.resume, args.output, "every rollout runs")
    summary = evaluate_reached(graph, reach, _aux_plan(args, graph),
                               output=args.output, settings_file=args.settings,
                               scope=_eval_scope(args), execution=_execution(args))
    print(f"results      {summary.results}")
    summary.print()
    if graph.eval_dataset is None and args.split is None:  # (as a model selection says it:
        # a checkpoint's reward on the tasks it trained on read as an eval's; sweep 48 B-W5)
        print("note: the experiment has no eval_dataset, so its train_dataset's tasks were "
              "evaluated; a model tuned on them scores higher there than on new ones: give "
              "the experiment an eval_dataset of held-out tasks (or --split NAME)",
              file=sys.stderr)
    if summary.rollouts and summary.errors == summary.rollouts:
        raise RunError(f"every rollout failed; the first error: {summary.error_messages[0]}"
                       + _judge_failures_kept(summary.judge_errors, summary.results,
                                              args.target))
    if summary.failures():
        timed_out = any("(rollout_timeout)" in message for message in summary.error_messages)
        # (a resume keeps the timeout the file began with: "raise rollout_timeout" and
        # --resume together were refused; sweep 47 B-W4)
        _warn(f"{summary.failures()}; the same command with -o {summary.results} --resume runs "
              f"the failed ones again"
              + (", with the rollout_timeout it began with (a larger one needs another -o "
                 "file)" if timed_out else "")
              + _judge_failures_kept(summary.judge_errors, summary.results, args.target))
    cut = summary.cut_short()
    if cut:
        _warn(cut)


def _select(args: argparse.Namespace) -> None:
    """``tunedsl eval`` with several ``--model``: evaluate each on the same tasks and rank
    them (`tunedsl.evaluation.select`)."""
    from .evaluation.select import (
        candidate_settings,
        candidates_from,
        check_key_variable,
        endpoint_reached,
        refuse_a_file_for_the_folder,
        result_paths,
        select,
    )
    from .runs.run_files import EVALS_DIR, claimed_default
    from .runs.writing import refuse_unwritable

    if args.checkpoint:
        raise ConfigError("--checkpoint evaluates one local model; compare endpoints with "
                          "several --model, without --checkpoint")
    candidates = candidates_from(args.model, args.base_url, args.api_key_env)
    if args.resume and not args.output:
        raise ConfigError("--resume continues a model selection: give its folder with -o DIR")
    check_key_variable(args.api_key_env)
    graph = _load(args)
    auxiliary = _aux_plan(args, graph)
    folder = args.output or claimed_default(EVALS_DIR, graph.name, folder=True)
    _note_nothing_to_resume(args.resume, args.output, "every candidate's rollouts run")
    inputs = experiment_inputs(graph, args.settings)
    refuse_a_file_for_the_folder(folder)  # (before its would-be files: "a.jsonl/m.jsonl")
    if not args.output:  # (a link to nowhere there: said of the folder, as the default)
        refuse_unwritable(folder, f"{default_output()} {folder}")
    for path in result_paths(candidates, folder).values():  # (the default said as one)
        refuse_overwriting(path, "-o" if args.output else default_output(), inputs)
    ranking = select(graph, candidates, folder=folder,
                     reach=lambda c: endpoint_reached(graph, c, auxiliary),
                     settings=lambda c: candidate_settings(c, auxiliary.kept),
                     scope=_eval_scope(args), execution=_execution(args))
    print(f"results      {folder}{os.sep} (one file per candidate: "
          f"{', '.join(p.name for p in result_paths(candidates, folder).values())})")
    ranking.print()
    judged = sum(s.judge_errors for s in ranking.standings)
    kept = _judge_failures_kept(judged, f"{folder}{os.sep}FILE.jsonl", args.target)
    if all(s.errors == s.rollouts for s in ranking.standings):
        first = next(s.error_messages[0] for s in ranking.standings if s.error_messages)
        raise RunError(f"every rollout of every candidate failed; the first error: {first}"
                       f"{kept}")
    failed = [s for s in ranking.standings if s.errors]
    if failed:
        counts = ", ".join(f"{s.label} {s.errors} of {s.rollouts}" for s in failed)
        _warn(f"rollouts failed ({counts}), each counted as reward 0; the first error: "
              f"{failed[0].label}: {failed[0].error_messages[0]}; the same command with -o "
              f"{folder} --resume runs the failed ones again{kept}")
    cut = [s for s in ranking.standings if s.cut_calls]
    if cut:  # (a candidate whose replies were cut ranks low for the setting, not the model)
        counts = ", ".join(f"{s.label} {s.cut_calls} of {s.model_calls}" for s in cut)
        _warn(f"replies stopped at max_tokens (finish_reason 'length'), cut short before the "
              f"model ended them ({counts}); if answers need more room, raise "
              f"model.max_tokens (--set model.max_tokens=N)")


def _eval_scope(args: argparse.Namespace) -> Any:
    """``--split``, ``-n`` and ``--repeat`` as one record."""
    from .evaluation.evaluate import EvalScope

    return EvalScope(split=args.split, limit=args.n, repeat=args.repeat)


def _execution(args: argparse.Namespace) -> Any:
    """``--concurrency``, ``--resume`` and ``--no-progress`` as one record."""
    from .evaluation.execution import Execution

    return Execution(concurrency=args.concurrency, resume=args.resume,
                     progress=not args.no_progress)


def _note_nothing_to_resume(resume: bool, path: str | None, so: str) -> None:
    """Say so when ``--resume`` names a file or folder that is not there: a typo of its
    name (result.jsonl for results.jsonl) ran a whole evaluation again, paid for, without a
    word (sweep 47 B-W5). A note, not a refusal: a script may resume whether or not an
    earlier command began the file."""
    if resume and path is not None and not os.path.lexists(path):
        print(f"note: {path} does not exist, so --resume has nothing to continue: {so}",
              file=sys.stderr)


def _warn(message: str) -> None:
    """A result that stands but should be looked at: one line on stderr."""
    print(f"Warning: {message}", file=sys.stderr)


def _refuse_results_misplaced(results: str, target: str) -> None:
    """rescore's two arguments swapped, or a folder given for results: said before the
    experiment is imported (which would fail on a results file's name)."""
    from .runs.run_files import EXPERIMENT_YAML

    if ":" not in target and ":" in results and not Path(results).exists():
        raise ConfigError(f"rescore takes RESULTS.jsonl first, then MODULE:ATTR: "
                          f"tunedsl rescore {target} {results}")
    folder = Path(results)
    if not folder.is_dir():
        return
    if (folder / EXPERIMENT_YAML).is_file():
        raise ConfigError(f"{results}: that is a run directory, whose rollouts were scored as "
                          f"they trained (tunedsl view shows them); rescore takes a results "
                          f"file that tunedsl eval wrote")
    inside = sorted(folder.glob("*.jsonl"))
    raise ConfigError(f"{results}: that is a folder; rescore takes one results file" + (
        f", such as {inside[0]}" if inside else " that tunedsl eval wrote"))


def _rescore(args: argparse.Namespace) -> None:
    from .evaluation.evaluate import refuse_another_kind
    from .evaluation.rescore import rescore

    _refuse_results_misplaced(args.results, args.target)
    graph = _load(args)
    if args.output:
        refuse_overwriting(args.output, "-o", [Input("the results being re-scored",
                                                     args.results),
                                               *experiment_inputs(graph, args.settings)])
        refuse_another_kind(Path(args.output), "results", "output")  # (before its name)
        refuse_misnamed(args.output, "-o", "rescore writes results as JSON Lines", (".jsonl",))
    before, after = rescore(graph, args.results, args.output,
                            auxiliary=_aux_plan(args, graph))
    for title, summary in (("before", before), ("after", after)):
        print(f"== {title}")
        summary.print()
    if args.output:
        print(f"results      {args.output}")
    if after.rollouts and after.errors == after.rollouts:  # as eval: nothing was scored
        if not after.judged:  # no response to judge: eval's own failures
            raise RunError(f"{args.results}: every rollout in it failed in eval, so there is "
                           f"no response to judge again; the first error: "
                           f"{before.error_messages[0]}")
        raise RunError(f"every judgement failed; the first error: {after.error_messages[0]}")
    failed = after.failures()
    if failed:
        _warn(failed)


def _judge_failures_kept(count: int, results: Any, target: str) -> str:
    """What a warning of failed rollouts adds when the judge failed on ``count`` of them
    after the workflow finished: their responses are kept, and a judge fixed since (which
    a resume refuses as another evaluation) judges them again by rescore (sweep 48 B-L1)."""
    if not count:
        return ""
    return (f"; the judge failed on {count} of them after the workflow finished, whose "
            f"responses are kept: once the judge is fixed, tunedsl rescore {results} {target} "
            f"-o NEW.jsonl judges them again without calling the model")


def _tune_prompt(args: argparse.Namespace) -> None:
    from .api import reached_models
    from .evaluation.prompt_tuning import (
        PromptSearch,
        check_params,
        check_search,
        prompt_files,
        tune_graph,
    )
    from .reach import reflection_of

    search = PromptSearch(budget=args.budget, val_fraction=args.val_fraction,
                          minibatch=args.minibatch, seed=args.seed,
                          perfect_reward=args.perfect_reward)
    execution = _execution(args)
    check_search(search, execution)
    if args.resume and args.candidates is None:
        raise ConfigError("--resume continues a candidates file: give it with --candidates FILE")
    reach = _reach(args)
    graph = _load(args)
    params = list(dict.fromkeys(args.params or []))
    check_params(graph, params)
    candidates, output = prompt_files(graph, args.candidates, args.output, args.settings)
    _note_nothing_to_resume(args.resume, args.candidates, "the search starts afresh")
    reflection = reflection_of(args.reflection_model, reach, args.reflection_api_key_env)
    result = tune_graph(graph, {name: str(graph.params[name]) for name in params},
                        reached_models(graph, reach, _aux_plan(args, graph)), reflection,
                        candidates=candidates, settings_out=output, search=search,
                        execution=execution)
    result.print()
    failed = result.failures()
    if failed:
        _warn(failed)


def _view(args: argparse.Namespace) -> None:
    from .view import view

    if len(args.paths) > 2:
        raise ConfigError(f"view takes one path, or two eval results to compare; got "
                          f"{len(args.paths)}")
    served = [flag for flag, value in (("--host", args.host), ("--port", args.port))
              if value is not None]
    if served and args.out is not None:  # (the page was written, and nothing served)
        raise ConfigError(f"{' and '.join(served)} {'say' if len(served) > 1 else 'says'} "
                          f"where to serve the page, and -o "
                          f"{args.out} writes it to a file, serving nothing; drop "
                          f"{' and '.join(served)}, or -o")
    if args.max_rollouts is not None and args.out is None:
        raise ConfigError(f"--max-rollouts {args.max_rollouts} applies to a page written with "
                          f"-o FILE; the served viewer pages through every rollout, so leave "
                          f"it out, or add -o FILE")
    host = "127.0.0.1" if args.host is None else args.host  # ('' is refused as given)
    view(args.paths, host=host, port=args.port, open_browser=not args.no_browser,
         out=args.out, max_rollouts=DEFAULT_MAX_ROLLOUTS if args.max_rollouts is None
         else args.max_rollouts)


_COMMANDS = {"config": _config, "check": _check, "run": _run, "eval": _eval,
             "rescore": _rescore, "view": _view, "tune-prompt": _tune_prompt,
             "preview": _preview}  # the parser's order


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit code."""
    # `python -m tunedsl` puts the working directory on sys.path; the console script
    # does not, yet `tunedsl check pkg.mod:Attr` should find pkg where the user stands.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for stream in (sys.stdout, sys.stderr):
        # What tunedsl prints may quote text UTF-8 cannot encode (a lone surrogate from a
        # dataset or an endpoint): shown escaped, never a crash of the print itself.
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # a bare `tunedsl`: what it can do
        parser.print_help(sys.stderr)
        print(f"Error: give a command ({', '.join(_COMMANDS)}); see tunedsl COMMAND --help",
              file=sys.stderr)
        return 2
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage error (already printed) or --help
        return exc.code if isinstance(exc.code, int) else 2
    with terminate_as_interrupt(), for_the_command_line():
        return _command(args)


def entry() -> int:
    """The ``tunedsl`` command (and ``python -m tunedsl``): `main`, then a shutdown that a
    Ctrl-C pressed again after an interrupt cannot fill with a traceback. A second Ctrl-C
    (a terminal under ``timeout`` sends two) that lands while the first is being answered,
    after `_command` has said it, ends the command the same way, said once."""
    from .interrupts import ignore_interrupt_reports, quiet_shutdown

    sys.unraisablehook = ignore_interrupt_reports(sys.unraisablehook)
    try:
        code = main()
    except KeyboardInterrupt:
        if not _INTERRUPT_SAID:
            print("Error: interrupted", file=sys.stderr)
        code = 130
    from .config.importer import ends_with

    ends_with(code)
    quiet_shutdown(code)  # (before the grace for threads: a Ctrl-C there, a traceback)
    _end_without_threads_left(code)
    return code


def _end_without_threads_left(code: int) -> None:
    """End an interrupted command (exit 130) without waiting for threads still running
    once a short grace is over: Python waits for every thread that is no daemon as it
    exits, so one that never ends (a job a workflow handed to ``run_in_executor`` and did
    not await, an executor or a thread of its own) kept the process alive, its Ctrl-C and
    SIGTERM ignored by then, until ``kill -9``. What the command wrote is in its files
    already (each line as it was written). A command that ended otherwise waits for them
    as Python would, saying so, until they end or Ctrl-C cuts the wait."""
    import time

    if code == 130:  # (Ctrl-C and SIGTERM ignored by now: `quiet_shutdown`)
        left = _threads_left(time.monotonic() + THREADS_GRACE_SECONDS)
        if not left:
            return
    else:  # Python waits for them, as it would without tunedsl: said, and cut short by
        # Ctrl-C or SIGTERM, in the grace too (it waited without a word, then exited 0 on a
        # traceback; SIGTERM killed it without a word)
        import signal

        def interrupt(_signum: int, _frame: Any) -> None:
            raise KeyboardInterrupt

        if threading_is_main():
            signal.signal(signal.SIGTERM, interrupt)
        # (the threads last seen running: a join the interrupt cut marks its thread ended,
        # running or not, CPython's bpo-45274 mend, so they are not asked again)
        left = _threads_left(time.monotonic())
        try:
            if not left:
                return
            left = _threads_left(time.monotonic() + THREADS_GRACE_SECONDS)
            if not left:
                return
            print(f"note: waiting for {_threads_named(left)} the experiment's code started "
                  f"(no daemons), as Python does before it exits; Ctrl-C ends the command "
                  f"without them (its work is done)", file=sys.stderr, flush=True)
            while left:
                left = _threads_left(time.monotonic() + 0.5)
            return
        except KeyboardInterrupt:
            from .interrupts import quiet_shutdown

            quiet_shutdown(130)  # (a second one: no traceback on the way out)
    print(f"note: {_threads_named(left)} the experiment's code started (run_in_executor, "
          f"asyncio.to_thread, a thread of its own) still ran; the command ends without "
          f"waiting for them", file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # (a stream closed or gone: nothing to keep)
            stream.flush()
    os._exit(code)


def threading_is_main() -> bool:
    """Whether this is the main thread (the only one a signal handler may be set in)."""
    import threading

    return threading.current_thread() is threading.main_thread()


def _threads_left(deadline: float) -> list[Any]:
    """The threads that are no daemons still running once each was waited for until
    ``deadline`` (Python waits for each at exit)."""
    import threading
    import time

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    return [thread for thread in threading.enumerate()
            if thread is not threading.current_thread() and not thread.daemon
            and thread.is_alive()]


def _threads_named(threads: list[Any]) -> str:
    """``N threads`` (or ``a thread``), with the first's name."""
    many = f"{len(threads)} threads" if len(threads) > 1 else "a thread"
    return f"{many} ({threads[0].name}{', ...' if len(threads) > 1 else ''})"


#: How long an interrupted command waits for threads still running before it ends.
THREADS_GRACE_SECONDS = 2.0


def _unsearchable_folder(exc: OSError) -> str | None:
    """The folder on the way to the path ``exc`` (a ``PermissionError``) names that cannot
    be searched (its mode lacks x), so that nothing in it can be looked at: inspecting a
    given path inside such a folder (``Path.is_dir``, in view, rescore, model selection,
    tune-prompt's -o, --checkpoint) was an internal error. None for any other error."""
    if not isinstance(exc, PermissionError) or not isinstance(exc.filename, (str, bytes)):
        return None
    from .access import unsearchable_folder

    return unsearchable_folder(os.fsdecode(exc.filename))


#: Set once a command has said it was interrupted (`entry` then says nothing more).
_INTERRUPT_SAID: list[bool] = []


#: The options whose value is text sent on or read as settings (not a path, which may be
#: any bytes a file system takes), by their ``dest``.
_TEXT_OPTIONS = {"overrides": "--set", "model": "--model", "base_url": "--base-url",
                 "aux": "--aux", "reflection_model": "--reflection-model",
                 "api_key_env": "--api-key-env",
                 "reflection_api_key_env": "--reflection-api-key-env", "params": "--param",
                 "split": "--split", "host": "--host", "ray_address": "--ray-address",
                 "cluster": "--cluster"}


def _refuse_text_that_is_not_utf8(args: argparse.Namespace) -> None:
    """An option's text in bytes that are not UTF-8 (a Latin-1 terminal's ``café``, a
    ``\xff`` in a URL) reaches Python as lone surrogates, which no request, file or
    tokenizer takes: every rollout failed on it, or the HTTP client crashed (sweep 46 B-W4,
    B-T2). Said of the option, with its bytes shown escaped."""
    from .text import holds_a_lone_surrogate

    for dest, flag in _TEXT_OPTIONS.items():
        value = getattr(args, dest, None)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and holds_a_lone_surrogate(item):
                shown = os.fsencode(item).decode("utf-8", "backslashreplace")
                raise ConfigError(f"{flag} '{without_keys(shown)}': holds bytes that are not "
                                  f"UTF-8 (the terminal or script passed text in another "
                                  f"encoding, such as Latin-1); give it in UTF-8")


def _command(args: argparse.Namespace) -> int:
    """Run a parsed command; its exit code, every failure said in one line."""
    try:
        _refuse_text_that_is_not_utf8(args)
        _COMMANDS[args.command](args)
    except RunInterrupted as exc:
        _INTERRUPT_SAID.append(True)
        print(f"Error: {printable(str(exc))}", file=sys.stderr)
        return 130
    except TunedslError as exc:
        if exc.user_traceback:
            sys.stderr.write(_shown_traceback(exc.user_traceback))
        for line in str(exc).splitlines():
            print(f"Error: {printable(line)}", file=sys.stderr)
        return 1 if isinstance(exc, RunError) else 2
    except KeyboardInterrupt:  # outside a run's own handling (which saves a checkpoint)
        _INTERRUPT_SAID.append(True)
        print("Error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of the output went away (`tunedsl preview | head`)
        # Python's advice: point stdout at nothing, so the interpreter's own flush at exit
        # does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        folder = _unsearchable_folder(exc)
        if folder is not None:  # a path given on a way the user cannot pass: theirs to fix
            print(f"Error: {printable(str(exc.filename))}: cannot use that path "
                  f"({exc.strerror}); {searchable(folder)}, or give a path you can reach",
                  file=sys.stderr)
            return 2
        if not _standard_output_fails():
            return _internal_error(exc)
        # (pointed at nothing, as for a broken pipe: Python's flush at exit fails again)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"Error: cannot write to standard output ({exc.strerror or exc}), so the "
              f"command's report was not printed; what it wrote to files is kept there",
              file=sys.stderr)
        return 1
    except Exception as exc:  # the last line of defence: a bug of tunedsl's own
        return _internal_error(exc)
    return 0


def _standard_output_fails() -> bool:
    """Whether writing standard output fails (a full device, an I/O error): then what
    failed was printing the command's report, not tunedsl. (Its buffer may be dropped
    with the failed write, so a line is written to find out: one more line break on a
    standard output that works, before the internal error it then reports.)"""
    try:
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), b"\n")
    except (OSError, ValueError):
        return True
    return False


def _shown_traceback(text: str) -> str:
    """A user's traceback as the terminal shows it: control characters escaped, and each
    line shortened (a 10 MB exception message filled the screen; eval keeps it whole in
    the results' traceback)."""
    return "".join(printable(shortened(line)) + "\n" for line in text.splitlines())


#: How the one line for an exception that escaped tunedsl's own handling begins.
INTERNAL_ERROR = "internal error in tunedsl"


def _internal_error(exc: Exception) -> int:
    """An exception no handler of tunedsl's turned into a message (a bug, whatever raised
    it): one line naming it and the file its traceback is kept in, exit 1; the traceback
    itself goes to stderr only when that file cannot be written."""
    import tempfile
    import traceback

    reason = " ".join(str(exc).split()) or "no message"
    text = "".join(traceback.format_exception(exc))
    try:
        handle, path = tempfile.mkstemp(prefix="tunedsl-internal-error-", suffix=".txt")
        with os.fdopen(handle, "w", encoding="utf-8", errors="backslashreplace") as file:
            file.write(text)
    except OSError:
        sys.stderr.write(text)
        path = "the output above"
    print(f"Error: {INTERNAL_ERROR}: {type(exc).__name__}: {reason}; please report it, the "
          f"traceback is in {path}", file=sys.stderr)
    return 1
