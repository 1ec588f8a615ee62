"""Fabricated run directories for the dashboard tests: run.json, recipe.yaml and metrics.jsonl
shaped as the trainer writes them, at any number of steps, without training anything."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

from ebd2n.config import Recipe, load_recipe, save_recipe
from ebd2n.layout import run_paths
from ebd2n.train.accounting import unit_table

HOSTILE = "<script>alert(1)</script>"
JOB_IDS = ["2249572", "2255117", "2261003"]
DEVICES = ["cuda:0", "cuda:1"]
BUSIEST = "cuda:1"
"""The device the fabricated memory records make the most loaded."""


def fabricate_run(
    directory: Path, steps: int = 120, epochs: int = 3, purpose: str = "fabricated dashboard run"
) -> Path:
    """A finished two-GPU LoRA run: block 0 frozen by the prefix, adapters on block 1's attention only."""
    recipe = load_recipe(
        "demo",
        [
            f"runtime.output_dir={directory}",
            "parallel.freeze_prefix=1",
            "parallel.lora={rank: 4, targets: [q, k, v, o]}",
            f"runtime.purpose={json.dumps(purpose)}",
        ],
    )
    directory.mkdir(parents=True, exist_ok=True)
    files = run_paths(directory)
    save_recipe(recipe, files.recipe)
    units = _units(recipe, steps)
    run = {
        "run_id": directory.name,
        "purpose": purpose,
        "config_path": "config/recipes/demo.yaml",
        "recipe_identity": "a" * 64,
        "cache_identity": "b" * 64,
        "source_hash": "c" * 64,
        "mode": recipe.mode,
        "host": "gpu-node-07",
        "devices": ["NVIDIA H200"] * len(DEVICES),
        "python": "3.11.7",
        "torch": "2.5.1",
        "cuda": "12.4",
        "job_ids": JOB_IDS,
        "started": "2026-09-25T08:00:00+00:00",
        "ended": "2026-09-25T09:12:30+00:00",
        "parameters": sum(u["parameters"] for u in units),
        "trainable_parameters": sum(u["trainable"] for u in units),
        "steps": steps,
        "skipped_steps": 1,
        "tokens": steps * recipe.training.batch_tokens,
        "numerics": {"dtype": "bf16", "compile": False, "deterministic": False},
        "placement": [
            {"device": device, "units": [u["name"] for u in units if u["device"] == device]} for device in DEVICES
        ],
        "units": units,
    }
    files.record.write_text(json.dumps(run, indent=2), encoding="utf-8")
    records = _metrics(steps, epochs, recipe.training.batch_tokens)
    files.metrics.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return directory


def _units(recipe: Recipe, steps: int) -> list[dict[str, Any]]:
    """The trainer's unit table, the first half of the units on cuda:0 and the rest on cuda:1."""
    units = unit_table(recipe, DEVICES[0], steps, skipped=1)
    for unit in units[len(units) // 2 :]:
        unit["device"] = DEVICES[1]
    return units


def _metrics(steps: int, epochs: int, batch_tokens: int) -> list[dict[str, Any]]:
    """Noisy decaying per-step records (step 7 skipped with non-finite values), an epoch record after each epoch."""
    noise = random.Random(0)
    per_epoch = steps // epochs
    records: list[dict[str, Any]] = []
    for step in range(1, steps + 1):
        skipped = step == 7
        loss = 6.0 * math.exp(-step / steps) + 0.3 * noise.random()
        records.append(
            {
                "type": "step",
                "step": step,
                "loss": math.nan if skipped else loss,
                "accuracy": 0.6 - loss / 12,
                "lr": 1e-3 * (1 - step / (steps + 1)),
                "grad_norm": math.inf if skipped else noise.uniform(0.2, 2.0),
                "skipped": skipped,
            }
        )
        if step % per_epoch == 0 and step // per_epoch <= epochs:
            epoch = step // per_epoch
            records.append(
                {
                    "type": "epoch",
                    "epoch": epoch,
                    "step": step,
                    "tokens": step * batch_tokens,
                    "train_loss": loss + 0.1,
                    "val_loss": loss + 0.2,
                    "val_accuracy": 0.4 + 0.05 * epoch,
                    "lr": 1e-3,
                    "tokens_per_s": 1.87 * batch_tokens,
                    "batches_per_s": 1.87,
                    "wall_s": per_epoch / 1.87,
                    "skipped_steps": int(step >= 7),
                    "memory": {
                        "cuda:0": {"allocated": 20_000_000_000, "peak": 31_000_000_000},
                        "cuda:1": {"allocated": 30_000_000_000, "peak": 47_800_000_000},
                    },
                }
            )
    return records
