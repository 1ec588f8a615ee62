"""Checkpoint retention: which checkpoints a run holds after each slice, and which ones go.

One rule, asked by the trainer (what to write, what to delete once a later state is safe), the
audit (what a finished run may and must hold) and the docs. The trainer is the only one that
deletes, and only checkpoints older than one it has just written and recorded, so a job that is
killed anywhere, or run twice, always finds its newest state again.

- `final`: a slice writes a checkpoint at its end; once a later one (or final.pt) is written, the
  earlier ones are gone. A finished run keeps final.pt only.
- `epoch`: a checkpoint at every epoch boundary, all kept.
- `all`: also the initial weights (epoch 0).

This module imports no torch: the audit and the workflow read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ebd2n.layout import FINAL, slice_checkpoint

POLICIES = ("final", "epoch", "all")


@dataclass(frozen=True)
class Retention:
    """The retention of one run: its policy over its budget's epochs."""

    policy: str
    epochs: int

    def checkpoint(self, epoch: int) -> str:
        """The file holding the state after `epoch` epochs (final.pt at the end of the budget)."""
        return FINAL if epoch == self.epochs else slice_checkpoint(epoch)

    def writes(self, epoch: int, until: int) -> bool:
        """Whether a job training to epoch `until` writes a checkpoint after `epoch` epochs."""
        if epoch in (until, self.epochs):
            return epoch > 0
        return self.policy == "all" or (self.policy == "epoch" and epoch > 0)

    def keeps_earlier(self) -> bool:
        """Whether a checkpoint survives the writing of a later one (False: policy `final`)."""
        return self.policy != "final"

    def kept(self) -> list[str]:
        """What a finished run holds besides final.pt."""
        if not self.keeps_earlier():
            return []
        first = 0 if self.policy == "all" else 1
        return [slice_checkpoint(epoch) for epoch in range(first, self.epochs)]

    def best_weights(self, best_epoch: int) -> str | None:
        """The kept file best.json names for the best subset epoch (None: the policy keeps none)."""
        return self.checkpoint(best_epoch) if self.keeps_earlier() else None
