"""One trainer per run directory (ebd2n.train.lease), with real trainer processes."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ebd2n
from ebd2n.train.lease import LEASE

SOURCE = str(Path(ebd2n.__file__).resolve().parents[1])
LONG = ["training.max_tokens=4000000", "training.epoch_tokens=2000000"]  # minutes: always killed first


def _trainer(cache: Path, run: Path, **env: str) -> subprocess.Popen:
    settings = [f"data.cache_dir={cache}", f"runtime.output_dir={run}", *LONG]
    command = [sys.executable, "-m", "ebd2n", "train", "--config", "demo", "--quiet", *[f"--set={s}" for s in settings]]
    environment = {**os.environ, "PYTHONPATH": SOURCE, "EBD2N_WARM": "0", "OMP_NUM_THREADS": "1", **env}
    return subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _training(run: Path, trainer: subprocess.Popen, blocks: int = 1) -> None:
    """Wait until the trainer has opened train.log block number `blocks` (it holds the lease by then)."""
    deadline = time.monotonic() + 300
    while ((run / "train.log").read_text() if (run / "train.log").exists() else "").count("slice: start") < blocks:
        assert trainer.poll() is None, trainer.communicate()
        assert time.monotonic() < deadline, "the trainer never started"
        time.sleep(0.05)


def _holder(run: Path) -> dict:
    return json.loads((run / LEASE).read_text())


def test_second_trainer_refuses_until_the_holder_is_killed(demo_cache: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = _trainer(demo_cache, run)
    second = None
    try:
        _training(run, first)
        log = (run / "train.log").read_text()
        refused = _trainer(demo_cache, run)
        _, stderr = refused.communicate(timeout=300)
        assert refused.returncode == 2
        assert stderr.splitlines() == [
            f"ebd2n train: error: runtime.output_dir {run}: another trainer holds it (host {socket.gethostname()}, "
            f"pid {first.pid}, since {_holder(run)['since']}); if that trainer is gone, delete {run / LEASE}"
        ]
        assert (run / "train.log").read_text().count("slice: start") == 1 and (
            run / "train.log"
        ).read_text().startswith(log)
        assert first.poll() is None and _holder(run)["pid"] == first.pid
        first.send_signal(signal.SIGKILL)  # as a node failure would: the lease stays behind
        first.wait()
        assert _holder(run)["pid"] == first.pid
        second = _trainer(demo_cache, run)
        _training(run, second, blocks=2)  # past the lease: it opened its own train.log block
        assert _holder(run)["pid"] == second.pid
    finally:
        for trainer in (first, second):
            if trainer:
                trainer.kill()
                trainer.communicate()


def test_lease_of_another_host_without_a_job_is_never_broken(demo_cache: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    other = {"host": "elsewhere", "boot": "", "pid": os.getpid(), "job": "", "restarts": 0, "since": "then"}
    (run / LEASE).write_text(json.dumps(other))
    second = _trainer(demo_cache, run)
    _, stderr = second.communicate(timeout=300)
    assert second.returncode == 2 and "another trainer holds it (host elsewhere, pid" in stderr
    assert sorted(path.name for path in run.iterdir()) == [LEASE]  # nothing written


def test_finished_trainer_leaves_no_lease(demo_cache: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    settings = [
        f"data.cache_dir={demo_cache}",
        f"runtime.output_dir={run}",
        "training.max_tokens=4096",
        "training.epoch_tokens=4096",
    ]
    command = [sys.executable, "-m", "ebd2n", "train", "--config", "demo", "--quiet", *[f"--set={s}" for s in settings]]
    subprocess.run(command, env={**os.environ, "PYTHONPATH": SOURCE, "EBD2N_WARM": "0"}, check=True, timeout=300)
    assert (run / "final.pt").is_file() and not list(run.glob(f"*{LEASE}*"))


def _train(
    cache: Path, run: str | Path, *settings: str, cwd: Path | None = None, wrap: list[str] = ()
) -> subprocess.CompletedProcess:
    """A short demo run (two epochs) trained by `ebd2n train`, through `wrap` (a command prefix) if given."""
    settings = [
        f"data.cache_dir={cache}",
        f"runtime.output_dir={run}",
        "training.max_tokens=8192",
        "training.epoch_tokens=4096",
        *settings,
    ]
    command = [
        *wrap,
        sys.executable,
        "-m",
        "ebd2n",
        "train",
        "--config",
        "demo",
        "--quiet",
        *[f"--set={s}" for s in settings],
    ]
    environment = {**os.environ, "PYTHONPATH": SOURCE, "EBD2N_WARM": "0", "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300, cwd=cwd)


def _contents(run: Path) -> dict[str, bytes]:
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(demo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    assert _train(demo_cache, runs / "done").returncode == 0
    return runs / "done"


def _bind(source: Path, target: Path) -> list[str]:
    """A command prefix that runs its command with `source` mounted at `target` (a private mount namespace)."""
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode:
        pytest.skip("no mount namespaces here (unshare -rm)")
    return ["unshare", "-rm", "sh", "-c", f'mount --bind "{source}" "{target}" && exec "$@"', "bind"]


@pytest.mark.parametrize("reach", ["symlink", "dotdot", "bind"])
def test_finished_run_reached_by_another_path_returns_at_once(
    finished_run: Path, demo_cache: Path, tmp_path: Path, reach: str
) -> None:
    before = _contents(finished_run)
    wrap: list[str] = []
    if reach == "symlink":
        path = tmp_path / "link"
        path.symlink_to(finished_run)
    elif reach == "dotdot":
        (tmp_path / "elsewhere").mkdir()
        path = tmp_path / "elsewhere" / ".." / os.path.relpath(finished_run, tmp_path)
    else:
        path = tmp_path / "mounted" / finished_run.name  # the same inode under another path (and the run's own name)
        path.mkdir(parents=True)
        wrap = _bind(finished_run, path)
    result = _train(demo_cache, path, wrap=wrap)
    assert (
        result.returncode,
        "done already (nothing trained)" in result.stdout,
        _contents(finished_run) == before,
    ) == (0, True, True), result.stderr


def test_live_run_reached_through_a_symlink_is_refused_by_its_lease(demo_cache: Path, tmp_path: Path) -> None:
    run, link = tmp_path / "run", tmp_path / "link"
    link.symlink_to(run, target_is_directory=True)
    first = _trainer(demo_cache, run)
    try:
        _training(run, first)
        refused = _train(demo_cache, link, *LONG)
        assert (refused.returncode, refused.stderr.splitlines()) == (
            2,
            [
                f"ebd2n train: error: runtime.output_dir {run}: another trainer holds it (host {socket.gethostname()}, "
                f"pid {first.pid}, since {_holder(run)['since']}); if that trainer is gone, delete {run / LEASE}"
            ],
        )
    finally:
        first.kill()
        first.communicate()


@pytest.mark.parametrize(
    ("target", "message"),
    [("file", "not a directory (.*file is a file)"), ("loop", "not a directory \\(a loop of symbolic links\\)")],
)
def test_symlinked_output_dir_to_no_directory_is_refused_in_one_line(
    demo_cache: Path, tmp_path: Path, target: str, message: str
) -> None:
    link = tmp_path / "link"
    if target == "file":
        (tmp_path / "file").write_text("mine\n")
        link.symlink_to(tmp_path / "file")
    else:
        link.symlink_to(tmp_path / "other")
        (tmp_path / "other").symlink_to(link)
    before = sorted((p.name, p.is_symlink()) for p in tmp_path.iterdir())
    result = _train(demo_cache, link)
    assert (result.returncode, len(result.stderr.splitlines())) == (2, 1), result.stderr
    assert re.search(f"runtime.output_dir {link}: {message}", result.stderr)
    assert sorted((p.name, p.is_symlink()) for p in tmp_path.iterdir()) == before


def test_validation_puts_the_ranking_loss_on_the_run_page_it_hashes(
    finished_run: Path, demo_cache: Path, tmp_path: Path
) -> None:
    """The validation job writes the run's page with its full-validation loss first, then results.json,
    which hashes that page; validating again rewrites neither."""
    import hashlib
    import shutil

    run = tmp_path / finished_run.name
    shutil.copytree(finished_run, run)
    environment = {**os.environ, "PYTHONPATH": SOURCE, "EBD2N_WARM": "0", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "ebd2n", "validate", str(run)]
    first = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    results = json.loads((run / "results.json").read_text())
    page = (run / "report.html").read_bytes()
    assert f"{results['loss']:.4f}" in page.decode() and b"ranking loss: full validation" in page
    assert results["artifacts"]["report.html"] == hashlib.sha256(page).hexdigest()
    recorded = (run / "results.json").read_bytes()
    second = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0 and (run / "report.html").read_bytes() == page
    assert (run / "results.json").read_bytes() == recorded

    # a page an older ebd2n drew and hashed: validated again, the page is drawn anew and hashed as it is
    (run / "report.html").write_bytes(b"<p>an older page</p>")
    (run / "results.json").write_text(
        json.dumps(
            results
            | {
                "artifacts": results["artifacts"] | {"report.html": hashlib.sha256(b"<p>an older page</p>").hexdigest()}
            },
            indent=2,
        )
        + "\n"
    )
    third = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)
    again = json.loads((run / "results.json").read_text())
    assert third.returncode == 0 and (run / "report.html").read_bytes() == page
    assert again == results  # the outcome kept, the page's hash the page's
