"""`ebd2n export-tracker`: a campaign in MLflow's local file store, read back by MLflow's own client
with every run's parameters, per-step and per-epoch metrics, final results and recipe link; offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from campaign_tree import RunSpec, write_campaign

from ebd2n.jsonio import read_jsonl

mlflow_tracking = pytest.importorskip("mlflow.tracking")
SRC = Path(__file__).resolve().parents[1] / "src"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    paths = [str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, "-m", "ebd2n", *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The report tests' 24-run campaign (3 steps an epoch) exported by the CLI: (campaign, store)."""
    from campaign_tree import report_runs, write_campaign

    root = tmp_path_factory.mktemp("tracker")
    campaign = write_campaign(root, "sweep", report_runs(), steps_per_epoch=3)
    completed = _cli("export-tracker", str(campaign), "--out", str(root / "mlruns"))
    said = f"ebd2n export-tracker: campaign sweep: {campaign}\n"  # the campaign it resolved, once done
    assert (completed.returncode, completed.stderr) == (0, said), completed.stderr
    return campaign, root / "mlruns"


def _client(store: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return mlflow_tracking.MlflowClient(tracking_uri=store.as_uri())


def test_tracker_export_reads_back_every_run(exported: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    campaign, store = exported
    client = _client(store, monkeypatch)
    experiment = client.get_experiment_by_name("sweep")
    found = client.search_runs([experiment.experiment_id], max_results=1000)
    runs = {run.data.tags["ebd2n.run_id"]: run for run in found}
    assert sorted(runs) == sorted(p.name for p in (campaign / "runs").iterdir())
    for run_id, run in runs.items():
        results = json.loads((campaign / "runs" / run_id / "results.json").read_text())
        records = read_jsonl(campaign / "runs" / run_id / "metrics.jsonl")
        history = {
            key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
            for key in ("loss", "grad_norm", "subset_val_loss")
        }
        result = (
            {key: run.data.params[key] for key in ("mode", "lr", "beta2", "seed", "optimizer.lr", "model.layers")},
            history,
            run.data.metrics["final_loss"],
            run.data.tags["ebd2n.recipe"],
            run.info.status,
            run.info.run_name,
        )
        steps = [r for r in records if r["type"] == "step"]
        assert result == (
            {
                "mode": results["mode"],
                "lr": str(results["lr"]),
                "beta2": str(results["beta2"]),
                "seed": str(results["seed"]),
                "optimizer.lr": str(results["lr"]),
                "model.layers": "2",
            },
            {
                "loss": [(r["step"], r["loss"]) for r in steps],
                "grad_norm": [(r["step"], r["grad_norm"]) for r in steps],
                "subset_val_loss": [(r["step"], r["val_loss"]) for r in records if r["type"] == "epoch"],
            },
            results["loss"],
            (campaign / "runs" / run_id / "recipe.yaml").resolve().as_uri(),
            "FINISHED",
            results["run"],
        )


def test_tracker_export_into_an_existing_folder_exits_2(exported: tuple[Path, Path]) -> None:
    campaign, store = exported
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    completed = _cli("export-tracker", str(campaign), "--out", str(store))
    after = sorted(p.relative_to(store) for p in store.rglob("*"))
    result = (completed.returncode, len(completed.stderr.strip().splitlines()), after)
    assert result == (2, 1, before) and "already exists" in completed.stderr
    assert [p.name for p in store.parent.iterdir() if p.name.startswith(".mlruns")] == []


OUTCOME_RUNS = {
    "complete": RunSpec("synchronous", 0.001, 0.95, 42, 3.7),
    "diverged": RunSpec("synchronous", 1000.0, 0.95, 42, 9.9, diverged_at=30),
    "stopped": RunSpec("synchronous", 0.003, 0.95, 42, 3.8),
    "retired": RunSpec("synchronous", 0.001, 0.999, 42, 3.9),
    "failed": RunSpec("synchronous", 0.003, 0.999, 42, 3.8, failed=True),
    "incomplete": RunSpec("synchronous", 0.001, 0.95, 43, 3.7),
}
"""A run of each outcome a run directory can have (a missing run has none)."""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A campaign with a run of each outcome, exported: (campaign, store)."""
    from ebd2n.report.tracker import export_mlflow

    root = tmp_path_factory.mktemp("outcomes")
    campaign = write_campaign(root, "outcomes", OUTCOME_RUNS.values(), steps_per_epoch=3)
    for name in ("stopped", "incomplete"):  # trained part-way: no full validation
        (campaign / "runs" / OUTCOME_RUNS[name].run_id / "results.json").unlink()
    info = json.loads((campaign / "campaign.json").read_text())
    info["search"] = {"stopped": {OUTCOME_RUNS["stopped"].run_id: 1}}
    info["retired"] = [OUTCOME_RUNS["retired"].run_id]
    (campaign / "campaign.json").write_text(json.dumps(info))
    return campaign, export_mlflow(campaign, root / "mlruns")


def test_tracker_export_status_of_each_outcome(outcomes: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A diverged, stopped or retired run is a finished result (never KILLED: cancelled), a failed run
    FAILED, an incomplete one still RUNNING; the outcome itself is the ebd2n.status tag."""
    _, store = outcomes
    client = _client(store, monkeypatch)
    experiment = client.get_experiment_by_name("outcomes")
    found = client.search_runs([experiment.experiment_id], max_results=1000)
    by_id = {spec.run_id: name for name, spec in OUTCOME_RUNS.items()}
    result = {
        by_id[tags["ebd2n.run_id"]]: (tags["ebd2n.status"], run.info.status, run.info.end_time is None)
        for run, tags in ((run, run.data.tags) for run in found)
    }
    assert result == {
        "complete": ("complete", "FINISHED", False),
        "diverged": ("diverged", "FINISHED", False),
        "stopped": ("stopped", "FINISHED", False),
        "retired": ("retired", "FINISHED", False),
        "failed": ("failed", "FAILED", False),
        "incomplete": ("incomplete", "RUNNING", True),
    }


def test_tracker_status_table_covers_every_outcome() -> None:
    from ebd2n.outcomes import Outcome
    from ebd2n.report.tracker import MLFLOW_STATUS

    assert set(MLFLOW_STATUS) == set(Outcome)
