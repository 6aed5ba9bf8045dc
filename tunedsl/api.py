"""The Python entry points: `load_experiment`, `check`, `run`, and AgentScope tuner's `tune`.

This module and the CLI are the only places that choose a backend; they hand it
what it needs (the graph, the run's name, the Trinity YAML its run directory keeps).
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .config.graph import ExperimentGraph, build_graph, refuse_problems
from .config.importer import refuse_while_imported
from .config.load import load_experiment
from .dsl import arguments
from .dsl.decorators import experiment, spec_of
from .dsl.records import Algorithm, Dataset, Model
from .dsl.settings_table import EXPERIMENT_SETTINGS, SETTINGS_BY_NAME, all_settings
from .errors import ArgumentError, ConfigError, did_you_mean
from .evaluation.prompt_tuning import PromptSearch, TuneResult, check_params
from .rollout.run import DEFAULT_CONCURRENCY
from .wording import default_output, option, said

if TYPE_CHECKING:
    from .evaluation.evaluate import EvalScope, EvalSummary
    from .evaluation.execution import Execution
    from .evaluation.select import Candidate
    from .models.reached import AuxiliaryPlan, Reached
    from .reach import LocalFolder

BACKENDS = ("auto", "local", "trinity")


def choose_backend(requested: str, graph: ExperimentGraph | None = None) -> tuple[str, str]:
    """The backend to use and why, for ``--backend auto|local|trinity`` (whether it can run
    the experiment is its checks' answer: `backend_checks`)."""
    if requested not in BACKENDS:
        raise ConfigError(f"{option('backend', requested)}: choose one of "
                          f"{', '.join(BACKENDS)}")
    if requested != "auto":
        return requested, said("chosen with --backend", f"chosen with backend={requested!r}")
    from .backends.trinity.checks import INSTALL_HINT

    if importlib.util.find_spec("trinity") is None:
        return "local", f"Trinity-RFT is not installed ({INSTALL_HINT})"
    if graph is not None and graph.tinker is not None:
        return "trinity", "the experiment trains through Tinker (no local GPU needed)"
    from .backends.trinity.cluster import visible_gpus

    gpus = visible_gpus()
    if gpus == 0:
        return "local", "no GPU is visible on this machine"
    return "trinity", f"Trinity-RFT is installed and {gpus} GPU(s) are visible"


def backend_checks(backend: str) -> tuple[tuple[Callable[..., list[str]], ...],
                                          tuple[Callable[..., list[str]], ...]]:
    """A backend's (``local`` or ``trinity``) checks over the graph, and over what the
    preflight found (rows, the scripted rollout's calls): each returns its problems, one
    line each."""
    if backend == "local":
        from .backends.local.checks import LOCAL_CHECKS, LOCAL_REPORT_CHECKS

        return LOCAL_CHECKS, LOCAL_REPORT_CHECKS
    from .backends.trinity.checks import TRINITY_CHECKS, TRINITY_REPORT_CHECKS

    return TRINITY_CHECKS, TRINITY_REPORT_CHECKS


def check(graph: ExperimentGraph | str | type, backend: str = "auto",
          cluster: str | None = None, on_line: Callable[[str], None] | None = None
          ) -> list[str]:
    """Every preflight check: the backend's checks over the graph (every problem at once),
    datasets and task keys, one scripted rollout, then real Trinity-RFT's validation of
    the YAML (where Trinity is installed: the run directory of every backend keeps it).

    Args:
        graph: The experiment: a graph, ``"pkg.mod:Attr"``, ``"path/file.py:Attr"`` or
            the class.
        backend: ``auto`` (the backend `run` would choose), ``local`` or ``trinity``.
        cluster: ``NODESxGPUS`` (``1x8``) to validate the Trinity run on; else the
            cluster the config names, else this machine's GPUs if it has enough, else
            the fewest GPUs Trinity accepts.
        on_line: Handed each report line as its check finishes, in the order returned
            (``tunedsl check`` prints them so, rather than all at the end).

    Returns report lines (`tunedsl.checks.preflight.Note` s among them for what a
    Trinity run does differently); raises on the first kind of failure.
    """
    refuse_while_imported("tunedsl.check")
    from .backends.trinity.checks import trinity_notes
    from .backends.trinity.cluster import parse_cluster
    from .backends.trinity.tasksets import check_added_eval_tasksets
    from .backends.trinity.validate import fitted_config, validate_with_trinity
    from .checks.preflight import preflight

    if not isinstance(graph, ExperimentGraph):
        graph = load_experiment(graph)
    arguments.text("cluster", cluster, optional=True)
    if on_line is not None and not callable(on_line):
        raise ConfigError(f"on_line={on_line!r}: give a function of one line (print, "
                          f"list.append), or None")
    shape = parse_cluster(cluster) if cluster else None
    chosen, reason = choose_backend(backend, graph)
    chosen_line = f"backend: {chosen} ({reason}): its checks pass"
    shown: list[str] = []

    def show(line: str) -> None:  # the backend's line goes second, as the list has it
        shown.append(line)
        if on_line is not None:
            on_line(line)
            if len(shown) == 1:
                on_line(chosen_line)

    report = preflight(graph, *backend_checks(chosen), on_line=show)
    # The YAML a run on that cluster launches: fitted to it, bounds for its engine count.
    fitted = fitted_config(graph, shape, rows=report.rows)
    first, *rest = report.lines
    later = [*check_added_eval_tasksets(graph, fitted.config, chosen),
             *validate_with_trinity(fitted.config, shape, needed=fitted.needed),
             *(trinity_notes(graph, report, fitted.config) if chosen == "trinity" else [])]
    for line in later:
        show(line)
    return [first, chosen_line, *rest, *later]


def _run_local(graph: ExperimentGraph, resume: Path | None, progress: bool,
               ray_address: str | None, from_good_checkpoint: bool) -> Any:
    from .backends.local.checks import check_installed

    refuse_problems(graph, (check_installed,))  # before importing what needs torch
    from .backends.local.run import run_local
    from .backends.trinity.config import to_yaml, trinity_config
    from .runs.rundir import run_name

    name = resume.name if resume is not None else run_name(graph)
    # The local run directory keeps the Trinity YAML of the same run, to go on with on GPUs.
    return run_local(graph, resume=resume, progress=progress, run_name=name,
                     trinity_yaml=to_yaml(trinity_config(graph, name=name)),
                     from_good_checkpoint=from_good_checkpoint)


def _run_trinity(graph: ExperimentGraph, resume: Path | None, progress: bool,
                 ray_address: str | None, from_good_checkpoint: bool) -> Any:
    from .backends.trinity.launch import run_trinity

    return run_trinity(graph, resume=resume, ray_address=ray_address)


#: Backend name -> how to start a run on it.
_STARTERS: dict[str, Callable[[ExperimentGraph, Path | None, bool, str | None, bool], Any]] = {
    "local": _run_local, "trinity": _run_trinity,
}


def run(
    target: str | type | ExperimentGraph,
    *,
    backend: str = "auto",
    settings: str | None = None,
    overrides: Iterable[str] = (),
    resume: str | Path | bool | None = None,
    progress: bool = True,
    ray_address: str | None = None,
    from_good_checkpoint: bool = False,
) -> Any:
    """Run an experiment to the end and return the backend's summary.

    Args:
        target: ``"pkg.mod:Attr"``, ``"path/file.py:Attr"``, the class, or a built graph.
        backend: ``auto`` (Trinity where it is installed and GPUs are visible, else
            local), ``local`` or ``trinity``.
        settings: A TOML file to use instead of the discovered one; a file of
            ``[params]`` alone (what `tune_prompt` writes) goes on top of it.
        overrides: ``"dotted.key=value"`` items.
        resume: A run directory to continue (same experiment), or True for the newest
            run of this experiment under ``checkpoint_root_dir/project``.
        progress: Show a progress bar.
        ray_address: The Ray cluster for the Trinity backend (else ``RAY_ADDRESS``, a
            running cluster, or a new local one).
        from_good_checkpoint: With ``resume`` on the local backend: when the newest
            checkpoint is damaged, continue from the newest good one.
    """
    refuse_while_imported("tunedsl.run")
    arguments.outside_an_event_loop("tunedsl.run")
    arguments.flag("progress", progress)
    arguments.flag("from_good_checkpoint", from_good_checkpoint)
    from .interrupts import import_whole, terminate_as_interrupt
    from .runs.rundir import check_resume, newest_run_dir

    newest = resume is True
    resume = None if newest or resume is False else arguments.path("resume", resume)
    if from_good_checkpoint and resume is None and not newest:
        raise ConfigError(f"{option('from_good_checkpoint')} chooses the checkpoint a resume "
                          f"starts from; give the run with "
                          f"{said('--resume RUN_DIR', 'resume=RUN_DIR')} too")
    graph = target if isinstance(target, ExperimentGraph) else load_experiment(
        target, settings=settings, overrides=overrides)
    import_whole("numpy", "torch")  # every backend trains with them: in whole, or stopped
    chosen, reason = choose_backend(backend, graph)
    print(f"backend: {chosen} ({reason})", file=sys.stderr)
    if ray_address is not None and chosen == "local":
        print(f"note: {option('ray_address', ray_address)} is for the Trinity backend; the "
              f"local backend runs in this process", file=sys.stderr)
    if from_good_checkpoint and chosen == "trinity":  # said before the run directory is read
        raise ConfigError(f"{option('from_good_checkpoint')} applies to the local backend; "
                          f"Trinity chooses the checkpoint it continues from itself")
    if newest:
        resume = newest_run_dir(graph)
        print(f"resume: {resume} (the newest run of {graph.name})", file=sys.stderr)
    folder = check_resume(graph, resume) if resume is not None else None
    with terminate_as_interrupt():  # a scheduler's SIGTERM saves the run, as Ctrl-C does
        return _STARTERS[chosen](graph, folder, progress, ray_address, from_good_checkpoint)


def tune(
    *positional: Any,
    workflow_func: Callable[..., Any] | None = None,
    judge_func: Callable[..., Any] | None = None,
    train_dataset: Dataset | None = None,
    eval_dataset: Dataset | None = None,
    model: Model | None = None,
    auxiliary_models: dict[str, Model] | None = None,
    algorithm: Algorithm | None = None,
    project_name: str | None = None,
    experiment_name: str | None = None,
    monitor_type: str | None = None,
    config_path: str | None = None,
    overrides: Iterable[str] = (),
    backend: str = "auto",
    dry_run: bool = False,
    **settings: Any,
) -> Any:
    """The functional entry of AgentScope's ``tuner``: build the graph and run it.

    Undecorated functions are accepted (and decorated) as AgentScope's tuner accepts
    them. Arguments left as None are not set, so the ``tunedsl.toml`` the workflow's module
    finds and a ``config_path`` Trinity YAML still apply beneath them. The named
    arguments are AgentScope's; any other setting of the settings table is given by its
    own name (``rollout_timeout=600``, ``params={...}``).

    Args:
        backend: ``auto``, ``local`` or ``trinity`` (see `run`).
        dry_run: Build and check the graph, and return it, without running.

    Returns:
        The backend's run summary, or the `ExperimentGraph` with ``dry_run``.
    """
    refuse_while_imported("tunedsl.tune")
    arguments.outside_an_event_loop("tunedsl.tune")
    from .dsl.decorators import is_experiment
    from .dsl.decorators import judge as judge_decorator
    from .dsl.decorators import workflow as workflow_decorator

    if positional:  # (a bare TypeError said neither how to give them nor what else to call)
        first = positional[0]
        fix = (f"to train the @experiment class {first.__qualname__}, call "
               f"tunedsl.run({first.__qualname__})" if is_experiment(first) else
               "give them by name: tune(workflow_func=..., judge_func=..., ...)")
        raise ArgumentError(f"tune() takes its arguments by name (got {len(positional)} by "
                            f"position); {fix}")
    if not callable(workflow_func):
        raise ArgumentError(f"tune(workflow_func={workflow_func!r}): give your async workflow "
                            f"function, async def f(task, model) returning WorkflowOutput")
    if judge_func is not None and not callable(judge_func):
        raise ArgumentError(f"tune(judge_func={judge_func!r}): give your async judge function, "
                            f"async def f(task, response) returning JudgeOutput, or leave it out")
    if backend not in BACKENDS:  # checked before the graph: dry_run never reaches run()
        raise ConfigError(f"tune(backend={backend!r}): choose one of {', '.join(BACKENDS)}")
    if spec_of(workflow_func) is None:
        workflow_func = workflow_decorator(workflow_func)
    if judge_func is not None and spec_of(judge_func) is None:
        judge_func = judge_decorator(judge_func)
    given = {"workflow_func": workflow_func, "judge_func": judge_func,
             "train_dataset": train_dataset, "eval_dataset": eval_dataset, "model": model,
             "auxiliary_models": auxiliary_models, "algorithm": algorithm,
             "project_name": project_name, "experiment_name": experiment_name,
             "monitor_type": monitor_type, "config_path": config_path}
    namespace = {row.name: given[row.tuner] for row in EXPERIMENT_SETTINGS
                 if row.tuner is not None and given[row.tuner] is not None}
    for key, value in settings.items():
        row = SETTINGS_BY_NAME.get(key)
        if row is None or row.tuner is not None or row.class_only:
            raise ArgumentError(_unknown_tune_argument(key))
        namespace[key] = value
    namespace["__module__"] = workflow_func.__module__
    cls = type("Experiment", (), namespace)
    try:
        graph = build_graph(spec_of(experiment(cls)), source=None, overrides=overrides)
    except ConfigError as error:
        reworded = [_as_tune_argument(problem) for problem in error.problems]
        if reworded == list(error.problems):
            raise
        raise ConfigError(reworded, user_traceback=error.user_traceback) from None
    if dry_run:
        return graph
    return run(graph, backend=backend)


#: How @experiment names an attribute of the class tune() builds (which the user never
#: wrote, at line 0 of the workflow's file).
_TUNE_CLASS_ATTRIBUTE = re.compile(r"^@experiment Experiment \([^()]*:0\)\.(\w+)")


def _as_tune_argument(problem: str) -> str:
    """A problem of the class tune() built, said of the argument it came from: "tune()
    argument experiment_name ..." where it said "@experiment Experiment (exp.py:0).name"."""
    def argument(match: re.Match[str]) -> str:
        row = SETTINGS_BY_NAME.get(match[1])
        return f"tune() argument {row.tuner if row is not None and row.tuner else match[1]}"

    return _TUNE_CLASS_ATTRIBUTE.sub(argument, problem)


def _unknown_tune_argument(key: str) -> str:
    """tune()'s message for an argument that is not one of its own nor a setting."""
    row = SETTINGS_BY_NAME.get(key)
    if row is not None and row.tuner is not None:
        return f"tune() takes {key} as {row.tuner}= (AgentScope's name)"
    names = [row.tuner or row.name for row in EXPERIMENT_SETTINGS if not row.class_only
             or row.tuner]
    hint = did_you_mean(key, names)
    if not hint:  # a record's field given to tune() itself: say which record takes it
        fields = {row.name.rsplit(".", 1)[1]: row.name for row in all_settings()
                  if row.name.count(".") == 1 and row.name.split(".")[0] in _RECORD_ARGUMENTS}
        close = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
        if close:
            section = fields[close[0]].split(".")[0]
            return (f"tune() got an unexpected argument {key!r}: {close[0]} is a field of "
                    f"{_RECORD_ARGUMENTS[section]}; give {section}="
                    f"{_RECORD_ARGUMENTS[section].replace('...', f'{close[0]}=...')}")
    return f"tune() got an unexpected argument {key!r}{hint}"


#: tune()'s record arguments, by setting name, and how each is written.
_RECORD_ARGUMENTS = {"algorithm": "Algorithm(...)", "model": "Model(...)",
                     "train_dataset": "Dataset(...)"}


def tune_prompt(
    experiment: Any,
    *,
    model: Any,
    reflection_model: str | Model,
    params: Sequence[str] | None = None,
    auxiliary_models: Mapping[str, Model] | None = None,
    search: PromptSearch | None = None,
    candidates: str | os.PathLike[str] | None = None,
    output: str | os.PathLike[str] | None = None,
    resume: bool = False,
    concurrency: int = DEFAULT_CONCURRENCY,
    progress: bool = True,
    init_system_prompt: str | None = None,
) -> TuneResult:
    """Tune text params of an experiment with GEPA (what ``tunedsl tune-prompt`` runs).

    Args:
        experiment: ``"pkg.mod:Attr"``, ``"path/file.py:Attr"``, the class, or a graph
            (`load_experiment` applies settings files and overrides).
        model: How to reach the model the rollouts use, as `evaluate` takes it:
            ``"NAME@URL"``, a `Model` with ``base_url`` (and ``api_key_env``), or a local
            model folder (a `pathlib.Path`) sampled on the CPU.
        reflection_model: The model that reads failing rollouts and proposes new text:
            ``"NAME"`` (served by ``model``'s endpoint, with its key), ``"NAME@URL"``, or a
            `Model` with ``base_url`` and ``api_key_env``.
        params: The text params to tune (``["system_prompt"]``); the workflow must read
            them from its ``params`` argument. Default: ``["system_prompt"]`` when
            ``init_system_prompt`` is given.
        auxiliary_models: `Model` records with ``base_url`` for the experiment's auxiliary
            models, by name (those the experiment serves from an endpoint need none).
        search: How GEPA searches: the budget of rollouts, the held-out share, the
            minibatch, the seed and the perfect reward (`PromptSearch`).
        candidates: The JSON Lines file keeping every rollout, reflection and scored
            candidate (default ``prompts/<name>-<time>.jsonl``).
        output: The ``[params]`` TOML written with the best candidate (default: the
            candidates file's name with ``.toml``); apply it with ``--settings``.
        resume: Continue ``candidates``: what it holds is replayed, not run again.
        concurrency: Rollouts in flight at once.
        progress: Show a progress bar and a line per scored candidate on stderr.
        init_system_prompt: AgentScope's name for the starting text of ``system_prompt``
            (default: the experiment's own value).

    Returns:
        The best candidate and its validation reward against the starting one's.

    Raises:
        ConfigError: bad input, found before any rollout runs (one line each).
        RunError: every validation rollout of the starting prompt failed, or the
            reflection model failed three times in a row (``resume=True`` continues).
        RunInterrupted: Ctrl-C; the candidates file keeps every rollout and reflection
            that finished (``resume=True`` continues).
    """
    refuse_while_imported("tunedsl.tune_prompt")
    arguments.outside_an_event_loop("tunedsl.tune_prompt")
    arguments.flag("resume", resume)
    arguments.flag("progress", progress)
    from .evaluation.execution import Execution
    from .evaluation.prompt_tuning import check_search, prompt_files, tune_graph
    from .evaluation.select import served_auxiliary
    from .reach import reach_of, reflection_of

    search = PromptSearch() if search is None else search
    if not isinstance(search, PromptSearch):
        raise ConfigError(f"search={search!r}: give a tunedsl PromptSearch(budget=..., ...)")
    execution = Execution(concurrency=concurrency, resume=resume, progress=progress)
    arguments.whole("search.budget", search.budget, None, optional=True)
    arguments.number("search.perfect_reward", search.perfect_reward)
    if search.val_fraction is not None:
        arguments.fraction("search.val_fraction", search.val_fraction)
    for count, number in (("concurrency", concurrency), ("search.minibatch", search.minibatch),
                          ("search.seed", search.seed)):
        arguments.whole(count, number, None)
    if isinstance(reflection_model, Model):
        from .dsl.setting import explicit_fields

        unused = sorted(set(explicit_fields(reflection_model)) - {"model_path", "base_url",
                                                                  "api_key_env"})
        if unused:  # GEPA asks it with its own settings: these would be dropped silently
            raise ConfigError(f"reflection_model: Model(..., {unused[0]}=...) is not used; "
                              f"the reflection model is reached by its name, base_url and "
                              f"api_key_env only")
    elif not isinstance(reflection_model, str) or not reflection_model.strip():
        raise ConfigError(f"reflection_model={reflection_model!r}: give NAME, NAME@URL or "
                          f"a Model(NAME, base_url=..., api_key_env=...)")
    arguments.text("init_system_prompt", init_system_prompt, optional=True)
    candidates = arguments.path("candidates", candidates)
    output = arguments.path("output", output)
    arguments.named("auxiliary_models", auxiliary_models)
    if params is not None:
        arguments.texts("params", params)
    check_search(search, execution)
    if resume and candidates is None:
        raise ConfigError("resume continues a candidates file: give it as candidates")
    graph = experiment if isinstance(experiment, ExperimentGraph) else \
        load_experiment(experiment)
    if params is None:
        params = ["system_prompt"] if init_system_prompt is not None else []
    params = list(dict.fromkeys(params))
    if init_system_prompt is not None and "system_prompt" not in params:
        raise ConfigError("init_system_prompt is the starting text of the system_prompt param; "
                          "tune it: params=[\"system_prompt\", ...]")
    check_params(graph, params)
    start = {name: str(graph.params[name]) for name in params}
    if init_system_prompt is not None:
        start["system_prompt"] = init_system_prompt
    candidates, output = prompt_files(graph, candidates, output)
    reach = reach_of(model)
    if isinstance(reflection_model, Model):
        reflection = reflection_of(
            reflection_model.model_path + (f"@{reflection_model.base_url}"
                                           if reflection_model.base_url else ""),
            reach, reflection_model.api_key_env)
    else:
        reflection = reflection_of(reflection_model, reach)
    reached = reached_models(graph, reach, served_auxiliary(graph, auxiliary_models))
    return tune_graph(graph, start, reached, reflection, candidates=candidates,
                      settings_out=output, search=search, execution=execution)


def evaluate(
    experiment: Any,
    model: Any,
    *,
    auxiliary_models: Mapping[str, Model] | None = None,
    output: str | os.PathLike[str] | None = None,
    split: str | None = None,
    limit: int | None = None,
    repeat: int = 1,
    concurrency: int | None = None,
    resume: bool = False,
    progress: bool = True,
) -> EvalSummary:
    """Run the experiment's workflow and judge over its eval dataset with one model and
    summarise the rewards (``tunedsl eval`` in Python; `select_model` ranks several).

    Every rollout is a line of the results file as it finishes, with the settings that
    made it, so an interrupted eval loses nothing and ``resume`` runs only what the file
    lacks (refused when the model, the data, the params, the sampling, the workflow's or
    judge's code or ``rollout_timeout`` changed).

    Args:
        experiment: ``"pkg.mod:Attr"``, ``"path/file.py:Attr"``, the class, or a graph
            (`load_experiment` applies settings files and overrides).
        model: How to reach the model: ``"NAME@URL"``; a `Model` record with ``base_url``
            (which may read ``${env:NAME}`` as settings do; its ``model_path`` is the
            name sent, its ``api_key_env`` names the key's variable, and the sampling
            settings it sets explicitly replace the experiment's); or a local model
            folder (a `pathlib.Path`, or a `Model` without ``base_url``), a checkpoint a
            run saved, sampled on the CPU.
        auxiliary_models: `Model` records with ``base_url`` for the experiment's auxiliary
            models, by name (those the experiment serves from an endpoint need none).
        output: The results file (default ``evals/<experiment>-<timestamp>.jsonl``); an
            existing one needs ``resume``.
        split: The split (default the dataset's).
        limit: Only the first ``limit`` rows.
        repeat: Rollouts per task (pass@k for ``repeat`` = k).
        concurrency: Rollouts in flight (default 16: `DEFAULT_CONCURRENCY`).
        resume: Continue ``output``.
        progress: Show a progress bar.

    Returns:
        The `EvalSummary`; ``summary.results`` is the results file.
    """
    refuse_while_imported("tunedsl.evaluate")
    arguments.outside_an_event_loop("tunedsl.evaluate")
    from .evaluation.evaluate import EvalScope
    from .evaluation.execution import Execution
    from .evaluation.select import served_auxiliary
    from .reach import reach_of

    arguments.whole("repeat", repeat)
    arguments.whole("concurrency", concurrency, optional=True)
    arguments.whole("limit", limit, optional=True)
    arguments.text("split", split, optional=True)
    arguments.flag("resume", resume)
    arguments.flag("progress", progress)
    output = arguments.path("output", output)
    arguments.named("auxiliary_models", auxiliary_models)
    if resume and output is None:
        raise ConfigError("resume continues a results file: give it as output")
    graph = experiment if isinstance(experiment, ExperimentGraph) else \
        load_experiment(experiment)
    return evaluate_reached(graph, reach_of(model), served_auxiliary(graph, auxiliary_models),
                            output=output,
                            scope=EvalScope(split=split, limit=limit, repeat=repeat),
                            execution=Execution(concurrency=DEFAULT_CONCURRENCY
                                                if concurrency is None else concurrency,
                                                resume=resume, progress=progress))


def reached_models(graph: ExperimentGraph, reach: Candidate | LocalFolder,
                   auxiliary: AuxiliaryPlan) -> Reached:
    """The models of one command, made now: the policy ``reach`` names and the auxiliary
    models ``auxiliary`` plans; its ``settings`` are what results and candidates files
    keep (model, base URL, checkpoint, ``aux``)."""
    from .evaluation.evaluate import WEIGHTS_KEY
    from .evaluation.select import check_key_variable, endpoint_reached
    from .models.reached import Reached
    from .reach import LocalFolder

    if not isinstance(reach, LocalFolder):
        check_key_variable(reach.api_key_env)
        return endpoint_reached(graph, reach, auxiliary)
    clients, factories = auxiliary.made()
    from .models.folder import weights_identity

    settings: dict[str, Any] = {"model": reach.name, "base_url": None,
                                "checkpoint": reach.path, "aux": list(auxiliary.kept),
                                WEIGHTS_KEY: weights_identity(reach.path)}
    if reach.sampling:
        settings["sampling"] = dict(reach.sampling)
    return Reached(model=local_models(graph, reach.path, reach.sampling), auxiliary=factories,
                   clients=clients, settings=settings)


def local_models(graph: ExperimentGraph, folder: str,
                 sampling: Mapping[str, Any] | None = None) -> Callable[[], Any]:
    """A factory of chat models (one per rollout) over the model saved in ``folder``,
    sampled on the CPU with the experiment's model settings (``sampling`` replacing
    theirs)."""
    from .backends.local.checks import check_installed

    refuse_problems(graph, (check_installed,))  # a checkpoint is sampled with torch
    from .backends.local.chat import local_sampling
    from .backends.local.models import checkpoint_model
    from .models.context import length_problem

    spec = attrs.evolve(graph.model, **sampling) if sampling else graph.model
    problem = length_problem("model", spec.max_model_len, folder)
    if problem is not None:  # as run and check refuse it: sampling past the positions
        raise ConfigError(problem)
    return checkpoint_model(folder, local_sampling(spec),
                            enable_thinking=spec.enable_thinking,
                            tool_call_parser=spec.tool_call_parser,
                            max_model_len=spec.max_model_len,
                            reasoning_parser=spec.reasoning_parser)


def evaluate_reached(graph: ExperimentGraph, reach: Candidate | LocalFolder,
                     auxiliary: AuxiliaryPlan, *, output: str | os.PathLike[str] | None,
                     settings_file: str | None = None, scope: EvalScope,
                     execution: Execution) -> EvalSummary:
    """Evaluate ``graph`` with the model ``reach`` names and the auxiliary models
    ``auxiliary`` plans, as `evaluate` and ``tunedsl eval`` do."""
    from .evaluation.evaluate import evaluate as evaluate_rows
    from .evaluation.evaluate import refuse_another_kind
    from .runs.outputs import experiment_inputs, refuse_misnamed, refuse_overwriting
    from .runs.run_files import EVALS_DIR, claimed_default
    from .runs.writing import refuse_unwritable

    named = output if output is not None else claimed_default(EVALS_DIR, graph.name, ".jsonl")
    # (the default said as the default, not as an -o the user never gave: sweep 50 B-W5)
    label = "output" if output is not None else default_output()
    refuse_overwriting(named, label, experiment_inputs(graph, settings_file))  # as given
    if output is None:
        refuse_unwritable(named, f"{label} {named}")
    # (a file that holds something else is said as that before its name is: sweep 50 B-W3)
    refuse_another_kind(Path(named), "results", "output")
    refuse_misnamed(named, "output", "eval writes its results as JSON Lines", (".jsonl",))
    output = Path(named)
    summary = evaluate_rows(graph, reached_models(graph, reach, auxiliary), output=output,
                            scope=scope, execution=execution)
    return attrs.evolve(summary, results=output)


__all__ = ["check", "choose_backend", "evaluate", "load_experiment", "run", "tune",
           "tune_prompt"]
