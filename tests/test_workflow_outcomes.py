"""Real Snakemake campaigns whose grid shrinks and grows back, and one whose job fails.

Retiring a point (removing its learning rate from the campaign file) keeps its runs on disk
untouched, records the new grid, leaves the audit passing and the report listing them as retired;
putting the point back reuses them byte for byte and trains nothing. A campaign with a failed job
still finishes every other run, and its report and status name the failed run with its log.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from test_workflow import job_counts
from workflow_support import TINY, copy_repo, environment, snakemake, write_campaign

from ebd2n.faults import KILL_AT, KILL_TARGET

RAW = json.loads(json.dumps(TINY))
RAW["overrides"] = RAW["overrides"] | {"training.max_tokens": 8192, "training.epoch_tokens": 4096}  # 2 epochs x 4 steps
RAW["grid"]["learning_rates"]["synchronous"] = [0.003, 0.004]
RETIRED = "synchronous-lr0.004-beta20.99-seed42"
KEPT = "synchronous-lr0.003-beta20.99-seed42"
TRAINING = ("resolve_recipe", "train_slice", "train_final", "validate_run")


def _hashes(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def _trained(result: subprocess.CompletedProcess) -> dict[str, int]:
    """The per-run jobs (resolving, training, validation) a Snakemake run started, from its job stats."""
    return {rule: count for rule, count in job_counts(result.stdout + result.stderr).items() if rule in TRAINING}


def _ebd2n(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ebd2n", *args], cwd=repo, env=environment(), capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = copy_repo(tmp_path_factory.mktemp("two-lrs"))
    result = snakemake(repo, "--configfile", write_campaign(repo, RAW))
    assert _trained(result) == {"resolve_recipe": 2, "train_slice": 2, "train_final": 2, "validate_run": 2}
    return repo


@pytest.mark.slow
def test_workflow_retired_point_stays_untouched_and_comes_back_byte_for_byte(finished: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(finished, repo, symlinks=True)
    campaign = repo / "results/tiny"
    before = _hashes(campaign / "runs")
    shrunk = json.loads(json.dumps(RAW))
    shrunk["grid"]["learning_rates"]["synchronous"] = [0.003]
    retiring = snakemake(repo, "--configfile", write_campaign(repo, shrunk))
    retired_state = (
        _hashes(campaign / "runs"),
        (campaign / "audit.passed").is_file(),
        json.loads((campaign / "campaign.json").read_text()).get("retired"),
        pl.read_csv(campaign / "report/runs.csv").select("run", "status").rows(),
        "Retired (1)" in (campaign / "report/index.html").read_text(),
        sorted(path.name for path in (campaign / "frozen/spec").iterdir()),
        f"retired (kept on disk, no longer in the campaign file's grid): {RETIRED}"
        in _ebd2n(repo, "status", "results/tiny").stdout,
    )
    restoring = snakemake(repo, "--configfile", write_campaign(repo, RAW))
    restored_state = (
        _hashes(campaign / "runs"),
        (campaign / "audit.passed").is_file(),
        pl.read_csv(campaign / "report/runs.csv").select("run", "status").rows(),
        sorted(path.name for path in (campaign / "frozen/spec").iterdir()),
    )
    assert (_trained(retiring), _trained(restoring)) == ({}, {})
    assert retired_state == (
        before,
        True,
        [RETIRED],
        [(KEPT, "complete"), (RETIRED, "retired")],
        True,
        ["1.json", "2.json"],
        True,
    )
    assert restored_state == (before, True, [(KEPT, "complete"), (RETIRED, "complete")], ["1.json", "2.json", "3.json"])


@pytest.mark.slow
def test_workflow_failed_job_rest_finishes_and_the_report_names_it(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path)
    env = environment() | {KILL_AT: f"before:*/runs/{RETIRED}/final.pt", KILL_TARGET: ""}  # its final job dies
    env.pop("EBD2N_WARM", None)
    result = snakemake(repo, "--configfile", write_campaign(repo, RAW), check=False, env=env)
    campaign = repo / "results/tiny"
    report = _ebd2n(repo, "report", "results/tiny")
    status = _ebd2n(repo, "status", "results/tiny")
    outcomes = json.loads((campaign / "report/results.json").read_text())["outcomes"]
    page = (campaign / "report/index.html").read_text()
    cost = json.loads((campaign / "report/results.json").read_text())["cost"]["runs"]
    kept = (campaign / "runs" / KEPT / "results.json").is_file()
    assert (result.returncode != 0, kept, report.returncode) == (True, True, 0)
    assert [entry["run"] for entry in outcomes["failed"]] == [RETIRED]
    assert outcomes["failed"][0]["log"][0].startswith(f"results/tiny/logs/runs/{RETIRED}/")
    assert "inside the searched LR range" not in page and "Failed (1)" in page
    assert [run["seconds"] > 0 for run in cost if run["run"] == RETIRED] == [True]
    assert (status.returncode, f"{RETIRED}  failed" in status.stdout, "1 failed" in status.stdout) == (0, True, True)
