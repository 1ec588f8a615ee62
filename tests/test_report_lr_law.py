"""A scaling campaign's report fits the learning-rate law to its own runs (ebd2n.report.lr_law_report):
three model sizes whose seeds' losses follow a known law recover its exponent within the interval,
the largest size is predicted from the others with its regret, and the next size gets a grid."""

from __future__ import annotations

import json
import math

import pytest
from campaign_tree import RunSpec, write_campaign

from ebd2n.config import count_parameters, load_recipe
from ebd2n.report import build_report

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
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    campaign = write_campaign(tmp_path_factory.mktemp("law"), "sweep", _runs(), presets=list(LAYERS), epochs=2)
    build_report(campaign)
    results = json.loads((campaign / "report/results.json").read_text())
    return results, (campaign / "report/index.html").read_text()


def test_report_lr_law_recovers_the_exponent_within_its_interval(report: tuple[dict, str]) -> None:
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


def test_report_lr_law_predicts_the_largest_and_the_next_size(report: tuple[dict, str]) -> None:
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


def test_report_lr_law_section_says_the_law_and_the_next_grid(report: tuple[dict, str]) -> None:
    (law,) = report[0]["lr_law"]
    page = report[1]
    grid = ", ".join(f"{lr:g}" for lr in law["next"]["proposed_grid"])
    result = ('<section id="lr-law">' in page, "<code>ln(lr*) = a + b*ln N</code>" in page, grid in page)
    assert result == (True, True, True)
