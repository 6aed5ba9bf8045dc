"""Pick a model: ``tunedsl eval --model A --model B`` and `select_model`.

Each candidate runs the experiment's workflow and judge over the same eval tasks and
repeats (one ``tunedsl eval`` results file each, so each can be viewed, re-scored and
resumed alone); then the candidates are ranked by mean reward, with a paired bootstrap
interval for each one's difference from the best.

Three things AgentScope's ``select_model`` does are not done here: a failed rollout
counts as reward 0 and is shown as an error (dropping it would reward a model for
failing on the hard tasks), means are compared with their uncertainty (on a few dozen
tasks two models a few points apart are often indistinguishable), and the eval dataset
is used (the training split only when there is none, with a note saying so).

Importing this module is light: numpy and the eval machinery are imported when used.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .. import wording
from ..config.importer import refuse_while_imported
from ..dsl import arguments
from ..errors import ConfigError, RunInterrupted
from ..keys import holds_a_key, without_keys
from ..models.reached import AuxiliaryPlan, Reached
from ..rollout.loop import ExitInCallback
from ..runs.run_files import EVALS_DIR, claimed_default
from ..wording import print_lines, said, spelled
from .evaluate import EvalScope
from .execution import Execution

if TYPE_CHECKING:
    from ..config.graph import ExperimentGraph

#: The bootstrap's defaults: a 95% interval from 10000 resamples, seeded so a ranking
#: printed twice from the same results is the same ranking.
CONFIDENCE = 0.95
RESAMPLES = 10_000
SEED = 0
#: The most resamples a ranking draws (each one a row of tasks in memory).
MOST_RESAMPLES = 1_000_000
#: Below this many tasks a percentile bootstrap's interval is too narrow to trust.
FEW_TASKS = 10


@attrs.frozen(kw_only=True)
class Bootstrap:
    """How the paired bootstrap compares candidates: the interval's ``confidence``, the
    ``resamples`` drawn and their ``seed`` (the same results give the same ranking)."""

    confidence: float = CONFIDENCE
    resamples: int = RESAMPLES
    seed: int = SEED

_URL_START = re.compile(r"@(?=https?://)", re.IGNORECASE)


@attrs.frozen(kw_only=True)
class Candidate:
    """One model to compare: the name sent to its endpoint, the endpoint, and the label
    it is ranked (and its results file named) by."""

    name: str
    base_url: str
    label: str
    api_key_env: str | None = None
    #: Sampling settings that replace the experiment's model's for this candidate (those
    #: a `Model` candidate sets explicitly).
    sampling: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def file_stem(self) -> str:
        """The label as a file name: only letters, digits, ``.``, ``_`` and ``-``; a long one
        cut to 80 characters and a short hash of the whole label (file systems take 255
        bytes a name)."""
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", self.label).strip("._") or "model"
        if len(stem) > 100:
            stem = f"{stem[:80]}-{hashlib.sha1(self.label.encode()).hexdigest()[:8]}"
        return stem


def _given(option: str, text: str) -> str:
    """How a refused candidate is named: as typed on the command line, else quoted (an
    item of a list argument, ``candidate_models``, or the value of a single one); a key
    pasted into it is left out."""
    text = without_keys(text) if isinstance(text, str) else text
    if option.startswith("-"):
        return f"{option} {text}"
    return f"{option} item {text!r}" if option.endswith("s") else f"{option}={text!r}"


def _example(option: str, text: str) -> str:
    return f"{option} {text}" if option.startswith("-") else repr(text)


def key_for_a_name(option: str, given: str) -> str:
    """The line for an API key given where a model's name goes: it was sent as the name and
    written whole into the results, or the candidates file."""
    key = "reflection_key" if option == wording.spelled("reflection_model") else "api_key_env"
    return (f"{option} {without_keys(given)!r}: the model's name looks like an API key (not "
            f"shown: it would be written into the results); give the model's name, and the "
            f"key's environment variable with {wording.spelled(key)}")


#: An endpoint's address without its scheme (``localhost:8000/v1``, ``10.0.0.5:8000``,
#: ``api.example.com:443/v1``): a host, a port of digits. Not a model's tag
#: (``llama3:8b``, ``qwen2.5:14``: no such host).
_HOST_AND_PORT = re.compile(r"(localhost|\d{1,3}(\.\d{1,3}){3}|([\w-]+\.)+[A-Za-z]{2,})"
                            r":\d{2,5}(/\S*)?$", re.IGNORECASE)

#: What a model's name pasted with blank space or quotes has around it: straight quotes,
#: typographic ones (copied from a chat or a document), Markdown's backticks, guillemets.
_AROUND_A_NAME = " \t'\"`\u201c\u201d\u2018\u2019\u00ab\u00bb"


#: Why a model's name with a line break (or another control character) is refused.
CONTROL_IN_A_NAME = ("a model name holds no line break, control character or invisible one "
                     "(a zero-width space, a byte-order mark); give the name on one line, "
                     "typed anew")


def holds_a_control_character(name: str) -> bool:
    """Whether ``name`` holds a line break or another control character, or an invisible
    one a paste brings (a zero-width space, a byte-order mark, U+2028, a variation
    selector: Unicode's default-ignorable code points, `_INVISIBLE`), which no endpoint's
    model name holds."""
    import unicodedata

    return any(unicodedata.category(character) in ("Cc", "Cf", "Zl", "Zp")
               or _invisible(character) for character in name)


def with_invisibles_shown(text: str) -> str:
    """``text`` as a message quotes it: ``repr``, with the characters
    `holds_a_control_character` finds escaped (repr shows a variation selector as itself,
    which is to say not at all); a Python literal of ``text`` still."""
    return "".join(_escaped(character) if holds_a_control_character(character) else character
                   for character in repr(text))  # (repr escapes what is not printable)


def _escaped(character: str) -> str:
    return (f"\\u{ord(character):04x}" if ord(character) <= 0xFFFF
            else f"\\U{ord(character):08x}")


#: Unicode's Default_Ignorable_Code_Point, as DerivedCoreProperties.txt lists it (4174 code
#: points as of Unicode 16.0, unchanged since 14.0 added U+180F; derived as
#: Other_Default_Ignorable_Code_Point + Cf + Variation_Selector - White_Space - FFF9..FFFB
#: - 13430..13440 - Prepended_Concatenation_Mark), its lines' adjacent ranges merged:
#: characters no renderer shows, and code points reserved for more of them. Beside the
#: format characters (Cf, refused by their category): the combining grapheme joiner, Hangul
#: fillers, Khmer's inherent vowels, Mongolian's free variation selectors, the variation
#: selectors and their supplement (U+E0100..U+E01EF; sweep 48 A-W1), the tags' block.
_DEFAULT_IGNORABLE = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C),
                      (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
                      (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F),
                      (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
                      (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
                      (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))
#: Characters that show nothing: the default-ignorable code points, and the blank braille
#: pattern, which is none but shows nothing either (sweep 47 A-W2).
_INVISIBLE = ((0x2800, 0x2800), *_DEFAULT_IGNORABLE)


def _invisible(character: str) -> bool:
    point = ord(character)
    return any(first <= point <= last for first, last in _INVISIBLE)


def bare_name(name: str) -> str | None:
    """``name`` without the blank space (any, as `str.isspace` finds it: a no-break space,
    an ideographic one) or quotes (of any kind) around it, which no endpoint's model name
    has; None when nothing is around it."""
    start, end = 0, len(name)
    while start < end and _around_a_name(name[start]):
        start += 1
    while end > start and _around_a_name(name[end - 1]):
        end -= 1
    bare = name[start:end]
    return bare if name and bare != name else None


def _around_a_name(character: str) -> bool:
    return character in _AROUND_A_NAME or character.isspace()


def split_model(text: str, option: str = "--model") -> tuple[str, str | None]:
    """``NAME`` or ``NAME@URL`` as ``(name, url or None)``.

    The name ends at the first ``@`` followed by ``http://`` or ``https://``, so a name
    holding ``@`` (a dated model such as ``claude-3-5-sonnet@20240620``) stays a name;
    an ``@`` followed by something URL-like without a scheme is refused, not sent as a
    model name the endpoint would reject.
    """
    if not text.strip():
        raise ConfigError(f"{option} {text!r}: give a model name, e.g. "
                          f"{_example(option, 'Qwen/Qwen3-8B')}")
    match = _URL_START.search(text)
    if text.lower().startswith(("http://", "https://")):  # (sent as the name: every call 404)
        raise ConfigError(f"{option} {without_keys(text)!r}: that is a URL, not a model's name; "
                          f"give NAME@URL, e.g. {_example(option, 'Qwen/Qwen3-8B@' + text)}")
    if holds_a_key(text[:match.start()] if match is not None else text):
        raise ConfigError(key_for_a_name(option, text))  # (before any line quoting it)
    if match is None and _HOST_AND_PORT.match(text):  # (an endpoint's address without its
        # scheme: sent as the name, every call a 404)
        raise ConfigError(f"{option} {without_keys(text)!r}: that is an endpoint's address, "
                          f"not a model's name; give NAME@URL, e.g. "
                          f"{_example(option, 'Qwen/Qwen3-8B@http://' + text)}")
    if holds_a_control_character(text):
        # (printed raw, it broke the ranking's table; no endpoint serves such a name)
        raise ConfigError(f"{option} {with_invisibles_shown(without_keys(text))}: "
                          f"{CONTROL_IN_A_NAME}")
    name_part = text[:match.start()] if match is not None else text
    bare = bare_name(name_part)
    if bare is not None:
        # (sent as typed: every call a 404, and one model ranked twice beside itself)
        raise ConfigError(f"{option} {without_keys(text)!r}: the name has blank space or "
                          f"quotes around it, which no endpoint's model name has; give it "
                          f"without them, e.g. {_example(option, bare + text[len(name_part):])}")
    if match is not None:
        name, url = text[:match.start()], text[match.end():]
        if not name:
            raise ConfigError(f"{_given(option, text)}: give the model name before @, e.g. "
                              f"{_example(option, 'Qwen/Qwen3-8B@' + url)}")
        if url != url.strip():  # ("URL  is not an http(s) URL" named no blank space)
            raise ConfigError(f"{option} {without_keys(text)!r}: the URL after @ has blank space "
                              f"around it; give it without, e.g. "
                              f"{_example(option, name + '@' + url.strip())}")
        return name, url
    name, at, after = text.rpartition("@")
    if not at or not name:  # (Cloudflare's names begin with @: @cf/meta/llama-3.1-8b-instruct)
        return text, None
    if not after:
        raise ConfigError(f"{_given(option, text)}: give the endpoint's URL after @, e.g. "
                          f"{_example(option, name + '@http://localhost:8000/v1')}")
    if after != after.strip() and _URL_START.match("@" + after.strip()):
        raise ConfigError(f"{option} {without_keys(text)!r}: the URL after @ has blank space "
                          f"around it; give it without, e.g. "
                          f"{_example(option, name + '@' + after.strip())}")
    host = after.split("://")[-1].split("/")[0]
    if "://" in after or (("/" in after or ":" in after)
                          and ("." in host or ":" in host or host == "localhost")):
        # (a host without its scheme; not the provider-prefixed names of Cloudflare's AI
        # Gateway, workers-ai/@cf/meta/llama-3.1-8b-instruct)
        raise ConfigError(f"{_given(option, text)}: {after} is not an http(s) URL; give e.g. "
                          f"{name}@http://{after.split('://')[-1]}")
    return text, None


def refuse_a_file_for_the_folder(folder: str | Path) -> None:
    """Refuse a file (or a ``.jsonl`` name) where model selection writes its folder: a
    results file is what ``-o`` names with one ``--model``; with several it is the folder
    of their files, and a folder called x.jsonl would only confuse later readers."""
    folder = Path(folder)
    if folder.is_file() or folder.suffix == ".jsonl":
        raise ConfigError(said(f"-o {folder}: with several --model, -o names a folder (one "
                               f"results file per candidate), not a file; give e.g. "
                               f"-o {folder.with_suffix('')}",
                               f"output_dir={str(folder)!r}: model selection writes a folder "
                               f"(one results file per candidate), not a file; give e.g. "
                               f"output_dir={str(folder.with_suffix(''))!r}"))


def candidates_from(models: Sequence[Any], base_url: str | None,
                    api_key_env: str | None = None, *, shared: str = "--base-url",
                    option: str = "--model") -> list[Candidate]:
    """Candidates from ``--model`` values (``NAME`` or ``NAME@URL``) or `Model` records
    (``model_path``, ``base_url``, ``api_key_env`` and the sampling settings they set).

    A candidate without its own URL is served by ``base_url``; a ``base_url`` that serves
    none of them is refused, since it would be silently unused. Two candidates with the
    same name and endpoint are refused; the same name on two endpoints is ranked as
    ``NAME@URL``.
    """
    from ..config.environment import env_resolved
    from ..dsl.records import Model, is_http_url, query_problem, url_fault
    from ..models.endpoint import redact_url

    given = base_url
    if base_url is not None:
        base_url = env_resolved(base_url, shared)
    if base_url is not None and not is_http_url(base_url):
        shown = base_url if base_url == given else f"{given} (read as {base_url!r})"
        raise ConfigError(f"{shared} {without_keys(shown)}: {url_fault(base_url)}; give the "
                          f"endpoint's, e.g. http://localhost:8000/v1")
    if base_url is not None and (problem := query_problem(base_url, spelled("api_key_env"))):
        raise ConfigError(f"{shared}: {problem}")
    found: list[tuple[str, str | None, str | None, dict[str, Any], str]] = []
    for model in models:
        if isinstance(model, Model):
            if model.lora is not None:
                raise ConfigError(f"{_given(option, model.model_path)}: Model(..., lora=...) "
                                  f"trains adapters, and an evaluated model trains nothing; "
                                  f"drop lora (or evaluate a run's global_step_N folder)")
            own = own_sampling(model)
            url = model.base_url and env_resolved(
                model.base_url, f"{_given(option, model.model_path)}: Model.base_url")
            found.append((model.model_path, url, model.api_key_env, own, model.model_path))
        elif isinstance(model, str):
            name, url = split_model(env_resolved(model, _given(option, model)), option)
            found.append((name, url, None, {}, model))
        else:
            raise ConfigError(f"{_given(option, model)}: give a model name (a str, "
                              f"NAME@URL) or a tunedsl Model(...)")
    if base_url is not None and found and all(url is not None for _, url, *_ in found):
        # An unused shared URL is refused: the user may believe it serves some candidate.
        theirs, fix = (("@URL", "the @URL of the models") if option.startswith("-") else
                       ("@URL or base_url", "their own URL from the candidates"))
        raise ConfigError(f"{shared} {base_url} is used by no {option} (each gives its own "
                          f"{theirs}); drop it, or drop {fix} it serves")
    candidates: list[tuple[str, str, str | None, dict[str, Any]]] = []
    seen: dict[tuple[str, str], str] = {}
    for name, url, key_env, own, given in found:
        if url is None and base_url is None:
            if "@" in name and name.rpartition("@")[0]:
                model, _, after = name.rpartition("@")
                raise ConfigError(
                    f"{_given(option, given)}: no endpoint: {after!r} after @ is not an "
                    f"http(s) URL (a name may hold @); give {said('--base-url URL', 'base_url')} "
                    f"too, or e.g. {_example(option, model + '@http://localhost:8000/v1')}")
            if len(found) == 1:
                raise ConfigError(said("give --base-url URL and --model NAME (or --checkpoint "
                                       "DIR)", f"give {option} as NAME@URL"))
            if not option.startswith("-"):
                raise ConfigError(f"{_given(option, given)} has no endpoint: give base_url for "
                                  f"the candidates without one, or {name + '@URL'!r}")
            raise ConfigError(f"{option} {given} has no endpoint: give {shared} URL for "
                              f"every {option} without one, or {option} {name}@URL")
        if url is not None and not is_http_url(url):
            raise ConfigError(f"{_given(option, given)}: {url} is not an http(s) URL; give e.g. "
                              f"{name}@http://localhost:8000/v1")
        if url is not None and (problem := query_problem(url, spelled("api_key_env"))):
            raise ConfigError(f"{_given(option, given)}: {problem}")
        endpoint = url or base_url
        assert endpoint is not None  # a candidate without one was refused above
        if (name, endpoint) in seen:
            raise ConfigError(f"{_given(option, given)} is given twice; give each candidate "
                              f"once")
        seen[(name, endpoint)] = given
        candidates.append((name, endpoint, key_env or api_key_env, own))
    names = [name for name, *_ in candidates]
    return [Candidate(name=name, base_url=url, api_key_env=key_env, sampling=own,
                      label=name if names.count(name) == 1 else f"{name}@{redact_url(url)}")
            for name, url, key_env, own in candidates]


def own_sampling(model: Any) -> dict[str, Any]:
    """The sampling settings (and thinking switch) a `Model` record sets explicitly: what
    replaces the experiment's model's for it."""
    from ..dsl.chat import SAMPLING_KEYS
    from ..dsl.setting import explicit_fields

    return {key: getattr(model, key) for key in explicit_fields(model)
            if key in SAMPLING_KEYS or key == "enable_thinking"}


def result_paths(candidates: Sequence[Candidate], folder: str | Path) -> dict[str, Path]:
    """Each candidate's results file in ``folder``: the file there that holds its results
    (found by the model and endpoint its lines record, so a resume with another set of
    candidates finds it whatever it is named), else ``<label>.jsonl`` with the label made a
    safe file name. A name another model's file would share (as this command names them,
    as a file of the folder holding another model is named, or as a file system blind to
    case sees them) gets a short hash of the label, so it does not depend on the order
    the candidates were given in; a file of the same model at another endpoint keeps its
    name, and its resume is refused for the endpoint it names."""
    held = _results_files(Path(folder))
    paths: dict[str, Path] = {}
    for candidate in candidates:
        found = next((path for path, recorded in held.items()
                      if recorded == _recorded_key(candidate)), None)
        if found is not None:
            paths[candidate.label] = found
    # (a file that records no model keeps its name: the checks of its candidate name it)
    models = {path.stem.lower(): recorded[0] for path, recorded in held.items()
              if recorded is not None}
    new = [candidate for candidate in candidates if candidate.label not in paths]
    stems = [candidate.file_stem.lower() for candidate in new]
    for candidate, stem in zip(new, stems):
        name = candidate.file_stem
        if stems.count(stem) > 1 or models.get(stem, candidate.name) != candidate.name:
            name += "-" + hashlib.sha1(candidate.label.encode()).hexdigest()[:8]
        paths[candidate.label] = Path(folder) / f"{name}.jsonl"
    return paths


def _recorded_key(candidate: Candidate) -> tuple[str, str]:
    """What a candidate's results lines record of it (`candidate_settings`)."""
    from ..models.endpoint import redact_url

    return candidate.name, redact_url(candidate.base_url) or ""


def _results_files(folder: Path) -> dict[Path, tuple[str, str] | None]:
    """The ``.jsonl`` files of ``folder``, each with the model and endpoint its first line
    records (None: not results, or unreadable; the candidates' own checks name them)."""
    import json

    found: dict[Path, tuple[str, str] | None] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.jsonl")):
        try:
            if not path.stat().st_size:  # (an interrupted start: its candidate goes on in it)
                continue
            found[path] = None
            with open(path, encoding="utf-8") as handle:
                first = json.loads(handle.readline(1_000_000) or "null")
        except (OSError, ValueError, RecursionError):
            continue
        settings = first.get("eval_settings") if isinstance(first, dict) else None
        if isinstance(settings, dict) and isinstance(settings.get("model"), str) and \
                isinstance(settings.get("base_url"), str):
            found[path] = (settings["model"], settings["base_url"])
    return found


def paired_bootstrap(best: Any, other: Any, *, confidence: float = CONFIDENCE,
                     resamples: int = RESAMPLES, seed: int = SEED) -> tuple[float, float, float]:
    """``other``'s mean reward minus ``best``'s, and the percentile bootstrap interval of
    that difference: ``(difference, low, high)``.

    ``best`` and ``other`` are ``(tasks, repeats)`` reward arrays, paired by task and
    repeat. Tasks are resampled with all their repeats, since two rollouts of one task
    are not independent evidence. The same seed draws the same resamples for every
    candidate, so the intervals of one ranking are comparable.
    """
    import numpy as np

    per_task = (np.asarray(other, dtype=float) - np.asarray(best, dtype=float)).mean(axis=1)
    tasks = len(per_task)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // tasks)  # bounds the index array's memory on big eval sets
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        picks = rng.integers(0, tasks, size=(stop - start, tasks))
        means[start:stop] = per_task[picks].mean(axis=1)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(means, [tail, 1.0 - tail])
    # + 0.0 turns a -0.0 into 0.0, which would print as "-0.0000" beside "includes 0".
    return float(per_task.mean()) + 0.0, float(low) + 0.0, float(high) + 0.0


def reward_matrix(records: Iterable[Mapping[str, Any]], tasks: int, repeat: int,
                  where: str = "results") -> Any:
    """The ``(tasks, repeat)`` rewards of one candidate, a failed rollout counting 0 (the
    last line for a task and repeat counts, as in `summarize`)."""
    import numpy as np

    latest = {(r["task_index"], r["repeat"]): r for r in records}
    missing = [(i, k) for i in range(tasks) for k in range(repeat) if (i, k) not in latest]
    if missing:
        i, k = missing[0]
        raise ConfigError(f"{where}: no result for task {i} repeat {k} ({len(missing)} "
                          f"missing); continue it with {wording.option('resume')}")
    return np.array([[0.0 if latest[i, k].get("error") is not None
                      else float(latest[i, k]["reward"]) for k in range(repeat)]
                     for i in range(tasks)])


@attrs.frozen(kw_only=True)
class Standing:
    """One candidate's place in a `Ranking`."""

    label: str
    name: str
    base_url: str | None
    results: Path | None
    rollouts: int
    errors: int
    #: Mean reward over every rollout, a failed one counting 0.
    mean: float
    #: pass@k (k = the repeats) over every task, a failed rollout counting as not passed;
    #: None with one repeat.
    pass_at: float | None
    latency_p50: float | None
    prompt_tokens: int
    completion_tokens: int
    #: ``mean - best.mean`` and its bootstrap interval; None for the best itself.
    difference: float | None = None
    interval: tuple[float, float] | None = None
    error_messages: tuple[str, ...] = ()
    #: The model calls its rollouts made, and those cut at ``max_tokens`` (`EvalSummary`).
    model_calls: int = 0
    cut_calls: int = 0
    #: Its rollouts whose judge failed after the workflow finished (`EvalSummary`).
    judge_errors: int = 0

    @property
    def distinguishable(self) -> bool | None:
        """Whether the interval of its difference from the best excludes 0 (None for the
        best itself)."""
        if self.interval is None:
            return None
        return not self.interval[0] <= 0.0 <= self.interval[1]


@attrs.frozen(kw_only=True)
class Ranking:
    """Candidates ranked by mean reward, best first, with paired bootstrap intervals."""

    standings: tuple[Standing, ...]
    tasks: int
    repeat: int
    #: ``"eval_dataset"``, or ``"train_dataset"`` when the experiment has no eval dataset.
    dataset: str
    confidence: float = CONFIDENCE
    resamples: int = RESAMPLES
    seed: int = SEED
    notes: tuple[str, ...] = ()

    @property
    def best(self) -> Standing:
        """The candidate with the highest mean reward."""
        return self.standings[0]

    @property
    def runner_up(self) -> Standing | None:
        """The second candidate, or None."""
        return self.standings[1] if len(self.standings) > 1 else None

    @property
    def best_is_distinguishable(self) -> bool | None:
        """Whether the best is told apart from the runner-up (None with one candidate)."""
        return None if self.runner_up is None else self.runner_up.distinguishable

    def verdict(self) -> str:
        """The ranking's conclusion in one sentence."""
        best, second = self.best, self.runner_up
        if second is None:
            return f"{best.label} is the only candidate"
        level = f"{self.confidence:.0%}"
        low, high = second.interval or (0.0, 0.0)
        if second.distinguishable:
            return (f"{best.label} is better than {second.label}: the {level} interval of "
                    f"their difference, [{low:+.4f}, {high:+.4f}], excludes 0")
        return (f"{best.label} is not distinguishable from {second.label}: the {level} "
                f"interval of their difference, [{low:+.4f}, {high:+.4f}], includes 0; more "
                f"tasks may tell them apart, else choose on cost and latency")

    def table(self) -> list[str]:
        """The ranking table, a header and one line per candidate."""
        level = f"{self.confidence:.0%}"
        header = ["#", "model", "reward"]
        if self.repeat > 1:
            header.append(f"pass@{self.repeat}")
        header += ["errors", "p50 (s)", "tokens in/out", "vs best", f"{level} interval", ""]
        rows = [header]
        for place, s in enumerate(self.standings, 1):
            row = [str(place), s.label, f"{s.mean:.4f}"]
            if self.repeat > 1:
                row.append(f"{s.pass_at:.4f}")
            row += [f"{s.errors}/{s.rollouts}",
                    "-" if s.latency_p50 is None else f"{s.latency_p50:.3f}",
                    f"{s.prompt_tokens}/{s.completion_tokens}"]
            if s.interval is None:
                row += ["best", "", ""]
            else:
                row += [f"{s.difference:+.4f}", f"[{s.interval[0]:+.4f}, {s.interval[1]:+.4f}]",
                        "worse" if s.distinguishable else "not distinguishable"]
            rows.append(row)
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                for row in rows]

    def lines(self) -> list[str]:
        """The whole report: what was compared, the table, the verdict, the method, notes
        and each failing candidate's first error."""
        repeats = f"{self.repeat} repeat{'s' if self.repeat > 1 else ''}"
        lines = [(f"ranking      {len(self.standings)} candidates, each on the same {self.tasks} "
                  f"tasks x {repeats} of the {self.dataset}")]
        lines += self.table()
        lines.append(f"verdict      {self.verdict()}")
        lines.append(f"method       paired bootstrap over tasks, {self.confidence:.0%} "
                     f"interval, {self.resamples} resamples, seed {self.seed}; a failed "
                     f"rollout counts as reward 0")
        lines += [f"note         {note}" for note in self.notes]
        lines += [f"error        {s.label}: {s.error_messages[0]}"
                  for s in self.standings if s.error_messages]
        return lines

    def print(self, out: Any = None) -> None:
        """Print the report (to stdout as it is at the call)."""
        print_lines(self.lines(), out)


def rank(results: Mapping[str, Sequence[Mapping[str, Any]]], *, tasks: int, repeat: int,
         dataset: str = "eval_dataset", candidates: Sequence[Candidate] = (),
         paths: Mapping[str, Path] | None = None, bootstrap: Bootstrap = Bootstrap(),
         notes: Sequence[str] = ()) -> Ranking:
    """Rank candidates from their result lines (label -> records of one results file).

    The best has the highest mean reward (ties: fewer errors, then the order given);
    every other candidate gets its difference from the best and its interval.
    """
    from .evaluate import pass_at_k, summarize

    confidence, resamples, seed = bootstrap.confidence, bootstrap.resamples, bootstrap.seed
    if not 0.0 < confidence < 1.0 or resamples < 1:
        raise ConfigError(f"confidence must be between 0 and 1 and resamples at least 1 (got "
                          f"{confidence}, {resamples})")
    by_label = {c.label: c for c in candidates}
    matrices, standings = {}, []
    for label, records in results.items():
        where = str((paths or {}).get(label, label))
        matrix = matrices[label] = reward_matrix(records, tasks, repeat, where)
        summary = summarize([dict(record) for record in records], repeat)
        scored = {(r["task_index"], r["repeat"]): r.get("error") is None for r in records}
        passed = None
        if repeat > 1:
            passed = sum(pass_at_k(repeat, sum(bool(scored[i, k]) and matrix[i, k] >= 1.0
                                               for k in range(repeat)), repeat)
                         for i in range(tasks)) / tasks
        candidate = by_label.get(label)
        standings.append(Standing(
            label=label, name=candidate.name if candidate else label,
            base_url=candidate.base_url if candidate else None,
            results=(paths or {}).get(label), rollouts=tasks * repeat,
            errors=summary.errors, mean=float(matrix.mean()), pass_at=passed,
            latency_p50=summary.latency.get("p50"), prompt_tokens=summary.prompt_tokens,
            completion_tokens=summary.completion_tokens,
            error_messages=summary.error_messages, model_calls=summary.model_calls,
            cut_calls=summary.cut_calls, judge_errors=summary.judge_errors))
    order = sorted(range(len(standings)),
                   key=lambda i: (-standings[i].mean, standings[i].errors, i))
    standings = [standings[i] for i in order]
    best = matrices[standings[0].label]
    ranked = [standings[0]]
    for standing in standings[1:]:
        difference, low, high = paired_bootstrap(best, matrices[standing.label],
                                                 confidence=confidence, resamples=resamples,
                                                 seed=seed)
        ranked.append(attrs.evolve(standing, difference=difference, interval=(low, high)))
    notes = list(notes)
    if tasks < FEW_TASKS and len(ranked) > 1:
        notes.append(f"only {tasks} task{'s' if tasks > 1 else ''}: a bootstrap over so few "
                     f"is too narrow to trust; evaluate on at least {FEW_TASKS}")
    return Ranking(standings=tuple(ranked), tasks=tasks, repeat=repeat, dataset=dataset,
                   confidence=confidence, resamples=resamples, seed=seed, notes=tuple(notes))


def training_split_note(graph: ExperimentGraph) -> str | None:
    """The note a ranking carries when the experiment has no eval dataset."""
    if graph.eval_dataset is not None:
        return None
    return ("the experiment has no eval_dataset, so the candidates were ranked on its "
            "train_dataset; a model picked on the tasks it is tuned on can look better than "
            "it is on new ones: give the experiment an eval_dataset of held-out tasks")


#: Makes the endpoint clients and model factories of one candidate's evaluation:
#: ``(clients to close, the policy's factory, auxiliary factories by name)``.
Endpoints = Callable[[Candidate], tuple[list[Any], Callable[[], Any], dict[str, Any]]]


def select(graph: ExperimentGraph, candidates: Sequence[Candidate], *, folder: str | Path,
           reach: Callable[[Candidate], Reached],
           settings: Callable[[Candidate], Mapping[str, Any]],
           scope: EvalScope = EvalScope(), execution: Execution = Execution(),
           bootstrap: Bootstrap = Bootstrap()) -> Ranking:
    """Evaluate each candidate into ``folder`` (one results file each) and rank them.

    Every candidate's file is checked (against ``settings(candidate)``, what its results
    keep of how it was reached) before any rollout runs (a file holding results without
    ``resume``, or one made with other settings, is refused), so a bad folder fails at
    once, not after the first candidates' evaluations. Candidates are evaluated one after
    another, each with ``execution.concurrency`` rollouts in flight; ``reach(candidate)``
    makes its models just before its evaluation, which closes their clients after it (an
    HTTP client belongs to the event loop it was used on).
    """
    from ..dsl.decorators import is_group_judge
    from ..rollout.run import Agent
    from ..runs.writing import JsonLines
    from .evaluate import (
        eval_rows,
        evaluate,
        prior_results,
        read_results,
        refuse_another_kind,
        run_settings,
    )

    if len(candidates) < 2:
        raise ConfigError(f"model selection needs at least two candidates (got "
                          f"{len(candidates)})")
    folder = Path(folder)
    refuse_a_file_for_the_folder(folder)
    paths = result_paths(candidates, folder)
    # A resume checks each file's lines against the rows before any candidate runs (each
    # candidate's evaluation checks its own again: the rows are read once more then).
    rows = eval_rows(graph, scope) if execution.resume and any(
        path.exists() for path in paths.values()) else None
    grouped = is_group_judge(Agent.from_graph(graph).judge)
    for candidate in candidates:
        path = paths[candidate.label]
        kept = run_settings(scope, settings(candidate), graph)
        refuse_another_kind(path, "results", "output_dir")  # the user's own: never results
        if not execution.resume and path.exists() and path.stat().st_size:
            raise ConfigError(f"{wording.option('output_dir', folder)} already holds results "
                              f"for {candidate.label} ({path}); add "
                              f"{wording.option('resume')} to continue them, or choose "
                              f"another folder")
        prior_results(path, execution.resume, kept, rows, grouped=grouped)
        # each candidate's file opened now: a read-only one (or folder) was found only
        # once the candidates before it had run (sweep 39 B W5)
        JsonLines(path, label=wording.given("output_dir", path), then="",
                  chosen=False).close()
    results = {}
    # written and read back by absolute path: a workflow may change the working folder
    written = {label: path.absolute() for label, path in paths.items()}

    def go_on() -> str:
        """What the folder keeps, as a stopped selection says it (the folder is what a
        resume continues, not one file of it); before any rollout finished, nothing (it
        said the folder kept rollouts it never had; sweep 50's known list)."""
        if not any(_holds_anything(path) for path in written.values()):
            return "no rollout had finished, so nothing was kept: run the same command to " \
                   "start again"
        return (f"{folder} keeps every rollout that finished: "
                f"{said('run the same command with', 'call again with')} "
                f"{wording.options(('output_dir', folder), 'resume')} to go on")

    try:
        for number, candidate in enumerate(candidates, 1):
            print(f"candidate {number}/{len(candidates)}: {candidate.label}", file=sys.stderr)
            try:
                evaluate(graph, reach(candidate), output=written[candidate.label],
                         scope=scope, execution=execution)
            except ExitInCallback as stopped:
                raise stopped.then(go_on()) from None
            results[candidate.label] = read_results(written[candidate.label])
        tasks = len({r["task_index"] for r in next(iter(results.values()))})
        note = training_split_note(graph)
        return rank(results, tasks=tasks, repeat=scope.repeat,
                    dataset="eval_dataset" if graph.eval_dataset is not None
                    else "train_dataset", candidates=candidates, paths=paths,
                    bootstrap=bootstrap, notes=[note] if note else [])
    except (RunInterrupted, KeyboardInterrupt):  # (also once the rollouts are over: it
        # was a bare "interrupted" while the files were read back and ranked)
        raise RunInterrupted(f"interrupted; {go_on()}") from None


def _holds_anything(path: Path) -> bool:
    """Whether a results file holds a line (one that cannot be read is said to hold some:
    better "keeps" than a false "nothing was kept")."""
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:
        return False
    except OSError:
        return True


def select_model(
    experiment: Any,
    candidate_models: Sequence[Any],
    *,
    base_url: str | None = None,
    api_key_env: str | None = None,
    auxiliary_models: Mapping[str, Any] | None = None,
    output_dir: str | Path | None = None,
    split: str | None = None,
    limit: int | None = None,
    repeat: int = 1,
    concurrency: int | None = None,
    max_threads: int | None = None,
    resume: bool = False,
    progress: bool = True,
    bootstrap: Bootstrap | None = None,
) -> Ranking:
    """Evaluate the experiment with each candidate model and rank them (``tunedsl eval
    --model A --model B`` in Python).

    Each candidate runs the experiment's workflow and judge on the same tasks and
    repeats of its eval dataset (its train dataset when it has none, with a note), one
    results file each in ``output_dir``. The ranking gives each candidate's mean reward
    (a failed rollout counts 0 and is counted in ``errors``), pass@k, latency and tokens,
    and the paired bootstrap interval of its difference from the best.

    AgentScope's ``select_model`` takes ``workflow_func``, ``judge_func`` and
    ``train_dataset``; here they are the experiment's (``tune(..., dry_run=True)``
    builds one from them), and ``candidate_models``, ``auxiliary_models`` and
    ``max_threads`` keep AgentScope's names. Unlike AgentScope's, this is a plain
    function (it runs its own event loop) and returns a `Ranking`, not
    ``(best_model, metrics)``: ``ranking.best.name`` is the winner's model name, and
    ``ranking.best_is_distinguishable`` says whether it is told apart from the next.

    Args:
        experiment: ``"pkg.mod:Attr"``, ``"path/file.py:Attr"``, the class, or a graph
            (`load_experiment` applies settings files and overrides).
        candidate_models: At least two. Each a model name served by ``base_url``, a
            ``"NAME@URL"`` string, or a `Model` record: ``Model("gpt-4o-mini",
            base_url=..., api_key_env=...)``, whose ``model_path`` is the name sent, whose
            ``base_url`` (else ``base_url``) serves it, and whose sampling settings set
            explicitly (``temperature``, ``max_tokens``, ...) replace the experiment's
            model's; the rest come from the experiment's model, so candidates are asked
            alike.
        base_url: The endpoint of the candidates that name none.
        api_key_env: The environment variable holding the API key, for candidates whose
            record names none (read now, never stored).
        auxiliary_models: `Model` records with ``base_url`` for the experiment's
            auxiliary models, by name (those the experiment serves from an endpoint
            need none).
        output_dir: The folder of results files, ``<model>.jsonl`` each (default
            ``evals/<experiment>-<timestamp>``).
        split, limit, repeat: As `tunedsl eval`'s ``--split``, ``-n``, ``--repeat``.
        concurrency: Rollouts in flight (``max_threads`` is AgentScope's name for it).
        resume: Continue ``output_dir``: only missing or failed rollouts run, and
            candidates new to the folder are evaluated in full.
        bootstrap: The paired bootstrap's interval (95%), resamples (10000) and seed (0,
            so the same results give the same ranking): a `Bootstrap`.
    """
    refuse_while_imported("tunedsl.select_model")
    arguments.outside_an_event_loop("tunedsl.select_model")
    arguments.flag("resume", resume)
    arguments.flag("progress", progress)
    if resume and output_dir is None:  # else a new folder: every candidate called again
        raise ConfigError("resume continues a model selection: give its folder as output_dir")
    from ..config.graph import ExperimentGraph
    from ..config.load import load_experiment
    from ..rollout.run import DEFAULT_CONCURRENCY

    if isinstance(candidate_models, str):
        raise ConfigError(f"candidate_models={candidate_models!r}: give a list of models, not "
                          f"one string; write candidate_models=[{candidate_models!r}, ...]")
    bootstrap = Bootstrap() if bootstrap is None else bootstrap
    if not isinstance(bootstrap, Bootstrap):
        raise ConfigError(f"bootstrap={bootstrap!r}: give a tunedsl Bootstrap(confidence=..., "
                          f"resamples=..., seed=...)")
    arguments.whole("repeat", repeat)
    arguments.whole("bootstrap.resamples", bootstrap.resamples)
    if bootstrap.resamples > MOST_RESAMPLES:  # each resample is a row of a matrix in memory
        raise ConfigError(f"bootstrap.resamples={bootstrap.resamples}: give at most "
                          f"{MOST_RESAMPLES} (the default, {RESAMPLES}, is plenty)")
    for count, number in (("limit", limit), ("concurrency", concurrency),
                          ("max_threads", max_threads)):
        arguments.whole(count, number, optional=True)
    arguments.whole("bootstrap.seed", bootstrap.seed, 0)
    arguments.fraction("bootstrap.confidence", bootstrap.confidence)
    arguments.text("split", split, optional=True)
    output_dir = arguments.path("output_dir", output_dir)
    arguments.named("auxiliary_models", auxiliary_models)
    if max_threads is not None:
        if concurrency is not None and concurrency != max_threads:
            raise ConfigError("give concurrency or max_threads (AgentScope's name for it), "
                              "not both")
        concurrency = max_threads
    arguments.whole("repeat", repeat)
    candidates = candidates_from(list(candidate_models), base_url, api_key_env,
                                 shared="base_url", option="candidate_models")
    graph = experiment if isinstance(experiment, ExperimentGraph) else \
        load_experiment(experiment)
    auxiliary = served_auxiliary(graph, auxiliary_models)
    for candidate in candidates:
        check_key_variable(candidate.api_key_env)
    if output_dir is None:
        output_dir = Path(claimed_default(EVALS_DIR, graph.name, folder=True))
    return select(graph, candidates, folder=output_dir,
                  reach=lambda c: endpoint_reached(graph, c, auxiliary),
                  settings=lambda c: candidate_settings(c, auxiliary.kept),
                  scope=EvalScope(split=split, limit=limit, repeat=repeat),
                  execution=Execution(concurrency=DEFAULT_CONCURRENCY if concurrency is None
                                      else concurrency, resume=resume, progress=progress),
                  bootstrap=bootstrap)


def served_auxiliary(graph: ExperimentGraph,
                     auxiliary_models: Mapping[str, Any] | None) -> AuxiliaryPlan:
    """The experiment's auxiliary models as the Python API reaches them: those the
    experiment serves from an endpoint, and ``auxiliary_models``, `Model` records with
    ``base_url`` by name, which replace them (results keep those as ``--aux`` items)."""
    from ..dsl.records import Model
    from ..models.endpoint import auxiliary_endpoint, redact_url

    given = dict(auxiliary_models or {})
    for name, spec in given.items():
        if name not in graph.auxiliary_models:
            raise ConfigError(f"auxiliary_models: the experiment declares no auxiliary model "
                              f"{name!r} (it has: {', '.join(graph.auxiliary_models) or 'none'})")
        if not isinstance(spec, Model) or spec.base_url is None:
            raise ConfigError(f"auxiliary_models[{name!r}]: give a Model(..., base_url=...) "
                              f"serving it")
    served = {name: spec for name, spec in graph.auxiliary_models.items()
              if spec.base_url is not None}
    served.update(given)
    plan: dict[str, Callable[[], tuple[Any, Any]]] = {
        name: functools.partial(auxiliary_endpoint, spec, name) for name, spec in served.items()}
    # every endpoint, the experiment's own too: a resume after one moved would mix graders
    kept = sorted(f"{name}={redact_url(spec.base_url)},{spec.model_path}"
                  for name, spec in served.items())
    return AuxiliaryPlan(makers=plan, kept=kept)


def check_key_variable(variable: str | None) -> None:
    """Refuse an API key variable that is not set before any candidate runs."""
    from ..models.endpoint import read_api_key

    if variable is not None:
        read_api_key(variable, wording.spelled("api_key_env"))


def candidate_settings(candidate: Candidate, aux: Sequence[str]) -> dict[str, Any]:
    """What a candidate's results were made with, as ``tunedsl eval`` keeps it (so one
    candidate's file can be resumed by ``tunedsl eval`` alone, and the other way)."""
    from ..models.endpoint import redact_url

    kept: dict[str, Any] = {"model": candidate.name, "base_url": redact_url(candidate.base_url),
                            "checkpoint": None, "aux": sorted(aux)}
    if candidate.sampling:
        kept["sampling"] = dict(candidate.sampling)
    return kept


def endpoint_reached(graph: ExperimentGraph, candidate: Candidate,
                     auxiliary: AuxiliaryPlan) -> Reached:
    """The models of one candidate's evaluation: a client for the candidate (asked with
    the experiment's sampling settings, but those the candidate sets) and a fresh one per
    auxiliary model (a client does not outlive the candidate's event loop); its results
    keep `candidate_settings`."""
    from ..models.endpoint import endpoint_models

    spec = attrs.evolve(graph.model, **candidate.sampling) if candidate.sampling \
        else graph.model
    client, model = endpoint_models(spec, base_url=candidate.base_url,
                                    model_name=candidate.name,
                                    api_key_env=candidate.api_key_env)
    clients, factories = auxiliary.made()
    return Reached(model=model, auxiliary=factories, clients=[client, *clients],
                   settings=candidate_settings(candidate, auxiliary.kept))
