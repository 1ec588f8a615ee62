"""Train several runs of a sweep as one pack (ebd2n.train.trial_engine), each in its own directory
as its solo run writes it: recipe, train.log, metrics.jsonl, checkpoints in the solo layout, and at
the budget's end final.pt, best.json and run.json.

The members step together: one batched forward and backward per micro-batch, one AdamW step of all,
then each member's records, divergence decision and subset validation. A member that diverges writes
its final records at once (its share of the job's time so far first) and leaves the pack (its slice
of the batched kernels computes nothing it keeps); the others train on. Resuming is per run: each
member restores its own newest checkpoint, and the pack goes on from the epoch they share
(ebd2n.train.pack_trainer._common_start).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ebd2n.config import Recipe, recipe_identity
from ebd2n.data import BlockReader, Cache, open_verified_cache
from ebd2n.errors import UserError
from ebd2n.job_time import job_id
from ebd2n.layout import FINAL, RunPaths
from ebd2n.parallel import distributed
from ebd2n.parallel.distributed import Context
from ebd2n.provenance import source_hash
from ebd2n.train.budget import budget_of
from ebd2n.train.checkpoint import CheckpointManager, Provenance, Saved
from ebd2n.train.engine import configure_torch
from ebd2n.train.job import Parts, Slice
from ebd2n.train.output import RunOutput, claim_run_dir
from ebd2n.train.pack_record import record_pack
from ebd2n.train.pack_rules import pack_refusal
from ebd2n.train.records import DIVERGENCE
from ebd2n.train.retention import Retention
from ebd2n.train.run_state import run_directory
from ebd2n.train.slice_run import SliceRun
from ebd2n.train.state import DataPosition, Progress, RandomState
from ebd2n.train.trainer import eval_subset, reached_already
from ebd2n.train.trial_engine import TrialPack


class MemberRandomState(RandomState):
    """A member's generator state: what its solo run holds after drawing its initial weights (no
    later step draws), kept per member since the pack's members share one process's generator."""

    def __init__(self, state: Any) -> None:
        self.state = {"torch": state}

    def state_dict(self) -> dict[str, Any]:
        return dict(self.state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state = dict(state)


@dataclass
class Member:
    """One run of the pack: its recipe, checkpoints, where it starts and what its live view is told."""

    recipe: Recipe
    checkpoints: CheckpointManager
    on_record: Callable[[dict[str, Any]], None] | None
    start: Saved | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def epoch(self) -> int:
        return 0 if self.start is None else self.start.epoch


def train_pack(
    recipes: Sequence[Recipe],
    until_epoch: int | None = None,
    slice_ends: tuple[int, ...] = (),
    wait: bool = False,
    on_records: Sequence[Callable[[dict[str, Any]], None] | None] | None = None,
) -> list[bool]:
    """Train each run to `until_epoch` (default: the end of the budget) as one pack; per run, False
    when it was there already. Every run resumes from its own newest valid checkpoint. `on_records`:
    per run, what is given its record at the slice's start and after every epoch (ebd2n.train.job.Slice)."""
    refusal = pack_refusal(recipes)
    if refusal is not None:
        raise UserError(f"these runs do not pack: {refusal}")
    directories = [run_directory(recipe).resolve() for recipe in recipes]
    twice = next((index for index, directory in enumerate(directories) if directory in directories[:index]), None)
    if twice is not None:
        raise UserError(
            f"{recipes[twice].runtime.output_dir}: this run directory is named twice; each run of a pack trains once, "
            "so name it once"
        )
    budget = budget_of(recipes[0])
    end_epoch = budget.epochs if until_epoch is None else until_epoch
    if not 1 <= end_epoch <= budget.epochs:
        raise UserError(
            f"--until-epoch {end_epoch}: must be at least 1 and at most the budget's {budget.epochs} epochs"
        )
    cache = open_verified_cache(recipes[0].data.cache_dir, recipes[0].model.vocab_size)
    source = source_hash()
    members = [
        Member(
            recipe,
            CheckpointManager(
                run_directory(recipe),
                Provenance(recipe_identity(recipe, cache.identity), cache.identity, source),
                Retention.of(recipe, budget.epochs),
            ),
            None if on_records is None else on_records[i],
        )
        for i, recipe in enumerate(recipes)
    ]
    configure_torch(recipes[0])
    context = distributed.init(recipes[0])
    eval_blocks = eval_subset(recipes[0], cache)
    leases = []
    try:
        for member in sorted(
            members, key=lambda m: str(m.checkpoints.run_dir.resolve())
        ):  # one order: no two packs deadlock
            leases.append(claim_run_dir(member.recipe, member.checkpoints.provenance, context, wait))
        trained = []
        for member in members:
            member.start, member.notes = member.checkpoints.load(context)
            reached = member.start is not None and member.epoch >= end_epoch
            trained.append(
                not (
                    reached
                    and reached_already(
                        member.checkpoints.run_dir,
                        end_epoch,
                        budget.epochs,
                        context,
                        member.start.relative,
                        pack=len(members),
                    )
                )
            )
            if not trained[-1]:
                member.checkpoints.let_go(member.epoch)
        working = [member for member, go in zip(members, trained, strict=True) if go]
        if working:  # a member there already (finished, or diverged in a slice before) is left as it is
            _train_members(working, directories, cache, eval_blocks, context, end_epoch, slice_ends)
    finally:
        try:
            context.close()
        finally:
            for lease in leases:
                if lease is not None:
                    lease.release()
    return trained


def _train_members(
    members: list[Member],
    pack_dirs: list[Path],
    cache: Cache,
    eval_blocks: torch.Tensor,
    context: Context,
    end_epoch: int,
    slice_ends: tuple[int, ...],
) -> None:
    """The members of the pack of `pack_dirs` that have work: restored, trained in step, their
    records written. Each of them records the pack before anything it trains is kept, so a killed
    pack is formed again of the same runs; no other run of the pack is written to."""
    start_epoch = _common_start(members, end_epoch)
    record_pack([member.checkpoints.run_dir for member in members], end_epoch, members=pack_dirs)
    recipes = [member.recipe for member in members]
    budget = budget_of(recipes[0])
    pack = TrialPack(recipes, budget, context.device)
    reader = BlockReader(cache, "train", recipes[0].model.context_length + 1)
    this_job = job_id()
    outputs = [RunOutput.open(member.checkpoints.run_dir, this_job, context) for member in members]
    try:
        runs = []
        for i, (member, output) in enumerate(zip(members, outputs, strict=True)):
            for note in member.notes:
                output.write(note)
            data = DataPosition(reader, budget, member.recipe.runtime.seed, context.device)
            parts = Parts(pack.members[i], data, Progress(), MemberRandomState(pack.rng_states[i]), output.metrics)
            if member.start is not None:
                member.checkpoints.restore(parts.stateful(), member.start)
            parts.progress.job_ids.append(this_job)
            resume = member.start and member.start.relative
            job = Slice(
                member.recipe,
                budget,
                member.checkpoints,
                context,
                None,
                resume,
                start_epoch,
                end_epoch,
                slice_ends,
                member.on_record,
                pack=len(members),
            )
            runs.append(SliceRun(job, parts, output, eval_blocks, progress=False))
        names = ", ".join(run.job.run_dir.name for run in runs)
        for run in runs:
            run.begin()
            run.output.write(f"trained in a pack of {len(runs)} runs (one process, one batched model): {names}")
            if run.diverged:  # restored from where it diverged: only its final records are left to write
                run.finish()
        for epoch in range(start_epoch, end_epoch):
            if all(run.diverged for run in runs):
                break
            _pack_epoch(pack, runs, epoch)
        for run in runs:
            if not run.diverged:  # a diverged one finished as it left
                run.finish()
    finally:
        for output in outputs:
            output.close()


def _common_start(members: list[Member], end_epoch: int) -> int:
    """The epoch the members go on from together; a member ahead of it is set back to it. Only a
    kill between two members' checkpoint writes leaves one ahead: its checkpoints past that epoch
    were written by a job that never finished its slice, so none has its slice record. A member that
    finished a slice past it is refused: runs pack from the epoch they stand at. A member restored
    from the final.pt of its divergence (its records cut off by a kill) stays there: it only writes them."""
    training = [member for member in members if not _diverged(member)]
    common = min((min(member.epoch, end_epoch) for member in training), default=end_epoch)
    for member in training:
        if min(member.epoch, end_epoch) == common:
            continue
        run_dir = member.checkpoints.run_dir
        finished = [e for e in range(common + 1, member.epoch + 1) if RunPaths(run_dir).slice_record(e).is_file()]
        if finished:
            raise UserError(
                f"{run_dir}: trained to epoch {finished[-1]}, the pack's other runs stand at epoch {common}; "
                "pack runs that stand at the same epoch"
            )
        back = "the beginning" if common == 0 else member.checkpoints.retention.checkpoint(common)
        member.notes.append(f"goes back from epoch {member.epoch} to {back}, where the other runs of its pack are")
        if common == 0:
            member.start = None
            continue
        path = run_dir / back
        if not path.is_file():
            raise UserError(f"{path}: missing; the pack's other runs resume from epoch {common}")
        member.start = member.checkpoints.named(path)
    return common


def _diverged(member: Member) -> bool:
    """Whether the member restored the final.pt of its divergence (its records cut off by a kill)."""
    start = member.start
    return start is not None and start.relative == FINAL and start.state["progress"].get(DIVERGENCE) is not None


def _pack_epoch(pack: TrialPack, runs: list[SliceRun], epoch: int) -> None:
    """One epoch of every member still training: steps in step, then each one's measurement and checkpoint."""
    training = [not run.diverged for run in runs]
    started = [run.loop.start_epoch() for run in runs]
    losses: list[list[float]] = [[] for _ in runs]
    for step in runs[0].job.budget.epoch_steps(epoch):
        if all(run.diverged for run in runs):
            break  # the last member still training diverged at the step before
        planned = [run.loop.next_step(step) if not run.diverged else None for run in runs]
        results = pack.train_step([p and p[0] for p in planned], [p[1] if p else 0.0 for p in planned])
        for run, plan, result, kept in zip(runs, planned, results, losses, strict=True):
            if result is None:
                continue
            run.loop.record_step(step, epoch, result, plan[1], plan[2])
            if not run.diverged:
                kept.append(result.loss)
    ended = time.perf_counter()  # every member's tokens/s is over the pack's time
    for run, was, start, kept in zip(runs, training, started, losses, strict=True):
        if not was:
            continue
        if not run.diverged:
            run.loop.end_epoch(epoch, kept, ended - start)
        run.after_epoch(epoch)
        if run.diverged:  # it leaves the pack: its share of the job's time so far, its final records at once
            run.finish()
