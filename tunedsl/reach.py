"""How the entry points reach the models a command's rollouts talk to.

``tunedsl eval``, ``tunedsl tune-prompt`` and their Python functions name a policy model
(an endpoint's model, or a local model folder sampled on the CPU) and the auxiliary models'
endpoints, each checked once into a record: a `tools.select.Candidate` or a `LocalFolder`
(the CLI parses its flags into them, the Python API its ``model`` argument with
`reach_of`), and an `AuxiliaryPlan`; `api.reached_models` builds from them the `Reached`
the tools take whole (there, with the entry points: a local folder loads the local
backend's model, which nothing below the entry points imports).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .config.paths import home
from .dsl.records import Model
from .errors import ConfigError
from .wording import spelled

if TYPE_CHECKING:
    from .evaluation.prompt_tuning import Reflection
    from .evaluation.select import Candidate


@attrs.frozen
class LocalFolder:
    """A local model folder to roll out on the CPU (a checkpoint a run saved), and the
    model name its results keep (``--model`` given beside ``--checkpoint``)."""

    path: str
    name: str | None = None
    #: Sampling settings that replace the experiment's model's (those a `Model` sets).
    sampling: Mapping[str, Any] = attrs.field(factory=dict)


def reach_of(model: Any, argument: str = "model") -> Candidate | LocalFolder:
    """The Python API's ``model``: ``"NAME@URL"`` or a `Model` with ``base_url`` (an
    endpoint's model, as a `Candidate`), or a local model folder (a `os.PathLike`, or a
    `Model` without ``base_url``)."""
    from .evaluation.select import candidates_from

    if isinstance(model, Model) and model.lora is not None:
        raise ConfigError(f"{argument}: Model(..., lora=...) trains adapters, and an evaluated "
                          f"model trains nothing; evaluate a run's global_step_N folder (its "
                          f"adapters merged), without lora")
    if isinstance(model, Model) and model.base_url is None:
        from .evaluation.select import own_sampling

        return LocalFolder(home(str(model.model_path)), sampling=own_sampling(model))
    if isinstance(model, os.PathLike):
        return LocalFolder(home(os.fspath(model)))
    if not isinstance(model, (str, Model)):
        raise ConfigError(f"{argument}={model!r}: give NAME@URL, a Model(..., base_url=...), "
                          f"or a local model folder as a pathlib.Path")
    if isinstance(model, str) and "@" not in model:
        raise ConfigError(f"{argument} {model!r}: give NAME@URL, Model({model!r}, "
                          f"base_url=...), or a local model folder as a pathlib.Path")
    (candidate,) = candidates_from([model], None, None, shared="base_url", option=argument)
    return candidate


def reflection_of(spec: str, reach: Candidate | LocalFolder,
                  api_key_env: str | None = None) -> Reflection:
    """Prompt tuning's reflection model, ``NAME`` (served by the policy's endpoint) or
    ``NAME@URL``, its key read from ``api_key_env`` (default: the policy's variable when
    the two share an endpoint)."""
    from .config.environment import env_resolved
    from .evaluation.prompt_tuning import Reflection, parse_reflection_model
    from .models.endpoint import endpoint_client

    shared = reach.base_url if not isinstance(reach, LocalFolder) else None
    name, url = parse_reflection_model(env_resolved(spec, spelled("reflection_model")), shared)
    label = spelled("reflection_key")
    if api_key_env is None and shared is not None and url == shared:
        api_key_env = reach.api_key_env  # type: ignore[union-attr]
        label = spelled("api_key_env")  # (where that variable was given)
    client = endpoint_client(url, api_key_env=api_key_env, label=label)
    return Reflection(client, name, url, spec, key=(api_key_env, label))
