"""The backend-independent preflight: what fails before any model or GPU is asked for.

It reads each dataset in one streamed pass, checks that every row has the task keys
the workflow and judge read, with one type each, and runs one rollout on a scripted
model, after the chosen backend's checks over the graph (``LOCAL_CHECKS``,
``TRINITY_CHECKS``). ``tunedsl check`` adds Trinity's validation of the YAML.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from ..config.graph import DATASET_SECTIONS, ExperimentGraph, load_function, refuse_problems
from ..config.paths import local_path
from ..data.as_read import refuse_a_split_read_twice, refuse_rows_read_otherwise
from ..data.conversations import check_conversations
from ..data.datasets import first_rows
from ..data.json_files import json_files
from ..data.quality import MAX_ROWS, scan
from ..dsl.algorithms import teacher_name
from ..dsl.chat import ModelCall
from ..dsl.decorators import FunctionSpec
from ..dsl.turns import Turn
from ..errors import ConfigError, DatasetError, RolloutError, shortened
from .futile import futile_settings, phase_steps


class Note(str):
    """A report line naming something to know before a run (a difference between backends,
    say), rather than a check that passed; printed as ``note  ...``."""


@attrs.frozen(kw_only=True)
class PreflightReport:
    """What the preflight found.

    Attributes:
        lines: Report lines, one per check that passed.
        rows: Each dataset section's row count (None: more than `MAX_ROWS`, not counted).
        calls: The trained model's calls in the scripted rollout, in order.
        turns: The turns the scripted rollout marked (``model.end_turn``).
    """

    lines: list[str]
    rows: dict[str, int | None]
    calls: tuple[ModelCall, ...]
    turns: tuple[Turn, ...] = ()


#: A backend's check over what the preflight found; it returns its problems, one line each.
ReportCheck = Callable[[ExperimentGraph, PreflightReport], list[str]]


def _task_key(node: ast.AST) -> str | None:
    """The key of a ``task["key"]`` expression, or None."""
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and node.value.id == "task" and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)):
        return node.slice.value
    return None


#: The exceptions whose handler makes the ``task["key"]`` reads of its ``try`` optional.
_MISSING_KEY = {"KeyError", "LookupError", "Exception", "BaseException"}


def _guarded(tree: ast.AST, names: Mapping[str, Any] | None = None) -> set[str]:
    """Keys the function reads only where a missing one is handled: tested first (``"k" in
    task``) or inside a ``try`` whose handler catches KeyError; and keys it writes itself or
    gives a default (`_keys_given_defaults`, a module's dict of them among ``names``)."""
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and \
                isinstance(node.left.value, str) and \
                any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and \
                any(isinstance(item, ast.Name) and item.id == "task"
                    for item in node.comparators):
            guarded.add(node.left.value)
        elif isinstance(node, ast.Try) and any(
                handler.type is None or {getattr(name, "id", None) for name in (
                    handler.type.elts if isinstance(handler.type, ast.Tuple)
                    else [handler.type])} & _MISSING_KEY for handler in node.handlers):
            guarded.update(key for statement in node.body for inner in ast.walk(statement)
                           if (key := _task_key(inner)) is not None)
        elif isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load):
            key = _task_key(node)  # task["k"] = ..., task["k"] += 1, del task["k"]
            if key is not None:
                guarded.add(key)
        guarded.update(_keys_given_defaults(node, names or {}))
    return guarded


def _keys_given_defaults(node: ast.AST, names: Mapping[str, Any]) -> set[str]:
    """Keys a statement gives the task itself (a default where the data lacks one):
    ``task.setdefault("k", ...)``, ``task.update({"k": ...})`` or ``update(k=...)``,
    ``task = {**task, "k": ...}``, ``task = dict(task, k=...)``, ``task = {"k": ...} | task``
    and ``task |= {"k": ...}``; each dict literal may be a module's dict by its name
    (``DEFAULTS | task``, ``ChainMap(task, DEFAULTS)``; sweep 46 A-W8), found in ``names``."""
    def given(value: ast.AST | None) -> set[str]:
        if isinstance(value, (ast.Name, ast.Attribute)) and not _is_task(value):
            held = _named_value(value, names)  # (DEFAULTS, or Settings.DEFAULTS)
            return {key for key in held if isinstance(key, str)} \
                if isinstance(held, Mapping) else set()
        if isinstance(value, ast.Dict):
            return {key.value for key in value.keys
                    if isinstance(key, ast.Constant) and isinstance(key.value, str)} | {
                name for unpacked, item in zip(value.keys, value.values) if unpacked is None
                for name in given(item)}  # ({**DEFAULTS, **task})
        if isinstance(value, ast.Call):
            return {keyword.arg for keyword in value.keywords if keyword.arg} | {
                key for argument in value.args for key in given(argument)}
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.BitOr):
            return given(value.left) | given(value.right)  # ({"k": 0} | task)
        return set()

    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.BitOr) and \
            isinstance(node.target, ast.Name) and node.target.id == "task":
        return given(node.value)  # (task |= {"k": 0})

    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            isinstance(node.func.value, ast.Name) and node.func.value.id == "task":
        if node.func.attr == "setdefault" and node.args and \
                isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            return {node.args[0].value}
        if node.func.attr == "update":
            return given(node)
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(isinstance(target, ast.Name) and target.id == "task" for target in targets):
            return given(node.value)  # (a new task of the data's and its own defaults)
    return set()


_MISSING = object()


def _is_task(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "task"


def _named_value(node: ast.AST, names: Mapping[str, Any]) -> Any:
    """The value a module-level name or its attribute (``Settings.DEFAULTS``) holds, read
    without running any code (no property, no ``__getattr__``); `_MISSING` when there is
    none such."""
    if isinstance(node, ast.Name):
        return names.get(node.id, _MISSING)
    if isinstance(node, ast.Attribute):
        owner = _named_value(node.value, names)
        if owner is not _MISSING:
            try:
                return inspect.getattr_static(owner, node.attr)
            except AttributeError:
                pass
    return _MISSING


def _known(value: ast.AST, names: Mapping[str, Any]) -> bool:
    """Whether every key of the task remade as ``value`` is known by reading it: the task,
    dict literals, module-level names and merges of them (``dict``, ``ChainMap``, ``|``);
    not a call of the user's own function (``normalize(task)``), whose keys only running
    it would tell."""
    if isinstance(value, ast.Constant) or _is_task(value):
        return True
    if isinstance(value, (ast.Name, ast.Attribute)):
        return _named_value(value, names) is not _MISSING
    if isinstance(value, ast.Starred):
        return _known(value.value, names)
    if isinstance(value, ast.Dict):
        return all(_known(item, names) for key, item in zip(value.keys, value.values)
                   if key is None)
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.BitOr):
        return _known(value.left, names) and _known(value.right, names)
    if isinstance(value, ast.Call):
        function = value.func.id if isinstance(value.func, ast.Name) else \
            value.func.attr if isinstance(value.func, ast.Attribute) else None
        return function in ("dict", "ChainMap") and all(
            _known(argument, names) for argument in value.args) and all(
            _known(keyword.value, names) for keyword in value.keywords if keyword.arg is None)
    return False


def _remade_unknowably(tree: ast.AST, names: Mapping[str, Any]) -> int | None:
    """The first line where the function remakes its task from something whose keys only
    running it would tell (``task = normalize(task)``, ``task = defaults() | task``), or
    None: keys read after it may be the function's own (sweep 47 A-W5)."""
    lines = [node.lineno for node in ast.walk(tree)
             if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
             and any(_is_task(target) for target in (
                 node.targets if isinstance(node, ast.Assign) else [node.target]))
             and not _known(node.value, names)]
    return min(lines, default=None)


def task_keys(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The keys a function needs as ``task["key"]`` reads, in order of first use: not
    those it tests for or reads where a missing key is handled, nor those it writes, nor
    those read after it remakes the task by its own code (the preflight's rollout checks
    those by running it)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return ()
    keys: dict[str, None] = {}
    inner = inspect.unwrap(fn)  # (its module's names: a DEFAULTS dict the defaults come from)
    names = getattr(inner, "__globals__", {})
    guarded = _guarded(tree, names)
    remade = _remade_unknowably(tree, names)
    for node in ast.walk(tree):
        key = _task_key(node)
        if key is not None and key not in guarded and (
                remade is None or getattr(node, "lineno", 0) <= remade):
            keys[key] = None
    return tuple(keys)


def _same_but_spacing(key: str, present: list[str]) -> str:
    """`` (did you mean 'question '?)`` for a key the rows have in other case or with
    other spaces around it (which a message shows as the same word), else ``""``."""
    same = [name for name in present if name.strip().lower() == key.strip().lower()]
    return f" (did you mean {same[0]!r}?)" if same else ""


def _readers(graph: ExperimentGraph) -> list[tuple[FunctionSpec, tuple[str, ...]]]:
    specs = [graph.workflow] + ([graph.judge] if graph.judge else [])
    return [(spec, task_keys(load_function(spec))) for spec in specs]


#: The name of a shard the datasets library writes (``train-00000-of-00002.jsonl``).
_SHARD = re.compile(r"-\d{5}-of-\d{5}\.")


def row_count_problem(section: str, dataset: Any, rows: int, batch: int) -> str | None:
    """Why ``rows`` tasks of ``dataset`` cannot fill a step of ``batch`` tasks, or None."""
    where = f"{dataset.path} (split {dataset.split!r})"
    if not rows:
        return f"{section}: {where} has no rows; point it at a dataset with tasks"
    if rows < batch:
        return (f"{section}: {where} has {rows} rows, fewer than algorithm.batch_size = "
                f"{batch}, so not one training step can be filled; lower batch_size or add "
                f"tasks")
    return None


def check_dataset(graph: ExperimentGraph, section: str, dataset: Any = None, *,
                  training: bool = True, limit: int | None = None) -> tuple[str, int | None]:
    """Read one dataset in one streamed pass (up to `MAX_ROWS`) and check what the workflow
    and judge read from its rows; return a report line and the row count (None when the
    pass stopped at `MAX_ROWS`). ``dataset``: the section's, read otherwise (eval's
    ``--split``); ``training``: a training set must fill a step of ``batch_size`` tasks;
    ``limit``: the rows read at most (eval's ``-n``), else `MAX_ROWS`."""
    dataset = dataset if dataset is not None else getattr(graph, section)
    where = f"{dataset.path} (split {dataset.split!r})"
    batch = graph.algorithm.batch_size if training and section == "train_dataset" else 1
    readers = _readers(graph)
    try:
        quality = scan(dataset, [key for _, keys in readers for key in keys], label=section,
                       limit=min(limit, MAX_ROWS) if limit is not None else MAX_ROWS)
    except DatasetError:
        if not json_files(local_path(dataset), dataset.split):  # the library read it (a
            refuse_rows_read_otherwise(dataset, None, section)  # layout of its own): which
        raise  # file differs from which, where it can tell
    problem = row_count_problem(section, dataset, quality.rows, batch)
    if problem is not None:  # too few rows, or rows the library would read otherwise (a
        refuse_rows_read_otherwise(dataset, None, section)  # train.JSONL it does not read)
        raise DatasetError(problem)
    present = sorted(quality.keys)
    problems = []
    mixed = quality.mixed()
    for spec, keys in readers:
        reader = f"@{spec.kind} {spec.qualname} ({spec.where})"
        for key in keys:
            count, first = quality.missing.get(key, (0, ""))
            if count == quality.rows:
                problems.append(f"{section}: key {key!r} read by {reader} is missing from "
                                f"{where}; "
                                + (f"its rows have: {', '.join(map(repr, present))}"
                                   if present else "its rows have no keys at all ({})")
                                + _same_but_spacing(key, present))
            elif count:
                problems.append(f"{section}: key {key!r} read by {reader} is missing from "
                                f"{count} of {quality.rows} rows of {where}, the first at "
                                f"{first}; add it to every row, or read it with task.get()")
            if key in mixed:
                kinds = ", ".join(f"{kind} (first at {at})" for kind, at in mixed[key].items())
                problems.append(f"{section}: key {key!r} read by {reader} has values of "
                                f"different types across rows of {where}: {kinds}; make them "
                                f"one type")
    if problems:
        raise DatasetError("\n".join(dict.fromkeys(problems)))
    # every backend reads the rows through the datasets library: as the files hold them?
    refuse_rows_read_otherwise(dataset, None, section)
    files = refuse_a_split_read_twice(dataset, None, section)
    read = f"the first {quality.rows} rows" if quality.truncated else f"{quality.rows} rows"
    source = ""
    if len(files) > 1 and not all(_SHARD.search(os.path.basename(file)) for file in files):
        # (an older copy beside the data, train-old.jsonl, read with it: said, not refused)
        source = (f" from {len(files)} files the datasets library reads as the split ("
                  f"{', '.join(os.path.basename(file) for file in files[:4])}"
                  f"{', ...' if len(files) > 4 else ''})")
    notes = "".join(f"; column {key!r} mixes {', '.join(seen)}"
                    for key, seen in mixed.items())
    # A null the workflow reads as task["key"] may be meant (an optional hint), so it is
    # said, not refused: a model asked with null content answers nonsense or 400.
    notes += "".join(f"; key {key!r} is null in {count} of {quality.rows} rows (the first "
                     f"at {first}), which the workflow or judge gets as None"
                     for key, (count, first) in quality.nulls.items())
    line = f"{section}: {where}: {read} readable{source}, keys {', '.join(present)}{notes}"
    return line, None if quality.truncated else quality.rows


#: What the scripted model answers in the preflight rollout.
SCRIPTED_REPLY = "0"


#: Longest the preflight waits for its one rollout (less when rollout_timeout is lower).
PREFLIGHT_SECONDS = 120


def conversation_sections(graph: ExperimentGraph) -> dict[str, int]:
    """The dataset sections that hold conversations (SFT's), and each one's batch size:
    ``train_dataset`` when the algorithm is SFT, ``warmup_dataset`` for a warm-up."""
    from ..dsl.algorithms import CONVERSATION_ALGORITHMS

    sections = {}
    if graph.algorithm.algorithm_type in CONVERSATION_ALGORITHMS:
        sections["train_dataset"] = graph.algorithm.batch_size
    if graph.warmup is not None and graph.warmup_dataset is not None:
        sections["warmup_dataset"] = graph.warmup.batch_size
    return sections


def rollout_section(graph: ExperimentGraph) -> str | None:
    """The dataset whose first task the preflight rollout runs on: the training tasks, or
    for SFT (which trains on conversations) the eval tasks; None when there are none."""
    if "train_dataset" not in conversation_sections(graph):
        return "train_dataset"
    return "eval_dataset" if graph.eval_dataset is not None else None


def check_rollout(graph: ExperimentGraph, section: str = "train_dataset"
                  ) -> tuple[str, tuple[ModelCall, ...], tuple[Turn, ...]]:
    """Run the workflow and judge once, on the first task of ``section``, with a scripted
    model; return a report line, the trained model's calls and the turns it marked.

    The rollout runs in a thread of its own and is given ``min(rollout_timeout, 120)``
    seconds: a scripted model answers at once, so a rollout still running then is
    waiting on something else, and even one that blocks (``time.sleep``) cannot hang.
    """
    import asyncio
    import threading

    from ..dsl.decorators import is_group_judge
    from ..models.scripted import ScriptedModel
    from ..rollout.group import roll_out_group
    from ..rollout.loop import ExitInCallback, run_rollouts
    from ..rollout.output import abandoned
    from ..rollout.run import (
        CANCELLED_INSIDE,
        LOOP_STOPPED,
        Agent,
        label_of,
        run_rollout,
        stopped_the_loop,
    )

    def scripted(name: str) -> ScriptedModel:
        return ScriptedModel(lambda messages: SCRIPTED_REPLY, name=name)

    task = first_rows(getattr(graph, section), 1, label=section)[0]
    first = "training" if section == "train_dataset" else "eval"
    auxiliary = {name: scripted(name) for name in graph.auxiliary_models}
    agent = Agent.from_graph(graph)
    # A group judge scores a group: two rollouts (as many as training's group holds, if
    # fewer), so that it must return a reward each.
    size = min(2, graph.algorithm.group_size) if is_group_judge(agent.judge) else 1
    policies = [scripted("policy") for _ in range(size)]
    policy = policies[0]
    outcome: dict[str, Any] = {}

    async def rolled_out() -> Any:
        outcomes = await roll_out_group(
            lambda i: run_rollout(agent, task, policies[i], auxiliary, ends_model=True),
            len(policies), agent,
            task, auxiliary)
        failed = next((o for o in outcomes if isinstance(o, RolloutError)), None)
        if failed is not None:
            raise failed
        return outcomes

    def roll() -> None:
        try:
            outcome["result"] = run_rollouts(rolled_out())
        except BaseException as error:  # handed to the caller's thread below
            outcome["error"] = error

    limit = min(graph.rollout_timeout, PREFLIGHT_SECONDS)
    worker = threading.Thread(target=roll, name="tunedsl-preflight-rollout", daemon=True)
    worker.start()
    worker.join(limit)
    where = f"on the first {first} task, with a scripted model that always replies " \
            f"{SCRIPTED_REPLY!r}"
    if worker.is_alive():
        abandoned(thread=worker.ident)
        raise ConfigError(f"rollout: {where}: the workflow and judge did not finish within "
                          f"{limit:g} s; the model answers at once, so the workflow is waiting "
                          f"on something else (a network call, a lock, a sleep)")
    error = outcome.get("error")
    if isinstance(error, (RolloutError, ExitInCallback)):
        raise ConfigError(f"rollout: {where}: {error}", user_traceback=error.user_traceback)
    if isinstance(error, asyncio.CancelledError):
        raise ConfigError(f"rollout: {where}: {CANCELLED_INSIDE}")
    if error is not None and stopped_the_loop(error):
        raise ConfigError(f"rollout: {where}: {LOOP_STOPPED}")
    if isinstance(error, KeyboardInterrupt):  # no Ctrl-C reaches this thread: the code raised it
        from ..errors import user_traceback

        raise ConfigError(f"rollout: {where}: the workflow or judge raised KeyboardInterrupt, "
                          f"which stops a whole run; raise an Exception to fail one rollout",
                          user_traceback=user_traceback(error))
    if error is not None:
        raise error
    results = outcome["result"]
    result = results[0]
    replaced = "" if result.replaced_reward is None else (
        f"; {label_of(agent.workflow)} also returned reward {result.replaced_reward!r}, which "
        f"the judge's replaces (the judge decides a rollout's reward)")
    if is_group_judge(agent.judge):
        rewards = ", ".join(f"{r.reward:g}" for r in results)
        ran = ("twice on the first {first} task with a scripted model and the group judge "
               "scored the two together" if len(results) > 1 else
               "on the first {first} task with a scripted model and the group judge scored "
               "it as a group of one (group_size = 1)").format(first=first)
        return (f"rollout: the workflow ran {ran} (reward{'s' if len(results) > 1 else ''} "
                f"{rewards}){replaced}", tuple(policy.calls), result.turns)
    turns = "" if not result.turns else \
        f", {len(result.turns)} turn{'s' if len(result.turns) != 1 else ''} ended"
    return (f"rollout: workflow and judge ran on the first {first} task with a scripted "
            f"model (reward {result.reward:g}{turns}){replaced}", tuple(policy.calls),
            result.turns)


def check_model_called(graph: ExperimentGraph, calls: tuple[ModelCall, ...]) -> list[str]:
    """The workflow called the trained model on the first task: a rollout without a model
    call has nothing to train on (every backend refuses to start training on it)."""
    if calls:
        return []
    return [f"@workflow {graph.workflow.qualname} ({graph.workflow.where}) never called the "
            f"model on the first task, so there is nothing to train; call await model.chat(...)"]


def _auth_headers(label: str, model: Any) -> dict[str, str]:
    """The headers that carry an endpoint model's key, read from its environment variable."""
    from ..models.endpoint import read_api_key

    if model.api_key_env is None:
        return {}
    return {"Authorization": f"Bearer {read_api_key(model.api_key_env, f'{label}.api_key_env')}"}


def check_endpoint(name: str, model: Any, chats: bool = True) -> str:
    """An auxiliary model's endpoint answers ``GET /models`` with its key, and (``chats``) a
    chat request as the rollouts will send it (the model's own sampling settings); a report
    line. Neither it nor a refusal shows the key sent, wherever the endpoint put it (an
    error's text, a redirect's address, a model's id)."""
    from ..models.endpoint import without_the_key

    label = f"auxiliary_models.{name}"
    headers = _auth_headers(label, model)
    key = headers.get("Authorization", "").removeprefix("Bearer ") or None
    try:
        return without_the_key(_checked_endpoint(label, model, headers, chats), key)
    except ConfigError as refused:
        raise ConfigError(without_the_key(str(refused), key)) from None


def _checked_endpoint(label: str, model: Any, headers: dict[str, str], chats: bool) -> str:
    """`check_endpoint`'s asking, its line or refusal as the endpoint's words make it."""
    import httpx

    url = model.base_url.rstrip("/") + "/models"
    try:
        answer = _got(url, headers)
    except httpx.HTTPError as exc:
        raise ConfigError(f"{label}.base_url: {model.base_url} does not answer "
                          f"({type(exc).__name__}: {exc}); check the URL and that it is "
                          f"running") from None
    _refuse_a_refusal(label, model, answer, "GET /models")
    if answer.status_code == 404:
        _refuse_a_base_url_without_the_api(label, model, headers)
    try:
        served = [str(entry["id"]) for entry in answer.json()["data"]]
    except (ValueError, KeyError, TypeError):
        served = None
    if answer.status_code == 429:  # (no list read: "it lists no models" was wrong)
        _say_rate_limited(label, model, answer)
        return f"{label}: {model.base_url} answers, but limits the requests now (HTTP 429)"
    if chats:
        _refuse_what_no_chat_answers(label, model, headers, listed=answer.status_code != 404)
    if served is None:
        return f"{label}: {model.base_url} answers (it lists no models)"
    if model.model_path not in served:
        return (f"{label}: {model.base_url} answers, but does not list {model.model_path!r} "
                f"(it lists: {', '.join(served[:10])})")
    return f"{label}: {model.base_url} answers and serves {model.model_path}"


def _refuse_a_refusal(label: str, model: Any, answer: Any, asked: str) -> None:
    """Refuse what the endpoint's ``answer`` to ``asked`` says no rollout will get past: a
    key asked for or refused, a server error, a redirect (a login page), an HTML page."""
    status = answer.status_code
    if status in (401, 403) and model.api_key_env is None:
        raise ConfigError(f"{label}: {model.base_url} asks for an API key (HTTP "
                          f"{status}) and none is given; name the environment "
                          f"variable holding it: {label}.api_key_env = \"VAR\"")
    if status in (401, 403):
        raise ConfigError(f"{label}: {model.base_url} refuses the key in "
                          f"{model.api_key_env} (HTTP {status})")
    if status >= 500:  # it is up, but every rollout's call would fail alike
        raise ConfigError(f"{label}.base_url: {model.base_url} answers {asked} with HTTP "
                          f"{status}, a server error; check that the server behind it is "
                          f"healthy")
    if answer.is_redirect:  # (a POST the client follows there turns into a GET, and fails)
        where = answer.headers.get("location", "elsewhere")
        raise ConfigError(f"{label}.base_url: {model.base_url} answers {asked} with a "
                          f"redirect (HTTP {status}) to {where}, a login page or another "
                          f"address; give the endpoint's own URL")
    if answer.is_success and "html" in answer.headers.get("content-type", "").lower():
        # a web page where the API should be: a base URL without its /v1, say
        raise ConfigError(f"{label}.base_url: {model.base_url} answers {asked} with an "
                          f"HTML page, not an OpenAI-compatible API; check the URL (such "
                          f"endpoints usually end in /v1)")


def _refuse_what_no_chat_answers(label: str, model: Any, headers: dict[str, str],
                                 listed: bool) -> None:
    """Send one chat request as a rollout's (the model's sampling settings, one short
    message) and refuse what it answers that every rollout would get: a listed model that
    does not chat (an embedding server's: HTTP 400), a path no API answers (404). A rate
    limit or no answer at all is left to the rollouts; ``listed``: whether ``GET /models``
    was found."""
    import httpx

    from ..models.endpoint import request_sampling

    request = {"model": model.model_path, "messages": [{"role": "user", "content": "Say OK."}],
               **{key: value for key, value in request_sampling(model).items()
                  if value is not None}}
    import time

    for wait in (0.5, 1.0, 2.0, None):  # asked again as the rollouts' client asks again
        try:  # (redirects followed, as the openai client follows them)
            chat = httpx.post(model.base_url.rstrip("/") + "/chat/completions", json=request,
                              headers=headers, timeout=60, follow_redirects=True)
        except httpx.DecodingError as exc:  # (a body the client cannot decode either)
            raise ConfigError(f"{label}: {model.base_url} answers a chat request with a body "
                              f"that cannot be decoded ({shortened(str(exc))}), as it would "
                              f"every rollout; check the server or proxy behind it") from None
        except httpx.HTTPError:
            return
        if wait is None or not _asked_again(chat):
            break
        asked = _retry_after(chat.headers)  # (the server's own wait, as the client takes it)
        if asked is not None and asked > _LONGEST_WAIT:  # (left to the rollouts, as a 429)
            _say_rate_limited(label, model, chat)
            return
        wait = asked if asked is not None and asked > 0 else wait
        print(f"note: {label}: {model.base_url} answered HTTP {chat.status_code} to a chat "
              f"request; asking again in {wait:g}s, as the rollouts' client would",
              file=sys.stderr, flush=True)
        time.sleep(wait)
    _refuse_a_refusal(label, model, chat, "POST /chat/completions")
    if chat.is_success:
        _refuse_what_no_rollout_reads(label, model, chat, request)
    if chat.status_code == 429 or chat.is_success:
        return
    if chat.status_code == 404 and not listed:
        raise ConfigError(f"{label}.base_url: {model.base_url} answers neither GET /models "
                          f"nor POST /chat/completions (HTTP 404): no OpenAI-compatible API "
                          f"is there; check the URL (such endpoints usually end in /v1)")
    if chat.status_code >= 400:
        raise ConfigError(f"{label}: {model.base_url} refuses a chat request for "
                          f"{model.model_path!r} (HTTP {chat.status_code}: "
                          f"{_said_by(chat)}), as it would every rollout's; check the model "
                          f"and the URL (a chat model's endpoint, usually ending in /v1)")


def _say_rate_limited(label: str, model: Any, answer: Any) -> None:
    """A note for an endpoint that limits the requests now (HTTP 429, a quota spent): check
    cannot tell more, and the rollouts' calls would wait, or fail, until it lifts."""
    asked = _retry_after(answer.headers)
    wait = f", asking to wait {asked:g}s" if asked is not None else ""
    print(f"note: {label}: {model.base_url} answered HTTP 429 (too many requests, or a "
          f"quota spent{wait}); the rollouts' calls would wait, or fail, until it lifts",
          file=sys.stderr, flush=True)


def _got(url: str, headers: dict[str, str]) -> Any:
    """``GET url``, following a redirect that keeps the request's method (307, 308), as the
    rollouts' openai client follows it for their POSTs; another (a login page's 302) is
    answered as it is, for `_refuse_a_refusal` to name (the rollouts' POST would turn into
    a GET there, and fail)."""
    import httpx

    answer = httpx.get(url, headers=headers, timeout=10)
    if answer.status_code in (307, 308):
        answer = httpx.get(url, headers=headers, timeout=10, follow_redirects=True)
    return answer


#: The longest wait a server asks for (Retry-After) that check waits, in seconds.
_LONGEST_WAIT = 60.0


def _retry_after(headers: Any) -> float | None:
    """The wait, in seconds, a reply's ``retry-after-ms`` or ``retry-after`` (seconds, or an
    HTTP date) asks for, as the openai client reads them; None without."""
    import email.utils
    import math
    import time

    for header, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            delay = float(value) / divisor
        except ValueError:
            continue
        return delay if math.isfinite(delay) else None
    try:
        when = email.utils.parsedate_tz(headers.get("retry-after"))
        return None if when is None else float(email.utils.mktime_tz(when) - time.time())
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def _asked_again(answer: Any) -> bool:
    """Whether the openai client, which the rollouts call through, asks again after
    ``answer``: as the server's ``x-should-retry`` says, else after a 408, 409, 429 or
    server error (its ``_should_retry``)."""
    said = answer.headers.get("x-should-retry", "").lower()
    if said in ("true", "false"):
        return said == "true"
    return answer.status_code in (408, 409, 429) or answer.status_code >= 500


def _refuse_what_no_rollout_reads(label: str, model: Any, chat: Any,
                                  request: dict[str, Any]) -> None:
    """Refuse a 2xx reply to check's chat request that the rollouts' client would not read
    as a chat completion: read as the openai package reads it (JSON into its
    ``ChatCompletion``, other text as text), then by the same functions as every rollout's
    reply (`completion_fault`, `model_calls`). Check passed a 200 of no completion (no
    choices, an error object, plain text) and every rollout failed."""
    from openai.types.chat import ChatCompletion

    from ..models.endpoint import completion_fault
    from ..models.recording import model_calls

    body: Any = chat.text
    fault = None
    try:  # (JSON whatever its content type says, as the openai client reads a completion)
        body = chat.json()
    except (ValueError, RecursionError):  # (UnicodeDecodeError too)
        if "json" in chat.headers.get("content-type", "").lower():
            fault = "invalid JSON"
    if fault is None:
        try:
            completion = ChatCompletion.construct(**body) if isinstance(body, dict) else body
        except Exception as exc:  # noqa: BLE001 - a key the openai package takes as its own
            completion = None
            fault = f"a reply the openai package cannot read ({type(exc).__name__}: {exc})"
    if fault is None:
        fault = completion_fault(completion)
        if fault is None:
            try:
                model_calls(request, completion)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{label}: {model.base_url} answers a chat request with a "
                                  f"reply no rollout can read ({shortened(str(exc))}); check "
                                  f"the server behind it") from None
    if fault is not None:
        raise ConfigError(f"{label}: {model.base_url} answers a chat request with {fault}, "
                          f"not an OpenAI chat completion, as it would every rollout; check "
                          f"the URL (an OpenAI-compatible server's ends in /v1)")


def _said_by(answer: Any) -> str:
    """An endpoint's error message (`error_message` of its JSON body), else its text, on one
    line and shortened."""
    from ..models.endpoint import error_message, without_the_key

    try:
        text = str(error_message(answer.json()))
    except ValueError:
        text = answer.text
    try:  # the key the request sent, which a server or proxy may quote, whatever its shape
        sent = answer.request.headers.get("authorization", "").removeprefix("Bearer ")
    except RuntimeError:  # (a response made without a request)
        sent = None
    text = " ".join(without_the_key(text, sent).split()).removeprefix(
        f"{answer.status_code}: ")
    return text[:200] or answer.reason_phrase


def _refuse_a_base_url_without_the_api(label: str, model: Any,
                                       headers: dict[str, str]) -> None:
    """An endpoint answering ``GET /models`` with 404: the API one folder down (a base URL
    without its /v1) is named."""
    import httpx

    base = model.base_url.rstrip("/")
    try:
        below = _got(f"{base}/v1/models", headers)
    except httpx.HTTPError:
        return
    if below.is_success and "json" in below.headers.get("content-type", "").lower():
        raise ConfigError(f"{label}.base_url: {model.base_url} answers GET /models with "
                          f"HTTP 404, and {base}/v1 serves the API; give {base}/v1")


def check_teacher_endpoint(name: str, model: Any) -> str:
    """A teacher at an endpoint answers what distillation asks of it: the log-probs of a
    token-id prompt (`tunedsl.models.scoring`); a report line."""
    import httpx

    from ..models.scoring import PROTOCOL, is_log_prob

    headers = _auth_headers(f"auxiliary_models.{name}", model)
    url = model.base_url.rstrip("/") + "/completions"
    request = {"model": model.model_path, "prompt": [[1, 2]], "echo": True, "logprobs": 0,
               "max_tokens": 1}
    try:
        answer = httpx.post(url, json=request, headers=headers, timeout=30,
                            follow_redirects=True)
        answer.raise_for_status()
        scores = answer.json()["choices"][0]["logprobs"]["token_logprobs"]
        if not isinstance(scores, list) or len(scores) < 2 or scores[1] is None:
            raise ValueError("no log-prob for the prompt's tokens")
        odd = next((score for score in scores[1:] if not is_log_prob(score)), None)
        if odd is not None:  # as a run refuses it (`scoring.endpoint_logprobs`)
            raise ValueError(f"a log-prob of {odd!r}, where a log-prob is a finite number "
                             f"at most 0")
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        reason = f"HTTP {exc.response.status_code}" if isinstance(
            exc, httpx.HTTPStatusError) else f"{type(exc).__name__}: {exc}"
        raise ConfigError(f"auxiliary_models.{name}: {model.base_url} does not score token "
                          f"ids as a teacher must ({reason}); it must answer "
                          f"{PROTOCOL}") from None
    return f"auxiliary_models.{name}: {model.base_url} scores token ids (the teacher)"


def check_datasets(graph: ExperimentGraph,
                   on_line: Callable[[str], None] | None = None) -> dict[str, int | None]:
    """Every dataset of the experiment read once and checked as `check` checks it (what the
    workflow and judge read of its rows, conversations' shape), each report line to
    ``on_line``; the row counts by section. Every run checks its data so before it starts
    (the local backend, eval and prompt tuning too): what ``check`` refuses, no command
    runs on.

    Raises:
        DatasetError: every dataset's problems, one line each.
    """
    rows: dict[str, int | None] = {}
    problems: list[str] = []
    conversations = conversation_sections(graph)
    for dataset in DATASET_SECTIONS:
        if getattr(graph, dataset) is None:
            continue
        try:
            if dataset in conversations:
                line, rows[dataset] = check_conversations(getattr(graph, dataset), dataset,
                                                          conversations[dataset])
            else:
                line, rows[dataset] = check_dataset(graph, dataset)
            if on_line is not None:
                on_line(line)
        except DatasetError as exc:
            problems.append(str(exc))
    if problems:
        raise DatasetError("\n".join(problems))
    return rows


def preflight(graph: ExperimentGraph, backend_checks: Iterable[Callable[..., list[str]]] = (),
              report_checks: Iterable[ReportCheck] = (),
              on_line: Callable[[str], None] | None = None) -> PreflightReport:
    """Run the backend's checks over the graph (every problem at once), check the datasets
    and task keys, run one scripted rollout, then the backend's checks of what was found
    (the rows, the calls the rollout made). Raises on the first kind of failure.
    ``on_line`` is handed each report line as its check finishes (``check`` shows them so:
    a dataset's pass or a rollout can take a while)."""
    refuse_problems(graph, backend_checks)
    lines = _Lines(on_line)
    lines.append(f"experiment: {graph.source or graph.name} builds")
    rows = check_datasets(graph, lines.append)
    teacher = teacher_name(graph.algorithm, graph.auxiliary_models)
    for name, model in graph.auxiliary_models.items():
        if model.base_url is not None:  # (a teacher scores, and may have no chat template)
            lines.append(check_endpoint(name, model, chats=name != teacher))
    if teacher is not None and graph.auxiliary_models[teacher].base_url is not None:
        lines.append(check_teacher_endpoint(teacher, graph.auxiliary_models[teacher]))
    section = rollout_section(graph)
    calls: tuple[ModelCall, ...]
    turns: tuple[Turn, ...]
    line: str
    if section is None:
        line, calls, turns = Note(f"rollout: {graph.algorithm.algorithm_type} trains on "
                                  f"conversations and there is no eval_dataset, so the "
                                  f"workflow was not tried"), (), ()
    else:
        line, calls, turns = check_rollout(graph, section)
    lines.append(line)
    for text in futile_settings(graph, phase_steps(graph, rows), calls, turns):
        lines.append(Note(text))
    report = PreflightReport(lines=list(lines), rows=rows, calls=calls, turns=turns)
    refuse_problems(graph, [_with_report(check, report) for check in report_checks])
    return report


class _Lines(list[str]):
    """Report lines, each handed to ``on_line`` (if any) as it is added."""

    def __init__(self, on_line: Callable[[str], None] | None) -> None:
        super().__init__()
        self.on_line = on_line

    def append(self, line: str) -> None:
        super().append(line)
        if self.on_line is not None:
            self.on_line(line)


def _with_report(check: ReportCheck, report: PreflightReport) -> Callable[[ExperimentGraph],
                                                                          list[str]]:
    """A backend's check of what the preflight found, as a check of the graph alone."""
    return lambda graph: check(graph, report)
