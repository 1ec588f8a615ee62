"""Where a campaign stands, while it runs: one row per run and the campaign's totals.

It reads only files the campaign's jobs write: the plan the workflow writes when it starts
(status/plan.json: the grid, each job's GPUs and CPUs, each base recipe's slices), and
each run directory (metrics.jsonl, final.pt, results.json, and the lease of a job working there:
a run whose lease has a live holder is running; each job's log under logs/ holds its error). It
never asks a scheduler nor reads Snakemake's records, so it works the same on a laptop and on a
SLURM cluster, and it can run as often as wanted.

A run's time so far is the training time the trainer recorded for its finished slices (epoch
`wall_s`; validation and job start-up excluded) plus how long its running job has run; hours are
that time the job's GPUs or CPUs, a packed run's (`execution.pack`) divided among its pack's runs.
A run that branched from a shorter horizon's trunk counts from its branch on: the trunk's epochs
are its parent's time. The ETA is the remaining jobs (slices and validations) times the mean
duration of the finished ones (the trainer's slice times, validation's recorded time), divided by
the number of jobs running now (at least one).

Under successive halving the plan also holds the campaign's search: each bracket's rung decisions
(search/<bracket>/, walked by `ebd2n.campaign.halving`) say which runs stopped at a rung. A
stopped run is a state of its own, neither failed nor left to do: the ETA counts the runs that
still train (those whose fate no rung has decided yet among them), and a campaign whose other
runs are done is finished. One line per bracket says the rung it is at.

The plan is written and read in ebd2n.campaign.status_plan; the table that shows a status is
ebd2n.campaign.status_display's, the page ebd2n.report.status_page's (it draws the runs' curves,
which a status does not hold: reading every step of every run at each status costs seconds at
1,000 runs).
"""

from __future__ import annotations

import collections
import csv
import itertools
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ebd2n.campaign.grid import grid_from_record
from ebd2n.campaign.halving import Halving
from ebd2n.campaign.job_logs import JobLogs, classify_run
from ebd2n.campaign.plans import grid_search
from ebd2n.campaign.status_plan import planned_runs, read_plan
from ebd2n.errors import UserError
from ebd2n.layout import CampaignPaths
from ebd2n.outcomes import FINISHED, RUNNING, LiveState, Outcome, status_word
from ebd2n.train.lease import live_holder
from ebd2n.train.plan import SlicePlan, parse_plan
from ebd2n.train.records import DIVERGENCE, Divergence, RunRecord

DONE = status_word(Outcome.COMPLETE)
STATES = (DONE, RUNNING, Outcome.FAILED.value, LiveState.PENDING.value)
"""The campaign line's counts; a run that trains or validates counts as running. A stopped run
(successive halving) and a diverged one are counted apart."""
LIVE = frozenset({LiveState.TRAINING, LiveState.VALIDATING})


@dataclass
class RunStatus:
    """One run's row."""

    run: str
    state: str
    """Its outcome or, unfinished, its live state, in status's words (ebd2n.outcomes.status_word)."""
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
    charged_s: float = 0.0
    """Its share of `wall_s`: a packed run's time is its pack's, split among the pack's runs."""
    gpus: int = 0
    cpus: int = 1
    slice_seconds: list[float] = field(default_factory=list)
    """Duration of each finished training job of the run."""
    validation_seconds: float | None = None
    """Duration of its validation job, once finished."""

    @property
    def counted(self) -> str:
        """The campaign line's bucket."""
        return RUNNING if self.state in LIVE else self.state


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


def closing_line(paths: CampaignPaths, partial: bool) -> tuple[bool, str]:
    """The workflow's last console line after its jobs ran, and whether the invocation succeeded:
    the report, once the audit passed, and every run outcome's count; a run stopped where it was
    asked to (`partial`: --until, a target, --allowed-rules) says so; any other ends unfinished,
    non-zero. The line names only files that exist."""
    if paths.audit_passed.is_file() and paths.report_index.is_file():
        return True, f"report: {paths.report_index} (audit: {paths.audit}){_outcome_counts(paths)}"
    status = f"`ebd2n status {paths.directory}` lists each run's state"
    if partial:
        return True, f"stopped where asked (--until, a target, --allowed-rules); without it this goes on; {status}"
    return False, f"not finished: the audit has not passed (no {paths.audit_passed}); {status}"


def _outcome_counts(paths: CampaignPaths) -> str:
    """`; runs: 30 complete, 6 diverged`: every outcome of the runs table, most frequent first."""
    try:
        with open(paths.runs_csv, encoding="utf-8", newline="") as file:
            outcomes = collections.Counter(row.get("status") or "" for row in csv.DictReader(file))
    except OSError:
        return ""
    counts = ", ".join(f"{count} {outcome}" for outcome, count in outcomes.most_common() if outcome)
    return f"; runs: {counts}" if counts else ""


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
    logs = JobLogs(paths)
    rows = [
        _run_status(campaign_dir, run.id, gpus, cpus, slices[run.base], now, logs, stopped.get(run.id))
        for run, gpus, cpus in planned_runs(plan)
    ]
    states = (
        *STATES,
        *([Outcome.DIVERGED.value] if any(row.state == Outcome.DIVERGED for row in rows) else []),
        *([Outcome.STOPPED.value] if halving else []),
    )
    counts = {state: sum(row.counted == state for row in rows) for state in states}
    return CampaignStatus(
        campaign=plan["campaign"],
        runs=rows,
        counts=counts,
        gpu_hours=sum(row.charged_s * row.gpus for row in rows) / 3600,
        cpu_hours=sum(row.charged_s * row.cpus for row in rows) / 3600,
        eta_s=_eta(rows, counts[RUNNING]),
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
                    if row.state == LiveState.PENDING:
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
    left = [row for row in rows if row.state not in {status_word(outcome) for outcome in FINISHED}]
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
    campaign_dir: Path,
    run: str,
    gpus: int,
    cpus: int,
    plan: SlicePlan,
    now: float,
    logs: JobLogs,
    stopped: str | None = None,
) -> RunStatus:
    """One run's row, classified by ebd2n.outcomes.run_outcome; `stopped`: why a rung stopped it
    (successive halving), None if none did."""
    files = CampaignPaths(Path(campaign_dir)).run(run)
    record = RunRecord(files.directory)
    epochs, divergence = record.metrics.epochs, record.divergence
    trunk = plan.branch if plan.branch and files.lineage.is_file() else 0  # the parent's epochs, timed there
    done_epochs = len(epochs)
    ends = list(plan.ends)
    slices_done = sum(end <= done_epochs for end in ends)
    shares = _pack_shares(record)

    def shared(epoch: Any) -> int:
        """How many runs trained `epoch` (1-based) in one job with this one (1: alone)."""
        end = next((end for end in ends if isinstance(epoch, int) and end >= epoch), None)
        return shares.get(end, 1)

    row = RunStatus(
        run=run,
        state=LiveState.PENDING.value,
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
        row.wall_s = sum(record.get("wall_s", 0.0) for record in epochs[trunk:])
        row.charged_s = sum(record.get("wall_s", 0.0) / shared(record.get("epoch")) for record in epochs[trunk:])
        for start, end in itertools.pairwise([trunk, *ends] if not trunk else ends):
            if end <= done_epochs:
                row.slice_seconds.append(sum(record.get("wall_s", 0.0) for record in epochs[start:end]))
    results = record.results
    holder = live_holder(files.directory)
    outcome, job = classify_run(record, logs, stopped=stopped is not None, leased=holder is not None)
    if outcome == Outcome.DIVERGED:
        divergence = divergence or Divergence.of((results or {}).get(DIVERGENCE))  # validation's copy of it
        row.state, row.detail = outcome.value, divergence.describe() if divergence else outcome.value
        if divergence is not None:
            row.wall_s += (stopped_s := _stopped_epoch_seconds(epochs, divergence, record))
            row.charged_s += stopped_s / shared(divergence.epoch)
    elif outcome == Outcome.COMPLETE:
        row.state = DONE
        row.full_loss = results.get("loss")
        row.validation_seconds = results.get("wall_seconds")
    elif outcome == Outcome.FAILED and results is not None:  # validation measured it: a non-finite loss
        row.state, row.detail = outcome.value, str(results.get("reason") or "")
    elif holder is not None or (job is not None and job.running):  # the running job's epochs so far are in its time
        started = holder.started if holder is not None else job.started
        finished = ends[slices_done - 1] if slices_done else 0
        own = epochs[trunk:finished]
        elapsed = max(0.0, now - started) if started is not None else 0.0
        row.wall_s = sum(record.get("wall_s", 0.0) for record in own) + elapsed
        row.charged_s = sum(record.get("wall_s", 0.0) / shared(record.get("epoch")) for record in own)
        row.charged_s += elapsed / shared(finished + 1)
        validating = (record.has_final and record.has_best) or (job is not None and job.validating)
        row.state = (LiveState.VALIDATING if validating else LiveState.TRAINING).value
        starting = "" if holder is not None or validating else ", starting"
        row.detail = (
            "full validation" if validating else f"slice {min(slices_done + 1, len(ends))} of {len(ends)}{starting}"
        )
    elif outcome == Outcome.STOPPED:  # its rung's decision: an earlier job's failure log is history
        row.state, row.detail = outcome.value, stopped
    elif outcome == Outcome.FAILED:
        row.state, row.detail = (
            outcome.value,
            f"{job.log.relative_to(campaign_dir).as_posix()}: {job.lines[-1].strip()[:160]}",
        )
    elif record.has_final:
        row.detail = "trained, waiting for validation"
    elif slices_done:
        row.detail = f"{slices_done} of {len(ends)} slices done"
    return row


def _pack_shares(record: RunRecord) -> dict[int, int]:
    """Slice end -> how many runs trained it in one job with this one: what its finished job recorded
    (jobs.jsonl `pack`, the runs that trained), else for a running one its pack's members (packs.json;
    a damaged one, which the audit names, counts the run's time as its own)."""
    shares = {end: len(members) for end, members in record.packs.items()}
    for job in record.jobs:
        if job.get("kind") == "train" and isinstance(job.get("epoch"), int):
            shares[job["epoch"]] = job.get("pack", 1)
    return shares


def _stopped_epoch_seconds(epochs: list[dict[str, Any]], diverged: Divergence, record: RunRecord) -> float:
    """The training time of a diverged run's last, unfinished epoch, which no epoch record holds: its
    tokens at the mean rate of the finished epochs, or (none finished) run.json's start to its end or
    to metrics.jsonl's last write, whichever is later (run.json counts whole seconds)."""
    rates = [record["tokens_per_s"] for record in epochs if record.get("tokens_per_s")]
    if rates:
        done = epochs[-1].get("tokens", 0) if epochs else 0
        tokens = done if diverged.tokens is None else diverged.tokens
        return max(0.0, (tokens - done) / (sum(rates) / len(rates)))
    try:
        ended, started = (
            datetime.strptime(record.run_json[key], "%Y-%m-%dT%H:%M:%S%z") for key in ("ended", "started")
        )
    except (KeyError, TypeError, ValueError):
        return 0.0
    metrics = record.paths.metrics
    last = metrics.stat().st_mtime if metrics.is_file() else 0.0
    return max(0.0, (ended - started).total_seconds(), last - started.timestamp())
