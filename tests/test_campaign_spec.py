"""Campaign files, run ids, slices, resolved recipes, freezing and collecting (no training)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ebd2n.campaign.analysis import load_runs
from ebd2n.campaign.check import campaign_from_dict, campaign_warnings, load_campaign
from ebd2n.campaign.collect import collect_campaign
from ebd2n.campaign.freeze import freeze_base, freeze_trainer
from ebd2n.campaign.plans import campaign_plans
from ebd2n.campaign.resolve import resolve_run, run_recipe
from ebd2n.campaign.results import RUN_COLUMNS
from ebd2n.campaign.runs import Run, parse_run_id
from ebd2n.config import load_recipe
from ebd2n.errors import UserError
from ebd2n.provenance import PACKAGE_DIR, source_hash
from ebd2n.train.plan import plan_slices, slice_ends, write_slice_plan

REPO_ROOT = Path(__file__).resolve().parents[1]
CAMPAIGNS = REPO_ROOT / "config" / "campaigns"
REFERENCE = Path(__file__).resolve().parent / "reference" / "recipe_sweep_20m" / "results.json"

TINY: dict[str, Any] = {
    "campaign": "tiny",
    "recipe": "demo",
    "data": {"source": "synthetic", "cache_dir": "results/caches/synthetic"},
    "grid": {
        "modes": ["synchronous", "packed-4"],
        "learning_rates": {"synchronous": [0.003], "packed-4": [0.004, 0.006]},
        "beta2": [0.99],
    },
    "seeds": [42, 43],
    "epochs_per_slice": 3,
    "resources": {"default": {"gpus": 0, "minutes": 5}, "packed-4": {"mem_mb": 1234}},
}


def tiny(**changes: Any) -> dict[str, Any]:
    """The tiny campaign with top-level keys replaced (None removes a key)."""
    raw = copy.deepcopy(TINY)
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def with_grid(**changes: Any) -> dict[str, Any]:
    raw = tiny()
    raw["grid"].update(changes)
    return raw


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in tmp_path: campaigns write to ./results."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (Run(None, "packed-4", 0.0012, 0.999, 42), "packed-4-lr0.0012-beta20.999-seed42"),
        (Run(None, "synchronous", 0.003, 0.95, 7), "synchronous-lr0.003-beta20.95-seed7"),
        (Run("254m", "synchronous", 0.0008, 0.95, 42), "254m-synchronous-lr0.0008-beta20.95-seed42"),
        (Run("1.41b", "synchronous", 1e-05, 0.95, 42), "1.41b-synchronous-lr1e-05-beta20.95-seed42"),
    ],
)
def test_run_id_format(run: Run, expected: str) -> None:
    result = run.id
    assert result == expected


@pytest.mark.parametrize(
    "run_id",
    [
        "packed-4-lr0.0012-beta20.999-seed42",
        "1.41b-synchronous-lr1e-05-beta20.95-seed0",
        "packed-16-lr0.1-beta20.0-seed3",
    ],
)
def test_parse_run_id_round_trip(run_id: str) -> None:
    result = parse_run_id(run_id).id
    assert result == run_id


@pytest.mark.parametrize(
    ("run_id", "message"),
    [
        ("synchronous-lr0.00120-beta20.95-seed42", "not in canonical form.*lr0.0012-"),
        ("synchronous-lr0.001-seed42", "expected \\[<preset>-\\]<mode>"),
        ("packed-lr0.001-beta20.9-seed42", "expected"),
    ],
)
def test_parse_run_id_refuses(run_id: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_run_id(run_id)


@pytest.mark.parametrize(
    ("epochs", "per_slice", "expected"), [(4, 2, [2, 4]), (40, 40, [40]), (5, 2, [2, 4, 5]), (3, 5, [3])]
)
def test_slice_ends(epochs: int, per_slice: int, expected: list[int]) -> None:
    result = slice_ends(epochs, per_slice)
    assert result == expected


def test_previous_end_chains_slices() -> None:
    plan = plan_slices(5, 2)
    result = [plan.previous(end) for end in (2, 4, 5)]
    assert result == [None, 2, 4]


def test_demo_campaign_grid() -> None:
    """The demo campaign as shipped (the committed file: a user's extension of config/config.yaml,
    as the README invites, does not make this test fail)."""
    shown = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "show", "HEAD:config/config.yaml"], capture_output=True, text=True
    )
    if shown.returncode != 0:
        pytest.skip(f"not a git checkout: {shown.stderr.strip()}")
    campaign = campaign_from_dict(yaml.safe_load(shown.stdout), source="HEAD:config/config.yaml")
    slices = {base: len(plan.ends) for base, plan in campaign_plans(campaign).items()}
    lrs = {mode: len(lrs) for mode, lrs in campaign.grid.learning_rates.items()}
    result = (len(campaign.grid.runs()), lrs, len(campaign.grid.beta2), campaign.grid.seeds, slices)
    assert result == (36, {"synchronous": 3, "packed-4": 3}, 2, (42, 43, 44), {"base": 2})


def test_recipe_sweep_reproduces_reference_grid() -> None:
    reference = json.loads(REFERENCE.read_text())
    campaign = load_campaign(CAMPAIGNS / "recipe-sweep-20m.yaml")
    result = (
        {mode: list(lrs) for mode, lrs in campaign.grid.learning_rates.items()},
        list(campaign.grid.beta2),
        list(campaign.grid.seeds),
    )
    assert result == (reference["learning_rates"], reference["beta2"], reference["seeds"])


def test_recipe_sweep_runs_match_reference_runs() -> None:
    runs = json.loads(REFERENCE.read_text())["runs"]
    reference = {(run["mode"], run["lr"], run["beta2"], run["seed"]) for run in runs}
    result = {
        (run.mode, run.lr, run.beta2, run.seed)
        for run in load_campaign(CAMPAIGNS / "recipe-sweep-20m.yaml").grid.runs()
    }
    assert result == reference


def test_recipe_sweep_jobs_fit_one_gpu_and_30_minutes() -> None:
    campaign = load_campaign(CAMPAIGNS / "recipe-sweep-20m.yaml")
    result = {(r.gpus, r.minutes) for r in (campaign.job_resources("base", mode) for mode in campaign.grid.modes)}
    assert result == {(1, 30)}


def test_scaling_campaign_resources_per_preset() -> None:
    campaign = load_campaign(CAMPAIGNS / "scaling-minipile.yaml")
    result = {preset: campaign.job_resources(preset, "synchronous").job_gpus for preset in campaign.grid.presets}
    assert result == {"254m": 4, "483m": 4, "778m": 8, "1.41b": 8}


def test_scaling_campaign_largest_runs_span_two_nodes_of_four_gpus() -> None:
    campaign = load_campaign(CAMPAIGNS / "scaling-minipile.yaml")
    result = {
        preset: campaign.job_resources(preset, "synchronous").slurm.get("nodes") for preset in campaign.grid.presets
    }
    assert result == {"254m": None, "483m": None, "778m": 2, "1.41b": 2}


def test_two_node_job_asks_slurm_for_nodes_and_gpus_per_node() -> None:
    raw = tiny(
        resources={"synchronous": {"nodes": 2, "gpus_per_node": 2, "minutes": 9}},
        overrides={"parallel.pipeline_stages": 2, "parallel.data_parallel": 2},
    )
    raw["grid"] = {**raw["grid"], "modes": ["synchronous"], "learning_rates": {"synchronous": [0.003]}}
    result = campaign_from_dict(raw).job_resources("base", "synchronous").slurm
    assert result == {
        "runtime": 9,
        "mem_mb": 4000,
        "nodes": 2,
        "gres": "gpu:2",
        "mpi": "srun",
        "tasks": 2,
        "tasks_per_gpu": 0,
    }


def test_scaling_campaign_slices_fit_a_day() -> None:
    campaign = load_campaign(CAMPAIGNS / "scaling-minipile.yaml")
    result = max(campaign.job_resources(preset, "synchronous").minutes for preset in campaign.grid.presets)
    assert result <= 24 * 60


def test_resources_most_specific_scope_wins() -> None:
    campaign = campaign_from_dict(tiny())
    result = campaign.job_resources("base", "packed-4")
    assert (result.gpus, result.minutes, result.mem_mb) == (0, 5, 1234)


def test_prepare_job_takes_prepare_then_default() -> None:
    raw = tiny(resources={"default": {"minutes": 5}, "prepare": {"cpus": 4}})
    result = campaign_from_dict(raw).job_resources("base", None)
    assert (result.minutes, result.cpus) == (5, 4)


BAD_CAMPAIGNS = [
    pytest.param(
        tiny(epochs=3),
        "top level: unknown key 'epochs' \\(the keys here: campaign, description, recipe, ",
        id="unknown-key",
    ),
    pytest.param(
        with_grid(learning_rates={"synchronous": [0.003, 0.003], "packed-4": [0.004]}),
        "grid.learning_rates.synchronous: \\[0.003, 0.003\\] has non-unique elements",
        id="duplicate-lr",
    ),
    pytest.param(tiny(seeds=[]), "seeds: \\[\\] should be non-empty", id="empty-seeds"),
    pytest.param(
        with_grid(modes=["synchronous", "packed-1"]),
        "grid.modes.1: unknown mode 'packed-1' \\(modes: synchronous, packed-K for K >= 2\\)",
        id="unknown-mode",
    ),
    pytest.param(
        tiny(recipe=None, grid={**TINY["grid"], "presets": ["20m", "99m"]}),
        "recipe 99m: no such file and no such preset",
        id="unknown-preset",
    ),
    pytest.param(
        tiny(resources={"packed-4": {"gpus": 2}}),
        "resources for packed-4: gpus 2, but packed-K mode trains its K models on one device",
        id="packed-needs-one-gpu",
    ),
    pytest.param(
        tiny(resources={"synchronous": {"gpus": 4}}),
        "resources for synchronous: gpus 4, but the recipe places the model on "
        "parallel.pipeline_stages x parallel.data_parallel = 1 x 1 devices",
        id="gpus-need-placement",
    ),
    pytest.param(
        tiny(resources={"synchronous": {"nodes": 2, "gpus_per_node": 4}}),
        "resources for synchronous: nodes x gpus_per_node = 2 x 4 GPUs, but the recipe places the model on "
        "parallel.pipeline_stages x parallel.data_parallel = 1 x 1 devices",
        id="nodes-need-placement",
    ),
    pytest.param(
        tiny(resources={"synchronous": {"nodes": 2}}),
        "resources for synchronous: nodes 2 needs gpus_per_node",
        id="nodes-without-gpus",
    ),
    pytest.param(
        with_grid(learning_rates={"synchronous": [0.003]}),
        "grid.learning_rates: no list for mode packed-4",
        id="mode-without-lrs",
    ),
    pytest.param(
        tiny(resources={"packed-8": {"gpus": 1}}),
        "resources.packed-8: not a scope of this campaign",
        id="unknown-scope",
    ),
    pytest.param(tiny(overrides={"optimizer.lrr": 0.1}), "optimizer.lrr: unknown key", id="bad-override"),
    pytest.param(tiny(recipe=None), "set either recipe .* or grid.presets", id="no-base"),
]


@pytest.mark.parametrize(("raw", "message"), BAD_CAMPAIGNS)
def test_campaign_refuses(raw: dict, message: str, in_tmp: Path) -> None:
    with pytest.raises(UserError, match=message):
        campaign_from_dict(raw, source="tiny.yaml")


def test_run_recipe_applies_grid_point() -> None:
    base = campaign_from_dict(tiny()).base_recipe("base")
    run = Run(None, "packed-4", 0.006, 0.99, 43)
    recipe = run_recipe(base, run, "results/tiny/runs/x")
    result = (recipe.mode, recipe.optimizer.lr, recipe.optimizer.beta2, recipe.runtime.seed, recipe.runtime.output_dir)
    assert result == ("packed-4", 0.006, 0.99, 43, "results/tiny/runs/x")


def test_run_recipe_synchronous_drops_packed_section() -> None:
    base = run_recipe(campaign_from_dict(tiny()).base_recipe("base"), Run(None, "packed-4", 0.1, 0.9, 1), "x")
    result = run_recipe(base, Run(None, "synchronous", 0.1, 0.9, 1), "x").decentralized
    assert result is None


def test_base_recipe_takes_campaign_settings() -> None:
    raw = tiny(overrides={"training.log_every": 3}, checkpoint_policy="epoch")
    recipe = campaign_from_dict(raw).base_recipe("base")
    result = (recipe.training.log_every, recipe.training.checkpoint_policy, recipe.data.cache_dir)
    assert result == (3, "epoch", "results/caches/synthetic")


def test_base_recipe_takes_the_campaigns_checkpoint_epochs() -> None:
    recipe = campaign_from_dict(tiny(checkpoint_policy="interval", checkpoint_epochs=2)).base_recipe("base")
    assert (recipe.training.checkpoint_policy, recipe.training.checkpoint_epochs) == ("interval", [2])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"checkpoint_epochs": 0}, r"checkpoint_epochs: must be ≥ 1, got 0"),
        ({"checkpoint_policy": "interval", "checkpoint_epochs": [1, 2]}, r"takes one value, the interval K"),
    ],
)
def test_campaign_checkpoint_epochs_refused_naming_the_key(settings: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        campaign_from_dict(tiny(**settings)).base_recipe("base")


def test_freeze_copies_the_package(in_tmp: Path) -> None:
    result = freeze_trainer(campaign_from_dict(tiny()))
    assert result == source_hash(PACKAGE_DIR) == source_hash(in_tmp / "results/tiny/frozen/src/ebd2n")


def test_frozen_trainer_resolves_presets_from_its_own_copy(in_tmp: Path) -> None:
    """The frozen copy carries the presets as package data and reads its own, not the checkout's."""
    freeze_trainer(campaign_from_dict(tiny()))
    frozen = in_tmp / "results/tiny/frozen/src"
    preset = frozen / "ebd2n/config/recipes/demo.yaml"
    preset.write_text(preset.read_text().replace("log_every: 8", "log_every: 6"))
    (in_tmp / "elsewhere").mkdir()
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ebd2n.config import load_recipe, resolve_recipe_path\n"
            "print(resolve_recipe_path('demo'), load_recipe('demo').training.log_every)",
        ],
        capture_output=True,
        text=True,
        cwd=in_tmp / "elsewhere",
        env={"PYTHONPATH": str(frozen)},
        timeout=120,
    )
    assert (shown.returncode, shown.stdout.strip()) == (0, f"{preset} 6")


def test_freeze_happens_once(in_tmp: Path) -> None:
    """A second freeze (a job run again) leaves the first as it is; a frozen copy edited since is refused."""
    campaign = campaign_from_dict(tiny())
    first = freeze_trainer(campaign)
    record = campaign.paths.freeze_record.read_bytes()
    again = freeze_trainer(campaign)
    assert (again, campaign.paths.freeze_record.read_bytes()) == (first, record)
    trainer = campaign.paths.frozen_package / "train/trainer.py"
    trainer.write_text(trainer.read_text() + "# edited\n")
    with pytest.raises(UserError, match="its source hash is not the recorded"):
        freeze_trainer(campaign)


def test_resolve_uses_frozen_base(in_tmp: Path) -> None:
    campaign = campaign_from_dict(tiny())
    freeze_base(campaign, "base")
    path = campaign.paths.base_recipe("base")
    path.write_text(path.read_text().replace("log_every: 8", "log_every: 5"))
    run_dir = campaign.directory / "runs" / "packed-4-lr0.004-beta20.99-seed43"
    result = load_recipe(resolve_run(run_dir))
    assert (result.training.log_every, result.mode, result.runtime.output_dir) == (5, "packed-4", run_dir.as_posix())


def test_started_campaign_keeps_its_settings(in_tmp: Path) -> None:
    freeze_trainer(campaign_from_dict(tiny()))
    with pytest.raises(UserError, match="started with other settings \\(epochs_per_slice: frozen 3, now 1\\)"):
        campaign_from_dict(tiny(epochs_per_slice=1))


def test_started_campaign_may_grow(in_tmp: Path) -> None:
    freeze_trainer(campaign_from_dict(tiny()))
    result = len(campaign_from_dict(tiny(seeds=[42, 43, 44])).grid.runs())
    assert result == 9


def test_frozen_trainer_plans_the_slices(in_tmp: Path) -> None:
    """The slices come from the frozen base recipe (ebd2n.campaign.plans), which the frozen trainer
    refuses to confirm when it cuts otherwise (`ebd2n plan --expect`: the plan job fails, no run
    trains); a plan file written by hand changes nothing the workflow plans."""
    campaign = campaign_from_dict(tiny(epochs_per_slice=1))
    freeze_trainer(campaign)
    freeze_base(campaign, "base")
    planner = campaign.paths.frozen_package / "train/plan.py"  # a frozen trainer that cuts every run in one slice
    planner.write_text(
        planner.read_text().replace(
            "return [*range(epochs_per_slice, epochs, epochs_per_slice), epochs]", "return [epochs]"
        )
    )
    before = campaign_plans(campaign)["base"].ends
    command = [
        sys.executable,
        "-m",
        "ebd2n",
        "plan",
        str(campaign.paths.base_recipe("base")),
        "--epochs-per-slice",
        "1",
        "--expect",
        ",".join(map(str, before)),
        "--output",
        str(campaign.paths.slice_plan("base")),
    ]
    confirmed = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(campaign.paths.frozen_src)},
        timeout=120,
    )
    write_slice_plan(
        plan_slices(2, 2), campaign.paths.slice_plan("base")
    )  # what a frozen trainer cutting one slice writes
    result = (
        before,
        confirmed.returncode,
        "--expect 1,2: this trainer cuts 2 epochs into slices ending at 2" in confirmed.stderr,
        campaign_plans(campaign)["base"].ends,
    )
    assert result == ((1, 2), 2, True, (1, 2))


def test_campaign_frozen_by_an_older_ebd2n_is_refused(in_tmp: Path) -> None:
    """A copy frozen before `ebd2n plan` and the launcher: one line saying what to do, not a job that trains nothing."""
    campaign = campaign_from_dict(tiny())
    digest = freeze_trainer(campaign)
    freeze_base(campaign, "base")
    (campaign.paths.frozen_package / "train/plan.py").unlink()
    with pytest.raises(
        UserError,
        match=f"frozen by an older ebd2n \\(source {digest}, frozen "
        ".*finish the campaign with the ebd2n checkout that froze it",
    ):
        campaign_plans(campaign)


def test_collect_writes_a_table_analysis_reads(in_tmp: Path) -> None:
    campaign = campaign_from_dict(tiny())
    freeze_trainer(campaign)
    freeze_base(campaign, "base")
    for index, run in enumerate(campaign.grid.runs()[:2]):
        run_dir = campaign.directory / "runs" / run.id
        resolve_run(run_dir)
        result = {
            "run": run.id,
            "mode": run.mode,
            "lr": run.lr,
            "beta2": run.beta2,
            "seed": run.seed,
            "status": "complete",
            "loss": 4.0 + index,
            "targets": 10,
            "cache_identity": "c",
            "job_ids": ["1", "2"],
        }
        (run_dir / "results.json").write_text(json.dumps(result))
    table = load_runs(collect_campaign(campaign))
    result = (table.columns, table["loss"].to_list())
    assert result == (list(RUN_COLUMNS), [4.0, 5.0])


def test_collect_records_the_campaign(in_tmp: Path) -> None:
    campaign = campaign_from_dict(tiny())
    freeze_trainer(campaign)
    collect_campaign(campaign)
    record = json.loads((campaign.directory / "campaign.json").read_text())
    result = (record["runs_planned"], record["runs_finished"], record["source_hash"], record["grid"]["modes"])
    assert result == (6, 0, source_hash(PACKAGE_DIR), ["synchronous", "packed-4"])


def test_scaling_campaign_plan_has_the_seeds_slices() -> None:
    campaign = load_campaign(CAMPAIGNS / "scaling-minipile.yaml")
    result = {base: len(plan.ends) for base, plan in campaign_plans(campaign).items()}
    assert result == {"254m": 2, "483m": 3, "778m": 6, "1.41b": 5}


def test_shipped_campaign_files_pass_the_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The fine-tune campaigns read their model's config.json: Qwen1.5-MoE's from a hub cache, the demo's
    # tiny model (built by `ebd2n hf-init`) from results/models/ under the working directory.
    from ebd2n.model.hf import TINY_CONFIGS

    snapshot = tmp_path / "hub/models--Qwen--Qwen1.5-MoE-A2.7B/snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs/main").write_text("0" * 40)
    (snapshot / "config.json").write_text((REPO_ROOT / "resources/models/qwen1.5-moe-a2.7b/config.json").read_text())
    tiny = tmp_path / "results/models/tiny-qwen2-moe"
    tiny.mkdir(parents=True)
    (tiny / "config.json").write_text(json.dumps({**TINY_CONFIGS["qwen2_moe"], "vocab_size": 512}))
    (tmp_path / "config").symlink_to(REPO_ROOT / "config")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    paths = [REPO_ROOT / "config" / "config.yaml", *sorted(CAMPAIGNS.glob("*.yaml"))]
    result = [load_campaign(path).name for path in paths]
    expected = [
        "demo",
        "batch-beta1-20m",
        "batch-beta1-demo",
        "finetune-qwen-moe",
        "finetune-sql-demo",
        "recipe-sweep-20m",
        "scaling-minipile",
        "schedules-horizons-20m",
        "schedules-horizons-demo",
        "my-campaign",
    ]
    assert result == expected


def test_campaign_file_yaml_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("campaign: [unclosed\n")
    with pytest.raises(UserError, match="bad.yaml: not valid YAML"):
        load_campaign(path)


def test_execution_record_has_concurrency_limits_and_versions() -> None:
    import torch

    raw = tiny(
        resources={
            "default": {"gpus": 0, "minutes": 5, "partition": "cpu", "account": "proj"},
            "packed-4": {"minutes": 45},
            "prepare": {"minutes": 600},
        }
    )
    record = campaign_from_dict(raw).execution_record(max_jobs=40)
    result = (
        record["max_concurrent_jobs"],
        {scope: job["time_limit_minutes"] for scope, job in record["jobs"].items()},
        record["jobs"]["packed-4"]["partition"],
        record["jobs"]["packed-4"]["account"],
        record["versions"]["torch"] == torch.__version__,
        sorted(record["versions"]),
    )
    expected = (
        40,
        {"prepare": 600, "synchronous": 5, "packed-4": 45},
        "cpu",
        "proj",
        True,
        sorted(
            [
                "python",
                "torch",
                "numpy",
                "polars",
                "pydantic",
                "tokenizers",
                "datasets",
                "snakemake",
                "snakemake-executor-plugin-slurm",
            ]
        ),
    )
    assert result == expected


def test_execution_record_gives_pack_jobs_k_times_the_minutes() -> None:
    """A pack job trains K runs' slices: the record says K and the pack scope's time limit."""
    resources = {"default": {"gpus": 0, "minutes": 5}, "synchronous": {"minutes": 7}}
    solo = campaign_from_dict(tiny(resources=resources)).execution_record(max_jobs=None)
    packed = campaign_from_dict(tiny(resources=resources, execution={"pack": 4})).execution_record(max_jobs=None)
    limits = {scope: job["time_limit_minutes"] for scope, job in packed["jobs"].items()}
    assert (solo["runs_per_pack"], "synchronous pack" in solo["jobs"]) == (1, False)
    assert (packed["runs_per_pack"], limits) == (
        4,
        {"prepare": 5, "synchronous": 7, "packed-4": 5, "synchronous pack": 28},
    )


def test_scaling_campaign_is_the_seeds() -> None:
    campaign = load_campaign(CAMPAIGNS / "scaling-minipile.yaml")
    plans = campaign_plans(campaign)
    result = {
        base: (
            plans[base].epochs,
            len(plans[base].ends),
            campaign.job_resources(base, "synchronous").job_gpus,
            campaign.job_resources(base, "synchronous").minutes,
        )
        for base in campaign.grid.bases
    }
    expected = {"254m": (5, 2, 4, 1440), "483m": (6, 3, 4, 1440), "778m": (6, 6, 8, 1440), "1.41b": (5, 5, 8, 1440)}
    parallel = campaign.base_recipe("1.41b").parallel
    assert (result, len(campaign.grid.runs())) == (expected, 4)
    assert (parallel.pipeline_stages, parallel.data_parallel, parallel.pipeline_depth) == (2, 4, 3)


def test_preset_learning_rates_replace_the_modes() -> None:
    raw = tiny(recipe=None, epochs_per_slice={"demo": 1, "20m": 2}, resources={"default": {"gpus": 0}})
    raw["grid"] = {
        "presets": ["demo", "20m"],
        "modes": ["synchronous"],
        "beta2": [0.99],
        "learning_rates": {"synchronous": [0.003], "20m-synchronous": [0.001, 0.002]},
    }
    campaign = campaign_from_dict(raw)
    result = sorted((run.base, run.lr) for run in campaign.grid.runs() if run.seed == 42), campaign.slice_epochs("20m")
    assert result == ([("20m", 0.001), ("20m", 0.002), ("demo", 0.003)], 2)


def test_per_preset_epochs_per_slice_must_name_every_preset() -> None:
    raw = tiny(recipe=None, epochs_per_slice={"demo": 1}, resources={"default": {"gpus": 0}})
    raw["grid"] = {
        "presets": ["demo", "20m"],
        "modes": ["synchronous"],
        "beta2": [0.99],
        "learning_rates": {"synchronous": [0.003]},
    }
    with pytest.raises(
        UserError, match=r"epochs_per_slice: one value per preset needs exactly grid.presets \['demo', '20m'\]"
    ):
        campaign_from_dict(raw)


def test_campaign_warnings_name_a_null_slurm_account(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    result = campaign_warnings(load_campaign("config/campaigns/recipe-sweep-20m.yaml"))
    expected = [
        "config/campaigns/recipe-sweep-20m.yaml: resources.default.account is null, "
        "so its SLURM jobs go to your default account; a cluster that requires an account refuses them "
        "at submission: set it (sbatch --account) or remove the key"
    ]
    assert result == expected


@pytest.mark.parametrize("default", [{"gpus": 0, "minutes": 5}, {"gpus": 1, "account": "proj42"}])
def test_campaign_warnings_none_without_a_null_account(default: dict[str, Any]) -> None:
    result = campaign_warnings(campaign_from_dict(tiny(resources={"default": default})))
    assert result == []
