"""Jobs that finished just before their controller died: Snakemake's incomplete marks cleared.

Snakemake marks a job's outputs incomplete when it starts the job and clears the marks once it has
recorded the job as done. A controller killed in between leaves marks on outputs that are
complete, and the next run forces those jobs again. Two kinds of forced job never finish right:
- a training slice under checkpoint policy `final` that already deleted the checkpoint it resumed
  from: run again, it needs that checkpoint, whose slice then refuses the run directory (final.pt,
  or a later checkpoint, is there), on every rerun;
- a job whose output the next jobs read through ancient() (a run's recipe, the data cache, kept
  slice checkpoints): Snakemake 9 runs the forced job, skips everything after it and ends "done"
  with the campaign unfinished.
Their outputs prove by themselves that the job finished: the recipe, a base recipe's slice plan
(frozen/plans/<base>.json, which every training job reads through ancient()) and the cache are put
in place whole as the job's last act (an atomic write, a rename); a training output matches the hash its
run's ledger recorded and, under `final`, the checkpoint it consumed is gone (the trainer deletes
it last, after best.json and run.json). For those, the marks go (with the dead trainer's lease) and
nothing else changes; any other marked output is left to Snakemake, which redoes its job.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.layout import BEST, CHECKPOINT_DIR, FINAL, FROZEN, RECIPE, SLICE_PLANS, checkpoint_epoch, run_paths
from ebd2n.train.plan import read_slice_plan

INCOMPLETE = Path(".snakemake/incomplete")
"""Snakemake's marks (file persistence): one file per output, named by its path in URL-safe
base64, split into `@`-prefixed folders where longer than a file name may be."""


def settle_finished_jobs(workdir: Path, cache_dir: Path, policy: str) -> list[str]:
    """Clear the marks of outputs whose jobs provably finished; return their paths."""
    marks = workdir / INCOMPLETE
    settled = []
    for mark in sorted(marks.rglob("*")) if marks.is_dir() else []:
        parts = mark.relative_to(marks).parts
        if mark.is_dir() or any(not part.startswith("@") for part in parts[:-1]):
            continue
        try:
            output = base64.urlsafe_b64decode("".join(part.removeprefix("@") for part in parts)).decode()
        except ValueError:
            continue  # not a mark (migration_underway)
        try:
            finished = _finished(workdir / output, workdir / cache_dir, policy)
        except (UserError, OSError):  # an unreadable record: no proof, Snakemake redoes the job
            finished = False
        if finished:
            mark.unlink()
            if mark.parent != marks:
                os.removedirs(mark.parent)  # as Snakemake does: no empty folders left
            settled.append(output)
    return settled


def _finished(path: Path, cache_dir: Path, policy: str) -> bool:
    if path == cache_dir:
        return _cache_complete(path)
    if path.name == RECIPE:
        return path.is_file()  # written atomically, the resolve job's last act
    if (path.parent.name, path.parent.parent.name, path.suffix) == (SLICE_PLANS, FROZEN, ".json"):
        return read_slice_plan(path) is not None  # written atomically, the plan job's last act
    run_dir = path.parent.parent if path.parent.name == CHECKPOINT_DIR else path.parent
    relative = path.relative_to(run_dir).as_posix()
    if relative in (FINAL, BEST):  # train_final's outputs: settled together
        done = policy == "final" and _final_complete(run_dir)
    elif checkpoint_epoch(relative) is not None:
        done = _slice_complete(run_dir, relative, policy)
    else:
        return False
    if done:
        from ebd2n.train.lease import clear_stale_lease

        clear_stale_lease(run_dir)  # a trainer killed after its last act left it
    return done


def _cache_complete(path: Path) -> bool:
    from ebd2n.data.cache import find_cache_identity

    return find_cache_identity(path) is not None  # renamed into place whole, the prepare job's last act


def _recorded(run_dir: Path, relative: str) -> bool:
    from ebd2n.train.checkpoint import is_recorded  # imports torch: only when a job was interrupted

    return is_recorded(run_dir, relative)


def _earlier_checkpoints(run_dir: Path, epoch: int | None) -> list[Path]:
    """Slice checkpoints on disk before `epoch` (None: any), such as the one a slice resumed from."""
    return [path for path in run_dir.glob(f"{CHECKPOINT_DIR}/*")
            if (found := checkpoint_epoch(f"{CHECKPOINT_DIR}/{path.name}")) is not None and (epoch is None or found < epoch)]


def _final_complete(run_dir: Path) -> bool:
    """final.pt recorded, best.json (which Snakemake deleted before the job) written after it,
    run.json of the same recipe identity, and no slice checkpoint left (the consumed one goes
    after run.json is written)."""
    from ebd2n.config import load_recipe, recipe_identity
    from ebd2n.data.cache import find_cache_identity

    paths = run_paths(run_dir)
    if not (_recorded(run_dir, FINAL) and paths.best.is_file()) or _earlier_checkpoints(run_dir, None):
        return False
    record = read_json(paths.record)
    recipe = load_recipe(paths.recipe)
    return isinstance(record, dict) and record.get("recipe_identity") == recipe_identity(recipe, find_cache_identity(recipe.data.cache_dir))


def _slice_complete(run_dir: Path, relative: str, policy: str) -> bool:
    """The slice's checkpoint recorded and, under `final`, the one it resumed from deleted."""
    return _recorded(run_dir, relative) and (policy != "final" or not _earlier_checkpoints(run_dir, checkpoint_epoch(relative)))
