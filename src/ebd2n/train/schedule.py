"""Token-based learning-rate schedule: linear warm-up, then cosine decay to a floor."""

from __future__ import annotations

import math

from ebd2n.config import OptimizerConfig


def warmup_steps(total_steps: int, warmup_fraction: float) -> int:
    """Warm-up length in whole steps (every step carries the same number of tokens)."""
    return round(total_steps * warmup_fraction)


def learning_rate(step: int, total_steps: int, optimizer: OptimizerConfig) -> float:
    """LR used by optimizer step `step` (0-based) of a run of `total_steps` steps."""
    peak = optimizer.lr
    floor = peak * optimizer.min_lr_ratio
    warmup = warmup_steps(total_steps, optimizer.warmup_fraction)
    if step < warmup:
        return peak * (step + 1) / warmup
    decay_steps = max(1, total_steps - warmup)
    progress = min(1.0, (step - warmup) / decay_steps)
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
