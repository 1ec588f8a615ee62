"""A job that completes a run leaves its dashboard; a job that finds a complete run without one (its
training job was killed just before writing it) writes it: `ebd2n train` run again, or `ebd2n validate`.
A job into a finished run returns from its records alone, and only when they vouch for it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_support import assert_states_equal

from ebd2n.commands import train_job, validate_job
from ebd2n.errors import UserError
from ebd2n.layout import DASHBOARD, FINAL, LIVE_DASHBOARD, RESULTS_JSON, TRAIN_LOG
from ebd2n.train.checkpoint import load_checkpoint

SRC = Path(__file__).resolve().parents[1] / "src"


def _settings(cache: Path, run: Path) -> list[str]:
    return [
        f"data.cache_dir={cache}",
        f"runtime.output_dir={run}",
        "training.max_tokens=8192",
        "training.epoch_tokens=4096",
    ]


@pytest.fixture(scope="module")
def trained(demo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], list[str]]:
    """A demo run trained in two slices by two jobs; the summary line of each."""
    run = tmp_path_factory.mktemp("jobs") / "run"
    first = train_job("demo", _settings(demo_cache, run), until_epoch=1)
    after_first = (run / LIVE_DASHBOARD).is_file() and not (run / DASHBOARD).exists()  # a run still training
    second = train_job("demo", _settings(demo_cache, run))
    after_second = (run / LIVE_DASHBOARD).is_file() or 'id="live"' in (run / DASHBOARD).read_text()
    return run, [first.split(";")[0], second.split(";")[0]], [str(after_first), str(after_second)]


def test_train_job_writes_the_final_dashboard_once_the_run_is_complete(trained) -> None:
    run, summaries, live = trained
    expected = [f"slice done: epoch 1 of {run}", f"done: {run / FINAL}, dashboard {run / DASHBOARD}"]
    assert (summaries, live) == (expected, ["True", "False"])


def test_train_job_again_writes_a_dashboard_its_killed_job_left_out(trained, demo_cache: Path) -> None:
    """The page, and nothing else: a job that trained nothing never writes train.log, which the run's
    validation may have hashed already (it runs beside such a job after a kill)."""
    run = trained[0]
    (run / DASHBOARD).unlink()
    log = (run / TRAIN_LOG).read_bytes()
    summary = train_job("demo", _settings(demo_cache, run))
    result = (summary.split(";")[0], (run / DASHBOARD).is_file(), (run / TRAIN_LOG).read_bytes() == log)
    assert result == (f"done already (nothing trained): {run / FINAL}, dashboard {run / DASHBOARD}", True, True)


def test_validate_job_writes_a_missing_dashboard_then_validates(trained) -> None:
    run = trained[0]
    (run / DASHBOARD).unlink()
    lines = validate_job(run)
    result = (
        len(lines),
        lines[0].startswith(f"{run}: full-validation loss "),
        (run / DASHBOARD).is_file(),
        (run / RESULTS_JSON).is_file(),
    )
    assert result == (2, True, True, True)


def _copy(trained, tmp_path: Path) -> Path:
    """The trained run, copied under its own name (its id) where a test may change it."""
    copy = tmp_path / trained[0].name
    shutil.copytree(trained[0], copy)
    return copy


def test_train_into_a_finished_run_imports_no_torch_and_changes_nothing(trained, demo_cache: Path, tmp_path) -> None:
    """`ebd2n train` into a finished run knows it is done from the run's records (no torch, no load of
    final.pt): it prints the trainer's "done already" line and leaves every file as it was."""
    run = _copy(trained, tmp_path)
    before = {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in run.rglob("*") if path.is_file()}
    settings = [item for setting in _settings(demo_cache, run) for item in ("--set", setting)]
    code = (
        "import sys; from ebd2n.cli import main; main(sys.argv[1:]); "
        "print('torch imported' if 'torch' in sys.modules else 'no torch')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "train", "--config", "demo", *settings, "--until-epoch", "1"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    after = {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in run.rglob("*") if path.is_file()}
    lines = done.stdout.splitlines()
    assert (done.returncode, lines[0].split(";")[0], lines[-1], after == before) == (
        0,
        f"done already (nothing trained): {run / FINAL}, dashboard {run / DASHBOARD}",
        "no torch",
        True,
    )


@pytest.mark.parametrize("change", ["final-altered", "unrecorded-checkpoint", "other-recipe"])
def test_train_into_a_finished_run_that_is_not_certain_goes_through_the_trainer(
    trained, demo_cache: Path, tmp_path: Path, change: str
) -> None:
    """Whatever the records cannot vouch for, the trainer decides as before: an altered final.pt is
    passed over and the run trained again (to the same weights), a killed job's checkpoint is removed,
    another recipe is refused."""
    run = _copy(trained, tmp_path)
    settings = _settings(demo_cache, run)
    weights = load_checkpoint(run / FINAL)["engine"]
    if change == "final-altered":
        (run / FINAL).write_bytes((run / FINAL).read_bytes()[:-10])
        assert train_job("demo", settings).startswith(f"done: {run / FINAL}")
        assert_states_equal(weights, load_checkpoint(run / FINAL)["engine"])
    elif change == "unrecorded-checkpoint":
        (run / "checkpoints").mkdir()
        (run / "checkpoints/epoch-1.pt").write_bytes(b"a killed job's")
        assert train_job("demo", settings).startswith("done already (nothing trained)")
        assert not (run / "checkpoints").exists()
    else:
        with pytest.raises(UserError, match="holds a different run"):
            train_job("demo", [*settings, "optimizer.lr=0.002"])


def test_a_final_job_killed_before_its_page_leaves_no_stale_page_behind(demo_cache: Path, tmp_path: Path) -> None:
    """The run's last job is killed as it writes report.html (run.json and final.pt written): the
    first slice's live page is no stand-in for it. The same command writes the finished page and
    removes the live one; validation then hashes the finished page."""
    from ebd2n.faults import KILL_AT, KILL_TARGET

    run = tmp_path / "run"
    train_job("demo", _settings(demo_cache, run), until_epoch=1)
    settings = [item for setting in _settings(demo_cache, run) for item in ("--set", setting)]
    killed = subprocess.run(
        [sys.executable, "-m", "ebd2n", "train", "--config", "demo", *settings],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(SRC), KILL_AT: f"before:{run / DASHBOARD}", KILL_TARGET: ""},
    )
    left = (killed.returncode, (run / FINAL).is_file(), (run / DASHBOARD).exists(), (run / LIVE_DASHBOARD).is_file())
    summary = train_job("demo", _settings(demo_cache, run))
    validate_job(run)
    page = (run / DASHBOARD).read_text()
    hashed = json.loads((run / RESULTS_JSON).read_text())["artifacts"][DASHBOARD]
    result = (left, summary.split(";")[0], 'id="live"' in page, (run / LIVE_DASHBOARD).exists(), hashed)
    assert result == (
        (-9, True, False, True),
        f"done already (nothing trained): {run / FINAL}, dashboard {run / DASHBOARD}",
        False,
        False,
        hashlib.sha256(page.encode()).hexdigest(),
    )
