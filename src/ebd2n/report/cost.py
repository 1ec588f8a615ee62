"""What a campaign cost: GPU-hours and CPU-hours per run, grid point, mode and campaign, and money
when the campaign file sets `cost_per_gpu_hour`, with the campaign's wall-clock span beside them.

A run's hours are the time its own records give (the sum of its epochs' `wall_s` in metrics.jsonl,
over every slice, plus its full validation's `wall_seconds` in results.json; job start-up is not
in them) times the GPUs, or CPUs, its jobs asked for (the plan `ebd2n collect` records in
campaign.json, so the report and the audit's rebuild of it read the same). Snakemake's benchmark
files would count start-up too, but a job run again as a no-op rewrites its file, so a report built
from them would change with every green rerun. A campaign without a plan counts each run's
recorded devices as GPUs (none for a CPU run) and one CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ebd2n.campaign.results import CampaignResults
from ebd2n.campaign.span import campaign_span
from ebd2n.campaign.status_plan import planned_runs
from ebd2n.layout import CampaignPaths

GROUPS = (("point", ("mode", "lr", "beta2")), ("mode", ("mode",)))
"""The levels the report sums runs at, with the keys that define a group."""


def campaign_cost(campaign: CampaignResults) -> dict[str, Any]:
    """Per run, per grid point, per mode and in all: seconds, GPU-hours, CPU-hours and cost (None without a price)."""
    plan = (campaign.info or {}).get("plan") or {}
    resources = {run.id: (gpus, cpus) for run, gpus, cpus in planned_runs(plan)} if "grid" in plan else {}
    price = plan.get("cost_per_gpu_hour")
    runs = []
    for row in campaign.runs.iter_rows(named=True):
        directory = row["directory"]
        validation = (campaign.results.get(directory) or {}).get("wall_seconds")
        seconds = sum(wall for _epoch, wall in epoch_walls(campaign, directory)) + (validation or 0.0)
        gpus, cpus = resources.get(Path(directory).name, (_recorded_gpus(campaign, directory), 1))
        runs.append(
            {
                "run": row["run"],
                "directory": directory,
                "mode": row["mode"],
                "lr": row["lr"],
                "beta2": row["beta2"],
                "seed": row["seed"],
                "gpus": gpus,
                "cpus": cpus,
                **_hours(seconds, gpus, cpus, price),
            }
        )
    cost: dict[str, Any] = {"cost_per_gpu_hour": price, "runs": runs}
    for level, keys in GROUPS:
        groups: dict[tuple, list[dict[str, Any]]] = {}
        for run in runs:
            groups.setdefault(tuple(run[key] for key in keys), []).append(run)
        cost[level] = [
            {**dict(zip(keys, key, strict=True)), "runs": len(members), **_sum(members, price)}
            for key, members in groups.items()
        ]
    cost["campaign"] = {"runs": len(runs), **_sum(runs, price)}
    cost["span"] = campaign_span(CampaignPaths(campaign.directory), campaign.results.values())
    return cost


def epoch_walls(campaign: CampaignResults, directory: str) -> list[tuple[int, float]]:
    """(epoch, training seconds) of each epoch record of a run's metrics.jsonl, in epoch order."""
    return [(record["epoch"], record.get("wall_s", 0.0)) for record in campaign.epochs(directory)]


def _recorded_gpus(campaign: CampaignResults, directory: str) -> int:
    devices = (campaign.results.get(directory) or {}).get("environment", {}).get("devices") or []
    return 0 if devices in ([], ["cpu"]) else len(devices)


def _hours(seconds: float, gpus: int, cpus: int, price: float | None) -> dict[str, Any]:
    gpu_hours = seconds * gpus / 3600
    return {
        "seconds": seconds,
        "gpu_hours": gpu_hours,
        "cpu_hours": seconds * cpus / 3600,
        "cost": gpu_hours * price if price is not None else None,
    }


def _sum(runs: list[dict[str, Any]], price: float | None) -> dict[str, Any]:
    gpu_hours = sum(run["gpu_hours"] for run in runs)
    return {
        "seconds": sum(run["seconds"] for run in runs),
        "gpu_hours": gpu_hours,
        "cpu_hours": sum(run["cpu_hours"] for run in runs),
        "cost": gpu_hours * price if price is not None else None,
    }
