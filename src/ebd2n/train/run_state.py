"""A run directory read without importing torch: where it really is, what its checkpoint ledger
records, and whether a training job into it has nothing left to do.

A job into a finished run (the same command typed again, or a campaign's slice job run twice)
used to import torch and load `final.pt` to learn that it had nothing to do: seconds under load,
most of a no-op `ebd2n train`. `done_already` answers from the run's JSON records and one hash of
`final.pt` against its ledger, for a single-process job. Anything it cannot vouch for (another
recipe, cache or trainer source, a lease file of any trainer, a missing or unreadable record, an
altered file, a checkpoint named by hand, a torchrun job) goes through the trainer, which checks
everything again and decides, refusals included. The cache's content is not verified again here:
a finished run reads none of it (the audit verifies it).
"""

from __future__ import annotations

import os
from pathlib import Path

from ebd2n.atomic import sha256_file
from ebd2n.config import Recipe, load_recipe, recipe_identity
from ebd2n.data import find_cache_identity
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.layout import CHECKPOINT_DIR, CHECKPOINT_LEDGER, FINAL, RunPaths, checkpoint_epoch
from ebd2n.provenance import source_hash
from ebd2n.train.budget import budget_of
from ebd2n.train.records import RunRecord
from ebd2n.train.retention import Retention


def run_directory(recipe: Recipe) -> Path:
    """The run directory as the file system names it (symbolic links and `..` resolved): one
    directory is one run, with one lease, one id (its name) and one done state, whatever path
    reached it. A path that is no directory (a file, a link to one, a loop of links) is refused."""
    given = Path(recipe.runtime.output_dir)
    real = Path(os.path.realpath(given))
    if os.path.lexists(real) and not real.is_dir():
        what = "a loop of symbolic links" if real.is_symlink() else f"{real} is a file"
        raise UserError(f"runtime.output_dir {given}: not a directory ({what}); choose another runtime.output_dir")
    return real


def read_checkpoint_ledger(run_dir: Path) -> dict[str, str]:
    """Checkpoint file (relative to the run directory) -> SHA-256."""
    return read_json(run_dir / CHECKPOINT_LEDGER) or {}


def done_already(recipe: Recipe, until_epoch: int | None, resume: Path | None) -> bool:
    """Whether a job training `recipe` to `until_epoch` (default: the whole budget) would find its run
    complete, written by this recipe, cache and trainer source, with every record a finished job
    leaves (so it would write nothing and train nothing); False whenever that is not certain."""
    epochs = budget_of(recipe).epochs
    end = epochs if until_epoch is None else until_epoch
    if resume is not None or not 1 <= end <= epochs or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return False  # a torchrun job's processes decide together, in the trainer
    run_dir = run_directory(recipe)
    paths = RunPaths(run_dir)
    needed = [paths.dashboard, paths.recipe, *([paths.slice_record(end)] if end < epochs else [])]
    if not RunRecord(run_dir).finished or not all(path.is_file() for path in needed) or os.path.lexists(paths.lease):
        return False  # a lease, live or not, is the trainer's to judge
    try:
        cache_identity = find_cache_identity(recipe.data.cache_dir)
        if cache_identity is None or not _written_by(recipe, run_dir, cache_identity):
            return False
        ledger = read_checkpoint_ledger(run_dir)
    except UserError:  # an unreadable record: the trainer names it, or passes it over
        return False
    if not isinstance(ledger, dict):
        return False
    on_disk = checkpoints_on_disk(run_dir)
    if (
        set(ledger) - {FINAL} != {name for _epoch, name in on_disk}
        or not {epoch for epoch, _name in on_disk} <= Retention.of(recipe, epochs).kept_epochs
    ):
        return False  # the trainer has checkpoints to remove or let go of
    return ledger.get(FINAL) == sha256_file(paths.final)


def _written_by(recipe: Recipe, run_dir: Path, cache_identity: str) -> bool:
    """Whether the run's recipe.yaml and run.json say it is this recipe's run, on this cache, by this
    trainer source (what the trainer checks of final.pt before it accepts it as the run's end)."""
    paths = RunPaths(run_dir)
    identity = recipe_identity(recipe, cache_identity)
    record = read_json(paths.record)
    wanted = {"run_id": run_dir.name, "recipe_identity": identity, "cache_identity": cache_identity}
    if not isinstance(record, dict) or any(record.get(key) != value for key, value in wanted.items()):
        return False
    if record.get("source_hash") != source_hash():
        return False
    return recipe_identity(load_recipe(paths.recipe), cache_identity) == identity


def checkpoints_on_disk(run_dir: Path) -> list[tuple[int, str]]:
    """(epoch, file named as the ledger names it) of every checkpoint in the run's checkpoints/ folder."""
    folder = run_dir / CHECKPOINT_DIR
    names = [f"{CHECKPOINT_DIR}/{path.name}" for path in sorted(folder.glob("*.pt"))] if folder.is_dir() else []
    return [(epoch, name) for name in names if (epoch := checkpoint_epoch(name)) is not None]
