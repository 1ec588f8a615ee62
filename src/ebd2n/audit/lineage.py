"""The lineage of branched runs: a longer horizon's run starts from its parent's pre-decay checkpoint.

The run's own lineage.json (ebd2n.train.branch) names the parent run, the checkpoint and its SHA-256
when the branch was made. The audit holds it to the plan (the parent the grid gives, at the branch
epoch the frozen trainer planned) and to the parent's file as it is now, by content: a replaced or
removed parent checkpoint means the trunk the run continued can no longer be shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ebd2n.audit.checks import Check
from ebd2n.audit.runs import RunView, json_object
from ebd2n.campaign.grid import Grid
from ebd2n.campaign.horizons import parent_run
from ebd2n.campaign.runs import Run
from ebd2n.layout import LINEAGE, slice_checkpoint
from ebd2n.train.plan import SlicePlan
from ebd2n.train.records import DIVERGENCE, Divergence


def check_lineage(views: Mapping[str, RunView], grid: Grid, plans: Mapping[str, SlicePlan | None]) -> Check:
    """Every finished branched run records the branch its plan has, from a parent checkpoint that is
    still the one it started from."""
    check = Check("branched runs start from their parent's unchanged pre-decay checkpoint")
    for view in views.values():
        plan = plans.get(view.run.base)
        parent = parent_run(grid, view.run)
        if not view.finished or plan is None or plan.branch is None or parent is None:
            continue
        check.examined += 1
        check.violations += [f"{view.id}: {p}" for p in _problems(view, parent, views.get(parent.id), plan.branch)]
    if not check.examined:
        check.reason = "no finished branched runs yet"
    return check


def _problems(view: RunView, parent: Run, parent_view: RunView | None, epoch: int) -> Iterable[str]:
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
    elif now != recorded:
        yield (
            f"branched from {parent.id}'s {name} (sha256 {recorded[:16]}…), which now holds sha256 {now[:16]}…: "
            "the parent checkpoint was replaced"
        )
