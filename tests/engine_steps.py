"""Optimizer steps of fixed random sequences: what a multi-process engine must match one process on."""

from __future__ import annotations

import dataclasses

import torch


def fixed_steps(engine, recipe, rows: tuple[int, ...]) -> list[dict]:
    """One optimizer step per entry of `rows` (that many sequences each, drawn from seed 0), as plain
    dicts of StepResult."""
    generator = torch.Generator().manual_seed(0)
    results = []
    for count in rows:
        sequences = torch.randint(
            0, recipe.model.vocab_size, (count, recipe.model.context_length + 1), generator=generator
        )
        results.append(dataclasses.asdict(engine.train_step(sequences, lr=0.01)))
    return results
