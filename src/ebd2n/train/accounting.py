"""Per-unit accounting: each unit's training state, parameters and optimizer steps.

Derived from the recipe's shapes and fine-tuning settings alone, so the dashboard and the audit
can state what a run trained without loading its weights; tests check it against the live model.
"""

from __future__ import annotations

from ebd2n.config import Recipe
from ebd2n.config.schema import FROZEN_BASE, FROZEN_PREFIX, FULL_RANK, LORA
from ebd2n.model.units import Unit, model_units

_PROJECTIONS = {"attention": ("q", "k", "v", "o"), "mlp": ("gate", "up", "down")}


def _projection_shapes(recipe: Recipe) -> dict[str, tuple[int, int]]:
    """(in, out) features of every projection of a block."""
    d, f = recipe.model.width, recipe.model.ffn_width
    return {"q": (d, d), "k": (d, d), "v": (d, d), "o": (d, d), "gate": (d, f), "up": (d, f), "down": (f, d)}


def unit_state(unit: Unit, recipe: Recipe) -> tuple[str, int]:
    """(state, trainable parameters of one local model) of a unit under the recipe."""
    parallel = recipe.parallel
    if unit.block is not None and unit.block < parallel.freeze_prefix:
        return FROZEN_PREFIX, 0
    if parallel.lora is None:
        return FULL_RANK, unit.parameters
    targets = [p for p in _PROJECTIONS.get(unit.kind, ()) if p in parallel.lora.targets]
    if not targets:
        return FROZEN_BASE, 0
    shapes = _projection_shapes(recipe)
    return LORA, sum(parallel.lora.rank * (shapes[p][0] + shapes[p][1]) for p in targets)


def unit_table(recipe: Recipe, device: str, steps: int, skipped: int) -> list[dict]:
    """One row per unit; packed runs count the parameters of all K local models."""
    replicas = recipe.decentralized.num_models if recipe.decentralized else 1
    rows = []
    for unit in model_units(recipe.model):
        state, trainable = unit_state(unit, recipe)
        trains = trainable > 0
        rows.append({
            "name": unit.name, "kind": unit.kind, "block": unit.block, "state": state,
            "parameters": unit.parameters * replicas, "trainable": trainable * replicas, "device": device,
            "steps_taken": steps - skipped if trains else 0, "steps_skipped": skipped if trains else 0,
        })
    return rows
