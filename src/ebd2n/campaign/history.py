"""The campaign's frozen grid record: frozen/spec/<n>.json, one file per grid the campaign ran under.

Each change of the campaign file's grid is its own recording, written once and never changed (the
ledger protects it like every frozen file): the first collect writes 1.json, an extension the next,
and so does a grid that shrank (a point or seed removed) or grew back. The campaign's grid is their
union, axis by axis: every run directory of the campaign is one of its runs, so a run directory of
any other grid point (copied in from another campaign of the same name) is named, whatever
campaign.json says. The last recording is the active grid, the one the campaign file declares now:
its runs must finish; the union's other runs are retired, kept on disk untouched and left out of
selection, so putting their point back reuses them as they are. A successive-halving decision made
under an earlier grid or share is held to the grid as that recording left it (`versions`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebd2n.atomic import atomic_write_text
from ebd2n.campaign.grid import Grid, grid_from_record
from ebd2n.campaign.runs import Run
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.layout import CampaignPaths


@dataclass(frozen=True)
class GridHistory:
    """A campaign's name and description and its grid as each recording left it, oldest first."""

    name: str
    description: str
    versions: tuple[Grid, ...]
    """versions[i]: the union of recordings 1 .. i + 1."""
    active: Grid
    """The last recording: the grid the campaign file declares now, whose runs must finish."""

    @property
    def grid(self) -> Grid:
        """Every run the campaign ever declared: the union of every recording."""
        return self.versions[-1]

    def retired(self) -> list[Run]:
        """Runs of an earlier recording that the active grid no longer declares, in grid order."""
        active = set(self.active.runs())
        return [run for run in self.grid.runs() if run not in active]

    def record(self) -> dict[str, Any]:
        """The active grid as a recording holds it (what campaign.json repeats)."""
        return {"campaign": self.name, "description": self.description, **self.active.record()}


def read_history(paths: CampaignPaths) -> GridHistory:
    """Every recording, read once and merged in order; none, or a damaged one, is a user error naming it."""
    files = _recordings(paths)
    if not files:
        raise UserError(
            f"{paths.frozen_spec}: missing; it records the campaign's grid: "
            "collect the campaign (ebd2n collect CAMPAIGN)"
        )
    versions: list[Grid] = []
    grid = None
    name = description = ""
    for path in files:
        raw = read_json(path)
        try:
            grid = grid_from_record(raw)
            name, description = str(raw["campaign"]), str(raw["description"])
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise UserError(f"{path}: not a campaign spec ({type(error).__name__}: {error})") from None
        versions.append(versions[-1].union(grid) if versions else grid)
    return GridHistory(name, description, tuple(versions), grid)


def record_grid(paths: CampaignPaths, name: str, description: str, grid: Grid) -> GridHistory:
    """Record the grid a campaign file declares, unless it is the last recording's, and return the
    campaign's history."""
    files = _recordings(paths)
    history = read_history(paths) if files else None
    if history and (history.name, history.description, history.active.record()) == (name, description, grid.record()):
        return history
    declared = {"campaign": name, "description": description, **grid.record()}
    atomic_write_text(paths.spec_version(len(files) + 1), json.dumps(declared, indent=2) + "\n")
    versions = (*history.versions, history.grid.union(grid)) if history else (grid,)
    return GridHistory(name, description, versions, grid)


def _recordings(paths: CampaignPaths) -> list[Path]:
    """frozen/spec/<n>.json in order; any other file there is a user error naming it."""
    files = sorted(paths.frozen_spec.iterdir()) if paths.frozen_spec.is_dir() else []
    stray = [path for path in files if not (path.suffix == ".json" and path.stem.isdigit())]
    if stray:
        raise UserError(f"{stray[0]}: not a recording of the campaign's grid (frozen/spec/<n>.json)")
    return sorted(files, key=lambda path: int(path.stem))
