"""Checkpoints: the assembly of the trainer's stateful parts; atomic writes, a hash ledger per run,
verified and safe loads; resuming and letting go.

A checkpoint holds a provenance header (run, recipe, cache and trainer source, tokens trained)
and the `state_dict()` of every stateful part of the trainer under its own key (engine, data
position, RNG, counters, metrics writer); `CheckpointManager` saves and restores them together,
finds the newest valid one to resume from and lets go of those the run's retention replaces.
Every checkpoint's SHA-256 is recorded in the run's `checkpoints.json` when it is written; a load
recomputes the hash and refuses a file that is truncated or altered, and refuses one written for
another recipe, cache or trainer source (resuming it would silently mix two experiments).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ebd2n.atomic import atomic_write_bytes, atomic_write_text, remove_file, sha256_bytes, sha256_file
from ebd2n.errors import UserError
from ebd2n.layout import CHECKPOINT_DIR, FINAL, checkpoint_epoch
from ebd2n.layout import CHECKPOINT_LEDGER as LEDGER
from ebd2n.train.retention import Retention
from ebd2n.train.run_state import checkpoints_on_disk, read_checkpoint_ledger

if TYPE_CHECKING:
    from ebd2n.parallel.distributed import Context

FORMAT = 2
"""2: one entry per stateful part (1 kept the counters, RNG and metrics offset in loose keys)."""
WEIGHT_FORMATS = (1, 2)
"""Formats whose provenance header, `engine` and `progress.job_ids` read alike: validation,
export and training.init_from read these; resuming needs FORMAT."""


@dataclass(frozen=True)
class Provenance:
    """What a checkpoint must match to be resumed: the experiment, the data and the code."""

    recipe_identity: str
    cache_identity: str
    source_hash: str | None
    """None accepts any trainer source (validation reads weights; it records who wrote them)."""


@dataclass(frozen=True)
class Saved:
    """A checkpoint found in a run directory: the epoch it holds, its file, its loaded state."""

    epoch: int
    relative: str
    state: dict[str, Any]


class Stateful(Protocol):
    """A part of the trainer whose state a checkpoint carries (torch's convention)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class CheckpointManager:
    """A run's checkpoints, in the shape of torchtitan's CheckpointManager: `save` one, `load` the
    newest valid one to resume from, and `let_go` of those the run's `Retention` does not keep.

    The ledger (checkpoints.json) is the record: a checkpoint is written whole, then recorded; it
    is let go of in the other order, its entry first, then its file. So a kill anywhere leaves at
    worst a file without an entry, never an entry without its file, and such a file is removed by
    the run's next job (as the temporaries of killed writes are). Only the job's main process, under
    its lease on the run directory, writes or deletes; the others assemble and restore state.
    """

    def __init__(self, run_dir: Path, provenance: Provenance, retention: Retention) -> None:
        self.run_dir, self.provenance, self.retention = run_dir, provenance, retention

    def named(self, resume: Path | None) -> Saved | None:
        """The checkpoint `--resume` names, checked (before anything is written) to be this run's."""
        if resume is None:
            return None
        state = load_checkpoint(resume, self.provenance, resume=True)
        if run_dir_of(Path(resume)).resolve() != self.run_dir.resolve():
            raise UserError(
                f"--resume {resume}: a checkpoint of run directory {run_dir_of(Path(resume))}, not of "
                f"runtime.output_dir {self.run_dir}; a run resumes in its own directory"
            )
        relative = Path(resume).resolve().relative_to(self.run_dir.resolve()).as_posix()
        epoch = checkpoint_epoch(relative)
        return Saved(self.retention.epochs if epoch is None else epoch, relative, state)

    def load(self, context: Context, named: Saved | None = None) -> tuple[Saved | None, list[str]]:
        """The checkpoint the job starts from: `named`, else the newest valid one (None: the start),
        and what the main process noted on the way (files removed, newer checkpoints passed over,
        for train.log). The main process looks, under its lease, and tells the others, which load
        the same file."""
        notes: list[str] = []
        found = named
        if context.is_main:
            notes = [
                f"removed {relative}, a checkpoint not recorded in {LEDGER} (a killed job's)"
                for relative in self._remove_unrecorded()
            ]
            if found is None:
                found, passed = self._newest()
                notes += [f"passed over {reason}" for reason in passed]
        choice = context.broadcast(None if found is None else (found.epoch, found.relative))
        if found is None and choice is not None:  # another process of the job
            found = Saved(choice[0], choice[1], load_checkpoint(self.run_dir / choice[1], self.provenance, resume=True))
        return found, notes

    def save(self, epoch: int, parts: Mapping[str, Stateful], tokens: int, writes: bool) -> tuple[str, str | None]:
        """The state after `epoch` epochs (`tokens` trained): every part's state and the provenance
        header, written and recorded where this process `writes`. The file (relative to the run
        directory) and its SHA-256 (None where this process does not write)."""
        relative = self.retention.checkpoint(epoch)
        states = {key: part.state_dict() for key, part in parts.items()}  # collective on a distributed engine
        if not writes:
            return relative, None
        header = {
            "run_id": self.run_dir.name,
            "recipe_identity": self.provenance.recipe_identity,
            "cache_identity": self.provenance.cache_identity,
            "source_hash": self.provenance.source_hash,
            "tokens": tokens,
        }
        return relative, save_checkpoint(self.run_dir, relative, {**header, **states})

    @staticmethod
    def restore(parts: Mapping[str, Stateful], saved: Saved) -> None:
        """Every part from a checkpoint `load` found."""
        for key, part in parts.items():
            part.load_state_dict(saved.state[key])

    def let_go(self, epoch: int) -> None:
        """Delete the checkpoints that the one holding `epoch` replaces under the run's retention:
        their ledger entries first (one atomic write), then their files; an emptied checkpoints/
        folder goes too."""
        kept = self.retention.kept_epochs
        ledger = read_checkpoint_ledger(self.run_dir)
        recorded = {
            name
            for name in ledger
            if (found := checkpoint_epoch(name)) is not None and found < epoch and found not in kept
        }
        earlier = sorted(recorded | {name for found, name in self._on_disk() if found < epoch and found not in kept})
        if recorded:
            _write_ledger(self.run_dir, {name: digest for name, digest in ledger.items() if name not in recorded})
        self._remove(earlier)

    def _on_disk(self) -> list[tuple[int, str]]:
        """(epoch, file) of every checkpoint in the run's checkpoints/ folder before the budget's end."""
        return [(epoch, name) for epoch, name in checkpoints_on_disk(self.run_dir) if epoch < self.retention.epochs]

    def _remove_unrecorded(self) -> list[str]:
        """Delete the checkpoints/ files the ledger does not record: a killed job's, written but not
        yet recorded, or let go of after their entry was; none can be resumed from."""
        ledger = read_checkpoint_ledger(self.run_dir)
        unrecorded = sorted(relative for _epoch, relative in self._on_disk() if relative not in ledger)
        self._remove(unrecorded)
        return unrecorded

    def _remove(self, relatives: list[str]) -> None:
        """Delete checkpoint files (none recorded any more); an empty checkpoints/ folder goes too
        (this job's, or one a job killed between its last file and the folder left)."""
        for relative in relatives:
            remove_file(self.run_dir / relative)
        folder = self.run_dir / CHECKPOINT_DIR
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()

    def _newest(self) -> tuple[Saved | None, list[str]]:
        """The newest checkpoint this run can resume from, checked by content (the ledger's hash, the
        run, recipe, cache and trainer identities, the format), None when there is none; and why
        each newer one was passed over."""
        passed = []
        found = [(self.retention.epochs, FINAL)] if (self.run_dir / FINAL).is_file() else []
        for epoch, relative in sorted(found + self._on_disk(), reverse=True):
            try:
                state = load_checkpoint(self.run_dir / relative, self.provenance, resume=True)
            except UserError as error:
                passed.append(str(error))
                continue
            if state.get("run_id") != self.run_dir.name:
                passed.append(
                    f"checkpoint {self.run_dir / relative}: written for run {state.get('run_id')!r}, "
                    f"not {self.run_dir.name!r}"
                )
                continue
            return Saved(epoch, relative, state), passed
        return None, passed


def _write_ledger(run_dir: Path, ledger: dict[str, str]) -> None:
    atomic_write_text(run_dir / LEDGER, json.dumps(ledger, indent=2, sort_keys=True) + "\n")


def save_checkpoint(run_dir: Path, relative: str, payload: dict[str, Any]) -> str:
    """Write a checkpoint atomically, then record its hash in the ledger; return the hash."""
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, **payload}, buffer)
    data = buffer.getvalue()
    digest = sha256_bytes(data)
    atomic_write_bytes(run_dir / relative, data)
    _write_ledger(run_dir, read_checkpoint_ledger(run_dir) | {relative: digest})
    return digest


def _ledger_problem(run_dir: Path, relative: str) -> str | None:
    """Why `relative` is not the file the ledger recorded; None when it is."""
    path = run_dir / relative
    if not path.is_file():
        return "no such file"
    recorded = read_checkpoint_ledger(run_dir).get(relative)
    if recorded is None:
        return f"not recorded in {run_dir / LEDGER}; refusing an unverifiable file"
    actual = sha256_file(path)
    if actual != recorded:
        return f"SHA-256 {actual[:16]}… does not match the recorded {recorded[:16]}… (truncated or altered)"
    return None


def load_checkpoint(
    path: Path, expected: Provenance | None = None, map_location: str = "cpu", resume: bool = False
) -> dict[str, Any]:
    """Load a checkpoint after checking its hash against the ledger beside it, its format (FORMAT
    to `resume` from it, else one of WEIGHT_FORMATS) and its provenance."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint {path}: no such file")
    run_dir = run_dir_of(path)
    if (problem := _ledger_problem(run_dir, path.resolve().relative_to(run_dir.resolve()).as_posix())) is not None:
        raise UserError(f"checkpoint {path}: {problem}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True, mmap=True)  # ranks share pages
    except Exception as error:  # noqa: BLE001 - any unpickling failure means a bad file
        raise UserError(f"checkpoint {path}: unreadable ({type(error).__name__})") from None
    _check_format(path, state.get("format"), resume)
    if expected is not None:
        _check_provenance(path, state, expected)
    return state


def _check_format(path: Path, have: object, resume: bool) -> None:
    if have == FORMAT or (not resume and have in WEIGHT_FORMATS):
        return
    if resume and have in WEIGHT_FORMATS:
        raise UserError(
            f"checkpoint {path}: format {have}, written by an older ebd2n; this one resumes only format {FORMAT}: "
            "start the run again, or a new run from it with training.init_from"
        )
    raise UserError(
        f"checkpoint {path}: format {have}, not one this ebd2n reads ({FORMAT} to resume, "
        f"{', '.join(map(str, WEIGHT_FORMATS))} for weights); use the ebd2n version that wrote it"
    )


def _check_provenance(path: Path, state: dict[str, Any], expected: Provenance) -> None:
    for field in ("recipe_identity", "cache_identity", "source_hash"):
        have, want = state.get(field), getattr(expected, field)
        if want is not None and have != want:
            what = field.replace("_", " ")
            raise UserError(
                f"checkpoint {path}: {what} {str(have)[:16]}… differs from this run's {want[:16]}…; "
                "it belongs to another recipe, cache or trainer version"
            )


VOLATILE = {("progress", "job_ids"), ("progress", "started"), ("metrics",)}
"""What differs between two checkpoints of the same training: the jobs that wrote it, when they
started, and where its metrics.jsonl (whose lines hold timings) ended."""


def content_digest(state: Mapping[str, Any]) -> str:
    """SHA-256 of what defines a checkpoint: every tensor (dtype, shape, bytes) and value but VOLATILE,
    in key order. A bitwise retrain has the same digest; a file's SHA-256 differs with its job ids."""
    digest = hashlib.sha256()

    def walk(value: Any, path: tuple[str, ...]) -> None:
        if path in VOLATILE:
            return
        digest.update(json.dumps(path).encode())
        if isinstance(value, torch.Tensor):
            flat = value.detach().cpu().reshape(-1).contiguous()
            digest.update(f"{flat.dtype} {tuple(value.shape)}".encode())
            digest.update(flat.view(torch.uint8).numpy().tobytes())
        elif isinstance(value, Mapping):
            for key in sorted(value, key=str):
                walk(value[key], (*path, str(key)))
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                walk(item, (*path, str(index)))
        else:
            digest.update(json.dumps(value).encode())

    walk(state, ())
    return digest.hexdigest()


def run_dir_of(path: Path) -> Path:
    """The run directory of a checkpoint: checkpoints live in the run directory or its checkpoints/ folder."""
    parent = path.parent
    return parent.parent if parent.name == CHECKPOINT_DIR else parent
