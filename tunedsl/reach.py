"""How the entry points reach the models a command's rollouts talk to.

``tunedsl eval``, ``tunedsl tune-prompt`` and their Python functions name a policy model
(an endpoint's model, or a local model folder sampled on the CPU) and the auxiliary models'
endpoints; each is checked here, once, into a record (`tools.select.Candidate` or
`LocalFolder`, and an `AuxiliaryPlan`), and `reached_models` builds the `Reached` the tools
take whole. This module lives with the entry points: a local folder loads the local
backend's model, which the tools never import.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .dsl.records import Model, is_http_url
from .errors import ConfigError
from .runtime.models.reached import AuxiliaryPlan, Reached

if TYPE_CHECKING:
    from .config.graph import ExperimentGraph
    from .tools.prompt_tuning import Reflection
    from .tools.select import Candidate


@attrs.frozen
class LocalFolder:
    """A local model folder to roll out on the CPU (a checkpoint a run saved), and the
    model name its results keep (``--model`` given beside ``--checkpoint``)."""

    path: str
    name: str | None = None


def reach_of(model: Any, argument: str = "model") -> Candidate | LocalFolder:
    """The Python API's ``model``: ``"NAME@URL"`` or a `Model` with ``base_url`` (an
    endpoint's model, as a `Candidate`), or a local model folder (a `os.PathLike`, or a
    `Model` without ``base_url``)."""
    from .tools.select import candidates_from

    if isinstance(model, os.PathLike) or (isinstance(model, Model) and model.base_url is None):
        return LocalFolder(str(model.model_path if isinstance(model, Model) else model))
    if isinstance(model, str) and "@" not in model:
        raise ConfigError(f"{argument} {model!r}: give NAME@URL, Model({model!r}, "
                          f"base_url=...), or a local model folder as a pathlib.Path")
    (candidate,) = candidates_from([model], None, None, shared="base_url", option=argument)
    return candidate


def reached_models(graph: ExperimentGraph, reach: Candidate | LocalFolder,
                   auxiliary: AuxiliaryPlan) -> Reached:
    """The models of one command, made now: the policy ``reach`` names and the auxiliary
    models ``auxiliary`` plans; its ``settings`` are what results and candidates files
    keep (model, base URL, checkpoint, ``aux``)."""
    from .tools.select import check_key_variable, endpoint_reached

    if not isinstance(reach, LocalFolder):
        check_key_variable(reach.api_key_env)
        return endpoint_reached(graph, reach, auxiliary)
    clients, factories = auxiliary.made()
    return Reached(model=local_models(graph, reach.path), auxiliary=factories,
                   clients=clients, settings={"model": reach.name, "base_url": None,
                                              "checkpoint": reach.path,
                                              "aux": list(auxiliary.kept)})


def local_models(graph: ExperimentGraph, folder: str) -> Callable[[], Any]:
    """A factory of chat models (one per rollout) over the model saved in ``folder``,
    sampled on the CPU with the experiment's model settings."""
    from .backends.local.chat import local_sampling
    from .backends.local.models import checkpoint_model

    return checkpoint_model(folder, local_sampling(graph.model),
                            enable_thinking=graph.model.enable_thinking,
                            tool_call_parser=graph.model.tool_call_parser,
                            max_model_len=graph.model.max_model_len,
                            reasoning_parser=graph.model.reasoning_parser)


def auxiliary_from_items(graph: ExperimentGraph, aux: Sequence[str],
                         api_key_env: str | None = None) -> AuxiliaryPlan:
    """The auxiliary models ``NAME=URL,MODEL`` items (``--aux``) point at, each checked
    now, and those the experiment serves from an endpoint (an item may still point one
    elsewhere)."""
    from .runtime.models.endpoint import auxiliary_endpoint, endpoint_models

    makers: dict[str, Callable[[], tuple[Any, Any]]] = {
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
        makers[name] = functools.partial(endpoint_models, graph.auxiliary_models[name],
                                         base_url=url, model_name=model, name=name,
                                         api_key_env=api_key_env)
    return AuxiliaryPlan(makers=makers, kept=aux_settings(aux))


def aux_settings(aux: Sequence[str]) -> list[str]:
    """``NAME=URL,MODEL`` items as results keep them: sorted, any secret in a URL masked."""
    from .runtime.models.endpoint import redact_url

    shown = []
    for item in aux:
        name, _, rest = item.partition("=")
        url, _, model = rest.rpartition(",")
        shown.append(f"{name}={redact_url(url)},{model}")
    return sorted(shown)


def reflection_of(spec: str, reach: Candidate | LocalFolder,
                  api_key_env: str | None = None) -> Reflection:
    """Prompt tuning's reflection model, ``NAME`` (served by the policy's endpoint) or
    ``NAME@URL``, its key read from ``api_key_env`` (default: the policy's variable when
    the two share an endpoint)."""
    from .runtime.models.endpoint import endpoint_client
    from .tools.prompt_tuning import Reflection, parse_reflection_model

    shared = reach.base_url if not isinstance(reach, LocalFolder) else None
    name, url = parse_reflection_model(spec, shared)
    if api_key_env is None and shared is not None and url == shared:
        api_key_env = reach.api_key_env  # type: ignore[union-attr]
    client = endpoint_client(url, api_key_env=api_key_env, label="--reflection-api-key-env")
    return Reflection(client, name, url, spec)
