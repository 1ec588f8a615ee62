"""The full validation of a run's final checkpoint (the `ebd2n validate` job), into results.json.

The evaluation loop itself (`evaluate_sequences`) is the trainer's, in ebd2n.train.validation,
so the per-epoch subset and the full validation measure loss the same way.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ebd2n.atomic import atomic_write_text, remove_temporaries, sha256_file
from ebd2n.config import Recipe, load_recipe, recipe_identity
from ebd2n.data import Cache, iter_full_validation, open_verified_cache
from ebd2n.errors import UserError
from ebd2n.job_time import record_job
from ebd2n.layout import DASHBOARD, FINAL, TRAINING_ARTIFACTS, RunPaths
from ebd2n.outcomes import RESULTS, Outcome
from ebd2n.parallel.distributed import resolve_device
from ebd2n.provenance import environment, source_hash, timestamp
from ebd2n.train.budget import budget_of, position_problem
from ebd2n.train.checkpoint import Provenance, load_checkpoint
from ebd2n.train.engine import configure_torch
from ebd2n.train.lease import take_lease
from ebd2n.train.records import DIVERGENCE
from ebd2n.train.step import bf16_autocast
from ebd2n.train.validation import evaluate_sequences
from ebd2n.train.weights import evaluation_state_dict, model_with_weights

ResultPage = Callable[[dict[str, Any]], Any]
"""Writes the run's page with its validation result (ebd2n.report, from the layer above)."""


def validate_run(
    run_dir: str | Path, device: str | None = None, wait: bool = False, page: ResultPage | None = None
) -> dict:
    """Evaluate the final checkpoint over every validation target once and write results.json.

    results.json records the SHA-256 of every file the trainer left, so the audit can tell an
    artifact changed after validation. Validating an unchanged run again rewrites the same bytes:
    a touched checkpoint (a copy without preserved times) never changes a result. Validation holds
    the run's lease, as a trainer does (`wait`: for a live trainer still finishing the run).
    `page(result)` writes the run's page with the result before the hashes are taken, so the page
    shows the loss the campaign ranks by and results.json hashes that page.
    """
    paths = RunPaths(
        Path(os.path.realpath(run_dir))
    )  # one run, its lease and its id (its name), whatever path reached it
    if not paths.recipe.is_file():
        raise UserError(f"{run_dir}: no {paths.recipe.name}; not a run directory")
    run_dir = paths.directory
    recipe = load_recipe(paths.recipe)
    configure_torch(recipe)
    cache = open_verified_cache(recipe.data.cache_dir, recipe.model.vocab_size)
    lease = take_lease(run_dir, wait=wait)
    try:
        return _validate(paths, recipe, cache, device, page)
    finally:
        lease.release()


def _validate(paths: RunPaths, recipe: Recipe, cache: Cache, device: str | None, page: ResultPage | None) -> dict:
    run_dir = paths.directory
    remove_temporaries(run_dir)  # of a killed write (results.json, the dashboard): no artifact of the run
    provenance = Provenance(recipe_identity(recipe, cache.identity), cache.identity, source_hash=None)
    started = time.time()
    state = load_checkpoint(paths.final, provenance)
    budget = budget_of(recipe)
    if (problem := position_problem(state, budget, budget.epochs)) is not None:  # never a loss of the wrong checkpoint
        raise UserError(
            f"{paths.final}: {problem}; it is not this run's final checkpoint: restore it, or train the run again"
        )
    previous = _unchanged_results(paths, provenance)
    if previous is not None:
        results = json.loads(previous)
        if page is not None:
            page(results)  # the same bytes results.json hashed: a page rewritten since shows the result again
            drawn = sha256_file(paths / DASHBOARD)
            if results["artifacts"].get(DASHBOARD) != drawn:  # drawn by other code (an older ebd2n): hashed anew
                results["artifacts"][DASHBOARD] = drawn
                previous = json.dumps(results, indent=2) + "\n"
        atomic_write_text(paths.results, previous)
        return results
    diverged = state.get("progress", {}).get(DIVERGENCE)
    if diverged is not None:  # the weights of a run that stopped learning: not worth a full pass
        return _write_results(
            paths,
            recipe,
            provenance,
            state,
            started,
            page,
            {
                "status": Outcome.DIVERGED.value,
                "loss": None,
                "perplexity": None,
                "accuracy": None,
                DIVERGENCE: diverged,
                "validation": "not run: the run diverged",
            },
        )
    target = resolve_device(device or recipe.runtime.device)
    model = model_with_weights(recipe, evaluation_state_dict(recipe, state["engine"]))
    model.to(target)
    batches = iter_full_validation(cache, recipe.model.context_length, recipe.evaluation.batch_size)
    loss, accuracy, targets = evaluate_sequences(model, batches, target, bf16_autocast(recipe, target))
    if targets != cache.validation_targets:
        raise UserError(f"{run_dir}: evaluated {targets} targets, the cache has {cache.validation_targets}")
    outcome = {
        "status": Outcome.COMPLETE.value,
        "loss": loss,
        "perplexity": math.exp(loss),
        "accuracy": accuracy,
        "targets": targets,
    }
    if not math.isfinite(loss):  # non-finite weights the trainer did not stop at: a failed run, never a missing one
        outcome |= {
            "status": Outcome.FAILED.value,
            "reason": f"non-finite full-validation loss ({loss})",
            "loss": None,
            "perplexity": None,
            "accuracy": None,
        }
    return _write_results(paths, recipe, provenance, state, started, page, outcome)


def _write_results(
    paths: RunPaths,
    recipe: Recipe,
    provenance: Provenance,
    state: dict,
    started: float,
    page: ResultPage | None,
    outcome: dict,
) -> dict:
    """results.json: the run, its `outcome` (status and measurements), who trained and validated it,
    and the SHA-256 of every file its trainer left (its page written with the outcome first)."""
    if page is not None:
        page(outcome)
    results = {
        "run": paths.directory.name,
        "mode": recipe.mode,
        "lr": recipe.optimizer.lr,
        "beta2": recipe.optimizer.beta2,
        "seed": recipe.runtime.seed,
        **outcome,
        "tokens": int(state["tokens"]),
        "recipe_identity": provenance.recipe_identity,
        "cache_identity": provenance.cache_identity,
        "source_hash": state["source_hash"],
        "validator_source_hash": source_hash(),
        "job_ids": list(state["progress"]["job_ids"]),
        "environment": environment(),
        "validated": timestamp(),
        "wall_seconds": time.time() - started,
        "artifacts": {name: sha256_file(paths / name) for name in TRAINING_ARTIFACTS if (paths / name).is_file()},
    }
    record_job(paths.directory, "validate", None)  # before its result: a kill after it redoes (and records) the work
    atomic_write_text(paths.results, json.dumps(results, indent=2) + "\n")
    return results


def _unchanged_results(paths: RunPaths, provenance: Provenance) -> str | None:
    """The text of results.json when it already validated this very checkpoint, recipe and cache."""
    try:
        text = paths.results.read_text(encoding="utf-8")
        previous = json.loads(text)
        unchanged = previous["artifacts"][FINAL] == sha256_file(paths.final)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    same = (previous.get("recipe_identity"), previous.get("cache_identity")) == (
        provenance.recipe_identity,
        provenance.cache_identity,
    )
    return text if unchanged and same and previous.get("status") in RESULTS else None
