"""A job's record of its own time (ebd2n.job_time): appended whole, read past a torn line, and
counted from the start of the job's process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from ebd2n.job_time import job_id, record_job, recorded_jobs
from ebd2n.layout import JOB_RECORDS


def test_job_records_append_and_a_torn_line_is_passed_over(tmp_path: Path) -> None:
    record_job(tmp_path, "train", 1)
    with open(tmp_path / JOB_RECORDS, "a") as file:
        file.write('{"job": "local-2", "kind": "tra')  # a job killed mid-write
    record_job(tmp_path, "validate", None)
    records = recorded_jobs(tmp_path)
    result = (
        [(r["kind"], r["epoch"]) for r in records],
        {r["job"] for r in records},
        all(r["seconds"] >= 0 for r in records),
    )
    assert result[:2] == ([("train", 1), ("validate", None)], {job_id()}) and result[2] >= 0


def test_job_without_records_has_none(tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / JOB_RECORDS).write_text(
        '[1, 2]\n{"seconds": "x"}\n{"seconds": NaN}\n{"seconds": -1}\n{"seconds": true}\n'
    )
    assert (recorded_jobs(tmp_path), recorded_jobs(tmp_path / "other")) == ([], [])


def test_job_time_counts_from_the_process_start_not_from_the_record(tmp_path: Path) -> None:
    """A process that sleeps 1.5 s before it imports ebd2n records at least those 1.5 s."""
    script = (
        "import sys, time; time.sleep(1.5); from pathlib import Path; from ebd2n.job_time import record_job; "
        "record_job(Path(sys.argv[1]), 'train', 1)"
    )
    started = time.time()
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True)
    wall = time.time() - started
    (record,) = recorded_jobs(tmp_path)
    assert 1.5 <= record["seconds"] <= wall, (record, wall)
    assert json.loads((tmp_path / JOB_RECORDS).read_text())["started"][:4] == time.strftime("%Y")
