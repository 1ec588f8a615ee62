"""Fault injection on a real Snakemake campaign: kill it anywhere, run the same command again, get the same bits.

A tiny two-run campaign is interrupted before or after every kind of write its jobs make (ebd2n.faults:
SIGKILL of the controller's process group, which holds the controller and its jobs; the process
that reaches the write dies too, also when it is a fork of the warm-start server), and also by
SIGKILL of one trainer fork alone, of the warm-start server, twice in a row, by SIGTERM of the
controller, by SIGKILL of the controller alone while its trainers run on, by `timeout`, and by a
controller death that left every output marked incomplete. Then the same command runs once more,
with no manual step between, and must leave the campaign complete, audited (audit.passed), with
final weights bitwise equal to an uninterrupted campaign's, and nothing stale: no slice checkpoint
(policy final), no trainer.lease, no Snakemake incomplete mark, no half-built cache or report.

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
from pathlib import Path

import pytest
import torch
from workflow_support import TIMEOUT, TINY, assert_states_equal, copy_repo, environment, snakemake, write_campaign

from ebd2n.errors import UserError
from ebd2n.faults import KILL_AT, KILL_TARGET, at
from ebd2n.layout import CHECKPOINT_DIR, LEASE, named_campaign

RAW = json.loads(json.dumps(TINY)) | {"seeds": [42, 43]}
RAW["overrides"] = RAW["overrides"] | {"training.max_tokens": 8192, "training.epoch_tokens": 4096}  # 2 epochs x 4 steps
CAMPAIGN = "config/campaigns/tiny.yaml"
COMMAND = ["--configfile", CAMPAIGN]
"""The command as a user types it, after `snakemake`: the same for the interrupted run and the rerun."""
PATHS = named_campaign("tiny")
RUNS = [f"synchronous-lr0.003-beta20.99-seed{seed}" for seed in RAW["seeds"]]

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
    (its session: the shell execs Snakemake, so $$ is its pid), `term` sends it SIGTERM, `int`
    sends the group SIGINT (Ctrl-C)."""
    shell_target = {"group": "$$", "term": "term:$$", "int": "int:$$"}.get(target, target)
    command = f'export {KILL_TARGET}={shell_target}; exec "$0" -m snakemake "$@"'
    result = subprocess.run(
        ["sh", "-c", command, sys.executable, *COMMAND],
        cwd=repo,
        env=env_for(kill, ""),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        start_new_session=True,
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


def assert_recovered(repo: Path, campaign: dict, result: subprocess.CompletedProcess, marks: bool = True) -> None:
    """Complete, audited, bitwise the uninterrupted campaign, and nothing stale left behind (`marks`:
    no Snakemake incomplete mark either)."""
    output = result.stdout + result.stderr
    assert (repo / PATHS.audit_passed).is_file(), output
    stale = [
        *(p.relative_to(repo).as_posix() for p in (repo / PATHS.runs).glob(f"*/{CHECKPOINT_DIR}/*")),
        *(p.relative_to(repo).as_posix() for p in (repo / PATHS.runs).glob(f"*/{LEASE}")),
        *(p.relative_to(repo).as_posix() for p in (repo / ".snakemake/incomplete").rglob("*") if p.is_file() and marks),
        *(p.relative_to(repo).as_posix() for p in (repo / ".snakemake/locks").glob("*")),
        *(p.relative_to(repo).as_posix() for p in (repo / PATHS.directory).glob(".*")),  # report staging
        *(p.relative_to(repo).as_posix() for p in (repo / "results/caches").iterdir() if p.name != "tiny"),
    ]
    assert stale == []
    for run in RUNS:
        assert_states_equal(engine_state(repo / PATHS.run(run).final), campaign["finals"][run])


KILLED = -9
"""The controller's exit status when its process group was SIGKILLed."""

RUN = f"*/runs/{RUNS[0]}"
SCENARIOS = [
    # (id, snapshot, kill: <moment>:<path pattern> of ebd2n.faults, target)
    ("cache-published", "bare", "before:*results/caches/tiny", "group"),
    ("recipe-written", "bare", "after:*/runs/*/recipe.yaml", "group"),
    ("plan-written", "bare", "after:*/frozen/plans/base.json", "group"),
    ("slice-checkpoint", "resolved", "before:*/checkpoints/epoch-1.pt", "group"),
    ("slice-checkpoint-recorded", "resolved", "after:*/checkpoints.json", "group"),
    ("slice-record-written", "resolved", "after:*/slices/epoch-1.json", "group"),
    ("final", "sliced", "before:*/final.pt", "group"),
    ("final-recorded", "sliced", "before:*/best.json", "group"),
    ("slice-checkpoint-let-go-from-ledger", "sliced", "removing:*/checkpoints/epoch-1.pt", "group"),
    ("slice-checkpoint-let-go", "sliced", "removed:*/checkpoints/epoch-1.pt", "group"),
    ("job-end", "sliced", f"after:*/runs/{RUNS[1]}/report.html", "group"),
    ("results", "trained", "before:*/runs/*/results.json", "group"),
    ("results-written", "trained", "after:*/runs/*/results.json", "group"),
    ("campaign-collected", "validated", "after:*/tiny/campaign.json", "group"),
    ("runs-audit-record", "collected", "before:*/audit-runs.json", "group"),
    ("report-staged", "runs-audited", "after:*/.report-*/index.html", "group"),
    ("full-audit-record", "reported", "before:*/tiny/audit.json", "group"),
    ("audit-sealed", "reported", "after:*/audit.passed", "group"),
    # one trainer fork alone (the other run's job goes on), the warm-start server, SIGTERM
    ("fork", "sliced", f"before:{RUN}/final.pt", ""),
    ("warm-server", "resolved", f"after:{RUN}/checkpoints.json", "parent"),
    ("sigterm", "sliced", f"before:{RUN}/final.pt", "term"),
]


@pytest.mark.parametrize("spec", ["plan.written", "during:*/final.pt", "before:"])
def test_malformed_kill_spec_is_refused(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    """A misspelt spec would kill nothing and let a fault test pass without its fault."""
    monkeypatch.setenv(KILL_AT, spec)
    with pytest.raises(UserError, match=f"EBD2N_KILL_AT={re.escape(spec)}: expected before:<pattern>"):
        at("before", "results/x")


def test_kill_spec_matches_the_path_as_written_and_absolute(tmp_path: Path) -> None:
    """Each spec, in a child process: the exit status says whether it killed there."""
    code = "import sys; from ebd2n.faults import at; at(sys.argv[1], sys.argv[2])"
    cases = [
        ("after:*/runs/r/final.pt", "after", "results/t/runs/r/final.pt"),
        (f"after:{tmp_path}/*", "after", "relative/file"),
        ("before:*/final.pt", "after", "results/t/runs/r/final.pt"),
    ]
    result = [
        subprocess.run(
            [sys.executable, "-c", code, when, path], cwd=tmp_path, env={**environment(), KILL_AT: spec}, timeout=60
        ).returncode
        for spec, when, path in cases
    ]
    assert result == [KILLED, KILLED, 0]


@pytest.mark.slow
@pytest.mark.parametrize(("snapshot", "kill", "target"), [s[1:] for s in SCENARIOS], ids=[s[0] for s in SCENARIOS])
def test_faults_kill_then_same_command_completes_bitwise(campaign: dict, snapshot: str, kill: str, target: str) -> None:
    repo = fresh(campaign, snapshot)
    stopped = interrupted(repo, kill, target)
    expected = {"group": KILLED, "term": 1, "": 1, "parent": 1}[target]
    assert stopped.returncode == expected, stopped.stdout + stopped.stderr
    assert_recovered(repo, campaign, rerun(repo))


@pytest.mark.slow
def test_ctrl_c_mid_campaign_is_one_line_and_the_same_command_completes_bitwise(campaign: dict) -> None:
    """Ctrl-C while a run trains: the console says once that the campaign was interrupted and how to
    resume, with no error, traceback or job log; the job's own log says the same in one line (its
    trainer, forked from the warm-start server, may still finish the slice's last write first)."""
    repo = fresh(campaign, "resolved")
    stopped = interrupted(repo, f"after:{RUN}/checkpoints.json", "int")
    console = stopped.stderr.splitlines()
    said = [line for line in console if "interrupt" in line.lower()]
    failures = [line for line in console if re.search(r"Error|Traceback|Exception|not finished", line)]
    job_log = (repo / PATHS.logs / "runs" / RUNS[0] / "slices/epoch-1.log").read_text()
    tracebacks = [path.name for path in (repo / PATHS.logs).rglob("*.log") if "Traceback" in path.read_text()]
    assert (stopped.returncode != 0, said, failures, "ebd2n train: interrupted\n" in job_log, tracebacks) == (
        True,
        ["interrupted (Ctrl-C): run the same command to resume; every run goes on from its newest checkpoint"],
        [],
        True,
        [],
    ), stopped.stderr + job_log
    again = rerun(repo)
    assert again.stderr.splitlines()[-1].startswith(f"report: {PATHS.report_index}")
    assert_recovered(repo, campaign, again)


@pytest.mark.slow
def test_faults_double_kill_then_same_command_completes_bitwise(campaign: dict) -> None:
    repo = fresh(campaign, "resolved")
    first = interrupted(repo, "after:*/checkpoints.json")
    second = interrupted(repo, "removed:*/checkpoints/epoch-1.pt")
    assert (first.returncode, second.returncode) == (KILLED, KILLED)
    assert_recovered(repo, campaign, rerun(repo))


@pytest.mark.slow
def test_faults_every_output_marked_incomplete_then_same_command_completes(campaign: dict) -> None:
    """A controller that died after every job finished but before it recorded any (Snakemake's own
    incomplete marks on every output of a finished campaign): every job is run again, each one
    finds its work done or redoes it, and the campaign ends as it was. (Snakemake 9.27 leaves the
    marks written here on update() outputs as they are, so leftover marks are not counted.)"""
    repo = fresh(campaign, "finished")
    before = tree_bytes(repo / PATHS.runs)
    runs = [PATHS.run(run) for run in RUNS]
    outputs = [
        PATHS.source_hash,
        PATHS.freeze_record,
        PATHS.base_recipe("base"),
        PATHS.slice_plan("base"),
        PATHS.campaign_json,
        PATHS.runs_csv,
        PATHS.audit_runs,
        PATHS.report_index,
        Path("results/caches/tiny"),
        *(path for run in runs for path in (run.recipe, run.slice_record(1), run.final, run.best, run.results)),
    ]
    for path in outputs:
        mark = repo / ".snakemake/incomplete" / base64url(path.as_posix())
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.write_text("{}")
    result = rerun(repo)
    after = tree_bytes(repo / PATHS.runs)
    assert_recovered(repo, campaign, result, marks=False)
    assert {name: after[name] for name in before if name.endswith((".pt", "metrics.jsonl"))} == {
        name: data for name, data in before.items() if name.endswith((".pt", "metrics.jsonl"))
    }


@pytest.mark.slow
def test_faults_controller_killed_alone_while_its_trainers_run_on(campaign: dict) -> None:
    """SIGKILL of the controller only: its trainers go on as orphans. The same command, once,
    completes: its jobs wait for the orphans' leases, then find their work done."""
    repo = fresh(campaign, "sliced")
    env = env_for()
    env["EBD2N_WARM"] = "0"  # orphans of a cold job are plain processes
    command = [sys.executable, "-m", "snakemake", *COMMAND]
    with subprocess.Popen(
        command, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ) as controller:
        leases = [repo / PATHS.run(run).directory / LEASE for run in RUNS]
        deadline = time.monotonic() + TIMEOUT
        while not any(lease.exists() for lease in leases):
            assert controller.poll() is None and time.monotonic() < deadline, "no trainer started"
            time.sleep(0.05)
        controller.kill()
    assert_recovered(repo, campaign, snakemake(repo, *COMMAND, env=env))


@pytest.mark.slow
def test_faults_controller_under_timeout_then_same_command_completes(campaign: dict) -> None:
    """`timeout` ends the controller with SIGTERM midway; its lock would have stopped the next run
    until --unlock. The same command, once, completes."""
    repo = fresh(campaign, "resolved")
    stopped = subprocess.run(
        ["timeout", "8", sys.executable, "-m", "snakemake", *COMMAND],
        cwd=repo,
        env=env_for(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    wait_for_quiet(repo)
    assert stopped.returncode == 124, stopped.stdout + stopped.stderr
    assert_recovered(repo, campaign, rerun(repo))


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def base64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()
