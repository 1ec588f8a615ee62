"""The grid of a campaign: its axes, seeds and search, and the one list of its runs.

One type for every shape the grid takes: the campaign file's `grid:`/`seeds:`/`search:` sections,
each frozen/spec/<n>.json recording (ebd2n.campaign.history), the status plan and campaign.json.
Every reader that needs the runs asks `Grid.runs()`, so the plan, the status page and the audit's
expectation agree by construction; `Grid.bases` is the one place a grid without presets gets its
single base recipe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ebd2n.campaign.runs import BASE, Run, base_name
from ebd2n.campaign.search import Bracket, Search, brackets, search_from_dict


@dataclass(frozen=True)
class Grid:
    """Model presets (scaling campaigns) x modes x learning rates x beta2, each point with every seed."""

    presets: tuple[str, ...] | None
    """Model presets, each its own base recipe; None: one base recipe (`BASE`)."""
    modes: tuple[str, ...]
    learning_rates: Mapping[str, tuple[float, ...]]
    """Per mode, or per `<preset>-<mode>` for a preset with its own list."""
    beta2: tuple[float, ...]
    seeds: tuple[int, ...]
    search: Search = field(default_factory=Search)
    """How the grid is searched: every point to the end, or successive halving."""
    horizons: tuple[float, ...] | None = None
    """Training horizons in tokens per parameter, shortest first (WSD trunks: ebd2n.campaign.horizons);
    None: every run trains its recipe's budget."""

    @property
    def scopes(self) -> tuple[str, ...]:
        """The presets of a scaling campaign, else the single `BASE`: what learning-rate lists,
        resources and slice lengths are given per."""
        return self.presets or (BASE,)

    @property
    def bases(self) -> tuple[str, ...]:
        """Base recipe names: each scope, at each horizon where the grid has horizons."""
        return tuple(base_name(scope, horizon) for scope in self.scopes for horizon in self.horizons or (None,))

    def mode_learning_rates(self, scope: str, mode: str) -> tuple[float, ...]:
        """The learning rates of one scope's runs in one mode: its `<preset>-<mode>` list, else the mode's."""
        scoped = self.learning_rates.get(f"{scope}-{mode}") if scope != BASE else None
        return scoped or self.learning_rates[mode]

    def runs(self) -> list[Run]:
        """Every run, ordered by preset, mode, learning rate, beta2, horizon, seed."""
        return [
            Run(None if scope == BASE else scope, mode, lr, beta2, seed, horizon)
            for scope in self.scopes
            for mode in self.modes
            for lr in self.mode_learning_rates(scope, mode)
            for beta2 in self.beta2
            for horizon in self.horizons or (None,)
            for seed in self.seeds
        ]

    def brackets(self) -> list[Bracket]:
        """The preset x mode blocks successive halving compares within."""
        return brackets(self.runs())

    def record(self) -> dict[str, Any]:
        """As JSON: the `grid` and `seeds` of a frozen spec, with `search` only under successive halving
        (a grid campaign's record is as it always was)."""
        grid = {
            "presets": list(self.presets) if self.presets else None,
            "modes": list(self.modes),
            "learning_rates": {key: list(values) for key, values in self.learning_rates.items()},
            "beta2": list(self.beta2),
        }
        if self.horizons:  # a grid without horizons is recorded as it always was
            grid["horizons"] = list(self.horizons)
        search = {"search": self.search.record()} if self.search.halving else {}
        return {"grid": grid, "seeds": list(self.seeds), **search}

    def union(self, later: Grid) -> Grid:
        """This grid and a later recording of it as one: every axis the union, earlier values first;
        the later search settings; horizons shortest first."""
        keys = _union(list(self.learning_rates), list(later.learning_rates))
        rates = {key: _union(self.learning_rates.get(key, ()), later.learning_rates.get(key, ())) for key in keys}
        return Grid(
            presets=_union(self.presets or (), later.presets or ()) or None,
            modes=_union(self.modes, later.modes),
            learning_rates=rates,
            beta2=_union(self.beta2, later.beta2),
            seeds=_union(self.seeds, later.seeds),
            search=later.search,
            horizons=tuple(sorted(_union(self.horizons or (), later.horizons or ()))) or None,
        )


def grid_from_dict(grid: Mapping[str, Any], seeds: Sequence[int], search: Mapping[str, Any] | None) -> Grid:
    """A grid from its JSON or YAML sections (a campaign file's or a recording's); a section of the
    wrong shape raises KeyError, TypeError or ValueError for the caller to name its file."""
    if not (isinstance(seeds, list) and all(isinstance(seed, int) and not isinstance(seed, bool) for seed in seeds)):
        raise TypeError("seeds are not a list of integers")
    presets = grid.get("presets")
    horizons = grid.get("horizons")
    return Grid(
        presets=tuple(str(preset) for preset in presets) if presets else None,
        modes=tuple(str(mode) for mode in grid["modes"]),
        learning_rates={str(key): tuple(float(lr) for lr in lrs) for key, lrs in grid["learning_rates"].items()},
        beta2=tuple(float(beta2) for beta2 in grid["beta2"]),
        seeds=tuple(seeds),
        search=search_from_dict(search),
        horizons=tuple(sorted(float(horizon) for horizon in horizons)) if horizons else None,
    )


def grid_from_record(record: Mapping[str, Any]) -> Grid:
    """The grid a `Grid.record()` (a frozen spec, campaign.json, the status plan) holds."""
    return grid_from_dict(record["grid"], record["seeds"], record.get("search"))


def _union(earlier: Sequence, later: Sequence) -> tuple:
    return (*earlier, *(value for value in later if value not in earlier))
