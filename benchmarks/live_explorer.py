"""Time the status page with its live explorer (issue 57, item 8) on a 1,000-run campaign midway.

Writes a campaign of 1,000 runs (2 modes x 10 LRs x 5 beta2 x 10 seeds; the largest LR's 100 runs
diverge with blown-up losses) of 40 epochs with every step recorded (`--steps-per-epoch`, default
50: 2,000 step records per run), every 25th training half-way (36 runs; their lease held here,
no results yet), through tests/campaign_tree.py. Then, each a median of `--repeats`:

- metrics alone: parsing every run's metrics.jsonl once (the reference no reader of them beats);
- status: `campaign_status` after one more epoch of steps landed in each training run's
  metrics.jsonl, what the console computes before each page (its own per-file cache warm);
- page, first write: `write_status_page` in a process that has read no curve yet (`ebd2n status`,
  `ebd2n dashboard CAMPAIGN_DIR`);
- page, rewrite: after another epoch landed, the console's 20-second rewrite: `campaign_status`
  and `write_status_page` in a process that wrote the page before (only changed files are parsed);
- `ebd2n dashboard CAMPAIGN_DIR` as a fresh process, imports included.

    PYTHONPATH=src python benchmarks/live_explorer.py [--steps-per-epoch N] [--repeats N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # campaign_tree: the test suite's campaign writer

from campaign_tree import RunSpec, grid_runs, write_campaign  # noqa: E402

from ebd2n.campaign.check import campaign_from_dict  # noqa: E402
from ebd2n.campaign.plans import campaign_plans  # noqa: E402
from ebd2n.campaign.status import campaign_status  # noqa: E402
from ebd2n.campaign.status_plan import write_plan  # noqa: E402
from ebd2n.layout import LEASE, CampaignPaths  # noqa: E402
from ebd2n.provenance import timestamp  # noqa: E402
from ebd2n.report import status_page  # noqa: E402
from ebd2n.train.lease import Holder  # noqa: E402
from ebd2n.train.records import Metrics  # noqa: E402

EPOCHS = 40
MODES = ("synchronous", "packed-4")
LRS = (0.0005, 0.001, 0.002, 0.003, 0.004, 0.006, 0.008, 0.012, 0.016, 10.0)
BETA2 = (0.9, 0.95, 0.98, 0.99, 0.999)
SEEDS = tuple(range(42, 52))
TRAINING_EVERY = 25
"""Every 25th run that has not diverged is training (36 of 1,000)."""
BLOWN_UP = 400.0


def campaign_file() -> dict:
    return {
        "campaign": "live",
        "recipe": "demo",
        "data": {"source": "synthetic", "cache_dir": "results/caches/synthetic"},
        "overrides": {"training.max_tokens": EPOCHS * 24576},
        "grid": {"modes": list(MODES), "learning_rates": {mode: list(LRS) for mode in MODES}, "beta2": list(BETA2)},
        "seeds": list(SEEDS),
        "epochs_per_slice": 10,
        "resources": {"default": {"gpus": 1, "cpus": 4, "minutes": 60}},
    }


def build(repo: Path, steps_per_epoch: int) -> tuple[Path, list[Path]]:
    """The campaign directory and the metrics.jsonl of each training run."""
    os.chdir(repo)
    campaign = campaign_from_dict(campaign_file())
    write_plan(campaign, campaign_plans(campaign))
    runs = [
        RunSpec(r.mode, r.lr, r.beta2, r.seed, r.loss, diverged_at=49 if r.lr == LRS[-1] else None)
        for r in grid_runs(MODES, LRS, BETA2, SEEDS)
    ]
    root = write_campaign(
        repo, "live", runs, epochs=EPOCHS, campaign_json=False, audit=None, steps_per_epoch=steps_per_epoch
    )
    holder = Holder.this_process()
    training = []
    for index, spec in enumerate(runs):
        directory = root / "runs" / spec.run_id
        metrics = directory / "metrics.jsonl"
        if spec.diverged_at is not None:
            records = [json.loads(line) for line in metrics.read_text().splitlines()]
            for record in records:
                if record["type"] == "step":
                    record["loss"] *= BLOWN_UP
            metrics.write_text("".join(json.dumps(record) + "\n" for record in records))
        elif index % TRAINING_EVERY == 0:  # half-way: 20 epochs recorded, no results, its job's lease held
            lines = metrics.read_text().splitlines(keepends=True)
            metrics.write_text("".join(lines[: len(lines) // 2]))
            (directory / "results.json").unlink()
            (directory / LEASE).write_text(json.dumps({**holder.__dict__, "since": timestamp(time.time())}))
            training.append(metrics)
        else:
            (directory / "final.pt").write_bytes(b"weights")
    return root, training


def land_an_epoch(training: list[Path], steps_per_epoch: int) -> None:
    """One more epoch of step records (and its epoch record) at the end of each training run's file."""
    for metrics in training:
        last = json.loads(metrics.read_text().splitlines()[-1])
        step, epoch = last["step"], last["epoch"] + 1
        records = [{"type": "step", "step": step + i, "loss": 4.0 - epoch / 20} for i in range(1, steps_per_epoch + 1)]
        records.append({**last, "epoch": epoch, "step": step + steps_per_epoch, "val_loss": 4.0 - epoch / 20})
        with open(metrics, "a", encoding="utf-8") as file:
            file.writelines(json.dumps(record) + "\n" for record in records)


def timed(action: Callable[[], object], repeats: int, before: Callable[[], None] = lambda: None) -> list[float]:
    times = []
    for _ in range(repeats):
        before()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return times


def line(name: str, times: list[float]) -> float:
    median = statistics.median(times)
    print(f"{name}: median {median:.3f} s ({', '.join(f'{t:.3f}' for t in times)})")
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="build the campaign here and leave it (default: a temporary folder)")
    args = parser.parse_args()
    repo = args.keep or Path(tempfile.mkdtemp(prefix="live-explorer-"))
    repo.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    root, training = build(repo.resolve(), args.steps_per_epoch)
    paths = CampaignPaths(root)
    files = sorted(paths.runs.glob("*/metrics.jsonl"))
    size = sum(path.stat().st_size for path in files)
    print(
        f"campaign: {len(files)} runs ({len(training)} training), {args.steps_per_epoch} steps x {EPOCHS} epochs "
        f"per run, metrics {size / 1e6:.0f} MB; built in {time.perf_counter() - start:.0f} s"
    )
    metrics = line("metrics alone", timed(lambda: [Metrics(path).records for path in files], args.repeats))
    campaign_status(root)  # the console's own per-file cache, warm as after its first page

    def landed() -> None:
        land_an_epoch(training, args.steps_per_epoch)

    status = line("status after an epoch landed", timed(lambda: campaign_status(root), args.repeats, landed))
    state = campaign_status(root)
    first = line(
        "page, first write",
        timed(lambda: status_page.write_status_page(root, state), args.repeats, before=status_page._DRAWN.clear),
    )
    rewrite = line(
        "page, rewrite after an epoch landed (status + page)",
        timed(lambda: status_page.write_status_page(root, campaign_status(root)), args.repeats, landed),
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "ebd2n", "dashboard", str(root)]
    fresh = line(
        "ebd2n dashboard CAMPAIGN_DIR (fresh process)",
        timed(lambda: subprocess.run(command, check=True, env=env, capture_output=True), max(3, args.repeats // 2)),
    )
    print(f"status.html: {paths.status_page.stat().st_size / 1e6:.2f} MB")
    print(
        f"ratios: first write / metrics alone {first / metrics:.2f}; rewrite / status alone "
        f"{rewrite / status:.2f} (the page's share {(rewrite - status) / rewrite:.0%}); "
        f"fresh process / metrics alone {fresh / metrics:.2f}"
    )


if __name__ == "__main__":
    main()
