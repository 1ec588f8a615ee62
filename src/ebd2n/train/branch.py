"""A run that starts from another's checkpoint: a longer WSD horizon continues a shorter one's trunk.

A wsd run keeps its pre-decay checkpoint (`pre_decay_epoch`; ebd2n.train.retention). Up to there, a
run of the same recipe with a longer budget trains exactly the same steps, so its job seeds the run
directory with that state instead of training the trunk again: the checkpoint under its own name
and identity, the metrics up to it, and lineage.json naming the parent run, its epoch, step, tokens
and the checkpoint's SHA-256 (the audit holds the parent to it). What makes the two trajectories one
is checked by content before anything is written: the recipes differ only in their budget, their
epochs and steps agree up to the branch, and so does every step's learning rate before it
(ebd2n.train.trunk).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ebd2n.atomic import atomic_write_bytes, atomic_write_text
from ebd2n.config import Recipe, load_recipe, recipe_identity
from ebd2n.errors import UserError
from ebd2n.layout import RunPaths, slice_checkpoint
from ebd2n.train.budget import budget_of, position_problem
from ebd2n.train.checkpoint import Provenance, content_digest, load_checkpoint, save_checkpoint
from ebd2n.train.records import metrics
from ebd2n.train.run_state import read_checkpoint_ledger
from ebd2n.train.trunk import branch_epoch


def branch_run(
    recipe: Recipe, run_dir: Path, parent_dir: Path, provenance: Provenance, until_epoch: int | None
) -> str | None:
    """Seed `run_dir` from its parent's pre-decay checkpoint (see the module); the line train.log
    says of it, None when the run trains from the start. Called only for a run with no checkpoint of
    its own, under its lease; a job planned to end at another epoch than the branch is refused."""
    paths = RunPaths(run_dir)
    parent_recipe = load_recipe(RunPaths(parent_dir).recipe)
    epoch = branch_epoch(parent_recipe, recipe)
    if epoch is None:
        return None
    if until_epoch is not None and until_epoch != epoch:
        raise UserError(
            f"--until-epoch {until_epoch}: the run branches from {parent_dir.name}'s trunk at epoch {epoch}; "
            "its first job ends there (is the slice plan another recipe's?)"
        )
    relative = slice_checkpoint(epoch)
    if not (parent_dir / relative).is_file():  # read the parent's history only when its checkpoint is not there
        diverged = metrics(RunPaths(parent_dir).metrics).divergence
        if diverged is not None and (diverged.epoch or 0) <= epoch:
            return (
                f"{parent_dir.name} diverged in epoch {diverged.epoch}, before its trunk's end: trains from the start"
            )
    parent_provenance = Provenance(
        recipe_identity(parent_recipe, provenance.cache_identity), provenance.cache_identity, provenance.source_hash
    )
    state = load_checkpoint(parent_dir / relative, parent_provenance, resume=True)
    problem = position_problem(state, budget_of(parent_recipe), epoch)
    if state.get("run_id") != parent_dir.name or problem is not None:
        raise UserError(f"checkpoint {parent_dir / relative}: not run {parent_dir.name}'s epoch {epoch}: {problem}")
    digest = read_checkpoint_ledger(parent_dir)[relative]
    with open(RunPaths(parent_dir).metrics, "rb") as parent_metrics:  # the trunk's records only
        atomic_write_bytes(paths.metrics, parent_metrics.read(int(state["metrics"]["offset"])))
    lineage = _lineage(parent_dir.name, relative, digest, state)
    atomic_write_text(paths.lineage, json.dumps(lineage, indent=1) + "\n")
    child = {key: value for key, value in state.items() if key != "format"}
    child.update(run_id=paths.directory.name, recipe_identity=provenance.recipe_identity)
    save_checkpoint(paths.directory, relative, child)
    return f"branched from {parent_dir.name}'s {relative} (sha256 {digest}): epochs 1..{epoch} are its trunk"


def _lineage(parent: str, relative: str, digest: str, state: dict[str, Any]) -> dict[str, Any]:
    """lineage.json: where a branched run started: the parent's checkpoint by its file's SHA-256 and
    by its content (ebd2n.train.checkpoint.content_digest: the same for a trunk trained again
    bitwise), and the trunk's jobs (the run's own jobs are the others)."""
    return {
        "parent": parent,
        "checkpoint": relative,
        "sha256": digest,
        "content_sha256": content_digest(state),
        "jobs": list(state["progress"]["job_ids"]),
        "epoch": state["progress"]["epoch"],
        "step": state["data"]["step"],
        "tokens": state["tokens"],
    }
