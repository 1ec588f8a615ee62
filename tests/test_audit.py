"""The campaign audit on a real campaign: a clean campaign passes; each kind of tampering is caught
and named; touched or copied campaigns (content unchanged) pass with nothing retrained.

One tiny campaign (one grid point, two seeds, two slices each) is trained for real by Snakemake,
audited and reported once per module; each test works on its own copy and damages one thing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml
from workflow_support import TINY, copy_repo, environment, snakemake, write_campaign

from ebd2n.audit import audit_campaign, violations
from ebd2n.campaign.check import load_campaign
from ebd2n.campaign.collect import collect_campaign
from ebd2n.errors import UserError
from ebd2n.fileidentity import RACY_NS
from ebd2n.layout import named_campaign
from ebd2n.report import build_report

CAMPAIGN = "results/tiny"
RUNS = ("synchronous-lr0.003-beta20.99-seed42", "synchronous-lr0.003-beta20.99-seed43")
AUDITED = {**TINY, "seeds": [42, 43]}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository copy holding a finished, audited and reported two-seed campaign."""
    repo = copy_repo(tmp_path_factory.mktemp("audit"))
    campaign = write_campaign(repo, AUDITED)
    snakemake(repo, "--cores", "2", "--configfile", campaign)
    return repo


@pytest.fixture
def repo(audited: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the audited repository (times kept); the working directory is it."""
    destination = tmp_path / "repo"
    shutil.copytree(audited, destination, symlinks=True)
    monkeypatch.chdir(destination)
    return destination


@pytest.fixture
def campaign(repo: Path) -> Path:
    return repo / CAMPAIGN


def run(campaign: Path, index: int = 0) -> Path:
    return campaign / "runs" / RUNS[index]


def failed(campaign: Path, **options) -> list[str]:
    return violations(audit_campaign(campaign, **options))


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def mentions(found: list[str], *needles: str) -> bool:
    return any(all(needle in violation for needle in needles) for violation in found)


# --- a clean campaign ------------------------------------------------------------------------


def test_audit_clean_campaign_passed_in_the_workflow(campaign: Path) -> None:
    record = json.loads((campaign / "audit.json").read_text())
    result = (record["passed"], record["stage"], [c["status"] for c in record["checks"] if c["status"] != "passed"])
    assert result == (True, "full", ["not applicable"])  # the ledger: the first audit sets the baseline


def test_audit_first_audit_says_it_had_nothing_to_compare_with(campaign: Path) -> None:
    record = json.loads((campaign / "audit.json").read_text())
    result = (
        record["compared_with_earlier_audit"],
        "no earlier audit to compare with (first audit" in record["summary"],
    )
    assert result == (False, True)


def test_audit_clean_campaign_passes_again_with_every_check_applicable(campaign: Path) -> None:
    record = audit_campaign(campaign)
    result = (
        [(c["name"], c["status"]) for c in record["checks"] if c["status"] != "passed"],
        record["compared_with_earlier_audit"],
        record["summary"],
    )
    assert result == (
        [],
        True,
        f"audit passed: all {len(record['checks'])} checks that had something to examine passed",
    )


def test_audit_tile_and_sentence_of_the_report_agree(campaign: Path) -> None:
    """The page shows the runs stage of the first audit: every check passed but the ledger's, which
    had no earlier audit to compare with; the tile and the sentence say the same in plain words
    (the first audit is the baseline), neither reads as a failure nor names the check."""
    record = json.loads((campaign / "audit-runs.json").read_text())
    page = (campaign / "report/index.html").read_text()
    passed = len(record["checks"]) - 1
    tile = f"audit: {passed} checks passed</span>"
    sentence = (
        f"The audit of the runs passed: {passed} checks passed. It was the campaign's first audit (or the earlier "
        "audit's records are gone), so its files were compared with no earlier audit: this audit is the baseline"
    )
    assert (
        tile in page,
        sentence in page,
        "nothing to examine" in page or "(ledger)" in page,
        " of " + str(passed + 1) in page,
    ) == (True, True, False, False)


def test_audit_report_stage_runs_before_the_report(campaign: Path) -> None:
    record = json.loads((campaign / "audit-runs.json").read_text())
    names = [check["name"] for check in record["checks"]]
    assert (record["stage"], record["passed"], any("published report" in name for name in names)) == (
        "runs",
        True,
        False,
    )


# --- tampering: each is detected and named ---------------------------------------------------


def test_audit_catches_edited_frozen_trainer(campaign: Path) -> None:
    path = campaign / "frozen/src/ebd2n/train/schedule.py"
    path.write_text(path.read_text() + "\n# edited\n")
    assert mentions(failed(campaign), "frozen trainer source hashes to", "edited")


def test_audit_catches_metrics_with_last_line_dropped(campaign: Path) -> None:
    path = run(campaign) / "metrics.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    found = failed(campaign)
    assert mentions(found, RUNS[0], "metrics.jsonl changed after full validation")
    assert mentions(found, RUNS[0], "metrics.jsonl: epoch records")


@pytest.mark.parametrize("name", ["train.log", "run.json", "report.html", "best.json", "checkpoints.json"])
def test_audit_catches_deleted_run_file(campaign: Path, name: str) -> None:
    (run(campaign) / name).unlink()
    assert mentions(failed(campaign), RUNS[0], f"{name} missing")


def test_audit_catches_stray_file_beside_final(campaign: Path) -> None:
    shutil.copy(run(campaign) / "final.pt", run(campaign) / "final.pt.bak")
    assert mentions(failed(campaign), RUNS[0], "unexpected file(s) final.pt.bak")


def test_audit_catches_second_checkpoint_file(campaign: Path) -> None:
    (run(campaign) / "checkpoints").mkdir(exist_ok=True)
    shutil.copy(run(campaign) / "final.pt", run(campaign) / "checkpoints/epoch-1.pt")
    assert mentions(failed(campaign), RUNS[0], "unexpected file(s) checkpoints/epoch-1.pt (policy final)")


def test_audit_catches_flipped_byte_in_cache_shard(repo: Path, campaign: Path) -> None:
    shard = sorted((repo / "results/caches/tiny").glob("train-*"))[0]
    flip_byte(shard)
    assert mentions(failed(campaign), shard.name, "does not match its recorded SHA-256")


def test_audit_catches_edited_cache_manifest(repo: Path, campaign: Path) -> None:
    edit_json(repo / "results/caches/tiny/manifest.json", note="edited")
    assert mentions(failed(campaign), "manifest.json", "edited")


def test_audit_catches_deleted_ledger(campaign: Path) -> None:
    (campaign / "audit-ledger.json").unlink()
    assert mentions(failed(campaign), "audit-ledger.json: missing", "--accept")


def test_audit_catches_ledger_edited_to_match_a_tampered_file(campaign: Path) -> None:
    target = run(campaign) / "best.json"
    target.write_text(target.read_text() + "\n")
    ledger_path = campaign / "audit-ledger.json"
    ledger = json.loads(ledger_path.read_text())
    from ebd2n.atomic import sha256_file

    ledger["artifacts"][f"runs/{RUNS[0]}/best.json"] = sha256_file(target)
    ledger_path.write_text(json.dumps(ledger))
    found = failed(campaign)
    assert mentions(found, "audit-ledger.json: not the ledger the last audit wrote")
    assert mentions(found, RUNS[0], "best.json changed after full validation")


def test_audit_catches_swapped_finals_with_ledger_removed(campaign: Path) -> None:
    for name in ("final.pt", "checkpoints.json"):
        a, b = run(campaign, 0) / name, run(campaign, 1) / name
        data = a.read_bytes()
        a.write_bytes(b.read_bytes())
        b.write_bytes(data)
    (campaign / "audit-ledger.json").unlink()
    (campaign / "audit.json").unlink()
    found = failed(campaign)
    assert mentions(found, RUNS[0], f"final.pt belongs to run '{RUNS[1]}'")
    assert mentions(found, RUNS[1], "final.pt is not the checkpoint its full validation examined")


def test_audit_catches_tampered_final_checkpoint(campaign: Path) -> None:
    flip_byte(run(campaign) / "final.pt")
    assert mentions(failed(campaign), RUNS[0], "final.pt does not match its SHA-256 in checkpoints.json")


def _earlier_checkpoint(repo: Path, campaign: Path, run_dir: Path, epoch: int) -> Path:
    """The run's own checkpoint at `epoch`: its recipe trained again to there by the frozen trainer,
    in a directory of the run's name (what a kept copy of its slice checkpoint would be)."""
    again = repo / "elsewhere" / run_dir.name
    again.mkdir(parents=True)
    command = [
        sys.executable,
        "-m",
        "ebd2n",
        "train",
        "--config",
        str(run_dir / "recipe.yaml"),
        "--until-epoch",
        str(epoch),
        "--quiet",
        f"--set=runtime.output_dir={again}",
    ]
    frozen = {**environment(), "PYTHONPATH": str(campaign / "frozen/src"), "EBD2N_WARM": "0"}
    subprocess.run(command, cwd=repo, env=frozen, check=True, capture_output=True, timeout=300)
    return again / f"checkpoints/epoch-{epoch}.pt"


def _rewrite_every_hash_record(campaign: Path, run_dir: Path) -> None:
    """checkpoints.json, results.json, the audit ledger and audit.json made to agree with the files as they are."""
    from ebd2n.atomic import sha256_file

    edit_json(run_dir / "checkpoints.json", **{"final.pt": sha256_file(run_dir / "final.pt")})
    results = json.loads((run_dir / "results.json").read_text())
    results["artifacts"] |= {name: sha256_file(run_dir / name) for name in ("final.pt", "checkpoints.json")}
    (run_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    ledger = json.loads((campaign / "audit-ledger.json").read_text())
    for name in ("final.pt", "checkpoints.json", "results.json"):
        ledger["artifacts"][f"runs/{run_dir.name}/{name}"] = sha256_file(run_dir / name)
    (campaign / "audit-ledger.json").write_text(json.dumps(ledger, indent=2) + "\n")
    edit_json(campaign / "audit.json", ledger_sha256=sha256_file(campaign / "audit-ledger.json"))


def test_audit_names_final_replaced_by_an_earlier_checkpoint_of_the_run(repo: Path, campaign: Path) -> None:
    """final.pt replaced by the same run's epoch-1 checkpoint, every hash record rewritten to match:
    the audit reads what the file records, and full validation refuses to take it for the final one."""
    from ebd2n.evaluate import validate_run

    shutil.copyfile(_earlier_checkpoint(repo, campaign, run(campaign), 1), run(campaign) / "final.pt")
    _rewrite_every_hash_record(campaign, run(campaign))
    found = failed(campaign)
    assert [v for v in found if "final.pt" in v] == [
        f"every checkpoint and slice record holds the epoch its name claims in the run's budget: {RUNS[0]}: "
        "final.pt records epoch 1, step 32, tokens 32768, not the end of epoch 2 of 2 (epoch 2, step 64, "
        "65,536 tokens): another point of the run under this name"
    ]
    with pytest.raises(UserError, match=r"final\.pt: records epoch 1, .* not this run's final checkpoint"):
        validate_run(run(campaign))


def test_audit_catches_symlink_to_another_runs_file(campaign: Path) -> None:
    path = run(campaign) / "train.log"
    path.unlink()
    path.symlink_to(run(campaign, 1) / "train.log")
    assert mentions(failed(campaign), RUNS[0], "train.log is a symbolic link")


def test_audit_catches_duplicated_steps_from_two_trainers(campaign: Path) -> None:
    path = run(campaign) / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:5] + lines[2:]))
    assert mentions(failed(campaign), RUNS[0], "steps are not 1..N once each in order")


def test_audit_catches_train_log_blocks_overlapping_in_time(campaign: Path) -> None:
    """Two trainers resuming the last slice at once: the second one's block opens while the first
    still writes, and their lines alternate from there on."""
    path = run(campaign) / "train.log"
    lines = path.read_text().splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if "########## job " in line)
    first_job = lines[last].split()[-2]
    second = [line.replace(first_job, "local-20260101T000000-99999") for line in lines[last:]]
    opened = 3  # the first trainer's header and two more lines, then the second opens its block
    mixed = [line for pair in zip(second, lines[last + opened :], strict=False) for line in pair] + second[
        len(lines) - last - opened :
    ]
    path.write_text("".join(lines[: last + opened] + mixed))
    assert mentions(
        failed(campaign),
        RUNS[0],
        "train.log: the block of job local-20260101T000000-99999 overlaps another trainer's in time",
    )


def test_audit_takes_a_requeued_jobs_blocks_for_one_trainer_after_another(campaign: Path) -> None:
    """A requeued SLURM job opens a block per attempt under one id: the killed attempt's block, then
    the next attempt's, overlap nothing."""
    path = run(campaign) / "train.log"
    lines = path.read_text().splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if "########## job " in line)
    sliced = next(i for i in range(last, len(lines)) if lines[i].split(" ", 2)[-1].startswith("slice: "))
    killed = lines[last : sliced + 2]  # the attempt killed after its slice line and one more
    path.write_text("".join(lines[:last] + killed + lines[last:]))
    assert not mentions(failed(campaign), "overlaps another trainer's")


@pytest.mark.parametrize("name", ["campaign.json", "audit-ledger.json", "audit.json"])
def test_audit_reports_corrupt_campaign_file_as_violation(campaign: Path, name: str) -> None:
    (campaign / name).write_text("{not json")
    assert mentions(failed(campaign), name)


@pytest.mark.parametrize(
    ("name", "changes", "named"),
    [
        ("results.json", {"lr": "x"}, "results.json holds a value of the wrong type"),
        ("results.json", {"artifacts": []}, "results.json records no artifact hashes"),
        ("best.json", {"weights": []}, "best.json changed after full validation"),
    ],
)
def test_audit_names_wrong_typed_run_record(campaign: Path, name: str, changes: dict, named: str) -> None:
    edit_json(run(campaign) / name, **changes)
    assert mentions(failed(campaign), named)


def test_audit_names_campaign_record_of_wrong_shape(campaign: Path) -> None:
    edit_json(campaign / "campaign.json", grid=[1])
    assert mentions(failed(campaign), "campaign.json: grid [1] is not the campaign's")


def test_audit_reports_corrupt_results_json_as_violation(campaign: Path) -> None:
    (run(campaign) / "results.json").write_text("{not json")
    assert mentions(failed(campaign), RUNS[0], "results.json: not valid JSON")


def test_audit_reports_missing_source_hash_as_violation(campaign: Path) -> None:
    (campaign / "frozen/SOURCE_HASH").unlink()
    assert mentions(failed(campaign), "frozen/SOURCE_HASH: missing")


def test_audit_catches_missing_seed(campaign: Path) -> None:
    shutil.rmtree(run(campaign, 1))
    assert f"every grid point has every seed: {RUNS[1]}: no finished run" in failed(campaign)


def test_audit_catches_partial_full_validation(campaign: Path) -> None:
    edit_json(run(campaign) / "results.json", status="partial")
    assert mentions(failed(campaign), RUNS[0], "full validation partial")


def test_audit_catches_wrong_target_count(campaign: Path) -> None:
    path = run(campaign) / "results.json"
    edit_json(path, targets=json.loads(path.read_text())["targets"] - 1)
    assert mentions(failed(campaign), "validation targets, the cache has")


def test_audit_catches_best_json_with_weights(campaign: Path) -> None:
    edit_json(run(campaign) / "best.json", weights="final.pt")
    assert mentions(failed(campaign), "best.json holds weights")


def edit_optimizer(campaign: Path, key: str, value: float) -> None:
    """Change one optimizer key of the first run's resolved recipe."""
    path = run(campaign) / "recipe.yaml"
    recipe = yaml.safe_load(path.read_text())
    recipe["optimizer"][key] = value
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))


def test_audit_catches_recipe_differing_from_frozen_base(campaign: Path) -> None:
    edit_optimizer(campaign, "weight_decay", 0.2)
    assert mentions(failed(campaign), "outside the grid axes: optimizer.weight_decay")


def test_audit_names_learning_rate_mismatch_as_grid_point(campaign: Path) -> None:
    edit_optimizer(campaign, "lr", 0.005)
    found = failed(campaign)
    assert mentions(found, "optimizer.lr differ from the run id's grid point")
    assert not mentions(found, "outside the grid axes")


def test_audit_catches_different_source_hash(campaign: Path) -> None:
    edit_json(run(campaign) / "results.json", source_hash="0" * 64)
    assert mentions(failed(campaign), "not the frozen trainer")


def test_audit_catches_old_artifact_changed_since_last_audit(campaign: Path) -> None:
    path = run(campaign) / "best.json"
    path.write_text(path.read_text() + "\n")
    result = [v for v in failed(campaign) if "since the last audit" in v]
    assert result == [
        "audited artifacts unchanged since the last audit (ledger): "
        f"runs/{RUNS[0]}/best.json: changed since the last audit"
    ]


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("groups.csv", lambda p: pl.read_csv(p).with_columns(pl.col("mean_loss") + 1e-6).write_csv(p)),
        ("selection.json", lambda p: p.write_text(p.read_text().replace('"lr": 0.003', '"lr": 0.004'))),
        ("selected-synchronous.yaml", lambda p: p.write_text(p.read_text().replace("lr: 0.003", "lr: 0.004"))),
        ("runs.csv", lambda p: p.write_text(p.read_text().replace("complete", "failed", 1))),
    ],
)
@pytest.mark.parametrize("full", [False, True], ids=["audit", "full"])  # full: rebuilt while it hashes
def test_audit_catches_edited_report_file(campaign: Path, name: str, change, full: bool) -> None:
    path = campaign / "report" / name
    before = path.read_bytes()
    change(path)
    assert path.read_bytes() != before
    assert mentions(failed(campaign, full=full), f"report/{name}: differs from a recomputation")


def test_audit_accept_rebaselines_and_records_history(campaign: Path) -> None:
    path = run(campaign) / "best.json"
    (campaign / "audit-ledger.json").unlink()
    before = failed(campaign)
    record = audit_campaign(campaign, accept=True)
    history = json.loads((campaign / "audit-ledger.json").read_text())["history"]
    result = (bool(before), record["passed"], failed(campaign), len(history), path.exists())
    assert result == (True, True, [], 1, True)


def test_audit_cli_exits_1_with_one_line_per_violation(campaign: Path) -> None:
    shutil.rmtree(run(campaign, 1))
    (campaign / "runs.csv").write_text("x")
    result = subprocess.run(
        [sys.executable, "-m", "ebd2n", "audit", str(campaign)],
        capture_output=True,
        text=True,
        env={**environment(), "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )
    lines = result.stderr.splitlines()
    assert (result.returncode, all(line.startswith("ebd2n audit: ") for line in lines)) == (1, True)
    assert f"ebd2n audit: every grid point has every seed: {RUNS[1]}: no finished run" in lines
    assert (
        "ebd2n audit: campaign.json and runs.csv equal a recomputation: runs.csv: differs from the runs results"
        in lines
    )


def test_audit_cli_on_a_path_that_is_no_campaign_exits_2(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "ebd2n", "audit", str(tmp_path)], capture_output=True, text=True)
    assert (result.returncode, len(result.stderr.splitlines()), "not a campaign directory" in result.stderr) == (
        2,
        1,
        True,
    )


def test_audit_records_deleted_wholesale_is_no_plain_pass(campaign: Path) -> None:
    """An edited loss, collected and reported again, with every audit record deleted: no run record
    can prove the loss wrong, but the audit says it compared nothing with an earlier audit."""
    edit_json(run(campaign) / "results.json", loss=1.0)
    collect_campaign(load_campaign("config/campaigns/tiny.yaml"))
    build_report(campaign)
    for name in ("audit.json", "audit-ledger.json", "audit.passed"):
        (campaign / name).unlink()
    result = subprocess.run(
        [sys.executable, "-m", "ebd2n", "audit", str(campaign)],
        capture_output=True,
        text=True,
        env={**environment(), "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )
    record = json.loads((campaign / "audit.json").read_text())
    assert (result.returncode, record["compared_with_earlier_audit"]) == (0, False)
    assert (
        "no earlier audit to compare with (first audit, or its records audit.json and audit-ledger.json are missing)"
        in (result.stdout.splitlines()[-1])
    )


def test_audit_catches_campaign_json_seeds_edited_then_reported(campaign: Path) -> None:
    edit_json(campaign / "campaign.json", seeds=[42])
    build_report(campaign)
    found = failed(campaign)
    assert mentions(found, "campaign.json: seeds [42] is not the campaign's [42, 43]")
    assert mentions(found, "report/results.json: differs from a recomputation")


def test_audit_names_a_foreign_run_collected_and_reported(campaign: Path) -> None:
    """A run of another grid (another LR) under the same campaign name, copied into runs/."""
    foreign = campaign / "runs" / "synchronous-lr0.005-beta20.99-seed42"
    shutil.copytree(run(campaign), foreign)
    edit_json(foreign / "results.json", run=foreign.name, lr=0.005)
    recipe = foreign / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("lr: 0.003", "lr: 0.005").replace(RUNS[0], foreign.name))
    collect_campaign(load_campaign("config/campaigns/tiny.yaml"))
    build_report(campaign)
    found = failed(campaign)
    grid = [v for v in found if v.startswith("every run directory is a run of the campaign's grid")]
    assert grid == [
        f"every run directory is a run of the campaign's grid (frozen/spec/): runs/{foreign.name}: "
        "not a run of the campaign's grid (no such grid point and seed in frozen/spec/)"
    ]


def test_audit_names_a_run_trained_in_another_directory(campaign: Path) -> None:
    """A run of the same grid point trained under another campaign's directory, copied in."""
    path = run(campaign) / "recipe.yaml"
    path.write_text(path.read_text().replace(f"results/tiny/runs/{RUNS[0]}", f"results/other/runs/{RUNS[0]}"))
    expected = f"runtime.output_dir results/other/runs/{RUNS[0]} is not the run's directory results/tiny/runs/{RUNS[0]}"
    assert mentions(failed(campaign), RUNS[0], expected)


def test_audit_catches_an_earlier_grid_recording_removed(campaign: Path) -> None:
    """A changed campaign file adds frozen/spec/2.json (here: seed 42 alone, a new description);
    deleting 1.json, and seed 43 from the spec with it, is named."""
    raw = yaml.safe_load((Path("config/campaigns/tiny.yaml")).read_text())
    collect_campaign(load_campaign(write_campaign(Path.cwd(), {**raw, "seeds": [42], "description": "renamed"})))
    (campaign / "frozen/spec/1.json").unlink()
    found = failed(campaign)
    assert mentions(found, "frozen/spec/1.json: disappeared since the last audit")
    assert mentions(found, f"runs/{RUNS[1]}: not a run of the campaign's grid")


def test_collect_records_an_extension_once_in_a_new_spec_file(campaign: Path) -> None:
    raw = yaml.safe_load((Path("config/campaigns/tiny.yaml")).read_text())
    extended = load_campaign(write_campaign(Path.cwd(), {**raw, "seeds": [42, 43, 44]}))
    collect_campaign(extended)
    collect_campaign(extended)
    spec = json.loads((campaign / "frozen/spec/2.json").read_text())
    result = (sorted(p.name for p in (campaign / "frozen/spec").iterdir()), spec["seeds"])
    assert result == (["1.json", "2.json"], [42, 43, 44])


def test_audit_catches_a_runs_record_edited_then_reported(campaign: Path) -> None:
    """audit-runs.json is what the page shows: one claiming a check this audit does not find so is named."""
    path = campaign / "audit-runs.json"
    record = json.loads(path.read_text())
    record["checks"][1] |= {"status": "not applicable", "passed": True}
    path.write_text(json.dumps(record))
    build_report(campaign)
    assert mentions(
        failed(campaign),
        "audit-runs.json: 'every grid point has every seed' is not applicable, this audit finds it passed",
    )


def test_audit_catches_an_edited_slice_plan(campaign: Path) -> None:
    path = campaign / "frozen/plans/base.json"
    plan = json.loads(path.read_text())
    path.write_text(json.dumps({**plan, "epochs_per_slice": 2, "slice_ends": [2]}, indent=1) + "\n")
    (campaign / "audit-ledger.json").unlink()
    (campaign / "audit.json").unlink()
    assert mentions(
        failed(campaign), "frozen/plans/base.json: differs from the frozen trainer's plan of frozen/recipes/base.yaml"
    )


def test_audit_refuses_a_campaign_without_its_frozen_spec_and_writes_nothing(campaign: Path) -> None:
    shutil.rmtree(campaign / "frozen/spec")
    (campaign / "audit.json").unlink()
    with pytest.raises(UserError, match=r"frozen/spec: missing; it records the campaign's grid"):
        audit_campaign(campaign)
    assert not (campaign / "audit.json").exists()


# --- no false alarms: links, copies, file times -----------------------------------------------


@pytest.mark.parametrize("linked", ["results", CAMPAIGN])
def test_audit_campaign_moved_to_scratch_and_linked_back_passes(repo: Path, tmp_path: Path, linked: str) -> None:
    scratch = tmp_path / "scratch" / Path(linked).name
    scratch.parent.mkdir()
    (repo / linked).rename(scratch)
    (repo / linked).symlink_to(scratch, target_is_directory=True)
    found = failed(repo / CAMPAIGN)  # the report published before the move: recomputed alike
    build_report(repo / CAMPAIGN)
    directory = json.loads((repo / CAMPAIGN / "report/results.json").read_text())["directory"]
    assert (found, directory, failed(repo / CAMPAIGN)) == ([], CAMPAIGN, [])


def test_audit_from_another_working_directory_passes(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert failed(repo / CAMPAIGN) == []


def snapshot(campaign: Path) -> dict[str, bytes]:
    return {
        p.relative_to(campaign).as_posix(): p.read_bytes()
        for p in campaign.rglob("*")
        if p.is_file() and "logs" not in p.parts and "benchmarks" not in p.parts
    }


def test_audit_touch_of_every_file_retrains_nothing_and_passes(repo: Path, campaign: Path) -> None:
    before = snapshot(campaign)
    for path in [*sorted((repo / "results").rglob("*")), *sorted(campaign.glob("runs/*/final.pt"))]:
        os.utime(path)  # every file, then each final.pt again: newer than its results.json
    result = snakemake(repo, "--cores", "2", "--configfile", "config/campaigns/tiny.yaml")
    output = result.stdout + result.stderr
    after = snapshot(campaign)
    changed = sorted(name for name in before if after.get(name) != before[name])
    assert "train_" not in output  # the console names every job it ran
    assert [
        name for name in changed if not name.startswith(("audit", "report/", "status"))
    ] == []  # status: a live page
    assert failed(campaign) == []


def test_audit_copied_campaign_without_times_passes(repo: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(repo), str(copy)], check=True)  # no -a: every time is the copy's
    result = snakemake(copy, "--cores", "2", "--configfile", "config/campaigns/tiny.yaml")
    assert "train_" not in result.stdout + result.stderr
    assert violations(audit_campaign(copy / CAMPAIGN)) == []


def test_audit_by_hand_leaves_the_workflow_nothing_to_do(repo: Path, campaign: Path) -> None:
    """Nothing to do but the audit that every invocation runs (rule `all`)."""
    audit_campaign(campaign)
    result = snakemake(repo, "-n", "--configfile", "config/campaigns/tiny.yaml")
    assert re.findall(
        r"^(\w+)\s+\d+$", (result.stdout + result.stderr).split("Job stats:")[1].split("\n\n")[0], re.M
    ) == ["all", "total"]


# --- one owner of checkpoint lifetime --------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "kept"),
    [
        ({"checkpoint_policy": "epoch"}, ["epoch-1.pt"]),
        ({"checkpoint_policy": "all"}, ["epoch-0.pt", "epoch-1.pt"]),
        ({"checkpoint_policy": "explicit", "checkpoint_epochs": 1}, ["epoch-1.pt"]),
    ],
    ids=["epoch", "all", "explicit"],
)
def test_workflow_keeps_what_the_checkpoint_policy_keeps(tmp_path: Path, policy: dict, kept: list[str]) -> None:
    repo = copy_repo(tmp_path / "repo")
    snakemake(repo, "--cores", "2", "--configfile", write_campaign(repo, {**TINY, **policy}))
    directory = named_campaign("tiny").run(RUNS[0].replace("seed43", "seed42"))
    run_dir = repo / directory.directory
    best = json.loads((run_dir / "best.json").read_text())["weights"]
    result = (sorted(p.name for p in (run_dir / "checkpoints").iterdir()), (run_dir / best).is_file())
    assert result == (kept, True)
    assert violations(json.loads((repo / CAMPAIGN / "audit.json").read_text())) == []
    for path in [*sorted((repo / "results").rglob("*")), *sorted(run_dir.glob("checkpoints/*.pt"))]:
        os.utime(path)  # every file, then the kept checkpoints again: newer than what they fed
    rerun = snakemake(repo, "--cores", "2", "--configfile", "config/campaigns/tiny.yaml")
    assert "train_" not in rerun.stdout + rerun.stderr
    assert violations(json.loads((repo / CAMPAIGN / "audit.json").read_text())) == []


# --- the incremental audit: a hash is reused while its file's identity holds (ebd2n.fileidentity) ---


def incremental(campaign: Path) -> dict:
    """Audit this copy once (every file hashed: the copy's hash memory names another directory)
    and return the second audit's record, which reuses every hash. The copy settles first: a file
    changed within RACY_NS of its hashing is not remembered."""
    time.sleep(RACY_NS / 1e9 + 0.1)
    first = audit_campaign(campaign)
    assert "record written for another directory (a copy, or a restore)" in first["hashing"]
    return audit_campaign(campaign)


def test_incremental_audit_of_an_untouched_campaign_hashes_nothing_and_rebuilds_no_report(campaign: Path) -> None:
    again = incremental(campaign)
    assert again["passed"] and ", 0 hashed;" in again["hashing"] and "report: " in again["hashing"]
    assert json.loads((campaign / "audit.json").read_text())["passed"]


def test_incremental_audit_catches_a_flipped_byte_in_final_with_its_times_put_back(campaign: Path) -> None:
    incremental(campaign)
    final = run(campaign) / "final.pt"
    before = final.stat()
    flip_byte(final)
    os.utime(final, ns=(before.st_atime_ns, before.st_mtime_ns))
    record = audit_campaign(campaign)
    assert "1 status-change time changed" in record["hashing"]
    assert mentions(violations(record), RUNS[0], "final.pt does not match its SHA-256 in checkpoints.json")


def test_incremental_audit_catches_a_report_file_replaced_by_one_of_the_same_size_and_times(campaign: Path) -> None:
    incremental(campaign)
    path = campaign / "report" / "selection.json"
    before = path.stat()
    twin = path.with_name("twin")
    twin.write_text(path.read_text().replace('"lr": 0.003', '"lr": 0.004'))
    os.utime(twin, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(twin, path)
    time.sleep(RACY_NS / 1e9 + 0.1)  # settled: this audit remembers the edited file's identity
    record = audit_campaign(campaign)
    assert "1 inode and status-change time changed" in record["hashing"] and "not rebuilt" not in record["hashing"]
    assert mentions(violations(record), "report/selection.json: differs from a recomputation")
    again = audit_campaign(campaign)  # the edited file now unchanged by identity: still compared, still named
    assert ", 0 hashed" in again["hashing"] and "not rebuilt" not in again["hashing"]
    assert mentions(violations(again), "report/selection.json: differs from a recomputation")


def test_incremental_audit_catches_two_run_directories_swapped(campaign: Path) -> None:
    incremental(campaign)
    a, b, spare = run(campaign, 0), run(campaign, 1), campaign / "runs" / "spare"
    os.replace(a, spare)
    os.replace(b, a)
    os.replace(spare, b)
    record = audit_campaign(campaign)
    assert "inode and" in record["hashing"]  # every file of both runs: their inodes moved
    assert mentions(violations(record), RUNS[0], f"final.pt belongs to run '{RUNS[1]}'")


def test_incremental_audit_of_a_copy_hashes_everything_again(campaign: Path, tmp_path: Path) -> None:
    incremental(campaign)
    copy = tmp_path / "copy" / "results" / "tiny"
    shutil.copytree(campaign.parent.parent, copy.parent.parent, symlinks=True)
    record = audit_campaign(copy)
    assert record["passed"] and ", 0 reused by identity," in record["hashing"]
    assert "record written for another directory (a copy, or a restore)" in record["hashing"]


def test_incremental_audit_with_an_edited_hash_memory_hashes_everything_and_catches_the_edit(campaign: Path) -> None:
    """final.pt tampered and its entry in the hash memory rewritten to the new identity: the memory's
    HMAC no longer holds, so nothing in it is believed."""
    incremental(campaign)
    final = run(campaign) / "final.pt"
    flip_byte(final)
    header, body = (campaign / "audit-hashes.jsonl").read_text().splitlines()
    memory = json.loads(body)
    entry = memory["entries"][f"runs/{RUNS[0]}/final.pt"]
    info = final.stat()
    entry["identity"] = [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]
    (campaign / "audit-hashes.jsonl").write_text(f"{header}\n{json.dumps(memory)}\n")
    record = audit_campaign(campaign)
    assert "record not signed by this host's key (edited, or written elsewhere)" in record["hashing"]
    assert mentions(violations(record), RUNS[0], "final.pt does not match its SHA-256 in checkpoints.json")


def test_audit_cli_full_hashes_everything(campaign: Path) -> None:
    incremental(campaign)
    result = subprocess.run(
        [sys.executable, "-m", "ebd2n", "audit", str(campaign), "--full"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "0 reused by identity" in result.stdout and "hashed in full (--full)" in result.stdout
