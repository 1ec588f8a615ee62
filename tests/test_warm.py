"""Warm start (ebd2n.warm): a job forked from the server behaves exactly as a cold one."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from workflow_support import assert_states_equal

import ebd2n
from ebd2n.job_time import recorded_jobs

SOURCE = str(Path(ebd2n.__file__).resolve().parents[1])
SHORT = ["training.max_tokens=8192", "training.epoch_tokens=4096"]
LONG = ["training.max_tokens=2000000", "training.epoch_tokens=4096", "training.checkpoint_policy=epoch"]  # killed early


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A private temporary directory for the servers of one test (socket paths must stay short)."""
    directory = Path(tempfile.mkdtemp(prefix="ebd2n-t", dir="/tmp"))
    yield directory
    for pid in _servers(directory):
        os.kill(pid, signal.SIGKILL)  # its running forks die with it
    shutil.rmtree(directory)


def _env(sockets: Path, warm: bool, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": SOURCE,
        "TMPDIR": str(sockets),
        "OMP_NUM_THREADS": "1",
        "EBD2N_WARM": "1" if warm else "0",
        **extra,
    }


def _command(cache: Path, run: Path, *overrides: str, launcher: str = "ebd2n.warm") -> list[str]:
    settings = [f"data.cache_dir={cache}", f"runtime.output_dir={run}", *overrides]
    return [sys.executable, "-m", launcher, "train", "--config", "demo", "--quiet", *[f"--set={s}" for s in settings]]


def _processes() -> Iterator[tuple[int, int, list[str]]]:
    """(pid, parent pid, argv) of every process."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes().rstrip(b"\0")
            argv = [part.decode(errors="replace") for part in raw.split(b"\0")]
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        yield int(entry.name), parent, argv


def _servers(sockets: Path) -> list[int]:
    """This test's servers: their forked jobs share their command line, but not their parent."""
    warm = {pid: parent for pid, parent, argv in _processes() if "ebd2n.warm" in argv and str(sockets) in argv[-1]}
    return [pid for pid, parent in warm.items() if parent not in warm]


def _forks(server: int) -> list[int]:
    return [pid for pid, parent, _ in _processes() if parent == server]


def _job_pids(log: Path) -> list[int]:
    """The pids in the `########## job <id> ##########` headers of a train.log (local ids end in the pid)."""
    return [int(pid) for pid in re.findall(r"########## job local-\S+-(\d+) ##########", log.read_text())]


def _wait_for(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_warm_job_runs_in_a_fork_and_matches_cold_bitwise(demo_cache: Path, tmp_path: Path, sockets: Path) -> None:
    cold_command = _command(demo_cache, tmp_path / "cold", *SHORT)
    cold = subprocess.run(cold_command, env=_env(sockets, False), capture_output=True)
    warm = [
        subprocess.Popen(_command(demo_cache, tmp_path / name, *SHORT), env=_env(sockets, True))
        for name in ("warm", "warm-again")
    ]
    assert cold.returncode == 0, cold.stderr
    assert [job.wait(timeout=600) for job in warm] == [0, 0]
    (server,) = _servers(sockets)
    for job, name in zip(warm, ("warm", "warm-again"), strict=True):
        (pid,) = _job_pids(tmp_path / name / "train.log")
        assert pid not in (job.pid, server)  # trained in a child forked from the server, not the client
        assert_states_equal(_weights(tmp_path / name), _weights(tmp_path / "cold"))
    assert len(list(sockets.glob("*/*.sock"))) == 1  # both clients found the one server
    cpu = {name: _cpu_seconds(tmp_path / name) for name in ("cold", "warm", "warm-again")}
    assert cpu["warm"] < cpu["cold"] and cpu["warm-again"] < cpu["cold"], cpu  # the fork's own time, no torch import


def test_warm_job_records_its_time_from_its_client_start(demo_cache: Path, tmp_path: Path, sockets: Path) -> None:
    """jobs.jsonl's seconds count from the client's start, the server's start-up included, not from
    the fork (which began long after the server imported torch)."""
    started = time.time()
    client = subprocess.Popen(_command(demo_cache, tmp_path / "run", *SHORT), env=_env(sockets, True))
    assert client.wait(timeout=600) == 0
    wall = time.time() - started
    (record,) = recorded_jobs(tmp_path / "run")
    (pid,) = _job_pids(tmp_path / "run" / "train.log")
    assert (pid != client.pid, record["kind"], 0 < wall - record["seconds"] < 1.0) == (True, "train", True), wall


def _cpu_seconds(run: Path) -> float:
    """The CPU time of the train.log's `job usage` line (one job)."""
    (seconds,) = re.findall(
        r"job usage: cpu ([0-9.]+) s \(user [0-9.]+, system [0-9.]+\) \| peak rss [0-9]+ MiB",
        (run / "train.log").read_text(),
    )
    return float(seconds)


def test_plain_cli_never_starts_warm(demo_cache: Path, tmp_path: Path, sockets: Path) -> None:
    """`python -m ebd2n` is the command line itself, whatever EBD2N_WARM says; the launcher is `-m ebd2n.warm`."""
    run = tmp_path / "run"
    client = subprocess.Popen(_command(demo_cache, run, *SHORT, launcher="ebd2n"), env=_env(sockets, True))
    result = (client.wait(timeout=600), _job_pids(run / "train.log"))
    assert result == (0, [client.pid])  # trained in the process that was started
    assert _servers(sockets) == [] and not list(sockets.glob("*/*.sock"))


def test_launcher_is_not_part_of_the_source_hash(tmp_path: Path) -> None:
    from ebd2n.provenance import PACKAGE_DIR, source_hash

    copy = tmp_path / "ebd2n"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = source_hash(copy)
    (copy / "warm.py").write_text((copy / "warm.py").read_text() + "\n# a launcher edit\n")
    after_launcher = source_hash(copy)
    (copy / "cli.py").write_text((copy / "cli.py").read_text() + "\n# a trainer edit\n")
    assert (after_launcher == before, source_hash(copy) == before) == (True, False)


def test_slurm_job_starts_cold_whatever_the_environment_says(demo_cache: Path, tmp_path: Path, sockets: Path) -> None:
    """A controller exports EBD2N_WARM=1 to its cluster jobs: under SLURM no server starts."""
    run = tmp_path / "run"
    env = _env(sockets, True, SLURM_JOB_ID="4242")
    subprocess.run(_command(demo_cache, run, *SHORT), env=env, check=True, timeout=600)
    assert re.findall(r"########## job (\S+) ##########", (run / "train.log").read_text()) == ["4242"]
    assert (run / "final.pt").is_file()
    assert _servers(sockets) == [] and not list(sockets.glob("*/*.sock"))


def test_warm_errors_exit_status_and_streams_match_cold(tmp_path: Path, sockets: Path) -> None:
    missing = tmp_path / "missing.yaml"
    command = [sys.executable, "-m", "ebd2n.warm", "train", "--config", str(missing)]
    cold = subprocess.run(command, env=_env(sockets, False), capture_output=True, text=True)
    warm = subprocess.run(command, env=_env(sockets, True), capture_output=True, text=True)
    assert _servers(sockets)  # the warm one did run in a fork of a server
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert cold.returncode == 2 and str(missing) in cold.stderr and len(cold.stderr.strip().splitlines()) == 1


def test_idle_server_exits_and_removes_its_socket(demo_cache: Path, tmp_path: Path, sockets: Path) -> None:
    env = _env(sockets, True, EBD2N_WARM_IDLE="1")
    subprocess.run(_command(demo_cache, tmp_path / "run", *SHORT), env=env, check=True, timeout=600)
    directory = sockets / f"ebd2n-warm-{os.getuid()}"
    _wait_for(lambda: not _servers(sockets), timeout=30)
    assert (tmp_path / "run/final.pt").is_file()
    assert sorted(path.suffix for path in directory.iterdir()) == [".lock", ".log"]  # the lock: a client may hold it


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_warm_job_dies_with_its_client(demo_cache: Path, tmp_path: Path, sockets: Path, signum: int) -> None:
    """A client killed (a node failure) or stopped (SIGTERM, as Snakemake stops its jobs) takes its forked
    trainer with it."""
    run = tmp_path / "run"
    with subprocess.Popen(_command(demo_cache, run, *LONG), env=_env(sockets, True)) as client:
        try:
            _wait_for(lambda: (run / "checkpoints.json").exists() or client.poll() is not None)
            assert client.poll() is None
            (server,) = _servers(sockets)
            (trainer,) = _forks(server)
            assert _job_pids(run / "train.log") == [trainer]
            client.send_signal(signum)
            code = client.wait(timeout=60)
        finally:
            client.kill()
    _wait_for(lambda: not Path(f"/proc/{trainer}").exists(), timeout=30)
    assert code == -signum
    ledger = json.loads((run / "checkpoints.json").read_text())
    assert ledger
    assert all(hashlib.sha256((run / name).read_bytes()).hexdigest() == digest for name, digest in ledger.items())


def test_warm_jobs_die_with_their_server(demo_cache: Path, tmp_path: Path, sockets: Path) -> None:
    run = tmp_path / "run"
    with subprocess.Popen(
        _command(demo_cache, run, *LONG), env=_env(sockets, True), stderr=subprocess.PIPE, text=True
    ) as client:
        try:
            _wait_for(lambda: (run / "checkpoints.json").exists() or client.poll() is not None)
            (server,) = _servers(sockets)
            (trainer,) = _forks(server)
            os.kill(server, signal.SIGKILL)
            result = (client.wait(timeout=60), client.stderr.read().strip().splitlines()[-1])
        finally:
            client.kill()
    _wait_for(lambda: not Path(f"/proc/{trainer}").exists(), timeout=30)
    assert result == (1, "ebd2n: the warm-start server stopped while running this job; run it again")


def test_job_starts_cold_when_no_server_can_be_reached(demo_cache: Path, tmp_path: Path, sockets: Path) -> None:
    """A socket directory others may enter is refused: the job runs in the client, as a cold one."""
    (sockets / f"ebd2n-warm-{os.getuid()}").mkdir(mode=0o755)
    run = tmp_path / "run"
    with subprocess.Popen(
        _command(demo_cache, run, *SHORT), env=_env(sockets, True), stderr=subprocess.PIPE, text=True
    ) as client:
        result = (client.wait(timeout=600), _job_pids(run / "train.log"), client.stderr.read().splitlines()[0])
    expected = (
        0,
        [client.pid],
        f"ebd2n: warm start unavailable ({sockets}/ebd2n-warm-{os.getuid()} must be your own directory with "
        "mode 0700); starting cold",
    )
    assert result == expected
    assert _servers(sockets) == []


def _weights(run: Path) -> dict:
    return torch.load(run / "final.pt", weights_only=True)["engine"]
