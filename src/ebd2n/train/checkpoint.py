"""Checkpoints: the assembly of the trainer's stateful parts; atomic writes, a hash ledger per run,
verified and safe loads.

A checkpoint holds a provenance header (run, recipe, cache and trainer source, tokens trained)
and the `state_dict()` of every stateful part of the trainer under its own key (engine, data
position, RNG, counters, metrics writer); `Checkpointer` saves and restores them together.
Every checkpoint's SHA-256 is recorded in the run's `checkpoints.json` when it is written; a load
recomputes the hash and refuses a file that is truncated or altered, and refuses one written for
another recipe, cache or trainer source (resuming it would silently mix two experiments).
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from ebd2n.atomic import atomic_write_bytes, atomic_write_text, remove_file, sha256_bytes, sha256_file
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.layout import CHECKPOINT_DIR, CHECKPOINT_LEDGER as LEDGER, FINAL, checkpoint_epoch

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


class Checkpointer:
    """Saves and restores a run's checkpoints: the provenance header and every part's state.

    Every process of a job assembles the parts (a distributed engine's state_dict is collective);
    only the process that `writes` (the job's main process) saves the file.
    """

    def __init__(self, run_dir: Path, provenance: Provenance, parts: Mapping[str, Stateful], writes: bool) -> None:
        self.run_dir, self.provenance, self.parts, self.writes = run_dir, provenance, parts, writes

    def save(self, relative: str, tokens: int) -> str | None:
        """Write `relative` (in the run directory) holding `tokens` trained; its SHA-256 (None where this process does not write)."""
        states = {key: part.state_dict() for key, part in self.parts.items()}
        if not self.writes:
            return None
        header = {
            "run_id": self.run_dir.name,
            "recipe_identity": self.provenance.recipe_identity,
            "cache_identity": self.provenance.cache_identity,
            "source_hash": self.provenance.source_hash,
            "tokens": tokens,
        }
        return save_checkpoint(self.run_dir, relative, {**header, **states})

    def restore(self, checkpoint: dict[str, Any]) -> None:
        """Every part from a checkpoint `load_checkpoint` read."""
        for key, part in self.parts.items():
            part.load_state_dict(checkpoint[key])


def read_checkpoint_ledger(run_dir: Path) -> dict[str, str]:
    """Checkpoint file (relative to the run directory) -> SHA-256."""
    return read_json(run_dir / LEDGER) or {}


def save_checkpoint(run_dir: Path, relative: str, payload: dict[str, Any]) -> str:
    """Write a checkpoint atomically, record its hash in the ledger, return the hash."""
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, **payload}, buffer)
    data = buffer.getvalue()
    digest = sha256_bytes(data)
    atomic_write_bytes(run_dir / relative, data)
    ledger = read_checkpoint_ledger(run_dir)
    ledger[relative] = digest
    atomic_write_text(run_dir / LEDGER, json.dumps(ledger, indent=2, sort_keys=True) + "\n")
    return digest


def remove_checkpoints(run_dir: Path, names: list[str]) -> None:
    """Delete checkpoints a later one has replaced (retention), then their ledger entries; an
    emptied checkpoints/ folder goes too."""
    for relative in names:
        remove_file(run_dir / relative)
    ledger = read_checkpoint_ledger(run_dir)
    if any(ledger.pop(relative, None) is not None for relative in list(names)):
        atomic_write_text(run_dir / LEDGER, json.dumps(ledger, indent=2, sort_keys=True) + "\n")
    folder = run_dir / CHECKPOINT_DIR
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def saved_states(run_dir: Path, epochs: int) -> list[tuple[int, str]]:
    """(epoch, file) of every checkpoint in the run directory, newest first (final.pt: `epochs`)."""
    found = [(epochs, FINAL)] if (run_dir / FINAL).is_file() else []
    folder = run_dir / CHECKPOINT_DIR
    for path in folder.glob("*.pt") if folder.is_dir() else []:
        epoch = checkpoint_epoch(f"{CHECKPOINT_DIR}/{path.name}")
        if epoch is not None and epoch < epochs:
            found.append((epoch, f"{CHECKPOINT_DIR}/{path.name}"))
    return sorted(found, reverse=True)


def newest_state(run_dir: Path, provenance: Provenance, epochs: int) -> tuple[Saved | None, list[str]]:
    """The newest checkpoint this run can resume from, checked by content (the ledger's hash, the
    run, recipe, cache and trainer identities, the format), None when there is none; and why each
    newer one was passed over."""
    passed = []
    for epoch, relative in saved_states(run_dir, epochs):
        try:
            state = load_checkpoint(run_dir / relative, provenance, resume=True)
        except UserError as error:
            passed.append(str(error))
            continue
        if state.get("run_id") != run_dir.name:
            passed.append(f"checkpoint {run_dir / relative}: written for run {state.get('run_id')!r}, not {run_dir.name!r}")
            continue
        return Saved(epoch, relative, state), passed
    return None, passed


def is_recorded(run_dir: Path, relative: str) -> bool:
    """The file is there and is the one the run's ledger recorded (written whole, then recorded)."""
    return _ledger_problem(run_dir, relative) is None


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


def load_checkpoint(path: Path, expected: Provenance | None = None, map_location: str = "cpu",
                    resume: bool = False) -> dict[str, Any]:
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
    raise UserError(f"checkpoint {path}: format {have}, not one this ebd2n reads ({FORMAT} to resume, "
                    f"{', '.join(map(str, WEIGHT_FORMATS))} for weights); use the ebd2n version that wrote it")


def _check_provenance(path: Path, state: dict[str, Any], expected: Provenance) -> None:
    for field in ("recipe_identity", "cache_identity", "source_hash"):
        have, want = state.get(field), getattr(expected, field)
        if want is not None and have != want:
            what = field.replace("_", " ")
            raise UserError(
                f"checkpoint {path}: {what} {str(have)[:16]}… differs from this run's {want[:16]}…; "
                "it belongs to another recipe, cache or trainer version"
            )


def run_dir_of(path: Path) -> Path:
    """The run directory of a checkpoint: checkpoints live in the run directory or its checkpoints/ folder."""
    parent = path.parent
    return parent.parent if parent.name == CHECKPOINT_DIR else parent
