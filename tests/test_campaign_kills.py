"""Every campaign kind survives a kill: packed trials, a grid with a diverging learning rate and
horizon branches, each a real Snakemake campaign killed at a named write (ebd2n.faults) or with a
run directory deleted, then the same command once: exit 0, audit passed, the report written, final
weights bitwise those of the uninterrupted campaign of that kind, and no temporary, lease or empty
checkpoints/ folder left. tests/test_faults.py holds the plain campaign to every window; these are
the windows each newer kind adds (docs/guarantees.md, "What a kill costs").
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from workflow_support import TIMEOUT, TINY, assert_states_equal, copy_repo, environment, snakemake, write_campaign

from ebd2n.layout import CHECKPOINT_DIR, LEASE, named_campaign
from ebd2n.train.checkpoint import save_checkpoint

pytestmark = pytest.mark.slow

DIVERGING = 100.0


def _kind(name: str, **changes) -> dict:
    raw = json.loads(json.dumps(TINY)) | {"campaign": name, "seeds": [42]}
    raw["overrides"] = raw["overrides"] | {"training.max_tokens": 16384, "training.epoch_tokens": 8192}  # 2 x 8 steps
    raw["grid"] = raw["grid"] | {"learning_rates": {"synchronous": [0.003, DIVERGING]}}
    return raw | changes


HORIZONS = json.loads(json.dumps(TINY)) | {"campaign": "horizons", "seeds": [42], "epochs_per_slice": 2}
HORIZONS["overrides"] = {
    "training.epoch_tokens": 16384,
    "evaluation.subset_blocks": 16,
    "optimizer.schedule": "wsd",
    "optimizer.decay_fraction": 0.25,
    "optimizer.warmup_tokens": 2048,
}
HORIZONS["grid"] = HORIZONS["grid"] | {"horizons": [0.5, 1.0]}  # 5 and 9 epochs; the long run branches at 3
KINDS = {"packed": _kind("packed", execution={"pack": 2}), "diverging": _kind("diverging"), "horizons": HORIZONS}
TRUNK, BRANCH = "synchronous-lr0.003-beta20.99-tpp0.5-seed42", "synchronous-lr0.003-beta20.99-tpp1.0-seed42"


def command(kind: str) -> list[str]:
    return ["--configfile", f"config/campaigns/{kind}.yaml"]


def fresh(root: Path, kind: str) -> Path:
    repo = copy_repo(root)
    write_campaign(repo, KINDS[kind], f"{kind}.yaml")
    return repo


def finals(repo: Path, kind: str) -> dict[str, dict]:
    runs = repo / named_campaign(kind).runs
    return {d.name: torch.load(d / "final.pt", weights_only=True)["engine"] for d in sorted(runs.iterdir())}


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict]]:
    """Each kind's uninterrupted campaign: its runs' final engine states (and, under REPOS, its repository)."""
    result: dict = {REPOS: {}}
    for kind in KINDS:
        repo = fresh(tmp_path_factory.mktemp(kind), kind)
        snakemake(repo, *command(kind))
        result[kind] = finals(repo, kind)
        result[REPOS][kind] = repo
    return result


REPOS = "repositories"


def finished_copy(references: dict, kind: str, tmp_path: Path) -> Path:
    """A copy of the kind's finished campaign, Snakemake's records and times kept."""
    return Path(shutil.copytree(references[REPOS][kind], tmp_path / "repo", symlinks=True))


def interrupted(repo: Path, kind: str, kill: str, target: str) -> subprocess.CompletedProcess:
    """The command, stopped at `kill`: `group` SIGKILLs the controller's process group, `int` sends
    it SIGINT (Ctrl-C), "" kills the writing process alone."""
    shell_target = {"group": "$$", "int": "int:$$", "": ""}[target]
    result = subprocess.run(
        ["sh", "-c", f'export EBD2N_KILL_TARGET={shell_target}; exec "$0" -m snakemake "$@"', sys.executable]
        + command(kind),
        cwd=repo,
        env=environment() | {"EBD2N_KILL_AT": kill},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        start_new_session=True,
    )
    assert result.returncode != 0, f"{kill} never happened:\n{result.stderr[-3000:]}"
    return result


def assert_completed(repo: Path, kind: str, reference: dict[str, dict], result: subprocess.CompletedProcess) -> None:
    """Exit 0, audited, the report written, bitwise the uninterrupted campaign, nothing stale."""
    paths = named_campaign(kind)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert (repo / paths.audit_passed).is_file() and (repo / paths.report_index).is_file(), output[-4000:]
    assert json.loads((repo / paths.audit).read_text())["passed"] is True
    stale = [
        *(p for p in (repo / paths.directory).rglob(".*.tmp")),
        *(p for p in (repo / paths.runs).glob(f"*/{LEASE}")),
        *(p for p in (repo / paths.runs).glob(f"*/{CHECKPOINT_DIR}") if not any(p.iterdir())),
    ]
    assert stale == []
    ours = finals(repo, kind)
    assert ours.keys() == reference.keys()
    for run, state in ours.items():
        assert_states_equal(state, reference[run])


SCENARIOS = [
    # a pack job's own record, which only the audit reads: before it, after it (the job incomplete)
    ("packed", "before:*/packs/base/slice-1-*.json", "group"),
    ("packed", "after:*/packs/base/slice-2-*.json", "group"),
    # the diverging member's final records
    ("packed", f"before:*/runs/*lr{DIVERGING}*/run.json", "group"),
    # a diverged run between its final.pt and run.json; between run.json and its page (then the
    # rerun of its slice job beside its validation); Ctrl-C after its slice record
    ("diverging", f"after:*/runs/*lr{DIVERGING}*/checkpoints.json", "group"),
    ("diverging", f"before:*/runs/*lr{DIVERGING}*/report.html", ""),
    ("diverging", f"after:*/runs/*lr{DIVERGING}*/slices/epoch-1.json", "int"),
    # a consumed checkpoint deleted, its folder not yet
    ("diverging", "removed:*/runs/*lr0.003*/checkpoints/epoch-1.pt", "group"),
    # a branch being made
    ("horizons", f"after:*/runs/{BRANCH}/lineage.json", "group"),
]


@pytest.mark.parametrize(("kind", "kill", "target"), SCENARIOS, ids=[f"{k}-{w}-{t or 'job'}" for k, w, t in SCENARIOS])
def test_a_kill_then_the_same_command_completes_bitwise(
    references: dict, tmp_path: Path, kind: str, kill: str, target: str
) -> None:
    repo = fresh(tmp_path, kind)
    interrupted(repo, kind, kill, target)
    assert_completed(repo, kind, references[kind], snakemake(repo, *command(kind), check=False))


@pytest.mark.parametrize("deleted", [TRUNK, BRANCH])
def test_deleting_a_trunk_or_a_branch_and_the_same_command_completes_audited(
    references: dict, tmp_path: Path, deleted: str
) -> None:
    """The trunk comes back bitwise (its branch is kept: the audit holds the lineage by content); a
    branch is trained again, from the same trunk, and the ledger knows it as trained again."""
    repo = finished_copy(references, "horizons", tmp_path)
    shutil.rmtree(repo / named_campaign("horizons").run(deleted).directory)
    dry = snakemake(repo, "-n", *command("horizons"))
    assert deleted in next(line for line in dry.stderr.splitlines() if line.startswith("would train:"))
    again = snakemake(repo, *command("horizons"), check=False)
    assert_completed(repo, "horizons", references["horizons"], again)
    audit = (repo / named_campaign("horizons").audit).read_text()
    assert f"{deleted}: trained again since the last audit" in audit


def test_a_trunk_checkpoint_replaced_by_other_tensors_is_named_by_the_audit(references: dict, tmp_path: Path) -> None:
    """The trunk's pre-decay checkpoint rewritten with other weights and recorded in its ledger (as a
    trainer would), the audit re-baselined: the branch's lineage still names the replacement."""
    repo = finished_copy(references, "horizons", tmp_path)
    trunk = repo / named_campaign("horizons").run(TRUNK).directory
    state = torch.load(trunk / CHECKPOINT_DIR / "epoch-3.pt", weights_only=True)
    first = next(iter(state["engine"]["model"]))
    state["engine"]["model"][first] = state["engine"]["model"][first] + 1
    save_checkpoint(trunk, f"{CHECKPOINT_DIR}/epoch-3.pt", {k: v for k, v in state.items() if k != "format"})
    audit = [sys.executable, "-m", "ebd2n", "audit", str(named_campaign("horizons").directory), "--accept"]
    result = subprocess.run(audit, cwd=repo, env=environment(), capture_output=True, text=True, timeout=TIMEOUT)
    named = [line for line in result.stderr.splitlines() if "the parent checkpoint was replaced" in line]
    assert result.returncode != 0 and len(named) == 1 and BRANCH in named[0] and TRUNK in named[0]
