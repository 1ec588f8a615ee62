"""Train several runs of a sweep as one pack (ebd2n.train.trial_engine), each in its own directory
as its solo run writes it: recipe, train.log, metrics.jsonl, checkpoints in the solo layout, and at
the budget's end final.pt, best.json and run.json.

The members step together: one batched forward and backward per micro-batch, one AdamW step of all,
then each member's records, divergence decision and subset validation. A member that diverges writes
its final records at once and leaves the pack (its slice of the batched kernels computes nothing it
keeps); the others train on. Resuming is per run: each member restores its own newest checkpoint,
and the pack goes on from the epoch they share.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ebd2n.config import Recipe, recipe_identity
from ebd2n.data import BlockReader, open_verified_cache
from ebd2n.errors import UserError
from ebd2n.job_time import job_id
from ebd2n.parallel import distributed
from ebd2n.provenance import source_hash
from ebd2n.train.budget import budget_of
from ebd2n.train.checkpoint import CheckpointManager, Provenance
from ebd2n.train.engine import configure_torch
from ebd2n.train.job import Parts, Slice
from ebd2n.train.output import RunOutput, claim_run_dir
from ebd2n.train.retention import Retention
from ebd2n.train.run_state import run_directory
from ebd2n.train.slice_run import SliceRun
from ebd2n.train.state import DataPosition, Progress, RandomState
from ebd2n.train.trainer import eval_subset, reached_already
from ebd2n.train.trial_engine import TrialPack, pack_refusal


class MemberRandomState(RandomState):
    """A member's generator state: what its solo run holds after drawing its initial weights (no
    later step draws), kept per member since the pack's members share one process's generator."""

    def __init__(self, state: Any) -> None:
        self.state = {"torch": state}

    def state_dict(self) -> dict[str, Any]:
        return dict(self.state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state = dict(state)


def train_pack(
    recipes: Sequence[Recipe], until_epoch: int | None = None, slice_ends: tuple[int, ...] = (), wait: bool = False
) -> list[bool]:
    """Train each run to `until_epoch` (default: the end of the budget) as one pack; per run, False
    when it was there already. Every run resumes from its own newest valid checkpoint."""
    refusal = pack_refusal(recipes)
    if refusal is not None:
        raise UserError(f"these runs do not pack: {refusal}")
    budget = budget_of(recipes[0])
    end_epoch = budget.epochs if until_epoch is None else until_epoch
    if not 1 <= end_epoch <= budget.epochs:
        raise UserError(
            f"--until-epoch {end_epoch}: must be at least 1 and at most the budget's {budget.epochs} epochs"
        )
    cache = open_verified_cache(recipes[0].data.cache_dir, recipes[0].model.vocab_size)
    source = source_hash()
    managers = [
        CheckpointManager(
            run_directory(recipe),
            Provenance(recipe_identity(recipe, cache.identity), cache.identity, source),
            Retention.of(recipe, budget.epochs),
        )
        for recipe in recipes
    ]
    configure_torch(recipes[0])
    context = distributed.init(recipes[0])
    eval_blocks = eval_subset(recipes[0], cache)
    leases = []
    try:
        for recipe, manager in zip(recipes, managers, strict=True):
            leases.append(claim_run_dir(recipe, manager.provenance, context, wait))
        starts = [manager.load(context) for manager in managers]
        trained = [
            not (
                start is not None
                and start.epoch >= end_epoch
                and reached_already(manager.run_dir, end_epoch, budget.epochs, context)
            )
            for (start, _), manager in zip(starts, managers, strict=True)
        ]
        chosen = [i for i, go in enumerate(trained) if go]
        for i in set(range(len(recipes))) - set(chosen):
            managers[i].let_go(starts[i][0].epoch)
        if chosen:
            _train_members(
                [recipes[i] for i in chosen],
                [managers[i] for i in chosen],
                [starts[i] for i in chosen],
                cache,
                eval_blocks,
                context,
                end_epoch,
                slice_ends,
            )
    finally:
        try:
            context.close()
        finally:
            for lease in leases:
                if lease is not None:
                    lease.release()
    return trained


def _train_members(
    recipes, managers, starts, cache, eval_blocks, context, end_epoch: int, slice_ends: tuple[int, ...]
) -> None:
    """The pack of the members that have work: restored, trained in step, their records written."""
    start_epoch, starts = _common_start(managers, starts, end_epoch)
    budget = budget_of(recipes[0])
    pack = TrialPack(recipes, budget, context.device)
    reader = BlockReader(cache, "train", recipes[0].model.context_length + 1)
    this_job = job_id()
    outputs = [RunOutput.open(manager.run_dir, this_job, context) for manager in managers]
    try:
        runs = []
        for i, (recipe, manager, (start, notes), output) in enumerate(
            zip(recipes, managers, starts, outputs, strict=True)
        ):
            for note in notes:
                output.write(note)
            data = DataPosition(reader, budget, recipe.runtime.seed, context.device)
            parts = Parts(pack.members[i], data, Progress(), MemberRandomState(pack.rng_states[i]), output.metrics)
            if start is not None:
                manager.restore(parts.stateful(), start)
            parts.progress.job_ids.append(this_job)
            job = Slice(
                recipe, budget, manager, context, None, start and start.relative, start_epoch, end_epoch, slice_ends
            )
            runs.append(SliceRun(job, parts, output, eval_blocks, progress=False))
        others = ", ".join(run.job.run_dir.name for run in runs)
        for run in runs:
            run.output.write(f"trained in a pack of {len(runs)} runs (one process, one batched model): {others}")
            run.begin()
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


def _common_start(managers: list[CheckpointManager], starts: list, end_epoch: int) -> tuple[int, list]:
    """The epoch the members go on from together, and each one's start there. A kill between two
    members' checkpoint writes leaves some a checkpoint ahead: they go back to their checkpoint at
    the epoch the others reached (or to the beginning), and train that stretch again with them."""

    def epoch_of(start) -> int:
        return 0 if start is None else min(start.epoch, end_epoch)

    common = min(epoch_of(start) for start, _ in starts)
    aligned = []
    for manager, (start, notes) in zip(managers, starts, strict=True):
        if epoch_of(start) == common:
            aligned.append((start, notes))
            continue
        back = "the beginning" if common == 0 else manager.retention.checkpoint(common)
        note = f"goes back from epoch {start.epoch} to {back}, where the other runs of its pack are"
        if common == 0:
            aligned.append((None, [*notes, note]))
            continue
        path = manager.run_dir / back
        if not path.is_file():
            raise UserError(f"{path}: missing; its pack's other runs resume from epoch {common}, so train it alone")
        aligned.append((manager.named(path), [*notes, note]))
    return common, aligned


def _pack_epoch(pack: TrialPack, runs: list[SliceRun], epoch: int) -> None:
    """One epoch of every member still training: steps in step, then each one's measurement and checkpoint."""
    training = [not run.diverged for run in runs]
    started = [run.loop.start_epoch() for run in runs]
    losses: list[list[float]] = [[] for _ in runs]
    for step in runs[0].job.budget.epoch_steps(epoch):
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
        if run.diverged:  # it leaves the pack: its final records at once
            run.finish()
