"""Every consumer knows how each run ended: a diverged point is a result (never eligible, ranked last,
"diverged at step k" in every table, figure and sentence, the evidence that bounds the optimum from
above); a failed, missing or retired run is named as such, never shown as untested."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from campaign_tree import FAILED_LOG, RunSpec, synthetic_loss, write_campaign

from ebd2n.campaign.analysis import group_runs, select, winner_notes
from ebd2n.campaign.optimum import lr_optima, optimum_lines
from ebd2n.campaign.results import read_results
from ebd2n.report import build_report

LRS = (0.001, 0.003, 0.006)
DIVERGING = 1000.0
SEEDS = (42, 43)
STEPS = {42: 30, 43: 27}  # the lr-1000 seeds diverge here; the point's step is the first


def _runs(diverging: float = DIVERGING) -> list[RunSpec]:
    runs = [
        RunSpec("synchronous", lr, 0.95, seed, synthetic_loss("synchronous", lr, 0.95, seed))
        for lr in LRS
        for seed in SEEDS
    ]
    return runs + [RunSpec("synchronous", diverging, 0.95, seed, 0.0, diverged_at=STEPS[seed]) for seed in SEEDS]


@pytest.fixture(scope="module")
def diverged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished campaign whose top LR diverged on both seeds, its report built."""
    campaign = write_campaign(tmp_path_factory.mktemp("diverged"), "div", _runs(), audit=True)
    build_report(campaign)
    return campaign


def write_unfinished(root: Path) -> Path:
    """A campaign whose top LR diverged, with one failed run (its job log), one missing run and one
    retired run, its report built."""
    runs = _runs()
    runs[2] = RunSpec("synchronous", LRS[1], 0.95, 42, 0.0, failed=True)
    retired = RunSpec("synchronous", 0.0001, 0.95, 42, synthetic_loss("synchronous", 0.0001, 0.95, 42))
    campaign = write_campaign(root, "unf", [*runs, retired])
    info = json.loads((campaign / "campaign.json").read_text())
    info["grid"]["learning_rates"]["synchronous"].remove(0.0001)
    info["retired"] = [retired.run_id]
    (campaign / "campaign.json").write_text(json.dumps(info))
    shutil.rmtree(campaign / "runs" / runs[4].run_id)  # lr 0.006 seed 42: never resolved
    build_report(campaign)
    return campaign


@pytest.fixture(scope="module")
def unfinished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_unfinished(tmp_path_factory.mktemp("unfinished"))


def _report(campaign: Path, name: str) -> Path:
    return campaign / "report" / name


def _figure(page: str, name: str) -> dict:
    """The plotly figure the page embeds as `figure-<name>`."""
    return json.loads(re.search(rf'<script type="application/json" id="figure-{name}">(.*?)</script>', page, re.S)[1])


def _page_text(campaign: Path) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", _report(campaign, "index.html").read_text()).split())


def test_runs_csv_diverged_status_and_step(diverged: Path) -> None:
    runs = pl.read_csv(_report(diverged, "runs.csv")).filter(pl.col("lr") == DIVERGING)
    result = sorted(zip(runs["status"], runs["seed"], runs["diverged_step"], strict=True))
    assert result == [("diverged", 42, 30), ("diverged", 43, 27)]


def test_groups_diverged_point_is_not_eligible_and_ranks_last(diverged: Path) -> None:
    groups = pl.read_csv(_report(diverged, "groups.csv"))
    point = groups.filter(pl.col("lr") == DIVERGING).row(0, named=True)
    result = {key: point[key] for key in ("eligible", "outcome", "diverged_step", "rank", "mean_loss")}
    assert result == {
        "eligible": False,
        "outcome": "diverged",
        "diverged_step": 27,
        "rank": groups.height,
        "mean_loss": None,
    }


def test_group_runs_one_diverged_seed_ranks_after_every_converged_point(diverged: Path) -> None:
    runs = read_results(diverged).runs.with_columns(  # seed 43 of lr 0.003 diverged: the best point now ranks last
        status=pl.when((pl.col("lr") == 0.003) & (pl.col("seed") == 43)).then(pl.lit("diverged")).otherwise("status")
    )
    groups = group_runs(runs, list(SEEDS))
    result = groups.sort("rank").select("lr", "outcome").rows()
    assert result == [(0.001, "converged"), (0.006, "converged"), (0.003, "diverged"), (DIVERGING, "diverged")]


def test_lr_response_csv_gives_the_diverged_step(diverged: Path) -> None:
    table = pl.read_csv(_report(diverged, "lr-response.csv"))
    row = table.filter(pl.col("lr") == DIVERGING).row(0, named=True)
    result = (row["lr"], row["synchronous diverged_step"], row["synchronous mean_loss"])
    assert result == (DIVERGING, 27, None)


def test_selection_winner_is_the_best_converged_point_bounded_by_divergence(diverged: Path) -> None:
    results = json.loads(_report(diverged, "results.json").read_text())
    notes = results["notes"]["synchronous"]
    result = (results["selected"]["synchronous"]["lr"], notes["edge"], notes["diverged_above"], notes["next_lrs"])
    assert result == (0.003, None, None, [])  # 0.006 converged above the winner: an ordinary bracket


def test_winner_below_a_diverged_lr_is_bracketed_by_divergence(tmp_path: Path) -> None:
    runs = [spec for spec in _runs(diverging=0.009) if spec.lr != 0.006]
    results = read_results(write_campaign(tmp_path, "top", runs))
    groups = group_runs(results.runs, results.seeds)
    notes = winner_notes(groups, results.runs, results.seeds)["synchronous"]
    optima = lr_optima(groups, results.runs, results.seeds)
    result = (
        select(groups)["synchronous"]["lr"],
        notes["edge"],
        notes["diverged_above"],
        notes["next_lrs"],
        "bracketed by divergence" in notes["verdict"],
        "bracketed by divergence" in optimum_lines(optima)[0],
    )
    assert result == (0.003, None, {"lr": 0.009, "beta2": 0.95, "diverged_step": 27}, [], True, True)


def test_report_page_bracketed_by_divergence_never_inside(tmp_path: Path) -> None:
    campaign = write_campaign(tmp_path, "top", [spec for spec in _runs(diverging=0.009) if spec.lr != 0.006])
    build_report(campaign)
    text = _page_text(campaign)
    result = (
        "the grid is bracketed by divergence: LR 0.009 (beta2 0.95) diverged at step 27" in text,
        "inside the searched LR range" in text,
    )
    assert result == (True, False)


def test_report_page_says_diverged_at_step_wherever_a_dash_was(diverged: Path) -> None:
    page = _report(diverged, "index.html").read_text()
    tables = re.findall(r"<table[ >].*?</table>", page, flags=re.S)
    response = next(table for table in tables if '<table class="response" data-beta2="0.95">' in table)
    heatmap = next(table for table in tables if "mean ± SD loss (nats)" in table)
    optimum = next(table for table in tables if "final loss per LR" in table)
    result = ["diverged at step 27" in table for table in (response, heatmap, optimum)]
    assert result == [True, True, True]


def test_report_runs_table_says_diverged_at_step(diverged: Path) -> None:
    text = _page_text(diverged)
    result = (text.count("diverged at step 30"), text.count("diverged at step 27") >= 4)
    assert result == (2, True)  # the runs table and the outcomes list for seed 42; the point's step everywhere else


def test_report_heatmap_marks_diverged_cells_with_a_legend_entry(diverged: Path) -> None:
    page = _report(diverged, "index.html").read_text()
    figure = _figure(page, "heatmap-0")
    trace = figure["data"][1]
    result = (trace["name"], trace["showlegend"], trace["y"], trace["customdata"], figure["data"][0]["z"][-1])
    assert result == ("diverged", True, ["1000"], ["diverged at step 27"], [None])


def test_report_optimum_figure_marks_the_diverged_lr(diverged: Path) -> None:
    page = _report(diverged, "index.html").read_text()
    figure = _figure(page, "optimum-0")
    """The diverged LR lies far beyond the converged ones: the x axis stays on them, the LR an ✕ at
    the right edge with its LR written."""
    (mark,) = [trace for trace in figure["data"] if trace["name"] == "diverged"]
    edge = 10 ** figure["layout"]["xaxis"]["range"][1]
    result = (mark["text"], mark["customdata"], math.isclose(mark["x"][0], edge), edge < DIVERGING)
    assert result == ([f"LR {DIVERGING:g}"], [f"LR {DIVERGING:g}: diverged at step 27"], True, True)


def test_report_cost_counts_what_diverged_runs_spent(diverged: Path) -> None:
    cost = json.loads(_report(diverged, "results.json").read_text())["cost"]
    result = [point["seconds"] > 0 for point in cost["point"] if point["lr"] == DIVERGING]
    assert result == [True]


def test_report_summary_counts_a_diverged_campaign_complete(diverged: Path) -> None:
    results = json.loads(_report(diverged, "results.json").read_text())
    result = (results["status"], results["completed_runs"], results["outcomes"]["diverged"])
    expected = [{"run": f"synchronous-lr1000.0-beta20.95-seed{seed}", "step": STEPS[seed]} for seed in SEEDS]
    assert result == ("complete", 6, expected)


def test_report_unfinished_names_failed_missing_and_retired_runs(unfinished: Path) -> None:
    outcomes = json.loads(_report(unfinished, "results.json").read_text())["outcomes"]
    failed = outcomes["failed"][0]
    result = (failed["run"], failed["log"][-1], outcomes["missing"], outcomes["retired"], outcomes["incomplete"])
    assert result == (
        "synchronous-lr0.003-beta20.95-seed42",
        FAILED_LOG,
        [{"run": "synchronous-lr0.006-beta20.95-seed42"}],
        [{"run": "synchronous-lr0.0001-beta20.95-seed42"}],
        [],
    )


def test_report_unfinished_page_never_claims_untested_or_inside(unfinished: Path) -> None:
    text = _page_text(unfinished)
    result = (
        FAILED_LOG in text,
        "not finished (LR 0.003, 0.006)" in text,
        "inside the searched LR range" in text,
        "the campaign is incomplete" in text,
    )
    assert result == (True, True, False, True)


def test_report_unfinished_retired_run_leaves_the_grid(unfinished: Path) -> None:
    groups = pl.read_csv(_report(unfinished, "groups.csv"))
    runs = pl.read_csv(_report(unfinished, "runs.csv"))
    result = (0.0001 in groups["lr"].to_list(), runs.filter(pl.col("lr") == 0.0001)["status"].to_list())
    assert result == (False, ["retired"])


def test_report_unfinished_cost_counts_the_failed_run(unfinished: Path) -> None:
    cost = json.loads(_report(unfinished, "results.json").read_text())["cost"]
    result = [run["seconds"] > 0 for run in cost["runs"] if run["run"] == "synchronous-lr0.003-beta20.95-seed42"]
    assert result == [True]


def test_report_unfinished_links_only_to_files_that_exist(unfinished: Path) -> None:
    page = _report(unfinished, "index.html")
    links = [href for href in re.findall(r'href="([^"#]+)"', page.read_text()) if "://" not in href]
    result = [href for href in links if not (page.parent / href).exists()]
    assert result == []
