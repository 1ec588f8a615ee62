"""A scaling campaign's report fits the learning-rate law to its own runs (ebd2n.report.lr_law_report):
three model sizes whose seeds' losses follow a known law recover its exponent within the interval,
the largest size is predicted from the others with its regret, the next size gets a grid, and the
law's figure plots every cell with its interval, the law and the prediction, the same on a rebuild."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from campaign_tree import RunSpec, write_campaign

from ebd2n.config import count_parameters, load_recipe
from ebd2n.report import build_report
from ebd2n.report.figures import lr_law_figure
from ebd2n.report.lr_law_report import figure_name, law_plot

LAYERS = {"one": 1, "two": 2, "four": 4}
EXPONENT = -0.7
LRS = tuple(0.0005 * 2 ** (k / 2) for k in range(11))


def _size(layers: int) -> int:
    return count_parameters(load_recipe("demo", [f"model.layers={layers}"]).model)


def _runs() -> list[RunSpec]:
    """Every size at every LR and three seeds: 3 + 0.05 (ln lr - ln lr*)^2 with lr* = 0.003 (N / N_two)^-0.7
    and a little seed noise."""
    middle = _size(LAYERS["two"])
    runs = []
    for index, (preset, layers) in enumerate(LAYERS.items()):
        optimum = 0.003 * (_size(layers) / middle) ** EXPONENT
        for lr in LRS:
            for seed in (42, 43, 44):
                loss = 3 + 0.05 * math.log(lr / optimum) ** 2 + 0.0005 * math.sin(seed * 7.3 + index + 3 * lr)
                runs.append(
                    RunSpec("synchronous", lr, 0.95, seed, loss, preset=preset, overrides=(("model.layers", layers),))
                )
    return runs


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, Path]:
    campaign = write_campaign(tmp_path_factory.mktemp("law"), "sweep", _runs(), presets=list(LAYERS), epochs=2)
    build_report(campaign)
    results = json.loads((campaign / "report/results.json").read_text())
    return results, (campaign / "report/index.html").read_text(), campaign


def test_report_lr_law_recovers_the_exponent_within_its_interval(report: tuple[dict, str, Path]) -> None:
    (law,) = report[0]["lr_law"]
    b = law["law"]["coefficients"]["b"]
    result = (
        law["mode"],
        law["cells"],
        law["law"]["form"],
        b["low"] <= EXPONENT <= b["high"],
        abs(b["estimate"] - EXPONENT) < 0.05,
    )
    assert result == ("synchronous", 3, "ln(lr*) = a + b*ln N", True, True), b


def test_report_lr_law_predicts_the_largest_and_the_next_size(report: tuple[dict, str, Path]) -> None:
    (law,) = report[0]["lr_law"]
    left, following = law["leave_largest_out"], law["next"]
    sizes = sorted(_size(layers) for layers in LAYERS.values())
    truth = 0.003 * (sizes[-1] / _size(LAYERS["two"])) ** EXPONENT
    result = (
        left["cell"]["parameters"],
        abs(math.log(left["prediction"]["estimate"] / truth)) < 0.05,
        0 <= left["regret"]["estimate"]["nats"] < 0.01,
        (following["parameters"], following["tokens"]) == (round(sizes[-1] ** 2 / sizes[-2]), left["cell"]["tokens"]),
        following["prediction"]["low"] < following["prediction"]["estimate"] < following["prediction"]["high"],
        min(following["proposed_grid"]) < following["prediction"]["low"],
        max(following["proposed_grid"]) > following["prediction"]["high"],
    )
    assert result == (sizes[-1], True, True, True, True, True, True)


def test_report_lr_law_section_says_the_law_and_the_next_grid(report: tuple[dict, str, Path]) -> None:
    (law,) = report[0]["lr_law"]
    page = report[1]
    grid = ", ".join(f"{lr:g}" for lr in law["next"]["proposed_grid"])
    result = ('<section id="lr-law">' in page, "<code>ln(lr*) = a + b*ln N</code>" in page, grid in page)
    assert result == (True, True, True)


def test_report_lr_law_figure_plots_each_cell_with_its_interval_the_law_and_the_next(
    report: tuple[dict, str, Path],
) -> None:
    (law,) = report[0]["lr_law"]
    plot = law_plot(law)
    (series,) = plot["series"]
    cells, following = series["cells"], plot["next"]
    xs, lrs = series["line"]["x"] + series["beyond"]["x"], series["line"]["lr"] + series["beyond"]["lr"]
    a, b = (law["law"]["coefficients"][name]["estimate"] for name in ("a", "b"))
    sizes = sorted(_size(layers) for layers in LAYERS.values())
    result = (
        plot["axis"],
        series["label"],
        cells["x"],
        all(low < lr < high for low, lr, high in zip(cells["low"], cells["lr"], cells["high"], strict=True)),
        (xs[0], series["line"]["x"][-1], xs[-1]) == (sizes[0], sizes[-1], law["next"]["parameters"]),
        max(abs(math.log(lr) - a - b * math.log(n)) for n, lr in zip(xs, lrs, strict=True)) < 1e-9,
        (following["x"], following["lr"]) == (law["next"]["parameters"], law["next"]["prediction"]["estimate"]),
    )
    tokens = law["law"]["cells"][0]["tokens"]
    assert result == ("parameters", f"D = {tokens:,} tokens", sizes, True, True, True, True)


def _record(cells: list[tuple[int, int]], coefficients: dict[str, float]) -> dict:
    """A law entry as results.json holds it, for cells (N, D) with a made-up optimum and interval."""
    return {
        "mode": "m",
        "beta2": 0.95,
        "law": {
            "form": "ln(lr*) = ...",
            "coefficients": {name: {"estimate": value} for name, value in coefficients.items()},
            "cells": [
                {"parameters": n, "tokens": d, "lr_optimum": 0.01, "low": 0.009, "high": 0.011} for n, d in cells
            ],
        },
        "next": {
            "parameters": 4_000_000,
            "tokens": 80_000_000,
            "prediction": {"estimate": 0.005, "low": 0.004, "high": 0.006},
        },
    }


def test_report_lr_law_figure_groups_cells_by_tokens_or_tokens_per_parameter() -> None:
    sizes = (100_000, 300_000, 1_000_000)
    law = {"a": 1.0, "b": -0.7, "c": 0.3}
    by_ratio = law_plot(_record([(n, k * n) for n in sizes for k in (20, 80)], law))
    by_tokens = law_plot(_record([(n, d) for n in sizes for d in (10**7, 10**8)], law))
    in_n = law_plot(_record([(n, 20 * n + 1) for n in sizes], {"a": 1.0, "b": -0.7}))
    result = [
        [(series["label"], len(series["cells"]["x"])) for series in plot["series"]]
        for plot in (by_ratio, by_tokens, in_n)
    ]
    assert result == [
        [("D = 20 tokens per parameter", 3), ("D = 80 tokens per parameter", 3)],
        [("D = 10,000,000 tokens", 3), ("D = 100,000,000 tokens", 3)],
        [("D = 20 tokens per parameter", 3)],
    ]


def test_report_lr_law_figure_draws_each_cell_and_the_next_with_error_bars() -> None:
    sizes = (100_000, 300_000, 1_000_000)
    plot = law_plot(_record([(n, k * n) for n in sizes for k in (20, 80)], {"a": 1.0, "b": -0.7, "c": 0.3}))
    (ax,) = lr_law_figure(plot).axes
    drawn = [  # per error-bar series (the next cell last): its markers and its vertical bars
        (len(container.lines[0].get_xdata()), len(container.lines[2][0].get_segments())) for container in ax.containers
    ]
    assert drawn == [(3, 3), (3, 3), (1, 1)]


def test_report_lr_law_figure_is_on_the_page_and_rebuilds_byte_identical(
    report: tuple[dict, str, Path], tmp_path: Path
) -> None:
    (law,) = report[0]["lr_law"]
    page, campaign = report[1], report[2]
    name = figure_name(law)
    build_report(campaign, tmp_path)
    files = [f"{name}.{fmt}" for fmt in ("png", "pdf")]
    result = (
        name,
        [(campaign / "report" / file).read_bytes()[:4] for file in files],
        f'<img src="{name}.png"' in page,
        f'<a href="{name}.pdf">PDF</a>' in page,
        [(campaign / "report" / file).read_bytes() == (tmp_path / file).read_bytes() for file in files],
        (tmp_path / "index.html").read_text() == page,
    )
    assert result == ("lr-law-synchronous-beta20.95", [b"\x89PNG", b"%PDF"], True, True, [True, True], True)
