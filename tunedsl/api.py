"""The Python entry points: `load_experiment`, `check`, `run`, and AgentScope tuner's `tune`.

This module and the CLI are the only places that choose a backend; they hand it
what it needs (the graph, the run's name, the Trinity YAML its run directory keeps).
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import importlib.util
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .config.graph import ExperimentGraph, build_graph
from .config.load import load_experiment
from .dsl import arguments
from .dsl.decorators import experiment, spec_of
from .dsl.records import Algorithm, Dataset, Model, is_http_url
from .dsl.settings_table import EXPERIMENT_SETTINGS, SETTINGS_BY_NAME, all_settings
from .errors import ConfigError, did_you_mean
from .tools.prompt_tuning import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MINIBATCH,
    DEFAULT_VAL_FRACTION,
    TuneResult,
)

if TYPE_CHECKING:
    from .tools.evaluate import EvalSummary

BACKENDS = ("auto", "local", "trinity")


def choose_backend(requested: str, graph: ExperimentGraph | None = None) -> tuple[str, str]:
    """The backend to use and why, for ``--backend auto|local|trinity`` (whether it can run
    the experiment is its checks' answer: `backend_checks`)."""
    if requested not in BACKENDS:
        raise ConfigError(f"--backend {requested}: choose one of {', '.join(BACKENDS)}")
    if requested != "auto":
        return requested, "chosen with --backend"
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
          cluster: str | None = None) -> list[str]:
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

    Returns report lines (`tunedsl.runtime.preflight.Note` s among them for what a
    Trinity run does differently); raises on the first kind of failure.
    """
    from .backends.trinity.checks import trinity_notes
    from .backends.trinity.cluster import parse_cluster
    from .backends.trinity.validate import fitted_config, validate_with_trinity
    from .runtime.preflight import preflight

    if not isinstance(graph, ExperimentGraph):
        graph = load_experiment(graph)
    arguments.text("cluster", cluster, optional=True)
    shape = parse_cluster(cluster) if cluster else None
    chosen, reason = choose_backend(backend, graph)
    report = preflight(graph, *backend_checks(chosen))
    # The YAML a run on that cluster launches: fitted to it, bounds for its engine count.
    fitted = fitted_config(graph, shape, rows=report.rows)
    first, *rest = report.lines
    notes = trinity_notes(graph, report, fitted.config) if chosen == "trinity" else []
    return [first, f"backend: {chosen} ({reason}): its checks pass", *rest,
            *validate_with_trinity(fitted.config, shape, needed=fitted.needed), *notes]


def _run_local(graph: ExperimentGraph, resume: Path | None, progress: bool,
               ray_address: str | None, from_good_checkpoint: bool) -> Any:
    from .backends.local.run import run_local
    from .backends.trinity.config import to_yaml, trinity_config
    from .runtime.rundir import run_name

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
    resume: str | Path | None = None,
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
        resume: A run directory to continue (same experiment).
        progress: Show a progress bar.
        ray_address: The Ray cluster for the Trinity backend (else ``RAY_ADDRESS``, a
            running cluster, or a new local one).
        from_good_checkpoint: With ``resume`` on the local backend: when the newest
            checkpoint is damaged, continue from the newest good one.
    """
    from .runtime.rundir import check_resume

    arguments.path("resume", resume)
    if from_good_checkpoint and resume is None:
        raise ConfigError("--from-good-checkpoint chooses the checkpoint a resume starts from; "
                          "give the run with --resume RUN_DIR too")
    graph = target if isinstance(target, ExperimentGraph) else load_experiment(
        target, settings=settings, overrides=overrides)
    chosen, reason = choose_backend(backend, graph)
    print(f"backend: {chosen} ({reason})", file=sys.stderr)
    if from_good_checkpoint and chosen == "trinity":  # said before the run directory is read
        raise ConfigError("--from-good-checkpoint applies to the local backend; Trinity "
                          "chooses the checkpoint it continues from itself")
    folder = check_resume(graph, resume) if resume is not None else None
    return _STARTERS[chosen](graph, folder, progress, ray_address, from_good_checkpoint)


def tune(
    *,
    workflow_func: Callable[..., Any],
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
    them. Arguments left as None are not set, so ``tunedsl.toml`` beside the workflow's
    module and a ``config_path`` Trinity YAML still apply beneath them. The named
    arguments are AgentScope's; any other setting of the settings table is given by its
    own name (``rollout_timeout=600``, ``params={...}``).

    Args:
        backend: ``auto``, ``local`` or ``trinity`` (see `run`).
        dry_run: Build and check the graph, and return it, without running.

    Returns:
        The backend's run summary, or the `ExperimentGraph` with ``dry_run``.
    """
    from .dsl.decorators import judge as judge_decorator
    from .dsl.decorators import workflow as workflow_decorator

    if not callable(workflow_func):
        raise TypeError(f"tune(workflow_func={workflow_func!r}): give your async workflow "
                        f"function, async def f(task, model) returning WorkflowOutput")
    if judge_func is not None and not callable(judge_func):
        raise TypeError(f"tune(judge_func={judge_func!r}): give your async judge function, "
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
            raise TypeError(_unknown_tune_argument(key))
        namespace[key] = value
    namespace["__module__"] = workflow_func.__module__
    cls = type("Experiment", (), namespace)
    graph = build_graph(spec_of(experiment(cls)), source=None, overrides=overrides)
    if dry_run:
        return graph
    return run(graph, backend=backend)


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
    params: Sequence[str] | None = None,
    reflection_model: str,
    base_url: str | None = None,
    model: str | None = None,
    api_key_env: str | None = None,
    checkpoint: str | None = None,
    aux: Sequence[str] = (),
    reflection_api_key_env: str | None = None,
    budget: int | None = None,
    candidates: str | Path | None = None,
    output: str | Path | None = None,
    resume: bool = False,
    concurrency: int = DEFAULT_CONCURRENCY,
    val_fraction: float = DEFAULT_VAL_FRACTION,
    minibatch: int = DEFAULT_MINIBATCH,
    seed: int = 0,
    progress: bool = True,
    settings: str | None = None,
    overrides: Iterable[str] = (),
    init_system_prompt: str | None = None,
    perfect_reward: float = 1.0,
) -> TuneResult:
    """Tune text params of an experiment with GEPA (what ``tunedsl tune-prompt`` runs).

    Args:
        experiment: The ``@experiment`` class, its import string, or its `ExperimentGraph`.
        params: The text params to tune (``["system_prompt"]``); the workflow must read
            them from its ``params`` argument. Default: ``["system_prompt"]`` when
            ``init_system_prompt`` is given.
        reflection_model: ``NAME`` or ``NAME@URL``: the model that reads failing rollouts and
            proposes new text (without a URL, ``base_url``'s endpoint serves it).
        base_url, model, api_key_env: The OpenAI-compatible endpoint the rollouts use, as
            ``eval`` takes them (the key is read from the environment variable named).
        checkpoint: Roll out a locally trained model folder on the CPU instead.
        aux: ``NAME=URL,MODEL`` endpoints for auxiliary models, as ``eval --aux``.
        reflection_api_key_env: The environment variable holding the reflection model's
            key (default: ``api_key_env`` when it shares ``base_url``, else none).
        budget: Rollouts to spend, the starting prompt's validation included (at least one
            evaluation of the validation split; default `default_budget`). It is never
            exceeded: a batch that would go past it ends the run, a few rollouts short.
        candidates: The JSON Lines file keeping every rollout, reflection and scored
            candidate (default ``prompts/<name>-<time>.jsonl``).
        output: The ``[params]`` TOML written with the best candidate (default: the
            candidates file's name with ``.toml``); apply it with ``--settings``.
        resume: Continue ``candidates``: what it holds is replayed, not run again.
        concurrency: Rollouts in flight at once.
        val_fraction: Without an eval dataset, the share of the training data held out to
            select by.
        minibatch: Training examples the reflection model reads per proposal.
        seed: Seeds the held-out split and GEPA's choices (a resume needs the same).
        progress: Show a progress bar and a line per scored candidate on stderr.
        settings, overrides: As ``load_experiment``'s (``--settings``, ``--set``).
        init_system_prompt: AgentScope's name for the starting text of ``system_prompt``
            (default: the experiment's own value).
        perfect_reward: The reward no rollout can beat (1.0: a judge scoring 0 to 1). GEPA
            reflects on no minibatch scoring it everywhere, and tuning ends once a candidate
            scores it on every validation task instead of spending the rest of the budget;
            a rollout scoring above it stops the run with exit 1 naming the fix.

    Returns:
        The best candidate and its validation reward against the starting one's.

    Raises:
        ConfigError: bad input, found before any rollout runs (one line each).
        RunError: every validation rollout of the starting prompt failed, or the
            reflection model failed three times in a row (``resume=True`` continues).
        RunInterrupted: Ctrl-C; the candidates file keeps every rollout and reflection
            that finished (``resume=True`` continues).
    """
    import os

    from .runtime.models.endpoint import endpoint_client, redact_url
    from .runtime.outputs import PARAMS_TOML, Input, experiment_inputs, refuse_overwriting
    from .runtime.run_files import PROMPTS_DIR, stamped
    from .tools.evaluate import refuse_another_kind
    from .tools.prompt_tuning import Reflection, check_params, parse_reflection_model, tune_graph

    arguments.whole("budget", budget, None, optional=True)
    for count, number in (("concurrency", concurrency), ("minibatch", minibatch),
                          ("seed", seed)):
        arguments.whole(count, number, None)
    arguments.text("reflection_model", reflection_model)
    arguments.text("init_system_prompt", init_system_prompt, optional=True)
    for option, place in (("candidates", candidates), ("output", output),
                          ("checkpoint", checkpoint)):
        arguments.path(option, place)
    arguments.texts("aux", aux)
    if params is not None:
        arguments.texts("params", params)
    graph = experiment if isinstance(experiment, ExperimentGraph) else load_experiment(
        experiment, settings=settings, overrides=overrides)
    if params is None:
        params = ["system_prompt"] if init_system_prompt is not None else []
    params = list(dict.fromkeys(params))
    start = {"system_prompt": init_system_prompt} if init_system_prompt is not None else {}
    if start and "system_prompt" not in params:
        raise ConfigError("init_system_prompt is the starting text of the system_prompt param; "
                          "tune it: params=[\"system_prompt\", ...]")
    check_params(graph, params)
    if budget is not None and budget < 1:
        raise ConfigError(f"--budget {budget}: give a number of rollouts, at least one "
                          f"evaluation of the validation split")
    if not math.isfinite(perfect_reward):
        raise ConfigError(f"--perfect-reward {perfect_reward}: give the best reward your judge "
                          f"gives, a finite number (1 for a judge scoring 0 to 1)")
    if resume and candidates is None:
        raise ConfigError("--resume continues a candidates file: give it with --candidates FILE")
    candidates = Path(candidates or os.path.join(PROMPTS_DIR, f"{stamped(graph.name)}.jsonl"))
    output = Path(output) if output is not None else candidates.with_suffix(".toml")
    inputs = experiment_inputs(graph, settings)
    refuse_overwriting(candidates, "--candidates", inputs)
    refuse_another_kind(candidates, "candidates", "--candidates")  # before any endpoint
    refuse_overwriting(output, "-o", [*inputs, Input("the candidates file", str(candidates))],
                       PARAMS_TOML)
    name, url = parse_reflection_model(reflection_model, base_url if not checkpoint else None)
    if reflection_api_key_env is None and url == base_url:
        reflection_api_key_env = api_key_env
    client, factory = task_model(graph, base_url=base_url, model=model,
                                 api_key_env=api_key_env, checkpoint=checkpoint)
    clients = [] if client is None else [client]
    auxiliary = auxiliary_models(graph, aux, api_key_env)
    clients += [c for c, _ in auxiliary.values()]
    reflection_client = endpoint_client(url, api_key_env=reflection_api_key_env,
                                        label="--reflection-api-key-env")
    clients.append(reflection_client)
    reflection = Reflection(reflection_client, name, url)

    async def close() -> None:
        await asyncio.gather(*(c.close() for c in clients))

    recorded = {"model": model, "base_url": redact_url(base_url), "checkpoint": checkpoint,
                "aux": aux_settings(aux), "reflection_url": redact_url(url)}
    return tune_graph(graph, params=params, model=factory, reflection=reflection,
                      reflection_spec=reflection_model, candidates=candidates,
                      settings_out=output, auxiliary={k: make for k, (_, make) in
                                                      auxiliary.items()},
                      budget=budget, start=start, resume=resume, concurrency=concurrency,
                      val_fraction=val_fraction, minibatch=minibatch, seed=seed,
                      progress=progress, close=close, settings=recorded,
                      perfect_reward=perfect_reward)


# ---------------------------------------------------------------- the models commands talk to
# ``tunedsl eval`` and ``tunedsl tune-prompt`` (and tune_prompt) take the same
# --base-url/--model/--api-key-env, --checkpoint and --aux options and build their model
# factories here, so they accept, refuse and word them alike. They live with the entry
# points: --checkpoint loads the local backend's model, which the tools never import.

def task_model(graph: Any, *, base_url: str | None, model: str | None,
               api_key_env: str | None = None,
               checkpoint: str | None = None) -> tuple[Any | None, Any]:
    """``(client, factory)``: a factory of chat models (one per rollout) for the experiment's
    model, served by ``base_url`` as ``model`` or loaded from ``checkpoint`` on the CPU (then
    ``client`` is None); ``client`` is the HTTP client to close at the end."""
    if checkpoint:
        from .backends.local.chat import local_sampling
        from .backends.local.models import checkpoint_model

        return None, checkpoint_model(checkpoint, local_sampling(graph.model),
                                      enable_thinking=graph.model.enable_thinking,
                                      tool_call_parser=graph.model.tool_call_parser,
                                      max_model_len=graph.model.max_model_len,
                                      reasoning_parser=graph.model.reasoning_parser)
    if not base_url or not model:
        raise ConfigError("give --base-url URL and --model NAME (or --checkpoint DIR)")
    if not is_http_url(base_url):
        raise ConfigError(f"--base-url {base_url}: not an http(s) URL; give the "
                          f"endpoint's, e.g. http://localhost:8000/v1")
    from .runtime.models.endpoint import endpoint_models

    return endpoint_models(graph.model, base_url=base_url, model_name=model,
                           api_key_env=api_key_env)


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
    lacks (refused when the model, the data, the params or the sampling changed).

    Args:
        experiment: ``"pkg.mod:Attr"``, ``"path/file.py:Attr"``, the class, or a graph
            (`load_experiment` applies settings files and overrides).
        model: How to reach the model: ``"NAME@URL"``; a `Model` record with ``base_url``
            (its ``model_path`` is the name sent, its ``api_key_env`` names the key's
            variable, and the sampling settings it sets explicitly replace the
            experiment's); or a local model folder (a `pathlib.Path`, or a `Model` without
            ``base_url``), a checkpoint a run saved, sampled on the CPU.
        auxiliary_models: `Model` records with ``base_url`` for the experiment's auxiliary
            models, by name (those the experiment serves from an endpoint need none).
        output: The results file (default ``evals/<experiment>-<timestamp>.jsonl``); an
            existing one needs ``resume``.
        split, limit, repeat: The split (default the dataset's), the first ``limit``
            rows, and rollouts per task (pass@k for ``repeat`` = k).
        concurrency: Rollouts in flight (default 32).
        resume: Continue ``output``.
        progress: Show a progress bar.

    Returns:
        The `EvalSummary`; ``summary.results`` is the results file.
    """
    from .tools.select import served_auxiliary

    arguments.whole("repeat", repeat)
    arguments.whole("concurrency", concurrency, optional=True)
    arguments.whole("limit", limit, optional=True)
    arguments.text("split", split, optional=True)
    arguments.path("output", output)
    arguments.named("auxiliary_models", auxiliary_models)
    if resume and output is None:
        raise ConfigError("resume continues a results file: give it as output")
    graph = experiment if isinstance(experiment, ExperimentGraph) else \
        load_experiment(experiment)
    plan, aux_kept = served_auxiliary(graph, auxiliary_models)
    return evaluate_reached(graph, reach_of(model), plan, aux_kept, output=output,
                            split=split, limit=limit, repeat=repeat,
                            concurrency=concurrency, resume=resume, progress=progress)


def reach_of(model: Any) -> Any:
    """What `evaluate_reached` takes for `evaluate`'s ``model``: a `Candidate` served by an
    endpoint, or a `LocalFolder`."""
    from .tools.select import candidates_from

    if isinstance(model, os.PathLike) or (isinstance(model, Model) and model.base_url is None):
        return LocalFolder(str(model.model_path if isinstance(model, Model) else model))
    if isinstance(model, str) and "@" not in model:
        raise ConfigError(f"model {model!r}: give NAME@URL, Model({model!r}, base_url=...), "
                          f"or a local model folder as a pathlib.Path")
    (candidate,) = candidates_from([model], None, None, shared="base_url", option="model")
    return candidate


@attrs.frozen
class LocalFolder:
    """A local model folder to evaluate on the CPU (a checkpoint a run saved), and the
    model name its results keep (``--model`` given beside ``--checkpoint``)."""

    path: str
    name: str | None = None


def evaluate_reached(graph: ExperimentGraph, reach: Any,
                     plan: Mapping[str, Callable[[], tuple[Any, Any]]], aux_kept: list[str],
                     *, output: str | os.PathLike[str] | None, settings_file: str | None = None,
                     **run: Any) -> EvalSummary:
    """Evaluate ``graph`` with the model ``reach`` names (a `Candidate` or a `LocalFolder`)
    and the auxiliary models ``plan`` makes, as `evaluate` and ``tunedsl eval`` do:
    ``run`` holds `tools.evaluate.evaluate`'s split, limit, repeat, concurrency, resume
    and progress (concurrency None: the default)."""
    from .runtime.outputs import experiment_inputs, refuse_overwriting
    from .runtime.rollout import DEFAULT_CONCURRENCY
    from .runtime.run_files import EVALS_DIR, stamped
    from .tools.evaluate import evaluate as evaluate_rows
    from .tools.select import (
        auxiliary_clients,
        candidate_settings,
        check_key_variable,
        endpoint_factories,
    )

    output = Path(output if output is not None else
                  os.path.join(EVALS_DIR, f"{stamped(graph.name)}.jsonl"))
    refuse_overwriting(output, "-o", experiment_inputs(graph, settings_file))
    if isinstance(reach, LocalFolder):
        client, model = task_model(graph, base_url=None, model=None, checkpoint=reach.path)
        helpers, auxiliary = auxiliary_clients(plan)
        clients = ([] if client is None else [client]) + helpers
        kept = {"model": reach.name, "base_url": None, "checkpoint": reach.path,
                "aux": aux_kept}
    else:
        check_key_variable(reach.api_key_env)
        clients, model, auxiliary = endpoint_factories(graph, reach, plan)
        kept = candidate_settings(reach, aux_kept)

    async def close() -> None:
        await asyncio.gather(*(c.close() for c in clients))

    if run.get("concurrency") is None:
        run["concurrency"] = DEFAULT_CONCURRENCY
    summary = evaluate_rows(graph, model=model, output=output, auxiliary=auxiliary,
                            close=close, settings=kept, **run)
    return attrs.evolve(summary, results=output)


def auxiliary_plan(graph: Any, aux: Sequence[str],
                   api_key_env: str | None = None) -> dict[str, Callable[[], tuple[Any, Any]]]:
    """Each auxiliary model's endpoint, checked now, as a function making its ``(client,
    factory)`` when called (model selection makes fresh ones per candidate: a client does
    not outlive its event loop): those the experiment serves from an endpoint, and those
    given as ``NAME=URL,MODEL`` items (``--aux``)."""
    from .runtime.models.endpoint import auxiliary_endpoint, endpoint_models

    # Auxiliary models the experiment serves from an endpoint need no --aux (it may
    # still point one elsewhere).
    plan: dict[str, Callable[[], tuple[Any, Any]]] = {
        name: functools.partial(auxiliary_endpoint, spec, name)
        for name, spec in graph.auxiliary_models.items()
            if spec.base_url is not None
            and not any(item.startswith(f"{name}=") for item in aux)}
    given = [item.partition("=")[0] for item in aux]
    twice = sorted({name for name in given if given.count(name) > 1})
    if twice:
        raise ConfigError(f"--aux {twice[0]}=... is given {given.count(twice[0])} times; give "
                          f"each auxiliary model once")
    for item in aux:
        name, sep, rest = item.partition("=")
        url, comma, model = rest.rpartition(",")
        if not sep or not comma or not name or not url or not model \
                or not is_http_url(url):
            raise ConfigError(f"--aux {item!r}: expected NAME=URL,MODEL, e.g. "
                              f"--aux grader=http://localhost:8001/v1,Qwen/Qwen3-8B")
        if name not in graph.auxiliary_models:
            raise ConfigError(f"--aux {item!r}: the experiment declares no auxiliary model "
                              f"{name!r} (it has: {', '.join(graph.auxiliary_models) or 'none'})")
        plan[name] = functools.partial(endpoint_models, graph.auxiliary_models[name],
                                       base_url=url, model_name=model, name=name,
                                       api_key_env=api_key_env)
    return plan


def auxiliary_models(graph: Any, aux: Sequence[str],
                     api_key_env: str | None = None) -> dict[str, tuple[Any, Any]]:
    """``{name: (client, factory)}`` for the experiment's auxiliary models (`auxiliary_plan`,
    made now)."""
    return {name: make() for name, make in auxiliary_plan(graph, aux, api_key_env).items()}


def aux_settings(aux: Sequence[str]) -> list[str]:
    """The ``--aux`` items as results keep them: sorted, any secret in a URL masked."""
    from .runtime.models.endpoint import redact_url

    shown = []
    for item in aux:
        name, _, rest = item.partition("=")
        url, _, model = rest.rpartition(",")
        shown.append(f"{name}={redact_url(url)},{model}")
    return sorted(shown)

__all__ = ["check", "choose_backend", "evaluate", "load_experiment", "run", "tune",
           "tune_prompt"]
