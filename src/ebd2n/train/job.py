"""What one training job is (its slice of a run) and the stateful parts it trains, shared by the
trainer, its epoch loop and the records it writes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebd2n.config import Recipe
from ebd2n.parallel.distributed import Context
from ebd2n.train.budget import Budget
from ebd2n.train.checkpoint import CheckpointManager, Provenance, Stateful
from ebd2n.train.retention import Retention
from ebd2n.train.run_state import run_directory
from ebd2n.train.state import DataPosition, Progress, RandomState
from ebd2n.train.step import Engine


@dataclass(frozen=True)
class Slice:
    """What this job trains: the run, its budget and provenance, and the epochs of the slice."""

    recipe: Recipe
    budget: Budget
    checkpoints: CheckpointManager
    context: Context
    config_path: str | Path | None
    """The recipe file(s) the job read (`a.yaml + b.yaml` for several), None: a recipe given as data."""
    resume: str | None
    """The checkpoint (relative to the run directory) the slice starts from; None: the start."""
    start_epoch: int
    end_epoch: int
    slice_ends: tuple[int, ...] = ()
    """The run's planned slice ends (its campaign's plan; none for a run trained alone): a diverged
    run leaves the record of each one still ahead, so the jobs that would train them find them."""
    on_record: Callable[[dict[str, Any]], None] | None = None
    """Given the run's record as it stands (run.json's content) when the slice starts and after
    each epoch, on the main process: a live view's source (the report layer's dashboard)."""
    pack: int = 1
    """How many runs this job trains together (ebd2n.train.pack_trainer): each records that share of its time."""

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
