"""The checkpoint policy, defined once, and the checkpoint manager's ledger under a kill.

CHECKPOINT_POLICIES is the one definition of the policy: the recipe field, the campaign schema and
the docs must say the same. Letting go follows the ledger: its entry goes first, then the file, so
a trainer killed between the two leaves records the audit accepts only once they agree with the
disk, and the audit names an entry whose file is gone.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest
import yaml
from workflow_support import environment

from ebd2n.audit.run_checks import check_retention
from ebd2n.audit.runs import read_run
from ebd2n.campaign.runs import Run
from ebd2n.config import load_recipe
from ebd2n.config.checkpoint_policy import CHECKPOINT_POLICIES, DEFAULT_CHECKPOINT_POLICY, policy_label
from ebd2n.config.schema import TrainingConfig
from ebd2n.errors import UserError
from ebd2n.evaluate import validate_run
from ebd2n.faults import KILL_AT, KILL_TARGET
from ebd2n.fileidentity import load_memory
from ebd2n.layout import RunPaths
from ebd2n.train import train
from ebd2n.train.plan import plan_slices
from ebd2n.train.retention import Retention

REPO = Path(__file__).resolve().parents[1]
RUN = Run(None, "synchronous", 0.001, 0.99, 42)
"""A run id the audit's view accepts; the runs here are trained on their own, named by it."""
KILLED = -9


def _settings(cache: Path, run_dir: Path) -> list[str]:
    return [
        f"data.cache_dir={cache}",
        f"runtime.output_dir={run_dir}",
        "training.max_tokens=8192",
        "training.epoch_tokens=4096",
    ]  # 2 epochs of 4 steps


def _ledger(run_dir: Path) -> list[str]:
    return sorted(json.loads((run_dir / "checkpoints.json").read_text()))


def _checkpoint_files(run_dir: Path) -> list[str]:
    return sorted(path.relative_to(run_dir).as_posix() for path in run_dir.rglob("*.pt"))


def _retention_violations(run_dir: Path) -> list[str]:
    """What the audit's checkpoint check says of a validated run directory."""
    check = check_retention(
        [read_run(RunPaths(run_dir), RUN, load_memory(run_dir / "hashes.json", run_dir, None, full=True), "")],
        {RUN.base: plan_slices(2, 1)},
    )
    assert check.examined == 1
    return check.violations


def test_checkpoint_policy_campaign_schema_agrees_with_the_definition() -> None:
    schema = yaml.safe_load((files("ebd2n.campaign") / "campaign.schema.yaml").read_text(encoding="utf-8"))
    field = schema["properties"]["checkpoint_policy"]
    assert (field["enum"], field["default"]) == (list(CHECKPOINT_POLICIES), DEFAULT_CHECKPOINT_POLICY)


def test_checkpoint_policy_recipe_field_agrees_with_the_definition() -> None:
    field = TrainingConfig.model_json_schema()["properties"]["checkpoint_policy"]
    assert (field["enum"], field["default"]) == (list(CHECKPOINT_POLICIES), DEFAULT_CHECKPOINT_POLICY)


def test_checkpoint_policy_unknown_name_is_refused_naming_the_key() -> None:
    with pytest.raises(
        UserError,
        match=r"training\.checkpoint_policy: Input should be 'final', 'epoch', 'all', 'interval' or 'explicit'",
    ):
        load_recipe("demo", ["training.checkpoint_policy=none"])


def test_checkpoint_policy_docs_say_the_definition() -> None:
    """docs/configuration.md: the policy section's table gives each policy's meaning, and the recipe's and
    the campaign's tables its names and default."""
    text = (REPO / "docs/configuration.md").read_text(encoding="utf-8")
    section = text.split("### Checkpoint policy\n", 1)[1].split("\n### ", 1)[0]
    meanings = re.findall(r"^\| `([a-z]+)` \| (.+) \|$", section, flags=re.MULTILINE)
    rows = re.findall(r"^\| `checkpoint_policy` \| ([^|]*(?:\\\|[^|]*)*) \| `([a-z]+)` \|", text, flags=re.MULTILINE)
    fields = [(re.findall(r"`([a-z]+)`", names), default) for names, default in rows]
    definition = list(CHECKPOINT_POLICIES)
    assert (meanings, fields) == (
        [(policy.name, policy.meaning) for policy in CHECKPOINT_POLICIES.values()],
        [(definition, DEFAULT_CHECKPOINT_POLICY)] * 2,
    )


@pytest.mark.parametrize(
    ("policy", "kept", "written"),
    [
        ("final", [], [3]),
        ("epoch", ["checkpoints/epoch-1.pt", "checkpoints/epoch-2.pt"], [1, 2, 3]),
        ("all", ["checkpoints/epoch-0.pt", "checkpoints/epoch-1.pt", "checkpoints/epoch-2.pt"], [0, 1, 2, 3]),
    ],
)
def test_retention_follows_the_definition(policy: str, kept: list[str], written: list[int]) -> None:
    """Over 3 epochs in one job: what a finished run keeps and which epochs the job writes."""
    retention = Retention(policy, 3)
    assert (retention.kept(), [epoch for epoch in range(4) if retention.writes(epoch, 3)]) == (kept, written)


@pytest.mark.parametrize(
    ("policy", "chosen", "kept", "best"),
    [
        ("interval", (2,), [2, 4], [None, "checkpoints/epoch-2.pt", None, "checkpoints/epoch-4.pt", "final.pt"]),
        ("interval", (5,), [], [None, None, None, None, "final.pt"]),
        (
            "explicit",
            (3, 1, 3, 9),
            [1, 3],
            ["checkpoints/epoch-1.pt", None, "checkpoints/epoch-3.pt", None, "final.pt"],
        ),
    ],
)
def test_interval_and_explicit_keep_tiny_llms_saved_epochs(
    policy: str, chosen: tuple[int, ...], kept: list[int], best: list[str | None]
) -> None:
    """Over 5 epochs: tiny-llm's saved epochs (interval K: K, 2K, ... ; explicit: the list, sorted,
    once), final.pt's own epoch aside; a job training 0 -> 5 writes exactly those and final.pt;
    best.json names the best epoch's checkpoint where it is kept."""
    retention = Retention(policy, 5, chosen)
    written = [epoch for epoch in range(6) if retention.writes(epoch, 5)]
    result = (retention.kept(), written, [retention.best_weights(epoch) for epoch in range(1, 6)])
    assert result == ([f"checkpoints/epoch-{epoch}.pt" for epoch in kept], [*kept, 5], best)


def test_best_weights_of_a_one_epoch_budget_is_final_pt_under_every_naming_policy() -> None:
    result = {policy: Retention(policy, 1, (1,)).best_weights(1) for policy in CHECKPOINT_POLICIES}
    assert result == {
        "final": None,
        "epoch": "final.pt",
        "all": "final.pt",
        "interval": "final.pt",
        "explicit": "final.pt",
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            ["training.checkpoint_policy=interval", "training.checkpoint_epochs=[2,4]"],
            "takes one value, the interval K",
        ),
        (
            ["training.checkpoint_policy=explicit", "training.checkpoint_epochs=[0,2]"],
            r"checkpoint_epochs\.0: Input should be greater than 0",
        ),
    ],
)
def test_checkpoint_epochs_that_do_not_fit_the_policy_are_refused_naming_the_key(
    settings: list[str], message: str
) -> None:
    with pytest.raises(UserError, match=message):
        load_recipe("demo", settings)


def test_checkpoint_manager_killed_between_ledger_and_removal_leaves_records_that_agree(
    demo_cache: Path, tmp_path: Path
) -> None:
    """The last slice's trainer killed after the ledger let go of the consumed slice checkpoint, before
    its file went: the ledger lists only files that are there, and the audit names the leftover file
    (on a copy validated by hand). The same command again removes it; the run is audited clean, its
    ledger equal to its checkpoints on disk."""
    run = tmp_path / RUN.id
    settings = _settings(demo_cache, run)
    recipe = load_recipe("demo", settings)
    train(recipe, until_epoch=1, progress=False)
    command = [sys.executable, "-m", "ebd2n", "train", "--config", "demo", *(a for s in settings for a in ("--set", s))]
    env = {**environment(), KILL_AT: f"removing:{run}/checkpoints/epoch-1.pt", KILL_TARGET: ""}
    killed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    left = (killed.returncode, _ledger(run), _checkpoint_files(run))
    copy = tmp_path / "copy" / RUN.id
    shutil.copytree(run, copy)
    validate_run(copy)
    named = _retention_violations(copy)
    again = train(recipe, progress=False)
    validate_run(run)
    assert left == (KILLED, ["final.pt"], ["checkpoints/epoch-1.pt", "final.pt"]), killed.stderr
    assert named == [f"{RUN.id}: unexpected file(s) checkpoints/epoch-1.pt (policy final)"]
    result = (again, _retention_violations(run), _ledger(run), _checkpoint_files(run))
    assert result == (False, [], ["final.pt"], ["final.pt"])
    assert not (run / "checkpoints").exists()


def test_checkpoint_audit_names_a_ledger_entry_whose_file_is_gone(demo_cache: Path, tmp_path: Path) -> None:
    """What a kill between a checkpoint's removal and its ledger update left when the file went first:
    the entry of a file that is gone, validated as it stands (results.json's hashes agree). The audit
    names it; a ledger that agrees with the disk passes."""
    run = tmp_path / RUN.id
    train(load_recipe("demo", _settings(demo_cache, run)), progress=False)
    validate_run(run)
    clean = _retention_violations(run)
    ledger_path = run / "checkpoints.json"
    ledger = json.loads(ledger_path.read_text())
    ledger_path.write_text(json.dumps({**ledger, "checkpoints/epoch-1.pt": "0" * 64}, indent=2, sort_keys=True) + "\n")
    validate_run(run)
    assert (clean, _retention_violations(run)) == (
        [],
        [f"{RUN.id}: checkpoints.json records checkpoints/epoch-1.pt, which the run does not hold"],
    )


def test_checkpoint_manager_removes_a_killed_jobs_unrecorded_checkpoint(demo_cache: Path, tmp_path: Path) -> None:
    """A trainer killed after writing a checkpoint, before recording it, leaves a file no ledger entry
    vouches for: the next job removes it (saying so in train.log), resumes from the newest recorded
    one and ends with its ledger equal to its checkpoints on disk (policy epoch, 3 epochs)."""
    run = tmp_path / RUN.id
    settings = [*_settings(demo_cache, run), "training.checkpoint_policy=epoch", "training.max_tokens=12288"]
    recipe = load_recipe("demo", settings)
    train(recipe, until_epoch=1, progress=False)
    command = [
        sys.executable,
        "-m",
        "ebd2n",
        "train",
        "--config",
        "demo",
        "--until-epoch",
        "2",
        *(a for s in settings for a in ("--set", s)),
    ]
    env = {**environment(), KILL_AT: f"after:{run}/checkpoints/epoch-2.pt", KILL_TARGET: ""}
    killed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    left = (killed.returncode, _ledger(run), _checkpoint_files(run))
    train(recipe, until_epoch=2, progress=False)
    log = (run / "train.log").read_text(encoding="utf-8")
    said = [
        "removed checkpoints/epoch-2.pt, a checkpoint not recorded in checkpoints.json" in log,
        "resume from checkpoints/epoch-1.pt at epoch 1" in log,
    ]
    both = ["checkpoints/epoch-1.pt", "checkpoints/epoch-2.pt"]
    assert left == (KILLED, ["checkpoints/epoch-1.pt"], both), killed.stderr
    assert (said, _ledger(run), _checkpoint_files(run)) == ([True, True], both, both)


def test_policy_label_says_the_epochs_a_policy_takes() -> None:
    labels = [policy_label(*pair) for pair in (("final", [1]), ("interval", [2]), ("explicit", [3, 1, 3]))]
    assert labels == ["final", "interval (every 2 epochs)", "explicit (epochs 1, 3)"]
