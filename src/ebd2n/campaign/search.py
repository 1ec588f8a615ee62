"""Successive halving over slices: which grid points train on after each rung, decided from the runs.

A campaign's `search` (default: the full grid) may be `successive-halving`. Its brackets are the
preset x mode blocks of the grid; a bracket's points are its (learning rate, beta2) pairs, each
trained with every seed. At each rung (a slice end before the last) the bracket's candidates are
ranked by mean subset-validation loss over their seeds at that epoch (ties: lower learning rate,
then lower beta2, as in selection) and the best ceil(keep x n) train on; the others stop there,
keeping the checkpoint they would continue from. With `seed_noise: alpha` a point outside that share
also trains on unless a one-sided paired t-test over its seeds shows it worse than the rung's best
at level alpha: a difference within the seeds' noise never drops a point.

A decision is a file named by what it was decided from (its runs and `keep`):
`search/<bracket>/rung-<epoch>-<digest>.json`, written once. An extension (more points or seeds,
a larger keep) decides again under a new name; every point an earlier decision of the rung
promoted stays promoted ("carried"), so no training is thrown away and no run that trained on is
later called stopped. Everything here follows from the runs' metrics.jsonl and the grid: the
audit recomputes each decision (ebd2n.audit.search).

This module holds the `search` section and its brackets; one rung's decision is made and read in
ebd2n.campaign.rung_decision, and ebd2n.campaign.halving walks a campaign's decisions rung after rung.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ebd2n.campaign.runs import BASE, Run
from ebd2n.errors import UserError
from ebd2n.train.plan import SlicePlan

GRID = "grid"
HALVING = "successive-halving"


@dataclass(frozen=True)
class Search:
    """How a campaign searches its grid: every point to the end (grid), or successive halving."""

    method: str = GRID
    keep: float = 1.0
    """Share of a rung's candidates a decision promotes (at least one; earlier decisions' promotions are carried)."""
    rungs: tuple[int, ...] | None = None
    """Epochs (slice ends) the candidates are compared at; None: every slice end before the last."""
    seed_noise: float | None = None
    """Level alpha of the paired test that alone may drop a point outside the kept share; None: rank alone."""

    @property
    def halving(self) -> bool:
        return self.method == HALVING

    def record(self) -> dict[str, Any]:
        """As the frozen spec and campaign.json hold it (seed_noise only when set, so earlier records stay)."""
        rungs = list(self.rungs) if self.rungs is not None else None
        record = {"method": self.method, "keep": self.keep, "rungs": rungs}
        return record if self.seed_noise is None else {**record, "seed_noise": self.seed_noise}

    def rung_epochs(self, plan: SlicePlan) -> tuple[int, ...]:
        """The rungs of runs sliced by `plan` (none under the full grid)."""
        if not self.halving:
            return ()
        return tuple(self.rungs) if self.rungs is not None else plan.ends[:-1]


def search_from_dict(raw: Mapping[str, Any] | None) -> Search:
    """The campaign file's (or a frozen spec's) `search` section; absent: the full grid."""
    if not raw:
        return Search()
    method, keep, rungs = raw.get("method", GRID), raw.get("keep", 1.0), raw.get("rungs")
    noise = raw.get("seed_noise")
    if method not in (GRID, HALVING) or not is_number(keep) or not 0 < keep <= 1:
        raise ValueError(f"search {dict(raw)!r}: method grid or {HALVING}, keep in (0, 1]")
    if rungs is not None and not (
        isinstance(rungs, list) and all(isinstance(r, int) and not isinstance(r, bool) for r in rungs)
    ):
        raise ValueError(f"search rungs {rungs!r}: a list of epochs")
    if noise is not None and not (is_number(noise) and 0 < noise < 1):
        raise ValueError(f"search seed_noise {noise!r}: a test level alpha in (0, 1), such as 0.05")
    return Search(
        method, float(keep), None if rungs is None else tuple(sorted(rungs)), None if noise is None else float(noise)
    )


def is_number(value: Any) -> bool:
    """A JSON number, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def point_id(lr: float, beta2: float) -> str:
    """A grid point within its bracket, spelled as in run ids."""
    return f"lr{lr!r}-beta2{beta2!r}"


@dataclass(frozen=True)
class Bracket:
    """The runs of one preset x mode, compared with each other at every rung."""

    preset: str | None
    mode: str
    points: tuple[tuple[float, float], ...]
    """(learning rate, beta2), in grid order."""
    seeds: tuple[int, ...]

    @property
    def name(self) -> str:
        """Its resources scope: the mode, or <preset>-<mode>."""
        return f"{self.preset}-{self.mode}" if self.preset else self.mode

    @property
    def base(self) -> str:
        return self.preset or BASE

    def runs(
        self, points: Iterable[tuple[float, float]] | None = None, seeds: Iterable[int] | None = None
    ) -> list[Run]:
        """Every seed (default: the bracket's) of `points` (default: all of the bracket's)."""
        return [
            Run(self.preset, self.mode, lr, beta2, seed)
            for lr, beta2 in (self.points if points is None else points)
            for seed in (self.seeds if seeds is None else seeds)
        ]

    def point(self, identifier: str) -> tuple[float, float]:
        """The point a `point_id` names."""
        for point in self.points:
            if point_id(*point) == identifier:
                return point
        raise UserError(f"bracket {self.name}: no grid point {identifier}")


def brackets(runs: Iterable[Run]) -> list[Bracket]:
    """The brackets of a grid's runs, in grid order."""
    grouped: dict[tuple[str | None, str], tuple[dict, dict]] = {}
    for run in runs:
        points, seeds = grouped.setdefault((run.preset, run.mode), ({}, {}))
        points[(run.lr, run.beta2)] = None
        seeds[run.seed] = None
    return [Bracket(preset, mode, tuple(points), tuple(seeds)) for (preset, mode), (points, seeds) in grouped.items()]


def check_search(search: Search, plans: Mapping[str, SlicePlan], groups: list[Bracket], where: str) -> None:
    """What the schema cannot say of `search`, one line each: rungs are slice ends before the last
    of every preset's runs, and every bracket has points to compare."""
    if not search.halving:
        if search.keep != 1.0 or search.rungs is not None or search.seed_noise is not None:
            raise UserError(
                f"{where}: search.keep, search.rungs and search.seed_noise apply to successive halving "
                "only; "
                f"set search.method: {HALVING}, or remove them"
            )
        return
    for base, plan in plans.items():
        wrong = [epoch for epoch in search.rung_epochs(plan) if epoch not in plan.ends[:-1]]
        if wrong:
            raise UserError(
                f"{where}: search.rungs: {wrong} "
                f"{'is not a slice end' if len(wrong) == 1 else 'are not slice ends'} before the "
                f"last of {'the runs' if base == BASE else base}; rungs must be among {list(plan.ends[:-1])} "
                f"(epochs_per_slice {plan.epochs_per_slice} of {plan.epochs} epochs)"
            )
        if not search.rung_epochs(plan):
            raise UserError(
                f"{where}: search: runs of {plan.epochs} epochs in one slice have no slice end to compare at; "
                "lower epochs_per_slice or use the full grid"
            )
    single = [bracket.name for bracket in groups if len(bracket.points) < 2]
    if single:
        raise UserError(
            f"{where}: search: successive halving compares grid points, but {', '.join(single)} "
            f"{'has' if len(single) == 1 else 'have'} only one (learning rate, beta2); add points or remove search"
        )
