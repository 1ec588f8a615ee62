"""The checkpoint policies (`training.checkpoint_policy`): which checkpoints a run keeps, defined once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ebd2n.layout import BEST, FINAL, slice_checkpoint


@dataclass(frozen=True)
class CheckpointPolicy:
    """A value of `training.checkpoint_policy`: which checkpoints a run keeps. CHECKPOINT_POLICIES is
    the one definition: the recipe field, the campaign schema, the trainer's retention
    (`ebd2n.train.retention`), the audit and the docs follow it (tests compare them)."""

    name: str
    keeps_epochs: bool
    """The checkpoint of every epoch boundary survives the writing of a later one."""
    keeps_initial: bool
    """The initial weights (epoch 0) are written and kept too."""
    meaning: str
    """What a finished run keeps, as docs/configuration.md's table says."""


CHECKPOINT_POLICIES = {
    policy.name: policy
    for policy in (
        CheckpointPolicy(
            "final",
            keeps_epochs=False,
            keeps_initial=False,
            meaning=f"`{FINAL}` only: the trainer deletes a slice checkpoint once a later one is written. "
            f"`{BEST}` records the best epoch-subset statistics with `weights: null`.",
        ),
        CheckpointPolicy(
            "epoch",
            keeps_epochs=True,
            keeps_initial=False,
            meaning=f"`{FINAL}` and a resumable checkpoint at every epoch boundary, "
            f"`{slice_checkpoint(1)}` … `epoch-(E−1).pt`; `{BEST}` names the best epoch's.",
        ),
        CheckpointPolicy(
            "all",
            keeps_epochs=True,
            keeps_initial=True,
            meaning=f"those of `epoch` and the initial weights, `{slice_checkpoint(0)}`.",
        ),
    )
}
DEFAULT_CHECKPOINT_POLICY = "final"
CheckpointPolicyName = Literal[tuple(CHECKPOINT_POLICIES)]
