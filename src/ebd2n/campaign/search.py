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
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebd2n.atomic import atomic_write_text
from ebd2n.campaign.runs import BASE, Run
from ebd2n.campaign.seed_noise import within_noise
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json, read_jsonl
from ebd2n.layout import METRICS, CampaignPaths
from ebd2n.train.divergence import diverged_record
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
    if method not in (GRID, HALVING) or not _number(keep) or not 0 < keep <= 1:
        raise ValueError(f"search {dict(raw)!r}: method grid or {HALVING}, keep in (0, 1]")
    if rungs is not None and not (
        isinstance(rungs, list) and all(isinstance(r, int) and not isinstance(r, bool) for r in rungs)
    ):
        raise ValueError(f"search rungs {rungs!r}: a list of epochs")
    if noise is not None and not (_number(noise) and 0 < noise < 1):
        raise ValueError(f"search seed_noise {noise!r}: a test level alpha in (0, 1), such as 0.05")
    return Search(
        method, float(keep), None if rungs is None else tuple(sorted(rungs)), None if noise is None else float(noise)
    )


def _number(value: Any) -> bool:
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
                f"{where}: search.rungs: {wrong} {'is not a slice end' if len(wrong) == 1 else 'are not slice ends'} before the "
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


def promoted_count(keep: float, candidates: int) -> int:
    """ceil(keep x n), at least one (rounded first: 0.1 x 30 is 3, not 3.0000000000000004)."""
    return max(1, math.ceil(round(keep * candidates, 9)))


def decision_digest(runs: Iterable[str], keep: float, seed_noise: float | None = None) -> str:
    """Names a decision by what it is decided from: the sorted run ids, the share kept and the
    seed-noise level (left out when unset, so decisions by rank alone keep their names)."""
    inputs: dict[str, Any] = {"runs": sorted(runs), "keep": keep}
    if seed_noise is not None:
        inputs["seed_noise"] = seed_noise
    text = json.dumps(inputs, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def decision_rule(decision: Mapping[str, Any]) -> float | None:
    """The seed-noise level a decision file was made with (None: rank alone)."""
    noise = decision.get("seed_noise")
    return float(noise) if _number(noise) else None


def epoch_loss(metrics: Path, epoch: int) -> float | None:
    """The subset-validation loss a run's metrics.jsonl records at epoch boundary `epoch`."""
    for record in read_jsonl(metrics):
        if isinstance(record, dict) and record.get("type") == "epoch" and record.get("epoch") == epoch:
            loss = record.get("val_loss")
            return float(loss) if isinstance(loss, (int, float)) and not isinstance(loss, bool) else None
    return None


def recorded_epochs(metrics: Path) -> list[int]:
    """Every epoch boundary a run's metrics.jsonl records."""
    return [
        record["epoch"]
        for record in read_jsonl(metrics)
        if isinstance(record, dict) and record.get("type") == "epoch" and isinstance(record.get("epoch"), int)
    ]


def decide(
    bracket: Bracket,
    epoch: int,
    candidates: list[tuple[float, float]],
    keep: float,
    losses: Mapping[str, float | None],
    earlier: Mapping[str, list[str]],
    drawn_from: Iterable[str] = (),
    seeds: Iterable[int] | None = None,
    seed_noise: float | None = None,
    diverged: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The decision at rung `epoch`: candidates ranked (mean loss over seeds; a point missing a
    seed's loss, or with a non-finite one, ranks last), the best ceil(keep x n) promoted (never a point
    with a run in `diverged`, which has no loss), and the points earlier decisions of this rung promoted
    carried. `earlier` maps each earlier decision's file name to the points it let train on;
    `drawn_from` names the decisions of the rung before
    whose promoted points are the candidates (what the audit traces each decision back through);
    `seeds` are those of the grid it is made under (default: the bracket's). With `seed_noise` each
    ranked point also records the rule that kept or dropped it (`seed_noise_rule`)."""
    ranking = []
    for lr, beta2 in candidates:
        point = {run.id: losses.get(run.id) for run in bracket.runs([(lr, beta2)], seeds)}
        values = [loss for loss in point.values() if loss is not None and math.isfinite(loss)]
        mean = sum(values) / len(values) if len(values) == len(point) else None
        ranking.append({"point": point_id(lr, beta2), "lr": lr, "beta2": beta2, "mean_loss": mean, "losses": point})
    ranking.sort(key=lambda entry: (entry["mean_loss"] is None, entry["mean_loss"] or 0.0, entry["lr"], entry["beta2"]))
    promoted = [
        entry["point"]
        for entry in ranking[: promoted_count(keep, len(ranking))]
        if not diverged.intersection(entry["losses"])
    ]
    if seed_noise is not None:
        promoted = within_noise(ranking, promoted, seed_noise)
    listed = {entry["point"] for entry in ranking}
    carried = sorted(
        {point for points in earlier.values() for point in points if point in listed} - set(promoted),
        key=[entry["point"] for entry in ranking].index,
    )
    runs = [run for entry in ranking for run in entry["losses"]]
    rule = {} if seed_noise is None else {"seed_noise": seed_noise}
    return {
        "bracket": bracket.name,
        "epoch": epoch,
        "keep": keep,
        **rule,
        "digest": decision_digest(runs, keep, seed_noise),
        "candidates": len(ranking),
        "ranking": ranking,
        "promoted": promoted,
        "carried": carried,
        "continuing": [entry["point"] for entry in ranking if entry["point"] in {*promoted, *carried}],
        "earlier": sorted(earlier),
        "drawn_from": sorted(drawn_from),
    }


def decision_json(decision: Mapping[str, Any]) -> str:
    return json.dumps(decision, indent=1) + "\n"


@dataclass(frozen=True)
class Rung:
    """One rung of a bracket as its decisions stand."""

    epoch: int
    candidates: list[tuple[float, float]]
    """The points compared there."""
    path: Path
    """The decision the grid and share make now."""
    decision: dict[str, Any] | None
    """Its content; None: not decided yet."""
    past: list[tuple[float, float]] | None
    """The candidates that train on: the decision's, and any other decision of the rung promoted."""

    @property
    def past_ids(self) -> list[str] | None:
        return None if self.past is None else [point_id(*point) for point in self.past]

    @property
    def stopped(self) -> list[tuple[float, float]]:
        return [] if self.past is None else [point for point in self.candidates if point not in self.past]


@dataclass(frozen=True)
class Halving:
    """The search of one campaign as its files stand: what the workflow, the decide job, status,
    collect and the audit all walk, rung after rung."""

    paths: CampaignPaths
    search: Search
    groups: tuple[Bracket, ...]
    plans: Mapping[str, SlicePlan]

    def bracket(self, name: str) -> Bracket:
        for bracket in self.groups:
            if bracket.name == name:
                return bracket
        raise UserError(
            f"no bracket {name} in the campaign's grid (brackets: {', '.join(b.name for b in self.groups)})"
        )

    def bracket_of(self, run: Run) -> Bracket:
        """The bracket a run belongs to."""
        for bracket in self.groups:
            if (bracket.preset, bracket.mode) == (run.preset, run.mode):
                return bracket
        raise UserError(f"run {run.id}: mode {run.mode} is not in the campaign's grid")

    def rungs(self, bracket: Bracket) -> tuple[int, ...]:
        return self.search.rung_epochs(self.plans[bracket.base])

    def decision_path(self, bracket: Bracket, epoch: int, candidates: list[tuple[float, float]]) -> Path:
        runs = [run.id for run in bracket.runs(candidates)]
        digest = decision_digest(runs, self.search.keep, self.search.seed_noise)
        return self.paths.rung_decision(bracket.name, epoch, digest)

    def decisions(self, bracket: Bracket, epoch: int) -> list[Path]:
        """Every decision file of a rung: the current one, and those of earlier grids or shares."""
        return sorted((self.paths.search / bracket.name).glob(f"rung-{epoch}-*.json"))

    def past(self, bracket: Bracket, epoch: int, candidates: list[tuple[float, float]], decision: Mapping[str, Any]):
        """The candidates that train on past rung `epoch`: those its decision lets on, and every one
        any other decision of the rung promoted (once promoted, a point stays promoted)."""
        names = set(decision["continuing"])
        for other in self.decisions(bracket, epoch):
            names |= set(_continuing(other))
        return [point for point in candidates if point_id(*point) in names]

    def walk(self, bracket: Bracket, read=None, before: int | None = None) -> Iterator[Rung]:
        """Each rung of `bracket` in order, up to the first not decided yet, or up to rung `before`
        (yielded unread: its decision is what waits for its candidates). `read(bracket name, epoch,
        path)` reads a decision (the workflow's asks Snakemake's checkpoint first)."""
        candidates = list(bracket.points)
        for epoch in self.rungs(bracket):
            path = self.decision_path(bracket, epoch, candidates)
            decision = None if epoch == before else read(bracket.name, epoch, path) if read else read_decision(path)
            if decision is None:
                yield Rung(epoch, candidates, path, None, None)
                return
            past = self.past(bracket, epoch, candidates, decision)
            yield Rung(epoch, candidates, path, decision, past)
            candidates = past

    def candidates(self, bracket: Bracket, epoch: int, read=None) -> list[tuple[float, float]]:
        """The points compared at rung `epoch`: those past the rung before (every point at the first)."""
        rungs = self.rungs(bracket)
        if epoch not in rungs:
            raise UserError(f"bracket {bracket.name}: epoch {epoch} is not one of its rungs {list(rungs)}")
        last = list(self.walk(bracket, read, before=epoch))[-1]
        if last.epoch != epoch:
            raise UserError(
                f"bracket {bracket.name}: rung {last.epoch} is not decided yet, so rung {epoch} has no candidates"
            )
        return last.candidates

    def outcome(self, read=None) -> dict[str, int | None]:
        """Each run that has a fate so far: the rung it stopped at, or None (it trains to the end,
        every rung decided). Runs of a bracket whose rungs are still open are left out."""
        return {run: fate for bracket in self.groups for run, fate in self.fates(bracket, read).items()}

    def fates(self, bracket: Bracket, read=None) -> dict[str, int | None]:
        """`outcome` of one bracket."""
        fate: dict[str, int | None] = {}
        candidates = list(bracket.points)
        for rung in self.walk(bracket, read=read):
            if rung.decision is None:
                return fate
            fate.update({run.id: rung.epoch for run in bracket.runs(rung.stopped)})
            candidates = rung.past
        return fate | {run.id: None for run in bracket.runs(candidates)}

    def record(self) -> dict[str, Any]:
        """What campaign.json says of the search: each bracket's rungs, their decision files and
        the points that train on, and how many runs stopped."""
        groups = []
        for bracket in self.groups:
            rungs = [
                {
                    "epoch": rung.epoch,
                    "decision": rung.path.relative_to(self.paths.directory).as_posix(),
                    "candidates": len(rung.candidates),
                    "continuing": rung.past_ids,
                }
                for rung in self.walk(bracket)
            ]
            groups.append({"bracket": bracket.name, "points": len(bracket.points), "rungs": rungs})
        fates = self.outcome()
        stopped = {run: fate for run, fate in sorted(fates.items()) if fate is not None}
        return {
            **self.search.record(),
            "brackets": groups,
            "runs_stopped": len(stopped),
            "runs_training_to_the_end": list(fates.values()).count(None),
            "stopped": stopped,
        }

    def decide(self, bracket: Bracket, epoch: int) -> tuple[Path, bool]:
        """Decide rung `epoch` of `bracket` from its candidates' metrics and write the decision
        (atomically; left as it is when it already says the same). Returns the file and whether it
        was written."""
        candidates = self.candidates(bracket, epoch)
        path = self.decision_path(bracket, epoch, candidates)
        losses = {run.id: epoch_loss(self.paths.run(run.id).metrics, epoch) for run in bracket.runs(candidates)}
        missing = [
            run_id
            for run_id, loss in losses.items()  # a diverged run has no loss there: it ranks last
            if loss is None and diverged_record(self.paths.run(run_id).metrics) is None
        ]
        if missing:
            raise UserError(
                f"bracket {bracket.name} rung {epoch}: no subset-validation loss at epoch {epoch} in "
                f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} ({METRICS}): train them to the rung first"
            )
        made = read_decision(path)  # decided before: from the decisions it was made after, not later ones
        names = made["earlier"] if made else [other.name for other in self.decisions(bracket, epoch) if other != path]
        earlier = {name: _continuing(path.parent / name) for name in names}
        rungs = self.rungs(bracket)
        before = rungs[rungs.index(epoch) - 1] if rungs.index(epoch) else None
        drawn = (
            made.get("drawn_from", [])
            if made
            else [other.name for other in self.decisions(bracket, before)]
            if before
            else []
        )
        diverged = frozenset(run_id for run_id in losses if diverged_record(self.paths.run(run_id).metrics) is not None)
        text = decision_json(
            decide(
                bracket,
                epoch,
                candidates,
                self.search.keep,
                losses,
                earlier,
                drawn,
                seed_noise=self.search.seed_noise,
                diverged=diverged,
            )
        )
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            return path, False
        atomic_write_text(path, text)
        return path, True


DECISION_NAME = re.compile(r"rung-(?P<epoch>[0-9]+)-(?P<digest>[0-9a-f]{16})\.json")
"""A decision file's name (CampaignPaths.rung_decision); the names a decision lists must match it."""


def read_decision(path: Path) -> dict[str, Any] | None:
    """A decision file, None when absent; one that is not a decision (its points, rankings and the
    decisions it names checked for shape) is a user error naming it."""
    decision = read_json(path)
    if decision is not None and not _shaped(decision):
        raise UserError(f"{path}: not a rung decision (ebd2n.campaign.search)")
    return decision


def _shaped(decision: Any) -> bool:
    """Whether a decision has the shape `decide` gives it, as far as its readers rely on it."""
    if not isinstance(decision, dict) or not isinstance(decision.get("ranking"), list):
        return False
    named = all(
        isinstance(names, list) and all(isinstance(name, str) and DECISION_NAME.fullmatch(name) for name in names)
        for names in (decision.get("earlier", []), decision.get("drawn_from", []))
    )
    points = isinstance(decision.get("continuing"), list) and all(
        isinstance(point, str) for point in decision["continuing"]
    )
    ranked = all(
        isinstance(entry, dict) and isinstance(entry.get("point"), str) and isinstance(entry.get("losses"), dict)
        for entry in decision["ranking"]
    )
    return named and points and ranked


def _continuing(path: Path) -> list[str]:
    """The points a decision file lets train on; none when unreadable (the audit names it)."""
    try:
        decision = read_decision(path)
    except UserError:
        return []
    return (decision or {}).get("continuing", [])
