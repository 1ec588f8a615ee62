"""The run dashboard (report.html) of a fabricated run: sections, values, escaping, size, errors."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from run_dir_factory import BUSIEST, HOSTILE, JOB_IDS, fabricate_run
from workflow_support import killed_write

from ebd2n.errors import UserError
from ebd2n.report.dashboard import write_dashboard
from ebd2n.report.dashboard_figures import MAX_POINTS, downsample
from ebd2n.report.plotly_embed import plotly_asset_name, shared_plotly

SRC = Path(__file__).resolve().parents[1] / "src"

SIZE_LIMIT = 8_000_000
"""Bytes a 10,000-batch page may take (plotly.js alone is about 4.8 MB)."""


class _Rows(HTMLParser):
    """Text of each body row of the tables carrying a class, cell by cell."""

    def __init__(self, table_class: str) -> None:
        super().__init__()
        self.table_class, self.depth, self.rows, self.cell = table_class, 0, [], None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and self.table_class in (dict(attrs).get("class") or "").split():
            self.depth = 1
        elif self.depth and tag == "tbody":
            self.depth = 2
        elif self.depth == 2 and tag == "tr":
            self.rows.append([])
        elif self.depth == 2 and tag == "td":
            self.cell = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.depth = 0
        elif tag == "td" and self.cell is not None:
            self.rows[-1].append(self.cell.strip())
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell += data


def table_rows(html: str, table_class: str) -> list[list[str]]:
    parser = _Rows(table_class)
    parser.feed(html)
    return parser.rows


def packed_rows(html: str, figure: str) -> list[list[str]]:
    """The rows of a per-batch table, which the page carries gzip-compressed and base64-encoded."""
    block = re.search(rf'<script type="application/gzip\+base64" id="rows-{figure}">([^<]*)</script>', html)
    return json.loads(gzip.decompress(base64.b64decode(block[1])))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-m", "ebd2n", *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fabricated finished run with its dashboard written; tests must not modify it."""
    directory = fabricate_run(tmp_path_factory.mktemp("dashboard") / "lora-r4-seed42", purpose=f"fine-tune {HOSTILE}")
    write_dashboard(directory)
    return directory


@pytest.fixture(scope="module")
def html(run_dir: Path) -> str:
    return (run_dir / "report.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "text",
    [
        "lora-r4-seed42",
        "config/recipes/demo.yaml",
        "gpu-node-07",
        "2 × NVIDIA H200",
        "2.5.1",
        "12.4",
        "2026-09-25 08:00:00+00:00",
        "1 h 12 min",
        "a" * 64,
        "rank 4, alpha 16, dropout 0, on q, k, v, o",
        "block 0",
        "1f1b",
        "bf16",
        "16 sequences",
        "55.00 %",
        "2.4317",
        "batches (optimizer steps); 1 skipped",
        "122,880",
        f"Most loaded device: <strong>{BUSIEST}</strong>, 47.80 GB peak",
    ],
)
def test_dashboard_shows_value(html: str, text: str) -> None:
    assert text in html


@pytest.mark.parametrize("job", JOB_IDS)
def test_dashboard_lists_every_slice_job_id(html: str, job: str) -> None:
    assert f"<code>{job}</code>" in html


@pytest.mark.parametrize("section", ["identity", "settings", "metrics", "curves", "placement", "units"])
def test_dashboard_has_section(html: str, section: str) -> None:
    assert f'<section id="{section}">' in html


def test_dashboard_unit_rows_equal_run_record(run_dir: Path, html: str) -> None:
    units = json.loads((run_dir / "run.json").read_text())["units"]
    result = table_rows(html, "units")
    expected = [
        [
            u["name"],
            u["state"],
            f"{u['parameters']:,}",
            f"{u['trainable']:,}",
            u["device"],
            f"{u['steps_taken']:,}",
            f"{u['steps_skipped']:,}",
        ]
        for u in units
    ]
    assert result == expected


def test_dashboard_every_figure_has_a_table_view(html: str) -> None:
    result = (html.count('class="plot"'), html.count('class="table-toggle"'), html.count('class="table-view"'))
    assert result == (5, 5, 5)  # loss, accuracy, gradient norm and LR, validation, throughput


def test_dashboard_per_batch_table_lists_every_batch(html: str) -> None:
    result = [len(packed_rows(html, name)) for name in ("batch-loss", "batch-accuracy")] + [
        len(table_rows(html, "batch-loss"))
    ]
    assert result == [120, 120, 0]


def test_dashboard_plotly_inlined_once(html: str) -> None:
    result = (html.count("<script src"), html.count("Plotly.newPlot"))
    assert result == (0, 1)


def _campaign_run(root: Path, name: str) -> Path:
    return fabricate_run(root / "results" / "sweep" / "runs" / name)


def test_dashboard_in_a_campaign_loads_the_shared_plotly(tmp_path: Path) -> None:
    """Two runs of one campaign: each page names the one shared copy by relative path and stays small."""
    pages = [write_dashboard(_campaign_run(tmp_path, name)) for name in ("run-a", "run-b")]
    texts = [page.read_text(encoding="utf-8") for page in pages]
    assets = sorted(path.name for path in (tmp_path / "results" / "sweep" / "report" / "assets").iterdir())
    result = (
        [text.count(f'<script src="../../report/assets/{plotly_asset_name()}" defer>') for text in texts],
        [text.count("* plotly.js v") for text in texts],
        assets,
        max(page.stat().st_size for page in pages) < 500_000,
    )
    assert result == ([1, 1], [0, 0], [plotly_asset_name()], True)


def test_dashboard_outside_a_campaign_inlines_plotly(tmp_path: Path) -> None:
    """A run directory named runs/<run> but not under results/<campaign>/ is a run trained on its own."""
    page = write_dashboard(fabricate_run(tmp_path / "runs" / "alone")).read_text(encoding="utf-8")
    result = (page.count("* plotly.js v"), page.count("<script src"), (tmp_path / "report").exists())
    assert result == (1, 0, False)


def test_cli_dashboard_self_contained_export(tmp_path: Path) -> None:
    run = _campaign_run(tmp_path, "run-a")
    out = tmp_path / "shared" / "run-a.html"
    completed = _cli("dashboard", str(run), "--self-contained", str(out))
    page = out.read_text(encoding="utf-8")
    result = (
        completed.returncode,
        completed.stdout,
        page.count("* plotly.js v"),
        page.count("<script src"),
        (run / "report.html").exists(),
    )
    assert result == (0, f"dashboard {out}\n", 1, 0, False)


def test_cli_dashboard_of_unfinished_run_exits_2_with_one_line(tmp_path: Path) -> None:
    run = _campaign_run(tmp_path, "run-a")
    (run / "run.json").unlink()
    completed = _cli("dashboard", str(run))
    result = (completed.returncode, len(completed.stderr.splitlines()), "run.json" in completed.stderr)
    assert result == (2, 1, True)


def test_dashboard_purpose_is_escaped(html: str) -> None:
    result = (HOSTILE in html, f"fine-tune {HOSTILE}".replace("<", "&lt;").replace(">", "&gt;") in html)
    assert result == (False, True)


def test_dashboard_non_finite_values_shown_not_plotted(html: str) -> None:
    """Step 7 is skipped with a NaN loss and an infinite gradient norm: the table says so, the JSON stays valid."""
    result = packed_rows(html, "batch-loss")[6]
    assert result == ["7", "nan", "9.421e-04", "inf", "skipped"]


def test_dashboard_leaves_out_full_validation(html: str) -> None:
    assert "results.json" not in html


def test_dashboard_10k_batches_under_size_limit(tmp_path: Path) -> None:
    result = write_dashboard(fabricate_run(tmp_path / "big", steps=10_000, epochs=5)).stat().st_size
    assert result < SIZE_LIMIT


def test_dashboard_missing_run_record_is_user_error(tmp_path: Path) -> None:
    directory = fabricate_run(tmp_path / "unfinished")
    (directory / "run.json").unlink()
    with pytest.raises(UserError, match=r"run\.json: no such file.*finish the run's final slice"):
        write_dashboard(directory)


def test_dashboard_missing_metrics_is_user_error(tmp_path: Path) -> None:
    directory = fabricate_run(tmp_path / "no-metrics")
    (directory / "metrics.jsonl").unlink()
    with pytest.raises(UserError, match=r"metrics\.jsonl: no such file"):
        write_dashboard(directory)


def test_downsample_short_series_unchanged() -> None:
    points = [(step, float(step % 7)) for step in range(MAX_POINTS)]
    assert downsample(points) == points


def test_downsample_keeps_limit_order_and_extremes() -> None:
    points = [(step, float((step * 7919) % 1000)) for step in range(50_000)]
    points[31_337] = (31_337, 1e6)  # a spike must survive
    kept = downsample(points)
    result = (len(kept) <= MAX_POINTS, kept == sorted(kept), (31_337, 1e6) in kept, min(p[1] for p in kept))
    assert result == (True, True, True, 0.0)


def _figure(html: str, key: str) -> dict:
    block = re.search(rf'<script type="application/json" id="figure-{key}">(.*?)</script>', html, re.S)
    return json.loads(block[1])


def _cards(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<div class="card"><span class="value">([^<]*)</span><span class="label">([^<]*)</span>', html)


def test_dashboard_plots_gradient_norm_and_lr_schedule(run_dir: Path, html: str) -> None:
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [record for record in steps if record["type"] == "step"]
    figure = _figure(html, "optimizer")
    result = (
        [trace["name"] for trace in figure["data"]],
        figure["data"][-1]["yaxis"],
        figure["layout"]["yaxis"]["type"],
        len(packed_rows(html, "optimizer")),
    )
    assert result == (["gradient norm", "learning rate"], "y2", "log", len(steps))


def test_dashboard_headline_is_the_full_validation_loss(tmp_path: Path) -> None:
    run = fabricate_run(tmp_path / "validated")
    results = {"loss": 3.14159, "accuracy": 0.25, "targets": 98304, "status": "complete"}
    (run / "results.json").write_text(json.dumps(results))
    page = write_dashboard(run).read_text(encoding="utf-8")
    cards = _cards(page)
    assert cards[0] == ("3.1416", "ranking loss: full validation, nats (final.pt, all 98,304 targets)")
    assert [label for _, label in cards if "subset" in label] == [
        "validation token accuracy (epoch subset, epoch 3)",
        "validation loss, nats (epoch subset, epoch 3)",
    ]


def test_dashboard_before_full_validation_has_no_full_validation_card(html: str) -> None:
    assert [label for _, label in _cards(html) if "full-validation" in label] == []


def test_dashboard_in_a_campaign_links_its_report(tmp_path: Path) -> None:
    run = _campaign_run(tmp_path, "run-a")
    linked = write_dashboard(run).read_text(encoding="utf-8")
    alone = write_dashboard(run, tmp_path / "alone.html", self_contained=True).read_text(encoding="utf-8")
    links = [re.findall(r'<a href="([^"]*)">← Campaign report</a>', page) for page in (linked, alone)]
    assert links == [["../../report/index.html"], []]


def test_dashboard_packed_run_shows_the_spread_of_its_models(tmp_path: Path) -> None:
    run = fabricate_run(tmp_path / "packed")
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for record in records:
        if record["type"] == "epoch":
            record["consensus_distance"] = 0.5 / record["epoch"]
    (run / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    page = write_dashboard(run).read_text(encoding="utf-8")
    figure = _figure(page, "spread")
    assert (figure["data"][0]["x"], figure["data"][0]["y"]) == ([1, 2, 3], [0.5, 0.25, 0.5 / 3])
    assert "figure-spread" not in write_dashboard(fabricate_run(tmp_path / "sync")).read_text(encoding="utf-8")


def test_the_shared_plotly_clears_what_a_killed_write_of_it_left(tmp_path: Path) -> None:
    asset = tmp_path / "report" / "assets" / plotly_asset_name()
    asset.parent.mkdir(parents=True)
    leftover = killed_write(asset, b"partial")
    assert shared_plotly(tmp_path / "report") == asset
    assert not leftover.exists() and asset.stat().st_size > 1_000_000
