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

from ebd2n.config import Recipe
from ebd2n.config.checkpoint_policy import CHECKPOINT_POLICIES, CheckpointPolicy
from ebd2n.layout import FINAL, slice_checkpoint
from ebd2n.train.budget import budget_of
from ebd2n.train.schedule import pre_decay_epoch


@dataclass(frozen=True)
class Retention:
    """The retention of one run: its policy (a name in CHECKPOINT_POLICIES) over its budget's epochs,
    with the epochs `training.checkpoint_epochs` names (the interval and explicit policies'), and, with
    `training.keep_pre_decay`, a wsd run's pre-decay checkpoint (a longer horizon branches from it)."""

    policy: str
    epochs: int
    checkpoint_epochs: tuple[int, ...] = (1,)
    pre_decay: int | None = None

    @classmethod
    def of(cls, recipe: Recipe, epochs: int) -> Retention:
        """The retention a recipe asks for, over its budget's `epochs`."""
        training = recipe.training
        return cls(
            training.checkpoint_policy,
            epochs,
            tuple(training.checkpoint_epochs),
            pre_decay_epoch(recipe, budget_of(recipe)) if training.keep_pre_decay else None,
        )

    @property
    def rule(self) -> CheckpointPolicy:
        return CHECKPOINT_POLICIES[self.policy]

    @property
    def kept_epochs(self) -> frozenset[int]:
        """The epoch boundaries before the last whose checkpoints a finished run keeps."""
        pre_decay = {self.pre_decay} if self.pre_decay is not None else set()
        return self.rule.kept_epochs(self.epochs, self.checkpoint_epochs) | pre_decay

    def checkpoint(self, epoch: int) -> str:
        """The file holding the state after `epoch` epochs (final.pt at the end of the budget)."""
        return FINAL if epoch == self.epochs else slice_checkpoint(epoch)

    def writes(self, epoch: int, until: int) -> bool:
        """Whether a job training to epoch `until` writes a checkpoint after `epoch` epochs."""
        if epoch in (until, self.epochs):
            return epoch > 0
        return epoch in self.kept_epochs

    def kept(self) -> list[str]:
        """What a finished run holds besides final.pt."""
        return [slice_checkpoint(epoch) for epoch in sorted(self.kept_epochs)]

    def best_weights(self, best_epoch: int) -> str | None:
        """The kept file best.json names for the best subset epoch: None under a policy that keeps
        no epoch checkpoint (final), else final.pt at the budget's end, the epoch's checkpoint where
        it is kept, and None where it is not (interval, explicit)."""
        if not self.rule.names_best:
            return None
        if best_epoch == self.epochs or best_epoch in self.kept_epochs:
            return self.checkpoint(best_epoch)
        return None
