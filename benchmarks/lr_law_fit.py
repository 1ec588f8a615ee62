"""What fitting the learning-rate law costs at the reference campaign's size: 324 runs.

The 324 runs are laid out as a scaling campaign would hold them: 3 model sizes x 2 training
budgets (6 cells) x 9 learning rates x 6 seeds, losses from Step Law's surface (the optimum
1.79 N^-0.713 D^0.307, a parabola in ln LR) with a little seed noise. Times, in this process,
what the report does per mode and beta2: the cells from the runs table, the law with its 2,000
seed resamples, the curvature test and the leave-largest-out fit (another 2,000). Median of REPEATS,
after one warm-up.

    PYTHONPATH=src python benchmarks/lr_law_fit.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import polars as pl

from ebd2n.campaign.lr_law import cells_from_runs, curvature, fit_law, leave_largest_out

SIZES = {"20m": 20_000_000, "50m": 50_000_000, "90m": 90_000_000}
TOKENS_PER_PARAMETER = (20, 80)
SEEDS = range(6)


def runs_table() -> pl.DataFrame:
    """The 324 runs: runs.csv's columns the law reads."""
    rows = []
    for preset, parameters in SIZES.items():
        for per_parameter in TOKENS_PER_PARAMETER:
            tokens = parameters * per_parameter
            optimum = 1.79 * parameters**-0.713 * tokens**0.307
            for k in range(-4, 5):
                lr = optimum * 2 ** (k / 2 + 0.3)
                for seed in SEEDS:
                    noise = 0.002 * math.sin(seed * 7.3 + k + parameters / 1e7 + per_parameter)
                    loss = 3 + 0.05 * math.log(lr / optimum) ** 2 + noise
                    rows.append(
                        {"preset": preset, "tokens": tokens, "mode": "synchronous", "beta2": 0.95, "lr": lr}
                        | {"seed": seed, "status": "complete", "loss": loss}
                    )
    return pl.DataFrame(rows)


def fit_once(runs: pl.DataFrame) -> float:
    started = time.perf_counter()
    cells = cells_from_runs(runs, SIZES, "synchronous", 0.95)
    law = fit_law(cells)
    curvature(law)
    leave_largest_out(cells)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    runs = runs_table()
    fit_once(runs)
    times = [fit_once(runs) for _ in range(args.repeats)]
    law = fit_law(cells_from_runs(runs, SIZES, "synchronous", 0.95)).record()
    b, c = law["coefficients"]["b"], law["coefficients"]["c"]
    print(f"{runs.height} runs, {len(law['cells'])} cells: {', '.join(f'{t:.2f}' for t in times)} s")
    print(f"median {statistics.median(times):.2f} s; b = {b['estimate']:.3f} [{b['low']:.3f}, {b['high']:.3f}]")
    print(f"(true -0.713), c = {c['estimate']:.3f} [{c['low']:.3f}, {c['high']:.3f}] (true 0.307)")


if __name__ == "__main__":
    main()
