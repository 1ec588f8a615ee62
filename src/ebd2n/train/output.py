"""What a trainer writes into its run directory, and which process writes it.

The job's main process (the only one, or rank 0 of a torchrun job) owns the run directory: it
holds the lease, writes train.log, metrics.jsonl, checkpoints, run.json and best.json, and
deletes the checkpoints its retention lets go. Every other process gets a `SilentOutput`, which
accepts the same calls and writes nothing, so the training loop is the same code on every process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ebd2n.atomic import atomic_write_text, remove_temporaries
from ebd2n.config import Recipe, load_recipe, recipe_identity, save_recipe
from ebd2n.errors import UserError
from ebd2n.layout import CHECKPOINT_DIR, RunPaths
from ebd2n.parallel.distributed import Context
from ebd2n.train.checkpoint import Provenance
from ebd2n.train.events import EventLog
from ebd2n.train.lease import Lease, take_lease
from ebd2n.train.run_state import run_directory
from ebd2n.train.runlog import MetricsLog, TrainLog


def claim_run_dir(recipe: Recipe, provenance: Provenance, context: Context, wait: bool) -> Lease | None:
    """The main process's lease on the run directory, after checking it holds no other run (None
    on the job's other processes). `wait`: wait for a live trainer holding it to end."""
    if not context.is_main:
        return None
    run_dir = run_directory(recipe)
    lease = take_lease(run_dir, wait=wait)
    try:
        existing = RunPaths(run_dir).recipe
        if (
            existing.is_file()
            and recipe_identity(load_recipe(existing), provenance.cache_identity) != provenance.recipe_identity
        ):
            raise UserError(
                f"runtime.output_dir {run_dir}: holds a different run (its {existing.name} differs); "
                "choose another runtime.output_dir"
            )
        if not existing.is_file():  # an audited artifact: written once, never rewritten by later slices
            save_recipe(recipe, existing)
    except BaseException:
        lease.release()
        raise
    return lease


class RunOutput:
    """The main process's writer of one run directory, under the lease it holds."""

    writes = True

    def __init__(self, run_dir: Path, job_id: str) -> None:
        self.paths = RunPaths(run_dir)
        self.log = TrainLog(run_dir, job_id)
        self.metrics = MetricsLog(run_dir)
        self.events = EventLog(run_dir)
        for leftover in remove_temporaries(run_dir) + remove_temporaries(run_dir / CHECKPOINT_DIR):
            self.log.write(
                f"removed {leftover.relative_to(run_dir)}, the temporary file of a write a killed job never finished"
            )

    @classmethod
    def open(cls, run_dir: Path, job_id: str, context: Context) -> RunOutput | SilentOutput:
        return cls(run_dir, job_id) if context.is_main else SilentOutput()

    def write(self, line: str) -> None:
        self.log.write(line)

    def append(self, record: dict[str, Any]) -> None:
        self.metrics.append(record)
        if (note := self.events.add(record)) is not None:
            self.log.write(note)

    def write_json(self, path: Path, record: dict[str, Any]) -> None:
        """run.json, best.json: whole records, written atomically."""
        atomic_write_text(path, json.dumps(record, indent=2) + "\n")

    def close(self) -> None:
        self.metrics.close()
        self.events.close()
        self.log.close()


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

    def close(self) -> None:
        pass


class _SilentMetrics:
    """The metrics writer's part in another process's checkpoint assembly (never saved)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
