"""The campaign audit: a clean campaign passes; each kind of damage is caught, one test per case.

One tiny campaign (one grid point, two seeds) is trained for real by Snakemake, audited and
reported once per module; each test works on its own copy and damages one thing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
import yaml
from workflow_support import TINY, copy_repo, snakemake, write_campaign

from ebd2n.campaign.audit import audit_campaign, violations

CAMPAIGN = "results/tiny"
RUNS = ("synchronous-lr0.003-beta20.99-seed42", "synchronous-lr0.003-beta20.99-seed43")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository copy holding a finished, audited and reported two-seed campaign."""
    repo = copy_repo(tmp_path_factory.mktemp("audit"))
    campaign = write_campaign(repo, {**TINY, "seeds": [42, 43], "epochs_per_slice": 2})
    snakemake(repo, "--cores", "2", "--configfile", campaign)
    return repo


@pytest.fixture
def campaign(audited: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the audited campaign; the working directory is its repository."""
    repo = tmp_path / "repo"
    shutil.copytree(audited, repo, symlinks=True)
    monkeypatch.chdir(repo)
    return repo / CAMPAIGN


def _failed(campaign: Path) -> list[str]:
    return violations(audit_campaign(campaign))


def _edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_audit_clean_demo_campaign_passes(campaign: Path) -> None:
    result = (json.loads((campaign / "audit.json").read_text())["passed"], _failed(campaign))
    assert result == (True, [])


def test_audit_clean_campaign_has_every_check(campaign: Path) -> None:
    result = len(audit_campaign(campaign)["checks"])
    assert result == 9


def test_audit_catches_missing_seed(campaign: Path) -> None:
    shutil.rmtree(campaign / "runs" / RUNS[1])
    assert f"every grid point has every seed: {RUNS[1]}: no finished run" in _failed(campaign)


def test_audit_catches_partial_full_validation(campaign: Path) -> None:
    _edit_json(campaign / "runs" / RUNS[0] / "results.json", status="partial")
    assert any("full validation incomplete" in v for v in _failed(campaign))


def test_audit_catches_wrong_target_count(campaign: Path) -> None:
    path = campaign / "runs" / RUNS[0] / "results.json"
    _edit_json(path, targets=json.loads(path.read_text())["targets"] - 1)
    assert any("validation targets, the cache has" in v for v in _failed(campaign))


def test_audit_catches_second_checkpoint_file(campaign: Path) -> None:
    run = campaign / "runs" / RUNS[0]
    (run / "checkpoints").mkdir(exist_ok=True)
    shutil.copy(run / "final.pt", run / "checkpoints" / "epoch-1.pt")
    assert any("expected exactly ['final.pt']" in v for v in _failed(campaign))


def test_audit_catches_best_json_with_weights(campaign: Path) -> None:
    _edit_json(campaign / "runs" / RUNS[0] / "best.json", weights="final.pt")
    assert any("best.json holds weights" in v for v in _failed(campaign))


def test_audit_catches_recipe_differing_from_frozen_base(campaign: Path) -> None:
    path = campaign / "runs" / RUNS[0] / "recipe.yaml"
    recipe = yaml.safe_load(path.read_text())
    recipe["optimizer"]["weight_decay"] = 0.2
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    assert any("outside the grid axes: optimizer.weight_decay" in v for v in _failed(campaign))


def test_audit_catches_different_source_hash(campaign: Path) -> None:
    _edit_json(campaign / "runs" / RUNS[0] / "results.json", source_hash="0" * 64)
    assert any("not the frozen trainer" in v for v in _failed(campaign))


def test_audit_catches_tampered_final_checkpoint(campaign: Path) -> None:
    path = campaign / "runs" / RUNS[0] / "final.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert any("final.pt does not match its recorded SHA-256" in v for v in _failed(campaign))


def test_audit_catches_stored_group_mean_mismatch(campaign: Path) -> None:
    path = campaign / "report" / "groups.csv"
    groups = pl.read_csv(path)
    groups.with_columns(pl.col("mean_loss") + 1e-6).write_csv(path)
    assert any("stored mean_loss" in v for v in _failed(campaign))


def test_audit_catches_old_artifact_changed_after_extension(campaign: Path) -> None:
    path = campaign / "runs" / RUNS[0] / "best.json"
    path.write_text(path.read_text() + "\n")
    result = [v for v in _failed(campaign) if "since the last audit" in v]
    assert result == [f"previously audited artifacts unchanged: {RUNS[0]}/best.json: changed since the last audit"]


def test_audit_cli_exits_1_with_violations(campaign: Path) -> None:
    from ebd2n.cli import main

    shutil.rmtree(campaign / "runs" / RUNS[1])
    result = main(["audit", str(campaign)])
    assert result == 1
