"""A job that completes a run leaves its dashboard; a job that finds a complete run without one (its
training job was killed just before writing it) writes it: `ebd2n train` run again, or `ebd2n validate`."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebd2n.layout import DASHBOARD, FINAL, RESULTS_JSON, TRAIN_LOG
from ebd2n.report.jobs import train_job, validate_job


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
    after_first = (run / DASHBOARD).is_file()
    second = train_job("demo", _settings(demo_cache, run))
    return run, [first.split(";")[0], second.split(";")[0]], [str(after_first), str((run / DASHBOARD).is_file())]


def test_train_job_writes_the_dashboard_once_the_run_is_complete(trained) -> None:
    run, summaries, dashboards = trained
    expected = [f"slice done: epoch 1 of {run}", f"done: {run / FINAL}, dashboard {run / DASHBOARD}"]
    assert (summaries, dashboards) == (expected, ["False", "True"])


def test_train_job_again_writes_a_dashboard_its_killed_job_left_out(trained, demo_cache: Path) -> None:
    run = trained[0]
    (run / DASHBOARD).unlink()
    summary = train_job("demo", _settings(demo_cache, run))
    logged = (run / TRAIN_LOG).read_text().splitlines()[-1]
    result = (summary.split(";")[0], (run / DASHBOARD).is_file(), logged.endswith(f"dashboard {run / DASHBOARD}"))
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
