"""Campaigns on a real single-node SLURM cluster (tests/slurm/start-cluster.sh, run as root).

Each test copies the repository to tmp_path, puts tests/slurm/campaign.yaml there as
config/campaigns/slurm-tiny.yaml and types the README's command, `snakemake --profile slurm
--configfile config/campaigns/slurm-tiny.yaml`. The cluster must start: a test that cannot
reach it fails, it is never skipped (CI starts it first, in .ci/run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from workflow_support import REPO, TIMEOUT, assert_states_equal, copy_repo, environment

pytestmark = pytest.mark.slow

CAMPAIGN = "config/campaigns/slurm-tiny.yaml"
COMMAND = ["snakemake", "--profile", "slurm", "--configfile", CAMPAIGN]
RUNS = [f"synchronous-lr0.003-beta20.99-seed{seed}" for seed in (42, 43)]
HEADER = re.compile(r"########## job (\S+) ##########")


@pytest.fixture(scope="module")
def cluster() -> None:
    started = subprocess.run([REPO / "tests/slurm/start-cluster.sh"], capture_output=True, text=True, timeout=600)
    if started.returncode:
        pytest.fail(f"no SLURM cluster: {started.stderr.strip()}")


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same campaign run locally (warm start on): the weights every cluster run must match."""
    repo, env = _campaign_repo(tmp_path_factory.mktemp("local"))
    _snakemake(repo, env, ["snakemake", "--configfile", CAMPAIGN])
    assert list((repo / "tmp").glob(f"ebd2n-warm-{os.getuid()}/*.lock"))  # local jobs did start warm
    return repo


def _campaign_repo(directory: Path) -> tuple[Path, dict[str, str]]:
    """A repository copy with the test campaign, and its environment (a private TMPDIR)."""
    repo = copy_repo(directory)
    shutil.copy(REPO / "tests/slurm/campaign.yaml", repo / CAMPAIGN)
    (repo / "tmp").mkdir()
    return repo, environment() | {"TMPDIR": str(repo / "tmp")}


def _snakemake(repo: Path, env: dict[str, str], command: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if check and result.returncode:
        raise AssertionError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def _weights(repo: Path, run: str) -> dict:
    return torch.load(repo / "results/slurm-tiny/runs" / run / "final.pt", weights_only=True, map_location="cpu")["engine"]


def _job_ids(repo: Path, run: str) -> list[str]:
    return HEADER.findall((repo / "results/slurm-tiny/runs" / run / "train.log").read_text())


def _sacct(*job_ids: str, fields: str = "State") -> dict[str, str]:
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", ",".join(job_ids), "-o", f"JobIdRaw,{fields}"],
        capture_output=True, text=True, check=True,
    ).stdout
    return {line.split("|", 1)[0]: line.split("|", 1)[1] for line in out.splitlines()}


def _assert_finished_like_local(repo: Path, local: Path) -> None:
    """Audit passes (again, from the command line), weights bitwise equal the local run's, no warm start."""
    audit = subprocess.run(
        [sys.executable, "-m", "ebd2n", "audit", "results/slurm-tiny"], cwd=repo,
        env=environment() | {"PYTHONPATH": str(repo / "src")}, capture_output=True, text=True,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert (repo / "results/slurm-tiny/report/index.html").is_file()
    for run in RUNS:
        assert_states_equal(_weights(repo, run), _weights(local, run))
    assert not (repo / "tmp" / f"ebd2n-warm-{os.getuid()}").exists()  # no job under SLURM started warm


def test_slurm_campaign_as_in_readme(cluster: None, local: Path, tmp_path: Path) -> None:
    repo, env = _campaign_repo(tmp_path)
    _snakemake(repo, env, COMMAND)
    logs = {path.stem: path for path in (repo / ".snakemake/slurm_logs").rglob("*.log")}
    for run in RUNS:
        jobs = _job_ids(repo, run)
        assert len(jobs) == 2 and all(job.isdigit() for job in jobs)  # two slices, real SLURM job ids
        assert all(run in logs[job].parent.name for job in jobs)  # each job's SLURM log kept
        accounting = _sacct(*jobs, fields="State,Account,Partition,Timelimit,ReqMem")
        assert set(accounting.values()) == {"COMPLETED|ebd2n|debug|00:10:00|1500M"}
    # every job the campaign submitted (cache, slices, validation) completed in the accounting
    assert set(_sacct(*logs).values()) == {"COMPLETED"} and len(logs) == 1 + 3 * len(RUNS)
    _assert_finished_like_local(repo, local)


def test_slurm_cancelled_slice_is_noticed_and_the_same_command_finishes(cluster: None, local: Path, tmp_path: Path) -> None:
    repo, env = _campaign_repo(tmp_path)
    run = repo / "results/slurm-tiny/runs" / RUNS[0]
    with subprocess.Popen(COMMAND, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as controller:
        job = _wait_for_training(run, controller)
        subprocess.run(["scancel", job], check=True)
        cancelled = time.monotonic()
        output, _ = controller.communicate(timeout=TIMEOUT)
    noticed = time.monotonic() - cancelled
    assert controller.returncode != 0, output
    assert _sacct(job)[job] == "CANCELLED by 0"  # what the plugin's sacct status check cannot read
    assert f"SLURM-job '{job}' failed" in output and noticed < 240
    cancelled_block = (run / "train.log").read_text().split("########## job ")[1]
    assert " step 16/" in cancelled_block and "checkpoint checkpoints/" not in cancelled_block  # mid-slice
    _snakemake(repo, env, COMMAND)
    assert _job_ids(repo, RUNS[0])[0] == job and len(_job_ids(repo, RUNS[0])) == 3  # cancelled attempt, then two slices
    assert not list(run.glob("checkpoints/*.pt"))
    _assert_finished_like_local(repo, local)


def _wait_for_training(run: Path, controller: subprocess.Popen) -> str:
    """The SLURM job id of the run's first slice, once it has trained a few steps."""
    deadline = time.monotonic() + TIMEOUT
    log = run / "train.log"
    while time.monotonic() < deadline and controller.poll() is None:
        text = log.read_text() if log.exists() else ""
        if " step 16/" in text:
            return HEADER.findall(text)[0]
        time.sleep(0.02)
    raise AssertionError(f"{run.name} never started training:\n{controller.communicate()[0]}")
