"""The slices of a campaign's runs: one plan per base recipe, cut from its budget.

A run's slice chain depends on its base recipe (the budget) and the campaign's epochs per slice,
never on its grid point. There is one source: `recipe_plan` (ebd2n.train.plan) of the frozen base
recipe, frozen/recipes/<base>.yaml; its one fallback, before the campaign is frozen, is the base
recipe as it would be frozen now (`Campaign.current_bases`). The workflow plans every job from it
(`campaign_plans`) and hands it to `ebd2n status` (status/plan.json). The frozen trainer confirms
the same chain before any run of the base trains (`ebd2n plan --expect` writes
frozen/plans/<base>.json only when its own plan is the same), and what reads a campaign directory
without its file reads that confirmation (`frozen_plans`); the audit holds it to the frozen
trainer's own plan (`frozen_trainer_plan`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping

from ebd2n.campaign.file import Campaign
from ebd2n.campaign.grid import Grid
from ebd2n.campaign.halving import Halving
from ebd2n.campaign.horizons import parent_base
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.layout import CampaignPaths
from ebd2n.train.plan import SlicePlan, parse_plan, read_slice_plan, recipe_plan


def campaign_plans(campaign: Campaign) -> dict[str, SlicePlan]:
    """Each base recipe's slices, as the campaign file and its frozen base recipes say (see the module)."""
    plans = {}
    for base, recipe in campaign.current_bases.items():
        if not campaign.paths.slice_plan(base).is_file() and campaign.paths.source_hash.is_file():
            _refuse_older_frozen_trainer(campaign.paths)
        parent = parent_base(campaign.grid, base)
        if parent and campaign.paths.source_hash.is_file():
            _refuse_frozen_without_horizons(campaign.paths)
        plans[base] = recipe_plan(recipe, campaign.slice_epochs(base), parent and campaign.current_bases[parent])
    return plans


def frozen_plans(paths: CampaignPaths, bases: Iterable[str]) -> dict[str, SlicePlan]:
    """Each base recipe's slices as the frozen trainer confirmed them (frozen/plans/<base>.json): what
    collect, the report and the audit read of a campaign directory (the audit holds each file to the
    frozen trainer's own plan)."""
    plans = {base: read_slice_plan(paths.slice_plan(base)) for base in bases}
    missing = [base for base, plan in plans.items() if plan is None]
    if missing:
        raise UserError(
            f"{paths.slice_plan(missing[0])}: missing; the frozen trainer writes it before any run of "
            f"{missing[0]} trains (ebd2n plan)"
        )
    return plans


def grid_search(paths: CampaignPaths, grid: Grid, plans: Mapping[str, SlicePlan]) -> Halving | None:
    """The grid's successive halving as the campaign's files stand; None for the full grid."""
    if not grid.search.halving:
        return None
    return Halving(paths, grid.search, tuple(grid.brackets()), plans)


def campaign_search(campaign: Campaign) -> Halving | None:
    """A campaign file's successive halving over its plans (see `grid_search`)."""
    return grid_search(campaign.paths, campaign.grid, campaign_plans(campaign))


def recorded_search(paths: CampaignPaths, grid: Grid) -> Halving | None:
    """A recorded grid's successive halving over the frozen plans (what collect, the report and the
    audit read: the campaign's sources, not its file)."""
    if not grid.search.halving:
        return None
    return grid_search(paths, grid, frozen_plans(paths, grid.bases))


def frozen_trainer_plan(paths: CampaignPaths, base: str, epochs_per_slice: int, parent: str | None) -> SlicePlan:
    """The slices of frozen base recipe `base` (continuing base `parent`'s trunk, if any), as the
    campaign's frozen trainer plans them (`ebd2n plan --json` run from frozen/src): what the audit
    holds a plan file to."""
    _refuse_older_frozen_trainer(paths)
    command = [
        sys.executable,
        "-m",
        "ebd2n",
        "plan",
        str(paths.base_recipe(base)),
        "--epochs-per-slice",
        str(epochs_per_slice),
        "--json",
        *(["--parent", str(paths.base_recipe(parent))] if parent else []),
    ]
    env = {**os.environ, "PYTHONPATH": str(paths.frozen_src)}
    shown = subprocess.run(command, env=env, capture_output=True, text=True)
    if shown.returncode:
        raise UserError(
            f"{paths.frozen_src}: the frozen trainer could not plan base recipe {base}: {shown.stderr.strip()}"
        )
    try:
        return parse_plan(json.loads(shown.stdout), f"the frozen trainer's plan of {base}")
    except json.JSONDecodeError:
        raise UserError(
            f"{paths.frozen_src}: the frozen trainer's plan of {base} is not JSON: {shown.stdout[:200]!r}"
        ) from None


def _refuse_frozen_without_horizons(paths: CampaignPaths) -> None:
    """Horizons added to a campaign whose frozen trainer cannot branch a run from a shorter one's trunk."""
    if not (paths.frozen_package / "train" / "branch.py").is_file():
        raise UserError(
            f"{paths.frozen_src}: frozen by an ebd2n without training horizons (source "
            f"{paths.source_hash.read_text().strip()}): grid.horizons needs a new campaign"
        )


def _refuse_older_frozen_trainer(paths: CampaignPaths) -> None:
    """A campaign frozen before its trainer could plan slices (`ebd2n plan`, train/plan.py): that
    copy also predates the launcher the jobs start through (`python -m ebd2n.launch train ...`), and
    run by this workflow it would plan nothing and train nothing."""
    if (paths.frozen_package / "train" / "plan.py").is_file() and (paths.frozen_package / "launch.py").is_file():
        return
    record = read_json(paths.freeze_record)
    when = f", frozen {record.get('created')}" if isinstance(record, dict) else ""
    raise UserError(
        f"{paths.frozen_src}: frozen by an older ebd2n (source {paths.source_hash.read_text().strip()}{when}), "
        "whose trainer cannot plan slices nor run under this workflow's launcher: finish the campaign with "
        f"the ebd2n checkout that froze it (its source hash is in {paths.freeze_record}), or start a new campaign"
    )
