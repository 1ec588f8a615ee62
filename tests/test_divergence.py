"""Divergence as an outcome of a run: the trainer's rules and records, full validation of a diverged
run, successive halving and status around it, and the audit of the claim (real Snakemake campaigns
on the demo model for the end-to-end cases)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sliced_runs import short_demo
from workflow_support import TINY, copy_repo, snakemake, write_campaign

from ebd2n.atomic import sha256_file
from ebd2n.audit.outcomes import check_outcomes
from ebd2n.audit.positions import checkpoint_metadata
from ebd2n.audit.run_checks import check_best, check_retention
from ebd2n.audit.runs import read_run
from ebd2n.campaign.rung_decision import decide
from ebd2n.campaign.runs import Run
from ebd2n.campaign.search import Bracket
from ebd2n.campaign.status import campaign_status
from ebd2n.campaign.status_display import campaign_line
from ebd2n.config import dump_recipe, recipe_identity
from ebd2n.evaluate import validate_run
from ebd2n.fileidentity import load_memory
from ebd2n.layout import RunPaths, slice_record
from ebd2n.train import train
from ebd2n.train.plan import plan_slices
from ebd2n.train.records import read_metrics

DIVERGING = "synchronous-lr1000.0-beta20.99-seed42"
CONVERGING = "synchronous-lr0.003-beta20.99-seed42"


def _recipe(cache_dir: Path, run_dir: Path, *overrides: str):
    return short_demo(cache_dir, run_dir, *overrides)


def _hashes(run_dir: Path) -> dict[str, str]:
    return {
        path.relative_to(run_dir).as_posix(): sha256_file(path) for path in sorted(run_dir.rglob("*")) if path.is_file()
    }


def test_train_non_finite_rule_stops_the_run_at_its_decision(demo_cache: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    recipe = _recipe(demo_cache, run_dir, "optimizer.lr=1000", "training.max_consecutive_skips=3")
    assert train(recipe, progress=False, until_epoch=1, slice_ends=(1, 2, 3, 4))
    records = read_metrics(run_dir)
    decision = records[-1]
    steps = [record for record in records if record["type"] == "step"]
    assert decision["type"] == "diverged" and decision["rule"] == "non-finite"
    assert steps[-1]["step"] == decision["step"]  # no step after the decision
    assert [record["skipped"] for record in steps[-3:]] == [True, True, True]
    assert decision["tokens"] == decision["step"] * 1024 and decision["epoch"] == (decision["step"] - 1) // 4 + 1
    assert math.isfinite(decision["last_finite_loss"])
    final = torch.load(run_dir / "final.pt", weights_only=True)
    assert final["progress"]["diverged"] == decision
    assert all(torch.isfinite(tensor).all() for tensor in final["engine"]["model"].values())
    assert {slice_record(end) for end in (1, 2, 3)} <= set(_hashes(run_dir))  # every slice job finds its output
    assert json.loads((run_dir / "run.json").read_text())["diverged"] == decision
    assert f"diverged at step {decision['step']} (rule non-finite)" in (run_dir / "train.log").read_text()


def test_train_loss_bound_rule_stops_a_run_worse_than_guessing(demo_cache: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(_recipe(demo_cache, run_dir, "optimizer.lr=3", "training.divergence_patience=4"), progress=False)
    decision = read_metrics(run_dir)[-1]
    bound = math.log(512) + 1.0
    over = [record["loss"] for record in read_metrics(run_dir) if record["type"] == "step"][-4:]
    assert decision["rule"] == "loss-bound" and all(loss > bound for loss in over)
    assert decision["last_finite_loss"] == over[-1]


def test_train_diverged_run_jobs_run_again_do_nothing(demo_cache: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    recipe = _recipe(demo_cache, run_dir, "optimizer.lr=1000")
    train(recipe, progress=False, until_epoch=2, slice_ends=(2, 4))  # diverges in epoch 3, in the next slice
    assert train(recipe, progress=False, slice_ends=(2, 4)) and read_metrics(run_dir)[-1]["epoch"] == 3
    before = _hashes(run_dir)
    for until in (2, 4, None):
        assert not train(recipe, progress=False, until_epoch=until, slice_ends=(2, 4))
    assert _hashes(run_dir) == before


def test_validate_diverged_run_records_its_outcome_without_validating(demo_cache: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(_recipe(demo_cache, run_dir, "optimizer.lr=1000"), progress=False)
    results = validate_run(run_dir)
    assert (results["status"], results["loss"]) == ("diverged", None)
    assert results["validation"] == "not run: the run diverged"
    assert results["diverged"] == read_metrics(run_dir)[-1]
    assert "targets" not in results and results["artifacts"]["final.pt"] == sha256_file(run_dir / "final.pt")
    assert validate_run(run_dir) == results  # unchanged: the same record


def test_recipe_divergence_defaults_keep_identities(demo_cache: Path, tmp_path: Path) -> None:
    default = _recipe(demo_cache, tmp_path)
    assert "divergence_margin" not in dump_recipe(default) and "divergence_patience" not in dump_recipe(default)
    changed = _recipe(demo_cache, tmp_path, "training.divergence_patience=5")
    assert "divergence_patience: 5" in dump_recipe(changed)
    assert recipe_identity(changed, "c") != recipe_identity(default, "c")


def test_decide_ranks_a_diverged_point_last_and_never_promotes_it() -> None:
    bracket = Bracket(None, "synchronous", ((0.003, 0.99), (1000.0, 0.99)), (42,))
    losses = {run.id: (None if run.lr == 1000.0 else 4.2) for run in bracket.runs()}
    diverged = frozenset(run.id for run in bracket.runs() if run.lr == 1000.0)
    decision = decide(bracket, 1, [(0.003, 0.99), (1000.0, 0.99)], 1.0, losses, {}, diverged=diverged)
    assert [entry["lr"] for entry in decision["ranking"]] == [0.003, 1000.0]
    assert decision["promoted"] == ["lr0.003-beta20.99"] and decision["continuing"] == ["lr0.003-beta20.99"]


# --- real campaigns ------------------------------------------------------------------------------


def _campaign(tmp_path: Path, learning_rates: list[float], **extra) -> Path:
    repo = copy_repo(tmp_path)
    raw = json.loads(json.dumps(TINY))
    raw["grid"]["learning_rates"]["synchronous"] = learning_rates
    write_campaign(repo, raw | extra)
    return repo


def _audit(campaign: Path) -> dict:
    return json.loads((campaign / "audit.json").read_text())


def _outcome_check(audit: dict) -> dict:
    return next(check for check in audit["checks"] if check["name"].startswith("every recorded outcome"))


def _assert_nothing_to_do(repo: Path) -> None:
    """A second invocation trains and validates nothing (its dry run plans the audit alone)."""
    again = snakemake(repo, "-n", "--configfile", "config/campaigns/tiny.yaml")
    said = again.stdout + again.stderr
    assert "would train: no run" in said and "would validate: no run" in said


def _assert_diverged_soon(run_dir: Path) -> dict:
    """The run stopped at its decision: its last step record is the decided step."""
    records = read_metrics(run_dir)
    steps = [record["step"] for record in records if record["type"] == "step"]
    assert records[-1]["type"] == "diverged" and steps[-1] == records[-1]["step"] <= 20
    return records[-1]


@pytest.mark.slow
def test_workflow_grid_with_a_diverging_lr_completes_and_its_audit_names_relabellings(tmp_path: Path) -> None:
    repo = _campaign(tmp_path, [0.003, 1000])
    console = snakemake(repo, "--configfile", "config/campaigns/tiny.yaml").stderr  # one command, exit 0
    campaign = repo / "results/tiny"
    decision = _assert_diverged_soon(campaign / "runs" / DIVERGING)
    said = [line for line in console.splitlines() if "diverged at step" in line]
    expected = f"train_slice tiny/{DIVERGING} epoch 1: diverged at step {decision['step']} (non-finite)"
    assert len(said) == 1 and said[0].endswith(expected)
    assert "were not present when the DAG was created" not in console
    results = json.loads((campaign / "runs" / DIVERGING / "results.json").read_text())
    assert (results["status"], results["diverged"]) == ("diverged", decision)
    assert (campaign / "runs" / DIVERGING / "report.html").is_file()
    audit = _audit(campaign)
    assert audit["passed"], audit["summary"]
    assert _outcome_check(audit)["examined"] == 2
    status = campaign_status(campaign)
    row = next(row for row in status.runs if row.run == DIVERGING)
    assert (row.state, row.detail) == ("diverged", f"diverged at step {decision['step']} (non-finite)")
    assert row.wall_s > 0
    assert "1 done, 0 running, 1 diverged, 0 failed, 0 pending" in campaign_line(status)
    _assert_nothing_to_do(repo)

    _relabel(campaign / "runs" / CONVERGING, diverged=True)
    _relabel(campaign / "runs" / DIVERGING, diverged=False)
    from ebd2n.audit import audit_campaign

    outcome = _outcome_check(audit_campaign(campaign))
    assert [violation.split(":")[0] for violation in outcome["violations"]] == [CONVERGING, DIVERGING]
    assert "a converged run relabelled as diverged" in outcome["violations"][0]
    assert "a diverged run relabelled as finished" in outcome["violations"][1]


def _relabel(run_dir: Path, diverged: bool) -> None:
    """What someone hiding a run from selection (or a divergence from the report) would edit."""
    results = json.loads((run_dir / "results.json").read_text())
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    if diverged:
        claim = {
            "type": "diverged",
            "step": 64,
            "tokens": 65536,
            "epoch": 2,
            "rule": "loss-bound",
            "last_finite_loss": 4.0,
            "detail": "edited",
        }
        results |= {"status": "diverged", "loss": None, "diverged": claim}
        lines.append(json.dumps(claim))
    else:
        results |= {"status": "complete", "loss": 5.0}
        results.pop("diverged")
        lines.pop()
    (run_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_workflow_halving_with_a_diverging_point_completes_without_promoting_it(tmp_path: Path) -> None:
    repo = _campaign(tmp_path, [0.003, 0.004, 1000], search={"method": "successive-halving", "keep": 0.5})
    snakemake(repo, "--configfile", "config/campaigns/tiny.yaml")
    campaign = repo / "results/tiny"
    _assert_diverged_soon(campaign / "runs" / DIVERGING)
    (decision_file,) = (campaign / "search").rglob("rung-1-*.json")
    decision = json.loads(decision_file.read_text())
    assert decision["ranking"][-1]["lr"] == 1000.0 and decision["ranking"][-1]["mean_loss"] is None
    assert "lr1000.0-beta20.99" not in decision["continuing"]
    audit = _audit(campaign)
    assert audit["passed"], audit["summary"]
    _assert_nothing_to_do(repo)


@pytest.mark.parametrize(
    "overrides",
    [["optimizer.lr=1000"], ["optimizer.lr=1000", "training.max_consecutive_skips=3"]],
    ids=["in-epoch-3", "in-epoch-1"],
)
def test_audit_accepts_a_diverged_run_keeping_epoch_checkpoints(
    demo_cache: Path, tmp_path: Path, overrides: list[str]
) -> None:
    """Policy epoch: the checkpoints of the epochs it never reached are not missing; diverged in its
    first epoch, it has no best epoch to name."""
    run_dir = tmp_path / "run"
    recipe = _recipe(demo_cache, run_dir, "training.checkpoint_policy=epoch", *overrides)
    train(recipe, progress=False)
    validate_run(run_dir)
    run = Run(None, "synchronous", 1000.0, recipe.optimizer.beta2, recipe.runtime.seed)
    memory = load_memory(tmp_path / "hashes.json", tmp_path, None, full=True)
    view = read_run(RunPaths(run_dir), run, memory, "")
    retention = check_retention([view], {run.base: plan_slices(4, 1)})
    assert (retention.examined, retention.violations) == (1, [])
    assert check_best([view]).violations == []
    outcome = check_outcomes([view], checkpoint_metadata([view], memory), memory)
    assert (outcome.examined, outcome.violations) == (1, [])


def test_a_diverged_run_killed_before_its_final_records_is_finished_by_the_same_command(
    demo_cache: Path, tmp_path: Path
) -> None:
    """Killed after final.pt is in the checkpoint ledger and before best.json and run.json (written
    last): the same command resumes the run and writes them, never takes it for finished, and its
    weights are those of the uninterrupted run."""
    settings = [f"data.cache_dir={demo_cache}"]  # the demo: lr 1000 diverges in its first epoch
    command = [sys.executable, "-m", "ebd2n", "train", "--config", "demo", "--quiet", "--until-epoch", "1"]
    command += [f"--set={setting}" for setting in [*settings, "optimizer.lr=1000"]]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run([*command, f"--set=runtime.output_dir={whole}"], check=True, capture_output=True)
    kill = {"EBD2N_KILL_AT": f"after:{killed}/checkpoints.json", "EBD2N_KILL_TARGET": ""}
    first = subprocess.run([*command, f"--set=runtime.output_dir={killed}"], env=os.environ | kill, capture_output=True)
    left = sorted(path.name for path in killed.iterdir() if path.name in ("final.pt", "best.json", "run.json"))
    again = subprocess.run([*command, f"--set=runtime.output_dir={killed}"], capture_output=True, text=True)
    weights = [torch.load(run / "final.pt", weights_only=True)["engine"]["model"] for run in (whole, killed)]
    result = (
        (first.returncode, left),
        again.returncode,
        all((killed / name).is_file() for name in ("best.json", "run.json", "report.html")),
        all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0]),
    )
    assert result == ((-9, ["final.pt"]), 0, True, True), again.stderr


@pytest.mark.parametrize(
    "overrides",
    [("optimizer.lr=0.003",), ("optimizer.lr=1000", "training.max_consecutive_skips=3")],
    ids=["converged", "diverged"],
)
def test_a_finished_runs_deleted_slice_record_is_written_again(
    demo_cache: Path, tmp_path: Path, overrides: tuple[str, ...]
) -> None:
    """A finished run (final.pt, best.json, run.json) whose slice record was deleted: the slice's job
    again writes it and trains nothing (its final.pt, saved last, is the run's end)."""
    run_dir = tmp_path / "run"
    recipe = _recipe(demo_cache, run_dir, *overrides)
    train(recipe, until_epoch=1, progress=False)
    train(recipe, progress=False)
    record = run_dir / slice_record(1)
    before = sha256_file(run_dir / "final.pt")
    record.unlink()
    trained = train(recipe, until_epoch=1, progress=False)
    assert (trained, record.is_file(), sha256_file(run_dir / "final.pt")) == (False, True, before)
