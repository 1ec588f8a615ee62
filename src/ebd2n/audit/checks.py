"""The audit's Check record and the checks of the campaign as a whole: grid, members, plans, trainer, cache.

Each says what it examined; a check that examined nothing is "not applicable". The checks of each
run on its own are in `ebd2n.audit.run_checks` and `ebd2n.audit.run_history`, the report's in
`ebd2n.audit.report_check`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ebd2n.audit.runs import RunView
from ebd2n.campaign.grid import Grid
from ebd2n.campaign.horizons import parent_base
from ebd2n.campaign.plans import frozen_trainer_plan
from ebd2n.campaign.runs import Run, parse_run_id, split_base
from ebd2n.data import verify_cache
from ebd2n.errors import UserError
from ebd2n.fileidentity import HashMemory
from ebd2n.layout import SOURCE_HASH, CampaignPaths
from ebd2n.outcomes import CheckStatus
from ebd2n.provenance import source_hash
from ebd2n.train.plan import plan_json


@dataclass
class Check:
    """One audit check: what it covered and what it found wrong."""

    name: str
    examined: int = 0
    unit: str = "runs"
    violations: list[str] = field(default_factory=list)
    reason: str | None = None
    """Why the check examined nothing (it is then "not applicable")."""
    notes: list[str] = field(default_factory=list)
    """What it accepted and a reader should know (a run trained again)."""

    @property
    def status(self) -> str:
        if self.violations:
            return CheckStatus.FAILED
        return CheckStatus.PASSED if self.examined else CheckStatus.NOT_APPLICABLE

    @property
    def scope(self) -> str:
        return f"{self.examined} {self.unit}" if self.examined else (self.reason or f"no {self.unit}")

    def record(self) -> dict:
        return {
            "name": self.name,
            "scope": self.scope,
            "examined": self.examined,
            "status": self.status,
            "passed": self.status != CheckStatus.FAILED,
            "violations": self.violations,
            "notes": self.notes,
        }


def each_run(name: str, views: Iterable[RunView], problem: Callable[[RunView], Iterable[str]]) -> Check:
    """A check applied to every finished run; `problem` yields that run's violations."""
    check = Check(name)
    for view in views:
        if not view.finished:
            continue
        check.examined += 1
        check.violations += [f"{view.id}: {p}" for p in problem(view)]
    return check


def repository_relative(paths: CampaignPaths, message: str) -> str:
    """A message with the repository's absolute prefix taken off the paths it names."""
    return message.replace(f"{paths.repository}{os.sep}", "")


def check_grid(expected: list[Run], views: dict[str, RunView]) -> Check:
    check = Check("every grid point has every seed", len(expected))
    check.violations = [
        f"{run.id}: no finished run" for run in expected if not (run.id in views and views[run.id].finished)
    ]
    return check


def check_members(paths: CampaignPaths, expected: list[Run]) -> Check:
    """Every run directory is a run of the frozen grid (frozen/spec/): a run of another grid,
    copied in under the same campaign name, is named, whatever campaign.json says."""
    check = Check(
        f"every run directory is a run of the campaign's grid ({_where(paths, paths.frozen_spec)}/)",
        unit="run directories",
    )
    grid = {run.id for run in expected}
    for directory in sorted(paths.runs.glob("*")) if paths.runs.is_dir() else []:
        check.examined += 1
        where = _where(paths, directory)
        try:
            parse_run_id(directory.name)
        except UserError as error:
            check.violations.append(f"{where}: {error}")
            continue
        if directory.name not in grid:
            check.violations.append(
                f"{where}: not a run of the campaign's grid "
                f"(no such grid point and seed in {_where(paths, paths.frozen_spec)}/)"
            )
    return check


def check_plans(paths: CampaignPaths, grid: Grid, epochs_per_slice: int | dict | None) -> Check:
    """Each base's slice plan (what every job's --until-epoch came from) is the frozen trainer's
    plan of its frozen base recipe in the frozen number of epochs per slice (the frozen trainer's,
    not this checkout's: the budget code may have changed since the campaign started)."""
    check = Check("slice plans equal the frozen trainer's plan of the frozen base recipes", unit="plans")
    for base in grid.bases:
        path, where = paths.slice_plan(base), _where(paths, paths.slice_plan(base))
        check.examined += 1
        scope = split_base(base)[0]
        per_slice = epochs_per_slice.get(scope) if isinstance(epochs_per_slice, dict) else epochs_per_slice
        if not isinstance(per_slice, int):
            check.violations.append(f"{_where(paths, paths.freeze_record)}: records no epochs_per_slice for {base}")
            continue
        if not path.is_file():
            check.violations.append(f"{where}: missing")
            continue
        try:
            expected = plan_json(frozen_trainer_plan(paths, base, per_slice, parent_base(grid, base)))
        except UserError as error:
            check.violations.append(f"{where}: cannot be recomputed ({error})")
            continue
        if path.read_text(encoding="utf-8", errors="replace") != expected:
            check.violations.append(
                f"{where}: differs from the frozen trainer's plan of {_where(paths, paths.base_recipe(base))} "
                f"in slices of {per_slice} epoch(s) (edited)"
            )
    return check


def _where(paths: CampaignPaths, path: Path) -> str:
    """A path of the campaign as its records name it: relative to the campaign directory."""
    return path.relative_to(paths.directory).as_posix()


def check_trainer(paths: CampaignPaths, frozen_hash: str | None, views: list[RunView]) -> Check:
    """The frozen tree still hashes to SOURCE_HASH, and every run was trained by it."""
    check = Check("every run used the frozen trainer, which is unchanged")
    if frozen_hash is None:
        check.violations.append(f"{paths.source_hash.relative_to(paths.directory)}: missing or unreadable")
    elif not paths.frozen_package.is_dir():
        check.violations.append(f"{paths.frozen_package.relative_to(paths.directory)}: missing")
    elif (actual := source_hash(paths.frozen_package)) != frozen_hash:
        check.violations.append(
            f"frozen trainer source hashes to {actual[:12]}…, not its {SOURCE_HASH} {frozen_hash[:12]}… (edited)"
        )
    for view in views:
        if view.finished:
            check.examined += 1
            used = view.results.get("source_hash")
            if used != frozen_hash:
                check.violations.append(f"{view.id}: trained by source {str(used)[:12]}…, not the frozen trainer")
    return check


def check_cache(
    cache_dir: str | Path | None, cache_identity: str | None, memory: HashMemory, campaign_dir: Path
) -> tuple[Check, int | None]:
    """Check every shard of the campaign's cache against its manifest (hashed again unless `memory`
    vouches for it, named by its path relative to the campaign); return the target count."""
    check = Check("the data cache matches its manifest", unit="caches")
    if cache_dir is None:
        check.reason = "no finished run names a cache"
        return check, None
    check.examined = 1
    try:
        cache = verify_cache(cache_dir, memory, f"{os.path.relpath(cache_dir, campaign_dir)}/")
    except UserError as error:
        check.violations.append(str(error))
        return check, None
    if cache.identity != cache_identity:
        check.violations.append(
            f"cache {cache_dir}: identity {cache.identity[:12]}… is not the campaign's "
            f"{str(cache_identity)[:12]}… (manifest edited)"
        )
    return check, cache.validation_targets
