"""The campaign's metrics store: every run's metrics.jsonl as one Parquet dataset, plus runs.parquet.

`report/metrics/mode=<mode>/run=<run directory>/part-0.parquet` holds one run's records (per-step and
per-epoch, `type` says which) in file order, so polars, DuckDB, pandas or pyarrow read one mode or
one run without opening the rest (hive partitioning: the path names the mode and run). Every file
shares one schema, the union of the campaign's record keys: a key a run never records is null there.
Nested values (per-device memory) are JSON text. Files are written with fixed settings and no time
stamps, so an unchanged campaign rebuilds to identical bytes (the audit compares them).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from ebd2n.atomic import atomic_write_bytes, fsync_dir
from ebd2n.campaign.results import CampaignResults
from ebd2n.layout import METRICS_STORE, RUNS_PARQUET, run_paths
from ebd2n.train.records import read_metrics

STORE_FILE = "part-0.parquet"
_WRITE = {"compression": "zstd", "compression_level": 3, "use_dictionary": True, "write_statistics": True}
"""Fixed Parquet settings: the bytes depend on the records alone (and the pyarrow version)."""
_KIND_ORDER = {"type": 0, "step": 1, "epoch": 2, "tokens": 3}
"""Leading columns; the rest follow by name."""


def write_store(campaign: CampaignResults, out: Path) -> dict[str, pa.Table]:
    """Write `out/metrics/...` and `out/runs.parquet`; return each run's table by run directory.

    The dataset is written into a temporary folder beside it and renamed into place: one rename
    for hundreds of files, none of them fsynced alone (a derived file the report rebuilds and the
    audit compares byte for byte; the report itself is staged and published the same way)."""
    records = {
        directory: read_metrics(run_paths(campaign.directory / directory).metrics)
        for directory in campaign.runs["directory"]
    }
    schema = _schema([record for run in records.values() for record in run])
    staging = out / f".{METRICS_STORE}-{os.getpid()}"  # mkdtemp's would be private (0700) once renamed
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    tables = {}
    try:
        for mode, directory in campaign.runs.select("mode", "directory").iter_rows():
            if not records[directory]:
                continue  # no metrics yet (a resolved run that never trained): no partition
            table = pa.table([_column(records[directory], field) for field in schema], schema=schema)
            path = staging / partition(mode, Path(directory).name).removeprefix(f"{METRICS_STORE}/") / STORE_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(_parquet(table))
            tables[directory] = table
        if (out / METRICS_STORE).exists():
            shutil.rmtree(out / METRICS_STORE)
        staging.rename(out / METRICS_STORE)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(out)
    atomic_write_bytes(out / RUNS_PARQUET, _parquet(campaign.runs.to_arrow()))
    return tables


def partition(mode: str, run_id: str) -> str:
    """One run's folder in the store, relative to the report (values escaped as hive paths are)."""
    return f"{METRICS_STORE}/mode={quote(mode, safe='')}/run={quote(run_id, safe='')}"


def _schema(records: list[dict[str, Any]]) -> pa.Schema:
    """One column per key any record holds: bool, int64, float64 (ints and floats mixed), else text."""
    kinds: dict[str, set[type]] = {}
    for record in records:
        for key, value in record.items():
            kinds.setdefault(key, set()).add(type(value))
    fields = [pa.field(key, _arrow_type(kinds[key] - {type(None)})) for key in sorted(kinds, key=_column_order)]
    return pa.schema(fields)


def _column_order(key: str) -> tuple[int, str]:
    return (_KIND_ORDER.get(key, len(_KIND_ORDER)), key)


def _arrow_type(kinds: set[type]) -> pa.DataType:
    if kinds == {bool}:
        return pa.bool_()
    if kinds == {int}:
        return pa.int64()
    if kinds and kinds <= {int, float}:
        return pa.float64()
    return pa.string()


def _column(records: list[dict[str, Any]], field: pa.Field) -> pa.Array:
    """One column of a run's records in the schema's type: text columns hold strings as they are,
    anything else as JSON."""
    values = [record.get(field.name) for record in records]
    if pa.types.is_string(field.type):
        values = [value if value is None or isinstance(value, str) else json.dumps(value) for value in values]
    return pa.array(values, type=field.type)


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **_WRITE)
    return sink.getvalue().to_pybytes()
