"""How a run ended, or where it stands: one enum of outcomes, one of live states, one precedence.

A foundation module because every layer states or reads outcomes: validation writes one into
results.json, the trainer decides a divergence, and status, collection, selection, the audit and
every page classify runs. They all classify through `run_outcome`, so a run is never `done` on one
page and `incomplete` on another, and a new state is one member and one line of the precedence.

Outcomes are results: a diverged, stopped or retired run is recorded and reported for what it is.
A run is failed only when something recorded it: results.json (a non-finite validation loss) or a
job that provably ended without its outputs (ebd2n.campaign.job_logs) — never because an output is
missing while its job may still be starting.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """How a run stands as a result (runs.csv's `status`)."""

    COMPLETE = "complete"
    """Trained and fully validated: its loss counts."""
    DIVERGED = "diverged"
    """The trainer stopped it because it diverged: a result, never a loss."""
    STOPPED = "stopped"
    """Successive halving stopped it at a rung."""
    RETIRED = "retired"
    """On disk, but the campaign file no longer declares its point or seed: kept, never selected."""
    FAILED = "failed"
    """A job of it ended without its outputs, or its validation measured a non-finite loss."""
    INCOMPLETE = "incomplete"
    """Not finished yet (see its `LiveState`)."""
    MISSING = "missing"
    """In the grid, with no run directory yet."""


class LiveState(StrEnum):
    """Where an unfinished run stands now."""

    PENDING = "pending"
    TRAINING = "training"
    VALIDATING = "validating"


class PointOutcome(StrEnum):
    """How a grid point (every seed of it) ended: groups.csv's `outcome`."""

    CONVERGED = "converged"
    """Every expected seed completed and none diverged: eligible for selection."""
    DIVERGED = "diverged"
    STOPPED = "stopped"
    INCOMPLETE = "incomplete"


FINISHED = frozenset({Outcome.COMPLETE, Outcome.DIVERGED, Outcome.STOPPED, Outcome.FAILED})
"""Outcomes no job changes any more (the ETA counts none of them)."""
RESULTS = frozenset({Outcome.COMPLETE, Outcome.DIVERGED})
"""Outcomes that are results of the campaign (a diverged run is one)."""
VALIDATED = frozenset({Outcome.COMPLETE, Outcome.DIVERGED, Outcome.FAILED})
"""The outcomes full validation writes into results.json."""

STATUS_WORDS: dict[str, str] = {Outcome.COMPLETE: "done"}
"""`ebd2n status`'s word for an outcome where it is not the outcome's own (a live state shows as
itself); `status_word` applies it."""
RUNNING = "running"
"""`ebd2n status`'s count of the runs a job trains or validates now."""


def status_word(state: str) -> str:
    """The word `ebd2n status` and status.html show for an outcome or live state."""
    return STATUS_WORDS.get(state, state)


def run_outcome(
    *, validated: str | None, diverged: bool, working: bool, failed: bool, stopped: bool = False, retired: bool = False
) -> Outcome:
    """A run's outcome from what its records say, in this precedence:
    1. retired: the campaign file no longer declares it, whatever its records say;
    2. diverged: the trainer's divergence decision, recorded with its final checkpoint;
    3. what validation recorded in results.json (`validated`: complete, diverged or failed);
    4. incomplete while a job works on it (`working`: a live lease or job start record);
    5. stopped at a rung (successive halving): an earlier job's failure log is history;
    6. failed: a job of it provably ended without its outputs;
    7. incomplete otherwise (pending, or between jobs)."""
    if retired:
        return Outcome.RETIRED
    if diverged:
        return Outcome.DIVERGED
    if validated in VALIDATED:
        return Outcome(validated)
    if working:
        return Outcome.INCOMPLETE
    if stopped:
        return Outcome.STOPPED
    if failed:
        return Outcome.FAILED
    return Outcome.INCOMPLETE


DIVERGED, ELIGIBLE, STOPPED = PointOutcome.DIVERGED.value, "eligible", PointOutcome.STOPPED.value
"""The facts of a grid point that decide its outcome, each a column of the grouped table."""
POINT_PRECEDENCE: tuple[tuple[str, PointOutcome], ...] = (
    (DIVERGED, PointOutcome.DIVERGED),
    (ELIGIBLE, PointOutcome.CONVERGED),
    (STOPPED, PointOutcome.STOPPED),
)
"""A grid point's outcome: the first of these facts that holds (any seed diverged; every expected
seed complete; stopped at a rung), else incomplete. groups.csv has a column for each fact."""


class CheckStatus(StrEnum):
    """How an audit check ended (audit.json's `status` of each check; ebd2n.audit.checks)."""

    PASSED = "passed"
    FAILED = "failed"
    NOT_APPLICABLE = "not applicable"
    """It had nothing to examine: no failure, said apart."""
    NOT_AUDITED = "not audited"
    """No audit ran yet (the report's word)."""
