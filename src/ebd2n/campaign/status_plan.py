"""status/plan.json: what the workflow writes when it starts, so that `ebd2n status` and the report
know the grid, each job's GPUs and CPUs and each base recipe's slices without the campaign file."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ebd2n.atomic import atomic_write_text
from ebd2n.campaign.grid import grid_from_record
from ebd2n.campaign.resources import scope_name
from ebd2n.campaign.runs import Run
from ebd2n.jsonio import read_json
from ebd2n.layout import CampaignPaths
from ebd2n.train.plan import SlicePlan, plan_record

if TYPE_CHECKING:
    from ebd2n.campaign.file import Campaign


def campaign_plan(campaign: Campaign, plans: Mapping[str, SlicePlan]) -> dict[str, Any]:
    """What `ebd2n status` expects and the report prices: the grid, each job scope's GPUs and CPUs,
    each base recipe's slices (`plans`, ebd2n.campaign.plans) and the GPU-hour price."""
    grid = campaign.grid
    jobs = {}
    for scope in grid.scopes:
        for mode in grid.modes:
            resources = campaign.job_resources(scope, mode)
            jobs[scope_name(scope, mode)] = {"gpus": resources.job_gpus, "cpus": resources.cpus}
    slices = {base: plan_record(plan) for base, plan in plans.items()}
    return {
        "campaign": campaign.name,
        "cost_per_gpu_hour": campaign.cost_per_gpu_hour,
        **grid.record(),
        "jobs": jobs,
        "slices": slices,
    }


def planned_runs(plan: Mapping[str, Any]) -> list[tuple[Run, int, int]]:
    """Every run of a `campaign_plan` with its job's GPUs and CPUs."""
    jobs = plan["jobs"]
    return [
        (run, jobs[scope_name(run.scope, run.mode)]["gpus"], jobs[scope_name(run.scope, run.mode)]["cpus"])
        for run in grid_from_record(plan).runs()
    ]


def write_plan(campaign: Campaign, plans: Mapping[str, SlicePlan]) -> Path:
    """status/plan.json of a campaign (the workflow's onstart): what `ebd2n status` expects to run."""
    path = campaign.paths.status_plan
    text = json.dumps(campaign_plan(campaign, plans), indent=1) + "\n"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)
    return path


def read_plan(campaign_dir: Path) -> dict[str, Any] | None:
    """The campaign's plan (see `write_plan`), or None for a campaign the workflow has not started."""
    return read_json(CampaignPaths(Path(campaign_dir)).status_plan)
