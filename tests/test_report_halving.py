"""The report of a successive-halving campaign: each bracket's rungs as the decision files say,
the training hours its runs' metrics.jsonl record against the full grid's, only finished runs
selected, the audit's rebuild byte for byte, and the section in a browser; a grid campaign's
report has none of it."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pytest
from offline_browser import MARKS, Loaded, open_offline, overflowing, toolbar_overlaps
from workflow_support import TINY, copy_repo, snakemake, write_campaign

from ebd2n.campaign.analysis import group_runs, load_runs, select
from ebd2n.campaign.optimum import lr_optima
from ebd2n.campaign.rung_decision import read_decision
from ebd2n.jsonio import read_jsonl
from ebd2n.quantities import loss_decimals
from ebd2n.report import build_report

LRS = [0.001, 0.002, 0.004, 0.008]
SEEDS = [42, 43]
EPOCHS = 3
HALVING = {
    **TINY,
    "campaign": "halving",
    "overrides": {**TINY["overrides"], "training.max_tokens": 98304},  # 3 epochs of 32,768 tokens, one a slice
    "grid": {"modes": ["synchronous"], "learning_rates": {"synchronous": LRS}, "beta2": [0.99]},
    "seeds": SEEDS,
    "search": {"method": "successive-halving", "keep": 0.5},  # rungs at epochs 1 and 2: 4 points, then 2, then 1
}


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The halving campaign trained, reported and audited by the real workflow (tests must not modify it)."""
    repo = copy_repo(tmp_path_factory.mktemp("halving"))
    snakemake(repo, "--configfile", write_campaign(repo, copy.deepcopy(HALVING), "halving.yaml"), "--cores", "2")
    return repo / "results" / "halving"


def _results(campaign: Path) -> dict:
    return json.loads((campaign / "report" / "results.json").read_text())


def _epochs(run_dir: Path) -> list[dict]:
    return [record for record in read_jsonl(run_dir / "metrics.jsonl") if record.get("type") == "epoch"]


@pytest.mark.slow
def test_report_halving_writes_its_table_and_figures(campaign: Path) -> None:
    report = campaign / "report"
    result = (
        [(report / name).read_bytes()[:5] for name in ("halving.png", "halving.pdf")],
        (report / "brackets.csv").is_file(),
    )
    assert result == ([b"\x89PNG\r", b"%PDF-"], True)


@pytest.mark.slow
def test_report_halving_table_equals_the_decision_files(campaign: Path) -> None:
    decisions = [read_decision(path) for path in sorted((campaign / "search").rglob("rung-*.json"))]
    stopped = {
        entry["point"]: decision["epoch"]
        for decision in decisions
        for entry in decision["ranking"]
        if entry["point"] not in decision["continuing"]
    }
    expected = sorted(
        (
            decision["bracket"],
            entry["point"],
            decision["epoch"],
            rank,
            entry["mean_loss"],
            entry["point"] in decision["continuing"],
            f"stopped at epoch {stopped[entry['point']]}" if entry["point"] in stopped else "finished",
        )
        for decision in decisions
        for rank, entry in enumerate(decision["ranking"], start=1)
    )
    table = pl.read_csv(campaign / "report" / "brackets.csv")
    result = sorted(table.select("bracket", "point", "rung", "rank", "mean_loss", "continued", "outcome").iter_rows())
    assert (len(decisions), result) == (2, expected)


@pytest.mark.slow
def test_report_halving_shows_the_brackets_table_on_the_page(campaign: Path) -> None:
    page = (campaign / "report" / "index.html").read_text()
    section = page[
        page.index('<section id="halving">') : page.index("</section>", page.index('<section id="halving">'))
    ]
    rows = [row for row in pl.read_csv(campaign / "report" / "brackets.csv").iter_rows(named=True)]
    digits = loss_decimals(
        pl.read_csv(campaign / "report" / "groups.csv")["std_loss"].drop_nulls().drop_nans().median()
    )
    result = [
        f'{row["mean_loss"]:.{digits}f}<br><span class="muted">'
        f"rank {row['rank']}{'' if row['continued'] else ', stopped'}</span>" in section
        for row in rows
    ]
    assert (
        result,
        section.count("stopped at epoch 1"),
        section.count("stopped at epoch 2"),
        section.count(">finished<"),
    ) == ([True] * 6, 2, 1, 1)


@pytest.mark.slow
def test_report_halving_hours_are_the_runs_recorded_epochs(campaign: Path) -> None:
    runs = {run_dir.name: _epochs(run_dir) for run_dir in sorted((campaign / "runs").iterdir())}
    used = sum(record["wall_s"] for records in runs.values() for record in records)
    trained = {
        epoch: [r["wall_s"] for records in runs.values() for r in records if r["epoch"] == epoch]
        for epoch in range(1, EPOCHS + 1)
    }
    missing = [epoch for records in runs.values() for epoch in range(len(records) + 1, EPOCHS + 1)]
    full = used + sum(sum(trained[epoch]) / len(trained[epoch]) for epoch in missing)
    hours = _results(campaign)["search"]["hours"]
    result = (hours["used_hours"], hours["full_grid_hours"], hours["share"], hours["epochs_not_trained"])
    # stopped at epoch 1: 2 points x 2 seeds miss 2 epochs; stopped at epoch 2: 2 seeds miss 1
    assert result == (pytest.approx(used / 3600), pytest.approx(full / 3600), pytest.approx(used / full), 10)


@pytest.mark.slow
def test_report_halving_states_the_share_of_the_full_grid(campaign: Path) -> None:
    hours = _results(campaign)["search"]["hours"]
    page = (campaign / "report" / "index.html").read_text()
    sentence = f"Used {100 * hours['share']:.0f} % of the full grid&#39;s training hours ("
    assert page.count(sentence) == 2  # the lead and the section


@pytest.mark.slow
def test_report_halving_selects_only_runs_that_finished(campaign: Path) -> None:
    results = _results(campaign)
    groups = pl.read_csv(campaign / "report" / "groups.csv")
    finished = groups.filter(pl.col("seeds_completed") > 0)
    result = (
        results["status"],
        results["expected_runs"],
        results["stopped_runs"],
        len(results["search"]["stopped_runs"]),
        finished.select("lr", "seeds_completed", "eligible").rows(),
        (results["selected"]["synchronous"]["lr"],),
        results["lr_optima"]["synchronous"]["lr_optimum"]["estimate"],
    )
    winner = [p["lr"] for p in results["search"]["brackets"][0]["points"] if p["outcome"] == "finished"]
    assert result == ("complete", 2, 6, 6, [(winner[0], 2, True)], tuple(winner), None)


@pytest.mark.slow
def test_report_halving_lr_optimum_cannot_fit_one_finished_point(campaign: Path) -> None:
    runs = load_runs(campaign / "runs.csv")
    groups = group_runs(runs, SEEDS)
    fit = lr_optima(groups, runs, SEEDS)["synchronous"]["lr_optimum"]
    assert (list(select(groups)), fit["estimate"], fit["reason"]) == (
        ["synchronous"],
        None,
        "only 1 learning rate with every seed; a quadratic fit needs 3",
    )


@pytest.mark.slow
def test_report_halving_runs_table_marks_stopped_runs(campaign: Path) -> None:
    page = (campaign / "report" / "index.html").read_text()
    runs = page[page.index('<section id="runs">') :]
    assert (
        runs.count('stopped<br><span class="muted">at epoch 1</span>'),
        runs.count("at epoch 2</span>"),
        runs.count("<td>complete</td>"),
        runs.count("incomplete"),
    ) == (4, 2, 2, 0)


@pytest.mark.slow
def test_report_halving_passes_the_audit_and_rebuilds_byte_for_byte(campaign: Path, tmp_path: Path) -> None:
    audit = json.loads((campaign / "audit.json").read_text())
    report_check = next(check for check in audit["checks"] if check["name"].startswith("the published report"))
    build_report(campaign, tmp_path / "again")
    published = {
        p.relative_to(campaign / "report").as_posix(): p.read_bytes()
        for p in (campaign / "report").rglob("*")
        if p.is_file() and "history" not in p.parts
    }
    rebuilt = {
        p.relative_to(tmp_path / "again").as_posix(): p.read_bytes()
        for p in (tmp_path / "again").rglob("*")
        if p.is_file()
    }
    assert (
        audit["passed"],
        report_check["passed"],
        report_check["examined"],
        {"brackets.csv", "halving.png"} <= set(rebuilt),
        rebuilt == published,
    ) == (True, True, len(rebuilt), True, True)


def test_report_of_a_grid_campaign_has_no_halving(campaign_tree: Callable[..., Path]) -> None:
    campaign = campaign_tree()
    build_report(campaign)
    report = campaign / "report"
    page = (report / "index.html").read_text()
    result = (
        "search" in _results(campaign),
        "stopped_runs" in _results(campaign),
        "halving" in page,
        sorted(p.name for p in report.iterdir() if "halving" in p.name or p.name == "brackets.csv"),
    )
    assert result == (False, False, False, [])


@pytest.fixture(scope="module")
def loaded(browser, campaign: Path) -> Iterator[Loaded]:
    context, loaded = open_offline(browser, campaign / "report" / "index.html")
    yield loaded
    context.close()


@pytest.mark.slow
@MARKS[0]
@MARKS[1]
def test_browser_halving_section_renders_without_overflow(loaded: Loaded) -> None:
    """At 1,400 px the halving figure draws its two rungs with dots and crosses, nothing overflows,
    the toolbar covers no title or legend, and the console stays clean."""
    page = loaded.page
    legend = page.evaluate("[...document.querySelectorAll('#plot-halving-0 .legendtext')].map(t => t.textContent)")
    points = page.evaluate("document.querySelectorAll('#plot-halving-0 .scatterlayer .point').length")
    assert (legend, points, overflowing(page), toolbar_overlaps(page), loaded.errors) == (
        ["epoch 1", "epoch 2"],
        6,
        [],
        [],
        [],
    )
