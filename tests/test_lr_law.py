"""The learning-rate law on synthetic response surfaces generated from known exponents (Step Law's
η* = 1.79·N^-0.713·D^0.307): 3 sizes x 2 horizons (20 and 80 tokens per parameter) x 7 learning
rates (x2 apart, centred off the optimum by up to 1.4x) x 3 seeds, loss 3 + 0.05·(ln lr - ln η*)²
plus seed noise of SD 0.003 nats.

Coverage of the 95 % intervals over 50 draws (seeds 0-49), measured when written: a, b and c 50/50
each (each cell's bootstrap draws its parabola's misfit in, the cubic kept whole, so on these exact
parabolas it errs wide; with seeds alone through three LRs it was 45/50, 46/50, 48/50)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import polars as pl
import pytest

from ebd2n.campaign.lr_law import Cell, cells_from_runs, curvature, fit_law, leave_largest_out, proposed_grid, regret

TRUE = {"a": math.log(1.79), "b": -0.713, "c": 0.307}
SIZES = (100_000, 300_000, 1_000_000)


def optimum(n: float, d: float, bend: float = 0.0) -> float:
    """ln η* of the surface; `bend` adds a quadratic term in ln N (centred on the middle size)."""
    return TRUE["a"] + TRUE["b"] * math.log(n) + TRUE["c"] * math.log(d) + bend * (math.log(n) - math.log(3e5)) ** 2


def surface(rng: np.random.Generator, sizes=SIZES, horizons=(20, 80), seeds: int = 3, bend: float = 0.0) -> list[Cell]:
    cells = []
    for n in sizes:
        for per_parameter in horizons:
            best = optimum(n, n * per_parameter, bend)
            centre = best + rng.uniform(-0.35, 0.35)
            lrs = [math.exp(centre + math.log(2) * (i - 3)) for i in range(7)]
            noise = 0.003 * rng.standard_normal((len(lrs), seeds))
            losses = {lr: list(3 + 0.05 * (math.log(lr) - best) ** 2 + noise[i]) for i, lr in enumerate(lrs)}
            cells.append(Cell(n, n * per_parameter, losses))
    return cells


def test_lr_law_recovers_the_exponents_within_their_intervals() -> None:
    law = fit_law(surface(np.random.default_rng(7)))
    record = law.record()
    assert record["form"] == "ln(lr*) = a + b*ln N + c*ln D"
    for name, true in TRUE.items():
        fit = record["coefficients"][name]
        assert fit["low"] <= true <= fit["high"], (name, fit)
        assert fit["low"] < fit["estimate"] < fit["high"]
    assert record["coefficients"]["b"]["high"] - record["coefficients"]["b"]["low"] < 0.2
    assert len(record["cells"]) == 6 and record["held_at_grid_end"] < 0.01


def test_lr_law_interval_coverage_over_repeated_draws() -> None:
    covered = dict.fromkeys(TRUE, 0)
    for draw in range(50):
        coefficients = fit_law(surface(np.random.default_rng(draw))).record()["coefficients"]
        for name, true in TRUE.items():
            covered[name] += coefficients[name]["low"] <= true <= coefficients[name]["high"]
    print("coverage of 50:", covered)
    assert all(count >= 40 for count in covered.values()), covered  # nominal 47.5 of 50


def test_lr_law_prediction_interval_holds_the_true_optimum_and_brackets_a_grid() -> None:
    law = fit_law(surface(np.random.default_rng(7)))
    prediction = law.predict(3_000_000, 60_000_000)
    assert prediction["low"] <= math.exp(optimum(3e6, 6e7)) <= prediction["high"]
    grid = proposed_grid(prediction)
    assert len(grid) == 5 and grid[0] < prediction["low"] and grid[-1] > prediction["high"]
    assert grid[2] == pytest.approx(prediction["estimate"], rel=5e-3)
    assert all(later / earlier >= 2**0.5 * 0.99 for earlier, later in itertools.pairwise(grid))


def test_lr_law_curvature_found_only_where_the_law_bends() -> None:
    sizes = (30_000, 100_000, 300_000, 1_000_000, 3_000_000)
    straight = curvature(fit_law(surface(np.random.default_rng(3), sizes=sizes)))
    bent = curvature(fit_law(surface(np.random.default_rng(3), sizes=sizes, bend=0.15)))
    assert not straight["ln N"]["bends"] and straight["ln N"]["low"] < 0 < straight["ln N"]["high"]
    assert bent["ln N"]["bends"] and bent["ln N"]["low"] > 0


def test_lr_law_leave_largest_out_predicts_it_with_a_small_regret() -> None:
    cells = surface(np.random.default_rng(7))
    result = leave_largest_out(cells)
    assert result["cell"] == {"parameters": 1_000_000, "tokens": 80_000_000}
    assert len(result["law"]["cells"]) == 5
    true = math.exp(optimum(1e6, 8e7))
    assert result["prediction"]["estimate"] == pytest.approx(true, rel=0.15)
    assert 0 <= result["regret"]["estimate"]["nats"] < 0.01 and not result["regret"]["estimate"]["beyond_grid"]


def test_lr_law_regret_is_the_interpolated_loss_above_the_best_measured() -> None:
    cell = Cell(1, 1, {0.001: [3.2], 0.002: [3.0], 0.004: [3.1]})
    assert regret(cell, 0.002)["nats"] == pytest.approx(0.0)
    assert regret(cell, 0.002 * 2**0.5)["nats"] == pytest.approx(0.05)  # halfway in ln LR
    assert regret(cell, 0.01) == {"nats": pytest.approx(0.1), "beyond_grid": True}


def test_lr_law_presets_at_one_horizon_fit_n_alone() -> None:
    law = fit_law(surface(np.random.default_rng(7), horizons=(20,)))
    assert law.terms == ("ln N",)
    assert law.notes == ("D moves with N over these cells (one tokens per parameter): the law is in N alone",)
    assert law.record()["form"] == "ln(lr*) = a + b*ln N"


def test_lr_law_needs_cells_that_differ() -> None:
    cells = surface(np.random.default_rng(7), sizes=(100_000,), horizons=(20,))
    with pytest.raises(ValueError, match="an LR law needs cells of different N or D"):
        fit_law(cells)


def test_lr_law_needs_seeds_to_resample() -> None:
    with pytest.raises(ValueError, match="N=100,000 D=2,000,000: one seed at a learning rate"):
        fit_law(surface(np.random.default_rng(7), seeds=1))


def test_lr_law_cells_from_a_runs_table() -> None:
    rows = [
        {
            "run": f"{preset}-{lr}-{seed}",
            "mode": "synchronous",
            "lr": lr,
            "beta2": 0.95,
            "seed": seed,
            "status": "complete",
            "loss": 3.0 + lr + seed / 100,
            "preset": preset,
            "tokens": tokens,
        }
        for preset, tokens in (("20m", 400), ("50m", 1000))
        for lr in (0.001, 0.002)
        for seed in (2, 1)
    ]
    cells = cells_from_runs(pl.DataFrame(rows), {"20m": 20, "50m": 50}, "synchronous", 0.95)
    assert [(cell.parameters, cell.tokens) for cell in cells] == [(20, 400), (50, 1000)]
    assert {lr: pytest.approx(losses) for lr, losses in cells[0].losses.items()} == {
        0.001: [3.011, 3.021],
        0.002: [3.012, 3.022],
    }  # seeds 1, 2 in order
