"""Per-unit accounting: each unit's training state, parameters and optimizer steps.

Derived from the recipe's shapes and fine-tuning settings alone, so the dashboard and the audit
can state what a run trained without loading its weights; tests check it against the live model.
"""

from __future__ import annotations

from ebd2n.config import Recipe
from ebd2n.config.parallelism import FROZEN_BASE, FROZEN_PREFIX, FULL_RANK, LORA
from ebd2n.model.units import Unit, model_units


def unit_state(unit: Unit, recipe: Recipe) -> tuple[str, int]:
    """(state, trainable parameters of one local model) of a unit under the recipe."""
    parallel = recipe.parallel
    if unit.block is not None and unit.block < parallel.freeze_prefix:
        return FROZEN_PREFIX, 0
    if parallel.lora is None:
        return FULL_RANK, unit.parameters
    if parallel.lora.train_norms and unit.kind == "norm":
        return FULL_RANK, unit.parameters
    targets = [(fan_in, fan_out) for p, fan_in, fan_out in unit.projections if p in parallel.lora.targets]
    if not targets:
        return FROZEN_BASE, 0
    return LORA, sum(parallel.lora.rank * (fan_in + fan_out) for fan_in, fan_out in targets)


def unit_table(recipe: Recipe, device: str, steps: int, skipped: int) -> list[dict]:
    """One row per unit; packed runs count the parameters of all K local models."""
    replicas = recipe.decentralized.num_models if recipe.decentralized else 1
    rows = []
    for unit in model_units(recipe.model):
        state, trainable = unit_state(unit, recipe)
        trains = trainable > 0
        rows.append(
            {
                "name": unit.name,
                "kind": unit.kind,
                "block": unit.block,
                "state": state,
                "parameters": unit.parameters * replicas,
                "trainable": trainable * replicas,
                "device": device,
                "steps_taken": steps - skipped if trains else 0,
                "steps_skipped": skipped if trains else 0,
            }
        )
    return rows
