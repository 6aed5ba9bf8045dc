"""A local run's checkpoints: writing ``global_step_N``, continuing from the newest whole
one, and what is wrong with a damaged one.

``global_step_N/`` holds the model in Hugging Face format (with LoRA the merged model and
``adapter/``, see `tunedsl.backends.local.lora`), the tokenizer, ``optimizer.pt`` and
``trainer_state.json`` (the step, the seed and the run's total steps).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError

from ...errors import ConfigError, RunError
from ...runs.run_files import STEP_DIR_PATTERN, partial_step_dir_name, step_dir_name
from ...runs.rundir import checkpoints
from ...wording import option
from .lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, load_lora, save_lora
from .monitors import metric_rows

#: The optimizer's state in a checkpoint folder (``torch.save``).
OPTIMIZER_STATE = "optimizer.pt"
#: The trainer's position in a checkpoint folder: the step, the seed, the total steps.
TRAINER_STATE = "trainer_state.json"


def save_checkpoint(run_dir: Path, step: int, *, model: Any, tokenizer: Any,
                    optimizer: torch.optim.Optimizer, adapter: Any, seed: int,
                    total_steps: int) -> Path:
    """Write ``global_step_{step}`` into ``run_dir`` (``adapter``: the LoRA adapters, or
    None) and return it; an older folder of that name is replaced.

    Raises:
        RunError: the checkpoint could not be written (a full disk, a read-only or
            vanished folder); its partial folder is removed, the older checkpoints stay.
    """
    final = run_dir / step_dir_name(step)
    partial = run_dir / partial_step_dir_name(step)
    try:
        if adapter is not None:
            save_lora(adapter, partial)
        else:
            model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        torch.save(optimizer.state_dict(), partial / OPTIMIZER_STATE)
        (partial / TRAINER_STATE).write_text(json.dumps(
            {"step": step, "seed": seed, "total_steps": total_steps}))
    # torch reports a failed write as a RuntimeError ("unexpected pos", "file write failed"),
    # safetensors as its SafetensorError ("I/O error: File too large (os error 27)")
    except (OSError, RuntimeError, SafetensorError) as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise RunError(_unsaved(run_dir, step, exc)) from None
    # A crash mid-save never leaves a half checkpoint as the newest, and an older folder of
    # the name that cannot be removed whole (a read-only file in it) is kept whole: it is
    # set aside by a rename before the new one takes its name, and removed after.
    aside = None
    try:
        if final.exists():
            # (by its name: since Python 3.12 mkdtemp gives an absolute path for a relative
            # dir, and the warning below names the folder as the user gave the run)
            aside = run_dir / Path(tempfile.mkdtemp(prefix=f".{final.name}.replaced-",
                                                    dir=run_dir)).name
            final.rename(aside)  # (onto the empty folder just made)
        partial.rename(final)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        if aside is not None and not final.exists():
            aside.rename(final)  # (the older checkpoint back under its name)
        raise RunError(_unsaved(run_dir, step, exc)) from None
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
        if aside.exists():
            print(f"warning: the checkpoint {final.name} replaced is left in {aside} (it "
                  f"could not be removed whole); remove it", file=sys.stderr)
    return final


def _unsaved(run_dir: Path, step: int, exc: BaseException) -> str:
    """The one line for a checkpoint that could not be written: why, what is kept, and how
    to go on."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else \
        " ".join(str(exc).split())
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        free = None
    if free is not None and free < 64 * 2**20:
        reason = f"{reason}; {free / 2**20:.1f} MB free on its device"
    kept = [folder.name for _, folder in checkpoints(run_dir)]
    keeps = f"it keeps {kept[-1]}" if kept else "it has no checkpoint yet"
    return (f"cannot write the checkpoint of step {step} in {run_dir} ({reason}); {keeps}; "
            f"make room (or fix the folder) and continue with {option('resume', run_dir)}")


def restore_checkpoint(run_dir: Path, *, model: Any, optimizer: torch.optim.Optimizer,
                       adapter: Any, skip_damaged: bool = False) -> int | None:
    """Load the newest ``global_step_N`` of ``run_dir`` into ``model`` (with LoRA: into
    ``adapter``) and ``optimizer``; returns N, or None when the run has no checkpoint.

    A damaged newest checkpoint (a crash or a full disk mid-save) is named with the
    file that is wrong; with ``skip_damaged`` the newest good one is used instead. One
    its permissions keep from reading is refused with its chmod, even with ``skip_damaged``.
    """
    from transformers import AutoModelForCausalLM

    found = list(reversed(checkpoints(run_dir)))
    lora = adapter is not None
    for position, (step, folder) in enumerate(found):  # noqa: B007 - read after the loop
        # A checkpoint its permissions keep from reading (a copy made by another user) may
        # be whole: it is never called damaged, skipped or replaced, but given its chmod
        kept = unreadable_problem(folder, _resumed_files(lora))
        if kept is not None:
            raise ConfigError(f"{option('resume', run_dir)}: the "
                              f"{'newest ' if position == 0 else ''}checkpoint {folder.name} "
                              f"is unreadable (permissions, not damage): {kept}; then resume")
        problem = checkpoint_problem(folder, lora=lora)
        if problem is None:
            break
        if not skip_damaged:
            raise ConfigError(f"{option('resume', run_dir)}: the newest checkpoint "
                              f"{folder.name} is damaged ({problem}); "
                              f"{_older_fix(found[position + 1:], lora)}")
        print(f"resume: skipping {folder.name} ({problem})", file=sys.stderr)
    else:
        if found:
            raise ConfigError(f"{option('resume', run_dir)}: no checkpoint is whole; start a "
                              f"new run")
        return None
    if lora:  # the base weights are the model_path's, as loaded
        load_lora(adapter, folder)
    else:
        restored = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
        model.load_state_dict(restored.state_dict())
    try:
        optimizer.load_state_dict(torch.load(folder / OPTIMIZER_STATE))
    except Exception as exc:  # torch reports a bad archive in many types
        raise ConfigError(f"{option('resume', run_dir)}: {folder.name}/{OPTIMIZER_STATE} "
                          f"cannot be loaded ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0]}); add {option('from_good_checkpoint')} "
                          f"to resume from an older one") from None
    return step


def _older_fix(older: list[tuple[int, Path]], lora: bool) -> str:
    """The fix for a damaged newest checkpoint, given the ones ``older`` than it (newest
    first): --from-good-checkpoint to the newest good one, or the chmod of an older one
    whose permissions keep it from reading (it may be the good one), or a new run."""
    for _, folder in older:
        kept = unreadable_problem(folder, _resumed_files(lora))
        if kept is not None:
            return (f"{folder.name}, older, is unreadable (permissions, not damage): "
                    f"{kept}; then add {option('from_good_checkpoint')}")
        if checkpoint_problem(folder, lora=lora) is None:
            return (f"add {option('from_good_checkpoint')} to resume from {folder.name}, the "
                    f"newest good one")
    return "no older checkpoint is whole: start a new run"


def _resumed_files(lora: bool) -> tuple[str, ...]:
    """The files of a checkpoint a resume reads beside its model's."""
    return (TRAINER_STATE, OPTIMIZER_STATE, *((ADAPTER_CONFIG, ADAPTER_WEIGHTS) if lora else ()))


def unreadable_problem(folder: Path, names: Iterable[str] = ()) -> str | None:
    """What permissions keep from reading in a checkpoint folder (the folder itself, or its
    ``config.json``, ``*.safetensors`` or ``names``), with the chmod that lets it; None when
    each can be read. Missing files are left to `checkpoint_problem` (damage)."""
    from ...access import permission_fix, searchable, unsearchable_folder

    blocked = unsearchable_folder(folder / "config.json")  # (nothing in it can be looked at)
    if blocked is not None:
        return f"{blocked} cannot be searched; {searchable(blocked)}"
    try:
        listed = sorted(name for name in os.listdir(folder) if name.endswith(".safetensors"))
    except OSError as exc:  # searchable but not listable: its weights would read as missing
        fix = permission_fix(exc, folder)
        return f"{folder} cannot be listed ({exc.strerror}); {fix}" if fix else None
    for name in ("config.json", *listed, *names):
        try:
            with open(folder / name, "rb"):
                pass
        except OSError as exc:
            fix = permission_fix(exc, folder / name)
            if fix is not None:
                return f"{folder / name} cannot be read ({exc.strerror}); {fix}"
    return None


def model_pointer(run_dir: str | os.PathLike[str]) -> str | None:
    """What to give instead of a run directory given as a model folder: its newest
    checkpoint whose model is whole (the newer ones skipped said, with why), or None when
    it holds no checkpoint. Only the model is tested (config.json and the weights' headers,
    as eval --checkpoint does): a damaged optimizer state leaves the model to evaluate."""
    found = list(reversed(checkpoints(run_dir)))
    for position, (_, folder) in enumerate(found):
        kept = unreadable_problem(folder)
        problem = weights_problem(folder) if kept is None else None
        if kept is None and problem is None:
            if position == 0:
                return f"give {folder} (its newest checkpoint)"
            return (f"give {folder}, its newest good checkpoint "
                    f"({_skipped(found[0][1], 'newer', position - 1)})")
    if not found:
        return None
    # an older one kept from reading may be whole: its chmod, not "none is whole" (sweep 51
    # A-W6: a damaged newest and a step 1 of mode 000 were said as no model at all)
    older = next(((folder, kept) for _, folder in found[1:]
                  if (kept := unreadable_problem(folder)) is not None), None)
    if older is not None:
        return (f"none of its checkpoints holds a whole model it can read "
                f"({_skipped(found[0][1], 'the newest')}); {older[0].name}, older, is "
                f"unreadable (permissions, not damage): {older[1]}; then give {older[0]}")
    return (f"none of its checkpoints holds a whole model "
            f"({_skipped(found[0][1], 'the newest')}); give a saved model folder")


def _skipped(folder: Path, role: str, more: int = 0) -> str:
    """Why the checkpoint ``folder`` (``role``: "newer", "the newest") is skipped: damaged,
    or kept from reading by its permissions (with its chmod); ``more``: how many more are."""
    kept = unreadable_problem(folder)
    why = (f"is unreadable (permissions, not damage): {kept}" if kept is not None else
           f"is damaged: {weights_problem(folder)}")
    others = f"; {more} more newer checkpoint{'s are' if more > 1 else ' is'} skipped too" \
        if more else ""
    return f"{folder.name}, {role}, {why}{others}"


def checkpoint_problem(folder: Path, *, lora: bool = False) -> str | None:
    """What is wrong with a saved ``global_step_N`` folder (the file and why), or None;
    ``lora``: a LoRA run's, whose adapter files must be whole too.

    Reads the JSON files, the weights' headers and the optimizer's archive (its checksums),
    not the weights themselves.
    """
    for name in (TRAINER_STATE, *([ADAPTER_CONFIG] if lora else [])):
        try:
            read = json.loads((folder / name).read_text())
        except OSError as exc:
            return f"{name}: {exc.strerror}"
        except ValueError as exc:
            return f"{name}: not valid JSON ({exc})"
        named = STEP_DIR_PATTERN.match(folder.name)
        if name == TRAINER_STATE and named and (not isinstance(read, dict)
                                                or read.get("step") != int(named[1])):
            saved = read.get("step") if isinstance(read, dict) else None
            return (f"{name}: it is the checkpoint of step {saved!r}, not {named[1]}: a folder "
                    f"renamed or copied from another step")
    problem = weights_problem(folder, extra=[ADAPTER_WEIGHTS] if lora else [])
    if problem is not None:
        return problem
    return optimizer_problem(folder / OPTIMIZER_STATE)


def weights_problem(folder: Path, extra: list[str] | None = None) -> str | None:
    """What is wrong with a saved model folder's config and weights (the file and why), or
    None; ``extra`` names further safetensors files it must hold. Reads headers only."""
    import safetensors

    try:
        json.loads((folder / "config.json").read_text())
    except OSError as exc:
        return f"config.json: {exc.strerror}"
    except ValueError as exc:
        return f"config.json: not valid JSON ({exc})"
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        return "no model weights (*.safetensors)"
    for path in weights + [folder / name for name in extra or []]:
        try:
            with safetensors.safe_open(path, "pt") as handle:
                handle.keys()
        except Exception as exc:  # safetensors reports a cut file as its own error type
            return f"{path.relative_to(folder)}: {exc}"
    return None


def optimizer_problem(path: Path) -> str | None:
    """What is wrong with a saved optimizer state (``torch.save``'s zip archive), or None:
    missing, empty, not an archive, or an entry whose checksum fails (cut or overwritten)."""
    import zipfile

    if not path.is_file() or path.stat().st_size == 0:
        return f"{path.name}: missing or empty"
    try:
        with zipfile.ZipFile(path) as archive:
            broken = archive.testzip()
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        return f"{path.name}: not a saved optimizer state ({exc})"
    if broken is not None:
        return f"{path.name}: {broken} fails its checksum (the file is damaged)"
    if not any(name.endswith("/data.pkl") or name == "data.pkl" for name in names):
        return f"{path.name}: not a saved optimizer state (no data.pkl)"
    return None


def prune_checkpoints(run_dir: Path, keep: int | None, keep_best: bool,
                      eval_key: str) -> None:
    """Keep the newest ``keep`` checkpoints and, with ``keep_best``, the one whose step
    scored the best eval reward (``eval_key`` in ``metrics.jsonl``, so a resumed run counts
    its earlier evals); remove the others."""
    if keep is None:
        return
    saved = dict(checkpoints(run_dir))
    kept = set(sorted(saved)[-keep:])
    if keep_best:
        rewards = [(row[eval_key], row["step"]) for row in metric_rows(run_dir)
                   if eval_key in row and row["step"] in saved and not math.isnan(row[eval_key])]
        if rewards:
            kept.add(max(rewards)[1])  # the best reward; the later step on a tie
    for step, folder in saved.items():
        if step not in kept:
            shutil.rmtree(folder, ignore_errors=True)
