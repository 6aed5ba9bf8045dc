"""The model a command's rollouts talk to: an OpenAI-compatible endpoint or a local checkpoint.

``tunedsl eval`` and ``tunedsl tune-prompt`` take the same ``--base-url/--model/--api-key-env``,
``--checkpoint`` and ``--aux`` options; both build their model factories here, so the two
commands accept, refuse and word them alike. An entry-point module: ``--checkpoint`` loads
the local backend's model, which the tools never import.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from .errors import ConfigError


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
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"--base-url {base_url}: not an http(s) URL; give the "
                          f"endpoint's, e.g. http://localhost:8000/v1")
    from .runtime.models.endpoint import endpoint_models

    return endpoint_models(graph.model, base_url=base_url, model_name=model,
                           api_key_env=api_key_env)


def auxiliary_plan(graph: Any, aux: Sequence[str],
                   api_key_env: str | None = None) -> dict[str, Callable[[], tuple[Any, Any]]]:
    """Each auxiliary model's endpoint, checked now, as a function making its ``(client,
    factory)`` when called (model selection makes fresh ones per candidate: a client does
    not outlive its event loop): those the experiment serves from an endpoint, and those
    given as ``NAME=URL,MODEL`` items (``--aux``)."""
    from .runtime.models.endpoint import auxiliary_endpoint, endpoint_models

    # Auxiliary models the experiment serves from an endpoint need no --aux (it may
    # still point one elsewhere).
    plan = {name: functools.partial(auxiliary_endpoint, spec, name)
            for name, spec in graph.auxiliary_models.items()
            if spec.base_url is not None
            and not any(item.startswith(f"{name}=") for item in aux)}
    for item in aux:
        name, sep, rest = item.partition("=")
        url, comma, model = rest.rpartition(",")
        if not sep or not comma or not name or not url or not model \
                or not url.startswith(("http://", "https://")):
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
