"""The checkpoint policies (`training.checkpoint_policy`): which checkpoints a run keeps, defined once."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ebd2n.layout import BEST, FINAL, slice_checkpoint


@dataclass(frozen=True)
class CheckpointPolicy:
    """A value of `training.checkpoint_policy`: which checkpoints a run keeps. CHECKPOINT_POLICIES is
    the one definition: the recipe field, the campaign schema, the trainer's retention
    (`ebd2n.train.retention`), the audit and the docs follow it (tests compare them)."""

    name: str
    keeps: Callable[[int, tuple[int, ...]], Iterable[int]]
    """The epoch boundaries before the last whose checkpoints survive the writing of later ones,
    given the budget's epochs and `training.checkpoint_epochs` (final.pt is always kept)."""
    meaning: str
    """What a finished run keeps, as docs/configuration.md's table says."""
    names_best: bool = True
    """best.json names the best epoch's weights where they are kept (final.pt's included)."""

    def kept_epochs(self, epochs: int, checkpoint_epochs: tuple[int, ...]) -> frozenset[int]:
        return frozenset(epoch for epoch in self.keeps(epochs, checkpoint_epochs) if 0 <= epoch < epochs)


CHECKPOINT_POLICIES = {
    policy.name: policy
    for policy in (
        CheckpointPolicy(
            "final",
            lambda epochs, chosen: (),
            meaning=f"`{FINAL}` only: the trainer deletes a slice checkpoint once a later one is written. "
            f"`{BEST}` records the best epoch-subset statistics with `weights: null`.",
            names_best=False,
        ),
        CheckpointPolicy(
            "epoch",
            lambda epochs, chosen: range(1, epochs),
            meaning=f"`{FINAL}` and a resumable checkpoint at every epoch boundary, "
            f"`{slice_checkpoint(1)}` … `epoch-(E−1).pt`; `{BEST}` names the best epoch's.",
        ),
        CheckpointPolicy(
            "all",
            lambda epochs, chosen: range(0, epochs),
            meaning=f"those of `epoch` and the initial weights, `{slice_checkpoint(0)}`.",
        ),
        CheckpointPolicy(
            "interval",
            lambda epochs, chosen: range(chosen[0], epochs, chosen[0]),
            meaning=f"`{FINAL}` and the checkpoint of every K-th epoch boundary, K the one value of "
            f"`checkpoint_epochs` (tiny-llm's `interval`); `{BEST}` names the best epoch's when it is kept, "
            "else `null`.",
        ),
        CheckpointPolicy(
            "explicit",
            lambda epochs, chosen: chosen,
            meaning=f"`{FINAL}` and the checkpoints of the epoch boundaries `checkpoint_epochs` lists "
            f"(tiny-llm's `explicit`); `{BEST}` as under `interval`.",
        ),
    )
}
DEFAULT_CHECKPOINT_POLICY = "final"
CheckpointPolicyName = Literal[tuple(CHECKPOINT_POLICIES)]


def epochs_past_budget(policy: str, checkpoint_epochs: Sequence[int], epochs: int) -> list[int]:
    """The epochs the `explicit` policy lists past a budget of `epochs` (none under the other
    policies): boundaries a run of that budget never reaches. The trainer ignores them; a campaign
    refuses them when they are past every run's budget (ebd2n.campaign.check)."""
    return sorted({epoch for epoch in checkpoint_epochs if epoch > epochs}) if policy == "explicit" else []


def policy_label(policy: str, checkpoint_epochs: Sequence[int]) -> str:
    """The policy as a page shows it: its name, and the epochs it keeps where it takes them."""
    if policy == "interval":
        return f"interval (every {checkpoint_epochs[0]} epochs)"
    if policy == "explicit":
        return f"explicit (epochs {', '.join(str(epoch) for epoch in sorted(set(checkpoint_epochs)))})"
    return policy
