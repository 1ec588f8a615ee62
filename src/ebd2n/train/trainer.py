"""Train one run, or one slice of it, resuming exactly at an epoch boundary.

Everything a slice needs to continue is in its checkpoint: model and optimizer states, the step
counter (which fixes the LR-schedule position and the data position, since the training order
is a pure function of seed and position), RNG states, best-epoch statistics and the length of
metrics.jsonl. N slices therefore give the same result as one job (bitwise on CPU when
deterministic).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from ebd2n.atomic import atomic_write_text
from ebd2n.config import Recipe, dump_recipe, hf_identity, load_recipe, recipe_identity, save_recipe
from ebd2n.data import BlockReader, Cache, eval_subset_indices, open_verified_cache, train_block_indices
from ebd2n.errors import RunFailed, UserError
from ebd2n.faults import kill_point
from ebd2n.layout import FINAL, RECIPE, RunPaths, checkpoint_epoch, slice_checkpoint
from ebd2n.parallel import distributed
from ebd2n.provenance import environment, job_id, source_hash, timestamp
from ebd2n.train.accounting import unit_table
from ebd2n.train.budget import budget_of
from ebd2n.train.checkpoint import (
    Provenance,
    forget_checkpoint,
    load_checkpoint,
    read_checkpoint_ledger,
    run_dir_of,
    save_checkpoint,
)
from ebd2n.train.engine import build_engine, configure_torch
from ebd2n.train.lease import take_lease
from ebd2n.train.runlog import MetricsLog, TrainLog, format_memory
from ebd2n.train.schedule import learning_rate
from ebd2n.train.validation import block_batches, evaluate_sequences

KEEPS_EPOCHS = ("epoch", "all")
"""Checkpoint policies that keep a checkpoint at every epoch boundary (`all` also keeps epoch 0)."""


@dataclass
class Progress:
    """Counters carried across slices in the checkpoint."""

    step: int = 0
    epoch: int = 0
    skipped_steps: int = 0
    consecutive_skips: int = 0
    best: dict | None = None
    job_ids: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)


class _Muted:
    """parallel: train.log and metrics.jsonl of ranks other than 0, which write nothing."""

    def write(self, line: str) -> None:
        pass

    def append(self, record: dict) -> None:
        pass

    def sync(self) -> int:
        return 0

    def close(self) -> None:
        pass


def train(
    recipe: Recipe,
    config_path: Path | None = None,
    resume: Path | None = None,
    until_epoch: int | None = None,
    progress: bool = True,
) -> Path:
    """Train from the start (or `resume`) to `until_epoch` (default: the end); return the run dir.

    The run's dashboard is its caller's to write once the run is complete (`ebd2n train` does):
    the report layer builds on this one.
    """
    run_dir = Path(recipe.runtime.output_dir)
    policy = recipe.training.checkpoint_policy
    budget = budget_of(recipe)
    cache = open_verified_cache(recipe.data.cache_dir, recipe.model.vocab_size)
    provenance = Provenance(recipe_identity(recipe, cache.identity), cache.identity, source_hash())
    configure_torch(recipe)
    context = distributed.init(recipe)  # parallel: rank, device and placement (one process: the recipe's device)
    device = context.device

    state = load_checkpoint(resume, provenance) if resume else None
    if resume is not None and run_dir_of(Path(resume)).resolve() != run_dir.resolve():
        raise UserError(
            f"--resume {resume}: a checkpoint of run directory {run_dir_of(Path(resume))}, not of runtime.output_dir "
            f"{run_dir}; a run resumes in its own directory"
        )
    start_epoch = int(state["epoch"]) if state else 0
    end_epoch = budget.epochs if until_epoch is None else until_epoch
    if not start_epoch < end_epoch <= budget.epochs:
        raise UserError(
            f"--until-epoch {end_epoch}: must be after the resume point (epoch {start_epoch}) "
            f"and at most the budget's {budget.epochs} epochs"
        )

    torch.manual_seed(recipe.runtime.seed)
    engine = build_engine(recipe, budget, device, context)
    counters = Progress()
    if state:
        engine.load_state_dict(state["engine"])
        counters = Progress(**state["progress"])
        _restore_rng(state["rng"])
    blocks = _Blocks(recipe, cache)
    # every check has passed: only now is anything written to the run directory, under a lease that
    # keeps any other trainer out of it
    lease = take_lease(run_dir) if context.is_main else None  # parallel: rank 0 owns the run directory
    this_job = job_id()
    counters.job_ids.append(this_job)
    try:
        if lease:
            _claim_run_dir(run_dir, recipe, provenance, resumed=state is not None, end_epoch=end_epoch)
        log = TrainLog(run_dir, this_job) if context.is_main else _Muted()  # parallel: only rank 0 writes records
        metrics = MetricsLog(run_dir, int(state["metrics_offset"]) if state else 0) if context.is_main else _Muted()
    except BaseException:
        if lease:
            lease.release()
        raise
    try:
        _log_header(log, recipe, budget, provenance, config_path, context, resume, start_epoch, end_epoch)
        loop = _Loop(recipe, budget, engine, blocks, context, log, metrics, counters, progress and context.is_main)
        if policy == "all" and state is None:  # the initial weights, kept with every later state
            _write_checkpoint(run_dir, slice_checkpoint(0), engine, counters, provenance, metrics, log, context)
        for epoch in range(start_epoch, end_epoch):
            loop.run_epoch(epoch)
            if policy in KEEPS_EPOCHS and epoch + 1 < budget.epochs:
                _write_checkpoint(run_dir, slice_checkpoint(epoch + 1), engine, counters, provenance, metrics, log, context)
        if end_epoch == budget.epochs:
            _finish(run_dir, recipe, engine, counters, provenance, metrics, log, context)
            if context.is_main:  # parallel
                _write_run_record(run_dir, recipe, budget, counters, provenance, config_path, context)
        elif policy == "final":
            _write_checkpoint(run_dir, slice_checkpoint(end_epoch), engine, counters, provenance, metrics, log, context)
        if resume and policy == "final" and context.is_main:  # parallel: rank 0 deletes
            forget_checkpoint(run_dir, Path(resume).resolve().relative_to(run_dir.resolve()).as_posix())
            log.write(f"removed consumed slice checkpoint {Path(resume).name} (policy final)")
            kill_point("train.consumed", run_dir.name)
        log.write(f"slice done: epochs {start_epoch}..{end_epoch} of {budget.epochs}")
    finally:
        metrics.close()
        log.close()
        context.close()  # parallel: leaves the process group it joined
        if lease:
            lease.release()
    return run_dir


class _Blocks:
    """What a slice reads: the training blocks and the fixed validation subset (read before the run starts)."""

    def __init__(self, recipe: Recipe, cache: Cache) -> None:
        block_len = recipe.model.context_length + 1
        self.train = BlockReader(cache, "train", block_len)
        validation = BlockReader(cache, "validation", block_len)
        subset = eval_subset_indices(validation.num_blocks, recipe.evaluation.subset_blocks, recipe.evaluation.seed)
        self.eval = validation.read(subset)


class _Loop:
    """The epoch loop of one slice: steps, per-step records, subset validation, epoch records."""

    def __init__(self, recipe, budget, engine, blocks, context, log, metrics, counters, progress) -> None:
        self.recipe, self.budget, self.engine, self.device = recipe, budget, engine, context.device
        self.context = context  # parallel
        self.log, self.metrics, self.counters, self.progress = log, metrics, counters, progress
        self.train_blocks, self.eval_blocks = blocks.train, blocks.eval

    def run_epoch(self, epoch: int) -> None:
        budget, counters = self.budget, self.counters
        started = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        losses = []
        steps = budget.epoch_steps(epoch)
        bar = tqdm(steps, desc=f"epoch {epoch + 1}/{budget.epochs}", disable=not self.progress, leave=False)
        for step in bar:
            result = self._step(step)
            losses.append(result.loss)
            bar.set_postfix(loss=f"{result.loss:.4f}")
        elapsed = time.perf_counter() - started
        evaluation_model = self.engine.evaluation_model()  # parallel: collective; the whole model on rank 0 only
        counters.epoch = epoch + 1
        if not self.context.is_main:  # parallel: the other ranks only join rank 0's memory gather
            distributed.gather_memory(self.context)
            return
        val_loss, val_accuracy, _ = evaluate_sequences(
            evaluation_model, block_batches(self.eval_blocks, self.recipe.evaluation.batch_size),
            self.device, self.recipe.runtime.amp,
        )
        memory = distributed.gather_memory(self.context)  # parallel: every device of the job
        record = {
            "type": "epoch", "epoch": epoch + 1, "step": counters.step, "tokens": budget.tokens_after(counters.step),
            "train_loss": sum(losses) / len(losses), "val_loss": val_loss, "val_accuracy": val_accuracy,
            "lr": learning_rate(budget.tokens_after(counters.step), budget.total_tokens, self.recipe.optimizer),
            "tokens_per_s": budget.epoch_blocks(epoch) * budget.context_length / elapsed,
            "batches_per_s": len(steps) / elapsed, "wall_s": elapsed, "memory": memory,
            "skipped_steps": counters.skipped_steps, **self.engine.epoch_metrics(),
        }
        self.metrics.append(record)
        if counters.best is None or val_loss < counters.best["val_loss"]:
            counters.best = {"epoch": epoch + 1, "step": counters.step, "tokens": record["tokens"],
                             "val_loss": val_loss, "val_accuracy": val_accuracy}
        extra = "".join(f" | {k.replace('_', ' ')} {v:.4g}" for k, v in self.engine.epoch_metrics().items())
        self.log.write(
            f"epoch {epoch + 1}/{budget.epochs} | step {counters.step} | {record['tokens_per_s']:,.0f} tok/s | "
            f"mem {format_memory(memory)}{distributed.most_loaded(memory)} | train loss {record['train_loss']:.4f} | "
            f"val loss {val_loss:.4f} acc {100 * val_accuracy:.2f}% | lr {record['lr']:.3e}{extra}"
        )

    def _step(self, step: int):
        budget, counters = self.budget, self.counters
        start, count = budget.step_span(step)  # an epoch's last step may be shortened
        indices = train_block_indices(self.train_blocks.num_blocks, self.recipe.runtime.seed, start, count)
        sequences = self.train_blocks.read(indices).to(self.device, non_blocking=True)
        lr = learning_rate(budget.tokens_after(step + 1), budget.total_tokens, self.recipe.optimizer)
        result = self.engine.train_step(sequences, lr)
        counters.step = step + 1
        if result.skipped:
            counters.skipped_steps += 1
            counters.consecutive_skips += 1
            self.log.write(f"step {step + 1}: non-finite gradient norm ({result.grad_norm}); step skipped")
            if counters.consecutive_skips >= self.recipe.training.max_consecutive_skips:
                raise RunFailed(
                    f"{counters.consecutive_skips} consecutive steps had non-finite gradients (last at step {step + 1}); "
                    "lower optimizer.lr or check the data"
                )
        else:
            counters.consecutive_skips = 0
        self.metrics.append({
            "type": "step", "step": step + 1, "loss": result.loss, "accuracy": result.accuracy, "lr": lr,
            "grad_norm": result.grad_norm, "skipped": result.skipped,
        })
        if (step + 1) % self.recipe.training.log_every == 0:
            self.log.write(f"step {step + 1}/{budget.total_steps} | loss {result.loss:.4f} | lr {lr:.3e}")
        return result


def _claim_run_dir(run_dir: Path, recipe: Recipe, provenance: Provenance, resumed: bool, end_epoch: int) -> None:
    """Refuse a directory holding another run, a finished run, or a run that should be resumed."""
    existing = RunPaths(run_dir).recipe
    if existing.is_file():
        other = load_recipe(existing)
        if recipe_identity(other, provenance.cache_identity) != provenance.recipe_identity:
            raise UserError(
                f"runtime.output_dir {run_dir}: holds a different run (its {existing.name} differs); "
                "choose another runtime.output_dir"
            )
    if RunPaths(run_dir).final.exists():
        raise UserError(f"runtime.output_dir {run_dir}: the run is already complete ({FINAL} exists)")
    # a job killed after writing a checkpoint has it deleted by Snakemake: only existing files count.
    # Under the epoch and all policies a fresh start may rewrite checkpoints before its own end (a
    # first slice killed midway left them; it writes them again, bit for bit), never later ones.
    kept = [name for name in read_checkpoint_ledger(run_dir) if (run_dir / name).exists()]
    own = recipe.training.checkpoint_policy in KEEPS_EPOCHS
    later = [name for name in kept if not own or checkpoint_epoch(name) is None or checkpoint_epoch(name) >= end_epoch]
    if not resumed and later:
        raise UserError(
            f"runtime.output_dir {run_dir}: holds slice checkpoints ({', '.join(later)}); "
            f"resume from the latest with --resume {run_dir}/<checkpoint>"
        )
    if not existing.is_file():  # an audited artifact: written once, never rewritten by later slices
        save_recipe(recipe, existing)


def _write_run_record(run_dir, recipe, budget, counters, provenance, config_path, context) -> None:
    """run.json: who trained what, where and how, unit by unit (the dashboard's source)."""
    env = environment()
    device = context.device
    units = unit_table(recipe, str(device), counters.step, counters.skipped_steps)
    devices = context.unit_devices()  # parallel: the device(s) holding each unit
    for unit in units:
        unit["device"] = devices[unit["name"]]
    record = {
        "run_id": run_dir.name, "purpose": recipe.runtime.purpose, "config_path": str(config_path or ""),
        "recipe_identity": provenance.recipe_identity, "cache_identity": provenance.cache_identity,
        "source_hash": provenance.source_hash, "mode": recipe.mode, "host": env["host"], "devices": env["devices"],
        "python": env["python"], "torch": env["torch"], "cuda": env["cuda"], "job_ids": counters.job_ids,
        "started": timestamp(counters.started), "ended": timestamp(),
        "parameters": sum(u["parameters"] for u in units), "trainable_parameters": sum(u["trainable"] for u in units),
        "steps": counters.step, "skipped_steps": counters.skipped_steps, "tokens": budget.tokens_after(counters.step),
        "numerics": {"dtype": "bf16" if device.type == "cuda" and recipe.runtime.amp else "fp32",
                     "compile": recipe.runtime.compile, "deterministic": recipe.runtime.deterministic},
        "placement": context.placement_record(),
        "units": units,
    }
    if recipe.model.source == "huggingface":  # which model was fine-tuned, for the dashboard's identity section
        record["model"] = {"path": recipe.model.path, **hf_identity(recipe.model)}
    atomic_write_text(RunPaths(run_dir).record, json.dumps(record, indent=2) + "\n")


def _log_header(log, recipe, budget, provenance, config_path, context, resume, start_epoch, end_epoch) -> None:
    env = environment()
    device = context.device
    log.write(f"config {config_path or '-'} | purpose: {recipe.runtime.purpose or '-'}")
    log.write(f"host {env['host']} | python {env['python']} | torch {env['torch']} | cuda {env['cuda'] or '-'} | devices {', '.join(env['devices'])}")
    log.write(f"recipe identity {provenance.recipe_identity} | cache {provenance.cache_identity} | source {provenance.source_hash}")
    log.write(
        f"mode {recipe.mode} | parameters {budget.parameters:,} | budget {budget.total_tokens:,} tokens in {budget.epochs} "
        f"epochs, {budget.total_steps:,} steps of up to {budget.tokens_per_step:,} tokens | lr {recipe.optimizer.lr} beta2 {recipe.optimizer.beta2} | seed {recipe.runtime.seed}"
    )
    dtype = "bf16 autocast" if device.type == "cuda" and recipe.runtime.amp else "fp32"
    log.write(f"numerics {dtype} | compile {recipe.runtime.compile} | deterministic {recipe.runtime.deterministic}")
    if resume is None:  # the whole recipe once; later slices resume the same recipe (same identity)
        for line in dump_recipe(recipe).splitlines():
            log.write(f"  {line}")
    else:
        log.write(f"recipe as in the first slice ({RECIPE}, identity {provenance.recipe_identity})")
    for line in context.placement_lines():  # parallel: one line per stage in multi-process jobs
        log.write(line)
    action = f"resume from {resume} at epoch {start_epoch}" if resume else "start"
    log.write(f"slice: {action}, train to epoch {end_epoch}")


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _restore_rng(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _write_checkpoint(run_dir, relative, engine, counters, provenance, metrics, log, context) -> None:
    engine_state = engine.state_dict()  # parallel: collective in multi-process jobs, assembled on rank 0
    if not context.is_main:  # parallel: only rank 0 writes
        return
    payload = {
        "run_id": run_dir.name,
        "recipe_identity": provenance.recipe_identity,
        "cache_identity": provenance.cache_identity,
        "source_hash": provenance.source_hash,
        "epoch": counters.epoch,
        "step": counters.step,
        "tokens": engine.budget.tokens_after(counters.step),
        "engine": engine_state,
        "progress": vars(counters),
        "rng": _rng_state(),
        "metrics_offset": metrics.sync(),
        "job_ids": list(counters.job_ids),
    }
    kill_point("train.checkpoint", run_dir.name, relative)
    digest = save_checkpoint(run_dir, relative, payload)
    kill_point("train.checkpoint-written", run_dir.name, relative)
    log.write(f"checkpoint {relative} written, sha256 {digest}")


def _finish(run_dir, recipe, engine, counters, provenance, metrics, log, context) -> None:
    """End of the budget: the final checkpoint and best.json, whose `weights` name the kept
    checkpoint of the best epoch (null under the final policy, which keeps none)."""
    _write_checkpoint(run_dir, FINAL, engine, counters, provenance, metrics, log, context)
    if not context.is_main:  # parallel
        return
    best = dict(counters.best)
    if recipe.training.checkpoint_policy not in KEEPS_EPOCHS:
        best["weights"] = None
    else:
        best["weights"] = FINAL if best["epoch"] == engine.budget.epochs else slice_checkpoint(best["epoch"])
    path = RunPaths(run_dir).best
    atomic_write_text(path, json.dumps(best, indent=2) + "\n")
    log.write(f"best subset epoch {best['epoch']}: val loss {best['val_loss']:.4f} ({path.name})")
