"""The campaign-level facts and provenance at the head of results.json, shared by grid and scaling reports."""

from __future__ import annotations

import json
import os
from typing import Any

import polars as pl

from ebd2n.campaign.results import CampaignResults
from ebd2n.config import Recipe
from ebd2n.layout import FIRST_AUDIT, RUNS, CampaignPaths
from ebd2n.outcomes import RESULTS, CheckStatus, Outcome
from ebd2n.report.halving import stopped_at
from ebd2n.report.tables import data_facts, point_runs, settings


def selection_rule(axes: list[str]) -> dict[str, str]:
    """How winners are picked, in words; ties go down the axes in the campaign's order."""
    lower = ", then lower ".join(["learning rate", *axes])
    return {
        "selection": "lowest mean final full-validation cross-entropy (nats) over seeds, separately per mode",
        "uncertainty": "sample standard deviation across seeds (ddof = 1), not a confidence interval",
        "tie_break": f"lower {lower}; only points with every seed are eligible",
    }


def campaign_summary(
    campaign: CampaignResults, selection: dict[str, dict[str, Any]], halving: dict[str, Any] | None
) -> dict[str, Any]:
    """Campaign-level facts and provenance shared by grid and scaling reports (results.json head).
    Runs successive halving stopped at a rung are neither expected to finish nor incomplete."""
    stopped = stopped_at(halving)
    runs = campaign.runs
    halted = pl.col("run").is_in(pl.Series(list(stopped), dtype=pl.String))
    counted = runs.filter(~halted & (pl.col("status") != Outcome.RETIRED))
    complete = counted.filter(pl.col("status") == Outcome.COMPLETE)
    validated = pl.col("directory").is_in(list(campaign.results))  # a diverged run is a result, once validated
    ended = counted.filter(pl.col("status").is_in(list(RESULTS)) & validated)
    results = list(campaign.results.values())
    info = campaign.info or {}
    points = sum(len(lrs) for lrs in campaign.learning_rates.values()) * len(campaign.points)
    # campaign.json knows the plan (presets may have their own learning rates); else the grid's product
    planned = info.get("runs_planned") or points * len(campaign.seeds) * max(1, len(set(campaign.presets.values())))
    expected = planned - len(stopped)
    recipes = _representatives(campaign, selection)
    first = next(iter(recipes.values()))[0]
    return {
        "campaign": campaign.name,
        "description": info.get("description") or "",
        "directory": campaign_path(campaign),
        "kind": "scaling" if campaign.presets else "grid",
        "measured_date": campaign.measured_date,
        "status": Outcome.COMPLETE
        if ended.height == counted.height and ended.height >= expected
        else Outcome.INCOMPLETE,
        "runs": runs.height,
        "completed_runs": complete.height,
        "expected_runs": expected,
        "outcomes": run_outcomes(campaign),
        **({"stopped_runs": len(stopped)} if halving is not None else {}),
        "grid": {"modes": campaign.modes, "learning_rates": campaign.learning_rates, **campaign.axis_values},
        "seeds": campaign.seeds,
        **selection_rule(campaign.axes),
        "settings": {mode: settings(recipe, epochs) for mode, (recipe, epochs) in recipes.items()},
        "validation_targets": sorted({r["targets"] for r in results if r.get("targets") is not None}),
        "data": _data_record(campaign, first),
        "evaluation": first.evaluation.model_dump(mode="json"),
        "data_facts": dict(data_facts(campaign, first)),
        "source_hash": {
            "campaign": info.get("source_hash"),
            "runs": sorted({r["source_hash"] for r in results if r.get("source_hash")}),
        },
        "cache_identity": sorted({r["cache_identity"] for r in results if r.get("cache_identity")}),
        "base_recipes": _base_recipes(info),
        "created": info.get("created"),
        "environment": _environments(results),
        "hosts": sorted({(r.get("environment") or {}).get("host") for r in results} - {None}),
        "job_ids": sorted({str(job) for r in results for job in r.get("job_ids") or []}),
        "execution": info.get("execution"),
        "audit": _audit(campaign.audit),
        "signing_key_id": (info.get("signing") or {}).get(
            "key_id"
        ),  # the audit signs after this page: the key named, not a signature
    }


def run_outcomes(campaign: CampaignResults) -> dict[str, list[dict[str, Any]]]:
    """The runs that did not converge, by outcome: diverged (with the step), failed (with the last
    lines of the job's log), incomplete (not finished yet), missing (no run directory) and retired."""
    rows = campaign.runs.iter_rows(named=True)
    names = (Outcome.DIVERGED, Outcome.FAILED, Outcome.INCOMPLETE, Outcome.MISSING, Outcome.RETIRED)
    outcomes: dict[str, list[dict[str, Any]]] = {name.value: [] for name in names}
    for row in rows:
        if row["status"] == Outcome.DIVERGED:
            outcomes[Outcome.DIVERGED].append({"run": row["run"], "step": row["diverged_step"]})
        elif row["status"] == Outcome.FAILED:
            outcomes[Outcome.FAILED].append({"run": row["run"], "log": campaign.failures.get(row["directory"], [])})
        elif row["status"] in (Outcome.INCOMPLETE, Outcome.RETIRED):
            outcomes[row["status"]].append({"run": row["run"]})
    for run, outcome in campaign.unresolved.items():  # no resolved recipe: no row of the runs table
        log = campaign.failures.get(f"{RUNS}/{run}")
        outcomes[outcome].append({"run": run, **({"log": log} if log else {})})
    return outcomes


def _representatives(
    campaign: CampaignResults, selection: dict[str, dict[str, Any]]
) -> dict[str, tuple[Recipe, int | None]]:
    """Recipe and epoch count of one run per column of the settings table: per model size in a
    scaling campaign (its first run), else per mode (the winner's first seed, else the mode's first run)."""
    directories: dict[str, str] = {}
    if campaign.presets:
        for directory, size in campaign.presets.items():
            directories.setdefault(size, directory)
    else:
        for mode in campaign.modes:
            runs = (
                point_runs(campaign, selection[mode])
                if mode in selection
                else campaign.runs.filter(pl.col("mode") == mode)
            )
            if not runs.is_empty():
                directories[mode] = runs["directory"][0]
    return {label: (campaign.recipe(d), len(campaign.epochs(d)) or None) for label, d in directories.items()}


def _base_recipes(info: dict[str, Any]) -> dict[str, str]:
    """Identity of each frozen base recipe (one per preset in a scaling campaign)."""
    if info.get("base_recipes"):
        return {name: entry.get("identity") for name, entry in info["base_recipes"].items()}
    return {"base": info["base_recipe_identity"]} if info.get("base_recipe_identity") else {}


def _data_record(campaign: CampaignResults, recipe: Recipe) -> dict[str, Any]:
    """Data and tokenizer revisions: the manifest when present, else what the recipe pinned."""
    if campaign.manifest is not None:
        keys = ("source", "tokenizer", "seeds", "splits")
        manifest = repo_relative(str(campaign.manifest_path), campaign)
        return {"manifest": manifest, **{k: campaign.manifest.get(k) for k in keys}}
    data = recipe.data
    return {
        "manifest": None,
        "manifest_missing": repo_relative(str(campaign.manifest_path), campaign),
        "source": {"name": data.dataset or data.source, "config": data.dataset_config, "revision": data.revision},
        "tokenizer": {
            "name": data.tokenizer,
            "revision": data.tokenizer_revision,
            "vocab_size": recipe.model.vocab_size,
        },
        "seeds": {"shuffle": data.shuffle_seed, "validation": recipe.evaluation.seed},
    }


def _environments(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Distinct software and hardware environments (hosts listed apart), with their run counts."""
    counts: dict[str, int] = {}
    for result in results:
        environment = {k: v for k, v in (result.get("environment") or {}).items() if k != "host"}
        key = json.dumps(environment, sort_keys=True)
        counts[key] = counts.get(key, 0) + 1
    return [{**json.loads(key), "runs": count} for key, count in sorted(counts.items())]


def _audit(audit: dict[str, Any] | None) -> dict[str, Any]:
    """Audit outcome: not audited, passed, or failed with the failing checks and their violations;
    `passed` counts the checks that examined something and passed, `not_applicable` names those
    that had nothing to examine (no failure; a first audit's comparison with an earlier one is said
    apart), `compared` whether an earlier audit was compared."""
    if audit is None:
        return {
            "status": CheckStatus.NOT_AUDITED.value,
            "checks": 0,
            CheckStatus.PASSED.value: 0,
            CheckStatus.FAILED.value: [],
            "not_applicable": [],
            "compared": False,
        }
    checks = audit.get("checks") or []
    compared = audit.get("compared_with_earlier_audit", True)
    idle = [
        f"{check.get('name')}: {check.get('scope')}" if check.get("scope") else str(check.get("name"))
        for check in checks
        if check.get("status") == CheckStatus.NOT_APPLICABLE
        and (compared or check.get("scope") != FIRST_AUDIT)  # a first audit is said once, in plain words
    ]
    first = sum(check.get("status") == CheckStatus.NOT_APPLICABLE for check in checks) - len(idle)
    failed = [
        {"name": check.get("name"), "scope": check.get("scope"), "violations": list(check.get("violations") or [])}
        for check in checks
        if not check.get("passed")
    ]
    status = CheckStatus.PASSED if audit.get(CheckStatus.PASSED) and not failed else CheckStatus.FAILED
    return {
        "status": status.value,
        "checks": len(checks),
        CheckStatus.PASSED.value: len(checks) - len(idle) - first - len(failed),
        CheckStatus.FAILED.value: failed,
        "not_applicable": idle,
        "compared": compared,
    }


def repo_relative(path: str, campaign: CampaignResults) -> str:
    """A path under the repository made relative to it (never through links: results/ may be a
    link to scratch space); relative paths and outside paths kept."""
    return CampaignPaths(campaign.directory).relative(path)


def campaign_path(campaign: CampaignResults) -> str:
    """The campaign directory as commands run from the repository root name it (results/<name>,
    however the campaign was reached)."""
    return repo_relative(os.path.abspath(campaign.directory), campaign)
