"""The name of every file and folder of a run directory, each defined once.

Both backends lay a run directory out as Trinity-RFT does (`rundir` makes it); the
backends write these names and ``tunedsl view`` reads them, so each is spelled here
only. Names below a folder are relative to the run directory with ``/`` between the
parts (``run_dir / TENSORBOARD_DIR`` joins them on every platform). Nothing here reads
or writes a file, so the CLI and the viewer import it for free.
"""

from __future__ import annotations

import datetime
import re

import attrs

from ..config.graph import ExperimentGraph

#: Where run directories go unless ``checkpoint_root_dir`` says otherwise (the
#: `ExperimentGraph` field's default, read from there).
CHECKPOINT_ROOT_DIR: str = str(attrs.fields(ExperimentGraph).checkpoint_root_dir.default)

#: The resolved experiment graph; a folder holding it is a tunedsl run directory.
EXPERIMENT_YAML = "experiment.yaml"
#: The run's Trinity-RFT config (``trinity run --config`` runs it unchanged).
CONFIG_YAML = "config.yaml"
#: A digest of each local dataset's bytes when the run started, and of each file of a
#: data folder (`tunedsl.data.digest`), which a resume checks, naming the files that changed.
DATA_DIGESTS_JSON = "data_digests.json"
#: The workflow's and judge's code as digests (`tunedsl.rollout.code.code_digest`): a
#: resume with other code would mix two judges' rewards in one run.
CODE_DIGESTS_JSON = "code_digests.json"
#: The local backend's metrics, one JSON line per step (eval steps have their own).
METRICS_JSONL = "metrics.jsonl"
#: The rollouts the local backend trained on, one JSON line each (`backends.local.rollouts`).
ROLLOUTS_JSONL = "rollouts.jsonl"
#: The run's logs (Trinity's ``log.save_dir``).
LOG_DIR = "log"
#: The local backend's log of failed rollouts, each with its error and traceback.
ROLLOUTS_LOG = f"{LOG_DIR}/rollouts.log"
#: What the monitors keep on disk (Trinity's ``monitor.cache_dir``).
MONITOR_DIR = "monitor"
#: TensorBoard's folder in `MONITOR_DIR` (as Trinity's monitor names it): its event
#: files, one folder per role (``trainer``, ``explorer``, ...).
TENSORBOARD_FOLDER = "tensorboard"
#: TensorBoard's event files, one folder per role (``trainer``, ``explorer``, ...), as
#: Trinity's monitor names them.
TENSORBOARD_DIR = f"{MONITOR_DIR}/{TENSORBOARD_FOLDER}"
#: Mean reward per step, plotted when a local run ends.
REWARD_CURVE_PNG = "reward_curve.png"
#: The lock a process writing the run holds (`rundir.locked`); it names that process.
LOCK_FILE = ".lock"
#: Trinity's experience stores (``.db`` and ``.jsonl`` files).
BUFFER_DIR = "buffer"
#: Where Trinity's experience pipeline saves its input unless its config says otherwise.
EXPLORER_OUTPUT_DB = f"{BUFFER_DIR}/explorer_output.db"

#: The model a warm-up ends with (a Hugging Face folder), which RL starts from: the local
#: backend's copy, and the folder of Trinity's warm-up stage (``<run>/sft_warmup``).
WARMUP_DIR = "sft_warmup"
#: Beside the warm-up's model, the local backend's record of the step it ended at, which
#: a resume holds the warm-up's length to.
WARMUP_ENDED_JSON = "sft_warmup/tunedsl_warmup.json"

#: The files and folders a run writes under those names (what a resume checks the kind of).
RUN_FILES: tuple[str, ...] = (EXPERIMENT_YAML, CONFIG_YAML, DATA_DIGESTS_JSON, CODE_DIGESTS_JSON,
                              METRICS_JSONL,
                              ROLLOUTS_JSONL, ROLLOUTS_LOG, REWARD_CURVE_PNG, LOCK_FILE)
RUN_DIRS: tuple[str, ...] = (LOG_DIR, MONITOR_DIR, TENSORBOARD_DIR, BUFFER_DIR, WARMUP_DIR)

#: A checkpoint folder's name before its step (``global_step_N``, Trinity's name).
STEP_DIR_PREFIX = "global_step_"
#: A checkpoint folder's name; group 1 is its step.
STEP_DIR_PATTERN = re.compile(rf"^{re.escape(STEP_DIR_PREFIX)}(\d+)$")
#: The checkpoint of step N (as messages and help texts name any of them): the model as a
#: Hugging Face folder, the optimizer and the position a resume continues from.
STEP_DIR_SHOWN = f"{STEP_DIR_PREFIX}N"


#: Where ``tunedsl eval`` and a model selection write by default, in the working folder.
EVALS_DIR = "evals"
#: Where ``tunedsl tune-prompt`` keeps its candidates file by default.
PROMPTS_DIR = "prompts"


def stamped(name: str, now: datetime.datetime | None = None) -> str:
    """``<name>-<YYYYmmddHHMMSS>``: each run's folder, and each default output of a
    command, gets a name of its own."""
    return f"{name}-{(now or datetime.datetime.now()):%Y%m%d%H%M%S}"


def claimed_default(parent: str, name: str, suffix: str = "", *, folder: bool = False,
                    now: datetime.datetime | None = None) -> str:
    """A command's default output, ``parent/<name>-<stamp><suffix>`` (`stamped`), claimed
    now (made, empty) so that another command started in the same second takes another:
    ``-2``, ``-3`` ... after the stamp (two evals of two models, started together by a
    script, took one file: the second was refused as if the user had named it; sweep 49
    B-W8). A claim still empty when the command ends is removed. Where it cannot be made,
    the path is given unclaimed: its writer says why."""
    import atexit
    import itertools
    import os

    base = stamped(name, now)
    try:  # (outside the loop: a file named as the folder raises FileExistsError too, which
        # read as "this name is taken" tried -2, -3, ... without end; sweep 50 A-W12)
        os.makedirs(parent, exist_ok=True)
    except OSError:
        return os.path.join(parent, f"{base}{suffix}")
    for count in itertools.count(1):
        path = os.path.join(parent, f"{base}{'' if count == 1 else f'-{count}'}{suffix}")
        try:
            if folder:
                os.mkdir(path)
            else:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except FileExistsError:
            continue
        except OSError:  # (read-only, full, a file where the folder goes)
            return path
        atexit.register(_remove_if_empty, path)
        return path
    raise AssertionError("unreachable")


def _remove_if_empty(path: str) -> None:
    import contextlib
    import os

    with contextlib.suppress(OSError):
        if os.path.isdir(path):
            # (a model selection stopped before any rollout leaves one empty results file
            # per candidate: said to keep nothing, it kept a folder of them; sweep 52 B-W3)
            entries = [os.path.join(path, name) for name in os.listdir(path)]
            if all(os.path.isfile(entry) and not os.path.islink(entry) and
                   os.path.getsize(entry) == 0 for entry in entries):
                for entry in entries:
                    os.remove(entry)
            os.rmdir(path)  # (only an empty folder)
        elif os.path.getsize(path) == 0:
            os.remove(path)


def is_stamped(folder_name: str, name: str) -> bool:
    """Whether ``folder_name`` is a `stamped` name of ``name``: a run of that experiment."""
    stamp = folder_name[len(name) + 1:]
    return folder_name.startswith(f"{name}-") and len(stamp) == 14 and stamp.isdigit()


def step_dir_name(step: int) -> str:
    """The name of the checkpoint folder saved at ``step``."""
    return f"{STEP_DIR_PREFIX}{step}"


def partial_step_dir_name(step: int) -> str:
    """Where the checkpoint of ``step`` is written before it is renamed to
    `step_dir_name`: a crash mid-save never leaves a half checkpoint under that name (the
    leading dot keeps it out of `STEP_DIR_PATTERN`)."""
    return f".{step_dir_name(step)}.partial"
