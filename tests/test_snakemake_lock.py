"""A SIGKILLed controller's Snakemake lock: kept while a controller lives, cleared by the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from workflow_support import TIMEOUT, TINY, copy_repo, environment, snakemake, write_campaign

from ebd2n.campaign import snakemake_lock
from ebd2n.campaign.snakemake_lock import LOCKS, clear_stale_lock, live_controllers, no_other_controller


@pytest.mark.slow
def test_lock_of_a_killed_controller_is_cleared_by_the_same_command(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path)
    command = ["--configfile", write_campaign(repo, TINY)]
    log = repo / "results/tiny/runs/synchronous-lr0.003-beta20.99-seed42/train.log"
    controller = subprocess.Popen(
        [sys.executable, "-m", "snakemake", *command], cwd=repo, env=environment(), start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not log.exists():  # the controller holds its lock while a training job runs
            assert controller.poll() is None and time.monotonic() < deadline, "no training job started"
            time.sleep(0.05)
        assert live_controllers(repo) == [controller.pid]
        assert not clear_stale_lock(repo) and list((repo / LOCKS).glob("*.lock"))  # a live controller's lock stays
    finally:
        os.killpg(controller.pid, signal.SIGKILL)  # the controller and its jobs, as a lost session would
        controller.wait()
    assert list((repo / LOCKS).glob("*.lock"))
    result = snakemake(repo, *command)
    assert f"ebd2n: removed the stale Snakemake lock {LOCKS} (no Snakemake runs in this directory)" in result.stderr
    assert (repo / "results/tiny/report/index.html").is_file() and not list((repo / LOCKS).glob("*.lock"))


def test_without_proc_no_controller_is_proven_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS has no /proc: a lock is never cleared there, and the workflow settles no job."""
    (tmp_path / LOCKS).mkdir(parents=True)
    (tmp_path / LOCKS / "0.input.lock").write_text("")
    assert no_other_controller(tmp_path) and clear_stale_lock(tmp_path)  # this machine: /proc shows nobody
    (tmp_path / LOCKS).mkdir(parents=True)
    (tmp_path / LOCKS / "0.input.lock").write_text("")
    monkeypatch.setattr(snakemake_lock, "PROC", tmp_path / "no-proc")
    assert not no_other_controller(tmp_path) and not clear_stale_lock(tmp_path)
    assert list((tmp_path / LOCKS).glob("*.lock"))
