"""Where a command may write: never over a file it reads, nor one the experiment names.

Every command that writes a file the user names (``config -o``, ``eval -o``, ``rescore
-o``, ``view --out``) asks `refuse_overwriting` first, with the files it reads and the
experiment's own (`experiment_inputs`): its source, its settings file, its base Trinity
YAML, and its datasets. An output that is one of them, or lies inside a dataset folder
(where a new file could become part of the data), is refused in one line before anything is
written, so a typo in ``-o`` can never turn an experiment's code, data or results into YAML
or HTML.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from ..config.paths import home
from ..errors import ConfigError, TunedslError
from ..wording import given, said, spelled

if TYPE_CHECKING:
    from ..config.graph import ExperimentGraph


@attrs.frozen
class Input:
    """A file or folder a command reads.

    Attributes:
        label: What it is, for the message (``the experiment's source``).
        path: Where it is.
        whole_folder: For a folder: nothing may be written anywhere inside it (a dataset's
            folder); otherwise only its existing files are protected (a run directory).
    """

    label: str
    path: str
    whole_folder: bool = False


def experiment_inputs(graph: ExperimentGraph, settings: str | None = None) -> list[Input]:
    """The files an experiment is made of: the module of its class and of its workflow and
    judge, the settings file it was built with (``settings``: ``--settings``), its base
    Trinity YAML and its local datasets."""
    from ..config.graph import DATASET_SECTIONS
    from ..config.importer import load_object
    from ..config.paths import local_path
    from ..config.settings import toml_layers
    from ..dsl.decorators import spec_of

    inputs: list[Input] = []
    try:  # a class a function made (make.<locals>.X) has no name to import it by again
        spec = spec_of(load_object(graph.source)) if graph.source is not None else None
    except TunedslError:
        spec = None
    if spec is not None:
        inputs.append(Input("the experiment's source", spec.file))
        for layer in toml_layers(spec, settings):
            if layer.file is not None:
                inputs.append(Input("the experiment's settings file", layer.file))
    else:  # its module's file, which the class was made in
        from ..config.importer import import_module

        try:
            module = import_module((graph.source or "").rpartition(":")[0])
        except TunedslError:
            module = None
        module_file = getattr(module, "__file__", None)
        if isinstance(module_file, str):
            inputs.append(Input("the experiment's source", module_file))
        if settings is not None:
            inputs.append(Input("the experiment's settings file", settings))
    for function in (graph.workflow, graph.judge):
        if function is not None:
            inputs.append(Input(f"the source of @{function.kind} {function.qualname}",
                                function.file))
    if graph.trinity_config is not None:
        inputs.append(Input("the experiment's base Trinity YAML", graph.trinity_config))
    for section in DATASET_SECTIONS:
        dataset = getattr(graph, section, None)
        if dataset is not None and os.path.exists(local_path(dataset)):
            inputs.append(Input(f"{section}'s data", local_path(dataset), whole_folder=True))
    return inputs


def run_data_inputs(run_dir: str | os.PathLike[str]) -> list[Input]:
    """The local dataset folders a run directory's ``experiment.yaml`` names: a page or a
    file written inside one would join the data the run (and a resume of it) reads. An
    unreadable file names none: the viewer says what is wrong with it."""
    from ..config.graph import DATASET_SECTIONS
    from .run_files import EXPERIMENT_YAML
    from .rundir import read_run_yaml

    try:
        recorded = read_run_yaml(Path(run_dir), EXPERIMENT_YAML, str(run_dir))
    except ConfigError:
        return []
    found = []
    for section in DATASET_SECTIONS:
        dataset = recorded.get(section) if isinstance(recorded, dict) else None
        path = dataset.get("path") if isinstance(dataset, dict) else None
        if isinstance(path, str) and os.path.isabs(path) and os.path.exists(path):
            found.append(Input(f"the run's {section} data", path, whole_folder=True))
    return found


def _linked(target: Path, source: Path) -> Path | None:
    """The file ``target`` is a hard link to: ``source`` or, for a folder, one of its files
    (the same bytes under another name, which writing would replace); else None."""
    try:
        if not target.is_file() or target.stat().st_nlink < 2:
            return None
        files = source.rglob("*") if source.is_dir() else [source]
        return next((file for file in files
                     if file.is_file() and os.path.samefile(file, target)), None)
    except OSError:
        return None


@attrs.frozen
class Written:
    """What a command writes to a file the user names, and tunedsl's mark in such a file (a
    first comment, a generator tag): an existing file without the mark (the user's own
    config, page or prompt file, results, code) is never replaced, even when it is of the
    same kind. A file an older tunedsl wrote without the mark is refused too, and is
    replaced once removed by hand.

    Attributes:
        label: What it is, for the message (``a Trinity config``).
        mark: The text every such file holds, written by the command.
        first_line: Whether the mark is the file's first line (else within its head).
    """

    label: str
    mark: str
    first_line: bool = True
    #: Whether the file ends in a comment holding a digest of the rest (`sealed`), so that
    #: one edited by hand since is not replaced (a config or a params file a user may tune;
    #: an HTML page is regenerated, never edited).
    sealed: bool = False
    #: The file endings of such a file: one of them without the mark may be an older copy
    #: the user means to replace (removing it is said); another is something else.
    suffixes: tuple[str, ...] = ()

    def looks_like(self, text: str) -> bool:
        """Whether a file's first 64 KB (as text) are one tunedsl wrote."""
        return text.startswith(self.mark) if self.first_line else self.mark in text[:4096]

    def seal(self, text: str) -> str:
        """``text`` (ending in a newline) as written: with its digest line, if `sealed`."""
        if not self.sealed:
            return text
        from ..data.json_text import text_digest

        return f"{text}{_DIGEST_LINE}{text_digest(text)}\n"

    def edited(self, text: str) -> bool:
        """Whether a whole file tunedsl wrote (`looks_like`) was changed since: its last
        line is not the digest of the rest (a file written before tunedsl sealed its
        files counts as edited: nothing tells)."""
        if not self.sealed:
            return False
        from ..data.json_text import text_digest

        body, _, last = text.removesuffix("\n").rpartition("\n")
        return not text.endswith("\n") or last != _DIGEST_LINE + text_digest(body + "\n")


#: How a sealed file's last line begins (a comment in YAML and TOML alike).
_DIGEST_LINE = "# tunedsl digest of the lines above: "
#: How much of a sealed file is read to check its digest (a config or a params file is
#: far smaller; a bigger one was not written by tunedsl as it is).
_SEALED_READ = 16 << 20


#: How much of a JSON Lines file's first line is read to tell its kind (a line of long
#: replies runs to megabytes).
_FIRST_LINE_READ = 64 << 20
#: What each kind of JSON Lines file tunedsl writes holds, as messages say it.
JSONL_KINDS = {"candidates": "a tune-prompt candidates file", "results": "eval results",
               "rollouts": "a run's rollouts (its rollouts.jsonl)",
               "metrics": "a run's metrics (its metrics.jsonl)",
               "trainer_state": "a checkpoint's trainer state (its trainer_state.json)"}

#: The keys of a checkpoint's ``trainer_state.json`` beside its step (the local backend's).
_TRAINER_STATE_KEYS = frozenset({"step", "seed", "total_steps"})


def jsonl_kind(path: Path) -> tuple[str | None, str] | None:
    """Which kind of JSON Lines file tunedsl writes ``path`` is, by its first line (a key
    of `JSONL_KINDS`, or None), and that line (stripped); None when it cannot be read."""
    import json
    import re

    try:
        with path.open("rb") as handle:
            head = handle.readline(_FIRST_LINE_READ).decode("utf-8-sig", errors="replace")
    except OSError:
        return None
    head = head.strip()
    try:
        first = json.loads(head)
    except ValueError:  # damaged (its reader names the line), or not JSON at all
        begins = re.match(r'\{\s*"(kind|task_index)"', head)
        first = {begins[1]: None} if begins else None
    run_file = isinstance(first, dict) and "step" in first  # (a run's: sweep 47 B-W7)
    # A metrics line names its metrics by section (rollout/reward/mean, eval/...): a user's
    # own log of {"step": 3, "loss": 0.5} is no run's, nor a checkpoint's trainer state
    # (both were said as a run's metrics; sweep 50 B-W3).
    kind = ("candidates" if isinstance(first, dict) and "kind" in first else
            "rollouts" if run_file and "calls" in first else
            "trainer_state" if run_file and set(first) == _TRAINER_STATE_KEYS else
            "metrics" if run_file and any("/" in str(key) for key in first) else
            "results" if isinstance(first, dict) and "task_index" in first else None)
    return kind, head


def _a_run_s_file(path: Path, shown: Path) -> str | None:
    """``a run's config.yaml`` for a file a run directory holds under a name a run writes
    (beside the run's experiment.yaml), else None; the folder ``shown`` as given."""
    from .run_files import EXPERIMENT_YAML, RUN_FILES

    if path.name in RUN_FILES and (path.parent / EXPERIMENT_YAML).is_file():
        return f"a run's {path.name} (in the run directory {shown})"
    return None


#: Endings of the formats tunedsl and its users' tools read: an output named with one of
#: another format's would misname it (tunedsl's own readers would take it for that).
FORMAT_ENDINGS = frozenset({".json", ".jsonl", ".toml", ".yaml", ".yml", ".py", ".csv",
                            ".tsv", ".parquet", ".html", ".htm", ".txt", ".md", ".ini",
                            ".cfg"})


def refuse_misnamed(out: str | os.PathLike[str], label: str, writes: str,
                    endings: tuple[str, ...]) -> None:
    """Refuse an output ``out`` (given as ``label``: ``output``, ``-o``) named as a file of
    another format than ``writes`` says (``eval writes its results as JSON Lines``): its
    ending is in `FORMAT_ENDINGS` and not in ``endings``, the first of which is suggested.
    (``eval -o tunedsl.toml`` wrote results where the next command reads its settings.)"""
    ending = Path(out).suffix.lower()
    if ending in FORMAT_ENDINGS and ending not in endings:
        raise ConfigError(f"{given(label, out)}: {writes}, which that name would misname; "
                          f"give a {endings[0]} name, e.g. "
                          f"{given(label, Path(out).with_suffix(endings[0]))}")


#: What ``config -o`` writes.
TRINITY_YAML = Written("a Trinity config", "# A Trinity-RFT config written by tunedsl config",
                       sealed=True, suffixes=(".yaml", ".yml"))
#: What ``tune-prompt -o`` writes.
PARAMS_TOML = Written("a [params] settings file", "# tunedsl tune-prompt", sealed=True,
                      suffixes=(".toml",))
#: What ``view --out`` writes.
HTML_PAGE = Written("an HTML page", '<meta name="generator" content="tunedsl view">',
                    first_line=False, suffixes=(".html", ".htm"))


def refuse_a_compressed_name(path: str | os.PathLike[str], named: str, what: str,
                             instead: str) -> None:
    """Refuse an output ``path`` named like a compressed file (``r.jsonl.gz``): tunedsl
    writes ``what`` as plain text, which no reader would decompress under that name.

    Raises:
        ConfigError: naming it as ``named``, with ``instead`` when the name is the ending
            alone.
    """
    from ..data.datasets import COMPRESSED_ENDINGS

    name = Path(path).name
    packed = next((ending for ending in COMPRESSED_ENDINGS if name.lower().endswith(ending)),
                  None)
    if packed is not None:
        raise ConfigError(f"{named}: tunedsl writes {what}, which a {packed} name would "
                          f"misname; give {name[:-len(packed)] or instead} and compress it "
                          f"afterwards if you like")


def refuse_overwriting(output: str | os.PathLike[str], option: str,
                       inputs: Iterable[Input], writes: Written | None = None) -> None:
    """Raise a `ConfigError` when ``output`` (given as ``option``: its key in
    `wording.OPTIONS`, or a flag only the command line has) is one of ``inputs``, an
    existing file inside one of their folders, or anything inside a whole folder; or,
    given what the command ``writes``, an existing non-empty file that is not one (a file
    tunedsl replaces is one it wrote for that same output)."""
    named = given(option, output)  # an option's key in wording.OPTIONS, or a flag
    if not str(output).strip():
        raise ConfigError(f"{said(f'{spelled(option)} {str(output)!r}', named)}: give a "
                          f"file name")
    if str(output).endswith(("/", os.sep)):  # Path() drops it: the file would take its name
        raise ConfigError(f"{named}: ends in '/', so it names a folder; give a file, e.g. "
                          f"{os.path.join(str(output), 'NAME')}")
    try:
        target = Path(home(os.fspath(output))).resolve()
    except (RuntimeError, OSError):  # Python 3.11 raises RuntimeError for a loop
        raise ConfigError(f"{named}: a symbolic link that loops (itself, or a folder on its "
                          f"way); give a file") from None
    try:
        os.stat(target)
    except (FileNotFoundError, NotADirectoryError):
        pass  # a new file (a file on its way is said below)
    except OSError as exc:  # a name past 255 bytes, a folder that cannot be read
        from ..access import searchable, unsearchable_folder

        folder = unsearchable_folder(home(os.fspath(output)))
        fix = ("a file or folder name holds at most 255 bytes; give a shorter one"
               if exc.errno == errno.ENAMETOOLONG else
               f"{searchable(folder)}, or give a path you can reach"
               if folder is not None else "give a file in a folder you can read")
        raise ConfigError(f"{named}: cannot use that path ({exc.strerror}); {fix}") from None
    blocking = next((folder for folder in Path(home(os.fspath(output))).parents
                     if folder.is_file()), None)
    if blocking is not None:  # else found only when the output is written, after the work
        raise ConfigError(f"{named}: {blocking} is a file, not a folder; give a file in a "
                          f"folder")
    if writes is not None:
        refuse_a_compressed_name(output, named, f"{writes.label} as plain text",
                                 "another name")
    if target.exists() and not target.is_file() and not target.is_dir():
        # written beside and renamed into place: /dev/null itself would be replaced
        raise ConfigError(f"{named}: not a regular file (a device or a pipe), which "
                          f"writing the output would replace; give a file")
    for read in inputs:
        try:
            source = Path(home(os.fspath(read.path))).resolve()
        except (RuntimeError, OSError):  # an input that loops is said by its own reader
            continue
        linked = _linked(target, source)
        if target == source:
            where = f"that is {read.label} ({read.path})"
        elif linked is not None:
            where = f"that is a hard link to {read.label} ({linked})"
        elif source.is_dir() and source in target.parents and read.whole_folder:
            raise ConfigError(f"{named}: that is inside {read.label} "
                              f"({read.path}), where a new file would join the data; give a "
                              f"file elsewhere")
        elif source.is_dir() and source in target.parents and target.exists():
            where = f"that is a file of {read.label} ({read.path})"
        else:
            continue
        raise ConfigError(f"{named}: {where}; tunedsl never writes over what it "
                          f"reads, so give a file elsewhere")
    if writes is not None and target.is_file() and target.stat().st_size:
        with target.open("rb") as handle:
            text = handle.read(_SEALED_READ if writes.sealed else 65536).decode(
                "utf-8", errors="replace")
        if writes.looks_like(text) and writes.edited(text):
            raise ConfigError(f"{named}: tunedsl wrote that file, but it was changed since "
                              f"(its last line is not tunedsl's digest of the rest); "
                              f"tunedsl replaces only a file it wrote that nobody changed, "
                              f"so give another path, or remove that file to replace it")
        if not writes.looks_like(text):
            kind = (jsonl_kind(target) or (None, ""))[0]
            held = JSONL_KINDS[kind] if kind is not None else \
                _a_run_s_file(target, Path(home(os.fspath(output))).parent)
            if held is not None:  # (another output's: "remove that file" was the advice)
                raise ConfigError(f"{named}: that file holds {held}; tunedsl never writes "
                                  f"over it, so give another path")
            first = next((line.strip() for line in text.splitlines() if line.strip()), "")
            # (removing it is advice only for a file of the output's own kind: not for the
            # experiment's module, the data, a run's config.yaml: sweep 48 B-W3)
            remove = " or remove that file" if target.suffix.lower() in writes.suffixes \
                else ""
            raise ConfigError(f"{named}: that file is not {writes.label} this "
                              f"command wrote (it lacks tunedsl's mark {writes.mark!r}; its "
                              f"first line: {first[:60]!r}); tunedsl replaces only a file it "
                              f"wrote for this same output, so give another path{remove}")
