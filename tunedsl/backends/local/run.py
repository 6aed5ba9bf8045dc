"""Run an experiment on the local backend: the loop over steps, monitoring, resume, Ctrl-C.

The run directory has the same layout as a Trinity run (`tunedsl.runs.run_files`):
``experiment.yaml`` and ``config.yaml``, ``monitor/tensorboard/``, ``metrics.jsonl``,
``rollouts.jsonl`` (see `rollouts`), ``log/`` and ``global_step_N/`` (`checkpoints`,
which also prunes them); at the end a ``reward_curve.png`` (`reward_curve`) and a
summary on the terminal (`summary`).
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...checks.futile import futile_settings
from ...checks.preflight import check_datasets
from ...config.graph import ExperimentGraph, refuse_problems
from ...dsl.trinity_fields import EVAL_METRIC, EVAL_TASKSET, EVAL_TASKSETS, TRAIN_REWARD_METRIC
from ...errors import ConfigError, DatasetError, PreflightFailed, RunError, RunInterrupted
from ...interrupts import deferred, interrupts_held
from ...rollout.loop import ExitInCallback
from ...runs.run_files import (
    CONFIG_YAML,
    LOG_DIR,
    METRICS_JSONL,
    REWARD_CURVE_PNG,
    ROLLOUTS_JSONL,
    ROLLOUTS_LOG,
    STEP_DIR_SHOWN,
    step_dir_name,
)
from ...runs.rundir import (
    checkpoints,
    create_run_dir,
    locked,
    read_run_yaml,
    truncate_to_step,
    write_run_files,
)
from ...runs.writing import cannot_take_a_file, reason
from ...wording import option, spelled
from .checkpoints import prune_checkpoints
from .checks import LOCAL_CHECKS
from .losses import SFT_LOSS_METRIC
from .monitors import metric_rows, open_monitor
from .reward_curve import plot_reward_curve
from .rollouts import RolloutLog
from .steps import StepReport
from .summary import RunSummary
from .trainer import LocalTrainer


def _refuse_a_read_only_run_directory(run_dir: Path) -> None:
    """Refuse a run directory that takes no new file, before a step is spent: its first
    checkpoint failed only once the step had trained ("make room")."""
    exc = cannot_take_a_file(run_dir)
    if exc is not None:
        raise ConfigError(f"run directory {run_dir}: cannot be written ({reason(exc, run_dir)});"
                          f" make it writable (chmod u+w {run_dir})") from None


def _error_log(trainer: LocalTrainer) -> logging.Handler:
    _refuse_a_read_only_run_directory(trainer.run_dir)
    (trainer.run_dir / LOG_DIR).mkdir(exist_ok=True)
    try:
        handler = logging.FileHandler(trainer.run_dir / ROLLOUTS_LOG, encoding="utf-8")
    except OSError as exc:  # (a read-only log: an internal error before)
        raise ConfigError(f"run directory {trainer.run_dir}: {ROLLOUTS_LOG} cannot be written "
                          f"({reason(exc, trainer.run_dir / ROLLOUTS_LOG)}); make it writable "
                          f"(chmod u+w {trainer.run_dir / ROLLOUTS_LOG})") from None
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    trainer.explorer.errors.addHandler(handler)
    trainer.explorer.errors.propagate = False
    return handler


def _progress(total: int, initial: int, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, unit="step",
                dynamic_ncols=True, file=sys.stderr)


def run_config(run_dir: Path) -> dict[str, Any]:
    """The run's Trinity config (``config.yaml``), as the monitors record it."""
    return read_run_yaml(run_dir, CONFIG_YAML, f"run directory {run_dir}")


def eval_metric(config: dict[str, Any], name: str) -> str:
    """An eval metric's name as Trinity logs it for the run's eval taskset (one rollout per
    task here, as Trinity's eval repeats by default)."""
    from ...config.nested import get_path

    _, tasksets = get_path(config, EVAL_TASKSETS)
    names = [t.get("name") for t in tasksets or [] if isinstance(t, dict) and t.get("name")]
    return EVAL_METRIC.format(taskset=names[0] if names else EVAL_TASKSET, name=name,
                              repeats=1)


def run_local(
    graph: ExperimentGraph,
    *,
    run_name: str,
    trinity_yaml: str,
    resume: str | Path | None = None,
    progress: bool = True,
    on_step_end: Callable[[StepReport], None] | None = None,
    from_good_checkpoint: bool = False,
) -> RunSummary:
    """Train ``graph`` on the CPU; resume the run directory ``resume`` if given.

    Args:
        graph: The experiment.
        run_name: The new run's folder name (``<name>-<timestamp>``).
        trinity_yaml: The same run's Trinity config, kept in the run directory.
        resume: A run directory to continue instead of starting a new one.
        progress: Show a progress bar.
        on_step_end: Called after each step.
        from_good_checkpoint: When the newest checkpoint is damaged, resume from the
            newest good one (its later steps run again).

    Raises:
        ConfigError: before training, for a setting or model the local backend cannot use
            (`LOCAL_CHECKS` all at once, before the run directory or any model).
        RunInterrupted: after Ctrl-C, once a checkpoint is saved.
    """
    refuse_problems(graph, LOCAL_CHECKS)
    check_datasets(graph)  # what check refuses of the data, before a run directory
    if resume is None:
        run_dir = create_run_dir(graph, run_name)
        try:
            write_run_files(run_dir, graph, trinity_yaml)
        except BaseException:  # (a full disk: a half-made directory a --resume took for
            # the newest run, missing files it "wrote when the run started")
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
    else:
        run_dir = Path(resume)
    with locked(run_dir):
        return _train(graph, run_dir, resume is not None, progress, on_step_end,
                      from_good_checkpoint)


def unused_trinity_settings(graph: ExperimentGraph) -> list[str]:
    """Settings that shape Trinity runs only: ``[trinity]`` keys no experiment field reads,
    and the inference-engine options of the models the local backend runs itself."""
    from ...config.nested import flatten
    from ...dsl.settings_table import FIELD_MAP

    mapped = {key for _, key in FIELD_MAP}
    unused = [f"trinity.{key}" for key in sorted(flatten(graph.trinity)) if key not in mapped
              and not key.startswith("monitor.monitor_args.")]  # read by the monitors
    local = [("model", graph.model)] + [(f"auxiliary_models.{name}", spec) for name, spec
                                        in graph.auxiliary_models.items()
                                        if spec.base_url is None]
    for setting, spec in local:
        unused += [f"{setting}.{field}" for field in ("tensor_parallel_size",
                                                      "inference_engine_num")
                   if getattr(spec, field) not in (None, 1)]  # GPU engines; one process here
        unused += [f"{setting}.trinity.{key}" for key in sorted(flatten(spec.trinity))]
    return unused


def _train(graph: ExperimentGraph, run_dir: Path, resuming: bool, progress: bool,
           on_step_end: Callable[[StepReport], None] | None,
           from_good_checkpoint: bool = False) -> RunSummary:
    unused = unused_trinity_settings(graph)
    if unused:
        print(f"local backend: these Trinity settings apply to Trinity runs only and are not "
              f"used here: {', '.join(unused)}", file=sys.stderr)
    config = run_config(run_dir)
    eval_key = eval_metric(config, "reward")
    trainer: LocalTrainer | None = None
    handler: logging.Handler | None = None
    restored: int | None = None
    try:
        trainer = LocalTrainer(graph, run_dir)
        handler = _error_log(trainer)
        restored = trainer.restore(skip_damaged=from_good_checkpoint) if resuming else None
        start = restored or 0
        if resuming and start >= trainer.total_steps:
            # Nothing to train: say so, rather than a summary of no steps.
            held = (f"already finished its {start} steps" if start == trainer.total_steps else
                    f"already holds {start} steps, more than the {trainer.total_steps} now "
                    f"asked for")
            print(f"note: {run_dir} {held}, so "
                  f"nothing was trained; to train further, resume with a larger "
                  f"train_dataset.total_steps ({spelled('set')} "
                  f"train_dataset.total_steps=N)",
                  file=sys.stderr)
        if resuming and restored is None and any(
                (run_dir / name).is_file() and (run_dir / name).stat().st_size
                for name in (METRICS_JSONL, ROLLOUTS_JSONL)):
            # a crash before the first save: going on means starting again, which replaces
            # the metrics and rollouts of the steps it had recorded
            print(f"note: {run_dir} has no checkpoint ({STEP_DIR_SHOWN}) to go on from, so "
                  f"training starts again at step 1, replacing what it recorded of earlier "
                  f"steps", file=sys.stderr)
        calls, turns = trainer.preflight() if start == 0 else ((), ())
        for line in futile_settings(graph, trainer.phase_steps(), calls, turns):
            print(f"warning: {line}", file=sys.stderr)
        for name in (METRICS_JSONL, ROLLOUTS_JSONL):  # steps past the checkpoint run again
            truncate_to_step(run_dir / name, start)
        monitor = open_monitor(graph, run_dir, config)
    except BaseException as error:
        _release(trainer, handler)
        if isinstance(error, KeyboardInterrupt):  # before any step: nothing to save
            # (interrupted while the checkpoint loaded, restored is not known yet: the
            # newest one saved is where a resume goes on from)
            saved = restored if restored is not None or not resuming else next(
                (step for step, _ in reversed(checkpoints(run_dir))), None)
            goes_on = f"from step {saved}" if saved else "at step 1"
            raise RunInterrupted(f"interrupted before training began (a resume goes on "
                                 f"{goes_on}); resume with {option('resume', run_dir)}",
                                 run_dir=str(run_dir)) from None
        # A failed preflight keeps its run directory for the rollout's log; other refusals
        # before training leave no empty run behind.
        if isinstance(error, (ConfigError, DatasetError)) \
                and not isinstance(error, PreflightFailed) and not resuming:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    kept = RolloutLog(run_dir, every=graph.keep_rollouts_every,
                      per_step=graph.keep_rollouts_per_step, seed=graph.algorithm.seed)
    bar = _progress(trainer.total_steps, start, progress)
    algorithm = graph.algorithm
    # A resumed run's summary covers the whole run: the steps before this session are read
    # back from metrics.jsonl (already cut to the checkpoint resumed from).
    rewards, sft_losses, evals = _recorded(run_dir, eval_key) if resuming else ([], [], [])
    began = time.perf_counter()
    failures = _TrainingFailures(graph.algorithm.on_failed_rollout or "drop")

    def evaluate() -> None:
        if trainer.eval_rows:
            means = trainer.evaluate()
            failed = trainer.eval_errors
            if failed:  # (else said nowhere but the rollout log: a NaN eval reward, exit 0)
                how_many = "every eval rollout failed" if len(failed) == len(trainer.eval_rows) \
                    else f"{len(failed)} of {len(trainer.eval_rows)} eval rollouts failed (left " \
                    f"out of the eval reward, as on Trinity)"
                print(f"warning: step {trainer.step}: {how_many}; the first error: "
                      f"{failed[0]}; all of them in {run_dir / ROLLOUTS_LOG}", file=sys.stderr)
            evals.append((trainer.step, means["reward"]))
            monitor.log(trainer.step, {eval_metric(config, name): value
                                       for name, value in means.items()})

    saved_step = start if (run_dir / step_dir_name(start)).is_dir() else None
    finished = False
    try:
        # The evaluation due at the step begun from, unless the run holds it already (an
        # interrupt during it left the step saved, and its evaluation never made).
        due = start == 0 or start % algorithm.eval_interval_steps == 0
        if due and start < trainer.total_steps and not any(step == start
                                                           for step, _ in evals):
            evaluate()
        while trainer.step < trainer.total_steps:
            # A step is whole or not at all: an interrupt during its update, records or
            # checkpoint waits for them (its rollouts, and an evaluation's, stop at once).
            with deferred():
                report = trainer.train_step()
                # An SFT step has a loss and no reward (it learns from conversations).
                reward = report.metrics.get(TRAIN_REWARD_METRIC)
                if reward is None:
                    sft_losses.append(report.metrics[SFT_LOSS_METRIC])
                else:
                    rewards.append(reward)
                monitor.log(report.step, report.metrics)
                kept.write(report.step, report.groups, trainer.rows)
                _stop_if_nothing_to_learn(report, run_dir)
                failures.add(report, run_dir)
                if report.step % algorithm.eval_interval_steps == 0:
                    evaluate()
                if report.step % algorithm.save_interval_steps == 0:
                    trainer.save()
                    saved_step = report.step
                    prune_checkpoints(run_dir, algorithm.keep_checkpoints,
                                      algorithm.keep_best_checkpoint, eval_key)
            remaining = (trainer.total_steps - trainer.step) * report.metrics["time/step_seconds"]
            shown = f"sft loss {sft_losses[-1]:.3f}" if reward is None else f"reward {reward:.3f}"
            bar.set_postfix_str(f"{shown} eta {remaining:.0f}s")
            bar.update(1)
            if on_step_end is not None:
                on_step_end(report)
        # The last step's evaluation, unless the run holds it already: a resume of a finished
        # run trains nothing and charts it once, and one an interrupt cut during that
        # evaluation makes it now.
        if trainer.step == trainer.total_steps and not any(step == trainer.step
                                                           for step, _ in evals):
            if trainer.step == start and trainer.eval_rows:
                print(f"note: the evaluation of step {start}, which the interrupt cut, is "
                      f"made now", file=sys.stderr)
            evaluate()
        # saved once: by the loop at a save step, or before a resume of a finished run
        checkpoint = run_dir / step_dir_name(trainer.step)
        if saved_step != trainer.step:
            checkpoint = trainer.save()
        prune_checkpoints(run_dir, algorithm.keep_checkpoints, algorithm.keep_best_checkpoint,
                          eval_key)
        finished = True
    except KeyboardInterrupt:
        with interrupts_held(f"saving step {trainer.step} before stopping; Ctrl-C again is "
                             f"held until it is saved"):
            checkpoint = trainer.save()
        raise RunInterrupted(f"interrupted at step {trainer.step}; saved {checkpoint}; resume "
                             f"with {option('resume', run_dir)}", run_dir=str(run_dir)) from None
    except ExitInCallback as stopped:  # the rollouts' code ended the command: as Ctrl-C does
        with interrupts_held(f"saving step {trainer.step} before stopping"):
            checkpoint = trainer.save()
        raise stopped.then(f"saved {checkpoint} (step {trainer.step}); resume with "
                           f"{option('resume', run_dir)}") from None
    finally:  # whatever ends the run: files, the TensorBoard writer and handlers released
        bar.close()
        monitor.close()
        kept.close()
        try:
            _release(trainer, handler)
        except KeyboardInterrupt:  # (the wait for the rollouts' threads, cut: said bare)
            if not finished:
                raise
            raise RunInterrupted(
                f"interrupted as the run ended, while the rollouts' threads were waited for; "
                f"the run is whole, saved {checkpoint} (a resume trains nothing, and draws its "
                f"chart and summary); resume with {option('resume', run_dir)}",
                run_dir=str(run_dir)) from None
    try:
        plot_reward_curve(run_dir, eval_key)
    except OSError as exc:  # the run is whole: only its chart is missing
        print(f"warning: {run_dir / REWARD_CURVE_PNG} was not drawn ({reason(exc, run_dir)}); "
              f"the run is complete: {option('resume', run_dir)} draws it once it can be "
              f"written (and trains nothing)", file=sys.stderr)
    except KeyboardInterrupt:  # the run is whole: only its chart is missing
        raise RunInterrupted(f"interrupted while the reward curve was drawn, after the last "
                             f"step was saved ({checkpoint}); the run is complete: "
                             f"{option('resume', run_dir)} draws it (and trains nothing)",
                             run_dir=str(run_dir)) from None
    failures.summarize(run_dir)
    if trainer.untrained:
        print(f"warning: {_untrained(trainer.untrained, trainer.step - start, algorithm)}",
              file=sys.stderr)
    if trainer.waited:
        print(f"note: {_waited(trainer.waited, trainer.step - start, len(trainer.carried))}",
              file=sys.stderr)
    return RunSummary(run_dir=run_dir, steps=trainer.step, first_step=start,
                      seconds=time.perf_counter() - began,
                      rewards=tuple(rewards), eval_rewards=tuple(evals), checkpoint=checkpoint,
                      sft_losses=tuple(sft_losses))


class _TrainingFailures:
    """The training rollouts that failed (in this session): said at the first step that
    had some, and summed up at the run's end when later steps had more (else they would be
    seen only in the rollout log and ``rollout/errors``, the rewards computed over the rest)."""

    def __init__(self, on_failed_rollout: str) -> None:
        self.handled = {"drop": "left out of training, as on Trinity",
                        "zero": "trained on with reward 0",
                        "drop_group": "each with its task's group left out of training"
                        }.get(on_failed_rollout, "")
        self.steps: list[int] = []
        self.failed = self.total = 0

    def add(self, report: StepReport, run_dir: Path) -> None:
        rollouts = [rollout for group in report.groups for rollout in group]
        failed = [rollout for rollout in rollouts if rollout.result is None]
        if not failed:
            return
        if not self.steps:
            # (a resume keeps the timeout the run began with: "raise rollout_timeout" and
            # --resume together were refused; sweep 48 B-W4)
            timed_out = "(rollout_timeout)" in str(failed[0].error)
            print(f"warning: step {report.step}: {len(failed)} of {len(rollouts)} training "
                  f"rollouts failed ({self.handled}); the first error: {failed[0].error}"
                  + ("; a resume keeps the rollout_timeout the run began with (a larger one "
                     "needs a new run)" if timed_out else "")
                  + f"; all of them in {run_dir / ROLLOUTS_LOG} (rollout/errors in "
                  f"{METRICS_JSONL} counts them by step)", file=sys.stderr)
        self.steps.append(report.step)
        self.failed += len(failed)
        self.total += len(rollouts)

    def summarize(self, run_dir: Path) -> None:
        if len(self.steps) > 1:
            shown = ", ".join(map(str, self.steps[:5])) + (", ..." if len(self.steps) > 5
                                                           else "")
            print(f"warning: {self.failed} training rollouts failed in {len(self.steps)} "
                  f"steps ({shown}); all of them in {run_dir / ROLLOUTS_LOG}", file=sys.stderr)


def _waited(steps: list[int], ran: int, left: int) -> str:
    """The line for steps whose surviving samples waited for a batch to fill."""
    shown = ", ".join(map(str, steps[:5])) + (", ..." if len(steps) > 5 else "")
    return (f"{len(steps)} of {ran} steps ({shown}) trained nothing and carried their samples "
            f"to the next step, as Trinity's trainer waits for a full batch: std_threshold "
            f"dropped the groups whose rewards all agree, and the rest were fewer than "
            f"batch_size x group_size" + (f"; {left} samples left at the end were not trained"
                                           if left else ""))


def _untrained(steps: list[int], ran: int, algorithm: Any) -> str:
    """The line for steps that trained nothing: which, and the settings that cause it."""
    shown = ", ".join(map(str, steps[:5])) + (", ..." if len(steps) > 5 else "")
    every = "every step" if len(steps) == ran else f"{len(steps)} of {ran} steps ({shown})"
    return (f"{every} trained nothing: no reply was left to learn from (metrics.jsonl's "
            f"rollout/masked: replies cut by max_tokens, masked by on_truncated_reply = "
            f"'mask', dapo's default; rollout/groups_skipped: groups whose rewards all "
            f"agree, dropped by std_threshold); raise model.max_tokens, set "
            f"algorithm.on_truncated_reply = 'train', or vary the rewards")


def _recorded(run_dir: Path, eval_key: str) -> tuple[list[float], list[float],
                                                    list[tuple[int, float]]]:
    """The training rewards, SFT losses and evaluations ``metrics.jsonl`` holds of the
    steps before a resume (`monitors.metric_rows`, the file already cut to the checkpoint)."""
    rows = metric_rows(run_dir)
    return ([row[TRAIN_REWARD_METRIC] for row in rows if TRAIN_REWARD_METRIC in row],
            [row[SFT_LOSS_METRIC] for row in rows if SFT_LOSS_METRIC in row],
            [(row["step"], row[eval_key]) for row in rows if eval_key in row])


def _release(trainer: LocalTrainer | None, handler: logging.Handler | None) -> None:
    """Close the trainer's loop and endpoints and its log file."""
    if trainer is not None:
        trainer.close()
        if handler is not None:
            trainer.explorer.errors.removeHandler(handler)
    if handler is not None:
        handler.close()


def _stop_if_nothing_to_learn(report: StepReport, run_dir: Path) -> None:
    """A step whose every rollout failed leaves nothing to train on: the run stops (exit 1)
    with the first error, its rollouts and metrics already written."""
    rollouts = [rollout for group in report.groups for rollout in group]
    if rollouts and all(rollout.result is None for rollout in rollouts):
        raise RunError(f"step {report.step}: every rollout failed, so there is nothing to learn "
                       f"from; the first error: {rollouts[0].error}; all of them in "
                       f"{run_dir / ROLLOUTS_LOG}")
