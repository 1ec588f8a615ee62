"""Campaigns on a real single-node SLURM cluster (tests/slurm/start-cluster.sh, run as root).

Each test copies the repository to tmp_path, puts tests/slurm/campaign.yaml there as
config/campaigns/slurm-tiny.yaml and types the README's command, `snakemake --profile slurm
--configfile config/campaigns/slurm-tiny.yaml`. The cluster must start: a test that cannot
reach it fails, it is never skipped (CI starts it first, in .ci/run). A campaign on this cluster
costs minutes (job start-up and the plugin's status checks), so each test brings several faults
to one campaign: the file stays under ten minutes.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from workflow_support import REPO, TIMEOUT, assert_states_equal, copy_repo, environment

from ebd2n.errors import UserError
from ebd2n.train.lease import LEASE, take_lease
from ebd2n.train.records import read_metrics

pytestmark = pytest.mark.slow

CAMPAIGN = "config/campaigns/slurm-tiny.yaml"
COMMAND = ["snakemake", "--profile", "slurm", "--configfile", CAMPAIGN]
RUNS = [f"synchronous-lr0.003-beta20.99-seed{seed}" for seed in (42, 43)]
HEADER = re.compile(r"########## job (\S+) ##########")
RESUMED = re.compile(r"resume from checkpoints/epoch-1\.pt at epoch 1\b")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) ", re.MULTILINE)  # train.log's line times
STEP = re.compile(r" step (\d+)/\d+ \|")  # train.log's step lines: every 8 steps; a slice is 64


@pytest.fixture(scope="module")
def cluster() -> None:
    """The cluster as .ci/run starts it, with accounting (this also restores it after a test
    session that stopped while the cluster ran without)."""
    _start_cluster()


@pytest.fixture
def no_accounting(cluster: None):
    """The same cluster without slurmdbd for one test, then with accounting again."""
    _start_cluster("--no-accounting")
    try:
        yield
    finally:
        _start_cluster()


def _start_cluster(*options: str) -> None:
    started = subprocess.run(
        [REPO / "tests/slurm/start-cluster.sh", *options], capture_output=True, text=True, timeout=600
    )
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


def _campaign_repo(directory: Path, seeds: list[int] | None = None) -> tuple[Path, dict[str, str]]:
    """A repository copy with the test campaign (only `seeds` when given), and its environment (a private TMPDIR)."""
    repo = copy_repo(directory)
    shutil.copy(REPO / "tests/slurm/campaign.yaml", repo / CAMPAIGN)
    if seeds:
        campaign = yaml.safe_load((repo / CAMPAIGN).read_text())
        (repo / CAMPAIGN).write_text(yaml.safe_dump(campaign | {"seeds": seeds}, sort_keys=False))
    (repo / "tmp").mkdir()
    return repo, environment() | {"TMPDIR": str(repo / "tmp")}


def _snakemake(repo: Path, env: dict[str, str], command: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if check and result.returncode:
        raise AssertionError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def _weights(repo: Path, run: str) -> dict:
    return torch.load(repo / "results/slurm-tiny/runs" / run / "final.pt", weights_only=True, map_location="cpu")[
        "engine"
    ]


def _blocks(run_dir: Path) -> list[str]:
    """train.log's blocks, one per trainer that held the run directory, each opened by its job id."""
    log = run_dir / "train.log"
    return ["########## job " + block for block in log.read_text().split("########## job ")[1:]] if log.exists() else []


def _job_ids(run_dir: Path) -> list[str]:
    return [HEADER.search(block).group(1) for block in _blocks(run_dir)]


def _sacct(*job_ids: str, fields: str = "State") -> dict[str, str]:
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", ",".join(job_ids), "-o", f"JobIdRaw,{fields}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line.split("|", 1)[0]: line.split("|", 1)[1] for line in out.splitlines()}


def _slurm_logs(repo: Path) -> dict[str, Path]:
    """Every job log the plugin kept, by job id."""
    return {path.stem: path for path in (repo / ".snakemake/slurm_logs").rglob("*.log")}


class _Controller:
    """The README's command running in the background; its output lines with the time each came."""

    def __init__(self, repo: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            COMMAND,
            cwd=repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line))

    def running(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return "".join(line for _, line in self.lines)

    def first(self, text: str) -> float:
        """When the first line holding `text` came."""
        return next((when for when, line in self.lines if text in line), float("inf"))

    def wait(self) -> int:
        self.process.wait(timeout=TIMEOUT)
        self.reader.join(timeout=60)
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL to the controller's process group (the jobs it submitted run on)."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.wait()

    def __enter__(self) -> _Controller:
        return self

    def __exit__(self, *exc_info) -> None:
        if self.running():
            self.kill()
        self.process.stdout.close()


def _midway(controller: _Controller, actions: dict[tuple[Path, int], Callable[[str], None]]) -> None:
    """Call each action with the SLURM job id of its run's block (1: the first trainer) once that
    block is midway through its slice, in whatever order the runs get there."""
    deadline = time.monotonic() + TIMEOUT
    pending = dict(actions)
    while pending:
        assert controller.running() and time.monotonic() < deadline, (
            f"{list(pending)} never came:\n{controller.output()}"
        )
        for (run_dir, number), action in list(pending.items()):
            blocks = _blocks(run_dir)
            if len(blocks) >= number and len(STEP.findall(blocks[number - 1])) >= 2:  # 16 steps into its slice
                del pending[(run_dir, number)]
                action(HEADER.search(blocks[number - 1]).group(1))
        time.sleep(0.02)


def _trainer_pid(run_dir: Path) -> int:
    """The pid of the trainer holding the run directory (its lease names it)."""
    return json.loads((run_dir / LEASE).read_text())["pid"]


def test_slurm_campaign_as_in_readme_survives_requeue_cancel_and_time_out(
    cluster: None, local: Path, tmp_path: Path
) -> None:
    """The README's command while SLURM requeues the first run's first slice midway (the controller
    waits for it), `scancel` ends its last slice midway, and the second run's last slice hits its
    time limit (its trainer stopped, a slow step; the job's limit lowered to one minute). The
    controller reports both failures and exits non-zero; the same command again resumes both runs
    from the checkpoint their failed slice started from and completes the campaign, bitwise as the
    local run."""
    repo, env = _campaign_repo(tmp_path)
    first, second = (repo / "results/slurm-tiny/runs" / name for name in RUNS)
    jobs: dict[str, str] = {}
    cancelled_at: list[float] = []
    with _Controller(repo, env) as controller:

        def requeue(job: str) -> None:
            jobs["requeued"] = job
            subprocess.run(["scontrol", "requeue", job], check=True)
            _wait_until(lambda: _squeue_state(job) == "PENDING")
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)  # not in 2 minutes

        def time_out(job: str) -> None:
            jobs["timed out"] = job
            os.kill(_trainer_pid(second), signal.SIGSTOP)
            subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=1"], check=True)

        def cancel(job: str) -> None:
            jobs["cancelled"] = job
            subprocess.run(["scancel", job], check=True)
            cancelled_at.append(time.monotonic())

        _midway(controller, {(first, 1): requeue, (second, 2): time_out, (first, 3): cancel})
        assert controller.wait() != 0
    output = controller.output()
    requeued, cancelled, timed_out = jobs["requeued"], jobs["cancelled"], jobs["timed out"]
    assert controller.first(f"SLURM-job '{cancelled}' failed") - cancelled_at[0] < 240, output  # noticed
    assert f"SLURM-job '{timed_out}' failed, SLURM status is: 'TIMEOUT'" in output
    assert f"SLURM-job '{requeued}'" not in output  # the requeued job is waited for, not failed
    assert _sacct(requeued, cancelled, timed_out) == {
        requeued: "COMPLETED",
        cancelled: "CANCELLED by 0",  # what the plugin's sacct status check cannot read
        timed_out: "TIMEOUT",
    }
    assert "DUE TO TIME LIMIT" in _slurm_logs(repo)[timed_out].read_text()
    # what the killed trainers left: their blocks in train.log, midway; the checkpoint their slice
    # started from (under checkpoint_policy final a slice writes one only at its end); their leases
    assert _job_ids(first)[:2] == [requeued, requeued] and _job_ids(second)[1] == timed_out
    for run_dir, killed in ((first, [0, 2]), (second, [1])):
        blocks = _blocks(run_dir)
        assert len(blocks) == len(killed) + 1 and all("slice done" not in blocks[k] for k in killed)
        assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["epoch-1.pt"]
        assert (run_dir / "metrics.jsonl").is_file()  # the controller deleted no record of the kept slices
        assert json.loads((run_dir / LEASE).read_text())["job"] == _job_ids(run_dir)[-1]

    _snakemake(repo, env, COMMAND)
    for run_dir, attempts in ((first, 4), (second, 3)):
        blocks = _blocks(run_dir)
        assert len(blocks) == attempts and RESUMED.search(blocks[-1]) and "slice done" in blocks[-1]
    logs = _slurm_logs(repo)
    for name in RUNS:
        assert all(
            job.isdigit() and name in logs[job].parent.name for job in _job_ids(repo / "results/slurm-tiny/runs" / name)
        )
    assert len(logs) == 1 + 4 * len(RUNS)  # the cache; per run: 3 slice jobs (one failed), validation
    accounting = _sacct(*logs, fields="State,Account,Partition,ReqMem,Timelimit")
    assert {job: fields.split("|") for job, fields in accounting.items()} == {
        job: ["COMPLETED", "ebd2n", "debug", "1500M", "00:10:00"] for job in logs
    } | {cancelled: ["CANCELLED by 0", "ebd2n", "debug", "1500M", "00:10:00"]} | {
        timed_out: ["TIMEOUT", "ebd2n", "debug", "1500M", "00:01:00"]
    }
    _assert_complete_like_local(repo, local, RUNS)


def test_lease_of_a_slurm_job_is_broken_only_once_the_job_ended(cluster: None, tmp_path: Path) -> None:
    job = subprocess.run(
        ["sbatch", "--parsable", "-A", "ebd2n", "-t", "2", "-o", "/dev/null", "--wrap", "sleep 120"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    holder = {"host": "another-node", "boot": "", "pid": 1, "job": job, "restarts": 0, "since": "then"}
    (tmp_path / LEASE).write_text(json.dumps(holder))
    try:
        _wait_until(lambda: _squeue_state(job) == "RUNNING")
        with pytest.raises(UserError, match=f"another trainer holds it \\(host another-node, pid 1, SLURM job {job},"):
            take_lease(tmp_path)
    finally:
        subprocess.run(["scancel", job], check=True)
    _wait_until(lambda: _squeue_state(job) == "CANCELLED")
    lease = take_lease(tmp_path)
    assert json.loads((tmp_path / LEASE).read_text())["pid"] == os.getpid()
    lease.release()
    assert not (tmp_path / LEASE).exists()


def test_slurm_without_accounting_killed_controller_and_its_orphaned_job(
    no_accounting: None, local: Path, tmp_path: Path
) -> None:
    """On a cluster without slurmdbd, the README's command (one run): the controller SIGKILLed
    while a slice trains (a dropped SSH session), its job orphaned and still training (stopped
    here, so that it outlasts what follows). The same command, once, completes the campaign: it
    resubmits the slice, whose trainer waits for the orphan's lease (the run directory is never
    written by two trainers) and, once the orphan has finished, finds its epoch reached."""
    sacct = subprocess.run(["sacct"], capture_output=True, text=True)
    assert "accounting storage is disabled" in sacct.stdout + sacct.stderr  # this cluster has no accounting
    repo, env = _campaign_repo(tmp_path, seeds=[42])
    run_dir = repo / "results/slurm-tiny/runs" / RUNS[0]
    with _Controller(repo, env) as controller:
        _midway(controller, {(run_dir, 1): lambda job: os.kill(_trainer_pid(run_dir), signal.SIGSTOP)})
        controller.kill()
    orphan, trainer = _job_ids(run_dir)[0], _trainer_pid(run_dir)
    with _Controller(repo, env) as again:
        try:
            assert _squeue_state(orphan) == "RUNNING"  # the job outlived its controller
            waiting = (
                f"waiting for the trainer holding {os.path.realpath(run_dir)} "  # a run is named by its real directory
                f"(host {os.uname().nodename}, pid {trainer}, SLURM job {orphan},"
            )
            log = repo / "results/slurm-tiny/logs/runs" / RUNS[0] / "slices/epoch-1.log"  # the slice job's log
            _wait_until(lambda: log.is_file() and waiting in log.read_text(), timeout=TIMEOUT)
            resubmitted = [
                job for job, log in _slurm_logs(repo).items() if "rule_train_slice" in log.parts and job != orphan
            ]
            assert len(resubmitted) == 1 and _squeue_state(resubmitted[0], "%a") == "ebd2n"  # the account, unchecked
            assert _job_ids(run_dir) == [orphan]  # the waiting trainer wrote nothing in the run directory
        finally:
            os.kill(trainer, signal.SIGCONT)
        assert again.wait() == 0, again.output()
    blocks = _blocks(run_dir)
    assert _job_ids(run_dir)[0] == orphan and "slice done" in blocks[0]
    assert len(blocks) == 2 and RESUMED.search(blocks[1])  # the last slice resumed from the orphan's checkpoint
    _assert_complete_like_local(repo, local, RUNS[:1])


def _assert_audit_passes(repo: Path) -> None:
    audit = subprocess.run(
        [sys.executable, "-m", "ebd2n", "audit", "results/slurm-tiny"],
        cwd=repo,
        env=environment() | {"PYTHONPATH": str(repo / "src")},
        capture_output=True,
        text=True,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr


def _assert_complete_like_local(repo: Path, local: Path, runs: list[str]) -> None:
    """No slice checkpoint or lease left, one trainer at a time in every run directory, the audit
    passes, no job started warm, weights bitwise the local run's."""
    assert not list((repo / "results/slurm-tiny/runs").glob("*/checkpoints/*.pt"))
    assert not list((repo / "results/slurm-tiny/runs").glob(f"*/{LEASE}"))
    for name in runs:
        run_dir = repo / "results/slurm-tiny/runs" / name
        records = map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
        steps = [record["step"] for record in records if record["type"] == "step"]
        assert steps == list(range(1, len(steps) + 1))  # no interleaved or repeated records
        blocks = _blocks(run_dir)
        for block in blocks:  # each block one trainer's: its logged steps rise
            logged = [int(step) for step in STEP.findall(block)]
            assert logged == sorted(set(logged))
        spans = [STAMP.findall(block) for block in blocks]
        assert all(
            earlier[-1] <= later[0] for earlier, later in itertools.pairwise(spans)
        )  # blocks never overlap in time
    _assert_audit_passes(repo)
    assert (repo / "results/slurm-tiny/report/index.html").is_file()
    assert not (repo / "tmp" / f"ebd2n-warm-{os.getuid()}").exists()  # no job under SLURM started warm
    for name in runs:
        assert_states_equal(_weights(repo, name), _weights(local, name))


def _squeue_state(job: str, field: str = "%T") -> str:
    """A job's state (or another field) as squeue shows it, finished jobs too (for MinJobAge, 300 s)."""
    return subprocess.run(
        ["squeue", "-h", "--states=all", "-j", job, "-o", field], capture_output=True, text=True
    ).stdout.strip()


def _wait_until(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_slurm_successive_halving_decides_on_the_controller_and_submits_the_promoted_slices(
    cluster: None, tmp_path: Path
) -> None:
    """A successive-halving campaign by the README's command: the rung decision is a checkpoint
    job on the controller; once made, the promoted point's last slice goes to SLURM while the
    stopped runs keep their rung checkpoint; the audit passes."""
    repo, env = _campaign_repo(tmp_path, seeds=[42])
    campaign = yaml.safe_load((repo / CAMPAIGN).read_text())
    campaign["grid"]["learning_rates"]["synchronous"] = [0.0003, 0.003, 0.03]
    campaign["search"] = {"method": "successive-halving", "keep": 0.3}
    (repo / CAMPAIGN).write_text(yaml.safe_dump(campaign, sort_keys=False))
    _snakemake(repo, env, COMMAND)
    results = repo / "results/slurm-tiny"
    (decision_file,) = (results / "search/synchronous").glob("rung-1-*.json")
    decision = json.loads(decision_file.read_text())
    ranked = {entry["point"]: entry["mean_loss"] for entry in decision["ranking"]}
    assert decision["promoted"] == decision["continuing"] == [min(ranked, key=ranked.get)] and len(ranked) == 3
    logs = _slurm_logs(repo)
    assert not any("search" in str(path) for path in logs.values())  # decided on the controller, not submitted
    for point in ranked:
        run_dir = results / "runs" / f"synchronous-{point}-seed42"
        jobs = _job_ids(run_dir)
        assert all(job.isdigit() for job in jobs)  # every slice a SLURM job
        if point in decision["promoted"]:
            assert len(jobs) == 2 and (run_dir / "results.json").is_file()
            assert _sacct(jobs[1], fields="Submit")[jobs[1]] >= time.strftime(  # submitted once the rung was decided
                "%Y-%m-%dT%H:%M:%S", time.localtime(decision_file.stat().st_mtime)
            )
        else:
            assert len(jobs) == 1 and not (run_dir / "final.pt").exists()
            assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["epoch-1.pt"]
    audit = json.loads((results / "audit.json").read_text())
    assert audit["passed"] and "successive-halving decisions recomputed from the runs' subset losses" in {
        check["name"] for check in audit["checks"] if check["status"] == "passed"
    }


def test_slurm_packed_campaign_trains_each_slice_of_a_pack_in_one_job(
    cluster: None, local: Path, tmp_path: Path
) -> None:
    """`execution: {pack: 2}` by the README's command: each slice of the two runs is one SLURM job
    asking one run's CPUs and memory for twice its minutes; both runs' train.log name those jobs;
    every per-step and subset loss within the documented 1e-4 (docs/training.md) of the local solo
    runs'; the audit passes."""
    repo, env = _campaign_repo(tmp_path)
    campaign = yaml.safe_load((repo / CAMPAIGN).read_text())
    (repo / CAMPAIGN).write_text(yaml.safe_dump(campaign | {"execution": {"pack": 2}}, sort_keys=False))
    _snakemake(repo, env, COMMAND)
    runs = [repo / "results/slurm-tiny/runs" / name for name in RUNS]
    trained = [_job_ids(run_dir) for run_dir in runs]
    jobs = {
        record["job"]: record["kind"]
        for run_dir in runs
        for record in map(json.loads, (run_dir / "jobs.jsonl").read_text().splitlines())
    }
    asked = {job: fields.split("|") for job, fields in _sacct(*jobs, fields="State,ReqCPUS,ReqMem,Timelimit").items()}
    assert trained[0] == trained[1] == [job for job, kind in jobs.items() if kind == "train"] and len(trained[0]) == 2
    assert asked == {
        job: ["COMPLETED", "1", "1500M", "00:20:00" if kind == "train" else "00:10:00"] for job, kind in jobs.items()
    }
    for name, run_dir in zip(RUNS, runs, strict=True):
        ours, theirs = (
            [r[key] for r in read_metrics(d) for key in ("loss", "val_loss") if r.get(key) is not None]
            for d in (run_dir, local / "results/slurm-tiny/runs" / name)
        )
        assert len(ours) == len(theirs) > 0
        assert max(abs(a - b) / abs(b) for a, b in zip(ours, theirs, strict=True)) <= 1e-4
    _assert_audit_passes(repo)
