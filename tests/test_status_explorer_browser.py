"""The status page's live explorer (issue 57, item 8) in headless Chromium at 800 and 1,400 px: a
campaign midway with a diverged LR (its runs' losses blown up to ~2,000 nats), one run training
part-way and one not started. Every run so far is drawn, the running one's curve up to its last
step; converged curves fill the plot and diverged runs are marks at its edge; no two groups share a
colour; the page never scrolls sideways; steps that land after are drawn once the page is written
again and reloads, the explorer's settings kept. And `ebd2n dashboard CAMPAIGN_DIR` writes the page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from campaign_tree import STEPS_PER_EPOCH, RunSpec, grid_runs, write_campaign
from offline_browser import (
    EXPLORER_DRAWN,
    MARKS,
    Loaded,
    assert_one_click_scales_to_the_diverged,
    assert_scaled_to_the_converged,
    explorer_view,
    open_offline,
)

from ebd2n.campaign.check import campaign_from_dict
from ebd2n.campaign.plans import campaign_plans
from ebd2n.campaign.status import campaign_status
from ebd2n.campaign.status_plan import write_plan
from ebd2n.layout import LEASE
from ebd2n.provenance import timestamp
from ebd2n.report.status_page import write_status_page
from ebd2n.train.lease import Holder

pytestmark = MARKS
SRC = Path(__file__).resolve().parents[1] / "src"
PLOT = "document.getElementById('plot-explore')"
MODES, LRS, SEEDS = ("synchronous", "packed-4"), (0.001, 0.003, 10.0), (42, 43)
DIVERGED_LR = LRS[-1]
BLOWN_UP = 400.0
STEPS = 30
"""Steps per epoch; 4 epochs per run."""
CAMPAIGN = {
    "campaign": "sweep",
    "recipe": "demo",
    "data": {"source": "synthetic", "cache_dir": "results/caches/synthetic"},
    "overrides": {"training.max_tokens": 4 * 24576},
    "grid": {"modes": list(MODES), "learning_rates": {mode: list(LRS) for mode in MODES}, "beta2": [0.95]},
    "seeds": list(SEEDS),
    "epochs_per_slice": 2,
    "resources": {"default": {"gpus": 1, "cpus": 4, "minutes": 5}},
}
"""12 runs of 4 epochs in 2 slices; the 4 at LR 10 diverge in their third epoch."""
RUNS = [
    RunSpec(r.mode, r.lr, r.beta2, r.seed, r.loss, diverged_at=2 * STEPS_PER_EPOCH + 1 if r.lr == DIVERGED_LR else None)
    for r in grid_runs(MODES, LRS, [0.95], SEEDS)
]
TRAINING, PENDING = RUNS[1].run_id, RUNS[2].run_id
"""The run training its second slice (one epoch recorded) and the run not started yet."""


def _campaign(repo: Path) -> Path:
    """The campaign midway under `repo`; its directory."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(repo)
        campaign = campaign_from_dict(json.loads(json.dumps(CAMPAIGN)))
        write_plan(campaign, campaign_plans(campaign))
    root = write_campaign(repo, "sweep", RUNS, epochs=4, campaign_json=False, audit=None, steps_per_epoch=STEPS)
    for spec in RUNS:
        directory = root / "runs" / spec.run_id
        metrics = directory / "metrics.jsonl"
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        for record in records if spec.diverged_at is not None else []:
            if record["type"] == "step":
                record["loss"] *= BLOWN_UP
        if spec.run_id == TRAINING:  # its first slice's first epoch recorded, its job running
            records = [record for record in records if record.get("step", 0) <= STEPS][: STEPS + 1]
            (directory / "results.json").unlink()
            holder = Holder.this_process()
            (directory / LEASE).write_text(json.dumps({**holder.__dict__, "since": timestamp(1_800_000_000.0)}))
        elif spec.run_id == PENDING:
            records = []
            (directory / "results.json").unlink()
        else:
            (directory / "final.pt").write_bytes(b"weights")
        metrics.write_text("".join(json.dumps(record) + "\n" for record in records))
    return root


def _open(browser, page: Path, width: int) -> tuple[object, Loaded]:
    """(context, Loaded) for the status page offline, once its explorer has drawn."""
    return open_offline(browser, page, width, ready=EXPLORER_DRAWN)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = _campaign(tmp_path_factory.mktemp("live"))
    return write_status_page(root, campaign_status(root))


@pytest.fixture(scope="module", params=[800, 1400], ids=["800px", "1400px"])
def explored(request: pytest.FixtureRequest, browser, live: Path) -> Iterator[Loaded]:
    context, loaded = _open(browser, live, request.param)
    yield loaded
    context.close()


def _view(loaded: Loaded) -> dict:
    return explorer_view(loaded, "LR 10")


def _each_run(loaded: Loaded) -> dict:
    loaded.page.select_option("#explore-group", "")
    view = _view(loaded)
    loaded.page.select_option("#explore-group", "mode,lr,beta2")
    return view


def test_every_run_so_far_is_drawn_the_running_one_to_its_last_step(explored: Loaded) -> None:
    view = _each_run(explored)
    drawn = sorted(spec.run_id for spec in RUNS if spec.run_id != PENDING)
    assert (sorted(view["names"]), view["ends"][TRAINING], view["count"].split(";")[0]) == (
        drawn,
        STEPS,
        f"{len(drawn)} of {len(drawn)} runs drawn",
    )


def test_converged_curves_fill_the_plot_and_diverged_runs_are_marks_at_its_edge(explored: Loaded) -> None:
    assert_scaled_to_the_converged(explored, "LR 10", 4)


def test_one_click_scales_to_the_diverged_runs_too(explored: Loaded) -> None:
    assert_one_click_scales_to_the_diverged(explored, "LR 10")


@pytest.mark.parametrize(("grouping", "groups"), [("mode,lr,beta2", 6), ("", 11), ("lr", 3)])
def test_every_group_has_its_own_colour(explored: Loaded, grouping: str, groups: int) -> None:
    explored.page.select_option("#explore-group", grouping)
    colours = _view(explored)["colours"]
    explored.page.select_option("#explore-group", "mode,lr,beta2")
    assert (len(colours), len(set(colours))) == (groups, groups)


def test_the_page_never_scrolls_sideways(explored: Loaded) -> None:
    widths = explored.page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1] and not explored.errors


def test_steps_that_land_are_drawn_once_the_page_is_rewritten(browser, tmp_path: Path) -> None:
    """The running run records its second epoch; the console writes the page again and it reloads:
    the run's curve reaches the new last step, and the grouping chosen before the reload holds."""
    root = _campaign(tmp_path)
    page = write_status_page(root, campaign_status(root))
    context, loaded = _open(browser, page, 1400)
    loaded.page.select_option("#explore-group", "")
    before = _view(loaded)["ends"][TRAINING]
    steps = [{"type": "step", "step": step, "loss": 4.0 - step / 100} for step in range(STEPS + 1, 2 * STEPS + 1)]
    with open(root / "runs" / TRAINING / "metrics.jsonl", "a") as metrics:
        metrics.writelines(json.dumps(record) + "\n" for record in steps)
    write_status_page(root, campaign_status(root))
    loaded.page.reload()
    loaded.page.wait_for_function(f"{PLOT}.data !== undefined")
    after = (loaded.page.input_value("#explore-group"), _view(loaded)["ends"][TRAINING], loaded.errors)
    context.close()
    assert (before, after) == (STEPS, ("", 2 * STEPS, []))


def _dashboard(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run(
        [sys.executable, "-m", "ebd2n", "dashboard", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def test_cli_dashboard_of_a_campaign_writes_its_live_page(tmp_path: Path) -> None:
    _campaign(tmp_path)
    completed = _dashboard("results/sweep", cwd=tmp_path)
    page = tmp_path / "results/sweep/status.html"
    result = (completed.returncode, completed.stdout, 'id="explore-data"' in page.read_text())
    assert result == (0, "status page results/sweep/status.html\n", True)


def test_cli_dashboard_of_a_campaign_travels_not_alone(tmp_path: Path) -> None:
    _campaign(tmp_path)
    completed = _dashboard("results/sweep", "--self-contained", "out.html", cwd=tmp_path)
    result = (completed.returncode, len(completed.stderr.splitlines()), "is a campaign directory" in completed.stderr)
    assert result == (2, 1, True)
