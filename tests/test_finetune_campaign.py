"""The fine-tune demo campaign end to end: `ebd2n hf-init` builds the tiny Qwen2-MoE offline, the real
Snakemake trains it on the embedded text-to-SQL set in two slices, validates, audits and reports;
the run's dashboard shows the seed's fields in headless Chromium."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from offline_browser import MARKS, launch, open_offline, toggle_states
from workflow_support import REPO, copy_repo, environment, snakemake

from ebd2n.config import load_recipe
from ebd2n.config.parallelism import UNIT_STATES
from ebd2n.model.units import model_units
from ebd2n.parallel.placement import plan_placement
from ebd2n.train.accounting import unit_table
from ebd2n.train.budget import budget_of

CAMPAIGN = "config/campaigns/finetune-sql-demo.yaml"
MODEL = "results/models/tiny-qwen2-moe"
RUN = "results/finetune-sql-demo/runs/synchronous-lr0.02-beta20.99-seed42"

REFERENCE = Path(__file__).resolve().parents[1] / "resources/models/qwen1.5-moe-a2.7b/config.json"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face cache holding Qwen1.5-MoE-A2.7B's config.json at refs/main (no weights: a dry run reads none)."""
    root = tmp_path_factory.mktemp("hub")
    repo, commit = root / "models--Qwen--Qwen1.5-MoE-A2.7B", "0" * 39 + "1"
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs/main").write_text(commit)
    (repo / "snapshots" / commit / "config.json").write_bytes(REFERENCE.read_bytes())
    return root


def test_seed_campaign_dry_run_plans_one_training_job(hub: Path, tmp_path: Path) -> None:
    repo = copy_repo(tmp_path / "repo")
    env = {**environment(), "HF_HUB_CACHE": str(hub)}
    result = snakemake(
        repo,
        "--profile",
        "slurm",
        "-n",
        "--quiet",
        "rules",
        "--configfile",
        "config/campaigns/finetune-qwen-moe.yaml",
        env=env,
    )
    planned = dict(re.findall(r"^(\w+)\s+(\d+)$", result.stdout + result.stderr, flags=re.M))
    assert (planned["train_final"], planned["validate_run"], planned.get("train_slice")) == ("1", "1", None)


def test_seed_recipe_is_the_seeds_run(hub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    recipe = load_recipe(REPO / "config/recipes/finetune-qwen-moe.yaml")
    placement = plan_placement(model_units(recipe.model), recipe.parallel.pipeline_stages, tied_head=False)
    units = unit_table(recipe, "cuda", 9625, 0)
    assert (budget_of(recipe).total_steps, budget_of(recipe).epochs) == (9625, 1)
    assert sum(unit["block"] is not None for unit in units) == 216 and len(placement.stages) == 4
    assert {unit["state"] for unit in units} == set(UNIT_STATES)
    assert sum(unit["trainable"] for unit in units if unit["state"] == "LoRA") == 7_569_408


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """A repository copy where the demo fine-tune ran, and its wall time (model building included)."""
    repo = copy_repo(tmp_path_factory.mktemp("finetune"))
    started = time.monotonic()
    env = {**environment(), "PYTHONPATH": str(repo / "src")}
    subprocess.run(
        [sys.executable, "-m", "ebd2n", "hf-init", "qwen2_moe", MODEL],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
    snakemake(repo, "--cores", "2", "--configfile", CAMPAIGN)
    return repo, time.monotonic() - started


@pytest.mark.slow
def test_demo_fine_tune_completes_audited_with_completion_token_accuracy(campaign: tuple[Path, float]) -> None:
    repo, wall = campaign
    print(f"finetune-sql-demo: {wall:.1f} s end to end (hf-init and Snakemake)")
    results = json.loads((repo / RUN / "results.json").read_text())
    record = json.loads((repo / RUN / "run.json").read_text())
    assert (repo / "results/finetune-sql-demo/audit.passed").is_file()
    assert results["status"] == "complete" and 0 < results["accuracy"] < 1
    assert len(record["job_ids"]) == 2  # two slices
    assert {unit["state"] for unit in record["units"]} == set(UNIT_STATES)
    assert record["model"]["path"] == MODEL


@pytest.fixture(scope="module")
def page(campaign: tuple[Path, float]) -> Iterator[object]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = launch(playwright)
        context, loaded = open_offline(browser, campaign[0] / RUN / "report.html")
        loaded.page.errors = loaded.errors
        yield loaded.page
        context.close()
        browser.close()


@pytest.mark.slow
@MARKS[0]
@MARKS[1]
def test_browser_fine_tune_dashboard_shows_the_seed_fields(page, campaign: tuple[Path, float]) -> None:
    record = json.loads((campaign[0] / RUN / "run.json").read_text())
    identity = dict(
        page.evaluate(
            "[...document.querySelectorAll('#identity tr')].map(r => [r.cells[0].innerText, r.cells[1].innerText])"
        )
    )
    settings = page.locator("#settings").inner_text()
    units = page.evaluate("[...document.querySelectorAll('table.units tbody tr')].map(row => row.cells[1].innerText)")
    figures = page.evaluate(
        "[...document.querySelectorAll('[data-figure]')].map(div => div.querySelector('.main-svg') !== null)"
    )
    assert identity["Hugging Face model"] == MODEL
    assert identity["Model config SHA-256"] == record["model"]["config_sha256"]
    assert {"Purpose", "Configuration file", "Host", "Devices", "PyTorch", "CUDA"} <= identity.keys()
    assert (
        "Pipeline depth" in settings
        and "block 0" in settings
        and "rank 8" in settings
        and "norms full rank" in settings
    )
    assert "qwen2_moe" in settings and "4, 2 per token" in settings  # family and experts
    assert len(units) == len(record["units"]) == 21 and set(units) == set(UNIT_STATES)
    assert page.locator("#placement").inner_text().count("block1.q") == 1
    # loss, accuracy, optimizer, validation, throughput
    assert figures == [True] * 5 and toggle_states(page) == [(True, False)] * 5
    assert page.errors == []
