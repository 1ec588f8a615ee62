"""Confirmation on fresh seeds (issue 58): the selection, its runs, the verdict and its audit.

A real Snakemake campaign of tiny models (synchronous and packed-2, three LRs x seeds 42 and 43,
each mode's best two points confirmed on seeds 1, 2 and 3) is trained once per module; tests that
change anything work on a copy. The verdict is planted in test_confirmation_verdict.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from test_faults import KILLED, interrupted
from workflow_support import TINY, assert_states_equal, copy_repo, environment, snakemake, write_campaign

from ebd2n.campaign.verdict import CONFIRMED, INSIDE_NOISE, NOT_CONFIRMED
from ebd2n.layout import named_campaign

LRS = [0.001, 0.003, 0.01]
GRID_SEEDS = [42, 43]
FRESH = [1, 2, 3]
RAW = json.loads(json.dumps(TINY)) | {"seeds": GRID_SEEDS, "confirm": {"top": 2, "seeds": FRESH}}
MODES = ["synchronous", "packed-2"]
RAW["grid"] = RAW["grid"] | {"modes": MODES, "learning_rates": {mode: LRS for mode in MODES}}
CAMPAIGN = "config/campaigns/tiny.yaml"
PATHS = named_campaign("tiny")


def _selection(repo: Path) -> tuple[Path, dict]:
    (path,) = sorted((repo / PATHS.directory / "confirm").glob("selection-*.json"))
    return path, json.loads(path.read_text())


def _results(repo: Path, run: str) -> dict:
    return json.loads((repo / PATHS.run(run).results).read_text())


def _weights(path: Path) -> dict:
    return torch.load(path, weights_only=True, map_location="cpu")["engine"]["model"]


def _audit(repo: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ebd2n", "audit", str(PATHS.directory)]
    return subprocess.run(command, cwd=repo, env=environment(), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = copy_repo(tmp_path_factory.mktemp("confirm"))
    snakemake(repo, "--configfile", write_campaign(repo, RAW))
    return repo


@pytest.fixture
def repo(campaign: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(campaign, tmp_path / "repo", symlinks=True))


pytestmark = pytest.mark.slow


def test_the_best_two_points_of_each_mode_are_chosen_from_the_grid_seeds_alone(campaign: Path) -> None:
    """The selection ranks each mode's points by their mean loss over seeds 42 and 43, as recomputed
    here, in the campaign's order of modes."""
    best = {}
    for mode in MODES:
        means = {}
        for lr in LRS:
            losses = [_results(campaign, f"{mode}-lr{lr!r}-beta20.99-seed{seed}")["loss"] for seed in GRID_SEEDS]
            means[f"{mode}-lr{lr!r}-beta20.99"] = sum(losses) / len(losses)
        best[mode] = sorted(means, key=means.get)[:2]
    _, selection = _selection(campaign)
    chosen = {group["mode"]: [point["point"] for point in group["points"]] for group in selection["groups"]}
    assert list(chosen) == MODES and chosen == best
    assert selection["runs"] == [f"{point}-seed{seed}" for mode in MODES for point in best[mode] for seed in FRESH]


def test_every_confirmation_run_trains_the_selected_recipe_but_for_its_seed(campaign: Path) -> None:
    _, selection = _selection(campaign)
    differences = set()
    for run in selection["runs"]:
        grid_run = f"{run.rsplit('-seed', 1)[0]}-seed{GRID_SEEDS[0]}"
        mine, theirs = (yaml.safe_load((campaign / PATHS.run(r).recipe).read_text()) for r in (run, grid_run))
        assert _results(campaign, run)["status"] == "complete"
        differences |= {key for key in mine["runtime"] if mine["runtime"][key] != theirs["runtime"][key]}
        assert {k: v for k, v in mine.items() if k != "runtime"} == {k: v for k, v in theirs.items() if k != "runtime"}
    assert differences == {"seed", "output_dir"}


def test_the_report_states_the_verdict_from_the_fresh_seeds(campaign: Path) -> None:
    """results.json's confirmed loss is the mean of the fresh seeds' results; the page shows each verdict."""
    report = campaign / PATHS.directory / "report"
    groups = json.loads((report / "results.json").read_text())["confirmation"]["groups"]
    _, selection = _selection(campaign)
    selected = json.loads((report / "selection.json").read_text())
    page = (report / "index.html").read_text()
    for group, chosen in zip(groups, selection["groups"], strict=True):
        winner = chosen["points"][0]
        fresh = [_results(campaign, run)["loss"] for run in winner["confirmation"]]
        assert group["confirmed"]["mean"] == pytest.approx(sum(fresh) / len(fresh), abs=1e-12)
        assert group["optimism"]["difference"] == pytest.approx(winner["mean_loss"] - group["confirmed"]["mean"])
        assert group["verdict"] in (CONFIRMED, NOT_CONFIRMED, INSIDE_NOISE)
        assert selected[group["mode"]]["confirmation"]["verdict"] == group["verdict"]
        assert f'<tr data-mode="{group["mode"]}">' in page
    assert 'id="confirmation"' in page and [group["mode"] for group in groups] == MODES


def test_the_audit_passes_and_a_second_command_does_nothing(campaign: Path) -> None:
    audit = json.loads((campaign / PATHS.audit).read_text())
    confirmation = next(check for check in audit["checks"] if check["name"].startswith("every confirmation"))
    assert audit["passed"] and (confirmation["status"], confirmation["examined"]) == ("passed", 1)
    again = snakemake(campaign, "-n", "--configfile", CAMPAIGN)
    said = again.stdout + again.stderr
    assert "would train: no run" in said and "would validate: no run" in said


def test_the_audit_names_a_selection_seed_and_a_changed_recipe(repo: Path) -> None:
    path, selection = _selection(repo)
    path.write_text(json.dumps(selection | {"seeds": [GRID_SEEDS[0], *FRESH[1:]]}, indent=1))
    changed = selection["runs"][0]
    recipe = repo / PATHS.run(changed).recipe
    edited = yaml.safe_load(recipe.read_text())
    edited["optimizer"]["weight_decay"] += 0.05
    recipe.write_text(yaml.safe_dump(edited, sort_keys=False))
    result = _audit(repo)
    said = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"confirmation seeds [{GRID_SEEDS[0]}] are seeds the selection ranked over" in said, said
    assert f"{changed}:" in said and "recipe" in said


def test_an_extension_selects_again_confirms_what_it_chose_and_keeps_the_old_record(repo: Path) -> None:
    old_path, old = _selection(repo)
    old_bytes = old_path.read_bytes()
    raw = json.loads(json.dumps(RAW))
    raw["grid"]["learning_rates"] = {mode: [*LRS, 0.005] for mode in MODES}
    snakemake(repo, "--configfile", write_campaign(repo, raw))
    selections = sorted((repo / PATHS.directory / "confirm").glob("selection-*.json"))
    (new_path,) = [path for path in selections if path != old_path]
    new = json.loads(new_path.read_text())
    assert old_path.read_bytes() == old_bytes and len(selections) == 2
    assert set(new["candidates"]) == {
        *old["candidates"],
        *(f"{mode}-lr0.005-beta20.99-seed{s}" for mode in MODES for s in GRID_SEEDS),
    }
    assert all((repo / PATHS.run(run).results).is_file() for run in new["runs"])
    confirmation = json.loads((repo / PATHS.directory / "report" / "results.json").read_text())["confirmation"]
    assert confirmation["selection"] == f"confirm/{new_path.name}" and confirmation["earlier"] == [
        f"confirm/{old_path.name}"
    ]
    assert _audit(repo).returncode == 0


def test_a_kill_during_confirmation_and_the_same_command_end_as_one_run(campaign: Path, tmp_path: Path) -> None:
    """SIGKILL of the controller and its jobs once a confirmation run's first slice is recorded;
    the same command again finishes: the same choice, the same weights."""
    repo = copy_repo(tmp_path)
    write_campaign(repo, RAW)
    _, whole = _selection(campaign)
    first = whole["runs"][0]
    killed = interrupted(repo, f"after:*/runs/{first}/slices/epoch-1.json")
    assert killed.returncode == KILLED, killed.stdout + killed.stderr
    snakemake(repo, "--configfile", CAMPAIGN)
    _, again = _selection(repo)
    assert (again["groups"], again["runs"]) == (whole["groups"], whole["runs"])
    for run in whole["runs"]:
        assert_states_equal(*(_weights(root / PATHS.run(run).final) for root in (repo, campaign)))
    assert _audit(repo).returncode == 0
