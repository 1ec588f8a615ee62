"""The audit of a successive-halving campaign: every rung decision recomputed from the runs.

Each decision file under search/ is decided again from its own inputs (the runs it ranks, its
share kept, the earlier decisions it names) with the losses the runs' metrics.jsonl record at the
rung: a loss edited in either place, a promoted loser, a decision no job of this grid would make
are named with their rung and run. The decisions the frozen grid makes now must all be there, and
every run's directory must match its fate: a stopped run ends at its rung (with the checkpoint it
would continue from), and one that trained on past it is named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ebd2n.atomic import is_temporary, remove_temporaries
from ebd2n.audit.checks import Check
from ebd2n.audit.runs import RunView, json_object
from ebd2n.campaign.halving import Halving
from ebd2n.campaign.history import GridHistory
from ebd2n.campaign.rung_decision import (
    DECISION_NAME,
    decide,
    decision_digest,
    decision_rule,
    epoch_loss,
    read_decision,
    recorded_epochs,
)
from ebd2n.campaign.runs import parse_run_id
from ebd2n.campaign.search import point_id
from ebd2n.errors import UserError
from ebd2n.layout import (
    FINAL,
    FROZEN,
    FROZEN_SPEC,
    METRICS,
    RESULTS_JSON,
    checkpoint_epoch,
    slice_checkpoint,
    slice_record,
    slice_record_epoch,
)
from ebd2n.train.records import metrics

_COMPARED = ("ranking", "promoted", "carried", "continuing")


def check_search(halving: Halving, views: dict[str, RunView], history: GridHistory) -> Check:
    """Every decision recomputed and traced back to a recorded grid; the current ones present; each
    run where its fate puts it."""
    check = Check("successive-halving decisions recomputed from the runs' subset losses", unit="decisions")
    paths = halving.paths
    grids = _recorded_grids(history)
    for directory in sorted(paths.search.iterdir()) if paths.search.is_dir() else []:
        if directory.is_dir():
            remove_temporaries(directory)  # of a killed decide job; one still writing is passed over below
    for path in sorted(paths.search.rglob("*")) if paths.search.is_dir() else []:
        if path.is_file() and not is_temporary(path):
            check.examined += 1
            check.violations += _decision_problems(halving, path, grids)
    fates: dict[str, int | None] = {}
    for bracket in halving.groups:
        for rung in halving.walk(bracket, read=readable):
            if rung.decision is None:
                check.violations.append(
                    f"bracket {bracket.name} rung {rung.epoch}: no decision ({_where(paths, rung.path)}); "
                    "the workflow makes it once the rung's runs reached it"
                )
    try:
        fates = halving.outcome(read=readable)
    except UserError as error:
        check.violations.append(str(error))
    for run_id, fate in fates.items():
        view = views.get(run_id)
        if fate is not None:
            check.violations += [f"{run_id}: {problem}" for problem in _stopped_problems(halving, view, fate)]
    return check


def readable(_bracket: str, _epoch: int, path: Path) -> dict | None:
    """A decision for walking the rungs: an unreadable one counts as absent (named by its own check)."""
    try:
        return read_decision(path)
    except UserError:
        return None


def _where(paths, path: Path) -> str:
    return path.relative_to(paths.directory).as_posix()


def _recorded_grids(history: GridHistory) -> dict[str, list[tuple[float, tuple[int, ...], set[str]]]]:
    """Per bracket, each recorded grid a decision may be made under: (keep, seeds, point ids)."""
    grids: dict[str, list] = {}
    for grid in history.versions:
        if grid.search.halving:
            for bracket in grid.brackets():
                grids.setdefault(bracket.name, []).append(
                    (grid.search.keep, bracket.seeds, {point_id(*point) for point in bracket.points})
                )
    return grids


def _untraced(halving: Halving, path: Path, decision: dict, grids: dict, epoch: int) -> str | None:
    """Why a decision is not one this campaign's recorded grids make, None when it is: its share
    and seeds are a recording's, and its candidates are that grid's points (first rung) or the
    points the decisions it draws from promoted at the rung before."""
    seeds = _seeds(decision)
    points = {entry["point"] for entry in decision["ranking"]}
    recorded = [
        grid
        for grid in grids.get(path.parent.name, [])
        if grid[0] == decision["keep"] and tuple(sorted(grid[1])) == seeds
    ]
    if not recorded:
        return f"keep {decision['keep']} with seeds {list(seeds)} is no recorded grid's ({FROZEN}/{FROZEN_SPEC}/)"
    rungs = halving.rungs(halving.bracket(path.parent.name))
    if epoch == rungs[0]:
        return (
            None
            if any(grid[2] == points for grid in recorded)
            else "its candidates are not the points of a recorded grid"
        )
    drawn = decision.get("drawn_from") or []
    before = rungs[rungs.index(epoch) - 1]
    if not drawn or any(
        DECISION_NAME.fullmatch(name) is None
        or not name.startswith(f"rung-{before}-")
        or not (path.parent / name).is_file()
        for name in drawn
    ):
        return f"it draws its candidates from {drawn}, not from decisions of rung {before} that are there"
    drawn_from = [read_decision(path.parent / name) or {} for name in drawn]
    if not any(other.get("keep") == decision["keep"] and _seeds(other) == seeds for other in drawn_from):
        return (
            f"none of the decisions of rung {before} it draws from ({', '.join(drawn)}) "
            "was made with its keep and seeds"
        )
    promoted = {point for other in drawn_from for point in other.get("continuing", [])}
    return (
        None
        if promoted == points
        else f"its candidates are not the points rung {before} promoted ({', '.join(sorted(promoted))})"
    )


def _seeds(decision: dict) -> tuple[int, ...]:
    """The seeds a decision ranked, from its run ids."""
    return tuple(
        sorted({parse_run_id(run).seed for entry in decision.get("ranking", []) for run in entry.get("losses", {})})
    )


def _decision_problems(halving: Halving, path: Path, grids: dict) -> list[str]:
    """What is wrong with one decision file: its name, its inputs, its grid, or what it decided."""
    paths = halving.paths
    where = _where(paths, path)
    match = DECISION_NAME.fullmatch(path.name)
    try:
        bracket = halving.bracket(path.parent.name) if path.parent.parent == paths.search else None
    except UserError:
        bracket = None
    if match is None or bracket is None:
        return [f"{where}: not a rung decision of this campaign (search/<bracket>/rung-<epoch>-<digest>.json)"]
    epoch = int(match["epoch"])
    if epoch not in halving.rungs(bracket):
        return [f"{where}: epoch {epoch} is not a rung of bracket {bracket.name} {list(halving.rungs(bracket))}"]
    try:
        decision = read_decision(path)
    except UserError as error:
        return [f"{where}: {error}"]
    try:
        candidates = [bracket.point(entry["point"]) for entry in decision["ranking"]]
        keep, seed_noise = float(decision["keep"]), decision_rule(decision)
        earlier_names = list(decision.get("earlier") or [])
        seeds = list(_seeds(decision))
        untraced = _untraced(halving, path, decision, grids, epoch)
    except (KeyError, TypeError, ValueError, AttributeError, UserError) as error:
        return [f"{where}: rung {epoch}: not a decision of this grid ({type(error).__name__}: {error})"]
    problems = [f"{where}: rung {epoch}: {untraced}"] if untraced else []
    runs = bracket.runs(candidates, seeds)
    if decision_digest([run.id for run in runs], keep, seed_noise) != match["digest"]:
        problems.append(f"{where}: rung {epoch}: its name does not match the runs and keep it records (edited?)")
    losses = {}
    for run in runs:
        losses[run.id] = epoch_loss(paths.run(run.id).metrics, epoch) if paths.run(run.id).metrics.is_file() else None
        recorded = next(
            (
                entry["losses"].get(run.id)
                for entry in decision["ranking"]
                if isinstance(entry.get("losses"), dict) and run.id in entry["losses"]
            ),
            None,
        )
        if (
            losses[run.id] is None and metrics(paths.run(run.id).metrics).divergence is None
        ):  # diverged: none, ranks last
            problems.append(
                f"{where}: rung {epoch}: {run.id} has no subset-validation loss at epoch {epoch} in its {METRICS}"
            )
        elif not _same(recorded, losses[run.id]):
            problems.append(
                f"{where}: rung {epoch}: {run.id} is recorded with loss {recorded}, its {METRICS} says "
                f"{losses[run.id]} at epoch {epoch}"
            )
    earlier = {}
    for name in earlier_names:
        try:
            earlier[name] = (read_decision(path.parent / name) or {})["continuing"]
        except (KeyError, UserError):
            problems.append(f"{where}: rung {epoch}: names the earlier decision {name}, which is gone or unreadable")
    if problems:
        return problems
    diverged = frozenset(run.id for run in runs if metrics(paths.run(run.id).metrics).divergence is not None)
    recomputed = decide(
        bracket, epoch, candidates, keep, losses, earlier, decision.get("drawn_from") or [], seeds, seed_noise, diverged
    )
    for key in _COMPARED:
        if not _same(decision.get(key), recomputed[key]):
            problems.append(
                f"{where}: rung {epoch}: {key} {_points(decision.get(key))} is not what the runs decide, "
                f"{_points(recomputed[key])}"
            )
    return problems


def _same(recorded: Any, recomputed: Any) -> bool:
    """Equal as the decision file writes them (a NaN loss, which never equals itself, included)."""
    return json.dumps(recorded, sort_keys=True) == json.dumps(recomputed, sort_keys=True)


def _points(value) -> str:
    if isinstance(value, list) and all(isinstance(entry, dict) for entry in value):
        value = [entry.get("point") for entry in value]
    return "[" + ", ".join(map(str, value)) + "]" if isinstance(value, list) else repr(value)


def _stopped_problems(halving: Halving, view: RunView | None, rung: int) -> list[str]:
    """A run stopped at `rung` keeps what it needs to continue, and nothing of training on."""
    where = f"stopped at rung {rung}"
    if view is None:
        return [f"{where}, but its run directory is missing"]
    if metrics(view.paths.metrics).divergence is not None:
        return []  # it diverged: its final records stand (ebd2n.audit.outcomes checks that it stopped there)
    problems = []
    on = [
        name
        for name in view.files
        if name in (FINAL, RESULTS_JSON) or max(checkpoint_epoch(name) or 0, slice_record_epoch(name) or 0) > rung
    ]
    if on:
        problems.append(f"{where}, but it trained on: {', '.join(on)}")
    later = [epoch for epoch in recorded_epochs(view.paths.metrics) if epoch > rung]
    if later:
        problems.append(f"{where}, but its {METRICS} records epoch {later[0]}: it trained on")
    for name in (slice_record(rung), slice_checkpoint(rung)):
        if name not in view.files:
            problems.append(f"{where}, but {name} is missing (it continues from there when a decision promotes it)")
    checkpoint = slice_checkpoint(rung)
    recorded, _problem = (
        json_object(view.paths.checkpoint_ledger) if view.paths.checkpoint_ledger.is_file() else (None, None)
    )
    if checkpoint in view.hashes and (recorded or {}).get(checkpoint) != view.hashes[checkpoint]:
        problems.append(f"{where}, but {checkpoint} does not match its SHA-256 in {view.paths.checkpoint_ledger.name}")
    return problems
