"""Checkpoint retention: which checkpoints a run holds after each slice, and which ones go.

The policies themselves (names, default, what each keeps) are defined once, in
`ebd2n.config.checkpoint_policy.CHECKPOINT_POLICIES`; `Retention` applies one to a run's budget. It is asked
by the trainer's checkpoint manager (what to write, what to let go once a later state is safe),
the audit (what a finished run may and must hold) and best.json. The manager is the only one
that deletes, and only checkpoints older than one it has just written and recorded, so a job
that is killed anywhere, or run twice, always finds its newest state again.

This module imports no torch: the audit and the workflow read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ebd2n.config.checkpoint_policy import CHECKPOINT_POLICIES, CheckpointPolicy
from ebd2n.layout import FINAL, slice_checkpoint


@dataclass(frozen=True)
class Retention:
    """The retention of one run: its policy (a name in CHECKPOINT_POLICIES) over its budget's epochs."""

    policy: str
    epochs: int

    @property
    def rule(self) -> CheckpointPolicy:
        return CHECKPOINT_POLICIES[self.policy]

    def checkpoint(self, epoch: int) -> str:
        """The file holding the state after `epoch` epochs (final.pt at the end of the budget)."""
        return FINAL if epoch == self.epochs else slice_checkpoint(epoch)

    def writes(self, epoch: int, until: int) -> bool:
        """Whether a job training to epoch `until` writes a checkpoint after `epoch` epochs."""
        if epoch in (until, self.epochs):
            return epoch > 0
        return self.rule.keeps_initial if epoch == 0 else self.rule.keeps_epochs

    def keeps_earlier(self) -> bool:
        """Whether a checkpoint survives the writing of a later one."""
        return self.rule.keeps_epochs

    def kept(self) -> list[str]:
        """What a finished run holds besides final.pt."""
        if not self.keeps_earlier():
            return []
        first = 0 if self.rule.keeps_initial else 1
        return [slice_checkpoint(epoch) for epoch in range(first, self.epochs)]

    def best_weights(self, best_epoch: int) -> str | None:
        """The kept file best.json names for the best subset epoch (None: the policy keeps none)."""
        return self.checkpoint(best_epoch) if self.keeps_earlier() else None
