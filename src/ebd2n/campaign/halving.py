"""A campaign's successive halving as its decision files stand: what the workflow, the decide job,
status, collect and the audit walk rung after rung, and the job that decides a rung."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebd2n.atomic import atomic_write_text
from ebd2n.campaign.rung_decision import (
    continuing_points,
    decide,
    decision_digest,
    decision_json,
    epoch_loss,
    read_decision,
)
from ebd2n.campaign.runs import Run
from ebd2n.campaign.search import Bracket, Search, point_id
from ebd2n.errors import UserError
from ebd2n.layout import METRICS, CampaignPaths
from ebd2n.outcomes import STOPPED
from ebd2n.train.plan import SlicePlan
from ebd2n.train.records import metrics


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
            names |= set(continuing_points(other))
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
            STOPPED: stopped,
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
            if loss is None and metrics(self.paths.run(run_id).metrics).divergence is None
        ]
        if missing:
            raise UserError(
                f"bracket {bracket.name} rung {epoch}: no subset-validation loss at epoch {epoch} in "
                f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} ({METRICS}): "
                "train them to the rung first"
            )
        made = read_decision(path)  # decided before: from the decisions it was made after, not later ones
        names = made["earlier"] if made else [other.name for other in self.decisions(bracket, epoch) if other != path]
        earlier = {name: continuing_points(path.parent / name) for name in names}
        rungs = self.rungs(bracket)
        before = rungs[rungs.index(epoch) - 1] if rungs.index(epoch) else None
        drawn = (
            made.get("drawn_from", [])
            if made
            else [other.name for other in self.decisions(bracket, before)]
            if before
            else []
        )
        diverged = frozenset(
            run_id for run_id in losses if metrics(self.paths.run(run_id).metrics).divergence is not None
        )
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
