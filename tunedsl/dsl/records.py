"""The user-facing setting records: `Dataset`, `Model`, `Algorithm`, `LoRA`, `Tinker`.

Each field is a row of the settings table (`tunedsl.dsl.setting.setting`: default,
check, Trinity key and meaning in one place; the classes' ``Args`` sections are built
from the meanings). Each record is a frozen attrs class that also remembers which
fields its caller set explicitly. Settings layers merge field by field (defaults < TOML < class <
``--set``), and only an explicitly set field may hide a lower layer's value:
``Model("x", temperature=1.0)`` overrides a TOML temperature even though 1.0 is
the default, while ``Model("x")`` leaves the TOML value alone.
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
from typing import Any, TypeVar, cast

import attrs

from ..errors import ConfigError, FieldProblem, did_you_mean, unknown_name_message
from ..keys import holds_a_key, is_a_key_itself, looks_like_a_key
from .algorithms import (
    ADVANTAGE_ARGS,
    ENTROPY_LOSS_FNS,
    KL_LOSS_FNS,
    LOSS_AGG_MODES,
    ON_FAILED_ROLLOUT,
    ON_TRUNCATED_REPLY,
    POLICY_LOSS_ARGS,
    SAMPLE_STRATEGY_ARGS,
)
from .setting import documented, setting
from .trinity_fields import (
    ALGORITHM_TYPES,
    INFERENCE_MODEL_FIELDS,
    LR_SCHEDULERS,
    OFFLINE_TYPES,
    OWNED_INFERENCE_KEYS,
    ROLLOUT_MODEL,
    TASKSET,
    TINKER,
)

T = TypeVar("T")


def _explicitly_set(cls: type[T]) -> type[T]:
    """Wrap an attrs ``__init__`` so instances record the fields passed to it."""
    generated_init = cls.__init__
    init_names = [a.name for a in attrs.fields(cast(Any, cls)) if a.init]

    @functools.wraps(generated_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            generated_init(self, *args, **kwargs)
        except TypeError:
            problem = _call_problem(cls, init_names, args, kwargs)
            if problem is None:
                raise
            raise ConfigError(problem) from None
        except FieldProblem:
            # attrs stops at the first refused field; report them all, to fix in one pass.
            raise ConfigError(_field_problems(cls, dict(zip(init_names, args)) | kwargs)) \
                from None
        # The class is frozen; these bookkeeping slots are set once, right here.
        object.__setattr__(self, "_explicit", frozenset(init_names[: len(args)]) | set(kwargs))
        caller = os.path.dirname(sys._getframe(1).f_code.co_filename)
        object.__setattr__(self, "defined_in", caller if os.path.isdir(caller) else None)

    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


def _call_problem(cls: type, names: list[str], args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> str | None:
    """What is wrong with the arguments of a record's call that Python refused (an
    unknown or repeated name, too many values, a required field left out), or None."""
    record = cls.__name__
    for key in kwargs:
        if key not in names:
            hint = did_you_mean(key, names)
            listed = f"; its fields: {', '.join(names)}"
            return f"{record}() has no field {key!r}" + (hint or listed)
        if names.index(key) < len(args):
            return f"{record}() got {key!r} twice: by position and as {key}=; give it once"
    if len(args) > len(names):
        return (f"{record}() takes at most {len(names)} values by position (got "
                f"{len(args)}); name the fields: {record}({names[0]}=..., ...)")
    given = set(names[:len(args)]) | set(kwargs)
    required = [a.alias for a in attrs.fields(cls)
                if a.init and a.default is attrs.NOTHING and a.alias not in given]
    if required:
        return (f"{record}() needs {', '.join(required)}: write {record}("
                f"{', '.join(f'{name}=...' for name in required)}, ...)")
    return None


def _field_problems(cls: type, given: dict[str, Any]) -> list[str]:
    """Every given value a field's validator refuses, one line each, in field order."""
    problems = []
    for attribute in attrs.fields(cls):
        if attribute.validator is None or attribute.alias not in given:
            continue
        try:
            attribute.validator(None, attribute, given[attribute.alias])
        except FieldProblem as problem:
            problems.append(f"{cls.__name__}.{problem.field} {problem.detail}")
    return problems


def _bookkeeping(default: Any = frozenset) -> Any:
    return attrs.field(init=False, default=attrs.Factory(default) if callable(default)
                       else default, eq=False, repr=False, hash=False)


def _kind_shown(value: Any, integer: bool) -> str:
    """A refused value as a message shows it: a number of another kind (numpy's, a
    Decimal) prints like a valid one, so its type is named with the conversion."""
    import numbers  # only for a refused value: keeps `import tunedsl` light

    if isinstance(value, numbers.Number) and not isinstance(value, (bool, int, float)):
        kind = type(value)
        return (f"{value!r}, a {kind.__module__}.{kind.__qualname__}; pass "
                f"{'int' if integer else 'float'}(...) of it")
    return repr(value)


def _number(minimum: float, *, optional: bool = False, integer: bool = True,
            exclusive: bool = False, maximum: float | None = None) -> Any:
    kinds = (int,) if integer else (int, float)

    def check(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, kinds):
            wanted = "an integer" if integer else "a number"
            shown = _kind_shown(value, integer)
            raise FieldProblem(attribute.name, f"must be {wanted} (got {shown})")
        if not integer and not math.isfinite(value):  # (NaN is no number of a range either)
            raise FieldProblem(attribute.name, f"must be a finite number (got {value!r})")
        too_small = value <= minimum if exclusive else value < minimum
        if too_small:
            relation = ">" if exclusive else ">="
            raise FieldProblem(attribute.name, f"must be {relation} {minimum} (got {value!r})")
        if maximum is not None and value > maximum:
            raise FieldProblem(attribute.name, f"must be <= {maximum} (got {value!r})")

    return check


#: float32's smallest normal number: a learning rate below it makes every update 0.
FLOAT32_TINY = 1.1754944e-38
_POSITIVE_RATE = _number(0.0, integer=False, exclusive=True, maximum=3.4e38)


def _learning_rate(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    _POSITIVE_RATE(instance, attribute, value)
    if value < FLOAT32_TINY:
        raise FieldProblem(attribute.name, f"must be >= {FLOAT32_TINY} (got {value!r}): below "
                                           f"it float32 weights round every update to 0")


def _choice(choices: tuple[str, ...]) -> Any:
    def check(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None and value not in choices:
            raise FieldProblem(attribute.name, f"must be one of {', '.join(map(repr, choices))} "
                                               f"(got {value!r})")

    return check


#: A class Trinity imports by its dotted path (``my_package.losses.MyLoss``) where a part's
#: name is asked for: Trinity's registries take one in place of a registered name.
_IMPORT_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def _part(kind: str, names: Any) -> Any:
    """A check for a field naming one of Trinity's algorithm parts: a registered name, or a
    class's dotted import path (which only the Trinity backend can load)."""
    def check(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None or value in names or (isinstance(value, str)
                                               and _IMPORT_PATH.match(value)):
            return
        raise FieldProblem(attribute.name, unknown_name_message(
            kind, value, names).replace("; choose one of:", "; choose one of Trinity's:")
            + ", or a class's dotted import path")

    return check


def text_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as a non-empty string (for records' fields and the
    settings table's single values alike), that a path may be (`path_text_problem`), or
    None."""
    return plain_text_problem(value) or path_text_problem(value)


def plain_text_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as a non-empty string holding no NUL, or None."""
    if not isinstance(value, str) or not value:
        return f"must be a non-empty string (got {value!r})"
    if "\x00" in value:  # no path, name or file system takes one
        return f"holds a NUL character (\\x00), which no path or name may hold (got {value!r})"
    return None


#: The longest file or folder name, and the longest path, a file system takes (bytes).
MOST_NAME_BYTES, MOST_PATH_BYTES = 255, 4095


def path_text_problem(value: str) -> str | None:
    """What keeps text a setting may use as a path (a model's, a dataset's, where runs go)
    from naming one on any file system: a lone surrogate, which UTF-8 cannot encode, a part
    longer than a name may be, the whole longer than a path may be; or None."""
    import os

    try:
        encoded = os.fsencode(value)
    except UnicodeEncodeError:
        return f"holds a lone surrogate, which no path or file can hold (got {value!r})"
    long = next((part for part in encoded.split(b"/") if len(part) > MOST_NAME_BYTES), None)
    shown = repr(value) if len(value) <= 60 else f"{value[:60]!r}..."
    if long is not None:
        return (f"{shown}: its part {os.fsdecode(long[:40])!r}... is {len(long)} bytes, "
                f"longer than a file or folder name may be ({MOST_NAME_BYTES}); give a "
                f"shorter path")
    if len(encoded) > MOST_PATH_BYTES:
        return (f"{shown} is {len(encoded)} bytes, longer than a path may be "
                f"({MOST_PATH_BYTES}); give a shorter path")
    return None


def _text(*, optional: bool = False) -> Any:
    def check(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None and optional:
            return
        problem = text_problem(value)
        if problem is not None:
            raise FieldProblem(attribute.name, problem)

    return check


def _model_name(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    _text()(instance, attribute, value)
    if holds_a_key(value):  # (sent as the name, and written into every results line)
        raise FieldProblem(attribute.name, f"must be the model's name or folder (got text of "
                           f"{len(value)} characters, not shown: it looks like an API key, "
                           f"which belongs in the environment, named by api_key_env)")


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_http_url(value: Any) -> bool:
    """Whether ``value`` is an http(s) URL a client can reach: a scheme, a host, and a port
    (if given) that is a number from 1 to 65535 (port 0 reaches nothing). Every URL tunedsl
    takes is checked so."""
    if not isinstance(value, str) or not value.lower().startswith(("http://", "https://")):
        return False
    if any(character.isspace() for character in value):  # sent as %20: every request missed
        return False
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        port = parts.port  # a port out of range raises
    except ValueError:  # an unclosed IPv6 bracket, a port that is not a number
        return False
    return bool(parts.hostname) and port != 0


def url_fault(value: str) -> str:
    """Why ``value`` is no http(s) URL a client can reach, in a few words."""
    from urllib.parse import urlsplit

    if any(character.isspace() for character in value):
        return "it holds blank space (a space or a line break copied with it)"
    if value.lower().startswith(("http://", "https://")):
        try:
            port = urlsplit(value).port
        except ValueError as exc:
            if "out of range" in str(exc):
                return "its port is out of range (1 to 65535)"
            return "its host and port cannot be read"
        if port == 0:
            return "its port is 0, which no endpoint listens on (1 to 65535)"
        if port is not None and not urlsplit(value).hostname:
            return "it names no host"
    return "not an http(s) URL"


def redact_url(url: str | None) -> str | None:
    """``url`` with its user and password (``USER:PASSWORD@``) as ``***@`` and its query
    values as ``***``: some services take an API key there (a key given as the user too),
    and URLs end up in results and logs."""
    if not url or ("?" not in url and "@" not in url):
        return url
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" in parts.netloc:
        parts = parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2])
    query = urlencode([(key, "***") for key, _ in parse_qsl(parts.query,
                                                             keep_blank_values=True)],
                      safe="*")
    return urlunsplit(parts._replace(query=query))


def query_problem(url: str, key_option: str = "api_key_env") -> str | None:
    """Why ``url`` cannot be an endpoint's URL, whatever gives it (a setting, ``--base-url``,
    ``--model NAME@URL``, ``--aux``), or None: a query string or a fragment (the client adds
    ``/chat/completions`` after the whole URL, so ``?api-version=...`` would end up before
    it and every request miss), a request's own path at its end (added again: every call a
    404), a key in its path (never shown, and kept out of every file written; its
    variable is given with ``key_option``)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if any(is_a_key_itself(segment) for segment in parts.path.split("/")):
        return ("its path holds text that looks like a key, not shown (it would be written "
                "into the results and the run's files); give the URL up to its /v1, and the "
                f"key's environment variable with {key_option}")
    path = parts.path.rstrip("/")
    added = next((ending for ending in _REQUEST_PATHS if path.endswith(ending)), None)
    if added is not None and "?" not in url and "#" not in url:
        base = parts._replace(path=path[:-len(added)]).geturl()
        return (f"{url} ends with {added}, which the client adds to each request (every call "
                f"would miss); give {base}")
    if "?" not in url and "#" not in url:  # (an empty "?" too ends up before the path)
        return None
    # the part after ? or # is not shown: it may hold a key (?api-key=...), nor a password
    bare = urlsplit(redact_url(url) or url)._replace(query="", fragment="").geturl().rstrip("?#")
    first = min(index for index in (url.find("?"), url.find("#")) if index >= 0)
    tail = "a query string (?...)" if url[first] == "?" else "a fragment (#...)"
    return (f"{bare} is followed by {tail}, which the client would put before "
            f"/chat/completions (every request would miss); give the endpoint's URL alone")


#: The paths an OpenAI client adds to an endpoint's base URL for its requests.
_REQUEST_PATHS = ("/chat/completions", "/completions", "/models", "/embeddings")


def _url(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None or (isinstance(value, str) and "${env:" in value):
        return  # checked once the settings layer has read the environment
    if not is_http_url(value):
        got = (f"text of {len(value)} characters, not shown: it looks like a key, which "
               f"belongs in the environment, named by api_key_env"
               if isinstance(value, str) and looks_like_a_key(value)
               and not any(mark in value for mark in "./:") else repr(value))  # (no URL's)
        raise FieldProblem(attribute.name, f"must be an http(s) URL such as "
                           f"https://api.example.com/v1 (got {got})")
    problem = query_problem(value)
    if problem is not None:
        raise FieldProblem(attribute.name, f"must be the endpoint's URL alone: {problem}")
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if "@" in parts.netloc:  # (written into the config, sent nowhere: refused)
        shown = parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()
        raise FieldProblem(attribute.name, f"must be the endpoint's URL alone: "
                           f"{shown} holds a user or key before its host "
                           f"(USER:KEY@), which is never sent; give the key's environment "
                           f"variable with api_key_env")


def _env_name(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not _ENV_NAME.match(value)
                              or (looks_like_a_key(value) and value not in os.environ)):
        # the key itself, most likely: not shown again
        keyish = isinstance(value, str) and looks_like_a_key(value)
        got = (f"text of {len(value)} characters, not shown: it looks like a key, which "
               f"tunedsl takes only from the environment" if keyish else repr(value))
        raise FieldProblem(attribute.name, f"must name an environment variable, such as "
                           f"OPENAI_API_KEY (got {got}); the key itself is never written")


def _flag(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not isinstance(value, bool):
        raise FieldProblem(attribute.name, f"must be true, false or unset (got {value!r})")


def _top_p(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    _number(0.0, integer=False, exclusive=True)(_instance, attribute, value)
    if value > 1:
        raise FieldProblem(attribute.name, f"must be in (0, 1] (got {value!r})")


def _inference_options(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise FieldProblem(attribute.name, f"must be a dict of Trinity options (got {value!r})")
    for key in value:
        if key in OWNED_INFERENCE_KEYS:
            raise FieldProblem(attribute.name, f"sets {key!r}, which belongs to "
                               f"{OWNED_INFERENCE_KEYS[key]}; set it there")
        if key not in INFERENCE_MODEL_FIELDS:
            raise FieldProblem(
                attribute.name, f"has {key!r}, which is not a field of Trinity's "
                f"InferenceModelConfig{did_you_mean(key, INFERENCE_MODEL_FIELDS)}"
            )


def _plain_arguments(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value) or not all(
            isinstance(v, (str, int, float, bool, type(None))) for v in value.values()):
        odd = next((f"; {key}: {_kind_shown(item, isinstance(item, _integral()))}"
                    for key, item in (value.items() if isinstance(value, dict) else ())
                    if not isinstance(item, (str, int, float, bool, type(None)))), "")
        raise FieldProblem(attribute.name, f"must be a table of argument name -> text, number "
                                           f"or flag (got {value!r}{odd})")


def _integral() -> type:
    """``numbers.Integral``, imported only for a refused value (`import tunedsl` stays
    light)."""
    import numbers

    return numbers.Integral


#: ``target_modules`` that adapts every linear layer but the output head (peft's name).
ALL_LINEAR = "all-linear"


def _target_modules(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, (list, tuple)):
        if not value or not all(isinstance(name, str) and name for name in value):
            raise FieldProblem(attribute.name, f"must list at least one module name, each a "
                               f"non-empty string (got {list(value)!r})")
        return
    if not isinstance(value, str) or not value:
        raise FieldProblem(attribute.name, f'must be "{ALL_LINEAR}", a list of module names such '
                           f'as ["q_proj", "v_proj"], or a regular expression over module names '
                           f"(got {value!r})")
    try:
        re.compile(value)
    except re.error as exc:
        raise FieldProblem(attribute.name, f"{value!r} is not a valid regular expression ({exc}); "
                           f'give "{ALL_LINEAR}" or a list of module names') from None


def _as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _record(cls: type) -> Any:
    def check(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None and not isinstance(value, cls):
            raise FieldProblem(attribute.name, f"must be a {cls.__name__}(...) or None "
                               f"(got {value!r})")

    return check


def _algorithm_type(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value in ALGORITHM_TYPES:
        return  # (an offline type is refused by the graph's checks, naming the setting)
    if isinstance(value, str) and value.lower() in OFFLINE_TYPES:  # ("DPO": not "did you
        # mean 'dpo'", which is refused next)
        raise FieldProblem(attribute.name, f"{value!r} is not a known algorithm type, and "
                                           f"{offline_type_problem(value.lower())}")
    choices = [kind for kind in ALGORITHM_TYPES if kind not in OFFLINE_TYPES]
    raise FieldProblem(attribute.name,
                       unknown_name_message("algorithm type", value, choices))


def offline_type_problem(kind: str) -> str:
    """Why an algorithm type that trains offline (`OFFLINE_TYPES`) is not run, and what to
    choose instead."""
    return (f"Trinity trains {kind!r} offline on a dataset of {OFFLINE_TYPES[kind]}, running "
            f"no workflow, which tunedsl does not set up; learn from the judge's reward with "
            f"an RL algorithm (grpo, ...), or from conversations with sft")


@_explicitly_set
@documented
@attrs.frozen
class Dataset:
    """A task dataset, read with ``datasets.load_dataset``."""

    path: str = setting(
        check=_text(), trinity=f"{TASKSET}.path", path=True,
        meaning="A local folder of jsonl/parquet/csv files (split by file name, e.g. "
                "``train.jsonl``), a single data file (not on Trinity, whose reader takes "
                "folders), or a Hugging Face hub id. Relative paths are resolved against the "
                "file that names them.")
    name: str | None = setting(
        None, check=_text(optional=True), trinity=f"{TASKSET}.subset_name",
        meaning="The dataset configuration (``load_dataset(name=...)``; Trinity's "
                "``subset_name``).")
    split: str = setting("train", check=_text(), trinity=f"{TASKSET}.split",
                         meaning="The split to read.")
    total_epochs: int = setting(1, check=_number(1), trinity="buffer.total_epochs",
                                resumable=True,
                                meaning="Passes over the dataset (a training or warm-up set; "
                                        "an eval set is read whole).")
    total_steps: int | None = setting(
        None, check=_number(1, optional=True), trinity="buffer.total_steps", resumable=True,
        meaning="Stop after this many steps; overrides ``total_epochs`` (a training or warm-up "
                "set).")
    _explicit: frozenset[str] = _bookkeeping()
    #: The folder of the file that constructed the record (its relative paths are meant
    #: from there), or None when it was not constructed in a file.
    defined_in: str | None = _bookkeeping(None)

    def steps(self, rows: int, batch_size: int) -> int:
        """The steps a run takes over ``rows`` rows, ``batch_size`` a step: ``total_steps``,
        else whole batches over ``total_epochs`` (as Trinity's scheduler counts them)."""
        return self.total_steps or self.total_epochs * rows // batch_size

    def preview(self, n: int = 5) -> list[dict[str, Any]]:
        """Print and return the first ``n`` rows, streaming (never loads it all); a
        ``${env:NAME[,default]}`` in a field is read as an experiment reads it."""
        # AgentScope tuner's DatasetConfig.preview: the one call from the DSL into the data
        # layer, made only when asked, so the records stay plain data.
        from ..data.preview import preview
        from .arguments import whole

        whole("n", n)  # (-1 read all but the last row, "3" failed inside the reader)
        return preview(self, n)


@_explicitly_set
@documented
@attrs.frozen
class LoRA:
    """Train low-rank adapters (LoRA) instead of every weight of the trained model.

    The local backend trains them with ``peft`` (the base weights stay frozen); on Trinity
    they become ``model.lora_configs``, which applies to the rollout model only (never to
    auxiliary models). The defaults are Trinity's.
    """

    # No model has a layer 65,536 wide; the local backend also refuses a rank above its
    # model's widest layer (`lora.add_lora`).
    rank: int = setting(32, check=_number(1, maximum=65536), trinity="lora_rank",
                        meaning="The adapters' rank (peft's ``r``, Trinity's ``lora_rank``), "
                                "at most the width of the layers adapted.")
    alpha: int = setting(32, check=_number(1), trinity="lora_alpha",
                         meaning="The scale numerator: an adapter's update is scaled by "
                                 "``alpha / rank``.")
    target_modules: str | tuple[str, ...] = setting(
        ALL_LINEAR, converter=_as_tuple, check=_target_modules, trinity="target_modules",
        meaning='The layers that get adapters: ``"all-linear"`` (every linear layer but the '
                'output head), a list of module names such as ``["q_proj", "v_proj"]`` (a name '
                "matches every module whose dotted name ends with it), or a regular expression "
                "the whole dotted module name must match.")
    _explicit: frozenset[str] = _bookkeeping()
    #: The folder of the file that constructed the record, or None.
    defined_in: str | None = _bookkeeping(None)


@_explicitly_set
@documented
@attrs.frozen
class Model:
    """A chat model: the one being trained, or a frozen auxiliary one."""

    model_path: str = setting(check=_model_name, trinity="model.model_path", path=True,
                              meaning="A local Hugging Face model folder or a hub id.")
    max_model_len: int | None = setting(
        None, check=_number(1, optional=True), trinity="model.max_model_len",
        meaning="Prompt plus response tokens the engine handles (required for the trained "
                "model; auxiliary models default to the trained model's).")
    temperature: float = setting(1.0, check=_number(0.0, integer=False),
                                 trinity="model.temperature",
                                 meaning="Sampling temperature. On Trinity a training call may "
                                         "not set another one (its trainer scores replies at "
                                         "this one); eval calls may.")
    top_p: float = setting(1.0, check=_top_p, trinity="model.top_p",
                           meaning="Nucleus sampling threshold. Trinity trains with 1.0 only "
                                   "(its trainer never applies top-p to the log-probs), so "
                                   "``--backend trinity`` refuses another.")
    max_tokens: int | None = setting(
        None, check=_number(1, optional=True), trinity="model.max_response_tokens",
        meaning="Most tokens per response; unset lets Trinity use half of ``max_model_len``. "
                "A reply is also bounded by the room its prompt leaves in ``max_model_len``, "
                "on every backend.")
    enable_thinking: bool | None = setting(
        None, check=_flag, trinity="model.enable_thinking",
        meaning="Qwen3-style thinking switch; unset leaves the model's default.")
    tensor_parallel_size: int = setting(
        1, check=_number(1), trinity=f"{ROLLOUT_MODEL}.tensor_parallel_size",
        meaning="GPUs per inference engine.")
    inference_engine_num: int | None = setting(
        None, check=_number(1, optional=True), trinity=f"{ROLLOUT_MODEL}.engine_num",
        meaning="Number of inference engines. Unset: 1 for an auxiliary model; for the "
                "trained model on Trinity, the fewest engines that leave the trainer a GPU "
                "count dividing each step's experiences (verl splits them evenly across its "
                "data-parallel ranks), sized to the cluster at launch.")
    tool_call_parser: str | None = setting(
        "hermes", check=_text(optional=True), trinity=f"{ROLLOUT_MODEL}.tool_call_parser",
        meaning="vLLM tool-call parser (``hermes`` suits Qwen models).")
    reasoning_parser: str | None = setting(
        None, check=_text(optional=True), trinity=f"{ROLLOUT_MODEL}.reasoning_parser",
        meaning="vLLM reasoning parser, e.g. ``deepseek_r1``.")
    base_url: str | None = setting(
        None, check=_url,
        meaning="An OpenAI-compatible endpoint that serves this model (auxiliary models "
                "only: a hosted LLM judge, say). No local engine is started and no GPU "
                "counted; ``model_path`` is the model name sent with each request. "
                "``${env:NAME}`` keeps the URL itself out of every file.")
    api_key_env: str | None = setting(
        None, check=_env_name,
        meaning="The environment variable holding the endpoint's API key, read where the "
                "calls are made and never written to a file.")
    trinity: dict[str, Any] = setting(
        factory=dict, check=_inference_options,
        meaning="Further Trinity ``InferenceModelConfig`` options for this model's engines "
                "(``enable_prefix_caching``, ``gpu_memory_utilization``, ``dtype``, "
                "``enforce_eager``, ``extra_engine_args``, ...), merged into its entry of "
                "``explorer.rollout_model`` or ``explorer.auxiliary_models``.")
    # record=LoRA: the settings layers read a [model.lora] table field by field.
    lora: LoRA | None = setting(
        None, check=_record(LoRA), record=LoRA,
        meaning="Train LoRA adapters (`LoRA`) instead of every weight (the trained model "
                "only; auxiliary models are frozen).")
    _explicit: frozenset[str] = _bookkeeping()
    #: The folder of the file that constructed the record (its relative paths are meant
    #: from there), or None when it was not constructed in a file.
    defined_in: str | None = _bookkeeping(None)


@_explicitly_set
@documented
@attrs.frozen
class Algorithm:
    """The RL algorithm and its main hyper-parameters."""

    algorithm_type: str = setting(
        "multi_step_grpo", check=_algorithm_type, trinity="algorithm.algorithm_type",
        meaning="A Trinity-RFT algorithm name, e.g. ``grpo`` or ``multi_step_grpo`` (every "
                "model call of a trajectory is trained on).")
    # A group is sampled at once for one task (vLLM's n): beyond a few thousand it is a typo
    # for the batch, and would be accepted until the first step ran out of memory.
    group_size: int = setting(8, check=_number(1, maximum=4096),
                              trinity="algorithm.repeat_times",
                              meaning="Rollouts per task (at most 4096); group-relative "
                                      "algorithms need at least 2.")
    batch_size: int = setting(32, check=_number(1), trinity="buffer.batch_size",
                              meaning="Tasks per training step.")
    learning_rate: float = setting(
        # Above float32's largest number the optimizer cannot even apply the step; below
        # its smallest normal one every update rounds to 0 (the run "trains", unchanged).
        1e-6, check=_learning_rate,
        trinity="algorithm.optimizer.lr", meaning="Optimizer learning rate.")
    save_interval_steps: int = setting(100, check=_number(1), trinity="trainer.save_interval",
                                       resumable=True,
                                       meaning="Save a checkpoint every this many steps (on "
                                               "Trinity, trainer steps: a workflow making k "
                                               "model calls a rollout trains about k a step).")
    eval_interval_steps: int = setting(
        100, check=_number(1), trinity="explorer.eval_interval", resumable=True,
        meaning="Evaluate on the eval dataset before the first step and every this many "
                "steps; the local backend also after the last, Trinity only when the last is "
                "a multiple (``check`` says so).")
    kl_loss_fn: str | None = setting(
        None, check=_choice(KL_LOSS_FNS), trinity="algorithm.kl_loss_fn",
        meaning="The KL loss to the initial model (Trinity's ``k1``, ``k2``, ``k3``, "
                "``low_var_kl``, ``abs``, ``corrected_k3``, or ``none``); unset keeps the "
                "algorithm's own (``k2``; ``none`` for ``dapo``).")
    policy_loss_fn: str | None = setting(
        None, check=_part("policy loss", tuple(POLICY_LOSS_ARGS)),
        trinity="algorithm.policy_loss_fn",
        meaning="The policy loss, by Trinity's name (``ppo``, ``gspo``, ``cispo``, ``sapo``, "
                "``rec``, ...), to compose an algorithm as Trinity does "
                "(``multi_step_grpo`` with ``rec``); unset keeps the algorithm's own. Its "
                "arguments go in ``policy_loss_args``.")
    advantage_fn: str | None = setting(
        None, check=_part("advantage function", tuple(ADVANTAGE_ARGS)),
        trinity="algorithm.advantage_fn",
        meaning="The advantage function, by Trinity's name (``grpo``, ``step_wise_grpo``, "
                "``gigpo``, ``rec``, ...); unset keeps the algorithm's own. Its arguments go "
                "in ``advantage_args``.")
    entropy_loss_fn: str | None = setting(
        None, check=_part("entropy loss", ENTROPY_LOSS_FNS),
        trinity="algorithm.entropy_loss_fn",
        meaning="The entropy loss (Trinity's ``default``, ``mix`` or ``none``); unset keeps "
                "the algorithm's own.")
    sample_strategy: str | None = setting(
        None, check=_part("sample strategy", tuple(SAMPLE_STRATEGY_ARGS)),
        trinity="algorithm.sample_strategy",
        meaning="How the trainer reads experiences (Trinity's ``default``, "
                "``staleness_control`` or ``mix``); unset keeps Trinity's ``default``. Its "
                "arguments go in ``sample_strategy_args``.")
    sample_strategy_args: dict[str, Any] = setting(
        factory=dict, check=_plain_arguments,
        meaning="Arguments of the sample strategy, by Trinity's names (``max_staleness`` for "
                "``staleness_control``), written to ``algorithm.sample_strategy_args``.")
    kl_coef: float | None = setting(
        None, check=_number(0.0, integer=False, optional=True),
        trinity="algorithm.kl_loss_fn_args.kl_coef",
        meaning="Weight of the KL loss; unset keeps Trinity's default, 0.001. A KL loss keeps "
                "a frozen copy of the initial model (with LoRA: the model, adapters off).")
    entropy_coef: float | None = setting(
        None, check=_number(0.0, integer=False, optional=True),
        trinity="algorithm.entropy_loss_fn_args.entropy_coef",
        meaning="Weight of the entropy bonus; unset keeps Trinity's default, 0 (none).")
    loss_agg_mode: str | None = setting(
        None, check=_choice(LOSS_AGG_MODES), trinity="algorithm.loss_agg_mode",
        meaning="How the losses average over tokens: ``token-mean``, ``seq-mean-token-mean``, "
                "``seq-mean-token-sum`` or ``seq-mean-token-sum-norm``; unset keeps the "
                "policy loss's own (``seq-mean-token-mean`` for ``gspo``, else "
                "``token-mean``).")
    clip_range: float | None = setting(
        None, check=_number(0.0, integer=False, optional=True, exclusive=True),
        trinity="algorithm.policy_loss_fn_args.clip_range",
        meaning="The policy ratio's clip range, both sides (``ppo``-loss algorithms and "
                "``gspo``); unset keeps the loss's own (0.2 for the ``ppo`` loss).")
    clip_range_low: float | None = setting(
        None, check=_number(0.0, integer=False, optional=True),
        trinity="algorithm.policy_loss_fn_args.clip_range_low",
        meaning="The ratio's lower clip, ``1 - clip_range_low`` (``ppo``-loss algorithms, "
                "``gspo``, ``cispo``); unset: ``clip_range``, or the loss's own.")
    clip_range_high: float | None = setting(
        None, check=_number(0.0, integer=False, optional=True),
        trinity="algorithm.policy_loss_fn_args.clip_range_high",
        meaning="The ratio's upper clip, ``1 + clip_range_high`` (0.28 for ``dapo`` and "
                "``cispo``); unset: ``clip_range``, or the loss's own.")
    std_threshold: float | None = setting(
        None, check=_number(0.0, integer=False, optional=True),
        trinity="algorithm.advantage_fn_args.std_threshold",
        meaning="GRPO advantages (``grpo``, ``multi_step_grpo``, ``dapo``, ``gspo``, ``cispo``, "
                "``sapo``): a group whose rewards' standard deviation is at most this is not "
                "trained on (``0``: groups whose rewards all agree); unset trains on all.")
    epsilon: float | None = setting(
        None, check=_number(0.0, integer=False, optional=True, exclusive=True),
        trinity="algorithm.advantage_fn_args.epsilon",
        meaning="GRPO advantages: added to the group's standard deviation before dividing; "
                "unset keeps Trinity's 1e-6.")
    policy_loss_args: dict[str, Any] = setting(
        factory=dict, check=_plain_arguments,
        meaning="Further arguments of the algorithm's policy loss, by Trinity's names "
                "(``tau_pos`` for ``sapo``, ``advantage_threshold`` for ``topr``, ...), "
                "written to ``algorithm.policy_loss_fn_args``.")
    advantage_args: dict[str, Any] = setting(
        factory=dict, check=_plain_arguments,
        meaning="Further arguments of the algorithm's advantage function, by Trinity's names "
                "(``std_cal_level`` for GRPO's, ``opmd_baseline`` for ``opmd``, ...), written "
                "to ``algorithm.advantage_fn_args``.")
    on_failed_rollout: str | None = setting(
        None, check=_choice(ON_FAILED_ROLLOUT),
        meaning="A rollout whose workflow or judge failed (or timed out): ``drop`` it "
                "(its group's baseline is then the rest's), train on it with reward ``zero``, "
                "or ``drop_group``: its task's whole group. Unset: ``drop``.")
    on_truncated_reply: str | None = setting(
        None, check=_choice(ON_TRUNCATED_REPLY),
        meaning="A reply cut by ``max_tokens`` or the context: ``train`` on it, or ``mask`` "
                "it out of the loss (Trinity's ``mask_response_truncated``); unset keeps the "
                "algorithm's own (``mask`` for ``dapo``, else ``train``).")
    teacher: str | None = setting(
        None, check=_text(optional=True),
        meaning="The auxiliary model ``on_policy_distill`` learns from (its name in "
                "``auxiliary_models``; a local model, or an endpoint that gives log-probs, "
                "with the trained model's tokenizer); unset: the only auxiliary model.")
    weight_decay: float | None = setting(
        None, check=_number(0.0, integer=False, optional=True),
        trinity="algorithm.optimizer.weight_decay",
        meaning="AdamW's weight decay; unset keeps Trinity's default, 0.01.")
    grad_clip: float | None = setting(
        None, check=_number(0.0, integer=False, optional=True, exclusive=True),
        trinity="algorithm.optimizer.clip_grad",
        meaning="The gradient norm is clipped to this; unset keeps Trinity's default, 1.0 "
                "(verl 0.8 clips with the optimizer's ``clip_grad``; ``trainer.grad_clip`` "
                "reaches no optimizer).")
    lr_warmup_steps: int | None = setting(
        None, check=_number(0, optional=True), trinity="algorithm.optimizer.lr_warmup_steps",
        meaning="The learning rate rises linearly from 0 over this many steps (Trinity's "
                "``optimizer.lr_warmup_steps``); unset means no warmup.")
    lr_scheduler: str | None = setting(
        None, check=_choice(LR_SCHEDULERS), trinity="algorithm.optimizer.lr_scheduler_type",
        meaning="``constant`` (Trinity's default) or ``cosine`` decay after warmup to "
                "``min_lr_ratio`` times the learning rate at the last step (on Trinity, "
                "tunedsl writes the run's steps as ``trainer.total_steps``, without which verl "
                "never decays; refused there for a workflow making several model calls a "
                "rollout).")
    min_lr_ratio: float | None = setting(
        None, check=_number(0.0, integer=False, optional=True, maximum=1.0),
        trinity="algorithm.optimizer.min_lr_ratio",
        meaning="Where ``cosine`` ends, as a share of ``learning_rate``; unset keeps "
                "Trinity's default, 0.01.")
    keep_checkpoints: int | None = setting(
        None, check=_number(0, optional=True), resumable=True,
        trinity="trainer.max_checkpoints_to_keep",
        meaning="Keep only the newest this many ``global_step_N`` folders; unset or 0 keeps "
                "all. On Trinity the trainer counts the checkpoints saved since the run (or "
                "its resume) started, so resuming an RL stage first removes its older "
                "folders beyond this many.")
    keep_best_checkpoint: bool = setting(
        False, check=_flag, resumable=True,
        meaning="Also keep the saved checkpoint whose step scored the best eval reward "
                "(steps that both saved and evaluated count). Local backend only: Trinity "
                "keeps the newest checkpoints only, so ``--backend trinity`` refuses it.")
    # vLLM seeds numpy with it, which takes 32 bits (the local engine's torch seed, 64).
    seed: int = setting(42, check=_number(0, maximum=2**32 - 1), trinity=f"{ROLLOUT_MODEL}.seed",
                        meaning="Seeds sampling and the data order (Trinity's shuffle data "
                                "selector, ``data_selector.seed``, on both backends), for "
                                "reproducible runs.")
    _explicit: frozenset[str] = _bookkeeping()
    #: The folder of the file that constructed the record (its relative paths are meant
    #: from there), or None when it was not constructed in a file.
    defined_in: str | None = _bookkeeping(None)


@_explicitly_set
@documented
@attrs.frozen
class Tinker:
    """Train through Tinker (hosted LoRA training and sampling) instead of local GPUs.

    With it, Trinity's trainer and inference engines become Tinker's, so a run needs no
    local GPU; the model must be one the Tinker service supports (checked by ``check``).
    The API key is read from ``TINKER_API_KEY``, never from a file. Needs Python 3.11+
    and ``pip install "tunedsl[tinker]"``.
    """

    rank: int = setting(16, check=_number(1), trinity=f"{TINKER}.rank", meaning="The LoRA rank.")
    train_mlp: bool = setting(True, check=_flag, trinity=f"{TINKER}.train_mlp",
                              meaning="Train the MLP layers.")
    train_attn: bool = setting(True, check=_flag, trinity=f"{TINKER}.train_attn",
                               meaning="Train the attention layers.")
    train_unembed: bool = setting(True, check=_flag, trinity=f"{TINKER}.train_unembed",
                                  meaning="Train the unembedding layer.")
    seed: int | None = setting(None, check=_number(0, optional=True), trinity=f"{TINKER}.seed",
                               meaning="Tinker's seed; unset lets Tinker choose.")
    base_url: str | None = setting(None, check=_url, trinity=f"{TINKER}.base_url",
                                   meaning="The Tinker service; unset means Tinker's own.")
    _explicit: frozenset[str] = _bookkeeping()
    #: The folder of the file that constructed the record, or None.
    defined_in: str | None = _bookkeeping(None)


#: AgentScope tuner's names for the same records.
DatasetConfig = Dataset
TunerModelConfig = Model
AlgorithmConfig = Algorithm
