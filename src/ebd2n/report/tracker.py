"""A campaign exported into MLflow's local file store, for researchers who browse runs in MLflow.

`ebd2n export-tracker results/<campaign> --out DIR` writes one MLflow experiment (the campaign) with one
MLflow run per ebd2n run: its parameters (grid point and every recipe setting, dotted), its per-step
and per-epoch metrics at their optimizer step, its final full-validation results, and tags that link
its recipe.yaml and run directory. Nothing leaves the machine: `mlflow ui --backend-store-uri DIR`
browses it (with MLFLOW_ALLOW_FILE_STORE=true: MLflow keeps its file store in maintenance mode),
`mlflow migrate-filestore` moves it into a database. mlflow is an optional extra (`ebd2n[track]`).
The store is built in a temporary folder beside DIR and renamed into place, so a failed export
leaves nothing behind.

Each MLflow run's status reads as its outcome does (`MLFLOW_STATUS`): a complete, diverged, stopped
or retired run is a finished result (FINISHED; a diverged run is one, never KILLED, which reads as
cancelled), a failed run FAILED, and an incomplete run stays RUNNING (not terminated: the export is
a snapshot of a campaign still training). The outcome itself is the `ebd2n.status` tag (runs.csv's
`status`). A run of the grid without a run directory (missing) is in no table the export reads, so
it has no MLflow run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ebd2n.campaign.results import read_results
from ebd2n.errors import UserError
from ebd2n.layout import run_paths
from ebd2n.outcomes import Outcome
from ebd2n.train.records import TYPE, RecordType, read_metrics

STEP_METRICS = ("loss", "accuracy", "lr", "grad_norm")
EPOCH_METRICS = {
    "train_loss": "train_loss",
    "val_loss": "subset_val_loss",
    "val_accuracy": "subset_val_accuracy",
    "tokens_per_s": "tokens_per_s",
    "consensus_distance": "consensus_distance",
}
"""Epoch record key -> MLflow metric name (the epoch validation is on the fixed subset, and says so)."""
FINAL = {"loss": "final_loss", "perplexity": "final_perplexity", "accuracy": "final_accuracy"}
"""runs.csv column -> MLflow metric: the full validation the report ranks by."""
MLFLOW_STATUS: dict[Outcome, str | None] = {
    Outcome.COMPLETE: "FINISHED",
    Outcome.DIVERGED: "FINISHED",
    Outcome.STOPPED: "FINISHED",
    Outcome.RETIRED: "FINISHED",
    Outcome.FAILED: "FAILED",
    Outcome.INCOMPLETE: None,
    Outcome.MISSING: None,
}
"""Outcome -> the MLflow status its run ends with; None: left RUNNING, as MLflow creates it (a missing
run has no directory, so no MLflow run)."""


def export_mlflow(campaign_dir: Path, out: Path) -> Path:
    """Write the campaign into a new MLflow file store at `out`; return it."""
    campaign = read_results(Path(campaign_dir))
    out = Path(out)
    if out.exists():
        raise UserError(f"{out}: already exists; export into a new folder (else MLflow holds every run twice)")
    client_class = _mlflow_client()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        client = client_class(tracking_uri=staging.resolve().as_uri())
        experiment = client.create_experiment(campaign.name, tags={"ebd2n.campaign_dir": str(campaign.directory)})
        for row in campaign.runs.iter_rows(named=True):
            _export_run(client, experiment, campaign.directory / row["directory"], row, campaign.axes)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def _mlflow_client() -> Any:
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # the local file store is what offline export writes
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise UserError("mlflow is not installed; pip install 'ebd2n[track]' (mlflow-skinny) to export") from None
    return MlflowClient


def _export_run(client: Any, experiment: str, run_dir: Path, row: dict[str, Any], axes: list[str]) -> None:
    from mlflow.entities import Metric, Param

    paths = run_paths(run_dir)
    recipe = paths.recipe.resolve()
    tags = {
        "ebd2n.run_id": run_dir.name,
        "ebd2n.status": row["status"],
        "ebd2n.recipe": recipe.as_uri(),
        "ebd2n.run_directory": run_dir.resolve().as_uri(),
        "mlflow.note.content": f"ebd2n run {row['run']}; recipe: {recipe}",
    }
    run = client.create_run(experiment, run_name=row["run"], tags=tags).info.run_id
    params = [Param(key, value) for key, value in _parameters(run_dir, row, axes).items()]
    metrics = _metrics(read_metrics(paths.metrics), row, Metric)
    for start in range(0, len(params), 100):  # MLflow's limits per call: 100 parameters, 1,000 metrics
        client.log_batch(run, params=params[start : start + 100])
    for start in range(0, len(metrics), 1000):
        client.log_batch(run, metrics=metrics[start : start + 1000])
    if (status := MLFLOW_STATUS[Outcome(row["status"])]) is not None:
        client.set_terminated(run, status=status)


def _parameters(run_dir: Path, row: dict[str, Any], axes: list[str]) -> dict[str, str]:
    """The grid point (mode, LR, each other axis, seed, preset), then every recipe setting by its
    dotted key (MLflow keeps parameters as text)."""
    from ebd2n.config import load_recipe

    point = ("mode", "lr", *axes, "seed", "preset")
    params = {key: str(row[key]) for key in point if row.get(key) not in (None, "")}
    recipe_file = run_paths(run_dir).recipe
    if recipe_file.is_file():
        settings = _flat(load_recipe(recipe_file).model_dump(mode="json"))
        params |= {key: str(value)[:6000] for key, value in settings.items()}  # MLflow's longest parameter value
    return params


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _metrics(records: list[dict[str, Any]], row: dict[str, Any], metric: Any) -> list[Any]:
    """Every step's and epoch's numbers at their optimizer step, and the final results at the last one."""
    out, last = [], 0
    for record in records:
        step = int(record.get("step") or 0)
        last = max(last, step)
        names = {key: key for key in STEP_METRICS} if record.get(TYPE) == RecordType.STEP else EPOCH_METRICS
        out += [
            metric(name, float(record[key]), 0, step)
            for key, name in names.items()
            if isinstance(record.get(key), (int, float)) and not isinstance(record.get(key), bool)
        ]
    out += [metric(name, float(row[key]), 0, last) for key, name in FINAL.items() if row.get(key) is not None]
    return out
