"""A campaign over further axes (a named-variant schedule, beta1, the batch size) end to end with the
real Snakemake: it trains, audits and reports; every axis reads back from runs.csv, groups.csv, the
Parquet store and the explorer's data; the report fits the LR optimum per batch size and its shift;
then a new beta1 value and a new axis extend it with every finished run left byte for byte."""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import json
import math
import re
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
import yaml
from workflow_support import copy_repo, snakemake, write_campaign

pytestmark = pytest.mark.slow

SCHEDULES = {
    "cosine-to-zero": {"optimizer.schedule": "cosine", "optimizer.min_lr_ratio": 0.0},
    "wsd": {"optimizer.schedule": "wsd", "optimizer.decay_fraction": 0.25, "optimizer.decay_shape": "sqrt"},
}


def _study(repo: Path, **axes) -> dict:
    """The shipped batch x beta1 study at demo scale, on half its tokens, with the schedule axis."""
    raw = yaml.safe_load((repo / "config/campaigns/batch-beta1-demo.yaml").read_text())
    raw["overrides"] = {"training.max_tokens": 24576, "training.epoch_tokens": 12288}
    raw["grid"]["axes"] = {"training.batch_tokens": [1024, 2048], "optimizer.beta1": [0.9], "schedule": SCHEDULES}
    raw["grid"]["axes"].update(axes)
    return raw


def _digests(runs: Path) -> dict[str, str]:
    return {
        path.relative_to(runs).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(runs.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = copy_repo(tmp_path_factory.mktemp("axes"))
    snakemake(repo, "--cores", "2", "--configfile", write_campaign(repo, _study(repo), "axes.yaml"))
    return repo


def test_every_axis_reads_back_from_every_table(campaign: Path) -> None:
    directory = campaign / "results/batch-beta1-demo"
    runs = pl.read_csv(directory / "runs.csv")
    groups = pl.read_csv(directory / "report/groups.csv")
    store = pq.read_table(directory / "report/runs.parquet").to_pydict()
    page = (directory / "report/index.html").read_text()
    packed = re.search(r'<script type="text/plain" id="explore-data">([^<]*)</script>', page)[1]
    explorer = json.loads(gzip.decompress(base64.b64decode(html.unescape(packed))))
    axes = json.loads(html.unescape(re.search(r'id="explore-axes">([^<]*)</script>', page)[1]))
    expected = {"batch_tokens": [1024, 2048], "beta1": [0.9], "schedule": ["cosine-to-zero", "wsd"]}
    result = (
        {axis: sorted(set(runs[axis].to_list())) for axis in expected},
        {axis: sorted(set(groups[axis].to_list())) for axis in expected},
        {axis: sorted(set(store[axis])) for axis in expected},
        [axis for axis in axes if axis in expected],
        len(explorer),
        (runs.height, (runs["status"] == "complete").all()),
        json.loads((directory / "audit.json").read_text())["passed"],
    )
    assert result == (expected, expected, expected, ["batch_tokens", "beta1", "schedule"], 24, (24, True), True)


def test_the_tracker_export_names_every_axis(campaign: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tracking = pytest.importorskip("mlflow.tracking")
    from ebd2n.report.tracker import export_mlflow

    store = export_mlflow(campaign / "results/batch-beta1-demo", campaign / "mlruns")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = tracking.MlflowClient(tracking_uri=store.as_uri())
    experiment = client.get_experiment_by_name("batch-beta1-demo")
    found = client.search_runs([experiment.experiment_id], max_results=1000)
    run = next(run for run in found if run.data.tags["ebd2n.run_id"].endswith("batch_tokens=2048-schedule=wsd-seed43"))
    result = {key: run.data.params[key] for key in ("beta2", "batch_tokens", "beta1", "schedule")}
    assert result == {"beta2": "0.95", "batch_tokens": "2048", "beta1": "0.9", "schedule": "wsd"}


def test_the_report_fits_the_lr_optimum_per_batch_size_and_its_shift(campaign: Path) -> None:
    report = campaign / "results/batch-beta1-demo/report"
    shifts = json.loads((report / "results.json").read_text())["lr_optimum_shifts"]["synchronous"]
    along = next(entry for entry in shifts if entry["axis"] == "batch_tokens")
    batch, law = along["values"], along["law"]
    page = (report / "index.html").read_text()
    table = re.search(
        r'<table class="optimum-shift" data-mode="synchronous" data-axis="batch_tokens">.*?</table>', page, re.S
    )
    first, second = batch
    result = (
        [row["value"] for row in batch],
        first["shift"],
        first["estimate"] is not None and second["estimate"] is not None,
        second["shift"] == pytest.approx(second["estimate"] / first["estimate"]),
        # an unchecked optimum's bracket may be open (None: beyond the grid), never both ends
        (second["shift_low"], second["shift_high"]) != (None, None)
        and (second["shift_low"] or 0.0) <= second["shift"] <= (second["shift_high"] or math.inf),
        table is not None and f"× {second['shift']:.3g}" in table[0],
        law["exponent"] == pytest.approx(math.log(second["shift"]) / math.log(2)),
        (law["next"]["value"], law["next"]["lr"] == pytest.approx(second["estimate"] * second["shift"])),
        f"LR optimum ∝ batch_tokens^{law['exponent']:.3g}" in page,
    )
    assert result == ([1024, 2048], 1.0, True, True, True, True, True, (4096, True), True)


def test_a_new_value_and_a_new_axis_extend_it_leaving_every_run(campaign: Path) -> None:
    directory = campaign / "results/batch-beta1-demo"
    before = _digests(directory / "runs")
    old = set(pl.read_csv(directory / "runs.csv")["run"].to_list())
    raw = _study(campaign, **{"optimizer.beta1": [0.9, 0.95], "optimizer.weight_decay": [0.1, 0.0]})
    snakemake(campaign, "--cores", "2", "--configfile", write_campaign(campaign, raw, "axes.yaml"))
    after = _digests(directory / "runs")
    runs = pl.read_csv(directory / "runs.csv")
    result = (
        {path: digest for path, digest in after.items() if path in before} == before,
        old <= set(runs["run"].to_list()),
        runs.height,
        sorted(set(runs["weight_decay"].to_list())),
        runs.filter(pl.col("run").is_in(list(old)))["weight_decay"].unique().to_list(),
        json.loads((directory / "audit.json").read_text())["passed"],
    )
    assert result == (True, True, 96, [0.0, 0.1], [0.1], True)


def test_the_schedule_study_trains_at_demo_scale(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path)
    snakemake(repo, "--cores", "2", "--configfile", "config/campaigns/schedules-horizons-demo.yaml")
    directory = repo / "results/schedules-horizons-demo"
    runs = pl.read_csv(directory / "runs.csv")
    tokens = {
        (row["horizon"], row["schedule"]): row["tokens"]
        for row in runs.iter_rows(named=True)
        if row["mode"] == "synchronous"
    }
    result = (
        runs.height,
        (runs["status"] == "complete").all(),
        sorted(set(runs["mode"].to_list())),
        tokens[("short", "wsd")] * 2 == tokens[("long", "wsd")],
        json.loads((directory / "audit.json").read_text())["passed"],
    )
    per_model = {
        mode: dict(zip(zip(part["horizon"], part["schedule"], strict=True), part["tokens_per_parameter"], strict=True))
        for (mode,), part in runs.group_by("mode")
    }  # packed-4 trains four models, each on the budget of one: its tokens per parameter are one model's
    ratios = [per_model["packed-4"][key] / value for key, value in per_model["synchronous"].items()]
    assert result == (16, True, ["packed-4", "synchronous"], True, True)
    assert len(ratios) == 4 and all(0.95 < ratio < 1.05 for ratio in ratios), per_model


def test_packed_trials_over_member_axes_train_as_each_run_alone(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path)
    raw = {
        "campaign": "packed-axes",
        "recipe": "demo",
        "data": {"source": "synthetic", "cache_dir": "results/caches/small", "synthetic_train_bytes": 300000},
        "overrides": {"training.max_tokens": 24576, "training.epoch_tokens": 12288},
        "grid": {
            "modes": ["synchronous"],
            "learning_rates": {"synchronous": [0.004]},
            "beta2": [0.95],
            "axes": {"optimizer.beta1": [0.9, 0.95], "optimizer.weight_decay": [0.1, 0.0]},
        },
        "seeds": [42],
        "epochs_per_slice": 1,
        "execution": {"pack": 4},
        "resources": {"default": {"gpus": 0, "minutes": 10, "mem_mb": 2000, "cpus": 1}},
    }
    losses = {}
    for name, pack in (("packed-axes", 4), ("solo-axes", 1)):
        campaign = {**raw, "campaign": name, "execution": {"pack": pack}}
        snakemake(repo, "--cores", "2", "--configfile", write_campaign(repo, campaign, f"{name}.yaml"))
        runs = pl.read_csv(repo / "results" / name / "runs.csv")
        losses[name] = dict(zip(runs["run"], runs["loss"], strict=True))
        losses[f"{name} packs"] = runs["packed"].to_list()
    packed, solo = losses["packed-axes"], losses["solo-axes"]
    gap = max(abs(packed[run] - solo[run]) for run in solo)  # the pack's fused AdamW rounds apart, not more
    beta1 = abs(
        packed["synchronous-lr0.004-beta20.95-beta1=0.95-seed42"] - packed["synchronous-lr0.004-beta20.95-seed42"]
    )
    result = (sorted(packed) == sorted(solo), gap < 1e-5, beta1 > 100 * gap, losses["packed-axes packs"])
    assert result == (True, True, True, [4] * 4)
