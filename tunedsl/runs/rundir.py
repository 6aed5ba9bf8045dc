"""Run directories: ``<checkpoint_root_dir>/<project>/<name>-<YYYYmmddHHMMSS>/``.

Every backend writes the same files before it starts: ``experiment.yaml`` (the
resolved experiment graph) and ``config.yaml`` (the Trinity-RFT config, which the
caller hands over as text; strings read from the environment stay
``${oc.env:...}`` references, so no secret is written). A run is resumed only when
asked, by naming its directory, and only with the settings it started with. The names
of the files and folders of a run directory are defined in `run_files`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ..config.graph import ExperimentGraph, make_converter
from ..config.nested import flatten
from ..dsl.settings_table import resumable_settings
from ..errors import ConfigError, RunError
from ..wording import option, said
from .run_files import (
    CODE_DIGESTS_JSON,
    CONFIG_YAML,
    DATA_DIGESTS_JSON,
    EXPERIMENT_YAML,
    LOCK_FILE,
    RUN_DIRS,
    RUN_FILES,
    STEP_DIR_PATTERN,
    WARMUP_DIR,
    WARMUP_ENDED_JSON,
    is_stamped,
    stamped,
)


def run_name(graph: ExperimentGraph, now: _dt.datetime | None = None) -> str:
    """``<name>-<YYYYmmddHHMMSS>``: every run of a named experiment gets its own folder."""
    return stamped(graph.name, now)


def newest_run_dir(graph: ExperimentGraph) -> Path:
    """The newest run directory of this experiment (``<name>-<YYYYmmddHHMMSS>`` under
    ``<checkpoint_root_dir>/<project>/``, holding its ``experiment.yaml``): what a resume
    that names no run directory continues."""
    parent = Path(graph.checkpoint_root_dir) / graph.project
    runs = sorted(folder for folder in (parent.iterdir() if parent.is_dir() else ())
                  if is_stamped(folder.name, graph.name) and (folder / EXPERIMENT_YAML).is_file())
    if not runs:
        raise ConfigError(f"{option('resume')}: {graph.name} has no run to continue in "
                          f"{parent} (runs are named {graph.name}-YYYYmmddHHMMSS); name the "
                          f"run directory: {said('--resume RUN_DIR', 'resume=RUN_DIR')}")
    return runs[-1]


def create_run_dir(graph: ExperimentGraph, run_name: str) -> Path:
    """Make a fresh run directory; refuse to reuse one (that would mix two runs)."""
    folder = Path(graph.checkpoint_root_dir) / graph.project / run_name
    try:
        folder.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise ConfigError(f"run directory {folder} already exists; resume it with "
                          f"{option('resume', folder)}, or let a new timestamp name a new "
                          f"run") from None
    except OSError as exc:
        blocking = next((Path(parent) for parent in reversed(folder.parents)
                         if parent.exists() and not parent.is_dir()), None)
        if blocking is not None:  # "Not a directory" named no file
            raise ConfigError(f"checkpoint_root_dir: cannot make the run directory: "
                              f"{blocking} is a file, not a folder; move it, or set "
                              f"checkpoint_root_dir (or project) to a folder") from None
        raise ConfigError(f"checkpoint_root_dir: cannot create {folder}: {exc.strerror}") \
            from None
    return folder


def write_run_files(folder: Path, graph: ExperimentGraph, trinity_yaml: str) -> None:
    """Record the resolved experiment, its Trinity config (YAML text) and its datasets'
    digests in the run directory."""
    from ..data.digest import dataset_digests
    from ..data.json_text import pretty
    from .writing import write_whole

    recorded = with_env_templates(make_converter().unstructure(graph))
    then = "choose a checkpoint_root_dir on a device with room that you can write"
    write_whole(folder / EXPERIMENT_YAML, yaml.safe_dump(recorded, sort_keys=False,
                                                         allow_unicode=True),
                label=f"run directory {folder}: {EXPERIMENT_YAML}", then=then)
    write_whole(folder / CONFIG_YAML, trinity_yaml,
                label=f"run directory {folder}: {CONFIG_YAML}", then=then)
    write_whole(folder / DATA_DIGESTS_JSON, pretty(dataset_digests(graph)) + "\n",
                label=f"run directory {folder}: {DATA_DIGESTS_JSON}", then=then)
    write_whole(folder / CODE_DIGESTS_JSON, pretty(code_digests(graph)) + "\n",
                label=f"run directory {folder}: {CODE_DIGESTS_JSON}", then=then)


def code_digests(graph: ExperimentGraph) -> dict[str, str]:
    """The experiment's workflow's and judge's code, each as a digest."""
    from ..rollout.code import code_digest
    from ..rollout.run import Agent

    agent = Agent.from_graph(graph)
    return {role: code_digest(fn) for role, fn in (("workflow", agent.workflow),
                                                   ("judge", agent.judge)) if fn is not None}


def with_env_templates(value: Any) -> Any:
    """Data as a run directory keeps it: each EnvValue string replaced by its
    ``${oc.env:...}`` template, so no secret read from the environment is written."""
    template = getattr(value, "template", None)
    if template is not None:
        return template
    if isinstance(value, dict):
        return {k: with_env_templates(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [with_env_templates(v) for v in value]
    return value


def checkpoints(folder: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """The ``global_step_N`` folders of a run, oldest first."""
    found = []
    for child in Path(folder).iterdir() if Path(folder).is_dir() else ():
        match = STEP_DIR_PATTERN.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def read_run_yaml(folder: Path, name: str, label: str) -> dict[str, Any]:
    """A run directory's ``experiment.yaml`` or ``config.yaml`` as the mapping tunedsl
    wrote, or one line (``label``, then the file and what is wrong with it) saying the run
    directory is damaged."""
    path = folder / name
    problem = None
    try:
        data = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        problem = None
    except OSError as exc:
        problem = exc.strerror
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x})"
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = f"not valid YAML{where}: {getattr(exc, 'problem', None) or exc}"
    else:
        if isinstance(data, dict):
            return data
        problem = ("empty" if data is None else
                   f"holds a {type(data).__name__}, not the mapping tunedsl writes")
    state = "is missing" if problem is None else f"is damaged ({problem})"
    raise ConfigError(f"{label}: {name} {state}; tunedsl wrote it when the run started: "
                      f"restore it from a copy, or start a new run")


def resume_dir(path: str | os.PathLike[str]) -> Path:
    """Check that ``path`` is a run directory that can be resumed."""
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"resume={path!r}: give the run directory's path (a str or a "
                          f"pathlib.Path)")
    folder = Path(path)
    if not folder.exists():
        raise ConfigError(f"{option('resume', path)}: no such folder; give the run directory a run "
                          f"printed when it started")
    if not (folder / EXPERIMENT_YAML).is_file():
        if STEP_DIR_PATTERN.match(folder.name) and (folder.parent / EXPERIMENT_YAML).is_file():
            raise ConfigError(f"{option('resume', path)}: a checkpoint of the run "
                              f"{folder.parent}; give that run directory (a resume goes on "
                              f"from its newest whole checkpoint)")
        if folder.is_dir() and ((folder / CONFIG_YAML).is_file() or any(
                STEP_DIR_PATTERN.match(entry.name) for entry in folder.iterdir())):  # the rest
            raise ConfigError(f"{option('resume', path)}: {EXPERIMENT_YAML} is missing from "
                              f"this run directory; tunedsl wrote it when the run started: "
                              f"restore it from a copy, or start a new run")
        raise ConfigError(f"{option('resume', path)}: not a tunedsl run directory (it has no "
                          f"{EXPERIMENT_YAML}); give the folder a run printed when it started")
    return folder


#: Settings a resumed run may change (the rows marked ``resumable``): how long it goes on,
#: and how often it saves and evaluates. Anything else would make the rest of the run a
#: different experiment.
RESUMABLE_CHANGES = resumable_settings()
#: Graph fields that are code or bookkeeping, not settings (code may be fixed mid-run).
_NOT_SETTINGS = ("source", "workflow", "judge", "explicit")


def check_resume(graph: ExperimentGraph, resume: str | os.PathLike[str]) -> Path:
    """The run directory ``resume``, once it is known to be a run of ``graph`` with the
    same settings (but those in `RESUMABLE_CHANGES`)."""
    folder = resume_dir(resume)
    recorded = read_run_yaml(folder, EXPERIMENT_YAML, option("resume", resume))
    if recorded.get("name") != graph.name:
        # the same code under another name (a name set with --set when it started)
        same_code = all(recorded.get(key) == make_converter().unstructure(
            getattr(graph, key)) for key in ("workflow", "judge"))
        fix = (f"it ran these functions under that name: resume with "
               f"{said('--set', 'overrides item')} name={recorded.get('name')}"
               if same_code else "resume it with the experiment that started it")
        raise ConfigError(f"{option('resume', resume)}: that run is of experiment "
                          f"{recorded.get('name')!r}, not {graph.name!r}; {fix}")
    now = with_env_templates(make_converter().unstructure(graph))
    recorded = moved_with(recorded, graph)
    before, after = (flatten({k: v for k, v in d.items() if k not in _NOT_SETTINGS})
                     for d in (recorded, now))
    changed = sorted(key for key in before.keys() | after.keys()
                     if before.get(key) != after.get(key) and key not in RESUMABLE_CHANGES)
    if changed:
        details = ", ".join(f"{key} (run: {before.get(key)!r}, now: {after.get(key)!r})"
                            for key in changed)
        raise ConfigError(f"{option('resume', resume)}: the run was started with other "
                          f"settings: {details}; resume with the "
                          f"{said('--settings/--set', 'settings file and overrides')} it was "
                          f"started with "
                          f"(only total_steps, total_epochs, the save/eval intervals and "
                          f"which checkpoints are kept may change), or start a new run")
    _refuse_another_warmup_once_it_ended(folder, before, after, resume)
    _check_same_data(folder, graph, resume)
    _check_same_code(folder, graph, resume)
    _check_entry_kinds(folder, resume)
    return folder


def _refuse_another_warmup_once_it_ended(folder: Path, before: dict[str, Any],
                                         after: dict[str, Any],
                                         resume: str | os.PathLike[str]) -> None:
    """A warm-up's length may change while it runs, not once it has ended (its model kept
    in `WARMUP_DIR`): the steps are counted from the run's start, so a longer warm-up ran
    SFT on the model RL had trained and then RL's first steps again, and a shorter one
    skipped into RL's schedule (sweep 46 B-S1)."""
    changed = [key for key in ("warmup_dataset.total_steps", "warmup_dataset.total_epochs")
               if before.get(key) != after.get(key)]
    if not changed or not (folder / WARMUP_DIR).is_dir() or \
            (folder / WARMUP_ENDED_JSON).is_file():  # (the local backend holds the length
        return  # to the step the warm-up really ended at, which its record keeps)
    key = changed[0]
    was = before.get(key)
    fix = f"resume without {key}" if was is None else f"resume with {key} = {was}"
    raise ConfigError(f"{option('resume', resume)}: {key} changed ({was} -> "
                      f"{after.get(key)}), and the run's warm-up has ended (its model is "
                      f"in {folder / WARMUP_DIR}) and RL began: another warm-up length would "
                      f"train SFT on the RL-trained model, then repeat RL's steps; {fix}, or "
                      f"start a new run")


def _check_same_code(folder: Path, graph: ExperimentGraph,
                     resume: str | os.PathLike[str]) -> None:
    """Refuse a resume with an edited workflow or judge: the run's rollouts would come from
    two workflows, or its rewards from two judges (eval refuses its results so too). A run
    directory without the file (an older tunedsl's) is said, not refused."""
    recorded = _recorded_digests(folder, CODE_DIGESTS_JSON, resume,
                                 "the workflow and judge are the code the run started with")
    if recorded is None:
        return
    now = code_digests(graph)
    was = recorded if isinstance(recorded, dict) else {}
    roles = [role for role in sorted(set(now) | set(was))
             if not isinstance(recorded, dict) or was.get(role) != now.get(role)]
    if roles:
        # each changed function by its role and name, and only what it mixes (sweep 50 B-L1
        # said "two judges" of an edited workflow)
        named = " and of ".join(f"@{role} {str(now.get(role) or was.get(role)).partition('@')[0]}"
                                for role in roles)
        mixed = " and ".join(_MIXED.get(role, f"it would mix two {role}s") for role in roles)
        digests = "; ".join(f"{role} {was.get(role)!r} -> {now.get(role)!r}" for role in roles)
        raise ConfigError(f"{option('resume', resume)}: the code of {named} ("
                          f"{'their files' if roles[1:] else 'its file'}, a project file "
                          f"imported from {'them' if roles[1:] else 'it'}, an environment "
                          f"variable they read, or a data file they read by name) changed "
                          f"since the run started ({digests}), so {mixed}; "
                          f"restore that code, or start a new run from its last checkpoint "
                          f"(model.model_path = RUN_DIR/global_step_N)")


#: What a resume with an edited function would mix, by the function's role.
_MIXED = {"workflow": "its rollouts would come from two workflows",
          "judge": "its rewards would come from two judges"}


def _check_entry_kinds(folder: Path, resume: str | os.PathLike[str]) -> None:
    """Refuse an entry of the wrong kind where a run writes one (a file named like a
    checkpoint folder or like ``log/``, a folder named like ``reward_curve.png``): a resume
    went on, then failed writing there, after training a step or at the end."""
    entries = [(child.name, "folder") for child in sorted(folder.iterdir())
               if STEP_DIR_PATTERN.match(child.name)]
    entries += [(name, "file") for name in RUN_FILES] + [(name, "folder") for name in RUN_DIRS]
    for name, kind in entries:
        path = folder / name
        if os.path.lexists(path) and path.is_dir() != (kind == "folder"):
            found = "a folder" if path.is_dir() else "a file"
            raise ConfigError(f"{option('resume', resume)}: {name} is {found} where the run "
                              f"writes a {kind} of that name; move it out of the run "
                              f"directory, then resume")


def _recorded_digests(folder: Path, name: str, resume: str | os.PathLike[str], checked: str,
                      say: bool = True) -> Any:
    """The digests a run directory keeps in ``name`` (JSON), or None when it keeps none: a
    run from an older tunedsl (or the file removed), said in a note (when ``say``) and not
    refused, since nothing tells what it began with; a damaged file is refused."""
    try:
        return json.loads((folder / name).read_text(encoding="utf-8"))
    except FileNotFoundError:
        if say:
            print(f"note: {resume} keeps no {name} (a run from before tunedsl kept one, or "
                  f"the file was removed), so this resume cannot check that {checked}",
                  file=sys.stderr)
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{option('resume', resume)}: {name} is damaged ({exc}); tunedsl "
                          f"wrote it when the run started: restore it from a copy, or start "
                          f"a new run") from None


def _check_same_data(folder: Path, graph: ExperimentGraph,
                     resume: str | os.PathLike[str]) -> None:
    """Refuse a resume over datasets whose bytes changed since the run started (a run
    directory from before tunedsl kept their digests is not checked)."""
    from ..data.digest import FILES, changed_datasets, dataset_digests

    now = dataset_digests(graph)  # (every local dataset's bytes read once)
    recorded = _recorded_digests(folder, DATA_DIGESTS_JSON, resume,
                                 "the data is the data the run started with", say=bool(now))
    if recorded is None:
        return
    recorded = recorded if isinstance(recorded, dict) else {}
    unrecorded = [section for section in now if section != FILES and section not in recorded]
    if unrecorded:  # a digest is kept for every dataset on this machine when a run starts
        raise ConfigError(f"{option('resume', resume)}: {DATA_DIGESTS_JSON} has no digest of "
                          f"{unrecorded[0]}'s data, which a run keeps for each local dataset "
                          f"when it starts, so the file was edited; restore it from a copy, "
                          f"or start a new run")
    paths = {section: getattr(graph, section).path for section in now if section != FILES}
    changed = changed_datasets(recorded, now, paths)
    if changed:
        raise ConfigError(f"{option('resume', resume)}: {', '.join(changed)} changed since "
                          f"the run started, so it would go on over other rows (or evaluate "
                          f"others) than it began with; restore the data it started with, or "
                          f"start a new run")


def moved_with(recorded: dict[str, Any], graph: ExperimentGraph) -> dict[str, Any]:
    """The settings a run directory recorded, with its paths moved as the project was.

    Paths are read beside the file that names them, so a project folder moved (or copied)
    elsewhere changes every path inside the experiment module's folder, and only those: a
    recorded path under the module's old folder is read under its new one (a dataset beside
    it, the checkpoints' root), and any other must be the same as before."""
    function = graph.workflow or graph.judge
    was = recorded.get("workflow" if graph.workflow is not None else "judge")
    old_file = was.get("file") if isinstance(was, dict) else None
    if function is None or not isinstance(old_file, str) or old_file == function.file:
        return recorded
    old_head, new_head = os.path.dirname(old_file), os.path.dirname(function.file)

    def move(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: move(item) for key, item in value.items()}
        if isinstance(value, list):
            return [move(item) for item in value]
        if isinstance(value, str) and (value == old_head or value.startswith(old_head + os.sep)):
            return new_head + value[len(old_head):]
        return value

    return move(recorded)


@contextlib.contextmanager
def locked(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the run directory's lock while writing it: a second process (a ``--resume`` of a
    run still going) is refused, naming the process that holds it. The lock is the
    operating system's (``flock``), so a process that dies, even by ``kill -9``, frees it."""
    path = Path(folder) / LOCK_FILE
    try:
        handle = path.open("a+", encoding="utf-8")
    except OSError as exc:
        from .writing import reason

        if path.is_dir():  # not made by tunedsl: its lock is a file
            raise ConfigError(f"run directory {folder}: its lock {path} is a folder, where "
                              f"tunedsl keeps a file; remove that folder") from None
        if isinstance(exc, PermissionError) and path.exists() and \
                os.access(folder, os.W_OK | os.X_OK):  # the lock, not the folder
            from ..access import writable

            raise ConfigError(f"run directory {folder}: its lock {path} cannot be written "
                              f"({exc.strerror}); {writable(str(path))}, or remove it (tunedsl "
                              f"makes it again)") from None
        raise ConfigError(f"run directory {folder}: cannot write it ({reason(exc, path)}); a "
                          f"run writes its checkpoints there: make it writable, or copy it to "
                          f"a folder that is and resume the copy") from None
    try:
        try:
            import fcntl

            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # no flock on this platform: nothing to hold
            pass
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise ConfigError(f"run directory {folder} is being written by {holder}; wait for "
                              f"it to end (or stop it) before resuming") from None
        try:  # who holds it, for the message a second process gets
            handle.seek(0)
            handle.truncate()
            handle.write(f"process {os.getpid()}")
            handle.flush()
        except OSError as exc:  # a full disk: before the run wrote anything
            from .writing import reason

            raise RunError(f"run directory {folder}: cannot write its lock "
                           f"({reason(exc, path)}); make room (or fix the folder) and run "
                           f"the command again") from None
        yield
    finally:
        with contextlib.suppress(OSError):  # (what it held was flushed, or never written)
            handle.close()


def truncate_to_step(path: str | os.PathLike[str], step: int) -> None:
    """Drop the lines of a ``{"step": N, ...}`` JSONL file past ``step``: after a crash the
    file may hold steps the checkpoint being resumed does not (they are run again). A line
    that is not such a row (cut short by the crash, garbage bytes, a step that is not a
    number) is dropped too: the run writes its steps again, and the viewer and the reward
    curve read only whole rows."""
    path = Path(path)
    if not path.is_file():
        return
    lines = path.read_bytes().splitlines(keepends=True)
    kept = []
    for line in lines:
        try:  # bytes, so a line of garbage (not even UTF-8) is one more line to drop
            row = json.loads(line)
            line_step = row.get("step", 0)
            if isinstance(line_step, bool) or not isinstance(line_step, (int, float)) \
                    or line_step > step:
                continue
        except (ValueError, AttributeError):
            continue  # a line cut short by the crash, or garbage
        kept.append(line)
    if len(kept) != len(lines):
        partial = path.with_suffix(path.suffix + ".partial")
        partial.write_bytes(b"".join(kept))
        partial.replace(path)
