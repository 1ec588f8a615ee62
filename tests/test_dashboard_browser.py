"""Run dashboards of real demo runs (synchronous, packed-4, LoRA) and a fabricated two-GPU run in
headless Chromium, offline: figures draw, table views toggle, units show their states, a hostile
purpose stays text, and the console stays clean."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from offline_browser import MARKS, open_offline, overflowing, toggle_states, toolbar_overlaps
from run_dir_factory import HOSTILE, fabricate_run

from ebd2n.config import load_recipe
from ebd2n.report.dashboard import write_dashboard
from ebd2n.report.plotly_embed import plotly_asset_name
from ebd2n.train import train
from ebd2n.train.records import read_metrics

SHORT = ["training.max_tokens=8192", "training.epoch_tokens=4096"]
PURPOSE = f"dashboard probe {HOSTILE}"
UNITS = ["embedding", "block0.attention", "block0.mlp", "block1.attention", "block1.mlp", "head"]
FROZEN_BASE, FROZEN_PREFIX = "frozen base under LoRA", "frozen by the prefix"
STATES = {
    "synchronous": ["full rank"] * 6,
    "packed-4": ["full rank"] * 6,
    "lora": [FROZEN_BASE, FROZEN_PREFIX, FROZEN_PREFIX, "LoRA", "LoRA", FROZEN_BASE],
    "fabricated": [FROZEN_BASE, FROZEN_PREFIX, FROZEN_PREFIX, "LoRA", FROZEN_BASE, FROZEN_BASE],
}
STATES["campaign"] = STATES["exported"] = STATES["fabricated"]
"""`campaign`: a fabricated run of a campaign, whose page loads the shared plotly.js; `exported`: its
self-contained export, opened from a folder of its own."""
"""Expected unit states of each run's demo model (two blocks), from its recipe."""

pytestmark = MARKS


def _demo_run(cache: Path, directory: Path, *overrides: str) -> Path:
    """Train a short demo run and write its dashboard, as `ebd2n train` does after the trainer."""
    recipe = load_recipe(
        "demo",
        [
            f"data.cache_dir={cache}",
            f"runtime.output_dir={directory}",
            *SHORT,
            f"runtime.purpose={json.dumps(PURPOSE)}",
            *overrides,
        ],
    )
    train(recipe, progress=False)
    write_dashboard(directory)
    return directory


@pytest.fixture(scope="module")
def runs(demo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The four run directories, by kind; the LoRA run fine-tunes the synchronous run's final.pt."""
    root = tmp_path_factory.mktemp("dashboards")
    synchronous = _demo_run(demo_cache, root / "synchronous")
    fabricated = fabricate_run(root / "fabricated", purpose=PURPOSE)
    write_dashboard(fabricated)
    in_campaign = fabricate_run(root / "results" / "sweep" / "runs" / "campaign", purpose=PURPOSE)
    write_dashboard(in_campaign)
    exported = write_dashboard(in_campaign, root / "exported" / "report.html", self_contained=True).parent
    return {
        "campaign": in_campaign,
        "exported": exported,
        "synchronous": synchronous,
        "packed-4": _demo_run(demo_cache, root / "packed-4", "decentralized.num_models=4"),
        "lora": _demo_run(
            demo_cache,
            root / "lora",
            f"training.init_from={synchronous / 'final.pt'}",
            "parallel.freeze_prefix=1",
            "parallel.lora={rank: 4}",
        ),
        "fabricated": fabricated,
    }


@pytest.fixture(scope="module", params=list(STATES))
def page(request: pytest.FixtureRequest, browser, runs: dict[str, Path]) -> Iterator[object]:
    """One run's dashboard from file:// with every non-file request aborted; records errors and dialogs."""
    context, loaded = open_offline(browser, runs[request.param] / "report.html")
    page = loaded.page
    page.kind, page.errors, page.dialogs = request.param, loaded.errors, loaded.dialogs
    yield page
    context.close()


def test_browser_dashboard_every_figure_renders(page) -> None:
    result = page.evaluate(
        "[...document.querySelectorAll('[data-figure]')].map(div => div.querySelector('.main-svg') !== null)"
    )
    assert result == [True] * _figures(page)


def _figures(page) -> int:
    """Loss, accuracy, gradient norm and LR, validation, throughput; a packed run adds its models' spread."""
    return 6 if page.kind == "packed-4" else 5


def test_browser_dashboard_table_views_toggle(page) -> None:
    states = toggle_states(page)
    assert states == [(True, False)] * _figures(page)


def test_browser_dashboard_unit_states(page) -> None:
    result = page.evaluate(
        "[...document.querySelectorAll('table.units tbody tr')]"
        ".map(row => [row.cells[0].innerText, row.cells[1].innerText])"
    )
    assert result == [list(pair) for pair in zip(UNITS, STATES[page.kind], strict=True)]


def test_browser_dashboard_hostile_purpose_is_text(page) -> None:
    result = (page.locator("header .path").inner_text(), page.dialogs)
    assert result == (PURPOSE, [])


def test_browser_dashboard_console_has_no_errors(page) -> None:
    result = page.errors
    assert result == []


def test_browser_dashboard_plotly_source(page) -> None:
    """A campaign's run loads the campaign's one shared copy by relative path; every other page inlines it."""
    result = page.evaluate("[...document.scripts].filter(s => s.src).map(s => s.getAttribute('src'))")
    shared = [f"../../report/assets/{plotly_asset_name()}"]
    assert result == (shared if page.kind == "campaign" else [])


def test_browser_dashboard_modebar_only_on_hover(page) -> None:
    opacity = "[...document.querySelectorAll('#plot-throughput .modebar-group')].map(g => getComputedStyle(g).opacity)"
    page.mouse.move(1, 1)
    page.wait_for_function(f"{opacity}.length > 0 && {opacity}.every(o => o === '0')")
    page.locator("#plot-throughput").hover()
    page.wait_for_function(f"{opacity}.every(o => o === '1')")
    page.mouse.move(1, 1)


def test_browser_dashboard_axis_ticks_are_round_numbers(page) -> None:
    """Every axis of the epoch figures ticks at 1, 2, 2.5 or 5 times a power of ten (no 0.49, 9.77, 11.72)."""
    axes = page.evaluate(
        "['throughput', 'epoch-validation'].flatMap(id => ['ytick', 'y2tick'].map(axis =>"
        " [...document.querySelectorAll(`#plot-${id} .${axis} text`)].map(t => t.textContent)))"
    )
    result = [labels for labels in axes if len(labels) < 3 or not _round_steps(labels)]
    assert result == []


def _round_steps(labels: list[str]) -> bool:
    values = [float(label.replace(",", "").replace("\u2212", "-")) for label in labels]
    step = values[1] - values[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    return any(math.isclose(mantissa, nice) for nice in (1, 2, 2.5, 5, 10)) and all(
        math.isclose(value / step, round(value / step), abs_tol=1e-6) for value in values
    )


def test_browser_dashboard_job_ids_label(page) -> None:
    """Runs trained here carry local job ids; only the fabricated GPU run's numeric ids are SLURM's."""
    label = page.evaluate(
        "[...document.querySelectorAll('#identity th')].map(th => th.textContent).find(t => /job ids/i.test(t))"
    )
    fabricated = page.kind in ("fabricated", "campaign", "exported")
    assert label == ("SLURM job ids" if fabricated else "Job ids")


def test_browser_dashboard_per_batch_tables_unpack(page, runs: dict[str, Path]) -> None:
    """Shown once, each per-batch table fills with one row per batch recorded in metrics.jsonl; row 7
    of the fabricated runs is its skipped step, shown as text."""
    source = runs[
        "campaign" if page.kind == "exported" else page.kind
    ]  # the exported page's folder holds only the page
    steps = sum(record["type"] == "step" for record in read_metrics(source))
    counts = "['batch-loss', 'batch-accuracy'].map(id => document.querySelectorAll(`table.${id} tbody tr`).length)"
    for figure in ("batch-loss", "batch-accuracy"):
        page.locator(f'button[aria-controls="table-{figure}"]').click()
    page.wait_for_function(f"{counts}.every(count => count > 0)")
    seventh = page.evaluate(
        "[...document.querySelectorAll('table.batch-loss tbody tr')[6].cells].map(c => c.textContent)"
    )
    for figure in ("batch-loss", "batch-accuracy"):
        page.locator(f'button[aria-controls="table-{figure}"]').click()
    result = (page.evaluate(counts), seventh[4] if page.kind in ("fabricated", "campaign", "exported") else "skipped")
    assert result == ([steps, steps], "skipped")


def test_browser_dashboard_toolbar_covers_no_legend(page) -> None:
    """At 1,400 px the legends sit under the plots, clear of the Plotly toolbar's band above them."""
    result = (toolbar_overlaps(page), overflowing(page))
    assert result == ([], [])
