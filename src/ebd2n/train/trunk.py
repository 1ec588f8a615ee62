"""Where a longer horizon's run joins a shorter one's trunk: the parent's pre-decay epoch, checked.

Planned by the workflow's plans (no torch here) and checked again by the job that branches
(ebd2n.train.branch): the recipes differ only in their budget, their epochs and steps agree up to
the branch, and so does every step's learning rate before it.
"""

from __future__ import annotations

from typing import Any

from ebd2n.config import Recipe
from ebd2n.errors import UserError
from ebd2n.train.budget import Budget, budget_of
from ebd2n.train.schedule import learning_rate, pre_decay_epoch

BUDGET_KEYS = ("training.tokens_per_parameter", "training.max_tokens", "runtime.output_dir")
"""What a branched run's recipe may change of its parent's: the budget (and where it writes)."""


def branch_epoch(parent: Recipe, child: Recipe) -> int | None:
    """The epoch a run of `child` starts at from a run of `parent`: the parent's pre-decay epoch, when
    the child trains past it; None when it trains from the start. Refuses recipes that differ in
    more than their budget, or whose steps before the branch are not the same."""
    theirs = _without_budget(parent)
    differing = [key for key, value in _without_budget(child).items() if theirs.get(key) != value]
    if differing:
        raise UserError(
            f"a horizon branches only from a run of the same recipe with another budget; {differing[0]} differs"
        )
    parent_budget, child_budget = budget_of(parent), budget_of(child)
    epoch = pre_decay_epoch(parent, parent_budget)
    if epoch is None or epoch >= child_budget.epochs:
        return None
    same_epochs = parent_budget.boundaries[:epoch] == child_budget.boundaries[:epoch]
    if not same_epochs or parent_budget.step_boundaries[:epoch] != child_budget.step_boundaries[:epoch]:
        raise UserError(f"the two budgets cut their first {epoch} epochs differently: the trunk is not shared")
    for step in range(parent_budget.step_boundaries[epoch - 1]):
        if _lr(parent, parent_budget, step) != _lr(child, child_budget, step):
            raise UserError(
                f"step {step + 1}: the learning rate differs between the two budgets before the branch at epoch "
                f"{epoch} (set optimizer.warmup_tokens, so the warm-up does not scale with the budget)"
            )
    return epoch


def _lr(recipe: Recipe, budget: Budget, step: int) -> float:
    return learning_rate(budget.tokens_after(step + 1), budget.total_tokens, recipe.optimizer)


def _without_budget(recipe: Recipe) -> dict[str, Any]:
    """Every `section.key` of the recipe (a section that is not a mapping: `section`) but BUDGET_KEYS."""
    flat = {}
    for section, fields in recipe.model_dump(mode="json").items():
        items = fields.items() if isinstance(fields, dict) else [("", fields)]
        flat |= {f"{section}.{key}".rstrip("."): value for key, value in items}
    return {key: value for key, value in flat.items() if key not in BUDGET_KEYS}
