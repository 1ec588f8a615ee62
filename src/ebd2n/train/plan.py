"""A run's slice chain: the epoch boundaries its jobs stop at, planned by the code that trains it.

A campaign's slices are planned by its frozen trainer (`ebd2n plan`, which writes
frozen/plans/<base>.json for each base recipe), so the `--until-epoch` of every job is a boundary
the frozen trainer's budget has; see `ebd2n.campaign.plans`. A run that branches from a shorter
horizon's trunk (ebd2n.train.branch) starts at the branch epoch: its first job seeds it there and
its slices continue from it. This module imports no torch: the workflow reads plans with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebd2n.atomic import atomic_write_text
from ebd2n.config import Recipe
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.train.budget import budget_of
from ebd2n.train.trunk import branch_epoch


@dataclass(frozen=True)
class SlicePlan:
    """The slices of a run: each ends at an epoch boundary, the last at the end of the budget."""

    epochs: int
    epochs_per_slice: int
    ends: tuple[int, ...]
    branch: int | None = None
    """The epoch the run starts at from its parent's trunk (its first end); None: from the start."""

    def previous(self, end: int) -> int | None:
        """The boundary the slice ending at `end` resumes from (None: the first slice starts fresh)."""
        if end not in self.ends:
            raise UserError(
                f"epoch {end} is not a slice boundary of {self.epochs} epochs in slices of {self.epochs_per_slice}"
            )
        index = self.ends.index(end)
        return self.ends[index - 1] if index else None


def slice_ends(epochs: int, epochs_per_slice: int) -> list[int]:
    """Epoch boundary reached by each slice: k, 2k, ... and finally the whole budget."""
    return [*range(epochs_per_slice, epochs, epochs_per_slice), epochs]


def plan_slices(epochs: int, epochs_per_slice: int) -> SlicePlan:
    return SlicePlan(epochs, epochs_per_slice, tuple(slice_ends(epochs, epochs_per_slice)))


def recipe_plan(recipe: Recipe, epochs_per_slice: int, parent: Recipe | None = None) -> SlicePlan:
    """The slices of a run of `recipe`, cut from its budget's epochs; with `parent` (the recipe of the
    run whose trunk it continues), from the branch epoch on."""
    if epochs_per_slice < 1:
        raise UserError(f"--epochs-per-slice {epochs_per_slice}: must be at least 1")
    plan = plan_slices(budget_of(recipe).epochs, epochs_per_slice)
    branch = None if parent is None else branch_epoch(parent, recipe)
    if branch is None:
        return plan
    return SlicePlan(plan.epochs, epochs_per_slice, (branch, *(end for end in plan.ends if end > branch)), branch)


def plan_record(plan: SlicePlan) -> dict[str, Any]:
    """The plan as JSON holds it (its file, the status plan); `parse_plan` reads it back."""
    branch = {"branch_epoch": plan.branch} if plan.branch is not None else {}
    return {"epochs": plan.epochs, "epochs_per_slice": plan.epochs_per_slice, "slice_ends": list(plan.ends), **branch}


def plan_json(plan: SlicePlan) -> str:
    """The plan as its file holds it."""
    return json.dumps(plan_record(plan), indent=1) + "\n"


def write_slice_plan(plan: SlicePlan, path: Path) -> None:
    atomic_write_text(path, plan_json(plan))


def read_slice_plan(path: Path) -> SlicePlan | None:
    """A plan `write_slice_plan` wrote, None when absent; anything else in the file is a user error."""
    raw = read_json(Path(path))
    return None if raw is None else parse_plan(raw, str(path))


def parse_plan(raw: Any, source: str) -> SlicePlan:
    """A plan from its JSON form (`plan_json`); `source` names where it came from in an error."""
    try:
        branch = raw.get("branch_epoch")
        plan = SlicePlan(
            int(raw["epochs"]),
            int(raw["epochs_per_slice"]),
            tuple(int(end) for end in raw["slice_ends"]),
            None if branch is None else int(branch),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise UserError(f"{source}: not a slice plan ({type(error).__name__}: {error})") from None
    if plan.branch is not None and plan.ends[:1] != (plan.branch,):
        raise UserError(f"{source}: branch_epoch {plan.branch} is not the first slice end {list(plan.ends)[:1]}")
    if not plan.ends or list(plan.ends) != sorted(set(plan.ends)) or plan.ends[0] < 1 or plan.ends[-1] != plan.epochs:
        raise UserError(
            f"{source}: slice_ends {list(plan.ends)} are not increasing boundaries ending at epoch {plan.epochs}"
        )
    return plan
