"""Packed trials in a campaign (`execution.pack: K`): which synchronous runs train each slice
together, as one packed model in one job (ebd2n.train.pack_trainer).

A slice's packs are formed from the synchronous runs of its base recipe that train the slice (under
successive halving, those promoted past every rung before it), K at a time in grid order. A run
that recorded the pack it trained the slice in (packs.json, written before the pack trains) keeps
that pack, with every member it names; a run that has the slice's outputs and no record of a pack
for it or an earlier slice trained it alone (before the campaign packed) and joins no pack; only
the others form new ones.
So a kill and a second invocation train the same packs again, a grid grown since leaves the packs
already formed as they were, and after a rung the runs promoted form new packs. A pack is named by its members
(`pack_digest`): its job's record is packs/<base>/slice-<epoch>-<digest>.json.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from ebd2n.campaign.fates import Read
from ebd2n.campaign.grid import Grid
from ebd2n.campaign.halving import Halving
from ebd2n.campaign.runs import SYNCHRONOUS, Run
from ebd2n.errors import UserError
from ebd2n.layout import CampaignPaths
from ebd2n.train.pack_record import pack_digest, read_packs
from ebd2n.train.plan import SlicePlan


@dataclass(frozen=True)
class Pack:
    """One job of packed trials: the slice to `epoch` of its members, runs of base recipe `base`."""

    base: str
    epoch: int
    members: tuple[str, ...]
    """Run ids, sorted."""

    @property
    def digest(self) -> str:
        return pack_digest(self.members)


@dataclass(frozen=True, eq=False)
class Packing:
    """How a campaign's synchronous runs pack, slice by slice, as its files stand."""

    paths: CampaignPaths
    grid: Grid
    plans: dict[str, SlicePlan]
    halving: Halving | None
    size: int

    def record_path(self, pack: Pack) -> Path:
        return self.paths.pack_record(pack.base, pack.epoch, pack.digest)

    def pack_of(self, run: Run, epoch: int, read: Read | None = None) -> Pack | None:
        """The pack that trains `run`'s slice to `epoch`; None when the run trained it alone."""
        pack = self._index(run.base, epoch, read).get(run.id)
        if pack is None and not self._trained_alone(run, epoch):
            raise UserError(f"{run.id}: does not train the slice to epoch {epoch} (stopped by a rung before it)")
        return pack

    def pack(self, base: str, epoch: int, digest: str, read: Read | None = None) -> Pack:
        """The pack a job's name gives; one the grid does not form now is refused."""
        pack = self._digests(base, epoch, read).get(digest)
        if pack is None:
            raise UserError(
                f"{self.paths.pack_record(base, epoch, digest)}: no pack of the grid has these members now "
                "(the campaign file changed while the workflow ran: run it again)"
            )
        return pack

    def records(self, reached: dict[Run, int | None], read: Read | None = None) -> list[Path]:
        """The records of the pack jobs that train these runs to the epochs given (None: the whole
        budget): a pack job killed after its members' records still has its own to write, which only
        the audit reads, so the workflow's `all` asks for it."""
        packs: dict[Path, None] = {}
        for run, until in reached.items():
            if run.mode != SYNCHRONOUS:
                continue
            for end in self.plans[run.base].ends:
                if until is None or end <= until:
                    pack = self.pack_of(run, end, read)
                    if pack is not None:
                        packs[self.record_path(pack)] = None
        return list(packs)

    @functools.cache  # noqa: B019 (one packing per workflow: formed once, then every job asks)
    def packs(self, base: str, epoch: int, read: Read | None = None) -> tuple[Pack, ...]:
        """Every pack of the slice to `epoch` of base `base`'s synchronous runs (see the module),
        formed once per process: the files it reads change as the packs train."""
        formed: dict[tuple[str, ...], None] = {}
        free = []
        for run in self._slice_runs(base, epoch, read):
            recorded = self._recorded(run.id).get(epoch)
            if recorded is not None:
                formed[tuple(sorted(recorded))] = None
            elif not self._trained_alone(run, epoch):
                free.append(run.id)
        taken = {member for members in formed for member in members}
        free = [run for run in free if run not in taken]
        for start in range(0, len(free), self.size):
            formed[tuple(sorted(free[start : start + self.size]))] = None
        return tuple(Pack(base, epoch, members) for members in formed)

    @functools.cache  # noqa: B019 (every member's job asks)
    def _index(self, base: str, epoch: int, read: Read | None) -> dict[str, Pack]:
        return {member: pack for pack in self.packs(base, epoch, read) for member in pack.members}

    @functools.cache  # noqa: B019 (every pack job asks thrice: its inputs, its members' directories, its log's first line)
    def _digests(self, base: str, epoch: int, read: Read | None) -> dict[str, Pack]:
        return {pack.digest: pack for pack in self.packs(base, epoch, read)}

    def _trained_alone(self, run: Run, epoch: int) -> bool:
        """Whether a run has the slice's outputs and no record of a pack for it or any slice before:
        it trained alone, before the campaign packed, and packs with nobody for it. (A run that left a
        pack by diverging has the outputs of the slices after too, and stays in their packs: every
        process forms the same packs.)"""
        if any(end <= epoch for end in self._recorded(run.id)):
            return False
        paths = self.paths.run(run.id)
        outputs = [paths.final, paths.best] if epoch == self.plans[run.base].epochs else [paths.slice_record(epoch)]
        return all(path.is_file() for path in outputs)

    @functools.cache  # noqa: B019
    def _recorded(self, run_id: str) -> dict[int, list[str]]:
        return read_packs(self.paths.run(run_id).directory)

    def _slice_runs(self, base: str, epoch: int, read: Read | None) -> list[Run]:
        """The synchronous runs of `base` that train the slice to `epoch`, in grid order."""
        runs = [run for run in self.grid.runs() if run.base == base and run.mode == SYNCHRONOUS]
        if self.halving is None or not runs:
            return runs
        start = self.plans[base].previous(epoch) or 0
        bracket = self.halving.bracket_of(runs[0])
        later = [rung for rung in self.halving.rungs(bracket) if rung > start]
        points = list(bracket.points)
        for rung in self.halving.walk(bracket, read=read, before=later[0] if later else None):
            if rung.epoch > start:
                break
            if rung.past is None:
                raise UserError(
                    f"bracket {bracket.name}: rung {rung.epoch} is not decided yet, so the slice to epoch {epoch} "
                    "has no runs"
                )
            points = rung.past
        return bracket.runs(points)
