"""How often the fitted LR optimum's stated range holds the true optimum, on simulated sweeps.

Each sweep is a grid of 3, 5 or 7 learning rates a factor 2 apart, its middle LR a random fraction
of a step (uniform, at most half) from the true optimum, 3 seeds per LR. Final loss is a curve in
u = ln(LR / optimum) plus Gaussian seed noise:

- quadratic: 3 + A·u², the model's own shape;
- asymmetric: 3 + 2A·(e^(k·u) - 1 - k·u)/k², k = 1 or 2: the same curvature at the optimum, steeper
  above it than below (at u = ±ln 4 it rises 2.5x (k = 1) or 7x (k = 2) faster above), as LR curves
  are, and not a parabola.

A is 0.05 nats (one factor-2 step from the optimum costs 0.024 nats) or 0.02 (0.0096), the seed SD
0.003 or 0.01 nats. Every sweep goes through the real `fit_optimum` (bootstrap included). Printed
per setting: how many sweeps were checked (4 or 5 LRs around the best) and how often their 95 %
interval held the optimum (an open end counts as reaching past the grid), with the median interval
as a factor (high / low); how often an unchecked sweep's bracket (the best LR's neighbours) held it;
and, for reference, two intervals on the same sweeps: the seed bootstrap of the parabola through
the best LR and its two neighbours that the report gave before (`three-point`), and the wide fit's
seed bootstrap with the lack of fit added as independent noise per LR (`white`), the alternative
to the drawn cubic and quartic terms.

    PYTHONPATH=src python benchmarks/optimum_coverage.py [--sweeps 400] [--resamples 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

import numpy as np

from ebd2n.campaign.optimum import LEVEL, POINTS, fit_optimum, fitted_minima, misfit_terms, resampled_means

STEP = math.log(2)
SEEDS = 3
CURVES = {"quadratic": 0.0, "asymmetric k=1": 1.0, "asymmetric k=2": 2.0}
CURVATURES = (0.05, 0.02)
NOISES = (0.003, 0.01)
GRIDS = (3, 5, 7)
OPTIMUM = 0.006


def loss(u: np.ndarray, curvature: float, k: float) -> np.ndarray:
    """The true curve's excess loss at u = ln(LR / optimum), with the curvature 2A at its minimum."""
    if k == 0:
        return curvature * u**2
    return 2 * curvature * (np.expm1(k * u) - k * u) / k**2


def sweep(rng: np.random.Generator, size: int, curvature: float, k: float, sd: float) -> dict[float, list[float]]:
    """One simulated sweep: LR -> its seeds' final losses."""
    u = (np.arange(size) - (size - 1) / 2) * STEP + rng.uniform(-STEP / 2, STEP / 2)
    losses = 3.0 + loss(u, curvature, k)[:, None] + rng.normal(0.0, sd, (size, SEEDS))
    return {float(OPTIMUM * math.exp(value)): row.tolist() for value, row in zip(u, losses, strict=True)}


def holds(low: float | None, high: float | None) -> bool:
    return (low or 0.0) <= OPTIMUM <= (high or math.inf)


def _percentile(minima: np.ndarray) -> tuple[float | None, float | None]:
    """The 95 % percentile interval of resampled ln LR minima as LRs (None past any LR)."""
    ordered, tail = np.sort(minima), (1 - LEVEL) / 2
    ends = ordered[int(math.floor(tail * ordered.size))], ordered[int(math.ceil((1 - tail) * ordered.size)) - 1]
    return tuple(math.exp(end) if np.isfinite(end) and abs(end) < 700 else None for end in ends)


def three_point(losses: dict[float, list[float]], rng: np.random.Generator, resamples: int) -> tuple:
    """The interval the report gave before: the seed bootstrap of the parabola through the best LR
    and its two neighbours (window per resample)."""
    lrs = sorted(losses)
    grid = np.stack([resampled_means(np.asarray(losses[lr]), rng, resamples) for lr in lrs], axis=1)
    return _percentile(fitted_minima(grid, np.log(lrs), reach=1))


def white(losses: dict[float, list[float]], rng: np.random.Generator, resamples: int) -> tuple:
    """The wide fit's seed bootstrap with the residual variance beyond seed noise added to every
    fitted LR's mean as independent Gaussian noise."""
    lrs = sorted(losses)
    x = np.log(lrs)
    grid = np.stack([resampled_means(np.asarray(losses[lr]), rng, resamples) for lr in lrs], axis=1)
    misfit = misfit_terms(losses)
    start, stop = misfit.start, misfit.stop
    design = np.vander(x[start:stop] - x[start:stop].mean(), POINTS)
    means = np.array([np.mean(losses[lr]) for lr in lrs[start:stop]])
    residual = means - design @ np.linalg.lstsq(design, means, rcond=None)[0]
    freedom = stop - start - POINTS
    excess = max(0.0, (residual @ residual - freedom * misfit.noise**2) / freedom)
    grid[:, start:stop] += rng.normal(0.0, math.sqrt(excess), (resamples, stop - start))
    return _percentile(fitted_minima(grid, x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=400, help="simulated sweeps per setting")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per fit (the report: 2000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(f"{args.sweeps} sweeps per setting, {SEEDS} seeds, {args.resamples} resamples; coverage of {LEVEL:.0%}")
    print(
        f"{'curve':<15} {'A':>5} {'SD':>6} {'LRs':>3} | {'checked':>7} {'holds':>6} {'median':>6} | "
        f"{'unchecked':>9} {'bracket':>7} | {'three-point':>11} {'white':>6}"
    )
    totals: dict[str, list[int]] = {}
    for (name, k), curvature, sd, size in itertools.product(CURVES.items(), CURVATURES, NOISES, GRIDS):
        checked, unchecked, old, wide, widths = [], [], [], [], []
        for _ in range(args.sweeps):
            losses = sweep(rng, size, curvature, k, sd)
            fit = fit_optimum(sorted(losses), losses, args.resamples)
            (checked if fit["checked"] else unchecked).append(holds(fit["low"], fit["high"]))
            if fit["checked"]:
                widths.append((fit["high"] or math.inf) / (fit["low"] or 0.0) if fit["low"] else math.inf)
                wide.append(holds(*white(losses, rng, args.resamples)))
            old.append(holds(*three_point(losses, rng, args.resamples)))
        for key, values in (("checked", checked), ("bracket", unchecked), ("three-point", old), ("white", wide)):
            totals.setdefault(f"{name}|{key}", []).extend(values)
        print(
            f"{name:<15} {curvature:>5.2f} {sd:>6.3f} {size:>3} | {len(checked):>7} {_share(checked):>6} "
            f"{_median(widths):>6} | {len(unchecked):>9} {_share(unchecked):>7} | {_share(old):>11} {_share(wide):>6}"
        )
    print("\npooled over A, SD and grids:")
    for name in CURVES:
        parts = [f"{key} {_share(totals[f'{name}|{key}'])} of {len(totals[f'{name}|{key}'])}" for key in _KEYS]
        print(f"  {name:<15} " + "; ".join(parts))
    print(f"\n{time.perf_counter() - started:.0f} s")


_KEYS = ("checked", "bracket", "three-point", "white")


def _share(values: list[bool]) -> str:
    return f"{np.mean(values):.1%}" if values else "-"


def _median(widths: list[float]) -> str:
    """The median interval as high / low; "open" where most reach past the grid."""
    if not widths:
        return "-"
    middle = float(np.median(widths))
    return f"{middle:.3g}x" if middle < 1e3 else "open"


if __name__ == "__main__":
    main()
