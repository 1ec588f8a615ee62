"""The quiet console (Snakemake's `--logger ebd2n`, set by profiles/default): real Snakemake on a
two-job workflow shaped like a campaign, one job failing. One line per finished job, the failure
in full with its log, and each campaign's status page rewritten as jobs finish and fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
SNAKEFILE = """
rule all:
    input:
        "results/sweep/runs/good/results.json",
        "results/sweep/runs/bad/results.json",

rule validate:
    output:
        "results/{campaign}/runs/{run}/results.json",
    log:
        "results/{campaign}/logs/runs/{run}/final.log",
    shell:
        "if [ {wildcards.run} = bad ]; then echo 'ebd2n train: run failed: loss is NaN at step 9' > {log}; exit 1; fi; "
        "echo '{{}}' > {output}"
"""


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    workdir = tmp_path_factory.mktemp("console")
    (workdir / "Snakefile").write_text(SNAKEFILE)
    plan = {"campaign": "sweep", "cost_per_gpu_hour": None,
            "runs": [{"run": run, "base": "base", "gpus": 0, "cpus": 1} for run in ("good", "bad")]}
    (workdir / "results/sweep/status").mkdir(parents=True)
    (workdir / "results/sweep/status/plan.json").write_text(json.dumps(plan))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    completed = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--keep-going", "--logger", "ebd2n"],
                               cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    return completed, workdir


def test_console_one_line_per_finished_job(console) -> None:
    completed, _ = console
    done = [line.split("] ", 1)[1] for line in completed.stderr.splitlines() if " done  " in line]
    assert (completed.returncode, done) == (1, ["1/3 done  validate sweep/good"])


def test_console_shows_the_failure_in_full(console) -> None:
    completed, _ = console
    text = completed.stderr
    result = ("Error in rule validate:" in text, "Logfile results/sweep/logs/runs/bad/final.log:" in text,
              "ebd2n train: run failed: loss is NaN at step 9" in text, "reason:" in text, "message: None" in text)
    assert result == (True, True, True, False, False)


def test_console_rewrites_the_status_page(console) -> None:
    _, workdir = console
    page = (workdir / "results/sweep/status.html").read_text()
    assert "campaign sweep: 2 runs: 1 done, 0 running, 1 failed, 0 pending" in page
