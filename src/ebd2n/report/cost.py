"""What a campaign cost: GPU-hours and CPU-hours per run, grid point, mode and campaign, and money
when the campaign file sets `cost_per_gpu_hour`, with the campaign's wall-clock span (first job's
start to last job's end) beside them.

A run's hours are the seconds its jobs recorded in its jobs.jsonl (every training slice and its full
validation, each from its process's start to its work committed: ebd2n.job_time; a run trained by
an ebd2n that kept no such records: its epochs' training time and full validation) times the GPUs,
or CPUs, its jobs asked for (the plan `ebd2n collect` records in campaign.json, so the report and
the audit's rebuild of it read the same). A campaign without a plan counts each run's recorded
devices as GPUs (none for a CPU run) and one CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ebd2n.campaign.results import CampaignResults
from ebd2n.campaign.span import campaign_span
from ebd2n.campaign.status_plan import planned_runs
from ebd2n.job_time import recorded_jobs

LEVELS = ("point", "mode")
"""The levels the report sums runs at: each grid point (mode, LR and the other axes), each mode."""


def campaign_cost(campaign: CampaignResults) -> dict[str, Any]:
    """Per run, per grid point, per mode and in all: seconds, GPU-hours, CPU-hours and cost (None without a price)."""
    plan = (campaign.info or {}).get("plan") or {}
    resources = {run.id: (gpus, cpus) for run, gpus, cpus in planned_runs(plan)} if "grid" in plan else {}
    price = plan.get("cost_per_gpu_hour")
    runs, jobs_of_runs = [], []
    for row in campaign.runs.iter_rows(named=True):
        directory = row["directory"]
        jobs = recorded_jobs(campaign.directory / directory)
        seconds = sum(job["seconds"] for job in jobs) if jobs else _epoch_seconds(campaign, directory)
        jobs_of_runs.extend(jobs)
        gpus, cpus = resources.get(Path(directory).name, (_recorded_gpus(campaign, directory), 1))
        runs.append(
            {
                "run": row["run"],
                "directory": directory,
                "mode": row["mode"],
                "lr": row["lr"],
                **{axis: row[axis] for axis in campaign.axes},
                "seed": row["seed"],
                "gpus": gpus,
                "cpus": cpus,
                "jobs": len(jobs),
                **_hours(seconds, gpus, cpus, price),
            }
        )
    cost: dict[str, Any] = {"cost_per_gpu_hour": price, "runs": runs}
    for level, keys in zip(LEVELS, (("mode", "lr", *campaign.axes), ("mode",)), strict=True):
        groups: dict[tuple, list[dict[str, Any]]] = {}
        for run in runs:
            groups.setdefault(tuple(run[key] for key in keys), []).append(run)
        cost[level] = [
            {**dict(zip(keys, key, strict=True)), "runs": len(members), **_sum(members, price)}
            for key, members in groups.items()
        ]
    cost["campaign"] = {"runs": len(runs), **_sum(runs, price)}
    cost["span"] = campaign_span(jobs_of_runs)
    return cost


def _epoch_seconds(campaign: CampaignResults, directory: str) -> float:
    """A run without job records (trained by an ebd2n that kept none): its epochs' training time and
    its full validation, start-up not included."""
    validation = (campaign.results.get(directory) or {}).get("wall_seconds") or 0.0
    return sum(record.get("wall_s", 0.0) for record in campaign.epochs(directory)) + validation


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
        "jobs": sum(run["jobs"] for run in runs),
        "seconds": sum(run["seconds"] for run in runs),
        "gpu_hours": gpu_hours,
        "cpu_hours": sum(run["cpu_hours"] for run in runs),
        "cost": gpu_hours * price if price is not None else None,
    }
