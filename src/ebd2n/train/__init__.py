"""Training runtime: budget, schedule, engines, checkpoints, logs and the slice trainer."""

from ebd2n.train.trainer import FINAL, slice_checkpoint, train

__all__ = ["FINAL", "slice_checkpoint", "train"]
