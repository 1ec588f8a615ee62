"""Where each run of a campaign ends, and the records it must leave there.

Under the full grid every run trains its whole budget. Under successive halving a run's fate is the
rung it stopped at, or None once every rung let it train on; a run whose bracket still waits for a
decision has no fate yet. The workflow asks here what to make (`run_records`), the audit which runs
must be finished (`finished_runs`): one spelling of both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ebd2n.campaign.grid import Grid
from ebd2n.campaign.halving import Halving
from ebd2n.campaign.runs import Run
from ebd2n.campaign.search import Bracket
from ebd2n.layout import CampaignPaths
from ebd2n.train.plan import SlicePlan

Read = Callable[[str, int, Path], dict[str, Any] | None]
"""Reads a rung decision: (bracket name, epoch, path) -> its content, None while it is not made."""

UNDECIDED = 0
"""The fate of a run whose bracket has not decided it yet (not None: None trains to the end)."""


def run_fates(grid: Grid, halving: Halving | None, read: Read | None = None) -> dict[str, int | None]:
    """Each run with a fate so far: None (it trains its whole budget) or the rung it stopped at."""
    if halving is None:
        return {run.id: None for run in grid.runs()}
    return halving.outcome(read=read)


def finished_runs(runs: Iterable[Run], fates: dict[str, int | None]) -> list[Run]:
    """The runs that must end finished (full validation): those whose fate is the whole budget."""
    return [run for run in runs if fates.get(run.id, UNDECIDED) is None]


def run_records(paths: CampaignPaths, run: Run, plan: SlicePlan, until: int | None) -> list[Path]:
    """What a run leaves up to epoch `until` (None: its whole budget): each slice record before the
    last slice, then, for the whole budget, its final checkpoint, best.json and results.json."""
    files = paths.run(run.id)
    ends = [end for end in plan.ends[:-1] if until is None or end <= until]
    records = [files.slice_record(end) for end in ends]
    return records if until is not None else [*records, files.final, files.best, files.results]


def bracket_records(paths: CampaignPaths, halving: Halving, bracket: Bracket, read: Read | None) -> list[Path]:
    """What one bracket's runs leave as far as their fates take them, and every decision made so far."""
    plan = halving.plans[bracket.base]
    fates = halving.fates(bracket, read=read)
    records = [path for run in bracket.runs() for path in run_records(paths, run, plan, fates.get(run.id, UNDECIDED))]
    return records + [rung.path for rung in halving.walk(bracket, read=read)]
