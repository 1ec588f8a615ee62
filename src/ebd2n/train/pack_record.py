"""The record of the packs a run trained in: packs.json in its run directory, each slice end -> the
runs (directory names) it trained that slice with.

The trainer writes it for every member it trains before the pack trains, so a killed pack leaves the
members it was formed from, and the campaign re-forms the same pack for them (ebd2n.campaign.packs).
A member that ended before the slice (it diverged earlier) stays in the pack, which is named by all
its members, but records nothing of it: a job writes only into the runs it trains. It is the run's
own statement of how it was executed; the audit holds every member's to the others' and to the pack
job's record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from ebd2n.atomic import atomic_write_text, remove_temporaries
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.layout import RunPaths

PACK_LOG_HEADER = "training a pack of runs:"


def pack_digest(members: Sequence[str]) -> str:
    """The name of the pack of these runs (any order): its job's record is named by it."""
    return hashlib.sha256("\n".join(sorted(members)).encode()).hexdigest()[:16]


def read_packs(run_dir: Path) -> dict[int, list[str]]:
    """Slice end -> the members of the pack the run trained that slice in ({} for a run trained alone)."""
    path = RunPaths(run_dir).packs
    record = read_json(path)
    if record is None:
        return {}
    try:
        packs = {int(end): members for end, members in record.items()}
    except (AttributeError, ValueError):
        raise UserError(f"{path}: not a record of slice ends and the runs each trained with") from None
    if not all(isinstance(m, list) and all(isinstance(name, str) for name in m) for m in packs.values()):
        raise UserError(f"{path}: not a record of slice ends and the runs each trained with")
    return packs


def record_pack(run_dirs: Sequence[Path], end_epoch: int, members: Sequence[Path]) -> None:
    """Record in each of `run_dirs` that its slice to `end_epoch` trains in the pack of `members`."""
    names = sorted(Path(member).name for member in members)
    for run_dir in run_dirs:
        packs = read_packs(run_dir)
        if packs.get(end_epoch) == names:
            continue
        packs[end_epoch] = names
        text = json.dumps({str(end): packs[end] for end in sorted(packs)}, indent=1)
        atomic_write_text(RunPaths(run_dir).packs, text + "\n")


def pack_log_header(members: Sequence[str]) -> str:
    """The header of a pack job's log (after its start record), written by the workflow before the job starts: its
    members, so that a job failing before it records them (a launcher's error, a broken cache, a
    kill) is still their failure (ebd2n.campaign.results)."""
    return " ".join([PACK_LOG_HEADER, *members])


def pack_log_members(log: Path) -> list[str]:
    """The runs a pack job's log names in its header, the line after the job's start record
    (ebd2n.train.records.JOB_START) ([] for a log without the header)."""
    with open(log, encoding="utf-8", errors="replace") as file:
        heads = [file.readline().split() for _ in range(2)]
    words = next((words for words in heads if " ".join(words).startswith(PACK_LOG_HEADER)), [])
    return words[len(PACK_LOG_HEADER.split()) :]


def record_pack_job(path: Path, members: Sequence[Path], end_epoch: int) -> None:
    """The record of a pack's job, once it has trained its members to `end_epoch` (the workflow's output)."""
    record = {"epoch": end_epoch, "members": sorted(Path(member).name for member in members)}
    if Path(path).parent.is_dir():
        remove_temporaries(Path(path).parent)  # of a killed pack job's write
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
