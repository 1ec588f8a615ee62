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

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ebd2n.config import Recipe, recipe_identity
from ebd2n.data import BlockReader, Cache, eval_subset_indices, open_verified_cache
from ebd2n.errors import UserError
from ebd2n.job_time import job_id, record_job
from ebd2n.layout import FINAL, RunPaths
from ebd2n.parallel import distributed
from ebd2n.parallel.distributed import Context
from ebd2n.provenance import source_hash
from ebd2n.train.branch import branch_run
from ebd2n.train.budget import Budget, budget_of
from ebd2n.train.checkpoint import CheckpointManager, Provenance, Saved, Stateful
from ebd2n.train.engine import build_engine, configure_torch
from ebd2n.train.job import Parts, Slice
from ebd2n.train.output import RunOutput, SilentOutput, claim_run_dir
from ebd2n.train.records import RunRecord
from ebd2n.train.retention import Retention
from ebd2n.train.run_records import write_slice_record
from ebd2n.train.run_state import read_checkpoint_ledger, run_directory
from ebd2n.train.slice_run import SliceRun
from ebd2n.train.state import DataPosition, Progress, RandomState


def train(
    recipe: Recipe,
    config_path: str | Path | None = None,
    resume: Path | None = None,
    until_epoch: int | None = None,
    progress: bool = True,
    wait: bool = False,
    slice_ends: tuple[int, ...] = (),
    on_record: Callable[[dict[str, Any]], None] | None = None,
    branch_from: Path | None = None,
) -> bool:
    """Train the run to `until_epoch` (default: the end of its budget); False when it was there already.

    The run resumes from its newest valid checkpoint (or `resume`, named by hand) and does nothing
    when that epoch is reached already, so a job can always be run again. `wait`: wait for a live
    trainer holding the run directory instead of refusing. The run's dashboard is its caller's to
    write once the run is complete (`ebd2n train` does): the report layer builds on this one.
    A run that diverges (ebd2n.train.divergence) stops at once and leaves its final records, and
    the record of each of `slice_ends` still ahead: every later job of the run has nothing to do.
    `on_record` is given the run's record so far at the slice's start and after every epoch.
    `branch_from`: a run of the same recipe with a shorter budget, whose pre-decay checkpoint this
    run starts from when it has none of its own (ebd2n.train.branch).
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
    checkpoints = CheckpointManager(run_dir, provenance, Retention.of(recipe, budget.epochs))
    named = checkpoints.named(resume)
    configure_torch(recipe)
    context = distributed.init(recipe)
    parts_of = _parts_builder(recipe, budget, cache, context)  # every check before anything is written
    lease = claim_run_dir(recipe, provenance, context, wait)
    try:
        branched = None
        if branch_from is not None and context.is_main and named is None and not read_checkpoint_ledger(run_dir):
            branched = branch_run(recipe, run_dir, Path(branch_from), provenance, until_epoch)
        branched = context.broadcast(branched)  # every process of the job takes the same path below
        start, notes = checkpoints.load(context, named)
        notes = [branched, *notes] if branched else notes  # the branch is this job's work: train.log says it
        reached = start is not None and start.epoch >= end_epoch and not branched
        if reached and reached_already(run_dir, end_epoch, budget.epochs, context, start.relative):
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
            on_record,
        )
        _train_job(job, parts_of, start, notes, progress)
    finally:
        try:
            context.close()  # leaves the process group it joined
        finally:
            if lease is not None:
                lease.release()
    return True


def reached_already(run_dir: Path, end_epoch: int, epochs: int, context: Context, saved: str, pack: int = 1) -> bool:
    """Whether a job ending at `end_epoch`, whose state is saved already (in `saved`), has nothing left
    to do. A slice's only record is written here if it is missing, after this job's line (its share
    of a job of `pack` runs) when the slice's own checkpoint is what was saved: this job completed
    it, the killed one that trained it recorded nothing. The end of the run (the budget's, or a
    diverged run's final.pt at any slice) needs best.json and run.json, written last, which only a
    trainer with its parts restored can write: a run killed before them is resumed, never taken for
    finished."""
    paths = RunPaths(run_dir)
    if (end_epoch == epochs or saved == FINAL) and not RunRecord(run_dir).finished:
        return False
    if end_epoch == epochs:
        return True
    if context.is_main and not paths.slice_record(end_epoch).is_file():
        if saved != FINAL:  # the slice's job was killed between its checkpoint and its records
            record_job(run_dir, "train", end_epoch, pack=pack)
        write_slice_record(run_dir, end_epoch, epochs)
    return True


def _parts_builder(recipe: Recipe, budget: Budget, cache: Cache, context: Context):
    """The engine, the data position and the validation subset, built (and so checked) now; the
    returned function assembles the trainer's parts around the job's metrics writer."""
    torch.manual_seed(recipe.runtime.seed)
    engine = build_engine(recipe, budget, context.device, context)
    block_len = recipe.model.context_length + 1
    data = DataPosition(BlockReader(cache, "train", block_len), budget, recipe.runtime.seed, context.device)
    eval_blocks = eval_subset(recipe, cache)

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
    """The slice's epochs, its checkpoints and what it leaves (ebd2n.train.slice_run)."""
    run = SliceRun(job, parts, output, eval_blocks, progress)
    run.begin()
    for epoch in range(job.start_epoch, job.end_epoch):
        if run.diverged:
            break
        run.loop.run_epoch(epoch)
        run.after_epoch(epoch)
    run.finish()


def eval_subset(recipe: Recipe, cache: Cache) -> torch.Tensor:
    """The fixed validation subset every epoch is measured on (read before the run starts)."""
    validation = BlockReader(cache, "validation", recipe.model.context_length + 1)
    subset = eval_subset_indices(validation.num_blocks, recipe.evaluation.subset_blocks, recipe.evaluation.seed)
    return validation.read(subset)
