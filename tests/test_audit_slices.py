"""The audit accepts a run's slice records only at its plan's slice ends (the frozen trainer's plan),
not at every epoch boundary of its budget."""

from __future__ import annotations

import json
from pathlib import Path

from campaign_tree import grid_runs, write_campaign

from ebd2n.audit.run_checks import check_retention
from ebd2n.audit.runs import read_run
from ebd2n.campaign.runs import parse_run_id
from ebd2n.fileidentity import load_memory
from ebd2n.layout import CampaignPaths
from ebd2n.train.plan import plan_slices


def _slice_record_named(tmp_path: Path, epochs_per_slice: int) -> bool:
    """A fabricated four-epoch run holding slices/epoch-1.json: whether the retention check names it
    when the run's plan cuts slices of `epochs_per_slice` epochs."""
    spec = grid_runs(["synchronous"], [0.001], [0.95], [42])[0]
    campaign = write_campaign(tmp_path, "sliced", [spec], epochs=4)
    files = CampaignPaths(campaign).run(spec.run_id)
    files.slice_record(1).parent.mkdir(parents=True, exist_ok=True)
    files.slice_record(1).write_text(json.dumps({"epoch": 1}))
    view = read_run(
        files, parse_run_id(spec.run_id), load_memory(tmp_path / "hashes.json", tmp_path, None, full=True), ""
    )
    check = check_retention([view], {"base": plan_slices(4, epochs_per_slice)})
    return any("unexpected file(s) slices/epoch-1.json" in violation for violation in check.violations)


def test_audit_accepts_a_slice_record_at_a_slice_end(tmp_path: Path) -> None:
    assert _slice_record_named(tmp_path, 1) is False


def test_audit_names_a_slice_record_between_slice_ends(tmp_path: Path) -> None:
    assert _slice_record_named(tmp_path, 2) is True
