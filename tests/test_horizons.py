"""Training horizons: WSD trunks shared across budgets, branched runs, their plan, lineage and audit.

A campaign's `grid.horizons` trains every point to each budget; the longer horizon's run starts
from the shorter one's pre-decay checkpoint. The workflow tests run one real campaign (the demo
model, two horizons) and hold its branched run to the same recipe trained straight through.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from workflow_support import (
    TINY,
    assert_states_equal,
    comparable_metrics,
    copy_repo,
    environment,
    snakemake,
    write_campaign,
)

from ebd2n.campaign.check import campaign_from_dict
from ebd2n.campaign.freeze import freeze_trainer
from ebd2n.campaign.horizons import parent_run
from ebd2n.campaign.runs import Run, base_name, parse_run_id, split_base
from ebd2n.campaign.workflow import WorkflowPlan
from ebd2n.config import load_recipe, recipe_identity, save_recipe
from ebd2n.errors import UserError
from ebd2n.layout import named_campaign, run_paths
from ebd2n.train.budget import budget_of
from ebd2n.train.checkpoint import content_digest
from ebd2n.train.plan import parse_plan, plan_record, recipe_plan
from ebd2n.train.retention import Retention
from ebd2n.train.schedule import decay_start, learning_rate, pre_decay_epoch
from ebd2n.train.trunk import branch_epoch

OVERRIDES = {
    "training.epoch_tokens": 16384,  # 16 steps of 1,024 tokens
    "evaluation.subset_blocks": 16,
    "optimizer.schedule": "wsd",
    "optimizer.decay_fraction": 0.25,
    "optimizer.warmup_tokens": 2048,
}
"""The demo model (133,440 parameters): 0.5 tokens/param is 5 epochs, 1.0 is 9 (pre-decay epochs 3 and 6)."""
RAW = json.loads(json.dumps(TINY)) | {"campaign": "hz", "epochs_per_slice": 2}
RAW["overrides"] = OVERRIDES
RAW["grid"] = RAW["grid"] | {"horizons": [0.5, 1.0]}
PATHS = named_campaign("hz")
SHORT, LONG = (Run(None, "synchronous", 0.003, 0.99, 42, horizon) for horizon in (0.5, 1.0))


def demo(*overrides: tuple[str, object]):
    pairs = [*OVERRIDES.items(), *overrides]
    return load_recipe("demo", [f"{key}={'null' if value is None else value}" for key, value in pairs])


def at(horizon: float, *overrides: tuple[str, object]):
    """The demo recipe at a horizon, as a campaign's base recipe at that horizon is."""
    return demo(("training.tokens_per_parameter", horizon), ("training.max_tokens", None), *overrides)


def test_warmup_tokens_fix_the_warmup_whatever_the_budget() -> None:
    short, long = demo(("training.max_tokens", 65536)).optimizer, demo(("training.max_tokens", 131072))
    for tokens in (0, 1024, 2048, 4096, 40960):
        assert learning_rate(tokens, 65536, short) == learning_rate(tokens, 131072, long.optimizer)
    assert learning_rate(1024, 65536, short) == pytest.approx(short.lr * 1024 / 2048)
    fraction = demo(("optimizer.warmup_tokens", None), ("training.max_tokens", 65536)).optimizer
    assert learning_rate(1024, 65536, fraction) != learning_rate(1024, 131072, fraction)  # 2 % of each budget


def test_pre_decay_epoch_is_the_last_epoch_end_at_or_before_the_decay() -> None:
    for horizon, expected in ((0.5, 3), (1.0, 6), (2.0, 12)):
        recipe = at(horizon)
        budget = budget_of(recipe)
        start = decay_start(budget.total_tokens, recipe.optimizer)
        ends = [blocks * budget.context_length for blocks in budget.boundaries]
        assert pre_decay_epoch(recipe, budget) == expected
        assert ends[expected - 1] <= start < ends[expected]
    cosine = load_recipe("demo")
    assert pre_decay_epoch(cosine, budget_of(cosine)) is None


def test_a_horizon_run_keeps_its_pre_decay_checkpoint_besides_its_policy() -> None:
    recipe = at(1.0, ("training.keep_pre_decay", "true"))
    retention = Retention.of(recipe, budget_of(recipe).epochs)
    assert retention.policy == "final" and retention.kept_epochs == {6}
    assert retention.writes(6, 8) and not retention.writes(5, 8)
    assert Retention.of(at(1.0), 9).kept_epochs == frozenset()  # a wsd run outside a horizons campaign
    assert recipe_identity(recipe, None) == recipe_identity(at(1.0), None)  # result-neutral
    assert campaign_from_dict(RAW).base_recipe("base-tpp1.0").training.keep_pre_decay


def test_a_branch_needs_the_same_recipe_and_the_same_steps_before_it() -> None:
    parent, child = (at(h) for h in (0.5, 1.0))
    assert branch_epoch(parent, child) == 3
    assert branch_epoch(child, parent) is None  # the shorter run ends before the longer one's decay
    with pytest.raises(UserError, match="optimizer.lr differs"):
        branch_epoch(parent, at(1.0, ("optimizer.lr", 0.002)))
    scaled = [at(h, ("optimizer.warmup_tokens", None)) for h in (0.5, 1.0)]
    with pytest.raises(UserError, match="step 1: the learning rate differs.*optimizer.warmup_tokens"):
        branch_epoch(*scaled)


def test_a_branched_plan_starts_at_the_branch_and_reads_back() -> None:
    parent, child = (at(h) for h in (0.5, 1.0))
    plan = recipe_plan(child, 2, parent)
    assert (plan.ends, plan.branch) == ((3, 4, 6, 8, 9), 3)
    assert parse_plan(plan_record(plan), "plan") == plan
    assert recipe_plan(child, 2).ends == (2, 4, 6, 8, 9)
    with pytest.raises(UserError, match="branch_epoch 2 is not the first slice end"):
        parse_plan(plan_record(plan) | {"branch_epoch": 2}, "plan")


def test_run_ids_name_the_horizon_and_the_grid_its_bases() -> None:
    assert LONG.id == "synchronous-lr0.003-beta20.99-tpp1.0-seed42"
    assert parse_run_id(LONG.id) == LONG and parse_run_id("synchronous-lr0.003-beta20.99-seed42").horizon is None
    assert (LONG.base, split_base(LONG.base), base_name("20m", None)) == ("base-tpp1.0", ("base", 1.0), "20m")
    with pytest.raises(UserError, match="not in canonical form"):
        parse_run_id("synchronous-lr0.003-beta20.99-tpp1-seed42")
    grid = campaign_from_dict(RAW).grid
    assert grid.bases == ("base-tpp0.5", "base-tpp1.0")
    assert grid.runs() == [SHORT, LONG]
    assert parent_run(grid, LONG) == SHORT and parent_run(grid, SHORT) is None
    assert grid.union(replace(grid, horizons=(2.0, 0.25))).horizons == (0.25, 0.5, 1.0, 2.0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"optimizer.schedule": "cosine", "optimizer.decay_fraction": 0.1}, "has no wsd decay"),
        ({"optimizer.warmup_tokens": None}, "set optimizer.warmup_tokens"),
        ({"training.checkpoint_policy": "epoch"}, "horizons keep the final policy"),
    ],
)
def test_a_campaign_with_horizons_refuses_what_cannot_share_a_trunk(
    change: dict, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    raw = json.loads(json.dumps(RAW))
    policy = change.pop("training.checkpoint_policy", None)
    raw["overrides"] = raw["overrides"] | change
    if policy:
        raw["checkpoint_policy"] = policy
    with pytest.raises(UserError, match=message):
        campaign_from_dict(raw)
    halving = json.loads(json.dumps(RAW)) | {"seeds": [1, 2], "search": {"method": "successive-halving", "keep": 0.5}}
    with pytest.raises(UserError, match="successive halving over horizons is not supported"):
        campaign_from_dict(halving)


def test_a_packed_mode_whose_trunk_ends_elsewhere_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    raw = json.loads(json.dumps(RAW))
    raw["grid"] |= {
        "modes": ["synchronous", "packed-2"],
        "learning_rates": {"synchronous": [0.003], "packed-2": [0.003]},
    }
    assert campaign_from_dict(raw).grid.modes == ("synchronous", "packed-2")
    raw["grid"]["horizons"] = [10.15, 20]  # packed-2 rounds the 10.15 budget down to whole blocks per model
    with pytest.raises(
        UserError, match="in mode packed-2 the trunk of .*-tpp10.15-seed42 ends at epoch 61, not the plan's 62"
    ):
        campaign_from_dict(raw)


def test_a_started_campaign_gains_only_longer_horizons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    started = campaign_from_dict(RAW)
    for base in started.grid.bases:
        save_recipe(started.base_recipe(base), PATHS.base_recipe(base))
    PATHS.freeze_record.write_text(json.dumps({"settings": started.settings()}))
    assert campaign_from_dict(RAW | {"grid": RAW["grid"] | {"horizons": [0.5, 1.0, 2.0]}}).grid.horizons[-1] == 2.0
    with pytest.raises(UserError, match="grid.horizons: 0.75 is shorter than the started campaign's longest horizon 1"):
        campaign_from_dict(RAW | {"grid": RAW["grid"] | {"horizons": [0.5, 0.75, 1.0]}})
    with pytest.raises(UserError, match="grid.horizons: 0.5 is gone, but the longer 1 continues its trunk"):
        campaign_from_dict(RAW | {"grid": RAW["grid"] | {"horizons": [1.0]}})
    assert campaign_from_dict(RAW | {"grid": RAW["grid"] | {"horizons": [0.5]}}).grid.bases == ("base-tpp0.5",)


def test_the_first_base_recipes_freeze_in_any_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first invocation freezes its base recipes in parallel jobs: the longer horizon frozen
    first leaves the shorter one a horizon the campaign started with, not one added to it."""
    monkeypatch.chdir(tmp_path)
    started = campaign_from_dict(RAW)
    freeze_trainer(started)
    save_recipe(started.base_recipe("base-tpp1.0"), PATHS.base_recipe("base-tpp1.0"))
    assert campaign_from_dict(RAW).grid.bases == ("base-tpp0.5", "base-tpp1.0")
    with pytest.raises(UserError, match="grid.horizons: 0.75 is shorter than the started campaign's longest horizon 1"):
        campaign_from_dict(RAW | {"grid": RAW["grid"] | {"horizons": [0.5, 0.75, 1.0]}})


@pytest.mark.parametrize(("per_slice", "trunk"), [(2, "slices/epoch-4.json"), (5, "final.pt")])
def test_a_branch_waits_for_the_parent_slice_past_its_epoch(
    per_slice: int, trunk: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    plan = WorkflowPlan(campaign_from_dict(RAW | {"epochs_per_slice": per_slice}))
    assert plan.previous_slice(LONG.id, 3, read=None) == str(PATHS.run(SHORT.id).directory / trunk)
    assert plan.branch_option(LONG.id, 3) == f"--branch-from {PATHS.run(SHORT.id).directory}"
    assert plan.branch_option(LONG.id, 4 if per_slice == 2 else 5) == plan.branch_option(SHORT.id, 2) == ""
    assert plan.plan_parent("base-tpp1.0") == str(PATHS.base_recipe("base-tpp0.5"))


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository copy holding the finished two-horizon campaign."""
    repo = copy_repo(tmp_path_factory.mktemp("horizons"))
    snakemake(repo, "--configfile", write_campaign(repo, RAW))
    return repo


def ebd2n(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`python -m ebd2n ARGS` in the repository copy."""
    command = [sys.executable, "-m", "ebd2n", *args]
    return subprocess.run(
        command, cwd=repo, env=environment(), capture_output=True, text=True, check=check, timeout=300
    )


def straight_run(repo: Path, run: Run, out: Path) -> Path:
    """The branched run's own recipe trained from the start in a directory of its own."""
    run_dir = out / run.id
    ebd2n(repo, "train", "--config", str(repo / PATHS.run(run.id).recipe), "--set", f"runtime.output_dir={run_dir}")
    return run_dir


def test_a_branched_run_equals_the_straight_run_bitwise(campaign: Path, tmp_path: Path) -> None:
    branched = campaign / PATHS.run(LONG.id).directory
    parent = campaign / PATHS.run(SHORT.id).directory
    lineage = json.loads((branched / "lineage.json").read_text())
    ledger = json.loads((parent / "checkpoints.json").read_text())
    trunk = torch.load(parent / "checkpoints/epoch-3.pt", weights_only=True)
    assert lineage == {
        "parent": SHORT.id,
        "checkpoint": "checkpoints/epoch-3.pt",
        "sha256": ledger["checkpoints/epoch-3.pt"],
        "content_sha256": content_digest(trunk),
        "jobs": trunk["progress"]["job_ids"],
        "epoch": 3,
        "step": 48,
        "tokens": 49152,
    }
    assert sorted(ledger) == ["checkpoints/epoch-3.pt", "final.pt"]  # the trunk's checkpoint, kept
    assert "branched from " + SHORT.id in (branched / "train.log").read_text()
    straight = straight_run(campaign, LONG, tmp_path)
    ours, theirs = (torch.load(d / "final.pt", weights_only=True) for d in (branched, straight))
    assert_states_equal(ours["engine"], theirs["engine"])
    assert_states_equal(ours["data"], theirs["data"])
    assert comparable_metrics(branched) == comparable_metrics(straight)
    trained = [json.loads(line) for line in (branched / "jobs.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["epoch"]) for r in trained][:5] == [("train", e) for e in (3, 4, 6, 8, 9)]


def test_the_campaign_page_and_status_count_the_trunk_once(campaign: Path) -> None:
    status = ebd2n(campaign, "status", str(PATHS.directory)).stdout
    long_metrics = [json.loads(line) for line in (campaign / PATHS.run(LONG.id).metrics).read_text().splitlines()]
    own = sum(r["wall_s"] for r in long_metrics if r.get("type") == "epoch" and r["epoch"] > 3)
    row = next(line for line in status.splitlines() if line.startswith(LONG.id))
    assert row.split()[-2] == f"{own:.1f}"
    results = json.loads((campaign / PATHS.report / "results.json").read_text())
    assert {row["size"] for row in results["scaling"]} == {"0.5 tokens/param", "1 tokens/param"}


def test_runs_csv_names_each_runs_horizon_and_its_tokens_per_parameter(campaign: Path) -> None:
    """Each row its declared horizon and what it trained: tokens over run.json's parameter count, which
    equals the horizon up to the budget's rounding to whole blocks."""
    import polars as pl

    runs = pl.read_csv(campaign / PATHS.directory / "runs.csv")
    wanted = {run_id: parse_run_id(run_id).horizon for run_id in runs["run"]}
    got = dict(zip(runs["run"], runs["horizon_tpp"], strict=True))
    ratio = [row["tokens_per_parameter"] / row["horizon_tpp"] for row in runs.iter_rows(named=True)]
    assert got == wanted and all(value is not None for value in got.values()) and all(0.95 < r < 1.05 for r in ratio)


def test_the_audit_names_a_branch_whose_parent_checkpoint_was_replaced(campaign: Path, tmp_path: Path) -> None:
    repo = Path(shutil.copytree(campaign, tmp_path / "repo", symlinks=True))
    parent = repo / PATHS.run(SHORT.id).directory
    (parent / "checkpoints/epoch-3.pt").write_bytes((parent / "final.pt").read_bytes())
    ledger = json.loads((parent / "checkpoints.json").read_text())
    ledger["checkpoints/epoch-3.pt"] = ledger["final.pt"]  # the run's own records agree with the swap
    (parent / "checkpoints.json").write_text(json.dumps(ledger))
    audit = ebd2n(repo, "audit", str(PATHS.directory), check=False)
    assert audit.returncode == 1, audit.stdout + audit.stderr
    lines = [line for line in audit.stderr.splitlines() if "branched runs start" in line]
    assert lines and f"{LONG.id}: branched from {SHORT.id}'s checkpoints/epoch-3.pt" in lines[0]
    assert "the parent checkpoint was replaced" in lines[0]


@pytest.mark.slow
def test_adding_a_longer_horizon_continues_the_trunk_and_retrains_nothing(campaign: Path, tmp_path: Path) -> None:
    repo = Path(shutil.copytree(campaign, tmp_path / "repo", symlinks=True))
    before = {run.id: run_paths(repo / PATHS.run(run.id).directory) for run in (SHORT, LONG)}
    kept = {(name, f): (p.directory / f).read_bytes() for name, p in before.items() for f in ("final.pt", "jobs.jsonl")}
    longer = RAW | {"grid": RAW["grid"] | {"horizons": [0.5, 1.0, 1.5]}}
    snakemake(repo, "--configfile", write_campaign(repo, longer))
    assert {key: (before[key[0]].directory / key[1]).read_bytes() for key in kept} == kept
    added = replace(LONG, horizon=1.5)
    lineage = json.loads((repo / PATHS.run(added.id).directory / "lineage.json").read_text())
    assert (lineage["parent"], lineage["epoch"]) == (LONG.id, 6)
    straight = straight_run(repo, added, tmp_path / "straight")
    ours, theirs = (
        torch.load(d / "final.pt", weights_only=True) for d in (repo / PATHS.run(added.id).directory, straight)
    )
    assert_states_equal(ours["engine"], theirs["engine"])


@pytest.mark.slow
def test_a_kill_during_a_branch_and_the_same_command_again_give_the_same_weights(
    campaign: Path, tmp_path: Path
) -> None:
    repo = copy_repo(tmp_path)
    command = ("--configfile", write_campaign(repo, RAW))
    env = environment() | {"EBD2N_KILL_AT": f"after:*/runs/{LONG.id}/lineage.json", "EBD2N_KILL_TARGET": ""}
    killed = snakemake(repo, *command, check=False, env=env)
    branched = repo / PATHS.run(LONG.id).directory
    assert killed.returncode != 0 and (branched / "lineage.json").is_file() and not (branched / "final.pt").exists()
    snakemake(repo, *command, "--rerun-incomplete")
    ours, theirs = (
        torch.load(d / "final.pt", weights_only=True) for d in (branched, campaign / PATHS.run(LONG.id).directory)
    )
    assert_states_equal(ours["engine"], theirs["engine"])
    assert comparable_metrics(branched) == comparable_metrics(campaign / PATHS.run(LONG.id).directory)
