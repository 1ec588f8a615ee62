"""The grid of a campaign: its axes, seeds and search, and the one list of its runs.

One type for every shape the grid takes: the campaign file's `grid:`/`seeds:`/`search:` sections,
each frozen/spec/<n>.json recording (ebd2n.campaign.history), the status plan and campaign.json.
Every reader that needs the runs asks `Grid.runs()`, so the plan, the status page and the audit's
expectation agree by construction; `Grid.bases` is the one place a grid without presets gets its
single base recipe.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ebd2n.campaign.axes import Axis, axes_from_dict, axis_from_record
from ebd2n.campaign.runs import BASE, Run, base_name
from ebd2n.campaign.search import Bracket, Search, brackets, search_from_dict
from ebd2n.errors import UserError


@dataclass(frozen=True)
class Grid:
    """Model presets (scaling campaigns) x modes x learning rates x beta2 x further axes, each point
    with every seed."""

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
    axes: tuple[Axis, ...] = ()
    """Further axes over any recipe key (`grid.axes`, ebd2n.campaign.axes), in the file's order."""

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
        """Every run, ordered by preset, mode, learning rate, beta2, the further axes, horizon, seed."""
        points = list(itertools.product(*(axis.values for axis in self.axes)))
        return [
            Run(None if scope == BASE else scope, mode, lr, beta2, seed, horizon, self._named(point))
            for scope in self.scopes
            for mode in self.modes
            for lr in self.mode_learning_rates(scope, mode)
            for beta2 in self.beta2
            for point in points
            for horizon in self.horizons or (None,)
            for seed in self.seeds
        ]

    def _named(self, point: Sequence[str]) -> tuple[tuple[str, str], ...]:
        """The (axis, label) pairs a run id names: each further axis off its base value."""
        return tuple((axis.name, label) for axis, label in zip(self.axes, point, strict=True) if label != axis.base)

    def labels(self, run: Run) -> dict[str, str | None]:
        """Each further axis's value label at a run: named in its id, else the axis's base (None: a run
        of a recording without that axis and the axis has no base value)."""
        named = dict(run.axes)
        return {axis.name: named.get(axis.name, axis.base) for axis in self.axes}

    def settings(self, run: Run) -> list[tuple[str, Any]]:
        """The recipe settings a run's further axes apply over its base recipe (none at base values)."""
        values = {axis.name: axis.values for axis in self.axes}
        unknown = [f"{name}={label}" for name, label in run.axes if label not in values.get(name, {})]
        if unknown:
            raise UserError(f"run {run.id}: {unknown[0]} is no value of the grid's axes")
        named = dict(run.axes)
        canonical = tuple(
            (axis.name, named[axis.name]) for axis in self.axes if named.get(axis.name, axis.base) != axis.base
        )
        if run.axes != canonical:
            raise UserError(
                f"run {run.id}: not in canonical form; the run with these values is {replace(run, axes=canonical).id}"
            )
        return [item for name, label in run.axes for item in values[name][label].items()]

    def columns(self, run: Run) -> dict[str, Any]:
        """Each further axis's table value at a run (`Axis.column`; None where it has none)."""
        return {
            axis.name: None if label is None else axis.column(label)
            for axis, label in zip(self.axes, self.labels(run).values(), strict=True)
        }

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
        if self.axes:  # so is one without further axes
            grid["axes"] = [axis.record() for axis in self.axes]
        search = {"search": self.search.record()} if self.search.halving else {}
        return {"grid": grid, "seeds": list(self.seeds), **search}

    def union(self, later: Grid) -> Grid:
        """This grid and a later recording of it as one: every axis the union, earlier values first;
        the later search settings; horizons shortest first."""
        keys = _union(list(self.learning_rates), list(later.learning_rates))
        rates = {key: _union(self.learning_rates.get(key, ()), later.learning_rates.get(key, ())) for key in keys}
        axes = {axis.name: axis for axis in self.axes}
        for axis in later.axes:
            axes[axis.name] = axes[axis.name].union(axis) if axis.name in axes else axis
        return Grid(
            presets=_union(self.presets or (), later.presets or ()) or None,
            modes=_union(self.modes, later.modes),
            learning_rates=rates,
            beta2=_union(self.beta2, later.beta2),
            seeds=_union(self.seeds, later.seeds),
            search=later.search,
            horizons=tuple(sorted(_union(self.horizons or (), later.horizons or ()))) or None,
            axes=tuple(axes.values()),
        )


def grid_from_dict(grid: Mapping[str, Any], seeds: Sequence[int], search: Mapping[str, Any] | None) -> Grid:
    """A grid from its JSON or YAML sections (a campaign file's or a recording's); a section of the
    wrong shape raises KeyError, TypeError or ValueError for the caller to name its file."""
    if not (isinstance(seeds, list) and all(isinstance(seed, int) and not isinstance(seed, bool) for seed in seeds)):
        raise TypeError("seeds are not a list of integers")
    presets = grid.get("presets")
    horizons = grid.get("horizons")
    axes = grid.get("axes")
    return Grid(
        presets=tuple(str(preset) for preset in presets) if presets else None,
        modes=tuple(str(mode) for mode in grid["modes"]),
        learning_rates={str(key): tuple(float(lr) for lr in lrs) for key, lrs in grid["learning_rates"].items()},
        beta2=tuple(float(beta2) for beta2 in grid["beta2"]),
        seeds=tuple(seeds),
        search=search_from_dict(search),
        horizons=tuple(sorted(float(horizon) for horizon in horizons)) if horizons else None,
        axes=tuple(map(axis_from_record, axes)) if isinstance(axes, list) else axes_from_dict(axes),
    )


def grid_from_record(record: Mapping[str, Any]) -> Grid:
    """The grid a `Grid.record()` (a frozen spec, campaign.json, the status plan) holds."""
    return grid_from_dict(record["grid"], record["seeds"], record.get("search"))


def _union(earlier: Sequence, later: Sequence) -> tuple:
    return (*earlier, *(value for value in later if value not in earlier))
