"""What a trainer writes into its run directory, and which process writes it.

The job's main process (the only one, or rank 0 of a torchrun job) owns the run directory: it
holds the lease, writes train.log, metrics.jsonl, checkpoints, run.json and best.json, and
deletes consumed checkpoints. Every other process gets a `SilentOutput`, which accepts the same
calls and writes nothing, so the training loop is the same code on every process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ebd2n.atomic import atomic_write_text, remove_temporaries
from ebd2n.config import Recipe, load_recipe, recipe_identity, save_recipe
from ebd2n.errors import UserError
from ebd2n.faults import kill_point
from ebd2n.layout import CHECKPOINT_DIR, FINAL, RunPaths, checkpoint_epoch
from ebd2n.parallel.distributed import Context
from ebd2n.train.checkpoint import Provenance, forget_checkpoint, read_checkpoint_ledger
from ebd2n.train.lease import Lease, take_lease
from ebd2n.train.runlog import MetricsLog, TrainLog

KEEPS_EPOCHS = ("epoch", "all")
"""Checkpoint policies that keep a checkpoint at every epoch boundary (`all` also keeps epoch 0)."""


class RunOutput:
    """The main process's writer of one run directory, under the lease it took."""

    writes = True

    def __init__(self, run_dir: Path, job_id: str, lease: Lease) -> None:
        self.paths, self.lease = RunPaths(run_dir), lease
        self.log = TrainLog(run_dir, job_id)
        self.metrics = MetricsLog(run_dir)
        for leftover in remove_temporaries(run_dir) + remove_temporaries(run_dir / CHECKPOINT_DIR):
            self.log.write(f"removed {leftover.relative_to(run_dir)}, the temporary file of a write a killed job never finished")

    @classmethod
    def open(cls, recipe: Recipe, provenance: Provenance, job_id: str, end_epoch: int, resumed: bool,
             context: Context) -> RunOutput | SilentOutput:
        """Take the run directory for this job (main process), after checking it may be written."""
        if not context.is_main:
            return SilentOutput()
        run_dir = Path(recipe.runtime.output_dir)
        lease = take_lease(run_dir)
        try:
            _claim_run_dir(run_dir, recipe, provenance, resumed=resumed, end_epoch=end_epoch)
            return cls(run_dir, job_id, lease)
        except BaseException:
            lease.release()
            raise

    def write(self, line: str) -> None:
        self.log.write(line)

    def append(self, record: dict[str, Any]) -> None:
        self.metrics.append(record)

    def write_json(self, path: Path, record: dict[str, Any]) -> None:
        """run.json, best.json: whole records, written atomically."""
        atomic_write_text(path, json.dumps(record, indent=2) + "\n")

    def forget(self, checkpoint: Path) -> None:
        """Delete a consumed slice checkpoint and its ledger entry (policy `final`)."""
        run_dir = self.paths.directory
        forget_checkpoint(run_dir, Path(checkpoint).resolve().relative_to(run_dir.resolve()).as_posix())
        self.log.write(f"removed consumed slice checkpoint {Path(checkpoint).name} (policy final)")
        kill_point("train.consumed", run_dir.name)

    def close(self) -> None:
        try:
            self.metrics.close()
            self.log.close()
        finally:
            self.lease.release()


class SilentOutput:
    """Another process's output: the same calls, nothing written."""

    writes = False

    def __init__(self) -> None:
        self.metrics = _SilentMetrics()

    def write(self, line: str) -> None:
        pass

    def append(self, record: dict[str, Any]) -> None:
        pass

    def write_json(self, path: Path, record: dict[str, Any]) -> None:
        pass

    def forget(self, checkpoint: Path) -> None:
        pass

    def close(self) -> None:
        pass


class _SilentMetrics:
    """The metrics writer's part in another process's checkpoint assembly (never saved)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


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
