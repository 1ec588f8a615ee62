"""Divergence: when a run has stopped learning for good, an outcome of the run rather than a crash.

Two rules, each set in the recipe's `training` section (docs/outcomes.md):
- `non-finite`: `max_consecutive_skips` steps in a row had non-finite gradients (skipped steps,
  whose updates were never applied);
- `loss-bound`: after warm-up, `divergence_patience` steps in a row whose training loss is above
  ln(vocab_size) + `divergence_margin`: worse than predicting every token uniformly at random.
The trainer applies them step by step (`Watch`) and stops at the first step either fires; the
audit replays the same rules over the run's step records (`replay`). The decision is the last
record of metrics.jsonl (ebd2n.train.records.Divergence).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ebd2n.config import Recipe
from ebd2n.train.budget import Budget
from ebd2n.train.schedule import warmup_tokens

NON_FINITE = "non-finite"
LOSS_BOUND = "loss-bound"
RULES = (NON_FINITE, LOSS_BOUND)


@dataclass(frozen=True)
class Rules:
    """A run's divergence settings, resolved: the loss bound (None: that rule off) and from which
    step on it counts."""

    max_skips: int
    bound: float | None
    patience: int
    warmup_tokens: float

    @classmethod
    def of(cls, recipe: Recipe, budget: Budget) -> Rules:
        margin = recipe.training.divergence_margin
        bound = None if margin is None else math.log(recipe.model.vocab_size) + margin
        return cls(
            recipe.training.max_consecutive_skips,
            bound,
            recipe.training.divergence_patience,
            warmup_tokens(budget.total_tokens, recipe.optimizer),
        )


@dataclass
class Streaks:
    """The counts the rules keep between steps (the trainer keeps them in its Progress, which carries
    them across slices under the same names)."""

    consecutive_skips: int = 0
    over_bound: int = 0
    last_finite_loss: float | None = None


def observe(rules: Rules, streaks: Streaks | Any, loss: float, skipped: bool, tokens: int) -> tuple[str, str] | None:
    """Count one step (its loss, whether it was skipped, the tokens trained after it); the rule that
    fires and why, None while the run goes on."""
    streaks.consecutive_skips = streaks.consecutive_skips + 1 if skipped else 0
    finite = math.isfinite(loss)
    if finite:
        streaks.last_finite_loss = loss
    over = rules.bound is not None and tokens > rules.warmup_tokens and not skipped and finite and loss > rules.bound
    streaks.over_bound = streaks.over_bound + 1 if over else 0
    if streaks.consecutive_skips >= rules.max_skips:
        return NON_FINITE, f"{streaks.consecutive_skips} consecutive steps had non-finite gradients"
    if streaks.over_bound >= rules.patience:
        return LOSS_BOUND, (
            f"{streaks.over_bound} consecutive steps after warm-up had a training loss above "
            f"{rules.bound:.4f} (ln vocab + margin)"
        )
    return None


def replay(rules: Rules, steps: Iterable[Mapping[str, Any]], tokens_after) -> tuple[int, str] | None:
    """The first step (and rule) at which the rules fire over a run's step records, None if never;
    `tokens_after(step)` gives the tokens trained after a step."""
    streaks = Streaks()
    for record in steps:
        loss = record.get("loss")
        loss = float(loss) if isinstance(loss, (int, float)) and not isinstance(loss, bool) else math.nan
        fired = observe(rules, streaks, loss, bool(record.get("skipped")), tokens_after(int(record["step"])))
        if fired is not None:
            return int(record["step"]), fired[0]
    return None
