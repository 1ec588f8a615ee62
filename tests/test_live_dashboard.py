"""A run can be watched while it trains: between slices its TensorBoard events read back with
TensorBoard's own reader and its dashboard opens in Chromium, saying it is not final; a run whose
job fails and a run that diverges have pages too."""

from __future__ import annotations

from pathlib import Path

import pytest
from offline_browser import MARKS, launch, open_offline

from ebd2n.commands import train_job
from ebd2n.layout import BEST, DASHBOARD, FINAL, LIVE_DASHBOARD
from ebd2n.train.records import read_metrics

pytestmark = MARKS


def _settings(cache: Path, run: Path, *more: str) -> list[str]:
    return [
        f"data.cache_dir={cache}",
        f"runtime.output_dir={run}",
        "training.max_tokens=16384",
        "training.epoch_tokens=4096",
        *more,
    ]


def _page(path: Path, width: int) -> dict:
    """What Chromium shows of a dashboard: the live notice, the epochs table's rows, drawn figures, errors."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        context, loaded = open_offline(browser, path, width)
        page = loaded.page
        shown = {
            "live": page.locator("#live").inner_text() if page.locator("#live").count() else None,
            "epochs": page.locator("#metrics .scroll table tbody tr").count(),
            "figures": page.locator("[data-figure] .main-svg").count() > 0,
            "wider": page.evaluate("document.documentElement.scrollWidth > window.innerWidth"),
            "errors": loaded.errors,
        }
        context.close()
        browser.close()
    return shown


@pytest.mark.parametrize("width", [800, 1400])
def test_between_slices_tensorboard_reads_the_run_and_its_dashboard_opens(
    demo_cache: Path, tmp_path: Path, width: int
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    train_job("demo", _settings(demo_cache, run), until_epoch=2)
    reader = EventAccumulator(str(run / "tensorboard"))
    reader.Reload()
    epochs = [r for r in read_metrics(run) if r["type"] == "epoch"]
    events = [event.step for event in reader.Scalars("subset_validation/loss")]
    between = _page(run / LIVE_DASHBOARD, width)
    final_before = (run / DASHBOARD).exists()
    train_job("demo", _settings(demo_cache, run))
    after = _page(run / DASHBOARD, width)
    assert (events, between["live"], between["epochs"], between["figures"], between["errors"], between["wider"]) == (
        [epoch["step"] for epoch in epochs],
        "Not final: trained to epoch 2, where this slice ended. This page is rewritten as the run "
        "trains; reload it for the newest epochs.",
        2,
        True,
        [],
        False,
    )
    result = (final_before, after["live"], after["epochs"], after["errors"], (run / LIVE_DASHBOARD).exists())
    assert result == (False, None, 4, [], False)  # report.html is only ever the finished run's page


def test_a_failed_job_leaves_a_page_saying_so(demo_cache: Path, tmp_path: Path) -> None:
    """The job fails writing best.json (a directory stands in its place) after its last epoch: the
    error goes on, and the page shows every epoch it trained and why it is not final."""
    run = tmp_path / "run"
    (run / BEST).mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        train_job("demo", _settings(demo_cache, run))
    shown = _page(run / LIVE_DASHBOARD, 1400)
    failure = shown["live"].startswith("Not final: the job failed (IsADirectoryError: [Errno 21] Is a directory")
    assert (failure, BEST in shown["live"], shown["epochs"], shown["errors"], (run / FINAL).is_file()) == (
        True,
        True,
        4,
        [],
        True,
    )


def test_a_diverged_run_has_its_final_page(demo_cache: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    summary = train_job("demo", _settings(demo_cache, run, "optimizer.lr=1000"))
    shown = _page(run / DASHBOARD, 1400)
    assert (summary.startswith("done: the run diverged"), shown["live"], shown["figures"], shown["errors"]) == (
        True,
        None,
        True,
        [],
    )


def test_the_trainer_hands_its_record_at_each_epoch_and_the_page_is_rewritten_only_when_due(
    demo_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slice's start and each epoch give a record; the first starts the clock, the next one due is
    written at once (no first-write guess), and the one after waits SPACING times that write's duration."""
    from ebd2n.config import load_recipe
    from ebd2n.report import live_dashboard
    from ebd2n.train import train

    run = tmp_path / "run"
    records: list[dict] = []
    train(load_recipe("demo", _settings(demo_cache, run)), until_epoch=2, progress=False, on_record=records.append)
    monkeypatch.setattr(live_dashboard, "FIRST_GUESS", 0.0)
    live = live_dashboard.LiveDashboard(run)
    live(records[0])  # starts the clock: no write at the first record
    written = (run / LIVE_DASHBOARD).exists()
    live(records[1])
    first = (run / LIVE_DASHBOARD).read_text()
    live(records[-1])
    result = (
        [record["steps"] for record in records],
        written,
        'id="live"' in first,
        (run / LIVE_DASHBOARD).read_text() == first,
    )
    assert result == ([0, 4, 8], False, True, True)
