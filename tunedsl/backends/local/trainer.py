"""The local backend: Trinity's RL algorithms on a transformers causal LM, on the CPU, in
one process.

Each step takes ``batch_size`` tasks, has the explorer run ``group_size`` rollouts of each
through the shared rollout function (`tunedsl.backends.local.explorer`: concurrently; the
engine batches their model calls), turns every model call of a trajectory into a training
sample carrying the advantage the algorithm's advantage function gives it
(`tunedsl.backends.local.samples`), and takes one AdamW step on the algorithm's loss
(`tunedsl.dsl.algorithms` resolves both, as for Trinity). SFT steps
(``Algorithm("sft")``, or a warm-up before RL: a `Phase` of its own) take a batch of
conversations instead (`tunedsl.backends.local.sft`). Sampling and data order derive from
``(seed, step)`` alone, so a run interrupted and resumed ends with the same weights as one
that was not.
"""

from __future__ import annotations

import gc
import json
import math
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from ...checks.preflight import check_model_called, row_count_problem
from ...config.graph import ExperimentGraph
from ...dsl.algorithms import CONVERSATION_ALGORITHMS, ResolvedAlgorithm, resolve, teacher_name
from ...dsl.chat import ModelCall
from ...dsl.trinity_fields import POLICY_LOSS_METRIC
from ...dsl.turns import Turn
from ...errors import ConfigError, DatasetError, PreflightFailed, RunError
from ...models.scoring import endpoint_logprobs
from ...runs.run_files import ROLLOUTS_LOG, WARMUP_DIR, WARMUP_ENDED_JSON
from .batches import (
    Batch,
    TrainingSample,
    lr_factor,
    pack_into_passes,
    sample_logprobs,
    shared_rows,
    token_logprobs,
)
from .chat import ChatCodec
from .checkpoints import restore_checkpoint, save_checkpoint
from .clock import ModelClock
from .engine import Engine, eos_ids
from .explorer import LocalExplorer
from .lora import WithoutAdapter, add_lora
from .losses import PolicyLoss, StepShape
from .models import EndpointModel, FrozenModel, load_folder, load_policy
from .samples import step_samples
from .schedule import Schedule, read_rows
from .sft import conversation_samples
from .steps import Rollout, StepReport, aggregate_stats

#: What an unset Algorithm field means here: Trinity's defaults for the same settings (the
#: algorithm's own, such as its clip range, are in `tunedsl.dsl.algorithms`).
WEIGHT_DECAY = 0.01
GRAD_CLIP = 1.0
MIN_LR_RATIO = 0.01


def _default_if_unset(value: float | None, default: float) -> float:
    """An Algorithm field's value, or ``default`` when it is None (0.0 is a value)."""
    return default if value is None else value


@attrs.frozen(kw_only=True)
class Phase:
    """A stretch of a run's steps trained one way: a warm-up's SFT, or the algorithm.

    Attributes:
        record: Its `Algorithm` record (learning rate, schedule, optimizer settings).
        algorithm: Its resolution.
        first: Its first step (0-based, in the run's step count).
        steps: How many steps it has.
    """

    record: Any
    algorithm: ResolvedAlgorithm
    first: int
    steps: int

    @property
    def grad_clip(self) -> float:
        """The gradient norm its updates are clipped to (Trinity's default when unset)."""
        return _default_if_unset(self.record.grad_clip, GRAD_CLIP)

    @property
    def supervised(self) -> bool:
        """Whether it learns from conversations (SFT) rather than rollouts."""
        return self.algorithm.name in CONVERSATION_ALGORITHMS


class LocalTrainer:
    """Trains an experiment's model on the CPU; see the module docstring. The graph has
    passed `LOCAL_CHECKS` (`run_local` runs them before building a trainer).

    Args:
        graph: The experiment.
        run_dir: The run directory (made by the caller, or the one being resumed).
    """

    def __init__(self, graph: ExperimentGraph, run_dir: Path) -> None:
        self.graph, self.run_dir = graph, Path(run_dir)
        algorithm = graph.algorithm
        supervised = algorithm.algorithm_type in CONVERSATION_ALGORITHMS
        # SFT alone learns from train_dataset's conversations; a warm-up, from its own.
        sft_section = "train_dataset" if supervised else \
            "warmup_dataset" if graph.warmup is not None else None
        self.rows = [] if supervised else read_rows(graph.train_dataset, "train_dataset")
        problem = None if supervised else row_count_problem(
            "train_dataset", graph.train_dataset, len(self.rows), algorithm.batch_size)
        if problem is not None:
            raise DatasetError(problem)
        self.eval_rows = (read_rows(graph.eval_dataset, "eval_dataset")
                          if graph.eval_dataset is not None else [])
        self.eval_errors: list[str] = []  # the last evaluation's (`evaluate`)
        self._said: set[str] = set()  # the notes this run printed (each said once)
        self.model, self.tokenizer = load_policy(graph)
        self.conversations = [] if sft_section is None else conversation_samples(
            self.tokenizer, read_rows(getattr(graph, sft_section), sft_section),
            section=sft_section, max_model_len=graph.model.max_model_len,
            enable_thinking=graph.model.enable_thinking)
        self.phases = self._phases(sft_section)
        # With LoRA, self.model carries the adapters (in place) and self.adapter saves them.
        self.adapter = None if graph.model.lora is None else add_lora(
            self.model, graph.model.lora, graph.model.model_path, algorithm.seed)
        self.algorithm = resolve(algorithm)
        # the initial model the KL term compares with: a module, or the policy with its
        # adapters off (`WithoutAdapter`); either is called as the model is
        self.reference: Any = None
        # After a warm-up the reference is the warm-up's model (`_begin_rl`), as on Trinity,
        # whose RL stage starts from the warm-up stage's checkpoint.
        if self.algorithm.uses_reference and graph.warmup is None:
            if self.adapter is not None:
                self.reference = WithoutAdapter(self.adapter)
            else:
                self.reference, _ = load_policy(graph)
                self.reference.eval().requires_grad_(False)
        # What the optimizer changes (all weights, or LoRA's adapters only).
        self.trainable = [parameter for parameter in self.model.parameters()
                          if parameter.requires_grad]
        self.optimizer = self._optimizer(self.phases[0].record)
        self.engine = Engine(self.model, eos_token_id=eos_ids(self.model, self.tokenizer),
                             pad_token_id=self.tokenizer.pad_token_id, seed=algorithm.seed)
        # A LoRA reference runs the policy itself (adapters off): its hooks time it already.
        self.clock = ModelClock(*(module for module in (self.model, self.reference)
                                  if isinstance(module, torch.nn.Module)))
        self.explorer = LocalExplorer(graph, self.engine, ChatCodec(
            self.tokenizer, enable_thinking=graph.model.enable_thinking))
        self.teacher = teacher_name(algorithm, graph.auxiliary_models)
        # An endpoint's tokenizer cannot be read here: README says it must be the same.
        if self.teacher is not None and isinstance(self.explorer.auxiliary[self.teacher],
                                                   FrozenModel):
            self._check_teacher_vocabulary()
        self.schedule = Schedule(len(self.rows), algorithm.batch_size, algorithm.seed)
        first = self.phases[0].record
        self.sft_schedule = Schedule(len(self.conversations), first.batch_size, first.seed)
        self.total_steps = sum(phase.steps for phase in self.phases)
        self.step = 0
        #: The steps of this session that had no token to train on (every reply masked, or
        #: every group dropped): the run says so at its end, rather than exit 0 silently.
        self.untrained: list[int] = []
        #: Samples of groups that survived dynamic sampling (``std_threshold``) waiting for a
        #: batch to fill (`_filled`), and the steps of this session that waited so.
        self.carried: list[TrainingSample] = []
        self.waited: list[int] = []
        # What is loaded now (models, libraries: some 400,000 objects) lives for the run: the
        # cyclic collector need not walk it at each full collection (0.2 s, every ~100 steps
        # of the arith example), as vLLM freezes its heap after start-up. `close` thaws it.
        gc.collect()
        gc.freeze()

    def _phases(self, sft_section: str | None) -> list[Phase]:
        """The run's phases: SFT alone, a warm-up then the algorithm, or the algorithm."""
        graph, algorithm = self.graph, self.graph.algorithm
        if sft_section == "train_dataset":
            return [Phase(record=algorithm, algorithm=resolve(algorithm), first=0,
                          steps=self._sft_steps("train_dataset", algorithm))]
        phases = []
        if sft_section is not None:
            phases.append(Phase(record=graph.warmup, algorithm=resolve(graph.warmup), first=0,
                                steps=self._sft_steps("warmup_dataset", graph.warmup)))
        first = phases[0].steps if phases else 0
        phases.append(Phase(record=algorithm, algorithm=resolve(algorithm), first=first,
                            steps=graph.train_dataset.steps(len(self.rows),
                                                            algorithm.batch_size)))
        return phases

    def _sft_steps(self, section: str, record: Any) -> int:
        """The steps of SFT on ``section``'s conversations, ``record.batch_size`` a step."""
        if len(self.conversations) < record.batch_size:
            path = "algorithm" if section == "train_dataset" else "warmup"
            raise ConfigError(f"{path}.batch_size = {record.batch_size} is larger than {section} "
                              f"({len(self.conversations)} conversations); lower batch_size")
        return getattr(self.graph, section).steps(len(self.conversations), record.batch_size)

    def phase(self) -> Phase:
        """The phase the next step belongs to."""
        return next((p for p in self.phases if self.step < p.first + p.steps), self.phases[-1])

    def _optimizer(self, record: Any) -> torch.optim.Optimizer:
        """A fresh AdamW for a phase (Trinity's RL stage starts a new trainer)."""
        return torch.optim.AdamW(
            self.trainable, lr=record.learning_rate,
            weight_decay=_default_if_unset(record.weight_decay, WEIGHT_DECAY))

    # ---------------------------------------------------------------- rollouts

    def preflight(self) -> tuple[tuple[ModelCall, ...], tuple[Turn, ...]]:
        """One rollout on the first task before training: the workflow must call the model.
        SFT alone trains on conversations: its rollout is on the first eval task, if any.
        Returns the rollout's model calls and the turns it marked."""
        self.model.eval()
        rows, which = (self.rows, "training") if self.rows else (self.eval_rows, "eval")
        if not rows:
            return (), ()
        [[rollout]] = self.explorer.rollouts(rows, [0], 1)
        result, calls = rollout.result, rollout.calls
        if result is None:
            raise PreflightFailed(
                f"before training, on the first {which} task ({_abbreviated(rows[0])}): "
                f"{rollout.error}; the log is kept in {self.run_dir / ROLLOUTS_LOG}",
                user_traceback=rollout.traceback)
        problems = check_model_called(self.graph, tuple(calls))
        if problems:
            raise ConfigError(problems)
        return tuple(calls), result.turns

    def phase_steps(self) -> dict[str, int]:
        """Each phase's steps, by its setting (``algorithm``; ``warmup`` for a warm-up)."""
        return {"warmup" if phase.record is self.graph.warmup else "algorithm": phase.steps
                for phase in self.phases}

    # ---------------------------------------------------------------- learning

    def samples(self, groups: list[list[Rollout]]) -> tuple[list[TrainingSample],
                                                            dict[str, float]]:
        """Training samples from the step's groups, and rollout statistics
        (`tunedsl.backends.local.samples.step_samples`)."""
        return step_samples(self.algorithm, groups, self._teacher_scores, self._said)

    def _check_teacher_vocabulary(self) -> None:
        """The teacher scores the student's token ids: both must read ids alike."""
        assert self.teacher is not None  # checked only for a teacher loaded here
        teacher = self.explorer.auxiliary[self.teacher]
        assert isinstance(teacher, FrozenModel)
        if teacher.codec.tokenizer.get_vocab() != self.tokenizer.get_vocab():
            raise ConfigError(
                f"auxiliary_models.{self.teacher}: the teacher's tokenizer differs from "
                f"model.model_path's, so it cannot score the student's tokens; distill from "
                f"a teacher of the same model family (same tokenizer)")

    def _teacher_scores(self, calls: Sequence[ModelCall]) -> list[torch.Tensor]:
        """The teacher's log-prob of each reply token of ``calls``, from batched passes
        over them (a teacher at an endpoint: one request for them all)."""
        assert self.teacher is not None  # on_policy_distill has its teacher (teacher_problems)
        frozen = self.explorer.auxiliary[self.teacher]
        if isinstance(frozen, EndpointModel):
            return [torch.tensor(scores) for scores in self.explorer.run(endpoint_logprobs(
                frozen.client, self.graph.auxiliary_models[self.teacher].model_path,
                self.teacher, [(call.prompt_ids, call.response_ids) for call in calls]))]
        # The teacher's own distribution (temperature 1, no top-p), as Trinity's
        # distillation workflow scores it by default.
        return sample_logprobs(frozen.engine.model, [
            TrainingSample(call.prompt_ids, call.response_ids, call.logprobs, 0.0, 1.0, 1.0)
            for call in calls], self.tokenizer.pad_token_id)

    def update(self, samples: list[TrainingSample]) -> dict[str, float]:
        """One optimizer step on all samples: the phase's loss (`PolicyLoss`), each pass
        adding its share of the step's aggregate."""
        phase = self.phase()
        record, resolved = phase.record, phase.algorithm
        lr = record.learning_rate * lr_factor(
            self.step - phase.first, phase.steps, warmup=record.lr_warmup_steps or 0,
            schedule=record.lr_scheduler or "constant",
            min_ratio=_default_if_unset(record.min_lr_ratio, MIN_LR_RATIO))
        for group in self.optimizer.param_groups:  # from the step alone: a resume agrees
            group["lr"] = lr
        totals = {"actor/entropy": 0.0, "actor/grad_norm": 0.0, "actor/lr": lr}
        if not phase.supervised:  # what Trinity's trainer logs for an RL loss
            totals.update({POLICY_LOSS_METRIC: 0.0, "actor/kl_loss": 0.0, "actor/ppo_kl": 0.0})
        shape = StepShape.of(resolved.loss_agg_mode,
                             [len(s.response_ids) for s in samples], [s.masked for s in samples])
        if not shape.tokens:  # nothing to learn from (no samples, or all masked)
            self.untrained.append(self.step + 1)
            return totals
        loss_fn = PolicyLoss(resolved, shape)
        bonus = bool(resolved.entropy_coef)
        # The model stays in eval mode: dropout in these passes would move the ratio away
        # from 1 on the very samples it was sampled on (TRL disables dropout likewise).
        self.optimizer.zero_grad(set_to_none=True)
        for part in pack_into_passes(shared_rows(samples)):  # a call and the next: one row
            batch = Batch.collate(part, self.tokenizer.pad_token_id)
            if not batch.mask.any():
                continue
            logprobs, entropy = token_logprobs(self.model, batch, entropy_grad=bonus)
            reference = None
            if self.reference is not None:
                with torch.no_grad():
                    reference, _ = token_logprobs(self.reference, batch)
            share = loss_fn(logprobs, old=batch.old_logprobs, advantages=batch.advantages,
                            mask=batch.mask, sample=batch.sample, reference=reference,
                            entropy=entropy)
            for name, value in share.metrics.items():
                # Trinity's trainer logs its loss's metrics under actor/
                totals[f"actor/{name}"] = totals.get(f"actor/{name}", 0.0) + value
            if not torch.isfinite(share.loss):
                raise RunError(f"step {self.step + 1}: the loss is {share.loss.item()}, so the "
                               f"update was not made and nothing was saved; the newest "
                               f"checkpoint is as it was (check the rewards, or lower "
                               f"learning_rate)")
            self.clock.backward(share.loss)
            # the mean entropy over the step's tokens, a statistic on every algorithm
            totals["actor/entropy"] += shape.token_mean(entropy, batch.mask)
        totals["actor/grad_norm"] = float(torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), phase.grad_clip))
        self.optimizer.step()
        # One norm over every weight (NaN or inf in any makes it so), rather than a check
        # and a sync per tensor: a quarter of the time on the arith model.
        if not math.isfinite(float(torch.nn.utils.get_total_norm(self.trainable))):
            raise RunError(f"step {self.step + 1}: the weights are no longer finite after the "
                           f"update (learning_rate = {record.learning_rate}); the "
                           f"run stopped before saving them, and the newest checkpoint is as "
                           f"it was; lower learning_rate")
        return totals

    def train_step(self) -> StepReport:
        """Learn from one batch (conversations in an SFT phase; else rollouts, scored); the
        step counter then advances."""
        phase = self.phase()
        if phase.supervised:
            return self._sft_step(phase)
        started, model_seconds = time.perf_counter(), self.clock.seconds
        self.model.eval()
        self.explorer.reseed(self.graph.algorithm.seed * 1_000_003 + self.step)
        indices = self.schedule.indices(self.step - phase.first)
        reused, prefilled = self.engine.reused_tokens, self.engine.prefilled_tokens
        groups = self.explorer.rollouts(self.rows, indices, self.graph.algorithm.group_size)
        self.engine.forget()  # the update changes the weights; its passes need the memory
        reused, prefilled = (self.engine.reused_tokens - reused,
                             self.engine.prefilled_tokens - prefilled)
        samples, stats = self.samples(groups)
        # the share of the prompts' tokens whose KV cache a finished call had computed
        stats["rollout/prefix_cache_hit"] = reused / max(1, reused + prefilled)
        batch = self._filled(phase, samples, stats)
        if batch is not None:
            stats.update(self.update(batch))
        elapsed = time.perf_counter() - started
        rollouts = len(indices) * self.graph.algorithm.group_size
        stats.update({"time/step_seconds": elapsed, "time/steps_per_second": 1.0 / elapsed,
                      "time/samples_per_second": rollouts / elapsed,
                      # the policy's (and reference's) forward and backward passes
                      "time/model_seconds": self.clock.seconds - model_seconds})
        self.step += 1
        return StepReport(step=self.step, metrics=stats,
                          groups=tuple(tuple(group) for group in groups))

    def _filled(self, phase: Phase, samples: list[TrainingSample],
                stats: dict[str, float]) -> list[TrainingSample] | None:
        """The samples a step trains on, or None while they are too few to fill a batch.

        With ``std_threshold`` set (dapo's dynamic sampling), groups whose rewards agree are
        dropped, and Trinity's trainer still trains only full batches (``train_batch_size``
        experiences; ``buffer/storage/queue.py``): while its queue is short, its explorer
        runs the next steps with the same weights. So here: the samples that survive are
        carried until they reach ``batch_size x group_size``, the steps in between explore
        on unchanged weights and train nothing, and the step that fills the batch trains on
        every sample carried (all sampled by the weights it updates: no staleness, where
        Trinity trains an exact batch and carries its surplus on, a version stale)."""
        if phase.algorithm.advantage_args.get("std_threshold") is None:
            return samples
        pool = self.carried + samples
        stats["train/carried_samples"] = float(len(self.carried))
        if not pool:  # nothing survived and nothing waits: a step with nothing to learn
            self.untrained.append(self.step + 1)
            return None
        if len(pool) < phase.record.batch_size * phase.record.group_size:
            self.carried = pool
            self.waited.append(self.step + 1)
            return None
        self.carried = []
        return pool

    def _sft_step(self, phase: Phase) -> StepReport:
        """One SFT step on a batch of conversations (in the order of Trinity's shuffle);
        at a warm-up's end, its model is kept and RL begins (`_begin_rl`)."""
        started, model_seconds = time.perf_counter(), self.clock.seconds
        self.model.eval()
        samples = [self.conversations[i]
                   for i in self.sft_schedule.indices(self.step - phase.first)]
        lengths = [len(sample.response_ids) for sample in samples]
        stats = {"train/samples": float(len(samples)),
                 **aggregate_stats("response_length/{stat}", lengths, empty=0.0, std=False),
                 **self.update(samples)}
        elapsed = time.perf_counter() - started
        stats.update({"time/step_seconds": elapsed, "time/steps_per_second": 1.0 / elapsed,
                      "time/samples_per_second": len(samples) / elapsed,
                      "time/model_seconds": self.clock.seconds - model_seconds})
        self.step += 1
        if self.step == phase.first + phase.steps and phase is not self.phases[-1]:
            self._end_warmup()
        return StepReport(step=self.step, metrics=stats)

    def _end_warmup(self) -> None:
        """Keep the warm-up's model (`WARMUP_DIR`, never pruned) and checkpoint the step,
        then begin RL from it."""
        partial = self.run_dir / f".{WARMUP_DIR}.partial"
        self.model.save_pretrained(partial)
        self.tokenizer.save_pretrained(partial)
        # the step it ended at, which a resume holds the warm-up's length to
        (partial / Path(WARMUP_ENDED_JSON).name).write_text(json.dumps({"step": self.step}))
        shutil.rmtree(self.run_dir / WARMUP_DIR, ignore_errors=True)
        partial.rename(self.run_dir / WARMUP_DIR)
        self.save()
        self._begin_rl(fresh_optimizer=True)

    def _begin_rl(self, *, fresh_optimizer: bool) -> None:
        """RL after a warm-up starts as Trinity's RL stage does: a new optimizer (unless
        one is restored), and the warm-up's model as the reference."""
        if fresh_optimizer:
            self.optimizer = self._optimizer(self.graph.algorithm)
        if self.algorithm.uses_reference:
            self.reference, _ = load_folder(self.run_dir / WARMUP_DIR, "the warm-up's model")
            self.reference.eval().requires_grad_(False)
            self.clock.watch(self.reference)

    def evaluate(self) -> dict[str, float]:
        """Mean reward and user metrics over the eval dataset, one rollout per task, by
        name (``reward`` first; NaN when every rollout failed)."""
        self.model.eval()
        self.explorer.reseed(self.graph.algorithm.seed * 1_000_003 - 1 - self.step)
        groups = self.explorer.rollouts(self.eval_rows, list(range(len(self.eval_rows))), 1)
        results = [group[0].result for group in groups if group[0].result is not None]
        # why its failed rollouts failed (left out of the means, as Trinity leaves a
        # failed eval task out)
        self.eval_errors = [str(group[0].error) for group in groups if group[0].result is None]
        means = {"reward": sum(r.reward for r in results) / len(results) if results
                 else float("nan")}
        for name in {key for result in results for key in result.metrics}:
            values = [r.metrics[name] for r in results if name in r.metrics]
            means.setdefault(name, sum(values) / len(values))
        return means

    def close(self) -> None:
        """Release what the explorer holds (`LocalExplorer.close`) and let the collector
        walk the run's objects again."""
        self.explorer.close()
        gc.unfreeze()

    # ---------------------------------------------------------------- state

    def save(self) -> Path:
        """Write ``global_step_N`` (model in Hugging Face format, optimizer, position; with
        LoRA the merged model and ``adapter/``, see `tunedsl.backends.local.lora`)."""
        return save_checkpoint(self.run_dir, self.step, model=self.model,
                               tokenizer=self.tokenizer, optimizer=self.optimizer,
                               adapter=self.adapter, seed=self.graph.algorithm.seed,
                               total_steps=self.total_steps)

    def restore(self, *, skip_damaged: bool = False) -> int | None:
        """Continue from the newest ``global_step_N`` of the run directory; returns N, or
        None when it has none (``global_step_0``, saved by an interrupt before step 1, is 0).

        A damaged newest checkpoint (a crash or a full disk mid-save) is named with the
        file that is wrong; with ``skip_damaged`` the newest good one is used instead.
        """
        step = restore_checkpoint(self.run_dir, model=self.model, optimizer=self.optimizer,
                                  adapter=self.adapter, skip_damaged=skip_damaged)
        if step is None:
            return None
        self.step = step
        self._refuse_another_warmup_length()
        if len(self.phases) > 1 and step >= self.phases[1].first:
            # At the warm-up's last step the checkpoint holds its optimizer: RL's is new.
            self._begin_rl(fresh_optimizer=step == self.phases[1].first)
        return step


    def _refuse_another_warmup_length(self) -> None:
        """A warm-up that ended at another step than the experiment now gives it: steps
        count from the run's start, so the run would train SFT on the RL-trained model and
        repeat RL's steps (or skip into RL's schedule) without a word (sweep 47 B-S1: a
        length given by --set when it ran, and resumed without it)."""
        record = self.run_dir / WARMUP_ENDED_JSON
        if len(self.phases) < 2 or not record.is_file():
            return
        try:
            ended = json.loads(record.read_text(encoding="utf-8"))["step"]
        except (OSError, ValueError, KeyError, TypeError):
            return  # (a record it cannot read holds nothing to hold the length to)
        now = self.phases[0].steps
        # (resumed from the warm-up's end or before it, no RL step is kept: a longer
        # warm-up goes on; sweep 47 B-W8. A shorter one would skip into RL's schedule)
        if isinstance(ended, int) and ended != now and self.step > min(ended, now):
            raise ConfigError(f"warmup_dataset: the run's warm-up ended after step {ended} "
                              f"(its model is in {self.run_dir / WARMUP_DIR}) and RL began, "
                              f"and the experiment now gives the warm-up {now} steps: it would "
                              f"train SFT on the RL-trained model, or skip into RL's schedule; "
                              f"resume with the warm-up's settings it ran with (its length "
                              f"{ended} steps), or start a new run")


def _abbreviated(row: Any, most: int = 300) -> str:
    """A task as a message shows it: its first ``most`` characters and how many there are
    (a task may be megabytes of text)."""
    text = str(row)
    return text if len(text) <= most else f"{text[:most]}... ({len(text)} characters)"
