"""The lineage of branched runs: a longer horizon's run starts from its parent's pre-decay checkpoint.

The run's own lineage.json (ebd2n.train.branch) names the parent run, the checkpoint, its SHA-256
and its content digest when the branch was made. The audit holds it to the plan (the parent the grid
gives, at the branch epoch the frozen trainer planned) and to the parent's file as it is now, by
content: a parent trained again bitwise (its file differs only in its job ids and times) still shows
the trunk the run continued; a replaced or removed parent checkpoint means it can no longer be shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ebd2n.audit.checks import Check
from ebd2n.audit.runs import RunView, json_object
from ebd2n.campaign.grid import Grid
from ebd2n.campaign.horizons import parent_run
from ebd2n.campaign.runs import Run
from ebd2n.fileidentity import HashMemory
from ebd2n.layout import LINEAGE, slice_checkpoint
from ebd2n.train.plan import SlicePlan
from ebd2n.train.records import DIVERGENCE, Divergence


def check_lineage(
    views: Mapping[str, RunView], grid: Grid, plans: Mapping[str, SlicePlan | None], memory: HashMemory
) -> Check:
    """Every finished branched run records the branch its plan has, from a parent checkpoint that is
    still the one it started from."""
    check = Check("branched runs start from their parent's unchanged pre-decay checkpoint")
    for view in views.values():
        plan = plans.get(view.run.base)
        parent = parent_run(grid, view.run)
        if not view.finished or plan is None or plan.branch is None or parent is None:
            continue
        check.examined += 1
        problems = _problems(view, parent, views.get(parent.id), plan.branch, memory, check.notes)
        check.violations += [f"{view.id}: {problem}" for problem in problems]
    if not check.examined:
        check.reason = "no finished branched runs yet"
    return check


def _problems(
    view: RunView, parent: Run, parent_view: RunView | None, epoch: int, memory: HashMemory, notes: list[str]
) -> Iterable[str]:
    if LINEAGE not in view.files:
        diverged = Divergence.of((parent_view.results or {}).get(DIVERGENCE)) if parent_view else None
        if diverged is not None and diverged.epoch is not None and diverged.epoch <= epoch:
            return  # the parent diverged before its trunk's end: the run trained from the start
        yield f"{LINEAGE} missing: its plan branches it from {parent.id} at epoch {epoch}"
        return
    lineage, problem = json_object(view.paths / LINEAGE)
    if lineage is None:
        yield f"{LINEAGE}: {problem}"
        return
    expected = {"parent": parent.id, "checkpoint": slice_checkpoint(epoch), "epoch": epoch}
    wrong = [f"{key} {lineage.get(key)!r}" for key, value in expected.items() if lineage.get(key) != value]
    if wrong:
        yield f"{LINEAGE} records {', '.join(wrong)}; its plan branches it from {parent.id}'s epoch {epoch}"
        return
    name, recorded = expected["checkpoint"], str(lineage.get("sha256"))
    now = parent_view.hashes.get(name) if parent_view else None
    if now is None:
        yield f"branched from {parent.id}'s {name} (sha256 {recorded[:16]}…), which is gone"
    elif now != recorded and _same_content(parent_view, name, memory, lineage.get("content_sha256")):
        notes.append(f"{view.id}: its parent {parent.id} was trained again; {name} holds the same trunk by content")
    elif now != recorded:
        yield (
            f"branched from {parent.id}'s {name} (sha256 {recorded[:16]}…), which now holds sha256 {now[:16]}…: "
            "the parent checkpoint was replaced"
        )


def _same_content(view: RunView, name: str, memory: HashMemory, recorded: object) -> bool:
    """Whether a run's checkpoint holds the content a lineage.json recorded (never for a lineage
    without one, written before ebd2n recorded it, or an unreadable file)."""
    return isinstance(recorded, str) and _content(view, name, memory) == recorded


def _content(view: RunView, name: str, memory: HashMemory) -> str | None:
    """The content digest of a run's checkpoint (None: unreadable), kept beside its hash in the
    audit's memory while the file's identity holds."""
    import torch

    from ebd2n.train.checkpoint import content_digest  # torch: only for a parent whose file changed

    key = view.prefix + name
    digest = memory.extra(key, "content")
    if digest is None:
        try:
            state = torch.load(view.paths / name, map_location="cpu", weights_only=True, mmap=True)
        except Exception:  # noqa: BLE001 - any unpickling failure means an unreadable file
            return None
        digest = content_digest(state)
        memory.keep(key, "content", digest)
    return digest
