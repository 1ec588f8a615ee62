"""What watching a run live costs the trainer (goal: at most 1 % of training throughput): its
TensorBoard event files and its live dashboard (the run record handed over at every epoch end,
and the page rewritten when due).

Trains the train_throughput.py run (demo shape at width 128, one thread, 32 steps of 4,096 tokens,
a step record per step) REPEATS times live and REPEATS times without, alternating, in this process;
"without" swaps the run's EventLog for one that writes nothing and hands no record over. Reports the
medians of the training tokens/s of the epoch records and of each job's whole wall time, and their
ratios; and, since run-to-run noise here is a few per cent, the precise figures: what one step
record costs the event writer against the time of one training step, and what one live page write
of the finished run costs (the throttle waits 100 times that before the next).

    PYTHONPATH=src python benchmarks/events_overhead.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from train_throughput import bench_recipe

from ebd2n.data import prepare_cache
from ebd2n.layout import RUN_RECORD
from ebd2n.report.live_dashboard import LiveDashboard
from ebd2n.train import output, train
from ebd2n.train.records import read_metrics


class NoEvents:
    """An EventLog that writes nothing: the trainer as it was before event files."""

    def __init__(self, run_dir: Path) -> None:
        pass

    def add(self, record: dict) -> None:
        return None

    def close(self) -> None:
        pass


def timed_run(recipe, out: Path, events: bool) -> tuple[float, float]:
    """(training tokens/s of the epoch records, the job's wall seconds) of one run."""
    output.EventLog = WRITER if events else NoEvents
    started = time.perf_counter()
    train(
        recipe.model_copy(update={"runtime": recipe.runtime.model_copy(update={"output_dir": str(out)})}),
        progress=False,
        on_record=LiveDashboard(out) if events else None,
    )
    wall = time.perf_counter() - started
    epochs = [r for r in read_metrics(out) if r["type"] == "epoch"]
    if events != (out / "tensorboard").is_dir():
        raise SystemExit(f"{out}: event files {'missing' if events else 'written'}")
    return epochs[-1]["tokens"] / sum(r["wall_s"] for r in epochs), wall


WRITER = output.EventLog


def record_cost(directory: Path, count: int = 20_000) -> float:
    """Seconds one step record costs the event writer (median of 5 batches of `count`)."""
    log = WRITER(directory)
    record = {"type": "step", "step": 1, "loss": 4.2, "accuracy": 0.1, "lr": 1e-3, "grad_norm": 0.5}
    log.add(record)  # opens the writer
    costs = []
    for batch in range(5):
        started = time.perf_counter()
        for step in range(count):
            log.add({**record, "step": 2 + batch * count + step})
        costs.append((time.perf_counter() - started) / count)
    log.close()
    return statistics.median(costs)


def page_cost(run: Path) -> float:
    """Seconds one live dashboard write of a run takes (median of 5, after a first that imports)."""
    record = json.loads((run / RUN_RECORD).read_text())
    live = LiveDashboard(run)
    live.record = record
    live.write()
    costs = []
    for _ in range(5):
        started = time.perf_counter()
        live.write()
        costs.append(time.perf_counter() - started)
    return statistics.median(costs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="ebd2n-events-"))
    recipe = bench_recipe(work, width=128)
    prepare_cache(recipe.data, recipe.model.vocab_size, progress=False)
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for repeat in range(args.repeats):
        for events in (False, True):
            runs[events].append(timed_run(recipe, work / f"run{repeat}-{events}", events))
        print(f"repeat {repeat}: without {runs[False][-1][0]:,.0f} tok/s | live {runs[True][-1][0]:,.0f} tok/s")
    (plain_tps, plain_wall), (event_tps, event_wall) = (
        tuple(statistics.median(column) for column in zip(*runs[events], strict=True)) for events in (False, True)
    )
    per_record = record_cost(work / "records")
    step_s = 4096 / plain_tps
    page = page_cost(work / f"run0-{True}")
    print()
    print(f"one step record into the event file: {per_record * 1e6:.1f} µs, {per_record / step_s:.4%} of a step")
    print(f"one live page write of the finished run: {page:.3f} s (median of 5; the next waits {100 * page:.1f} s)")
    print("| measure (median) | without | live (events, dashboard) | ratio |")
    print("|---|---|---|---|")
    print(f"| training tokens/s | {plain_tps:,.0f} | {event_tps:,.0f} | {event_tps / plain_tps:.3f} |")
    print(f"| job wall time | {plain_wall:.2f} s | {event_wall:.2f} s | {event_wall / plain_wall:.3f} |")


if __name__ == "__main__":
    main()
