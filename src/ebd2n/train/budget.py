"""The token budget of a run, cut into epochs of whole optimizer steps."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ebd2n.config import Recipe, count_parameters
from ebd2n.errors import UserError


@dataclass(frozen=True)
class Budget:
    """How long a run trains: epochs x steps, each step batch_tokens tokens of micro-batches."""

    parameters: int
    """Parameters of one (local) model; the per-parameter budgets refer to it."""
    epochs: int
    steps_per_epoch: int
    micro_batches_per_step: int
    sequences_per_step: int
    tokens_per_step: int

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch


def budget_of(recipe: Recipe) -> Budget:
    """Derive the budget; a batch that does not divide into whole sequences is an error."""
    parameters = count_parameters(recipe.model)
    training = recipe.training
    total = training.max_tokens or training.tokens_per_parameter * parameters
    epoch = training.epoch_tokens or training.epoch_tokens_per_parameter * parameters
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
    return Budget(
        parameters=parameters,
        epochs=max(1, round(total / epoch)),
        steps_per_epoch=max(1, math.ceil(epoch / training.batch_tokens)),
        micro_batches_per_step=per_replica // micro,
        sequences_per_step=sequences,
        tokens_per_step=sequences * context,
    )
