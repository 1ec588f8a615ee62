"""Where a campaign stands, while it runs: one row per run and a campaign line, as text and as a page.

It reads only files the campaign's jobs write: the plan the workflow writes when it starts
(status/plan.json: the grid, each job's GPUs and CPUs, each base recipe's slices), and
each run directory (metrics.jsonl, final.pt, results.json, and the lease of a job working there:
a run whose lease has a live holder is running; each job's log under logs/ holds its error). It
never asks a scheduler nor reads Snakemake's records, so it works the same on a laptop and on a
SLURM cluster, and it can run as often as wanted.

A run's time so far is the training time the trainer recorded for its finished slices (epoch
`wall_s`; validation and job start-up excluded) plus how long its running job has run; hours are
that time the job's GPUs or CPUs. The ETA is the remaining jobs (slices and validations) times
the mean duration of the finished ones (the trainer's slice times, validation's recorded time),
divided by the number of jobs running now (at least one).

Under successive halving the plan also holds the campaign's search: each bracket's rung decisions
(search/<bracket>/, read through `ebd2n.campaign.search`) say which runs stopped at a rung. A
stopped run is a state of its own, neither failed nor left to do: the ETA counts the runs that
still train (those whose fate no rung has decided yet among them), and a campaign whose other
runs are done is finished. One line per bracket says the rung it is at.
"""

from __future__ import annotations

import html
import itertools
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ebd2n.atomic import atomic_write_text
from ebd2n.campaign.grid import grid_from_record
from ebd2n.campaign.plans import grid_search
from ebd2n.campaign.resources import scope_name
from ebd2n.campaign.results import job_failure
from ebd2n.campaign.runs import Run
from ebd2n.campaign.search import Halving
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.layout import CampaignPaths
from ebd2n.quantities import format_amount, format_duration
from ebd2n.train.lease import live_holder
from ebd2n.train.plan import SlicePlan, parse_plan, plan_record

if TYPE_CHECKING:
    from ebd2n.campaign.file import Campaign

REFRESH_S = 30
"""How often the page reloads itself."""
STATES = ("done", "running", "failed", "pending")
"""The campaign line's counts; a run that trains or validates counts as running."""
STOPPED = "stopped"
"""A run successive halving stopped at a rung: counted apart, under halving only."""
DIVERGED = "diverged"
"""A run the trainer stopped because it diverged (ebd2n.train.divergence): an outcome, counted apart."""
_RECORD = re.compile(rb'"type": ?"(epoch|diverged)"')


@dataclass
class RunStatus:
    """One run's row."""

    run: str
    state: str
    """pending, training, validating, done, diverged, failed or stopped (at a rung, successive halving)."""
    detail: str
    epochs_done: int
    epochs: int
    slices_done: int
    slices: int
    loss: float | None = None
    """Epoch-subset validation loss of the last finished epoch (`loss_epoch`)."""
    accuracy: float | None = None
    loss_epoch: int | None = None
    full_loss: float | None = None
    """Full-validation loss (results.json), the one the report ranks by; a done run's only."""
    wall_s: float = 0.0
    gpus: int = 0
    cpus: int = 1
    slice_seconds: list[float] = field(default_factory=list)
    """Duration of each finished training job of the run."""
    validation_seconds: float | None = None
    """Duration of its validation job, once finished."""

    @property
    def counted(self) -> str:
        """The campaign line's bucket."""
        return "running" if self.state in ("training", "validating") else self.state


@dataclass
class CampaignStatus:
    """Every run's row and the campaign's totals."""

    campaign: str
    runs: list[RunStatus]
    counts: dict[str, int]
    gpu_hours: float
    cpu_hours: float
    eta_s: float | None
    brackets: list[str] = field(default_factory=list)
    """Successive halving: one line per bracket, the rung it is at (none for the full grid)."""
    retired: list[str] = field(default_factory=list)
    """Run directories of points the campaign file no longer declares: kept on disk, not run."""


def campaign_plan(campaign: Campaign, plans: Mapping[str, SlicePlan]) -> dict[str, Any]:
    """What `ebd2n status` expects and the report prices: the grid, each job scope's GPUs and CPUs,
    each base recipe's slices (`plans`, ebd2n.campaign.plans) and the GPU-hour price."""
    grid = campaign.grid
    jobs = {}
    for base in grid.bases:
        for mode in grid.modes:
            resources = campaign.job_resources(base, mode)
            jobs[scope_name(base, mode)] = {"gpus": resources.job_gpus, "cpus": resources.cpus}
    slices = {base: plan_record(plan) for base, plan in plans.items()}
    return {
        "campaign": campaign.name,
        "cost_per_gpu_hour": campaign.cost_per_gpu_hour,
        **grid.record(),
        "jobs": jobs,
        "slices": slices,
    }


def planned_runs(plan: Mapping[str, Any]) -> list[tuple[Run, int, int]]:
    """Every run of a `campaign_plan` with its job's GPUs and CPUs."""
    jobs = plan["jobs"]
    return [
        (run, jobs[scope_name(run.base, run.mode)]["gpus"], jobs[scope_name(run.base, run.mode)]["cpus"])
        for run in grid_from_record(plan).runs()
    ]


def write_plan(campaign: Campaign, plans: Mapping[str, SlicePlan]) -> Path:
    """status/plan.json of a campaign (the workflow's onstart): what `ebd2n status` expects to run."""
    path = campaign.paths.status_plan
    text = json.dumps(campaign_plan(campaign, plans), indent=1) + "\n"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)
    return path


def read_plan(campaign_dir: Path) -> dict[str, Any] | None:
    """The campaign's plan (see `write_plan`), or None for a campaign the workflow has not started."""
    return read_json(CampaignPaths(Path(campaign_dir)).status_plan)


def campaign_status(campaign_dir: Path, now: float | None = None) -> CampaignStatus:
    """The status of `campaign_dir` (results/<campaign>), from its files alone."""
    campaign_dir = Path(campaign_dir)
    paths = CampaignPaths(campaign_dir)
    plan = read_plan(campaign_dir)
    if plan is None:
        raise UserError(
            f"{paths.status_plan}: no such file; it is written when Snakemake starts the campaign - "
            f"is {campaign_dir} a campaign directory?"
        )
    if "grid" not in plan:
        raise UserError(f"{paths.status_plan}: written by an older ebd2n; start the workflow again to rewrite it")
    now = time.time() if now is None else now
    grid = grid_from_record(plan)
    slices = {base: parse_plan(raw, str(paths.status_plan)) for base, raw in plan["slices"].items()}
    halving = grid_search(paths, grid, slices)
    stopped = _stopped_notes(halving) if halving else {}
    rows = [
        _run_status(campaign_dir, run.id, gpus, cpus, slices[run.base], now, stopped.get(run.id))
        for run, gpus, cpus in planned_runs(plan)
    ]
    states = (
        *STATES,
        *([DIVERGED] if any(row.state == DIVERGED for row in rows) else []),
        *([STOPPED] if halving else []),
    )
    counts = {state: sum(row.counted == state for row in rows) for state in states}
    return CampaignStatus(
        campaign=plan["campaign"],
        runs=rows,
        counts=counts,
        gpu_hours=sum(row.wall_s * row.gpus for row in rows) / 3600,
        cpu_hours=sum(row.wall_s * row.cpus for row in rows) / 3600,
        eta_s=_eta(rows, counts["running"]),
        brackets=_bracket_lines(halving, rows) if halving else [],
        retired=sorted({path.name for path in paths.runs.glob("*") if path.is_dir()} - {row.run for row in rows}),
    )


def _stopped_notes(halving: Halving) -> dict[str, str]:
    """Each run a rung stopped, with why: its point's rank and mean loss there, and how many went on."""
    notes = {}
    for bracket in halving.groups:
        rungs = halving.rungs(bracket)
        for rung in halving.walk(bracket):
            if rung.decision is None:
                break
            epoch, decision = rung.epoch, rung.decision
            for rank, entry in enumerate(decision["ranking"], 1):
                if entry["point"] in rung.past_ids:
                    continue
                mean = (
                    "no mean subset loss"
                    if entry["mean_loss"] is None
                    else f"mean subset loss {entry['mean_loss']:.4f}"
                )
                note = (
                    f"stopped at rung {rungs.index(epoch) + 1}, epoch {epoch} (bracket {bracket.name}: ranked {rank} "
                    f"of {len(decision['ranking'])}, {mean}; kept {len(rung.past)})"
                )
                notes.update({run_id: note for run_id in entry["losses"]})
    return notes


def _bracket_lines(halving: Halving, rows: list[RunStatus]) -> list[str]:
    """'bracket synchronous: rung 2 of 2 decided, 1 of 4 points train on', or the rung it waits
    for and how many of its candidates' runs have reached it (the note of each waiting row says so)."""
    reached = {row.run: row for row in rows}
    lines = []
    for bracket in halving.groups:
        rungs = halving.rungs(bracket)
        decided, left = 0, len(bracket.points)
        waiting = ""
        for rung in halving.walk(bracket):
            epoch = rung.epoch
            if rung.decision is None:
                runs = bracket.runs(rung.candidates)
                there = [reached[run.id] for run in runs if reached[run.id].epochs_done >= epoch]
                for row in there:
                    if row.state == "pending":
                        row.detail = f"{row.detail}, waiting for rung {decided + 1}'s decision"
                waiting = f"waiting for rung {decided + 1} ({len(there)} of {len(runs)} runs at epoch {epoch})"
                break
            decided, left = decided + 1, len(rung.past)
        done = (
            f"rung {decided} of {len(rungs)} decided, {left} of {len(bracket.points)} points train on"
            if decided
            else ""
        )
        lines.append(f"bracket {bracket.name}: " + "; ".join(part for part in (done, waiting) if part))
    return lines


def _eta(rows: list[RunStatus], running: int) -> float | None:
    """Seconds until every run that has not failed nor stopped is validated; None before any job finished."""
    left = [row for row in rows if row.state not in ("failed", "done", DIVERGED, STOPPED)]
    slices = sum(row.slices - row.slices_done for row in left)
    validations = len(left)
    trained = [seconds for row in rows for seconds in row.slice_seconds]
    validated = [row.validation_seconds for row in rows if row.validation_seconds is not None]
    if not left:
        return 0.0
    if not trained:
        return None
    validation = sum(validated) / len(validated) if validated else 0.0
    return (slices * sum(trained) / len(trained) + validations * validation) / max(running, 1)


def _run_status(
    campaign_dir: Path, run: str, gpus: int, cpus: int, plan: SlicePlan, now: float, stopped: str | None = None
) -> RunStatus:
    """One run's row; `stopped`: why a rung stopped it (successive halving), None if none did."""
    files = CampaignPaths(Path(campaign_dir)).run(run)
    epochs, diverged = _epoch_records(files.metrics)
    done_epochs = len(epochs)
    ends = list(plan.ends)
    slices_done = sum(end <= done_epochs for end in ends)
    row = RunStatus(
        run=run,
        state="pending",
        detail="",
        epochs_done=done_epochs,
        epochs=ends[-1],
        slices_done=slices_done,
        slices=len(ends),
        gpus=gpus,
        cpus=cpus,
    )
    if epochs:
        row.loss, row.accuracy = epochs[-1].get("val_loss"), epochs[-1].get("val_accuracy")
        row.loss_epoch = epochs[-1].get("epoch", done_epochs)
        row.wall_s = sum(record.get("wall_s", 0.0) for record in epochs)
        for start, end in itertools.pairwise([0, *ends]):
            if end <= done_epochs:
                row.slice_seconds.append(sum(record.get("wall_s", 0.0) for record in epochs[start:end]))
    results = read_json(files.results) if files.results.is_file() else None
    holder = live_holder(files.directory)
    if diverged is not None and files.final.is_file():  # the trainer's decision, recorded with its final records
        row.state, row.detail = DIVERGED, f"diverged at step {diverged.get('step')} ({diverged.get('rule')})"
        row.wall_s += _stopped_epoch_seconds(epochs, diverged, files.record)
    elif isinstance(results, dict):
        row.state = "done"
        row.full_loss = results.get("loss")
        row.validation_seconds = results.get("wall_seconds")
    elif holder is not None:  # the running job's epochs so far are in its elapsed time
        finished = ends[slices_done - 1] if slices_done else 0
        row.wall_s = sum(record.get("wall_s", 0.0) for record in epochs[:finished]) + max(0.0, now - holder.started)
        validating = files.final.is_file() and files.best.is_file()
        row.state = "validating" if validating else "training"
        row.detail = "full validation" if validating else f"slice {min(slices_done + 1, len(ends))} of {len(ends)}"
    elif stopped is not None:  # its rung's decision: an earlier job's failure log is history
        row.state, row.detail = STOPPED, stopped
    elif (failure := _failure(campaign_dir, run)) is not None:
        row.state, row.detail = "failed", failure
    elif files.final.is_file():
        row.detail = "trained, waiting for validation"
    elif slices_done:
        row.detail = f"{slices_done} of {len(ends)} slices done"
    return row


_READ: dict[Path, tuple[tuple[int, int], tuple[list[dict[str, Any]], dict[str, Any] | None]]] = {}
"""Epoch records by file, with the (mtime, size) they were read at: a process that asks again
(Snakemake's console, rewriting status pages) reads only the files that changed."""


def _epoch_records(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """metrics.jsonl's epoch records and its divergence decision (None: none), without parsing its
    many step records; a line being written (no newline yet) is left out."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return [], None
    key = (stat.st_mtime_ns, stat.st_size)
    if path in _READ and _READ[path][0] == key:
        return _READ[path][1]
    records = []
    for line in path.read_bytes().splitlines(keepends=True):
        if line.endswith(b"\n") and _RECORD.search(line):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    epochs = [record for record in records if record.get("type") == "epoch"]
    diverged = next((record for record in reversed(records) if record.get("type") == DIVERGED), None)
    _READ[path] = (key, (epochs, diverged))
    return epochs, diverged


def _stopped_epoch_seconds(epochs: list[dict[str, Any]], diverged: dict[str, Any], run_record: Path) -> float:
    """The training time of a diverged run's last, unfinished epoch, which no epoch record holds: its
    tokens at the mean rate of the finished epochs, or (none finished) run.json's start to end."""
    rates = [record["tokens_per_s"] for record in epochs if record.get("tokens_per_s")]
    if rates:
        done = epochs[-1].get("tokens", 0) if epochs else 0
        return max(0.0, (diverged.get("tokens", done) - done) / (sum(rates) / len(rates)))
    record = read_json(run_record) if run_record.is_file() else None
    try:
        ended, started = (datetime.strptime(record[key], "%Y-%m-%dT%H:%M:%S%z") for key in ("ended", "started"))
    except (KeyError, TypeError, ValueError):
        return 0.0
    return max(0.0, (ended - started).total_seconds())


def _failure(campaign_dir: Path, run: str) -> str | None:
    """The error of the run's last job, if that job failed: its log and last line (`job_failure`)."""
    failure = job_failure(CampaignPaths(Path(campaign_dir)), run)
    if failure is None:
        return None
    log, lines = failure
    return f"{log.relative_to(campaign_dir).as_posix()}: {lines[-1].strip()[:160]}"


# --- output ---

COLUMNS = ("run", "state", "epochs", "subset val loss", "subset acc.", "full val loss", "wall", "note")
LOSSES = (
    "subset val loss: the last epoch's check on a fixed validation subset; "
    "full val loss: the whole validation split, which the report ranks runs by."
)
"""What the two loss columns are, under the table."""
_COLOURS = {
    "done": "32",
    "training": "36",
    "validating": "36",
    "failed": "31",
    "pending": "2",
    STOPPED: "33",
    DIVERGED: "33",
}


def format_status(status: CampaignStatus, colour: bool = False) -> str:
    """The table and the campaign line; `colour`: ANSI colours for a terminal, else plain text."""
    rows = [_cells(row) for row in status.runs]
    widths = [max(len(column), *(len(cells[i]) for cells in rows)) for i, column in enumerate(COLUMNS)]
    lines = [_joined(COLUMNS, widths)]
    for row, cells in zip(status.runs, rows, strict=True):
        text = _joined(cells, widths)
        lines.append(f"\033[{_COLOURS[row.state]}m{text}\033[0m" if colour else text)
    lines.append(LOSSES)
    lines.extend(status.brackets)
    if status.retired:
        lines.append(f"retired (kept on disk, no longer in the campaign file's grid): {', '.join(status.retired)}")
    lines.append(campaign_line(status))
    return "\n".join(lines)


def _joined(cells: tuple[str, ...] | list[str], widths: list[int]) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()


def campaign_line(status: CampaignStatus) -> str:
    counts = status.counts
    eta = "unknown (no slice finished yet)" if status.eta_s is None else format_duration(status.eta_s)
    stopped = f"{counts[STOPPED]} stopped, " if STOPPED in counts else ""
    stopped += f"{counts[DIVERGED]} diverged, " if counts.get(DIVERGED) else ""
    return (
        f"campaign {status.campaign}: {len(status.runs)} runs: {counts['done']} done, {counts['running']} running, "
        f"{stopped}{counts['failed']} failed, {counts['pending']} pending; {format_amount(status.gpu_hours)} GPU-hours, "
        f"{format_amount(status.cpu_hours)} CPU-hours so far; ETA {eta}"
    )


def finished(status: CampaignStatus) -> bool:
    """Whether no run trains, validates or waits any more (a stopped run waits for nothing): the
    page has nothing left to follow."""
    return status.counts["running"] == status.counts["pending"] == 0


def _cells(row: RunStatus) -> list[str]:
    training = row.state == "training"
    return [
        row.run,
        f"training {row.detail}" if training else row.state,
        f"{row.epochs_done}/{row.epochs}",
        f"{row.loss:.4f} at epoch {row.loss_epoch}" if row.loss is not None else "-",
        f"{100 * row.accuracy:.2f} %" if row.accuracy is not None else "-",
        f"{row.full_loss:.4f}" if row.full_loss is not None else "-",
        format_duration(row.wall_s) if row.wall_s else "-",
        "" if training else row.detail,
    ]


def write_status_page(campaign_dir: Path, status: CampaignStatus) -> Path:
    """results/<campaign>/status.html: the same table, reloading itself every REFRESH_S seconds until
    the campaign has finished."""
    rows = "\n".join(
        f'<tr class="{row.state}">' + "".join(f"<td>{html.escape(cell)}</td>" for cell in _cells(row)) + "</tr>"
        for row in status.runs
    )
    header = "".join(f"<th>{html.escape(column)}</th>" for column in COLUMNS)
    items = "".join(f"\n<li>{html.escape(line)}</li>" for line in status.brackets)
    brackets = f'\n<ul id="brackets">{items}\n</ul>' if items else ""  # successive halving's rungs
    reloads = (
        "no run is left to train or validate, so this page no longer reloads"
        if finished(status)
        else f"this page reloads every {REFRESH_S} s"
    )
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
{"" if finished(status) else f'<meta http-equiv="refresh" content="{REFRESH_S}">'}
<title>{html.escape(status.campaign)} — ebd2n campaign status</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 1.5rem; color: #1d232b; }}
table {{ border-collapse: collapse; }} th, td {{ padding: 0.2rem 0.7rem; text-align: left; border-bottom: 1px solid #e3e7ec; }}
td:nth-child(n+3):nth-child(-n+7) {{ text-align: right; font-variant-numeric: tabular-nums; }}
tr.done td:nth-child(2) {{ color: #1e7a3c; }} tr.failed td {{ color: #b3261e; }}
tr.training td:nth-child(2), tr.validating td:nth-child(2) {{ color: #1f5fa8; font-weight: 600; }} tr.pending {{ color: #6b7480; }}
tr.stopped td:nth-child(2), tr.diverged td:nth-child(2) {{ color: #8a5a00; }}
</style>
</head>
<body>
<h1>{html.escape(status.campaign)}</h1>
<p id="campaign">{html.escape(campaign_line(status))}</p>{brackets}
<p class="muted">Written {time.strftime("%Y-%m-%d %H:%M:%S")} by <code>ebd2n status</code>; {reloads}.
The report, once the campaign is done: <a href="report/index.html">report/index.html</a>.</p>
<table id="runs"><thead><tr>{header}</tr></thead><tbody>
{rows}
</tbody></table>
<p class="muted">{html.escape(LOSSES)}</p>
</body>
</html>
"""
    path = CampaignPaths(Path(campaign_dir)).status_page
    atomic_write_text(path, page)
    return path
