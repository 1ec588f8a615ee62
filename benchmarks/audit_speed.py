"""Time the full audit of a campaign the size of the reference 20M sweep (goal: under 30 s).

Builds a real 324-run campaign in a temporary directory (3 modes x 12 LRs x 3 beta2 x 3 seeds, as
config/campaigns/recipe-sweep-20m.yaml, with the demo model on a tiny budget): frozen trainer,
cache, every run trained and validated in-process, collected, audited before the report, and
reported. Then it times the full audit (`full=True`: every run file hashed, every final.pt opened,
the cache re-hashed, the report rebuilt and compared) three times and prints the median, beside the time
to SHA-256 every file of the campaign once (the least any content audit must do).

    PYTHONPATH=src python benchmarks/audit_speed.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 3
GOAL_S = 30.0
SWEEP = ROOT / "config" / "campaigns" / "recipe-sweep-20m.yaml"


def campaign_file(directory: Path) -> Path:
    """The reference sweep's grid and seeds on the demo model, two one-step epochs per run."""
    sweep = yaml.safe_load(SWEEP.read_text())
    raw = {
        "campaign": "audit-speed",
        "recipe": "demo",
        "data": {
            "source": "synthetic",
            "cache_dir": "results/caches/audit-speed",
            "synthetic_train_bytes": 300000,
            "synthetic_validation_bytes": 30000,
        },
        "overrides": {"training.max_tokens": 2048, "training.epoch_tokens": 1024, "evaluation.subset_blocks": 8},
        "grid": sweep["grid"],
        "seeds": sweep["seeds"],
        "epochs_per_slice": 2,
        "resources": {"default": {"gpus": 0, "minutes": 5, "mem_mb": 2000, "cpus": 1}},
    }
    path = directory / "audit-speed.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def start_campaign(file: Path):
    """The campaign of `file` as the workflow starts it: cache prepared, trainer and base recipes
    frozen, slice plans written (rule plan_slices), the status plan written (onstart)."""
    from ebd2n.campaign.check import load_campaign
    from ebd2n.campaign.describe import prepare_campaign_cache
    from ebd2n.campaign.freeze import freeze_base, freeze_trainer
    from ebd2n.campaign.status_plan import write_plan
    from ebd2n.config import load_recipe
    from ebd2n.train.plan import recipe_plan, write_slice_plan

    campaign = load_campaign(file)
    prepare_campaign_cache(campaign)
    freeze_trainer(campaign)
    plans = {}
    for base in campaign.grid.bases:
        freeze_base(campaign, base)
        plans[base] = recipe_plan(load_recipe(campaign.paths.base_recipe(base)), campaign.slice_epochs(base))
        write_slice_plan(plans[base], campaign.paths.slice_plan(base))
    write_plan(campaign, plans)
    return campaign


def train_run(run_dir: Path) -> None:
    """One run trained, its dashboard written (as `ebd2n train` does) and fully validated."""
    from ebd2n.campaign.resolve import resolve_run
    from ebd2n.config import load_recipe
    from ebd2n.evaluate import validate_run
    from ebd2n.report.dashboard import write_dashboard
    from ebd2n.train import train

    train(load_recipe(resolve_run(run_dir)), progress=False)
    write_dashboard(run_dir)
    validate_run(run_dir)


def finish_campaign(campaign) -> Path:
    """Collected, audited (runs stage) and reported, as the workflow ends; its directory."""
    from ebd2n.audit import audit_campaign
    from ebd2n.campaign.collect import collect_campaign
    from ebd2n.report import build_report

    collect_campaign(campaign)
    audit_campaign(campaign.directory, stage="runs")
    build_report(campaign.directory)
    return campaign.directory


def build_campaign(directory: Path, file: Path | None = None) -> Path:
    """Train, validate, collect, audit (runs stage) and report the whole grid of `file` (default:
    the reference sweep's, `campaign_file`), as the workflow would."""
    campaign = start_campaign(file or campaign_file(directory))
    runs = campaign.grid.runs()
    started = time.perf_counter()
    for index, run in enumerate(runs, start=1):
        train_run(campaign.paths.run(run.id).directory)
        if index % 54 == 0 or len(runs) < 54:
            print(
                f"  {index}/{len(runs)} runs trained and validated ({time.perf_counter() - started:.0f} s)", flush=True
            )
    return finish_campaign(campaign)


def hash_every_file(campaign: Path) -> float:
    """Seconds to SHA-256 every file of the campaign once: the least any content check must do."""
    from ebd2n.atomic import sha256_file

    started = time.perf_counter()
    for path in sorted(campaign.rglob("*")):
        if path.is_file():
            sha256_file(path)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--keep", type=Path, help="build the campaign here and keep it (default: a temporary directory)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = (args.keep or Path(scratch)).resolve()
        directory.mkdir(parents=True, exist_ok=True)
        os.chdir(directory)  # campaigns live in results/<name> under the working directory
        started = time.perf_counter()
        campaign = build_campaign(directory)
        runs = len(list((campaign / "runs").iterdir()))
        size = sum(p.stat().st_size for p in campaign.rglob("*") if p.is_file())
        print(f"campaign: {runs} runs, {size / 1e6:.0f} MB, built in {time.perf_counter() - started:.0f} s")
        from ebd2n.audit import audit_campaign, violations

        hashing = [hash_every_file(campaign) for _ in range(REPEATS)]
        times = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            record = audit_campaign(campaign, full=True)
            times.append(time.perf_counter() - started)
            if not record["passed"]:
                sys.exit("audit failed:\n" + "\n".join(violations(record)))
        median = statistics.median(times)
        floor = statistics.median(hashing)
        print(f"hash every file: {', '.join(f'{t:.2f}' for t in hashing)} s; median {floor:.2f} s")
        print(
            f"full audit: {', '.join(f'{t:.2f}' for t in times)} s; median {median:.2f} s (goal < {GOAL_S:.0f} s); "
            f"{median / floor:.2f}x the hashing alone"
        )
        if median >= GOAL_S:
            sys.exit(f"median {median:.2f} s is over the {GOAL_S:.0f} s goal")


if __name__ == "__main__":
    main()
