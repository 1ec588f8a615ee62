"""The campaign's Parquet metrics store: polars and pyarrow read back every run's metrics.jsonl exactly,
one mode or one run alone, byte-stable rebuilds, and the audit names an edited file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ebd2n.audit.evidence import report_artifacts
from ebd2n.audit.report_check import check_report
from ebd2n.fileidentity import load_memory
from ebd2n.jsonio import read_jsonl
from ebd2n.layout import CampaignPaths
from ebd2n.report import build_report


def _store(campaign: Path) -> Path:
    return campaign / "report" / "metrics"


def _jsonl(campaign: Path, run_id: str) -> list[dict[str, Any]]:
    return read_jsonl(campaign / "runs" / run_id / "metrics.jsonl")


def _records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Store rows as metrics.jsonl records: absent keys (null) left out, nested values decoded."""
    return [{k: json.loads(v) if k == "memory" else v for k, v in row.items() if v is not None} for row in rows]


def _run_ids(campaign: Path) -> list[str]:
    return sorted(p.name for p in (campaign / "runs").iterdir())


def test_store_polars_reads_every_run_exactly(curves_campaign: Path) -> None:
    frame = pl.read_parquet(_store(curves_campaign) / "**" / "*.parquet", hive_partitioning=True)
    for run_id in _run_ids(curves_campaign):
        rows = frame.filter(pl.col("run") == run_id).drop("mode", "run").to_dicts()
        assert _records(rows) == _jsonl(curves_campaign, run_id)
    assert frame.height == sum(len(_jsonl(curves_campaign, run_id)) for run_id in _run_ids(curves_campaign))


def test_store_pyarrow_reads_one_mode_without_the_rest(curves_campaign: Path) -> None:
    dataset = ds.dataset(_store(curves_campaign), format="parquet", partitioning="hive")
    table = dataset.to_table(filter=ds.field("mode") == "packed-4")
    runs = sorted(set(table.column("run").to_pylist()))
    assert runs == [run_id for run_id in _run_ids(curves_campaign) if run_id.startswith("packed-4-")]
    opened = [f for f in dataset.get_fragments(filter=ds.field("mode") == "packed-4")]
    assert all("mode=packed-4" in fragment.path for fragment in opened) and len(opened) == len(runs)


def test_store_one_run_file_equals_its_metrics(curves_campaign: Path) -> None:
    run_id = _run_ids(curves_campaign)[-1]
    path = _store(curves_campaign) / "mode=synchronous" / f"run={run_id}" / "part-0.parquet"
    result = _records(pq.read_table(path).to_pylist())
    assert result == _jsonl(curves_campaign, run_id)


def test_store_runs_parquet_equals_runs_csv(curves_campaign: Path) -> None:
    report = curves_campaign / "report"
    result = pl.read_parquet(report / "runs.parquet")
    expected = pl.read_csv(report / "runs.csv", schema=result.schema)
    assert result.equals(expected) and result.height == 24


def test_store_rebuild_is_byte_identical(campaign_tree: Callable[..., Path], tmp_path: Path) -> None:
    campaign = campaign_tree(steps_per_epoch=5)
    first, second = tmp_path / "first", tmp_path / "second"
    build_report(campaign, first)
    build_report(campaign, second)
    files = sorted(p.relative_to(first) for p in first.rglob("*.parquet"))
    assert len(files) == 25
    assert all((first / f).read_bytes() == (second / f).read_bytes() for f in files)


def test_store_edited_parquet_is_named_by_the_audit(campaign_tree: Callable[..., Path]) -> None:
    campaign = campaign_tree(steps_per_epoch=3)
    build_report(campaign)
    run_id = _run_ids(campaign)[0]
    relative = f"metrics/mode=packed-4/run={run_id}/part-0.parquet"
    path = campaign / "report" / relative
    table = pq.read_table(path)
    losses = pl.Series([1.0] * table.num_rows).to_arrow()
    pq.write_table(table.set_column(table.schema.get_field_index("loss"), "loss", losses), path)
    paths = CampaignPaths(campaign)
    memory = load_memory(paths.audit_hashes, campaign, None, full=True)
    result = check_report(paths, None, memory, report_artifacts(paths, memory), None).violations
    assert result == [f"report/{relative}: differs from a recomputation from the runs (rebuild: ebd2n report)"]
