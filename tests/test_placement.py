"""Placement of units over pipeline stages: balance on the presets, exactness, ties, memory, records."""

from __future__ import annotations

import itertools
import random

import pytest

from ebd2n.config import load_recipe
from ebd2n.errors import UserError
from ebd2n.model.units import Unit, model_units
from ebd2n.parallel import plan_placement


def _units(costs: list[int], parameters: list[int] | None = None) -> list[Unit]:
    """Synthetic block units with the given FLOPs (and parameters, default 1 each)."""
    parameters = parameters or [1] * len(costs)
    return [Unit(f"u{i}", "mlp", i, p, c, ()) for i, (c, p) in enumerate(zip(costs, parameters, strict=True))]


def _brute_force(costs: list[int], stages: int) -> list[list[str]]:
    """Every contiguous partition: the smallest maximum, then the lexicographically earliest split points."""
    n = len(costs)
    best = None
    for splits in itertools.combinations(range(1, n), stages - 1):
        edges = [0, *splits, n]
        worst = max(sum(costs[i:j]) for i, j in itertools.pairwise(edges))
        if best is None or (worst, splits) < best[:2]:
            best = (worst, splits, edges)
    return [[f"u{k}" for k in range(i, j)] for i, j in itertools.pairwise(best[2])]


@pytest.mark.parametrize("preset", ["254m", "483m", "778m", "1.41b"])
@pytest.mark.parametrize("stages", [2, 4, 8])
def test_placement_presets_within_15_percent_of_mean(preset: str, stages: int) -> None:
    result = plan_placement(model_units(load_recipe(preset).model), stages).max_over_mean()
    assert result <= 1.15


def test_placement_identical_across_calls() -> None:
    units = model_units(load_recipe("778m").model)
    result = [plan_placement(units, 8) for _ in range(3)]
    assert result[0] == result[1] == result[2]


def test_placement_counts_head_flops_not_parameters() -> None:
    result = plan_placement(model_units(load_recipe("demo").model), 2).stages
    expected = [["embedding", "block0.attention", "block0.mlp", "block1.attention"], ["block1.mlp", "head"]]
    assert result == expected


@pytest.mark.parametrize("seed", range(6))
def test_placement_equals_brute_force(seed: int) -> None:
    generator = random.Random(seed)
    costs = [generator.choice([0, 1, 2, 3, 5, 8]) for _ in range(9)]
    stages = 2 + seed % 3
    result = plan_placement(_units(costs), stages).stages
    assert result == _brute_force(costs, stages)


def test_placement_ties_go_to_earliest_split() -> None:
    result = plan_placement(_units([1, 1, 1]), 2).stages
    assert result == [["u0"], ["u1", "u2"]]


def test_placement_memory_limit_moves_a_split() -> None:
    # Compute alone would cut after u2 (max 3); u0..u2 hold 300 parameters, more than 200 fit.
    units = _units([1, 1, 1, 1, 1, 1], [100, 100, 100, 1, 1, 1])
    result = plan_placement(units, 2, memory_per_device=200, bytes_per_parameter=1).stages
    assert result == [["u0", "u1"], ["u2", "u3", "u4", "u5"]]


def test_placement_tied_copy_counts_on_the_head_stage() -> None:
    cfg = load_recipe("demo").model
    result = plan_placement(model_units(cfg), 2).parameters[-1]
    expected = cfg.vocab_size * cfg.width + 2 * cfg.width + 3 * cfg.width * cfg.ffn_width  # tied copy, block1.mlp, norm
    assert result == expected


def test_placement_not_fitting_refused() -> None:
    with pytest.raises(UserError, match=r"parallel.pipeline_stages \(2\): the model does not fit in 0.0 GB per device"):
        plan_placement(model_units(load_recipe("demo").model), 2, memory_per_device=1000)


def test_placement_more_stages_than_units_refused() -> None:
    with pytest.raises(UserError, match=r"parallel.pipeline_stages \(7\) must be between 1 and the model's 6 units"):
        plan_placement(model_units(load_recipe("demo").model), 7)


def test_placement_describe_one_line_per_stage() -> None:
    placement = plan_placement(model_units(load_recipe("254m").model), 4)
    result = placement.describe(["cuda:0", "cuda:1", "cuda:2", "cuda:3"]).splitlines()
    assert [line.split(":")[0] for line in result] == [f"stage {i} [cuda" for i in range(4)]
