"""The token budget of a run, as the reference (tiny-llm) computes it: blocks of context_length
targets, epochs ending at cumulative block boundaries, and a shortened last step in an epoch
whose blocks do not fill whole global batches.

Derived budgets round up to whole blocks (the reference's 20m: 20 x 20,403,520 = 408,070,400
nominal tokens train 398,507 blocks = 408,071,168 tokens in 12,480 steps). In packed-K mode every
local model takes whole blocks, so a derived total rounds down and a derived epoch up to a multiple
of K x context_length, as the reference's packed recipes do. An explicit max_tokens is never
exceeded: it rounds down to whole blocks (packed: to K x context_length).

`position_problem` measures a checkpoint's own record of how far it trained against the budget:
full validation and the audit ask it before they believe a checkpoint's name.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ebd2n.config import Recipe, count_parameters
from ebd2n.errors import UserError
from ebd2n.train.records import DIVERGENCE

MAX_EPOCHS = 100_000
"""The most epochs a budget may have: each epoch is a subset validation, a metrics record and a
possible slice boundary (the reference trains 40). The count is known in closed form before any
boundary is listed, so an absurd budget (max_tokens of 10**18 in epochs of 10**7) is refused at once."""


@dataclass(frozen=True)
class Budget:
    """Epoch boundaries in blocks, and the optimizer steps that reach them."""

    parameters: int
    """Parameters of one (local) model; the per-parameter budgets refer to it."""
    context_length: int
    sequences_per_step: int
    """Sequences (blocks) of a full global batch; an epoch's last step may take fewer."""
    micro_batch_size: int
    """Sequences per forward/backward pass of one (local) model."""
    epoch_tokens: float
    """The nominal epoch length in tokens the boundaries are cut from."""
    boundaries: tuple[int, ...]
    """Cumulative blocks trained at the end of each epoch."""
    step_boundaries: tuple[int, ...]
    """Cumulative optimizer steps at the end of each epoch."""

    @property
    def epochs(self) -> int:
        return len(self.boundaries)

    @property
    def total_steps(self) -> int:
        return self.step_boundaries[-1]

    @property
    def total_tokens(self) -> int:
        return self.boundaries[-1] * self.context_length

    @property
    def tokens_per_step(self) -> int:
        """Tokens of a full step (shortened steps carry fewer)."""
        return self.sequences_per_step * self.context_length

    def epoch_steps(self, epoch: int) -> range:
        """0-based global indices of the steps of 0-based `epoch`."""
        return range(self.step_boundaries[epoch - 1] if epoch else 0, self.step_boundaries[epoch])

    def epoch_blocks(self, epoch: int) -> int:
        return self.boundaries[epoch] - (self.boundaries[epoch - 1] if epoch else 0)

    def step_span(self, step: int) -> tuple[int, int]:
        """(first block position, block count) of 0-based `step` in the training order."""
        epoch = bisect.bisect_right(self.step_boundaries, step)
        first_step = self.step_boundaries[epoch - 1] if epoch else 0
        start = (self.boundaries[epoch - 1] if epoch else 0) + (step - first_step) * self.sequences_per_step
        return start, min(self.sequences_per_step, self.boundaries[epoch] - start)

    def tokens_after(self, steps: int) -> int:
        """Tokens trained once `steps` optimizer steps are done."""
        if steps == 0:
            return 0
        start, count = self.step_span(steps - 1)
        return (start + count) * self.context_length


def budget_of(recipe: Recipe) -> Budget:
    """Derive the budget; a batch that does not divide into whole sequences is an error."""
    parameters = count_parameters(recipe.model)
    training = recipe.training
    context = recipe.model.context_length
    if training.batch_tokens % context:
        raise UserError(
            f"training.batch_tokens ({training.batch_tokens}) must be a multiple of model.context_length ({context})"
        )
    sequences = training.batch_tokens // context
    replicas = recipe.decentralized.num_models if recipe.decentralized else 1
    if sequences % replicas:
        raise UserError(
            f"training.batch_tokens gives {sequences} sequences per step, not divisible by "
            f"decentralized.num_models ({replicas})"
        )
    per_replica = sequences // replicas
    micro = min(training.micro_batch_size, per_replica)
    if per_replica % micro:
        raise UserError(
            f"training.micro_batch_size ({training.micro_batch_size}) must divide the {per_replica} sequences "
            "each model gets per step"
        )
    total, epoch = _nominal_tokens(recipe, parameters, replicas * context)
    warmup = recipe.optimizer.warmup_tokens
    if warmup is not None and warmup >= total:
        raise UserError(
            f"optimizer.warmup_tokens ({warmup:,}) must be less than the budget's {int(total):,} training tokens"
        )
    count = math.ceil(total / epoch)
    if count > MAX_EPOCHS:
        raise UserError(
            f"training: {int(total):,} tokens in epochs of {float(epoch):,.0f} make {count:,} epochs, more than "
            f"{MAX_EPOCHS:,}; lower training.max_tokens (or tokens_per_parameter) or raise training.epoch_tokens"
        )
    boundaries = tuple(math.ceil(min(total, i * epoch) / context) for i in range(1, count + 1))
    if boundaries[0] == 0 or len(set(boundaries)) != count:
        raise UserError(
            f"training: epochs of {float(epoch):,.0f} tokens are shorter than one block of "
            f"model.context_length ({context}) tokens; raise epoch_tokens or epoch_tokens_per_parameter"
        )
    steps, previous = [], 0
    for boundary in boundaries:
        steps.append((steps[-1] if steps else 0) + math.ceil((boundary - previous) / sequences))
        previous = boundary
    return Budget(
        parameters=parameters,
        context_length=context,
        sequences_per_step=sequences,
        micro_batch_size=micro,
        epoch_tokens=float(epoch),
        boundaries=boundaries,
        step_boundaries=tuple(steps),
    )


def _nominal_tokens(recipe: Recipe, parameters: int, unit: int) -> tuple[Fraction, Fraction]:
    """Total and epoch tokens before cutting into blocks; `unit` is K x context_length."""
    training = recipe.training
    packed = recipe.decentralized is not None
    if training.max_tokens:
        total = training.max_tokens // unit * unit  # explicit: never rounded up
        if total == 0:
            raise UserError(
                f"training.max_tokens ({training.max_tokens}) is less than one block for every model ({unit} tokens)"
            )
    else:
        total = math.ceil(Fraction(str(training.tokens_per_parameter)) * parameters)
        if packed:
            total = total // unit * unit
    if training.epoch_tokens:
        epoch = Fraction(training.epoch_tokens)
        if packed and training.epoch_tokens % unit:
            raise UserError(
                f"training.epoch_tokens ({training.epoch_tokens}) must be a multiple of decentralized.num_models x "
                f"model.context_length ({unit}) so every local model ends each epoch on a whole block"
            )
    else:
        epoch = Fraction(str(training.epoch_tokens_per_parameter)) * parameters
        if packed:
            epoch = math.ceil(epoch / unit) * unit
    return Fraction(total), Fraction(epoch)


def position_problem(state: Mapping[str, Any], budget: Budget, epoch: int) -> str | None:
    """Why a checkpoint's own record of how far it trained (epochs, optimizer steps, tokens) is not
    the end of `epoch` in `budget`, None when it is. A file's name (final.pt, epoch-N.pt) and the
    hashes recorded around it can be rewritten to fit; what training wrote inside cannot."""
    progress = state.get("progress") if isinstance(state.get("progress"), Mapping) else {}
    data = state.get("data") if isinstance(state.get("data"), Mapping) else {}
    steps = budget.step_boundaries[epoch - 1] if epoch else 0
    expected = {"epoch": epoch, "step": steps, "tokens": budget.tokens_after(steps)}
    diverged = progress.get(DIVERGENCE)
    if epoch == budget.epochs and isinstance(diverged, Mapping):
        # a diverged run's final.pt: the step of its decision, in the epoch it did not finish (ebd2n.train.divergence)
        decided = diverged.get("epoch")
        expected = {
            "epoch": decided - 1 if isinstance(decided, int) else None,
            "step": diverged.get("step"),
            "tokens": diverged.get("tokens"),
        }
    recorded = {
        "epoch": progress.get("epoch"),
        "step": data.get("step", state.get("step")),  # format 1: a loose step
        "tokens": state.get("tokens"),
    }
    wrong = [f"{key} {recorded[key]}" for key in expected if recorded[key] != expected[key]]
    if not wrong:
        return None
    if epoch == budget.epochs and isinstance(diverged, Mapping):
        return f"records {', '.join(wrong)}, not the point of the divergence decision it records ({dict(diverged)})"
    return (
        f"records {', '.join(wrong)}, not the end of epoch {epoch} of {budget.epochs} "
        f"(epoch {epoch}, step {steps}, {expected['tokens']:,} tokens): another point of the run under this name"
    )
