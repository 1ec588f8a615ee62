"""Token-based learning-rate schedules: cosine (warm-up, cosine decay to a floor) and wsd (warm-up,
stable, decay to zero), each a function of the tokens trained.

Positions are tokens, not steps, as in the reference: a shortened step at an epoch's end moves
the schedule by the tokens it trained. wsd is tiny-llm's definition: the decay starts at the later
of the warm-up's end and (1 - decay_fraction) of the budget, and a position at or past the budget's
end gets zero. Up to the decay's start a wsd run with an absolute warm-up (optimizer.warmup_tokens)
trains the same steps whatever its budget: its pre-decay checkpoint is where a longer horizon
branches (`pre_decay_epoch`, ebd2n.train.branch).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from ebd2n.config import OptimizerConfig, Recipe
from ebd2n.errors import UserError
from ebd2n.train.budget import Budget

DECAY_SHAPES = {
    "sqrt": lambda progress: 1 - math.sqrt(progress),
    "linear": lambda progress: 1 - progress,
    "cosine": lambda progress: (1 + math.cos(math.pi * progress)) / 2,
}
"""wsd's decay: the share of the peak left at progress p in [0, 1] of the decay phase."""


def learning_rate(tokens: int, total_tokens: int, optimizer: OptimizerConfig) -> float:
    """LR of the step after which `tokens` of the run's `total_tokens` are trained."""
    peak = optimizer.lr
    warmup = warmup_tokens(total_tokens, optimizer)
    if tokens < warmup:
        return peak * tokens / warmup
    if optimizer.schedule == "wsd":
        return peak * _wsd_share(tokens, total_tokens, warmup, optimizer)
    progress = min(1.0, max(0.0, (tokens - warmup) / (total_tokens - warmup)))
    return peak * (optimizer.min_lr_ratio + (1 - optimizer.min_lr_ratio) * (1 + math.cos(math.pi * progress)) / 2)


def warmup_tokens(total_tokens: int, optimizer: OptimizerConfig) -> float:
    """Where the warm-up ends: optimizer.warmup_tokens, else warmup_fraction of the budget."""
    if optimizer.warmup_tokens is not None:
        return optimizer.warmup_tokens
    return total_tokens * optimizer.warmup_fraction


def decay_start(total_tokens: int, optimizer: OptimizerConfig) -> float:
    """Where wsd's decay starts: the later of the warm-up's end and (1 - decay_fraction) of the budget."""
    return max(warmup_tokens(total_tokens, optimizer), total_tokens * (1 - optimizer.decay_fraction))


def pre_decay_epoch(recipe: Recipe, budget: Budget) -> int | None:
    """The last epoch end at or before a wsd run's decay start, where every step so far is the same
    for any longer budget (None: not wsd, no decay, or no epoch end before it)."""
    optimizer = recipe.optimizer
    if optimizer.schedule != "wsd" or optimizer.decay_fraction == 0:
        return None
    start = decay_start(budget.total_tokens, optimizer)
    epoch = bisect.bisect_right([blocks * budget.context_length for blocks in budget.boundaries], start)
    return epoch if 1 <= epoch < budget.epochs else None


def _wsd_share(tokens: int, total_tokens: int, warmup: float, optimizer: OptimizerConfig) -> float:
    """The share of the peak after warm-up: 1 in the stable phase, the decay shape after it."""
    if optimizer.decay_fraction == 0:
        return 1.0
    start = decay_start(total_tokens, optimizer)
    if tokens < start:
        return 1.0
    if tokens >= total_tokens:
        return 0.0
    return DECAY_SHAPES[optimizer.decay_shape]((tokens - start) / (total_tokens - start))


@dataclass(frozen=True)
class ConsensusSchedule:
    """tiny-llm's adaptive consensus: from step `start_step` (0-based) on, gossip mixes with
    W' = gamma W + (1 - gamma) I, gamma = (lr / lr_max)^p; before it, and with p 0, gamma is 1."""

    start_step: int
    lr_max: float | None
    """The largest learning rate of the steps from start_step on (None: there are none)."""
    p: float

    def gamma(self, step: int, lr: float) -> float:
        if step < self.start_step or self.p == 0 or self.lr_max is None:
            return 1.0
        return (lr / self.lr_max) ** self.p


def consensus_schedule(recipe: Recipe, budget: Budget) -> ConsensusSchedule | None:
    """The adaptive-consensus schedule of a packed recipe over its budget (None: plain gossip)."""
    settings = recipe.decentralized.adaptive_consensus if recipe.decentralized else None
    if settings is None:
        return None
    start = math.ceil(settings.start_fraction * budget.total_steps)
    rates = [
        learning_rate(budget.tokens_after(step + 1), budget.total_tokens, recipe.optimizer)
        for step in range(start, budget.total_steps)
    ]
    lr_max = max(rates, default=None)
    if lr_max == 0 and settings.p > 0:
        raise UserError(
            "decentralized.adaptive_consensus: the learning rate is 0 over every step from "
            f"start_fraction {settings.start_fraction} on; start earlier"
        )
    return ConsensusSchedule(start, lr_max, settings.p)


def describe_schedule(optimizer: OptimizerConfig) -> str:
    """The schedule in words, for the run dashboard and the report's settings tables."""
    warmup = (
        f"{optimizer.warmup_tokens:,}-token linear warm-up"
        if optimizer.warmup_tokens is not None
        else f"{100 * optimizer.warmup_fraction:g}% linear warm-up"
    )
    if optimizer.schedule == "wsd":
        return (
            f"{warmup}, stable at the peak, {optimizer.decay_shape} decay to zero over the last "
            f"{100 * optimizer.decay_fraction:g}% (wsd)"
        )
    return f"{warmup}, cosine decay to {100 * optimizer.min_lr_ratio:g}% of peak LR"
