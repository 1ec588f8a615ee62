"""`ebd2n status` on a campaign stopped midway: three runs done, one training its second slice, one
validating, one failed, two pending; exact counts, hours, ETA, plain text when piped, and the page.

The run directories are written by the report tests' campaign writer (the trainer's file shapes);
a running job holds its run's lease (here: held for this live test process), the frozen trainer's
slice plan says how many slices a run has, and each job's log lies under logs/. Nothing of
Snakemake's own records is read.

A successive-halving campaign (3 learning rates x 2 seeds, 2 epochs, one rung at epoch 1) runs
through the real workflow: its dry run, its status at the rung before the decision, and once
finished, with runs stopped at the rung held to the decision file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import workflow_support as workflow
from campaign_tree import RunSpec, grid_runs, write_campaign
from offline_browser import CHROMIUM, launch

from ebd2n.campaign.check import campaign_from_dict
from ebd2n.campaign.plans import campaign_plans
from ebd2n.campaign.rung_decision import read_decision
from ebd2n.campaign.status import CampaignStatus, campaign_status
from ebd2n.campaign.status_display import finished, format_status
from ebd2n.campaign.status_plan import write_plan
from ebd2n.errors import UserError
from ebd2n.layout import LEASE
from ebd2n.provenance import timestamp
from ebd2n.train.lease import Holder
from ebd2n.train.plan import plan_slices, write_slice_plan

SRC = Path(__file__).resolve().parents[1] / "src"
CAMPAIGN = {
    "campaign": "sweep",
    "recipe": "demo",
    "data": {"source": "synthetic", "cache_dir": "results/caches/synthetic"},
    "grid": {
        "modes": ["synchronous", "packed-4"],
        "learning_rates": {"synchronous": [0.001, 0.003], "packed-4": [0.001, 0.003]},
        "beta2": [0.95],
    },
    "seeds": [42, 43],
    "epochs_per_slice": 1,
    "resources": {"default": {"gpus": 1, "cpus": 4, "minutes": 5}},
}
"""8 runs of the demo recipe (2 epochs, so 2 slices each), one GPU and 4 CPUs per job."""
STARTED = 1_800_000_000.0
NOW = STARTED + 90
FAILURE = (
    "ebd2n train: run failed: 4 consecutive steps had non-finite gradients (last at step 9); "
    "lower optimizer.lr or check the data"
)


def _runs() -> list[RunSpec]:
    return grid_runs(["synchronous"], [0.001, 0.003], [0.95], [42, 43]) + grid_runs(
        ["packed-4"], [0.001, 0.003], [0.95], [42, 43]
    )


def _hold(directory: Path) -> None:
    """The lease of a job working in `directory` since STARTED (this test process stands in for it)."""
    holder = Holder.this_process()
    (directory / LEASE).write_text(json.dumps({**holder.__dict__, "since": timestamp(STARTED)}))


@pytest.fixture
def stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The campaign in its midway state; returns each run's role by run id."""
    monkeypatch.chdir(tmp_path)
    campaign = campaign_from_dict(json.loads(json.dumps(CAMPAIGN)))
    write_plan(campaign, campaign_plans(campaign))
    write_slice_plan(plan_slices(2, 1), campaign.paths.slice_plan("base"))
    runs = [spec.run_id for spec in _runs()]
    root = write_campaign(tmp_path, "sweep", _runs(), epochs=2, campaign_json=False, audit=None)
    roles = dict(
        zip(runs, ["done", "done", "done", "training", "validating", "failed", "pending", "pending"], strict=True)
    )
    for run, role in roles.items():
        directory = root / "runs" / run
        if role != "done":
            (directory / "results.json").unlink()
        if role == "done":
            (directory / "final.pt").write_bytes(b"weights")
        if role in ("training", "failed"):  # slice 1 of 2 finished: its epoch record only
            metrics = directory / "metrics.jsonl"
            metrics.write_text("".join(line + "\n" for line in metrics.read_text().splitlines()[:2]))
        if role == "validating":
            (directory / "final.pt").write_bytes(b"weights")
        if role in ("training", "validating"):
            _hold(directory)
        if role == "failed":
            log = root / "logs" / "runs" / run / "final.log"
            log.parent.mkdir(parents=True)
            log.write_text(f"2026-11-30 12:00:00 slice: resume\nTraceback (most recent call last):\n  ...\n{FAILURE}\n")
        if role == "pending":  # one resolved (recipe.yaml only), one not started at all
            for path in directory.iterdir():
                if path.name != "recipe.yaml" or run.endswith("seed43"):
                    path.unlink()
            if run.endswith("seed43"):
                directory.rmdir()
    return roles


def test_status_counts_of_a_campaign_stopped_midway(stopped: dict[str, str]) -> None:
    status = campaign_status(Path("results/sweep"), now=NOW)
    result = (status.counts, [(row.run, row.state) for row in status.runs])
    expected_states = {"training": "training", "validating": "validating"}
    assert result == (
        {"done": 3, "running": 2, "failed": 1, "pending": 2},
        [(run, expected_states.get(role, role)) for run, role in stopped.items()],
    )


def test_status_hours_and_eta(stopped: dict[str, str]) -> None:
    """Hours: 0.5 s per recorded epoch (the writer's wall_s; 10 epochs) plus 90 s for each of the two
    running jobs, times 1 GPU or 4 CPUs. ETA: 5 slices left (1 of the training run, 2 of each pending
    one) at the mean finished slice's 0.5 s (one epoch each), and 4 validations at the done runs'
    recorded 1.5 s, over the 2 jobs running."""
    status = campaign_status(Path("results/sweep"), now=NOW)
    seconds = 10 * 0.5 + 2 * 90
    result = (round(status.gpu_hours * 3600, 6), round(status.cpu_hours * 3600, 6), status.eta_s)
    assert result == (seconds, 4 * seconds, (5 * 0.5 + 4 * 1.5) / 2)


def test_status_rows_say_slice_and_failure(stopped: dict[str, str]) -> None:
    rows = {row.state: row for row in campaign_status(Path("results/sweep"), now=NOW).runs}
    result = (rows["training"].detail, rows["training"].epochs_done, rows["failed"].detail.split(": ", 1))
    assert result == ("slice 2 of 2", 1, [f"logs/runs/{rows['failed'].run}/final.log", FAILURE])


def test_cli_status_piped_is_plain_text_and_writes_the_page(stopped: dict[str, str], tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])}
    completed = subprocess.run(
        [sys.executable, "-m", "ebd2n", "status", "results/sweep"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    lines = completed.stdout.splitlines()
    result = (
        completed.returncode,
        "\033[" in completed.stdout,
        len(lines),
        lines[0].split(),
        lines[-2].split(":")[1],
        (tmp_path / "results/sweep/status.html").is_file(),
    )
    assert result == (
        0,
        False,
        1 + 8 + 3,
        ["run", "state", "epochs", "subset", "val", "loss", "subset", "acc.", "full", "val", "loss", "wall", "note"],
        " 8 runs",
        True,
    )


def test_status_in_a_terminal_is_coloured(stopped: dict[str, str]) -> None:
    text = format_status(campaign_status(Path("results/sweep"), now=NOW), colour=True)
    result = [line.startswith("\033[") for line in text.splitlines()]
    assert result == [False] + [True] * 8 + [False, False]


def test_status_names_each_loss(stopped: dict[str, str]) -> None:
    """A done run shows its last epoch's subset loss, saying which epoch, and its full-validation loss."""
    text = format_status(campaign_status(Path("results/sweep"), now=NOW))
    done = next(run for run, role in stopped.items() if role == "done")
    row = next(line for line in text.splitlines() if line.startswith(done))
    full = json.loads(Path(f"results/sweep/runs/{done}/results.json").read_text())["loss"]
    subset = [json.loads(line) for line in Path(f"results/sweep/runs/{done}/metrics.jsonl").read_text().splitlines()][
        -1
    ]
    result = (
        f"{subset['val_loss']:.4f} at epoch 2" in row,
        f"{full:.4f}" in row.split("at epoch 2")[1],
        full != subset["val_loss"],
    )
    assert result == (True, True, True)


def test_status_hours_keep_their_digits(stopped: dict[str, str]) -> None:
    """185 GPU-seconds are 0.0514 GPU-hours, not 0.05 (or 0.00 for a shorter run)."""
    line = format_status(campaign_status(Path("results/sweep"), now=NOW)).splitlines()[-1]
    result = line.split("; ")[1]
    assert result == "0.0514 GPU-hours, 0.206 CPU-hours so far"


def test_status_without_a_plan_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"status/plan\.json: no such file"):
        campaign_status(tmp_path / "results" / "nothing")


def _open_status_page(tmp_path: Path, width: int = 1400) -> Iterator[object]:
    """The campaign's status page in headless Chromium, `width` px wide, offline."""
    from ebd2n.report.status_page import write_status_page

    yield from _open_page(
        write_status_page(tmp_path / "results/sweep", campaign_status(Path("results/sweep"), now=NOW)), width
    )


def _open_page(path: Path, width: int = 1400) -> Iterator[object]:
    """A status page in headless Chromium, `width` px wide, offline."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = launch(playwright)
        context = browser.new_context(viewport={"width": width, "height": 900})
        context.route(
            "**/*", lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_()
        )
        loaded = context.new_page()
        errors: list[str] = []
        loaded.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        loaded.goto(path.as_uri())
        loaded.errors = errors
        yield loaded
        browser.close()


@pytest.fixture
def page(stopped: dict[str, str], tmp_path: Path) -> Iterator[object]:
    yield from _open_status_page(tmp_path)


@pytest.fixture
def finished_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """The page of the same campaign once every run is done."""
    monkeypatch.chdir(tmp_path)
    campaign = campaign_from_dict(json.loads(json.dumps(CAMPAIGN)))
    write_plan(campaign, campaign_plans(campaign))
    write_slice_plan(plan_slices(2, 1), campaign.paths.slice_plan("base"))
    root = write_campaign(tmp_path, "sweep", _runs(), epochs=2, campaign_json=False, audit=None)
    for run in (root / "runs").iterdir():
        (run / "final.pt").write_bytes(b"weights")
    yield from _open_status_page(tmp_path)


@pytest.mark.browser
def test_browser_status_page(page) -> None:
    """The page opens offline with no console error, one row per run, the campaign line, and reloads itself."""
    result = (
        page.evaluate("document.querySelectorAll('#runs tbody tr').length"),
        page.evaluate("[...document.querySelectorAll('#runs tbody tr')].map(tr => tr.className)"),
        page.locator("#campaign").inner_text().split(";")[0],
        page.evaluate("document.querySelector('meta[http-equiv=refresh]').content"),
        page.errors,
    )
    assert result == (
        8,
        ["done"] * 3 + ["training", "validating", "failed", "pending", "pending"],
        "campaign sweep: 8 runs: 3 done, 2 running, 1 failed, 2 pending",
        "30",
        [],
    )


@pytest.mark.browser
def test_browser_status_page_of_a_finished_campaign_stops_reloading(finished_page) -> None:
    result = (
        finished_page.evaluate("document.querySelectorAll('meta[http-equiv=refresh]').length"),
        "no longer reloads" in finished_page.locator("p.muted").first.inner_text(),
        "reloads every" in finished_page.content(),
        finished_page.locator("#campaign").inner_text().split(";")[0],
    )
    assert result == (0, True, False, "campaign sweep: 8 runs: 8 done, 0 running, 0 failed, 0 pending")
    assert (
        finished_page.locator("#campaign")
        .inner_text()
        .endswith("ETA none (nothing is training, validating or waiting)")
    )


WRAPPED_CELLS = """[...document.querySelectorAll('#runs tbody td:not(:nth-last-child(-n+2))')].filter(td => {
    const range = document.createRange();
    range.selectNodeContents(td);
    return new Set([...range.getClientRects()].map(rect => Math.round(rect.top))).size > 1;
}).map(td => td.textContent)"""
"""The text of every table cell but the note and the curve that the browser broke over more than one line."""


@pytest.mark.browser
@pytest.mark.parametrize("width", [800, 1400])
def test_browser_status_page_links_dashboards_and_keeps_each_cell_on_one_line(
    stopped: dict[str, str], tmp_path: Path, width: int
) -> None:
    """A run with a dashboard is a link to it (its grid point readable on hover); a run without one
    is plain text; no cell but the note wraps, at 800 px as at 1,400, and the page itself never
    scrolls sideways (the table does, inside it); a finished run keeps its training-loss curve."""
    with_dashboard = [run for run, role in stopped.items() if role == "done"][:2]
    for run in with_dashboard:
        (tmp_path / "results/sweep/runs" / run / "report.html").write_text("<html></html>")
        with open(tmp_path / "results/sweep/runs" / run / "metrics.jsonl", "a") as metrics:  # a curve's worth of steps
            metrics.write(
                "".join(json.dumps({"type": "step", "step": step, "loss": 5.0 - step}) + "\n" for step in (2, 3))
            )
    pages = _open_status_page(tmp_path, width)
    page = next(pages)
    try:
        links = page.evaluate("[...document.querySelectorAll('#runs td a')].map(a => [a.textContent, a.title])")
        wrapped = page.evaluate(WRAPPED_CELLS)
        sideways = page.evaluate("document.documentElement.scrollWidth > window.innerWidth")
        finished_curves = page.evaluate("[...document.querySelectorAll('#runs tr.done td.curve svg')].length")
        page.goto(page.evaluate("document.querySelector('#runs td a').href"))
        opened = page.content()
    finally:
        pages.close()
    labels = [
        f"synchronous · lr {run.split('-lr')[1].split('-')[0]} · β2 0.95 · seed {run[-2:]}" for run in with_dashboard
    ]
    assert (links, wrapped, opened, sideways, finished_curves) == (
        [list(pair) for pair in zip(with_dashboard, labels, strict=True)],
        [],
        "<html><head></head><body></body></html>",
        False,
        len(with_dashboard),
    )


@pytest.mark.browser
def test_browser_status_page_names_each_loss(page) -> None:
    result = (
        page.evaluate("[...document.querySelectorAll('#runs th')].map(th => th.textContent)")[3:6],
        "which the report ranks runs by" in page.locator("body").inner_text(),
    )
    assert result == (["subset val loss", "subset acc.", "full val loss"], True)


# --- successive halving, through the real workflow ---

HALVING = {
    **workflow.TINY,
    "campaign": "halving",
    "grid": {"modes": ["synchronous"], "learning_rates": {"synchronous": [0.001, 0.004, 0.016]}, "beta2": [0.99]},
    "seeds": [42, 43],
    "search": {"method": "successive-halving", "keep": 0.3},
}
"""6 runs of 2 epochs in one-epoch slices: the rung at epoch 1 lets ceil(0.3 x 3) = 1 point train on."""
HALVING_RUNS = [f"synchronous-lr{lr!r}-beta20.99-seed{seed}" for lr in (0.001, 0.004, 0.016) for seed in (42, 43)]


@dataclass
class Halved:
    repo: Path
    dry_run: str
    """The ebd2n console's plan of a dry run before anything ran."""
    at_rung: CampaignStatus
    """Every run trained to the rung, the rung not decided."""
    at_rung_text: str
    done: CampaignStatus
    decision: dict
    console_page: Path
    """The status page the workflow's console wrote last (a copy: `ebd2n status` rewrites it)."""


@pytest.fixture(scope="module")
def halved(tmp_path_factory: pytest.TempPathFactory) -> Halved:
    repo = workflow.copy_repo(tmp_path_factory.mktemp("halving"))
    campaign = workflow.write_campaign(repo, HALVING, "halving.yaml")
    dry_run = workflow.snakemake(repo, "-n", "--configfile", campaign).stderr
    rung = [f"results/halving/runs/{run}/slices/epoch-1.json" for run in HALVING_RUNS]
    workflow.snakemake(repo, *rung, "--configfile", campaign)  # every run to the rung, not past it
    at_rung = campaign_status(repo / "results/halving")
    workflow.snakemake(repo, "--configfile", campaign)
    decisions = sorted((repo / "results/halving/search/synchronous").glob("rung-1-*.json"))
    assert len(decisions) == 1
    console_page = repo / "results/halving/console-status.html"  # beside it: its links are relative
    console_page.write_text((repo / "results/halving/status.html").read_text())
    return Halved(
        repo,
        dry_run,
        at_rung,
        format_status(at_rung),
        campaign_status(repo / "results/halving"),
        read_decision(decisions[0]),
        console_page,
    )


@pytest.mark.slow
def test_halving_dry_run_says_the_rung_decides_what_follows(halved: Halved) -> None:
    lines = halved.dry_run.splitlines()
    result = [line for line in lines if line.startswith(("would", "successive halving"))]
    assert result == [
        f"would train: 6 runs: {', '.join(HALVING_RUNS[:5])} and 1 more",
        "would validate: no run",
        "successive halving: 1 rung decision would run (synchronous at epoch 1); "
        "the slices after a rung are planned once it is decided",
    ]


@pytest.mark.slow
def test_halving_status_at_an_undecided_rung(halved: Halved) -> None:
    """Every run waits at the rung: pending, not finished, and the ETA counts each one's last slice
    and validation (undecided fates are work left)."""
    status = halved.at_rung
    slices = [seconds for row in status.runs for seconds in row.slice_seconds]
    bracket, line = halved.at_rung_text.splitlines()[-2:]
    result = (
        status.counts,
        [(row.state, row.detail) for row in status.runs],
        status.brackets,
        finished(status),
        status.eta_s,
        bracket,
        line.split(";")[0],
    )
    assert result == (
        {"done": 0, "running": 0, "failed": 0, "pending": 6, "stopped": 0},
        [("pending", "1 of 2 slices done, waiting for rung 1's decision")] * 6,
        ["bracket synchronous: waiting for rung 1 (6 of 6 runs at epoch 1)"],
        False,
        pytest.approx(6 * sum(slices) / len(slices)),
        "bracket synchronous: waiting for rung 1 (6 of 6 runs at epoch 1)",
        "campaign halving: 6 runs: 0 done, 0 running, 0 stopped, 0 failed, 6 pending",
    )


@pytest.mark.slow
def test_halving_status_of_the_finished_campaign_holds_the_decision(halved: Halved) -> None:
    """The points the rung did not keep are stopped, each with its rank and mean loss from the
    decision file; the kept point's runs are done; nothing is left, so the campaign is finished."""
    decision = halved.decision
    expected = {}
    for rank, entry in enumerate(decision["ranking"], 1):
        for run in entry["losses"]:
            expected[run] = (
                ("done", "")
                if entry["point"] in decision["continuing"]
                else (
                    "stopped",
                    f"stopped at rung 1, epoch 1 (bracket synchronous: ranked {rank} of 3, "
                    f"mean subset loss {entry['mean_loss']:.4f}; kept 1)",
                )
            )
    status = halved.done
    result = (
        {row.run: (row.state, row.detail) for row in status.runs},
        status.counts,
        status.brackets,
        finished(status),
        status.eta_s,
    )
    assert result == (
        expected,
        {"done": 2, "running": 0, "failed": 0, "pending": 0, "stopped": 4},
        ["bracket synchronous: rung 1 of 1 decided, 1 of 3 points train on"],
        True,
        0.0,
    )


@pytest.mark.slow
def test_halving_cli_status_counts_stopped_runs_apart(halved: Halved) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "ebd2n", "status", "results/halving"],
        capture_output=True,
        text=True,
        env=workflow.environment(),
        timeout=120,
        cwd=halved.repo,
    )
    lines = completed.stdout.splitlines()
    result = (completed.returncode, lines[-3], lines[-2].split(";")[0], lines[-1])
    assert result == (
        0,
        "bracket synchronous: rung 1 of 1 decided, 1 of 3 points train on",
        "campaign halving: 6 runs: 2 done, 0 running, 4 stopped, 0 failed, 0 pending",
        "page results/halving/status.html",
    )


@pytest.mark.slow
@pytest.mark.browser
def test_browser_status_page_of_a_halved_campaign_stops_reloading(halved: Halved) -> None:
    """The page the workflow's console wrote last: stopped rows, the bracket's line, no reload."""
    for page in _open_page(halved.console_page):
        result = (
            page.evaluate("[...document.querySelectorAll('#runs tbody tr')].map(tr => tr.className)"),
            page.evaluate("[...document.querySelectorAll('#brackets li')].map(li => li.textContent)"),
            page.evaluate("document.querySelectorAll('meta[http-equiv=refresh]').length"),
            page.errors,
        )
    expected = [halved.done.runs[i].state for i in range(6)]
    assert result == (expected, ["bracket synchronous: rung 1 of 1 decided, 1 of 3 points train on"], 0, [])


@pytest.mark.browser
@pytest.mark.parametrize("width", [800, 1400])
def test_browser_status_page_draws_each_running_runs_loss_curve(
    stopped: dict[str, str], tmp_path: Path, width: int
) -> None:
    """The run training its second slice has 251 steps of falling loss (one non-finite): its row
    draws its explorer curve, the lowest and highest step of each of 120 buckets less the non-finite
    one (239 points), highest first, at full size; runs with a single step draw none."""
    training = next(run for run, role in stopped.items() if role == "training")
    steps = [{"type": "step", "step": step, "loss": 5.0 - step / 100} for step in range(1, 251)]
    steps[7]["loss"] = float("nan")
    with open(tmp_path / "results/sweep/runs" / training / "metrics.jsonl", "a") as metrics:
        metrics.writelines(json.dumps(record, separators=(",", ":")) + "\n" for record in steps)
    pages = _open_status_page(tmp_path, width)
    page = next(pages)
    try:
        drawn = page.evaluate(
            """[...document.querySelectorAll('#runs tbody tr')].map(tr => {
                const line = tr.querySelector('td.curve polyline');
                const box = line && line.getBoundingClientRect();
                return [tr.className, line ? line.getAttribute('points').split(' ').map(p => +p.split(',')[1]) : null,
                        box ? box.width > 100 && box.height > 20 : false];
            })"""
        )
    finally:
        pages.close()
    rows = {state: (ys, shown) for state, ys, shown in drawn if ys is not None}
    ys, shown = rows["training"]
    assert (sorted(rows), len(ys), ys == sorted(ys), ys[0] < ys[-1], shown) == (
        ["training"],  # the validating run's history holds one step: no line to draw
        2 * 120 - 1,
        True,
        True,
        True,
    )
