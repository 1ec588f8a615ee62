"""The campaign's frozen grid record: frozen/spec/<n>.json, one file per grid the campaign ran under.

Each change of the campaign file's grid is its own recording, written once and never changed (the
ledger protects it like every frozen file): the first collect writes 1.json, an extension the next.
The campaign's grid is their union, axis by axis (a campaign only gains grid points); the audit
expects exactly its runs, so a run directory of any other grid point (copied in from another
campaign of the same name) is named, whatever campaign.json says. A successive-halving decision
made under an earlier grid or share is held to the grid as that recording left it (`versions`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebd2n.atomic import atomic_write_text
from ebd2n.campaign.grid import Grid, grid_from_record
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

    @property
    def grid(self) -> Grid:
        """The campaign's grid now: the union of every recording."""
        return self.versions[-1]

    def record(self) -> dict[str, Any]:
        """As a recording holds it (what campaign.json repeats)."""
        return {"campaign": self.name, "description": self.description, **self.grid.record()}


def read_history(paths: CampaignPaths) -> GridHistory:
    """Every recording, read once and merged in order; none, or a damaged one, is a user error naming it."""
    files = _recordings(paths)
    if not files:
        raise UserError(
            f"{paths.frozen_spec}: missing; it records the campaign's grid: collect the campaign (ebd2n collect CAMPAIGN)"
        )
    versions: list[Grid] = []
    name = description = ""
    for path in files:
        raw = read_json(path)
        try:
            grid = grid_from_record(raw)
            name, description = str(raw["campaign"]), str(raw["description"])
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise UserError(f"{path}: not a campaign spec ({type(error).__name__}: {error})") from None
        versions.append(versions[-1].union(grid) if versions else grid)
    return GridHistory(name, description, tuple(versions))


def record_grid(paths: CampaignPaths, name: str, description: str, grid: Grid) -> GridHistory:
    """Record the grid a campaign file declares, unless the recorded grid already holds it, and
    return the campaign's history."""
    files = _recordings(paths)
    history = read_history(paths) if files else None
    if history and (history.name, history.description, history.grid.union(grid)) == (name, description, history.grid):
        return history
    declared = {"campaign": name, "description": description, **grid.record()}
    atomic_write_text(paths.spec_version(len(files) + 1), json.dumps(declared, indent=2) + "\n")
    versions = (*history.versions, history.grid.union(grid)) if history else (grid,)
    return GridHistory(name, description, versions)


def _recordings(paths: CampaignPaths) -> list[Path]:
    """frozen/spec/<n>.json in order; any other file there is a user error naming it."""
    files = sorted(paths.frozen_spec.iterdir()) if paths.frozen_spec.is_dir() else []
    stray = [path for path in files if not (path.suffix == ".json" and path.stem.isdigit())]
    if stray:
        raise UserError(f"{stray[0]}: not a recording of the campaign's grid (frozen/spec/<n>.json)")
    return sorted(files, key=lambda path: int(path.stem))
