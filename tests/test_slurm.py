"""Campaigns on a real single-node SLURM cluster (tests/slurm/start-cluster.sh, run as root).

Each test copies the repository to tmp_path, puts tests/slurm/campaign.yaml there as
config/campaigns/slurm-tiny.yaml and types the README's command, `snakemake --profile slurm
--configfile config/campaigns/slurm-tiny.yaml`. The cluster must start: a test that cannot
reach it fails, it is never skipped (CI starts it first, in .ci/run).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from workflow_support import REPO, TIMEOUT, assert_states_equal, copy_repo, environment

from ebd2n.errors import UserError
from ebd2n.train.lease import LEASE, take_lease

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
    finals = [f"results/slurm-tiny/runs/{run}/final.pt" for run in RUNS]
    _snakemake(repo, env, ["snakemake", *finals, "--configfile", CAMPAIGN])
    assert list((repo / "tmp").glob(f"ebd2n-warm-{os.getuid()}/*.lock"))  # local jobs did start warm
    return repo


def _campaign_repo(directory: Path) -> tuple[Path, dict[str, str]]:
    """A repository copy with the test campaign, and its environment (a private TMPDIR)."""
    repo = copy_repo(directory)
    shutil.copy(REPO / "tests/slurm/campaign.yaml", repo / CAMPAIGN)
    (repo / "tmp").mkdir()
    return repo, environment() | {"TMPDIR": str(repo / "tmp")}


def _snakemake(repo: Path, env: dict[str, str], command: list[str]) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if result.returncode:
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


def test_slurm_campaign_as_in_readme_survives_a_cancelled_slice(cluster: None, local: Path, tmp_path: Path) -> None:
    """The README's command; `scancel` of a training job midway through its slice is noticed, and
    the same command again finishes the campaign, bitwise as the local run."""
    repo, env = _campaign_repo(tmp_path)
    run = repo / "results/slurm-tiny/runs" / RUNS[0]
    with subprocess.Popen(COMMAND, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as controller:
        cancelled = _wait_for_training(run, controller)
        subprocess.run(["scancel", cancelled], check=True)
        since = time.monotonic()
        output, _ = controller.communicate(timeout=TIMEOUT)
    noticed = time.monotonic() - since
    assert controller.returncode != 0, output
    assert _sacct(cancelled)[cancelled] == "CANCELLED by 0"  # what the plugin's sacct status check cannot read
    assert f"SLURM-job '{cancelled}' failed" in output and noticed < 240
    block = (run / "train.log").read_text().split("########## job ")[1]
    assert " step 16/" in block and "checkpoint checkpoints/" not in block  # cancelled mid-slice

    _snakemake(repo, env, COMMAND)
    logs = {path.stem: path for path in (repo / ".snakemake/slurm_logs").rglob("*.log")}
    jobs = {name: _job_ids(repo, name) for name in RUNS}
    assert [len(ids) for ids in jobs.values()] == [3, 2] and jobs[RUNS[0]][0] == cancelled  # then two slices each
    for name, ids in jobs.items():
        assert all(job.isdigit() and name in logs[job].parent.name for job in ids)  # real ids, SLURM logs kept
    accounting = _sacct(*logs, fields="State,Account,Partition,Timelimit,ReqMem")
    assert len(logs) == 2 + 3 * len(RUNS)  # the cache, the cancelled slice, 3 jobs a run
    assert {job: state.split("|", 1)[0] for job, state in accounting.items() if job != cancelled} == dict.fromkeys(
        set(logs) - {cancelled}, "COMPLETED"
    )
    assert {state.split("|", 1)[1] for state in accounting.values()} == {"ebd2n|debug|00:10:00|1500M"}
    _assert_complete_like_local(repo, local)


def test_slurm_requeued_slice_runs_again_under_its_job_id(cluster: None, local: Path, tmp_path: Path) -> None:
    """`scontrol requeue` of a training job midway: SLURM runs it again under the same id, the
    controller waits for it, and the one command completes the campaign."""
    repo, env = _campaign_repo(tmp_path)
    run = repo / "results/slurm-tiny/runs" / RUNS[0]
    with subprocess.Popen(COMMAND, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as controller:
        requeued = _wait_for_training(run, controller)
        subprocess.run(["scontrol", "requeue", requeued], check=True)
        _wait_until(lambda: _squeue_state(requeued) == "PENDING")
        subprocess.run(["scontrol", "update", f"JobId={requeued}", "StartTime=now"], check=True)  # not in 2 minutes
        output, _ = controller.communicate(timeout=TIMEOUT)
    assert controller.returncode == 0, output
    ids = _job_ids(repo, RUNS[0])
    assert len(ids) == 3 and ids[0] == ids[1] == requeued  # the killed attempt, its rerun, the final slice
    block = (run / "train.log").read_text().split("########## job ")[1]
    assert " step 16/" in block and "checkpoint checkpoints/" not in block  # requeued mid-slice
    assert _sacct(requeued)[requeued] == "COMPLETED"
    _assert_complete_like_local(repo, local)


def test_slurm_killed_controller_then_the_same_command_finishes(cluster: None, local: Path, tmp_path: Path) -> None:
    """The controller SIGKILLed while a slice trains (a dropped SSH session): its jobs keep
    running, and the same command again clears Snakemake's stale lock and finishes the campaign."""
    repo, env = _campaign_repo(tmp_path)
    run = repo / "results/slurm-tiny/runs" / RUNS[0]
    with subprocess.Popen(
        COMMAND, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    ) as controller:
        orphan = _wait_for_training(run, controller)
        os.killpg(controller.pid, signal.SIGKILL)
        controller.communicate()
    assert _squeue_state(orphan) in ("RUNNING", "COMPLETING", "COMPLETED")  # the job outlived its controller
    result = _snakemake(repo, env, COMMAND)
    assert "ebd2n: removed the stale Snakemake lock .snakemake/locks" in result.stderr
    for name in RUNS:
        records = map(json.loads, (repo / "results/slurm-tiny/runs" / name / "metrics.jsonl").read_text().splitlines())
        steps = [record["step"] for record in records if record["type"] == "step"]
        assert steps == list(range(1, len(steps) + 1))  # one trainer at a time: no interleaved records
    _assert_complete_like_local(repo, local)


def _assert_complete_like_local(repo: Path, local: Path) -> None:
    """No slice checkpoint left, the audit passes, no job started warm, weights bitwise the local run's."""
    assert not list((repo / "results/slurm-tiny/runs").glob("*/checkpoints/*.pt"))
    audit = subprocess.run(
        [sys.executable, "-m", "ebd2n", "audit", "results/slurm-tiny"], cwd=repo,
        env=environment() | {"PYTHONPATH": str(repo / "src")}, capture_output=True, text=True,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert (repo / "results/slurm-tiny/report/index.html").is_file()
    assert not (repo / "tmp" / f"ebd2n-warm-{os.getuid()}").exists()  # no job under SLURM started warm
    for name in RUNS:
        assert_states_equal(_weights(repo, name), _weights(local, name))


def test_lease_of_a_slurm_job_is_broken_only_once_the_job_ended(cluster: None, tmp_path: Path) -> None:
    job = subprocess.run(
        ["sbatch", "--parsable", "-A", "ebd2n", "-t", "2", "-o", "/dev/null", "--wrap", "sleep 120"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    holder = {"host": "another-node", "boot": "", "pid": 1, "job": job, "restarts": 0, "since": "then"}
    (tmp_path / LEASE).write_text(json.dumps(holder))
    try:
        _wait_until(lambda: _squeue_state(job) == "RUNNING")
        with pytest.raises(UserError, match=f"another trainer holds it \\(host another-node, pid 1, SLURM job {job},"):
            take_lease(tmp_path)
    finally:
        subprocess.run(["scancel", job], check=True)
    _wait_until(lambda: _squeue_state(job) in ("", "CANCELLED"))
    lease = take_lease(tmp_path)
    assert json.loads((tmp_path / LEASE).read_text())["pid"] == os.getpid()
    lease.release()
    assert not (tmp_path / LEASE).exists()


def _squeue_state(job: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout.strip()


def _wait_until(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


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
