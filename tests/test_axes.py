"""Grid axes over any recipe key (`grid.axes`): run ids, the grid's record, extension and the checks
that refuse a bad axis before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ebd2n.campaign.check import campaign_from_dict
from ebd2n.campaign.grid import grid_from_record
from ebd2n.campaign.runs import parse_run_id
from ebd2n.errors import UserError

REPO = Path(__file__).resolve().parents[1]
CAMPAIGNS = REPO / "config" / "campaigns"


def _campaign(axes: dict | None = None, **more) -> dict:
    grid = {"modes": ["synchronous"], "learning_rates": {"synchronous": [0.004, 0.008]}, "beta2": [0.95]}
    return {
        "campaign": "axes",
        "recipe": "demo",
        "data": {"source": "synthetic", "cache_dir": "results/caches/synthetic"},
        "grid": {**grid, **({"axes": axes} if axes else {})},
        "seeds": [42],
        "epochs_per_slice": 1,
        "resources": {"default": {"gpus": 0, "minutes": 5, "mem_mb": 1000, "cpus": 1}},
        **more,
    }


SCHEDULES = {
    "cosine": {"optimizer.schedule": "cosine", "optimizer.min_lr_ratio": 0.1},
    "wsd": {"optimizer.schedule": "wsd", "optimizer.decay_fraction": 0.2},
}


def test_a_value_the_base_has_is_not_named_in_run_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    axes = {"optimizer.beta1": [0.9, 0.95], "training.batch_tokens": [1024, 2048], "schedule": SCHEDULES}
    ids = [run.id for run in campaign_from_dict(_campaign(axes)).grid.runs()]
    result = (len(ids), len(set(ids)), ids[:3], all(parse_run_id(run_id).id == run_id for run_id in ids))
    assert result == (
        16,
        16,
        [
            "synchronous-lr0.004-beta20.95-seed42",
            "synchronous-lr0.004-beta20.95-schedule=wsd-seed42",
            "synchronous-lr0.004-beta20.95-batch_tokens=2048-seed42",
        ],
        True,
    )


def test_a_recorded_grid_reads_back_with_its_axes_and_bases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    grid = campaign_from_dict(_campaign({"optimizer.weight_decay": [0.0, 0.1], "schedule": SCHEDULES})).grid
    again = grid_from_record(grid.record())
    result = ([run.id for run in again.runs()] == [run.id for run in grid.runs()], [a.base for a in again.axes])
    assert result == (True, ["0.1", "cosine"])


def test_a_new_axis_with_the_base_value_keeps_every_run_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = campaign_from_dict(_campaign({"optimizer.beta1": [0.9, 0.95]})).grid
    after = campaign_from_dict(_campaign({"optimizer.beta1": [0.9, 0.95, 0.98], "schedule": SCHEDULES})).grid
    old = {run.id for run in before.runs()}
    new = {run.id for run in before.union(after).runs()}
    assert (old <= new, len(new - old)) == (True, 8)


def test_settings_of_a_run_are_its_axes_off_the_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    grid = campaign_from_dict(_campaign({"optimizer.beta1": [0.9, 0.95], "schedule": SCHEDULES})).grid
    run = parse_run_id("synchronous-lr0.004-beta20.95-beta1=0.95-schedule=wsd-seed42")
    result = (grid.settings(run), grid.columns(run), grid.columns(parse_run_id("synchronous-lr0.004-beta20.95-seed42")))
    assert result == (
        [("optimizer.beta1", 0.95), ("optimizer.schedule", "wsd"), ("optimizer.decay_fraction", 0.2)],
        {"beta1": 0.95, "schedule": "wsd"},
        {"beta1": 0.9, "schedule": "cosine"},
    )


BAD = [
    ("unknown key", {"optimizer.betta1": [0.9, 0.95]}, {}, "grid.axes.optimizer.betta1: 0.9: optimizer.betta1"),
    (
        "value of the wrong type",
        {"training.batch_tokens": ["big", "huge"]},
        {},
        "grid.axes.training.batch_tokens: big:",
    ),
    (
        "values of two types",
        {"training.batch_tokens": [1024, "big"]},
        {},
        "grid.axes.training.batch_tokens: values of one type",
    ),
    ("a value no run id can hold", {"optimizer.weight_decay": [-1, 0.1]}, {}, "value '-1' cannot name a run"),
    ("out of range", {"optimizer.beta1": [0.9, 1.5]}, {}, "grid.axes.optimizer.beta1: 1.5: optimizer.beta1"),
    (
        "a key the mode does not allow",
        {"decentralized.topology": ["one_peer_ring", "complete"]},
        {},
        "grid.axes.decentralized.topology: decentralized.topology does not apply to mode synchronous",
    ),
    (
        "two axes setting one key",
        {"optimizer.beta1": [0.9, 0.95], "momentum": {"high": {"optimizer.beta1": 0.98}}},
        {},
        "grid.axes.momentum: optimizer.beta1 is also set by grid.axes.optimizer.beta1",
    ),
    ("a key the grid sets", {"optimizer.lr": [0.1, 0.2]}, {}, "grid.axes.optimizer.lr: optimizer.lr is set by grid"),
    (
        "a model shape in a packed-trials campaign",
        {"model.width": [64, 128]},
        {"execution": {"pack": 2}},
        "grid.axes.model.width: execution.pack 2: model.width is shared by a pack's members",
    ),
    ("a list under a name", {"beta1": [0.9, 0.95]}, {}, "grid.axes.beta1: a list of values needs a dotted recipe key"),
    (
        "an axis that changes the epochs",
        {"training.max_tokens": [49152, 98304]},
        {},
        "grid.axes.training.max_tokens: 98304 trains 4 epochs, its base recipe 2",
    ),
]


@pytest.mark.parametrize(("case", "axes", "more", "message"), BAD, ids=[case for case, *_ in BAD])
def test_a_bad_axis_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, case: str, axes: dict, more: dict, message: str
) -> None:
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(_campaign(axes, **more), sort_keys=False))
    done = subprocess.run(
        [sys.executable, "-m", "ebd2n", "campaign", "check", str(path)], cwd=tmp_path, capture_output=True, text=True
    )
    lines = done.stderr.strip().splitlines()
    result = (done.returncode, len(lines), message in done.stderr, sorted(p.name for p in tmp_path.iterdir()))
    assert result == (2, 1, True, ["campaign.yaml"]), done.stderr


def test_a_started_campaign_may_not_redefine_a_variant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ebd2n.campaign.history import record_grid

    monkeypatch.chdir(tmp_path)
    campaign = campaign_from_dict(_campaign({"schedule": SCHEDULES}))
    record_grid(campaign.paths, campaign.name, "", campaign.grid)
    campaign.paths.freeze_record.parent.mkdir(parents=True, exist_ok=True)
    campaign.paths.freeze_record.write_text(json.dumps({"settings": campaign.settings()}))
    changed = {**SCHEDULES, "wsd": {"optimizer.schedule": "wsd", "optimizer.decay_fraction": 0.3}}
    with pytest.raises(
        UserError, match=r"grid.axes.schedule: value wsd was run with .*give the changed value a new name"
    ):
        campaign_from_dict(_campaign({"schedule": changed}))


@pytest.mark.parametrize(
    ("name", "runs"), [("batch-beta1-20m", 162), ("schedules-horizons-20m", 270), ("batch-beta1-demo", 24)]
)
def test_the_shipped_studies_plan_their_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, runs: int
) -> None:
    monkeypatch.chdir(tmp_path)
    from ebd2n.campaign.check import load_campaign
    from ebd2n.train.budget import budget_of

    campaign = load_campaign(CAMPAIGNS / f"{name}.yaml")
    base = campaign.current_bases["base"]
    epochs = {budget_of(base).epochs}
    assert (len(campaign.grid.runs()), epochs) == (runs, {40} if name.endswith("20m") else {2})


def test_a_cosine_variant_under_grid_horizons_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    wsd = {"optimizer.schedule": "wsd", "optimizer.decay_fraction": 0.25, "optimizer.warmup_tokens": 2048}
    raw = _campaign(
        {
            "schedule": {
                "wsd": {"optimizer.decay_shape": "sqrt"},
                "cosine": {"optimizer.schedule": "cosine", "optimizer.decay_fraction": 0.1},
            }
        },
        overrides={"training.epoch_tokens": 16384, **wsd},
    )
    raw["grid"]["horizons"] = [0.5, 1.0]
    with pytest.raises(UserError, match="grid.axes.schedule: cosine: grid.horizons branch wsd runs"):
        campaign_from_dict(raw)


def test_select_reads_the_axes_of_a_runs_table(tmp_path: Path) -> None:
    rows = [
        {
            "run": f"r{lr}-{batch}-{seed}",
            "mode": "synchronous",
            "lr": lr,
            "beta2": 0.95,
            "batch_tokens": batch,
            "seed": seed,
            "status": "complete",
            "loss": 3.0 + abs(lr - 0.004 * batch / 1024) + seed * 1e-4,
        }
        for lr in (0.002, 0.004, 0.008)
        for batch in (1024, 2048)
        for seed in (1, 2)
    ]
    path = tmp_path / "runs.csv"
    import polars as pl

    pl.DataFrame(rows).write_csv(path)
    done = subprocess.run(
        [sys.executable, "-m", "ebd2n", "select", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    selection = json.loads((tmp_path / "out" / "selection.json").read_text())["synchronous"]
    groups = pl.read_csv(tmp_path / "out" / "groups.csv")
    result = (done.returncode, (selection["lr"], selection["batch_tokens"]), groups.height, groups.columns[:4])
    assert result == (0, (0.004, 1024), 6, ["mode", "lr", "beta2", "batch_tokens"])


def test_an_axis_may_take_no_name_of_the_runs_table() -> None:
    from ebd2n.campaign.axis_check import TABLE_COLUMNS
    from ebd2n.campaign.results import RUN_COLUMNS

    assert TABLE_COLUMNS == set(RUN_COLUMNS)


@pytest.mark.parametrize(
    "run_id",
    [
        "synchronous-lr0.004-beta20.95-schedule=wsd-beta1=0.95-seed42",  # axes out of the grid's order
        "synchronous-lr0.004-beta20.95-beta1=0.9-seed42",  # the base value named
        "synchronous-lr0.004-beta20.95-beta1=0.95-beta1=0.95-seed42",  # one axis twice
    ],
)
def test_a_run_id_off_canonical_form_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_id: str) -> None:
    monkeypatch.chdir(tmp_path)
    grid = campaign_from_dict(_campaign({"optimizer.beta1": [0.9, 0.95], "schedule": SCHEDULES})).grid
    with pytest.raises(UserError, match="not in canonical form"):
        grid.settings(parse_run_id(run_id))
