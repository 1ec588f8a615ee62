"""Token-based learning-rate schedule: linear warm-up, then cosine decay to a floor.

Positions are tokens, not steps, as in the reference: a shortened step at an epoch's end moves
the schedule by the tokens it trained.
"""

from __future__ import annotations

import math

from ebd2n.config import OptimizerConfig


def learning_rate(tokens: int, total_tokens: int, optimizer: OptimizerConfig) -> float:
    """LR of the step after which `tokens` of the run's `total_tokens` are trained."""
    peak = optimizer.lr
    warmup = total_tokens * optimizer.warmup_fraction
    if tokens < warmup:
        return peak * tokens / warmup
    progress = min(1.0, max(0.0, (tokens - warmup) / (total_tokens - warmup)))
    return peak * (optimizer.min_lr_ratio + (1 - optimizer.min_lr_ratio) * (1 + math.cos(math.pi * progress)) / 2)
