"""Every checkpoint and slice record holds the point of its run's budget that its name claims.

A checkpoint's name (final.pt, checkpoints/epoch-N.pt) and every hash recorded around it can be
rewritten to fit another file of the same run: final.pt replaced by the run's epoch-1 checkpoint,
checkpoints.json and results.json updated to match. What training wrote inside cannot: the epoch,
optimizer step and tokens a checkpoint records must be the end of the epoch its name claims in
the budget of the run's recipe, a slice record must name its own epoch of that budget, and
results.json and run.json the budget's whole tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ebd2n.audit.checks import Check
from ebd2n.audit.runs import RunView, json_object
from ebd2n.fileidentity import HashMemory
from ebd2n.layout import FINAL, RESULTS_JSON, RUN_RECORD, checkpoint_epoch, slice_record_epoch
from ebd2n.outcomes import Outcome
from ebd2n.train.budget import budget_of, position_problem

_BULK = ("engine", "rng", "metrics")
"""A checkpoint's parts that hold tensors or bulk state: not kept once its metadata is read."""


def checkpoint_epochs(view: RunView) -> dict[str, int]:
    """Each checkpoint file of a run, with the epoch its name claims (final.pt: the budget's last)."""
    names = {name: checkpoint_epoch(name) for name in view.hashes}
    epochs = {name: epoch for name, epoch in names.items() if epoch is not None}
    if FINAL in view.hashes and view.recipe is not None:
        epochs[FINAL] = budget_of(view.recipe).epochs
    return epochs


def checkpoint_metadata(views: Iterable[RunView], memory: HashMemory) -> dict[tuple[str, str], dict[str, Any] | None]:
    """(run id, file) -> what the checkpoint records besides its tensors, None when it cannot be read
    as a checkpoint. Read with mmap (a large file is not read in full), and kept in the audit's hash
    memory beside the file's hash: a file whose identity holds is not opened again."""
    found: dict[tuple[str, str], dict[str, Any] | None] = {}
    for view in views:
        for name in sorted({*checkpoint_epochs(view), *([FINAL] if FINAL in view.hashes else [])}):
            key = view.prefix + name
            metadata = memory.extra(key, "checkpoint")
            if metadata is None:
                metadata = _read_metadata(view, name)
                if metadata is not None and _plain(metadata):
                    memory.keep(key, "checkpoint", metadata)
            found[(view.id, name)] = metadata
    return found


def _read_metadata(view: RunView, name: str) -> dict[str, Any] | None:
    import torch

    try:
        state = torch.load(view.paths / name, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - any unpickling failure means an unreadable file
        return None
    return {k: v for k, v in state.items() if k not in _BULK} if isinstance(state, dict) else None


def _plain(metadata: dict[str, Any]) -> bool:
    """Whether `metadata` survives a JSON round trip equal, types included (kept in the hash memory
    only then; a NaN never compares equal, so a diverged run's checkpoint is read each time)."""
    try:
        return json.loads(json.dumps(metadata)) == metadata
    except (TypeError, ValueError):
        return False


def check_positions(views: Iterable[RunView], metadata: dict[tuple[str, str], dict[str, Any] | None]) -> Check:
    """Each checkpoint, slice record and final record of a finished or stopped run holds the point
    of the budget its name claims."""
    check = Check("every checkpoint and slice record holds the epoch its name claims in the run's budget")
    for view in views:
        if view.recipe is None:
            continue  # the files check names an unreadable recipe
        check.examined += 1
        check.violations += [f"{view.id}: {problem}" for problem in _problems(view, metadata)]
    return check


def _problems(view: RunView, metadata: dict[tuple[str, str], dict[str, Any] | None]) -> Iterable[str]:
    budget = budget_of(view.recipe)
    for name, epoch in sorted(checkpoint_epochs(view).items()):
        state = metadata.get((view.id, name))
        if state is None:
            yield f"{name}: unreadable as a checkpoint"
        elif (problem := position_problem(state, budget, epoch)) is not None:
            yield f"{name} {problem}"
    for name in view.hashes:
        if (epoch := slice_record_epoch(name)) is not None:
            record, unreadable = json_object(view.paths / name)
            if unreadable or record != {"epoch": epoch, "epochs": budget.epochs}:
                yield f"{name} says {unreadable or record}, not epoch {epoch} of the budget's {budget.epochs}"
    if (view.results or {}).get("status") != Outcome.COMPLETE:
        return  # unfinished, or a failed run: the validation check names it
    for name, record in ((RESULTS_JSON, view.results), (RUN_RECORD, view.record)):
        if isinstance(record, dict) and record.get("tokens") != budget.total_tokens:
            yield f"{name} records {record.get('tokens')} tokens trained, the budget's whole is {budget.total_tokens:,}"
