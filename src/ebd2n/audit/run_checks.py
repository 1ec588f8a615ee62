"""Checks of each finished run on its own: its files, validation, recipe, final.pt, artifacts and checkpoints.

Run checks need no ledger: a run's own records (final.pt's embedded run id and recipe identity,
checkpoints.json, results.json's hashes of every artifact) must agree with each other and with
the files, so a swapped, edited, truncated or deleted artifact is caught on a first audit too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ebd2n.audit.checks import Check, each_run
from ebd2n.audit.runs import RunView
from ebd2n.campaign.axes import GRID_KEYS
from ebd2n.campaign.grid import Grid
from ebd2n.campaign.resolve import run_recipe
from ebd2n.config import Recipe, load_recipe, recipe_identity
from ebd2n.errors import UserError
from ebd2n.layout import (
    BEST,
    CHECKPOINT_LEDGER,
    FINAL,
    JOB_RECORDS,
    LINEAGE,
    LIVE_DASHBOARD,
    PACKS,
    RESULTS_JSON,
    RUN_ARTIFACTS,
    TENSORBOARD,
    TRAINING_ARTIFACTS,
    CampaignPaths,
    checkpoint_epoch,
    named_campaign,
    slice_record,
)
from ebd2n.outcomes import Outcome
from ebd2n.train.budget import budget_of
from ebd2n.train.plan import SlicePlan
from ebd2n.train.records import DIVERGENCE, Divergence
from ebd2n.train.retention import Retention


def check_files(views: list[RunView]) -> Check:
    return each_run("run files present and readable", views, lambda v: v.problems)


def check_validation(views: list[RunView], cache_identity: str | None, targets: int | None) -> Check:
    def problem(view: RunView) -> Iterable[str]:
        results = view.results
        if (
            results.get("status") == Outcome.DIVERGED
        ):  # an outcome, not validated (ebd2n.audit.outcomes checks the claim)
            if cache_identity is None or results.get("cache_identity") != cache_identity:
                yield f"cache identity {str(results.get('cache_identity'))[:12]}… is not the campaign's cache"
            return
        if results.get("status") != Outcome.COMPLETE:
            reason = results.get("reason")
            yield f"full validation {results.get('status', 'missing')}" + (f" ({reason})" if reason else "")
            return
        loss = results.get("loss")
        if not isinstance(loss, (int, float)) or not math.isfinite(loss):
            yield f"full validation loss {loss!r} is not a finite number"
        if cache_identity is None or results.get("cache_identity") != cache_identity:
            yield f"cache identity {str(results.get('cache_identity'))[:12]}… is not the campaign's cache"
        if results.get("targets") != targets:
            yield f"{results.get('targets')} validation targets, the cache has {targets}"

    return each_run("complete full validation on the campaign cache", views, problem)


def check_recipes(paths: CampaignPaths, views: list[RunView], campaign: str, grid: Grid) -> Check:
    """Each run's recipe is its frozen base at its grid point (its further axes' settings included),
    trained in its own directory (results/<campaign>/runs/<run-id>, however the campaign is reached now)."""
    bases: dict[str, Recipe | str] = {}
    fixed = {*GRID_KEYS, *(key for axis in grid.axes for key in axis.keys)}  # what a run id fixes

    def problem(view: RunView) -> Iterable[str]:
        if view.recipe is None:
            return
        base = view.run.base
        if base not in bases:
            try:
                bases[base] = load_recipe(paths.base_recipe(base))
            except UserError as error:
                bases[base] = str(error)
        if isinstance(bases[base], str):
            yield f"frozen base recipe unreadable: {bases[base]}"
            return
        own, trained_in = (
            named_campaign(campaign).run(view.id).directory.as_posix(),
            paths.relative(view.recipe.runtime.output_dir),
        )
        if trained_in != own:
            yield f"runtime.output_dir {trained_in} is not the run's directory {own} (a run trained elsewhere)"
        try:
            settings = grid.settings(view.run)
        except UserError as error:
            yield str(error)
            return
        expected = run_recipe(bases[base], view.run, view.recipe.runtime.output_dir, settings=settings)
        diff = _differences(expected.model_dump(mode="json"), view.recipe.model_dump(mode="json"))
        axes = [key for key in diff if key in fixed]
        others = [key for key in diff if key not in fixed]
        if axes:
            yield f"{', '.join(axes)} differ from the run id's grid point ({view.run.id})"
        if others:
            yield f"recipe differs from the frozen base outside the grid axes: {', '.join(others)}"

    return each_run("recipes equal the frozen base except grid axes, seed and paths", views, problem)


def _differences(expected: dict, actual: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(expected) | set(actual)):
        a, b = expected.get(key), actual.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


def check_final(views: list[RunView], cache_identity: str | None, final_states: dict[str, dict]) -> Check:
    """final.pt names its own run and recipe, and its hash is the one its run recorded twice."""

    def problem(view: RunView) -> Iterable[str]:
        actual = view.hashes.get(FINAL)
        if actual is None:
            return  # run files check
        if (view.checkpoints or {}).get(FINAL) != actual:
            yield f"{FINAL} does not match its SHA-256 in {CHECKPOINT_LEDGER} (altered or replaced)"
        if view.recorded.get(FINAL) != actual:
            yield f"{FINAL} is not the checkpoint its full validation examined (validate it again: ebd2n validate)"
        state = final_states.get(view.id)
        if state is None:
            yield f"{FINAL}: unreadable"
            return
        if state.get("run_id") != view.id:
            yield f"{FINAL} belongs to run {state.get('run_id')!r}, not {view.id}"
        if view.recipe is not None and state.get("recipe_identity") != recipe_identity(view.recipe, cache_identity):
            yield f"{FINAL} was trained for another recipe than this run's"

    return each_run(f"{FINAL} belongs to its run and matches its recorded hashes", views, problem)


def check_artifacts(views: list[RunView]) -> Check:
    """Every file the trainer left is byte-identical to what full validation recorded."""

    def problem(view: RunView) -> Iterable[str]:
        recorded = view.recorded
        if not recorded:
            yield f"{RESULTS_JSON} records no artifact hashes; validate the run again"
            return
        for name in TRAINING_ARTIFACTS:
            if name == FINAL or name not in view.hashes:
                continue  # final.pt: its own check; missing: the files check
            if recorded.get(name) != view.hashes[name]:
                yield f"{name} changed after full validation"

    return each_run("run artifacts unchanged since full validation", views, problem)


def retention_of(recipe: Recipe) -> Retention:
    return Retention.of(recipe, budget_of(recipe).epochs)


def slice_records(plan: SlicePlan | None) -> list[str]:
    """The slice records a run may hold: one per slice end of its plan before the last (none without
    a plan, which check_plans names)."""
    return [slice_record(epoch) for epoch in plan.ends[:-1]] if plan is not None else []


def check_retention(views: list[RunView], plans: Mapping[str, SlicePlan | None]) -> Check:
    """A run directory holds exactly its artifacts and the checkpoints its policy keeps, and its
    ledger records no checkpoint that is gone (the trainer lets go of an entry before its file)."""

    def problem(view: RunView) -> Iterable[str]:
        if view.recipe is None:
            return
        retention = retention_of(view.recipe)
        kept = retention.kept()
        allowed = {
            *RUN_ARTIFACTS,
            JOB_RECORDS,
            LIVE_DASHBOARD,
            LINEAGE,
            PACKS,
            *kept,
            *slice_records(plans.get(view.run.base)),
        }
        stray = [name for name in view.files if name not in allowed and not name.startswith(f"{TENSORBOARD}/")]
        if stray:
            yield f"unexpected file(s) {', '.join(stray)} (policy {retention.policy})"
        diverged = Divergence.of((view.results or {}).get(DIVERGENCE))  # a diverged run wrote none from there on
        stopped = None if diverged is None else diverged.epoch
        missing = [
            name
            for name in kept
            if name not in view.files and not (isinstance(stopped, int) and (checkpoint_epoch(name) or 0) >= stopped)
        ]
        if missing:
            yield f"checkpoint(s) {', '.join(missing)} missing (policy {retention.policy} keeps them)"
        for name in kept:
            if name in view.hashes and (view.checkpoints or {}).get(name) != view.hashes[name]:
                yield f"{name} does not match its SHA-256 in {CHECKPOINT_LEDGER}"
        gone = [name for name in view.checkpoints or {} if name not in {*view.files, *missing, *RUN_ARTIFACTS}]
        if gone:
            yield f"{CHECKPOINT_LEDGER} records {', '.join(sorted(gone))}, which the run does not hold"

    return each_run(
        "run directories hold exactly what the checkpoint policy keeps, as their ledger records", views, problem
    )


def check_best(views: list[RunView]) -> Check:
    def problem(view: RunView) -> Iterable[str]:
        if view.best is None or view.recipe is None or view.best.get("epoch") is None and DIVERGENCE in view.results:
            return  # a run that diverged in its first epoch has no best epoch
        weights = view.best.get("weights")
        retention = retention_of(view.recipe)
        expected = retention.best_weights(view.best.get("epoch")) if isinstance(view.best.get("epoch"), int) else None
        if expected is None:
            if weights is not None:
                yield f"{BEST} holds weights ({weights!r}) the {retention.policy} policy does not keep for its epoch"
        elif weights != expected or weights not in view.files:
            yield f"{BEST} points at {weights!r}, not the kept {expected} of its epoch"

    return each_run(f"{BEST} names the weights the run keeps of its epoch (null where it keeps none)", views, problem)
