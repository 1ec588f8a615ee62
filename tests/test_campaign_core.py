"""The campaign core without Snakemake: the Grid, its frozen history, run fates and what the
workflow's input functions get from ebd2n.campaign.workflow."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import ebd2n.campaign.history as history_module
from ebd2n.campaign.check import campaign_from_dict
from ebd2n.campaign.collect import collect_campaign
from ebd2n.campaign.fates import finished_runs, run_fates, run_records
from ebd2n.campaign.freeze import freeze_base, freeze_trainer
from ebd2n.campaign.grid import Grid, grid_from_record
from ebd2n.campaign.history import read_history, record_grid
from ebd2n.campaign.runs import BASE
from ebd2n.campaign.search import Search
from ebd2n.campaign.workflow import WorkflowPlan
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json

GRID = Grid(
    presets=None,
    modes=("synchronous", "packed-4"),
    learning_rates={"synchronous": (0.001, 0.003), "packed-4": (0.002,)},
    beta2=(0.95,),
    seeds=(42, 43),
)


def tiny(**changes: object) -> dict:
    """A demo-model campaign file of two learning rates and two seeds, in slices of one epoch."""
    raw = {
        "campaign": "tiny",
        "recipe": "demo",
        "data": {"cache_dir": "results/caches/tiny"},
        "grid": {"modes": ["synchronous"], "learning_rates": {"synchronous": [0.001, 0.003]}, "beta2": [0.95]},
        "seeds": [42, 43],
        "epochs_per_slice": 1,
    }
    return raw | changes


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_grid_runs_are_every_point_with_every_seed_in_grid_order() -> None:
    result = [run.id for run in GRID.runs()]
    expected = [
        "synchronous-lr0.001-beta20.95-seed42",
        "synchronous-lr0.001-beta20.95-seed43",
        "synchronous-lr0.003-beta20.95-seed42",
        "synchronous-lr0.003-beta20.95-seed43",
        "packed-4-lr0.002-beta20.95-seed42",
        "packed-4-lr0.002-beta20.95-seed43",
    ]
    assert result == expected


def test_grid_record_reads_back_as_the_same_grid() -> None:
    grid = Grid(
        ("demo", "20m"),
        ("synchronous",),
        {"synchronous": (0.001,), "20m-synchronous": (0.0005,)},
        (0.95,),
        (1,),
        Search("successive-halving", 0.5, None),
    )
    result = grid_from_record(json.loads(json.dumps(grid.record())))
    assert result == grid


def test_grid_of_a_preset_takes_its_own_learning_rates() -> None:
    grid = Grid(
        ("demo", "20m"), ("synchronous",), {"synchronous": (0.001,), "20m-synchronous": (0.0005,)}, (0.95,), (1,)
    )
    result = sorted({(run.base, run.lr) for run in grid.runs()})
    assert result == [("20m", 0.0005), ("demo", 0.001)]


def test_grid_without_presets_has_the_single_base() -> None:
    assert GRID.bases == (BASE,)


def test_grid_union_keeps_earlier_values_first_and_adds_the_new() -> None:
    later = Grid(None, ("synchronous",), {"synchronous": (0.004, 0.001)}, (0.99, 0.95), (44,))
    result = GRID.union(later)
    expected = Grid(
        None,
        ("synchronous", "packed-4"),
        {"synchronous": (0.001, 0.003, 0.004), "packed-4": (0.002,)},
        (0.95, 0.99),
        (42, 43, 44),
    )
    assert result == expected


def test_history_records_a_grid_once_and_an_extension_as_the_next_version(in_tmp: Path) -> None:
    campaign = campaign_from_dict(tiny())
    paths = campaign.paths
    record_grid(paths, "tiny", "", campaign.grid)
    record_grid(paths, "tiny", "", campaign.grid)  # the same grid again: nothing new
    grown = campaign_from_dict(tiny(seeds=[42, 43, 44]))
    history = record_grid(paths, "tiny", "", grown.grid)
    result = (
        sorted(path.name for path in paths.frozen_spec.iterdir()),
        [len(grid.runs()) for grid in history.versions],
    )
    assert result == (["1.json", "2.json"], [2 * 2, 2 * 3])


def test_history_retiring_a_point_and_putting_it_back_each_record_the_declared_grid(in_tmp: Path) -> None:
    """A removed learning rate is a recording of its own: the union keeps its runs (retired), the
    active grid drops them; putting it back is the next recording, and nothing is retired."""
    paths = campaign_from_dict(tiny()).paths
    record_grid(paths, "tiny", "", campaign_from_dict(tiny()).grid)
    shrunk = record_grid(
        paths,
        "tiny",
        "",
        campaign_from_dict(tiny(grid={**tiny()["grid"], "learning_rates": {"synchronous": [0.001]}})).grid,
    )
    read_back = read_history(paths)
    restored = record_grid(paths, "tiny", "", campaign_from_dict(tiny()).grid)
    result = (
        len(shrunk.grid.runs()),
        len(shrunk.active.runs()),
        [run.id for run in read_back.retired()],
        read_back.active == shrunk.active,
        restored.retired(),
        sorted(path.name for path in paths.frozen_spec.iterdir()),
    )
    assert result == (
        4,
        2,
        ["synchronous-lr0.003-beta20.95-seed42", "synchronous-lr0.003-beta20.95-seed43"],
        True,
        [],
        ["1.json", "2.json", "3.json"],
    )


def test_history_names_a_damaged_recording(in_tmp: Path) -> None:
    campaign = campaign_from_dict(tiny())
    record_grid(campaign.paths, "tiny", "", campaign.grid)
    (campaign.paths.frozen_spec / "1.json").write_text(json.dumps({"campaign": "tiny", "grid": {}, "seeds": [1]}))
    with pytest.raises(UserError, match=r"frozen/spec/1.json: not a campaign spec \(KeyError"):
        read_history(campaign.paths)


def test_collect_reads_the_frozen_history_once(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    campaign = campaign_from_dict(tiny())
    freeze_trainer(campaign)
    freeze_base(campaign, BASE)
    collect_campaign(campaign)  # the first recording
    reads: list[Path] = []
    real = history_module.read_json
    monkeypatch.setattr(history_module, "read_json", lambda path: reads.append(path) or real(path))
    collect_campaign(campaign_from_dict(tiny(seeds=[42, 43, 44])))  # an extension: a second recording
    result = (sorted(path.name for path in reads), read_json(campaign.paths.campaign_json)["runs_planned"])
    assert result == (["1.json"], 6)


def test_fates_of_the_full_grid_train_every_run_to_the_end() -> None:
    fates = run_fates(GRID, None)
    result = finished_runs(GRID.runs(), fates)
    assert result == GRID.runs()


def test_finished_runs_leave_out_stopped_and_undecided_runs() -> None:
    runs = GRID.runs()
    fates = {runs[0].id: None, runs[1].id: 1}
    result = [run.id for run in finished_runs(runs, fates)]
    assert result == [runs[0].id]


def test_run_records_up_to_a_rung_are_its_slice_records_only(in_tmp: Path) -> None:
    campaign = campaign_from_dict(tiny())
    plan, paths, run = WorkflowPlan(campaign).plans[BASE], campaign.paths, GRID.runs()[0]
    result = (
        [path.name for path in run_records(paths, run, plan, 1)],
        [path.name for path in run_records(paths, run, plan, None)],
    )
    assert result == (["epoch-1.json"], ["epoch-1.json", "final.pt", "best.json", "results.json"])


def test_workflow_plan_names_every_record_all_audits(in_tmp: Path) -> None:
    plan = WorkflowPlan(campaign_from_dict(tiny()))
    outputs = plan.final_output()
    result = (len([path for path in outputs if path.endswith("results.json")]), plan.brackets, plan.expected_ends(BASE))
    assert result == (4, [], "1,2")


def test_workflow_plan_never_asks_for_a_retired_run(in_tmp: Path) -> None:
    """The frozen history still holds lr 0.003 (recorded first); `all` plans the campaign file's grid."""
    record_grid(campaign_from_dict(tiny()).paths, "tiny", "", campaign_from_dict(tiny()).grid)
    shrunk = campaign_from_dict(tiny(grid={**tiny()["grid"], "learning_rates": {"synchronous": [0.001]}}))
    outputs = WorkflowPlan(shrunk).final_output()
    finished = [path for path in outputs if path.endswith("results.json")]
    result = (any("lr0.003" in path for path in outputs), len(finished))
    assert result == (False, 2)


def test_workflow_plan_refuses_a_run_of_a_preset_the_campaign_lacks(in_tmp: Path) -> None:
    plan = WorkflowPlan(campaign_from_dict(tiny()))
    with pytest.raises(
        UserError, match="run 20m-synchronous-lr0.001-beta20.95-seed42: its base recipe 20m is not one of"
    ):
        plan.run("20m-synchronous-lr0.001-beta20.95-seed42")


def test_workflow_plan_chains_slices_through_the_previous_record(in_tmp: Path) -> None:
    plan = WorkflowPlan(campaign_from_dict(tiny()))
    run = "synchronous-lr0.001-beta20.95-seed42"
    result = (plan.previous_slice(run, 1, read=None), Path(plan.previous_slice(run, None, read=None)).name)
    assert result == (None, "epoch-1.json")


def test_workflow_plan_refuses_a_slice_end_off_the_plan(in_tmp: Path) -> None:
    plan = WorkflowPlan(campaign_from_dict(tiny()))
    with pytest.raises(UserError, match="synchronous-lr0.001-beta20.95-seed42: epoch 3 is not a slice boundary"):
        plan.previous_slice("synchronous-lr0.001-beta20.95-seed42", 3, read=None)


def test_job_settings_are_constants_when_every_scope_asks_the_same(in_tmp: Path) -> None:
    plan = WorkflowPlan(campaign_from_dict(tiny(resources={"default": {"minutes": 20, "cpus": 2}})))
    result = plan.run_job_resources()
    assert result == ({"runtime": 20, "mem_mb": 4000}, 2)


def test_job_settings_differ_per_run_through_its_wildcards(in_tmp: Path) -> None:
    raw = tiny(
        grid={
            "modes": ["synchronous", "packed-4"],
            "learning_rates": {"synchronous": [0.001], "packed-4": [0.002]},
            "beta2": [0.95],
        },
        resources={"packed-4": {"cpus": 4}},
    )
    plan = WorkflowPlan(campaign_from_dict(raw))
    resources, threads = plan.run_job_resources()
    result = (
        resources,
        threads(SimpleNamespace(run="packed-4-lr0.002-beta20.95-seed42")),
        threads(SimpleNamespace(run="synchronous-lr0.001-beta20.95-seed42")),
    )
    assert result == ({"runtime": 30, "mem_mb": 4000}, 4, 1)


@pytest.mark.parametrize("mode", ["synchronus", "packed-1", "packed"])
def test_a_misspelt_mode_is_named_with_the_modes_there_are(in_tmp: Path, mode: str) -> None:
    raw = tiny(grid={"modes": [mode], "learning_rates": {"synchronous": [0.001]}, "beta2": [0.95]})
    with pytest.raises(
        UserError, match=rf"grid.modes.0: unknown mode '{mode}' \(modes: synchronous, packed-K for K >= 2\)"
    ):
        campaign_from_dict(raw)
