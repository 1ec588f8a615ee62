"""Train one run, or one slice of it, resuming exactly at an epoch boundary.

The trainer is made of stateful parts: the engine (model and optimizer), the data position, the
random number generators, the counters and the metrics writer. A checkpoint is their assembly,
which the run's `ebd2n.train.checkpoint.CheckpointManager` saves, resumes from and lets go of;
the training order is a pure function of the seed and the data position, so N slices give the
same result as one job (bitwise on CPU when deterministic).

Every process of a torchrun job runs this same code: the distributed engine does the collectives
(its state_dict and evaluation model are assembled on the main process) and the process context
says which process writes the run directory (`ebd2n.train.output`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ebd2n.atomic import atomic_write_text, remove_temporaries
from ebd2n.config import Recipe, dump_recipe, hf_identity, recipe_identity
from ebd2n.data import BlockReader, Cache, eval_subset_indices, open_verified_cache
from ebd2n.errors import UserError
from ebd2n.layout import FINAL, RECIPE, RunPaths
from ebd2n.parallel import distributed
from ebd2n.parallel.distributed import Context
from ebd2n.provenance import environment, job_id, source_hash, timestamp
from ebd2n.train.accounting import unit_table
from ebd2n.train.budget import Budget, budget_of
from ebd2n.train.checkpoint import CheckpointManager, Provenance, Saved, Stateful
from ebd2n.train.divergence import RECORD_TYPE, Rules, observe
from ebd2n.train.engine import build_engine, configure_torch
from ebd2n.train.output import RunOutput, SilentOutput, claim_run_dir, run_directory
from ebd2n.train.retention import Retention
from ebd2n.train.runlog import format_memory
from ebd2n.train.schedule import learning_rate
from ebd2n.train.state import DataPosition, Progress, RandomState
from ebd2n.train.step import Engine, StepResult, bf16_autocast
from ebd2n.train.validation import block_batches, evaluate_sequences


@dataclass(frozen=True)
class Slice:
    """What this job trains: the run, its budget and provenance, and the epochs of the slice."""

    recipe: Recipe
    budget: Budget
    checkpoints: CheckpointManager
    context: Context
    config_path: Path | None
    resume: str | None
    """The checkpoint (relative to the run directory) the slice starts from; None: the start."""
    start_epoch: int
    end_epoch: int
    slice_ends: tuple[int, ...] = ()
    """The run's planned slice ends (its campaign's plan; none for a run trained alone): a diverged
    run leaves the record of each one still ahead, so the jobs that would train them find them."""

    @property
    def run_dir(self) -> Path:
        return run_directory(self.recipe)

    @property
    def retention(self) -> Retention:
        return self.checkpoints.retention

    @property
    def provenance(self) -> Provenance:
        return self.checkpoints.provenance


@dataclass(frozen=True)
class Parts:
    """The trainer's stateful parts, by their key in a checkpoint."""

    engine: Engine
    data: DataPosition
    progress: Progress
    rng: RandomState
    metrics: Stateful
    """The metrics writer (a MetricsLog on the main process)."""

    def stateful(self) -> dict[str, Stateful]:
        """Every part by its key in a checkpoint."""
        return {
            "engine": self.engine,
            "data": self.data,
            "progress": self.progress,
            "rng": self.rng,
            "metrics": self.metrics,
        }


def train(
    recipe: Recipe,
    config_path: Path | None = None,
    resume: Path | None = None,
    until_epoch: int | None = None,
    progress: bool = True,
    wait: bool = False,
    slice_ends: tuple[int, ...] = (),
) -> bool:
    """Train the run to `until_epoch` (default: the end of its budget); False when it was there already.

    The run resumes from its newest valid checkpoint (or `resume`, named by hand) and does nothing
    when that epoch is reached already, so a job can always be run again. `wait`: wait for a live
    trainer holding the run directory instead of refusing. The run's dashboard is its caller's to
    write once the run is complete (`ebd2n train` does): the report layer builds on this one.
    A run that diverges (ebd2n.train.divergence) stops at once and leaves its final records, and
    the record of each of `slice_ends` still ahead: every later job of the run has nothing to do.
    """
    run_dir = run_directory(recipe)
    budget = budget_of(recipe)
    end_epoch = budget.epochs if until_epoch is None else until_epoch
    if not 1 <= end_epoch <= budget.epochs:
        raise UserError(
            f"--until-epoch {end_epoch}: must be at least 1 and at most the budget's {budget.epochs} epochs"
        )
    cache = open_verified_cache(recipe.data.cache_dir, recipe.model.vocab_size)
    provenance = Provenance(recipe_identity(recipe, cache.identity), cache.identity, source_hash())
    checkpoints = CheckpointManager(run_dir, provenance, Retention(recipe.training.checkpoint_policy, budget.epochs))
    named = checkpoints.named(resume)
    configure_torch(recipe)
    context = distributed.init(recipe)
    parts_of = _parts_builder(recipe, budget, cache, context)  # every check before anything is written
    lease = claim_run_dir(recipe, provenance, context, wait)
    try:
        start, notes = checkpoints.load(context, named)
        if start is not None and start.epoch >= end_epoch and _reached(run_dir, end_epoch, budget.epochs, context):
            if context.is_main:
                checkpoints.let_go(start.epoch)
            return False  # reached already: nothing to train, train.log and metrics.jsonl untouched
        job = Slice(
            recipe,
            budget,
            checkpoints,
            context,
            config_path,
            start and start.relative,
            min(start.epoch, end_epoch) if start else 0,
            end_epoch,
            tuple(slice_ends),
        )
        _train_job(job, parts_of, start, notes, progress)
    finally:
        try:
            context.close()  # leaves the process group it joined
        finally:
            if lease is not None:
                lease.release()
    return True


def _reached(run_dir: Path, end_epoch: int, epochs: int, context: Context) -> bool:
    """Whether a job ending at `end_epoch`, whose state is saved already, has nothing left to do.
    A slice's only record is written here if it is missing; the end of the budget needs best.json
    and run.json, which only a trainer with its parts restored can write."""
    paths = RunPaths(run_dir)
    if end_epoch == epochs:
        return paths.best.is_file() and paths.record.is_file()
    if context.is_main and not paths.slice_record(end_epoch).is_file():
        _write_slice_record(run_dir, end_epoch, epochs)
    return True


def _write_slice_record(run_dir: Path, epoch: int, epochs: int) -> None:
    """A slice job's output: the run has reached `epoch` (the same bytes whoever writes it). The
    temporaries of records whose killed writers never renamed them go first (this is their only writer)."""
    path = RunPaths(run_dir).slice_record(epoch)
    remove_temporaries(path.parent)
    atomic_write_text(path, json.dumps({"epoch": epoch, "epochs": epochs}) + "\n")


def _parts_builder(recipe: Recipe, budget: Budget, cache: Cache, context: Context):
    """The engine, the data position and the validation subset, built (and so checked) now; the
    returned function assembles the trainer's parts around the job's metrics writer."""
    torch.manual_seed(recipe.runtime.seed)
    engine = build_engine(recipe, budget, context.device, context)
    block_len = recipe.model.context_length + 1
    data = DataPosition(BlockReader(cache, "train", block_len), budget, recipe.runtime.seed, context.device)
    eval_blocks = _eval_subset(recipe, cache)

    def parts_of(metrics: Stateful) -> tuple[Parts, torch.Tensor]:
        return Parts(engine, data, Progress(), RandomState(), metrics), eval_blocks

    return parts_of


def _train_job(job: Slice, parts_of, start: Saved | None, notes: list[str], progress: bool) -> None:
    """Restore the parts from `start`, train the slice and write what it leaves."""
    this_job = job_id()
    output = RunOutput.open(job.run_dir, this_job, job.context)
    try:
        for note in notes:
            output.write(note)
        parts, eval_blocks = parts_of(output.metrics)
        if start is not None:
            job.checkpoints.restore(parts.stateful(), start)
        parts.progress.job_ids.append(this_job)
        _run_slice(job, parts, output, eval_blocks, progress and output.writes)
    finally:
        output.close()


def _run_slice(
    job: Slice, parts: Parts, output: RunOutput | SilentOutput, eval_blocks: torch.Tensor, progress: bool
) -> None:
    """The slice's epochs, its checkpoints and what it leaves: the slice record or, at the end of
    the budget, the run's final records; then the checkpoints its retention lets go."""
    budget, retention = job.budget, job.retention
    _log_header(output, job)

    def save(epoch: int) -> None:
        tokens = budget.tokens_after(parts.data.step)
        relative, digest = job.checkpoints.save(epoch, parts.stateful(), tokens, output.writes)
        output.write(f"checkpoint {relative} written, sha256 {digest}")

    loop = _Loop(job, parts, output, eval_blocks, progress)
    if job.resume is None and retention.writes(0, job.end_epoch):  # the initial weights (policy all)
        save(0)
    for epoch in range(job.start_epoch, job.end_epoch):
        if parts.progress.diverged is not None:
            break
        loop.run_epoch(epoch)
        if parts.progress.diverged is not None:
            save(budget.epochs)  # final.pt: the weights at the decision (a skipped step's update was never applied)
        elif retention.writes(epoch + 1, job.end_epoch):
            save(epoch + 1)
    if parts.progress.diverged is not None:
        _end_diverged(job, parts, output)
        return
    if job.start_epoch == job.end_epoch:
        output.write(f"epoch {job.end_epoch} reached already ({job.resume}): its records written")
    if not output.writes:
        return
    if job.end_epoch == budget.epochs:
        _write_best(job, parts.progress, output)
        _write_run_record(job, parts, output)
    else:
        _write_slice_record(job.run_dir, job.end_epoch, budget.epochs)
    job.checkpoints.let_go(job.end_epoch)
    output.write(f"slice done: epochs {job.start_epoch}..{job.end_epoch} of {budget.epochs}")


def _end_diverged(job: Slice, parts: Parts, output: RunOutput | SilentOutput) -> None:
    """What a diverged run leaves besides final.pt: the record of every slice end still ahead, then
    best.json and run.json, as a run at the end of its budget does; nothing is trained after it."""
    if not output.writes:
        return
    epochs = job.budget.epochs
    for end in sorted({*(end for end in job.slice_ends if job.end_epoch <= end < epochs), job.end_epoch} - {epochs}):
        _write_slice_record(job.run_dir, end, epochs)
    _write_best(job, parts.progress, output)
    _write_run_record(job, parts, output)
    job.checkpoints.let_go(epochs)
    output.write(f"slice done: epochs {job.start_epoch}..{job.end_epoch} of {epochs}, stopped: the run diverged")


def _eval_subset(recipe: Recipe, cache: Cache) -> torch.Tensor:
    """The fixed validation subset every epoch is measured on (read before the run starts)."""
    validation = BlockReader(cache, "validation", recipe.model.context_length + 1)
    subset = eval_subset_indices(validation.num_blocks, recipe.evaluation.subset_blocks, recipe.evaluation.seed)
    return validation.read(subset)


class _Loop:
    """The epoch loop of one slice: steps, per-step records, subset validation, epoch records."""

    def __init__(
        self, job: Slice, parts: Parts, output: RunOutput | SilentOutput, eval_blocks: torch.Tensor, progress: bool
    ) -> None:
        self.job, self.parts, self.output, self.eval_blocks, self.progress = job, parts, output, eval_blocks, progress
        self.recipe, self.budget, self.engine, self.device = job.recipe, job.budget, parts.engine, job.context.device
        self.rules = Rules.of(job.recipe, job.budget)

    def run_epoch(self, epoch: int) -> None:
        """Train epoch `epoch` and measure it, or stop at a step where the run diverged."""
        budget, counters = self.budget, self.parts.progress
        started = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        losses = []
        steps = budget.epoch_steps(epoch)
        bar = tqdm(steps, desc=f"epoch {epoch + 1}/{budget.epochs}", disable=not self.progress, leave=False)
        for step in bar:
            result = self._step(step, epoch)
            if counters.diverged is not None:
                bar.close()
                return  # no step, and no measurement, after the decision
            losses.append(result.loss)
            bar.set_postfix(loss=f"{result.loss:.4f}")
        elapsed = time.perf_counter() - started
        counters.epoch = epoch + 1
        evaluation_model = self.engine.evaluation_model()  # the whole model on the main process only
        subset = (
            None
            if evaluation_model is None
            else evaluate_sequences(
                evaluation_model,
                block_batches(self.eval_blocks, self.recipe.evaluation.batch_size),
                self.device,
                self.engine.use_amp,
            )
        )
        memory = distributed.gather_memory(self.job.context)  # every device of the job, on the main process
        if subset is None:
            return  # another process of the job: nothing to measure or record
        val_loss, val_accuracy, _ = subset
        step = self.parts.data.step
        record = {
            "type": "epoch",
            "epoch": epoch + 1,
            "step": step,
            "tokens": budget.tokens_after(step),
            "train_loss": sum(losses) / len(losses),
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
            "lr": learning_rate(budget.tokens_after(step), budget.total_tokens, self.recipe.optimizer),
            "tokens_per_s": budget.epoch_blocks(epoch) * budget.context_length / elapsed,
            "batches_per_s": len(steps) / elapsed,
            "wall_s": elapsed,
            "memory": memory,
            "skipped_steps": counters.skipped_steps,
            **self.engine.epoch_metrics(),
        }
        self.output.append(record)
        if counters.best is None or val_loss < counters.best["val_loss"]:
            counters.best = {
                "epoch": epoch + 1,
                "step": step,
                "tokens": record["tokens"],
                "val_loss": val_loss,
                "val_accuracy": val_accuracy,
            }
        extra = "".join(f" | {k.replace('_', ' ')} {v:.4g}" for k, v in self.engine.epoch_metrics().items())
        self.output.write(
            f"epoch {epoch + 1}/{budget.epochs} | step {step} | {record['tokens_per_s']:,.0f} tok/s | "
            f"mem {format_memory(memory)}{distributed.most_loaded(memory)} | train loss {record['train_loss']:.4f} | "
            f"val loss {val_loss:.4f} acc {100 * val_accuracy:.2f}% | lr {record['lr']:.3e}{extra}"
        )

    def _step(self, step: int, epoch: int) -> StepResult:
        """One optimizer step and its record; the divergence decision when a rule fires at it."""
        budget, counters = self.budget, self.parts.progress
        sequences = self.parts.data.next_batch()  # an epoch's last step may be shortened
        tokens = budget.tokens_after(step + 1)
        lr = learning_rate(tokens, budget.total_tokens, self.recipe.optimizer)
        result = self.engine.train_step(sequences, lr)
        if result.skipped:
            counters.skipped_steps += 1
            self.output.write(f"step {step + 1}: non-finite gradient norm ({result.grad_norm}); step skipped")
        fired = observe(self.rules, counters, result.loss, result.skipped, tokens)
        self.output.append(
            {
                "type": "step",
                "step": step + 1,
                "loss": result.loss,
                "accuracy": result.accuracy,
                "lr": lr,
                "grad_norm": result.grad_norm,
                "skipped": result.skipped,
            }
        )
        if (step + 1) % self.recipe.training.log_every == 0:
            self.output.write(f"step {step + 1}/{budget.total_steps} | loss {result.loss:.4f} | lr {lr:.3e}")
        if fired is not None:
            rule, detail = fired
            counters.diverged = {
                "type": RECORD_TYPE,
                "step": step + 1,
                "tokens": tokens,
                "epoch": epoch + 1,
                "rule": rule,
                "last_finite_loss": counters.last_finite_loss,
                "detail": detail,
            }
            self.output.append(counters.diverged)
            last = "none" if counters.last_finite_loss is None else f"{counters.last_finite_loss:.4f}"
            self.output.write(
                f"diverged at step {step + 1} (rule {rule}): {detail}; last finite loss {last}; "
                f"training stops here, its weights in {FINAL}, no full validation"
            )
        return result


def _write_best(job: Slice, counters: Progress, output: RunOutput | SilentOutput) -> None:
    """best.json, whose `weights` name the kept checkpoint of the best epoch (null under the final
    policy, which keeps none)."""
    if counters.best is None and counters.diverged is None:  # another process of the job: it measured no epoch
        return
    if counters.best is None:  # diverged before its first epoch ended: no epoch was measured
        output.write_json(
            RunPaths(job.run_dir).best,
            {"epoch": None, "step": None, "tokens": None, "val_loss": None, "val_accuracy": None, "weights": None},
        )
        output.write(f"best subset epoch: none, the run diverged in epoch 1 ({RunPaths(job.run_dir).best.name})")
        return
    best = dict(counters.best, weights=job.retention.best_weights(counters.best["epoch"]))
    path = RunPaths(job.run_dir).best
    output.write_json(path, best)
    output.write(f"best subset epoch {best['epoch']}: val loss {best['val_loss']:.4f} ({path.name})")


def _write_run_record(job: Slice, parts: Parts, output: RunOutput | SilentOutput) -> None:
    """run.json: who trained what, where and how, unit by unit (the dashboard's source)."""
    recipe, context, counters, provenance = job.recipe, job.context, parts.progress, job.provenance
    steps = parts.data.step
    env = environment()
    device = context.device
    units = unit_table(recipe, str(device), steps, counters.skipped_steps)
    devices = context.unit_devices()  # the device(s) holding each unit
    for unit in units:
        unit["device"] = devices[unit["name"]]
    record = {
        "run_id": job.run_dir.name,
        "purpose": recipe.runtime.purpose,
        "config_path": str(job.config_path or ""),
        "recipe_identity": provenance.recipe_identity,
        "cache_identity": provenance.cache_identity,
        "source_hash": provenance.source_hash,
        "mode": recipe.mode,
        "host": env["host"],
        "devices": env["devices"],
        "visible_devices": env["visible_devices"],
        "python": env["python"],
        "torch": env["torch"],
        "cuda": env["cuda"],
        "job_ids": counters.job_ids,
        "started": timestamp(counters.started),
        "ended": timestamp(),
        "parameters": sum(u["parameters"] for u in units),
        "trainable_parameters": sum(u["trainable"] for u in units),
        "steps": steps,
        "skipped_steps": counters.skipped_steps,
        "tokens": job.budget.tokens_after(steps),
        "numerics": {
            "dtype": "bf16" if bf16_autocast(recipe, device) else "fp32",
            "compile": recipe.runtime.compile,
            "deterministic": recipe.runtime.deterministic,
        },
        "placement": context.placement_record(),
        "units": units,
    }
    if counters.diverged is not None:
        record["diverged"] = counters.diverged
    if recipe.model.source == "huggingface":  # which model was fine-tuned, for the dashboard's identity section
        record["model"] = {"path": recipe.model.path, **hf_identity(recipe.model)}
    output.write_json(RunPaths(job.run_dir).record, record)


def _log_header(output: RunOutput | SilentOutput, job: Slice) -> None:
    recipe, budget, provenance, device = job.recipe, job.budget, job.provenance, job.context.device
    env = environment()
    output.write(f"config {job.config_path or '-'} | purpose: {recipe.runtime.purpose or '-'}")
    output.write(
        f"host {env['host']} | python {env['python']} | torch {env['torch']} | cuda {env['cuda'] or '-'} | devices {', '.join(env['devices'])}"
    )
    if env["visible_devices"] is not None:
        output.write(f"gpu slots CUDA_VISIBLE_DEVICES={env['visible_devices']}")
    output.write(
        f"recipe identity {provenance.recipe_identity} | cache {provenance.cache_identity} | source {provenance.source_hash}"
    )
    output.write(
        f"mode {recipe.mode} | parameters {budget.parameters:,} | budget {budget.total_tokens:,} tokens in {budget.epochs} "
        f"epochs, {budget.total_steps:,} steps of up to {budget.tokens_per_step:,} tokens | lr {recipe.optimizer.lr} beta2 {recipe.optimizer.beta2} | seed {recipe.runtime.seed}"
    )
    dtype = "bf16 autocast" if bf16_autocast(recipe, device) else "fp32"
    output.write(f"numerics {dtype} | compile {recipe.runtime.compile} | deterministic {recipe.runtime.deterministic}")
    if job.resume is None:  # the whole recipe once; later slices resume the same recipe (same identity)
        for line in dump_recipe(recipe).splitlines():
            output.write(f"  {line}")
    else:
        output.write(f"recipe as in the first slice ({RECIPE}, identity {provenance.recipe_identity})")
    for line in job.context.placement_lines():  # one line per stage in multi-process jobs
        output.write(line)
    action = f"resume from {job.resume} at epoch {job.start_epoch}" if job.resume else "start"
    output.write(f"slice: {action}, train to epoch {job.end_epoch}")
