"""Fault injection on a real Snakemake campaign: kill it anywhere, run the same command again, get the same bits.

A tiny two-run campaign is interrupted at every kill point of ebd2n.faults (SIGKILL of the
controller's process group, which holds the controller and its jobs; the trainer that reaches the
point dies too, also when it is a fork of the warm-start server), and also by SIGKILL of one trainer
fork alone, of the warm-start server, twice in a row, and by SIGTERM of the controller. Then the
same command runs once more, with no manual step between, and must leave the campaign complete,
audited (audit.passed), with final weights bitwise equal to an uninterrupted campaign's, and nothing
stale: no slice checkpoint (policy final), no trainer.lease, no Snakemake incomplete mark or lock,
no half-built cache or report.

Every scenario starts from a snapshot of the campaign at some stage (copied into one fixed
directory, so the warm-start server of one scenario serves the next) and the uninterrupted
campaign is computed once.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from workflow_support import TIMEOUT, TINY, assert_states_equal, copy_repo, environment, snakemake, write_campaign

from ebd2n.campaign.interrupted import INCOMPLETE, settle_finished_jobs
from ebd2n.errors import UserError
from ebd2n.faults import KILL_AT, KILL_TARGET, POINTS, kill_point
from ebd2n.layout import CHECKPOINT_DIR, FINAL, LEASE, named_campaign, slice_checkpoint
from ebd2n.provenance import PACKAGE_DIR
from ebd2n.train.checkpoint import forget_checkpoint, save_checkpoint
from ebd2n.train.lease import Holder
from ebd2n.train.plan import plan_slices, write_slice_plan

RAW = json.loads(json.dumps(TINY)) | {"seeds": [42, 43]}
RAW["overrides"] = RAW["overrides"] | {"training.max_tokens": 8192, "training.epoch_tokens": 4096}  # 2 epochs x 4 steps
CAMPAIGN = "config/campaigns/tiny.yaml"
COMMAND = ["--configfile", CAMPAIGN]
"""The command as a user types it, after `snakemake`: the same for the interrupted run and the rerun."""
PATHS = named_campaign("tiny")
RUNS = [f"synchronous-lr0.003-beta20.99-seed{seed}" for seed in RAW["seeds"]]
FIRST_SLICE = slice_checkpoint(1)

STAGES = {
    "bare": None,
    "resolved": ["resolve_recipe", "prepare_cache"],
    "sliced": ["train_slice"],
    "trained": ["train_final"],
    "validated": ["validate_run"],
    "collected": ["collect_runs"],
    "runs-audited": ["audit_runs"],
    "reported": ["report_campaign"],
}
"""Snapshots the scenarios start from: the rules Snakemake ran up to (`--until`); None: nothing run."""


def env_for(kill: str | None = None, target: str = "") -> dict[str, str]:
    env = environment()
    env.pop("EBD2N_WARM", None)  # warm start, as the workflow sets it locally
    env["EBD2N_WARM_IDLE"] = "60"  # one server serves the scenarios one after another
    if kill:
        env[KILL_AT] = kill
        env[KILL_TARGET] = target
    return env


def interrupted(repo: Path, kill: str, target: str = "group") -> subprocess.CompletedProcess:
    """The command, stopped at `kill`: target `group` SIGKILLs the controller's process group
    (its session: the shell execs Snakemake, so $$ is its pid), `term` sends it SIGTERM."""
    shell_target = {"group": "$$", "term": "term:$$"}.get(target, target)
    command = f'export {KILL_TARGET}={shell_target}; exec "$0" -m snakemake "$@"'
    result = subprocess.run(
        ["sh", "-c", command, sys.executable, *COMMAND], cwd=repo, env=env_for(kill, ""), capture_output=True,
        text=True, timeout=TIMEOUT, start_new_session=True,
    )
    wait_for_quiet(repo)
    return result


def wait_for_quiet(repo: Path, timeout: float = 60) -> None:
    """Until no process of the campaign is left but warm-start servers (a killed client's fork is
    killed by its server a moment later)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not campaign_processes(repo):
            return
        time.sleep(0.05)
    raise AssertionError(f"processes still running in {repo}: {campaign_processes(repo)}")


def campaign_processes(repo: Path) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cwd = os.readlink(entry / "cwd")
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except (OSError, ValueError):
            continue
        if cwd == str(repo) and "ebd2n.warm" not in argv and entry.name.isdigit() and int(entry.name) != os.getpid():
            found.append(" ".join(argv))
    return found


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The uninterrupted campaign, built stage by stage in the fixed directory: its snapshots and
    every run's final engine state."""
    root = tmp_path_factory.mktemp("faults")
    repo = copy_repo(root / "repo")
    write_campaign(repo, RAW)
    snapshots = {}
    for stage, until in STAGES.items():
        if until:
            snakemake(repo, *COMMAND, "--until", *until, env=env_for())
        snapshots[stage] = root / "snapshots" / stage
        shutil.copytree(repo, snapshots[stage], symlinks=True)
    snakemake(repo, *COMMAND, env=env_for())
    snapshots["finished"] = root / "snapshots" / "finished"
    shutil.copytree(repo, snapshots["finished"], symlinks=True)
    finals = {run: engine_state(repo / PATHS.run(run).final) for run in RUNS}
    return {"repo": repo, "snapshots": snapshots, "finals": finals}


def engine_state(path: Path) -> dict:
    return torch.load(path, weights_only=True, map_location="cpu")["engine"]


def fresh(campaign: dict, stage: str) -> Path:
    """The fixed directory, holding the snapshot of `stage` (Snakemake's records and times kept)."""
    repo = campaign["repo"]
    wait_for_quiet(repo)
    shutil.rmtree(repo)
    shutil.copytree(campaign["snapshots"][stage], repo, symlinks=True)
    return repo


def rerun(repo: Path) -> subprocess.CompletedProcess:
    return snakemake(repo, *COMMAND, env=env_for())


def assert_recovered(repo: Path, campaign: dict, result: subprocess.CompletedProcess) -> None:
    """Complete, audited, bitwise the uninterrupted campaign, and nothing stale left behind."""
    output = result.stdout + result.stderr
    stale = [
        *(p.relative_to(repo).as_posix() for p in (repo / PATHS.runs).glob(f"*/{CHECKPOINT_DIR}/*")),
        *(p.relative_to(repo).as_posix() for p in (repo / PATHS.runs).glob(f"*/{LEASE}")),
        *(p.relative_to(repo).as_posix() for p in (repo / ".snakemake/incomplete").rglob("*") if p.is_file()),
        *(p.relative_to(repo).as_posix() for p in (repo / ".snakemake/locks").glob("*")),
        *(p.relative_to(repo).as_posix() for p in (repo / PATHS.directory).glob(".*")),  # report staging
        *(p.relative_to(repo).as_posix() for p in (repo / "results/caches").iterdir() if p.name != "tiny"),
    ]
    assert (repo / PATHS.audit_passed).is_file(), output
    assert stale == []
    for run in RUNS:
        assert_states_equal(engine_state(repo / PATHS.run(run).final), campaign["finals"][run])


KILLED = -9
"""The controller's exit status when its process group was SIGKILLed."""

SCENARIOS = [
    # (id, snapshot, kill point, target)
    ("prepare.building", "bare", "prepare.building", "group"),
    ("resolve.written", "bare", "resolve.written", "group"),
    ("plan.written", "bare", "plan.written", "group"),
    ("train.checkpoint@slice", "resolved", f"train.checkpoint@{FIRST_SLICE}", "group"),
    ("train.checkpoint-written@slice", "resolved", f"train.checkpoint-written@{FIRST_SLICE}", "group"),
    ("train.checkpoint@final", "sliced", f"train.checkpoint@{FINAL}", "group"),
    ("train.checkpoint-written@final", "sliced", f"train.checkpoint-written@{FINAL}", "group"),
    ("train.consumed", "sliced", "train.consumed", "group"),
    ("train.job-end", "sliced", f"train.job-end@{RUNS[1]}", "group"),
    ("validate.results", "trained", "validate.results", "group"),
    ("validate.results-written", "trained", "validate.results-written", "group"),
    ("collect.campaign-written", "validated", "collect.campaign-written", "group"),
    ("audit.record@runs", "collected", "audit.record@runs", "group"),
    ("report.staged", "runs-audited", "report.staged", "group"),
    ("audit.record@full", "reported", "audit.record@full", "group"),
    ("audit.sealed", "reported", "audit.sealed", "group"),
    # one trainer fork alone (the other run's job goes on), the warm-start server, SIGTERM
    ("fork", "sliced", f"train.checkpoint@{FINAL}@{RUNS[0]}", ""),
    ("warm-server", "resolved", f"train.checkpoint-written@{FIRST_SLICE}@{RUNS[0]}", "parent"),
    ("sigterm", "sliced", f"train.checkpoint@{FINAL}@{RUNS[0]}", "term"),
]


def test_faults_cover_every_kill_point() -> None:
    covered = {kill.split("@")[0] for _, _, kill, _ in SCENARIOS}
    assert sorted(set(POINTS) - covered) == []


def test_every_kill_point_is_called_and_every_call_is_a_point() -> None:
    calls = {match for path in PACKAGE_DIR.rglob("*.py")
             for match in re.findall(r'kill_point\(\s*"([^"]+)"', path.read_text())}
    assert sorted(calls ^ set(POINTS)) == []


def test_unknown_kill_point_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A misspelt point would kill nothing and let a fault test pass without its fault."""
    monkeypatch.setenv(KILL_AT, "plan.writen@base")
    with pytest.raises(UserError, match="EBD2N_KILL_AT=plan.writen@base: plan.writen is not a kill point"):
        kill_point("plan.written")


@pytest.mark.slow
@pytest.mark.parametrize(("snapshot", "kill", "target"), [s[1:] for s in SCENARIOS], ids=[s[0] for s in SCENARIOS])
def test_faults_kill_then_same_command_completes_bitwise(campaign: dict, snapshot: str, kill: str, target: str) -> None:
    repo = fresh(campaign, snapshot)
    stopped = interrupted(repo, kill, target)
    expected = {"group": KILLED, "term": 1, "": 1, "parent": 1}[target]
    assert stopped.returncode == expected, stopped.stdout + stopped.stderr
    assert_recovered(repo, campaign, rerun(repo))


@pytest.mark.slow
def test_faults_double_kill_then_same_command_completes_bitwise(campaign: dict) -> None:
    repo = fresh(campaign, "resolved")
    first = interrupted(repo, f"train.checkpoint-written@{FIRST_SLICE}")
    second = interrupted(repo, "train.consumed")
    assert (first.returncode, second.returncode) == (KILLED, KILLED)
    assert_recovered(repo, campaign, rerun(repo))


@pytest.mark.slow
def test_faults_final_written_before_snakemake_recorded_is_done(campaign: dict) -> None:
    """The first window of issue 13, made deterministic with Snakemake's own incomplete marks on a
    finished campaign: train_final wrote final.pt and deleted the slice checkpoint it consumed, and
    the controller died before it recorded the job. The rerun keeps the job as done and changes
    nothing (before: every rerun failed, "the run is already complete")."""
    repo = fresh(campaign, "finished")
    before = tree_bytes(repo / PATHS.runs)
    run = PATHS.run(RUNS[0])
    for path in (run.final, run.best):
        (repo / ".snakemake/incomplete" / base64url(path.as_posix())).write_text("{}")
    result = rerun(repo)
    assert f"{run.final.as_posix()}: its job finished before the controller stopped" in result.stderr
    assert "Nothing to be done" in result.stdout + result.stderr
    assert tree_bytes(repo / PATHS.runs) == before
    assert_recovered(repo, campaign, result)


@pytest.mark.slow
def test_faults_plan_written_before_snakemake_recorded_is_done_and_dry_run_changes_nothing(campaign: dict) -> None:
    """The plan job wrote frozen/plans/base.json (its last act) and the controller died before it
    recorded the job: training jobs read the plan only through ancient(), so forced again it would
    run alone and Snakemake would end "done" with the campaign unfinished. A dry run, --summary and
    --unlock leave the mark (they change nothing); the rerun keeps the job as done and finishes the campaign."""
    repo = fresh(campaign, "sliced")
    plan = PATHS.slice_plan("base").as_posix()
    mark = repo / ".snakemake/incomplete" / base64url(plan)
    mark.write_text("{}")
    for inspecting in (["-n"], ["--summary"], ["--unlock"]):
        shown = snakemake(repo, *inspecting, *COMMAND, env=env_for())
        assert mark.is_file() and "kept as done" not in shown.stderr, (inspecting, shown.stderr)
    result = rerun(repo)
    assert f"{plan}: its job finished before the controller stopped; kept as done" in result.stderr
    assert "plan_slices" not in result.stdout + result.stderr
    assert_recovered(repo, campaign, result)


@pytest.mark.parametrize(("content", "settled"), [("plan", True), ("{}", False), ("", False)], ids=["whole", "not-a-plan", "empty"])
def test_settle_slice_plan_only_when_it_parses(tmp_path: Path, content: str, settled: bool) -> None:
    path = tmp_path / PATHS.slice_plan("base")
    path.parent.mkdir(parents=True)
    if content == "plan":
        write_slice_plan(plan_slices(2, 1), path)
    else:
        path.write_text(content)
    output = PATHS.slice_plan("base").as_posix()
    mark = tmp_path / INCOMPLETE / base64url(output)
    mark.parent.mkdir(parents=True)
    mark.write_text("{}")
    result = settle_finished_jobs(tmp_path, Path("results/caches/c"), "final")
    assert (result, mark.exists()) == ([output] if settled else [], not settled)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def base64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("policy", "resume_left", "tampered", "settled"),
    [
        ("epoch", True, False, True),  # kept checkpoints: the slice's own checkpoint proves it finished
        ("final", False, False, True),  # the checkpoint it resumed from consumed: finished
        ("final", True, False, False),  # not yet consumed: Snakemake redoes the slice from it
        ("final", False, True, False),  # not the bytes the ledger recorded
    ],
    ids=["epoch", "final-consumed", "final-not-consumed", "tampered"],
)
def test_settle_slice_checkpoint_only_when_it_proves_its_job_finished(
    tmp_path: Path, policy: str, resume_left: bool, tampered: bool, settled: bool
) -> None:
    run = tmp_path / PATHS.run("r").directory
    save_checkpoint(run, slice_checkpoint(1), {"epoch": 1})
    save_checkpoint(run, slice_checkpoint(2), {"epoch": 2})
    if not resume_left:
        forget_checkpoint(run, slice_checkpoint(1))
    if tampered:
        (run / slice_checkpoint(2)).write_bytes(b"not the checkpoint")
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = {**asdict(Holder.this_process()), "pid": int(ended.stdout)}  # a trainer of this host, gone
    (run / LEASE).write_text(json.dumps(holder))
    output = PATHS.run("r").checkpoint(2).as_posix()
    mark = tmp_path / INCOMPLETE / base64url(output)
    mark.parent.mkdir(parents=True)
    mark.write_text("{}")
    result = settle_finished_jobs(tmp_path, Path("results/caches/c"), policy)
    assert (result, mark.exists(), (run / LEASE).exists()) == ([output] if settled else [], not settled, not settled)
