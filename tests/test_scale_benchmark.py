"""The scale benchmark (benchmarks/run_scale.py) run small in CI, so that it keeps working as the
package changes: a structurally real 30-run campaign built (one run trained, the others made as
their trainer would have written them), then each command it times run once as a fresh process.
Its figures at 324, 3,000 and 10,000 runs are in benchmarks/README.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from offline_browser import MARKS
from workflow_support import REPO, environment

pytestmark = [pytest.mark.slow, *MARKS]


def test_the_scale_benchmark_runs_small(tmp_path: Path) -> None:
    """Every command succeeds on the 30-run campaign (its audits pass: a failing command stops the
    benchmark), and the campaign page paints within the 3 s the benchmark holds 10,000 runs to."""
    out = tmp_path / "run_scale.json"
    command = [sys.executable, "benchmarks/run_scale.py", "--sizes", "30", "--repeats", "1"]
    result = subprocess.run(
        [*command, "--keep", str(tmp_path / "scale"), "--out", str(out)],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    record = json.loads(out.read_text())
    measured = {name: len(found["seconds"]) for name, found in record["30"].items()}
    assert measured == {"audit": 1, "audit --full": 1, "status": 1, "report": 1, "first paint": 1}
    assert record["30"]["first paint"]["seconds"][0] < 3.0
