"""The campaign report: every artifact present and right, user text escaped, regeneration stable."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from campaign_tree import CACHE_IDENTITY, HOSTILE, REPORT_MODES, REPORT_SEEDS, RunSpec, grid_runs

from ebd2n.campaign.analysis import group_runs, load_runs, select
from ebd2n.campaign.results import RUN_COLUMNS
from ebd2n.config import load_recipe
from ebd2n.errors import UserError
from ebd2n.report import build_report
from ebd2n.report.plotly_embed import figure_json, plotly_asset_name

SRC = Path(__file__).resolve().parents[1] / "src"
GRID_FILES = {
    "runs.csv",
    "runs.parquet",
    "metrics",
    "groups.csv",
    "selection.json",
    "lr-response.csv",
    "results.json",
    "curves.csv",
    "heatmaps.png",
    "heatmaps.pdf",
    "curves.png",
    "curves.pdf",
    "index.html",
    "selected-synchronous.yaml",
    "selected-packed-4.yaml",
    "assets",
    "lr-optimum.png",
    "lr-optimum.pdf",
}
CURVE_COLUMNS = ["mode", "lr", "beta2", "tokens", "split", "seeds", "mean_loss", "std_loss"]
MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF-"}


def _report(campaign: Path) -> Path:
    return campaign / "report"


def _results(campaign: Path) -> dict:
    return json.loads((_report(campaign) / "results.json").read_text())


def _page(campaign: Path) -> str:
    return (_report(campaign) / "index.html").read_text()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    paths = [str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, "-m", "ebd2n", *args], capture_output=True, text=True, env=env, timeout=120)


def test_report_writes_every_artifact(report_campaign: Path) -> None:
    result = {path.name for path in _report(report_campaign).iterdir()}
    assert result == GRID_FILES


def test_report_runs_csv_has_one_row_per_run(report_campaign: Path) -> None:
    result = pl.read_csv(_report(report_campaign) / "runs.csv")
    assert (result.height, result.columns) == (24, list(RUN_COLUMNS))


def test_report_groups_match_analysis(report_campaign: Path) -> None:
    result = pl.read_csv(_report(report_campaign) / "groups.csv")
    expected = group_runs(load_runs(_report(report_campaign) / "runs.csv"))
    assert result.to_dicts() == expected.to_dicts()


def test_report_selection_matches_analysis(report_campaign: Path) -> None:
    result = json.loads((_report(report_campaign) / "selection.json").read_text())
    expected = select(group_runs(load_runs(_report(report_campaign) / "runs.csv")))
    assert {m: (e["lr"], e["beta2"]) for m, e in result.items()} == {
        m: (e["lr"], e["beta2"]) for m, e in expected.items()
    }


def test_report_page_shows_the_lr_response_at_every_beta2_with_each_winner_bold_in_its_own(
    report_campaign: Path,
) -> None:
    page = _page(report_campaign)
    tables = dict(re.findall(r'<table class="response" data-beta2="([^"]+)">(.*?)</table>', page, flags=re.S))
    modes = re.findall(r"<th>([^<]+)</th>", tables[next(iter(tables))].split("</thead>")[0])[1:]
    bold = {
        (modes[index], beta2)
        for beta2, table in tables.items()
        for row in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>")[1], flags=re.S)
        for index, cell in enumerate(re.findall(r"<td class=\"([^\"]*)\"", row))
        if "winner" in cell
    }
    selection = _results(report_campaign)["selected"]
    beta2s = {f"{beta2:g}" for beta2 in pl.read_csv(_report(report_campaign) / "groups.csv")["beta2"].unique()}
    assert (set(tables), bold) == (beta2s, {(mode, f"{point['beta2']:g}") for mode, point in selection.items()})


def test_report_page_shows_the_digits_the_seed_spread_supports_and_the_csv_keeps_them_all(
    report_campaign: Path,
) -> None:
    """Each winner's loss ± SD and the runs table at what the smaller of the grid's median SD and the
    winners' SDs supports (one choice for the whole page); runs.csv at full precision."""
    from ebd2n.quantities import loss_decimals

    page = _page(report_campaign)
    best = re.search(r'<table class="best">.*?<tbody>(.*?)</tbody>', page, flags=re.S)[1]
    shown = {
        row[0]: [len(number.split(".")[1]) for number in re.findall(r"\d+\.\d+", row[1])]
        for row in re.findall(
            r'<th scope="row">([^<]+)</th><td class="num">[^<]*</td><td class="num">[^<]*</td>'
            r'<td class="num">([^<]*)</td>',
            best,
        )
    }
    groups = pl.read_csv(_report(report_campaign) / "groups.csv")
    selection = _results(report_campaign)["selected"]
    digits = loss_decimals(
        min([groups["std_loss"].drop_nulls().median(), *(p["std_loss"] for p in selection.values())])
    )
    wanted = {mode: [digits] * 2 for mode in selection}
    runs_table = re.search(r'<table class="runs">.*?<tbody>(.*?)</tbody>', page, flags=re.S)[1]
    first_loss = pl.read_csv(_report(report_campaign) / "runs.csv").drop_nulls("loss").sort("run")["loss"][0]
    assert (shown, f"{first_loss:.{digits}f}" in runs_table, len(repr(first_loss).split(".")[1]) > digits) == (
        wanted,
        True,
        True,
    )


def test_report_lr_response_page_is_at_the_winners_beta2_and_its_file_holds_every_beta2(report_campaign: Path) -> None:
    table = pl.read_csv(_report(report_campaign) / "lr-response.csv")
    groups = pl.read_csv(_report(report_campaign) / "groups.csv")
    result = (
        table.columns,
        _results(report_campaign)["lr_response"]["beta2"],
        sorted(table["beta2"].unique().to_list()),
        table.height,
    )
    columns = [f"{mode} {field}" for mode in REPORT_MODES for field in ("mean_loss", "std_loss", "seeds_completed")]
    pairs = groups.select("beta2", "lr").unique().height
    assert result == (["beta2", "lr", *columns], 0.999, sorted(groups["beta2"].unique().to_list()), pairs)


@pytest.mark.parametrize("mode", REPORT_MODES)
def test_report_selected_yaml_is_trainable_with_relative_paths(report_campaign: Path, mode: str) -> None:
    recipe = load_recipe(_report(report_campaign) / f"selected-{mode}.yaml")
    winner = _results(report_campaign)["selected"][mode]
    result = (recipe.data.cache_dir, recipe.runtime.output_dir, recipe.mode, recipe.optimizer.lr, recipe.runtime.seed)
    expected = ("results/caches/synthetic", f"runs/sweep-selected-{mode}", mode, winner["lr"], REPORT_SEEDS[0])
    assert result == expected


def test_report_selected_yaml_keeps_relative_cache_dir(campaign_tree: Callable[..., Path]) -> None:
    campaign = campaign_tree(absolute_paths=False)
    build_report(campaign)
    result = load_recipe(_report(campaign) / "selected-synchronous.yaml").data.cache_dir
    assert result == "results/caches/synthetic"


@pytest.mark.parametrize(
    "name", ["heatmaps.png", "heatmaps.pdf", "curves.png", "curves.pdf", "lr-optimum.png", "lr-optimum.pdf"]
)
def test_report_figures_are_real_files(report_campaign: Path, name: str) -> None:
    data = (_report(report_campaign) / name).read_bytes()
    result = (data.startswith(MAGIC[Path(name).suffix]), len(data) > 5_000)
    assert result == (True, True)


def test_report_results_json_and_selection_carry_the_fitted_optimum(report_campaign: Path) -> None:
    """Two LRs per mode: no estimate, and the reason given, in both files."""
    selection = json.loads((_report(report_campaign) / "selection.json").read_text())
    optima = _results(report_campaign)["lr_optima"]
    result = {mode: (optima[mode]["lr_optimum"], optima[mode]["edge"]) for mode in optima}
    expected = {mode: (selection[mode]["lr_optimum"], selection[mode]["edge"]) for mode in selection}
    assert result == expected and all(fit["estimate"] is None and fit["reason"] for fit, _ in result.values())


def test_report_curves_csv_has_reference_columns_and_every_epoch(report_campaign: Path) -> None:
    table = pl.read_csv(_report(report_campaign) / "curves.csv")
    result = (table.columns, table.height, set(table["seeds"]), set(table["split"]))
    assert result == (CURVE_COLUMNS, len(REPORT_MODES) * 4, {len(REPORT_SEEDS)}, {"subset"})


def test_report_results_json_carries_provenance(report_campaign: Path) -> None:
    results = _results(report_campaign)
    result = {
        "grid_modes": results["grid"]["modes"],
        "seeds": results["seeds"],
        "revision": results["data"]["source"]["revision"],
        "tokenizer_revision": results["data"]["tokenizer"]["revision"],
        "cache": results["cache_identity"],
        "source": results["source_hash"]["runs"],
        "python": [env["python"] for env in results["environment"]],
        "jobs": len(results["job_ids"]),
        "measured": bool(re.fullmatch(r"\d{4}-\d\d-\d\d", results["measured_date"])),
        "audit": results["audit"]["status"],
        "runs": len(results["runs"]),
        "groups": len(results["groups"]),
    }
    expected = {
        "grid_modes": list(REPORT_MODES),
        "seeds": list(REPORT_SEEDS),
        "revision": "embedded-v1",
        "tokenizer_revision": "trained",
        "cache": ["c" * 64],
        "source": ["a" * 64],
        "python": ["3.12.13"],
        "jobs": 6,
        "measured": True,
        "audit": "passed",
        "runs": 24,
        "groups": 8,
    }
    assert result == expected


def test_report_page_escapes_user_text(report_campaign: Path) -> None:
    page = _page(report_campaign)
    result = (page.count(html.escape(HOSTILE)) >= 3, HOSTILE in page)
    assert result == (True, False)


def test_report_page_loads_the_shared_plotly_and_nothing_else(report_campaign: Path) -> None:
    page = _page(report_campaign)
    asset = _report(report_campaign) / "assets" / plotly_asset_name()
    result = (
        page.count("* plotly.js v"),
        re.findall(r'<script[^>]+src="([^"]*)"|<link[^>]+href="?(https?:)', page),
        asset.read_text().count("* plotly.js v"),
    )
    assert result == (0, [(f"assets/{plotly_asset_name()}", "")], 1)


def test_report_page_shows_every_section(report_campaign: Path) -> None:
    page = _page(report_campaign)
    sections = ["best", "settings", "data", "response", "figures", "cost", "files", "reproduce", "provenance", "runs"]
    result = [name for name in sections if f'<section id="{name}">' not in page]
    assert result == []


def test_report_figure_json_cannot_close_its_script() -> None:
    result = str(figure_json({"text": "</script><script>alert(1)</script>&"}))
    assert "<" not in result and "&" not in result


def test_report_regeneration_is_byte_identical(campaign_tree: Callable[..., Path]) -> None:
    campaign = campaign_tree(audit=False)
    build_report(campaign)
    first = _report_bytes(campaign)
    build_report(campaign)
    result = _report_bytes(campaign)
    assert result == first


def _report_bytes(campaign: Path) -> dict[str, bytes]:
    """Every file of the published report (earlier reports in history/ left out)."""
    report = _report(campaign)
    return {
        p.relative_to(report).as_posix(): p.read_bytes()
        for p in report.rglob("*")
        if p.is_file() and "history" not in p.parts
    }


@pytest.mark.parametrize(("audit", "expected"), [(None, "not audited"), (True, "passed"), (False, "failed")])
def test_report_states_the_audit(campaign_tree: Callable[..., Path], audit: bool | None, expected: str) -> None:
    campaign = campaign_tree(audit=audit)
    build_report(campaign)
    result = _results(campaign)["audit"]["status"]
    assert result == expected


def test_report_says_when_the_manifest_is_missing(campaign_tree: Callable[..., Path]) -> None:
    campaign = campaign_tree(manifest=False)
    build_report(campaign)
    result = "The cache manifest was not found" in _page(campaign)
    assert result


def test_report_without_campaign_json_derives_the_grid(campaign_tree: Callable[..., Path]) -> None:
    campaign = campaign_tree(campaign_json=False)
    build_report(campaign)
    result = _results(campaign)["grid"]
    expected = {
        "modes": list(REPORT_MODES),
        "learning_rates": {m: [0.001, 0.003] for m in REPORT_MODES},
        "beta2": [0.95, 0.999],
    }
    assert result == expected


def test_report_incomplete_point_is_not_eligible(campaign_tree: Callable[..., Path]) -> None:
    campaign = campaign_tree()
    (campaign / "runs" / "synchronous-lr0.003-beta20.999-seed44" / "results.json").unlink()
    build_report(campaign)
    groups = pl.read_csv(_report(campaign) / "groups.csv").filter(
        (pl.col("mode") == "synchronous") & (pl.col("lr") == 0.003)
    )
    result = (_results(campaign)["status"], groups["eligible"].to_list(), groups["seeds_completed"].to_list())
    assert result == ("incomplete", [True, False], [3, 2])


def test_report_scaling_campaign_shows_the_scaling_table(campaign_tree: Callable[..., Path]) -> None:
    runs = [
        RunSpec("synchronous", 0.003, 0.99, 42, 3.9, preset="tiny"),
        RunSpec("synchronous", 0.003, 0.99, 42, 3.7, preset="small", overrides=(("model.layers", 3),)),
    ]
    campaign = campaign_tree(runs, presets=["tiny", "small"])
    build_report(campaign)
    scaling = pl.read_csv(_report(campaign) / "scaling.csv")
    result = (
        scaling["size"].to_list(),
        scaling["epochs"].to_list(),
        '<section id="scaling">' in _page(campaign),
        "<script src" in _page(campaign),
        (_report(campaign) / "assets" / plotly_asset_name()).is_file(),
    )
    assert result == (["tiny", "small"], [4, 4], True, True, True)  # the Explore section draws the runs' curves


def test_report_without_runs_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    with pytest.raises(UserError, match="no finished or resolved run; run the campaign first"):
        build_report(tmp_path)


def test_cli_report_regenerates_from_disk(campaign_tree: Callable[..., Path]) -> None:
    campaign = campaign_tree(runs=grid_runs(["synchronous"], [0.001, 0.003], [0.999], [42, 43]))
    completed = _cli("report", str(campaign))
    result = (completed.returncode, (campaign / "report" / "index.html").is_file())
    assert result == (0, True)


def test_cli_report_missing_directory_exits_2_with_one_line(tmp_path: Path) -> None:
    completed = _cli("report", str(tmp_path / "absent"))
    result = (
        completed.returncode,
        len(completed.stderr.strip().splitlines()),
        "not a campaign directory (no such directory)" in completed.stderr,
    )
    assert result == (2, 1, True)


def test_cli_select_writes_groups_and_selection(report_campaign: Path, tmp_path: Path) -> None:
    shutil.copy(_report(report_campaign) / "runs.csv", tmp_path / "runs.csv")
    completed = _cli("select", str(tmp_path / "runs.csv"), "--out", str(tmp_path / "out"))
    written = json.loads((tmp_path / "out" / "selection.json").read_text())
    result = (completed.returncode, written == json.loads((_report(report_campaign) / "selection.json").read_text()))
    assert result == (0, True)


def test_regenerated_report_keeps_its_predecessor(campaign_tree: Callable[..., Path]) -> None:
    campaign = campaign_tree(runs=grid_runs(["synchronous"], [0.001, 0.003], [0.999], [42, 43]))
    build_report(campaign)
    first = {name: data for name, data in _report_bytes(campaign).items() if not name.startswith("assets/")}
    results = next((campaign / "runs").glob("*/results.json"))
    results.write_text(json.dumps({**json.loads(results.read_text()), "loss": 3.0}))
    build_report(campaign)
    history = list((_report(campaign) / "history").iterdir())
    kept = (
        {p.relative_to(history[0]).as_posix(): p.read_bytes() for p in history[0].rglob("*") if p.is_file()}
        if len(history) == 1
        else {}
    )
    result = (
        len(history),
        kept == first,
        (_report(campaign) / "index.html").read_bytes() == first["index.html"],
        sorted(p.name for p in (_report(campaign) / "assets").iterdir()),
    )
    assert result == (1, True, False, [plotly_asset_name()])  # assets/ stays for the run pages


def test_unchanged_rebuild_keeps_the_published_report(campaign_tree: Callable[..., Path]) -> None:
    campaign = campaign_tree(runs=grid_runs(["synchronous"], [0.001, 0.003], [0.999], [42, 43]))
    build_report(campaign)
    first = {p: (p.stat().st_ino, p.read_bytes()) for p in _report(campaign).rglob("*") if p.is_file()}
    build_report(campaign)
    result = {p: (p.stat().st_ino, p.read_bytes()) for p in _report(campaign).rglob("*") if p.is_file()}
    assert result == first


def test_selected_recipe_carries_cache_identity_and_revisions(campaign_tree: Callable[..., Path]) -> None:
    campaign = campaign_tree(runs=grid_runs(["synchronous"], [0.001, 0.003], [0.999], [42, 43]))
    build_report(campaign)
    text = (_report(campaign) / "selected-synchronous.yaml").read_text()
    recipe = load_recipe(_report(campaign) / "selected-synchronous.yaml")
    result = (f"cache identity {CACHE_IDENTITY}" in text, recipe.data.revision, recipe.data.tokenizer_revision)
    assert result == (True, "embedded-v1", "trained")


PRICED = {
    "campaign": "sweep",
    "recipe": "demo",
    "data": {"source": "synthetic", "cache_dir": "results/caches/synthetic"},
    "grid": {
        "modes": list(REPORT_MODES),
        "learning_rates": {"synchronous": [0.001, 0.003], "packed-4": [0.001, 0.003]},
        "beta2": [0.95, 0.999],
    },
    "seeds": list(REPORT_SEEDS),
    "epochs_per_slice": 1,
    "cost_per_gpu_hour": 3.0,
    "resources": {"default": {"gpus": 1, "cpus": 8}, "packed-4": {"gpus": 1, "cpus": 4}},
}
"""The report tests' grid as a campaign file, priced, with 8 CPUs per synchronous job and 4 per packed one."""


def test_report_cost_from_the_plan(
    campaign_tree: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """24 runs of 4 recorded epochs of 0.5 s and a 1.5 s validation: 3.5 s each, on 1 GPU and 8 or 4
    CPUs, at 3.0 per GPU-hour."""
    from ebd2n.campaign.check import campaign_from_dict
    from ebd2n.campaign.plans import campaign_plans
    from ebd2n.campaign.status_plan import campaign_plan

    campaign = campaign_tree()
    monkeypatch.chdir(tmp_path)
    spec = campaign_from_dict(json.loads(json.dumps(PRICED)))
    info = campaign / "campaign.json"
    info.write_text(json.dumps({**json.loads(info.read_text()), "plan": campaign_plan(spec, campaign_plans(spec))}))
    build_report(campaign)
    cost = _results(campaign)["cost"]
    modes = {
        entry["mode"]: (entry["runs"], round(entry["gpu_hours"] * 3600, 6), round(entry["cpu_hours"] * 3600, 6))
        for entry in cost["mode"]
    }
    points = {(entry["mode"], entry["lr"], entry["beta2"]): entry["runs"] for entry in cost["point"]}
    total = cost["campaign"]
    result = (
        modes,
        set(points.values()),
        len(points),
        round(total["gpu_hours"] * 3600, 6),
        round(total["cost"], 9),
        '<tr class="total"><th scope="row">campaign</th><td class="num">24</td>' in _page(campaign),
    )
    assert result == (
        {"synchronous": (12, 42.0, 336.0), "packed-4": (12, 42.0, 168.0)},
        {3},
        8,
        84.0,
        round(84.0 / 3600 * 3.0, 9),
        True,
    )


def test_report_cost_without_a_plan_counts_recorded_devices(campaign_tree: Callable[..., Path]) -> None:
    """The writer's runs ran on the CPU: no GPU-hours, one CPU each, and no money without a price."""
    campaign = campaign_tree()
    build_report(campaign)
    total = _results(campaign)["cost"]["campaign"]
    result = (total["gpu_hours"], round(total["cpu_hours"] * 3600, 6), total["cost"])
    assert result == (0.0, 84.0, None)  # 24 runs x (2 s of epochs + 1.5 s of validation)
