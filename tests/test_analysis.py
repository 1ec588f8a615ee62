"""Selection must reproduce the published 20M recipe sweep exactly, and decide edge cases sanely."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from ebd2n.campaign.analysis import group_runs, load_runs, lr_response, select, winner_notes, write_selection
from ebd2n.campaign.optimum import lr_optima
from ebd2n.errors import UserError

REFERENCE = Path(__file__).resolve().parent / "reference/recipe_sweep_20m/results.json"
TOLERANCE = 1e-12
NOT_ESTABLISHED = "the ranking alone does not establish a reliable improvement"


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="module")
def reference_runs(reference: dict[str, Any]) -> pl.DataFrame:
    return load_runs(REFERENCE)


@pytest.fixture(scope="module")
def reference_groups(reference_runs: pl.DataFrame) -> pl.DataFrame:
    return group_runs(reference_runs)


def _runs(rows: list[tuple]) -> pl.DataFrame:
    """Tiny runs table from (mode, lr, beta2, seed, loss[, status]) tuples."""
    records = [
        {
            "run": f"{mode}-lr{lr}-beta2{beta2}-seed{seed}",
            "mode": mode,
            "lr": lr,
            "beta2": beta2,
            "seed": seed,
            "status": rest[0] if rest else "complete",
            "loss": loss,
        }
        for mode, lr, beta2, seed, loss, *rest in rows
    ]
    return pl.DataFrame(records)


def _without(runs: pl.DataFrame, mode: str, lr: float, beta2: float, seed: int) -> pl.DataFrame:
    gone = (pl.col("mode") == mode) & (pl.col("lr") == lr) & (pl.col("beta2") == beta2) & (pl.col("seed") == seed)
    return runs.filter(~gone)


def _point(groups: pl.DataFrame, mode: str, lr: float, beta2: float) -> dict[str, Any]:
    match = (pl.col("mode") == mode) & (pl.col("lr") == lr) & (pl.col("beta2") == beta2)
    return groups.filter(match).row(0, named=True)


def test_load_runs_reference_has_all_runs(reference_runs: pl.DataFrame) -> None:
    result = reference_runs.height
    expected = 324
    assert result == expected


def test_group_runs_reference_columns(reference: dict[str, Any], reference_groups: pl.DataFrame) -> None:
    result = reference_groups.columns
    expected = [*reference["groups"][0], "outcome"]  # diverged_step only where a point diverged: none here
    assert result == expected


def test_group_runs_reference_exact_columns(reference: dict[str, Any], reference_groups: pl.DataFrame) -> None:
    exact = ["mode", "lr", "beta2", "seeds_completed", "eligible", "rank"]
    result = reference_groups.select(exact)
    expected = pl.DataFrame(reference["groups"]).select(exact)
    assert result.equals(expected)


@pytest.mark.parametrize("column", ["mean_loss", "std_loss"])
def test_group_runs_reference_statistics(
    reference: dict[str, Any], reference_groups: pl.DataFrame, column: str
) -> None:
    expected = pl.DataFrame(reference["groups"])[column]
    result = (reference_groups[column] - expected).abs().max()
    assert result <= TOLERANCE


def test_select_reference(reference: dict[str, Any], reference_groups: pl.DataFrame) -> None:
    result = select(reference_groups)
    expected = {
        mode: {key: pytest.approx(value, abs=TOLERANCE) for key, value in entry.items()}
        for mode, entry in reference["selected"].items()
    }
    assert result == expected


def test_group_runs_missing_seed_makes_point_ineligible(reference_runs: pl.DataFrame) -> None:
    runs = _without(reference_runs, "synchronous", 0.0028, 0.999, 43)
    result = _point(group_runs(runs), "synchronous", 0.0028, 0.999)
    expected = {"seeds_completed": 2, "eligible": False, "rank": 36}
    assert {key: result[key] for key in expected} == expected


def test_select_missing_seed_moves_to_next_best(reference_runs: pl.DataFrame) -> None:
    runs = _without(reference_runs, "synchronous", 0.0028, 0.999, 43)
    result = select(group_runs(runs))["synchronous"]
    expected = {"lr": 0.0022, "beta2": 0.999, "rank": 1}
    assert {key: result[key] for key in expected} == expected


def test_group_runs_given_seeds_require_every_one() -> None:
    runs = _runs([("sync", 0.001, 0.99, 1, 3.0), ("sync", 0.001, 0.99, 2, 3.1)])
    result = group_runs(runs, seeds=[1, 2, 3])["eligible"].to_list()
    expected = [False]
    assert result == expected


@pytest.mark.parametrize(
    ("loss", "status"), [(3.5, "failed"), (float("nan"), "complete"), (float("inf"), "complete"), (None, "running")]
)
def test_group_runs_ignores_runs_that_do_not_count(loss: float | None, status: str) -> None:
    runs = _runs([("sync", 0.001, 0.99, 1, 3.0), ("sync", 0.001, 0.99, 2, 3.2), ("sync", 0.001, 0.99, 3, loss, status)])
    result = group_runs(runs).select("seeds_completed", "eligible", "mean_loss").row(0)
    expected = (2, False, pytest.approx(3.1))
    assert result == expected


def test_group_runs_single_seed_has_null_sd() -> None:
    runs = _runs([("sync", 0.001, 0.99, 1, 3.0)])
    result = group_runs(runs)["std_loss"].to_list()
    expected = [None]
    assert result == expected


def test_group_runs_duplicate_seed_raises() -> None:
    runs = _runs([("sync", 0.001, 0.99, 1, 3.0), ("sync", 0.001, 0.99, 1, 3.1)])
    with pytest.raises(UserError, match="share a grid point and seed"):
        group_runs(runs)


def test_group_runs_ranks_ineligible_after_eligible() -> None:
    runs = _runs([("sync", 0.001, 0.99, 1, 3.0), ("sync", 0.002, 0.99, 1, 3.5), ("sync", 0.002, 0.99, 2, 3.5)])
    result = group_runs(runs)["rank"].to_list()
    expected = [2, 1]
    assert result == expected


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([("sync", 0.002, 0.99, 1, 3.0), ("sync", 0.001, 0.99, 1, 3.0)], {"lr": 0.001, "beta2": 0.99}),
        ([("sync", 0.001, 0.999, 1, 3.0), ("sync", 0.001, 0.95, 1, 3.0)], {"lr": 0.001, "beta2": 0.95}),
    ],
    ids=["lower-lr", "lower-beta2"],
)
def test_select_exact_tie(rows: list[tuple], expected: dict[str, float]) -> None:
    winner = select(group_runs(_runs(rows)))["sync"]
    result = {key: winner[key] for key in expected}
    assert result == expected


def test_select_mode_without_eligible_point_is_absent() -> None:
    runs = _runs([("sync", 0.001, 0.99, 1, 3.0), ("packed", 0.001, 0.99, 2, 3.0)])
    result = list(select(group_runs(runs)))
    expected = []
    assert result == expected


def test_lr_response_reference_cell(reference_groups: pl.DataFrame) -> None:
    table = lr_response(reference_groups, 0.999)
    row = table.filter(pl.col("lr") == 0.0028).row(0, named=True)
    result = (
        round(row["synchronous mean_loss"], 4),
        round(row["synchronous std_loss"], 4),
        row["synchronous seeds_completed"],
    )
    expected = (3.5644, 0.0036, 3)
    assert result == expected


def test_lr_response_reference_untested_is_empty(reference_groups: pl.DataFrame) -> None:
    table = lr_response(reference_groups, 0.999)
    row = table.filter(pl.col("lr") == 0.0008).row(0, named=True)
    result = [row[f"packed-4 {field}"] for field in ("mean_loss", "std_loss", "seeds_completed")]
    expected = [None, None, None]
    assert result == expected


def test_lr_response_csv_holds_numbers(reference_groups: pl.DataFrame) -> None:
    """Written and read back, every column is numeric: no "mean ± sd" text, no dash."""
    table = pl.read_csv(lr_response(reference_groups, 0.999).write_csv().encode())
    result = {name: dtype.is_numeric() for name, dtype in table.schema.items()}
    expected = {name: True for name in table.columns}
    assert result == expected


def test_lr_response_reference_rows_are_lr_union(reference_groups: pl.DataFrame) -> None:
    result = lr_response(reference_groups, 0.999).height
    expected = 18
    assert result == expected


def test_lr_response_unknown_beta2_raises(reference_groups: pl.DataFrame) -> None:
    with pytest.raises(UserError, match=r"beta2 0\.9 is not in the grid"):
        lr_response(reference_groups, 0.9)


@pytest.mark.parametrize(("mode", "expected"), [("synchronous", None), ("packed-4", None), ("packed-8", "upper")])
def test_winner_notes_reference_edge(
    reference_groups: pl.DataFrame, reference_runs: pl.DataFrame, mode: str, expected: str | None
) -> None:
    result = winner_notes(reference_groups, reference_runs)[mode]["edge"]
    assert result == expected


@pytest.mark.parametrize(("mode", "expected"), [("synchronous", 0.000135), ("packed-8", 0.001538)])
def test_winner_notes_reference_margin_matches_published_text(
    reference_groups: pl.DataFrame, reference_runs: pl.DataFrame, mode: str, expected: float
) -> None:
    result = winner_notes(reference_groups, reference_runs)[mode]["margin"]
    assert result == pytest.approx(expected, abs=5e-7)


def test_winner_notes_reference_synchronous_verdict(
    reference_groups: pl.DataFrame, reference_runs: pl.DataFrame
) -> None:
    result = winner_notes(reference_groups, reference_runs)["synchronous"]["verdict"]
    assert NOT_ESTABLISHED in result


def test_winner_notes_reference_packed8_next_lrs_above_edge(
    reference_groups: pl.DataFrame, reference_runs: pl.DataFrame
) -> None:
    result = winner_notes(reference_groups, reference_runs)["packed-8"]["next_lrs"]
    expected = [0.005633, 0.006103]
    assert result == expected


@pytest.mark.parametrize(
    ("lrs", "expected"),
    [([0.004, 0.005, 0.006], [0.0032, 0.00256]), ([0.001, 0.002, 0.003], [0.0005, 0.00025])],
    ids=["ratio", "halving"],
)
def test_winner_notes_lower_edge_next_lrs(lrs: list[float], expected: list[float]) -> None:
    rows = [("sync", lr, 0.99, seed, 3.0 + i + 0.01 * seed) for i, lr in enumerate(lrs) for seed in (1, 2)]
    runs = _runs(rows)
    result = winner_notes(group_runs(runs), runs)["sync"]["next_lrs"]
    assert result == expected


def test_winner_notes_clear_margin_is_called_real() -> None:
    rows = [
        ("sync", lr, 0.99, seed, base + 0.001 * seed) for lr, base in ((0.001, 3.0), (0.002, 3.5)) for seed in (1, 2, 3)
    ]
    runs = _runs(rows)
    result = winner_notes(group_runs(runs), runs)["sync"]["verdict"]
    assert "unlikely to be seed noise" in result


def test_load_runs_csv_missing_loss_raises(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("run,mode,lr,beta2,seed,status\na,sync,0.001,0.99,1,complete\n")
    with pytest.raises(UserError, match="runs.csv: missing column 'loss'"):
        load_runs(path)


def test_load_runs_unreadable_file_raises(tmp_path: Path) -> None:
    path = tmp_path / "absent.csv"
    with pytest.raises(UserError, match="absent.csv: cannot read runs CSV"):
        load_runs(path)


def test_load_runs_bad_number_names_column(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("run,mode,lr,beta2,seed,status,loss\na,sync,fast,0.99,1,complete,3.0\n")
    with pytest.raises(UserError, match="column 'lr' is not Float64"):
        load_runs(path)


def test_load_runs_json_list_matches_csv(tmp_path: Path) -> None:
    runs = _runs([("sync", 0.001, 0.99, 1, 3.0), ("sync", 0.001, 0.99, 2, None, "failed")])
    runs.write_csv(tmp_path / "runs.csv")
    (tmp_path / "runs.json").write_text(json.dumps(runs.to_dicts()))
    result = load_runs(tmp_path / "runs.json")
    expected = load_runs(tmp_path / "runs.csv")
    assert result.equals(expected)


def test_write_selection_round_trips_groups(tmp_path: Path) -> None:
    runs = _runs([("sync", 0.001, 0.99, 1, 3.0), ("sync", 0.001, 0.99, 2, 3.1)])
    groups = group_runs(runs)
    write_selection(groups, select(groups), tmp_path, lr_optima(groups, runs))
    result = pl.read_csv(tmp_path / "groups.csv")
    assert result.equals(groups)


def test_write_selection_json(tmp_path: Path) -> None:
    runs = _runs([("sync", 0.001, 0.99, 1, 3.0), ("sync", 0.001, 0.99, 2, 3.0)])
    groups = group_runs(runs)
    write_selection(groups, select(groups), tmp_path, lr_optima(groups, runs))
    result = json.loads((tmp_path / "selection.json").read_text())
    del result["sync"]["lr_optimum"]  # its fields: tests/test_optimum.py
    expected = {
        "sync": {
            "lr": 0.001,
            "beta2": 0.99,
            "mean_loss": 3.0,
            "std_loss": 0.0,
            "seeds_completed": 2,
            "edge": None,
            "diverged_above": None,
        }
    }
    assert result == expected


def test_write_selection_leaves_no_temporary_files(tmp_path: Path) -> None:
    runs = _runs([("sync", 0.001, 0.99, 1, 3.0)])
    groups = group_runs(runs)
    write_selection(groups, select(groups), tmp_path, lr_optima(groups, runs))
    result = sorted(path.name for path in tmp_path.iterdir())
    expected = ["groups.csv", "selection.json"]
    assert result == expected
