"""The run record (issue #53): `ebd2n status`, collection (the runs table) and the audit classify
every run through one outcome model, so no run is `done` on one page and `incomplete` on another,
and no job that is merely starting reads as failed.

One fabricated campaign holds a run of every outcome and live state (the report tests' campaign
writer, then each run edited into its role, the workflow's job logs with their start records, a
successive-halving decision made by the real decide step); a real campaign run by Snakemake with
slow-starting jobs is polled by status while it runs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import workflow_support as workflow
from campaign_tree import RunSpec, synthetic_loss, write_campaign

from ebd2n.audit import audit_campaign
from ebd2n.campaign.check import campaign_from_dict
from ebd2n.campaign.collect import collect_campaign
from ebd2n.campaign.history import record_grid
from ebd2n.campaign.plans import campaign_plans, campaign_search
from ebd2n.campaign.results import read_results
from ebd2n.campaign.status import campaign_status
from ebd2n.campaign.status_plan import write_plan
from ebd2n.errors import UserError
from ebd2n.layout import LEASE, CampaignPaths
from ebd2n.outcomes import LiveState, Outcome, status_word
from ebd2n.provenance import timestamp
from ebd2n.train.lease import Holder
from ebd2n.train.pack_record import pack_digest, pack_log_header
from ebd2n.train.plan import plan_slices, write_slice_plan
from ebd2n.train.records import JOB_START

NAME = "outcomes"
BETA2 = 0.95
SEED = 42
SYNC, PACKED = "synchronous", "packed-4"
ROLES = {
    0.001: "complete",
    0.002: "diverged-validated",  # metrics.jsonl ends with the decision; final.pt, best.json, results.json diverged
    0.003: "diverged-unvalidated",  # the same before validation: no results.json yet
    0.004: "failed-job-gone",  # its job's log holds only a start record naming a dead pid, and no output beside it
    0.005: "failed-older-log",  # an older workflow's log (no start record) holding the job's error
    0.006: "failed-validation",  # results.json: validation measured a non-finite loss
    0.007: "torn",  # slice 1 done; metrics.jsonl's last line cut by a kill (no newline)
    0.008: "leased",  # a trainer (this process) holds the run's lease
    0.009: "starting-training",  # its final slice's log holds only a start record naming this live process
    0.01: "starting-validation",  # trained; its validation log holds only a start record naming this process
    0.011: "resolved",  # its recipe only, no job log
    0.012: "nothing",  # no run directory at all
    0.013: "packed-diverged",  # packed with 0.014 for its last slice: it diverged, then the pack's job died
    0.014: "packed-failed",  # the pack's other member: the pack job's log names it, a dead pid and no output
    0.015: "resolve-failed",  # no run directory; its resolve job's log names a dead pid
    0.016: "resolve-starting",  # no run directory; its resolve job's log names this live process
}
"""The synchronous bracket: one run (seed 42, beta2 0.95) per learning rate, each in one role."""
STATES = {
    "complete": "done",
    "diverged-validated": "diverged",
    "diverged-unvalidated": "diverged",
    "failed-job-gone": "failed",
    "failed-older-log": "failed",
    "failed-validation": "failed",
    "torn": "pending",
    "leased": "training",
    "starting-training": "training",
    "starting-validation": "validating",
    "resolved": "pending",
    "nothing": "pending",
    "packed-diverged": "diverged",
    "packed-failed": "failed",
    "resolve-failed": "failed",
    "resolve-starting": "training",
}
"""What `ebd2n status` says of each role: a starting job is training or validating, never failed."""
RETIRED_LR = 0.0001
"""A complete synchronous run of a point an earlier grid declared and the campaign file no longer does."""
HALVING_LRS = (0.001, 0.003, 0.006)
"""The packed-4 bracket (successive halving, keep 0.3), decided at its rung (epoch 1) by the real
decide step from the runs' subset losses: one point trains on (complete), two stop there, one of
them with an earlier job's dead log (a rung's decision outranks it).

No branched horizon run (grid.horizons) is in the tree: a campaign with horizons cannot also halve
(a bracket's runs carry no horizon, ebd2n.campaign.search.Bracket.runs), and every run id of it
would carry its horizon; classify_run reads nothing of a run's lineage, so a branched run is
classified as any other run with the same records."""
CAMPAIGN = {
    "campaign": NAME,
    "recipe": "demo",
    "data": {"source": "synthetic", "cache_dir": "results/caches/synthetic"},
    "grid": {
        "modes": [SYNC, PACKED],
        "learning_rates": {SYNC: sorted(ROLES), PACKED: list(HALVING_LRS)},
        "beta2": [BETA2],
    },
    "seeds": [SEED],
    "epochs_per_slice": 1,
    "search": {"method": "successive-halving", "keep": 0.3},
    "resources": {"default": {"gpus": 0, "cpus": 1, "minutes": 5}},
}
"""The active grid: the demo recipe's 2 epochs in one-epoch slices (the synchronous bracket's rung
waits: its pending runs have no loss there)."""
STATUS_OUTCOME = {
    status_word(Outcome.COMPLETE): Outcome.COMPLETE,
    LiveState.PENDING.value: Outcome.INCOMPLETE,
    LiveState.TRAINING.value: Outcome.INCOMPLETE,
    LiveState.VALIDATING.value: Outcome.INCOMPLETE,
}
"""Status's words that are not an outcome's own: done, and each live state (an unfinished run)."""


def _run_id(mode: str, lr: float) -> str:
    return f"{mode}-lr{lr!r}-beta2{BETA2!r}-seed{SEED}"


def _start_record(pid: int, since: float) -> str:
    """The first line of a job's log as the workflow's shell writes it (JOB_START_SHELL): `pid` on this
    host and boot, started at `since`."""
    holder = {
        "host": socket.gethostname(),
        "boot": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        "pid": pid,
        "job": "",
        "restarts": 0,
        "since": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(since)),
    }
    return f"{JOB_START} {json.dumps(holder)}\n"


def _dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def _log(campaign: Path, relative: str, text: str) -> None:
    """A job's log under the campaign's logs/ (named after the job's output)."""
    log = campaign / "logs" / relative
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(text)


def _trained(directory: Path) -> None:
    """The final records a finished trainer leaves beside metrics.jsonl: final.pt and best.json."""
    (directory / "final.pt").write_bytes(b"weights")
    if not (directory / "best.json").is_file():
        (directory / "best.json").write_text(json.dumps({"epoch": 1, "step": 24, "val_loss": 7.0, "weights": None}))


def _first_slice_only(directory: Path) -> None:
    """A run that finished slice 1 of 2: its recipe and its step and epoch-1 records only."""
    metrics = directory / "metrics.jsonl"
    metrics.write_text("".join(line + "\n" for line in metrics.read_text().splitlines()[:2]))
    for name in ("results.json", "best.json", "train.log", "final.pt"):
        (directory / name).unlink(missing_ok=True)


def _spec(mode: str, lr: float, role: str = "complete") -> RunSpec:
    return RunSpec(
        mode,
        lr,
        BETA2,
        SEED,
        synthetic_loss(mode, lr, BETA2, SEED),
        diverged_at=30 if "diverged" in role else None,
        failed=role == "failed-older-log",
    )


def _edit(paths: CampaignPaths, run: str, role: str, now: float, dead: int) -> None:
    """Turn one run the writer left (complete, diverged, or failed with an older workflow's log) into its role."""
    directory = paths.run(run).directory
    if role in ("complete", "diverged-validated", "diverged-unvalidated", "packed-diverged"):
        _trained(directory)  # a diverged run: the trainer's decision, then its final records
        if role in ("diverged-unvalidated", "packed-diverged"):
            (directory / "results.json").unlink()
    elif role == "failed-job-gone":
        _first_slice_only(directory)
        _log(paths.directory, f"runs/{run}/final.log", _start_record(dead, now - 3600))
    elif role == "failed-validation":
        _trained(directory)
        results = json.loads((directory / "results.json").read_text())
        failed = {"status": "failed", "reason": "non-finite full-validation loss (nan)"}
        (directory / "results.json").write_text(
            json.dumps(results | failed | dict.fromkeys(("loss", "perplexity", "accuracy")))
        )
    elif role == "torn":
        _first_slice_only(directory)
        with open(directory / "metrics.jsonl", "a") as metrics:
            metrics.write('{"type": "diverged", "step": 30, "tokens": 307')  # killed while writing its decision
    elif role == "leased":
        _first_slice_only(directory)
        holder = {**Holder.this_process().__dict__, "since": timestamp(now)}
        (directory / LEASE).write_text(json.dumps(holder))
    elif role == "starting-training":
        _first_slice_only(directory)
        _log(paths.directory, f"runs/{run}/final.log", _start_record(os.getpid(), now))
    elif role == "starting-validation":
        _trained(directory)
        (directory / "results.json").unlink()
        _log(paths.directory, f"runs/{run}/results.log", _start_record(os.getpid(), now))
    elif role == "resolved":
        for path in directory.iterdir():
            if path.name != "recipe.yaml":
                path.unlink()
    elif role == "nothing":
        shutil.rmtree(directory)
    elif role in ("resolve-failed", "resolve-starting"):
        shutil.rmtree(directory)
        pid, since = (dead, now - 3600) if role == "resolve-failed" else (os.getpid(), now)
        _log(paths.directory, f"runs/{run}/recipe.log", _start_record(pid, since))
    elif role == "packed-failed":
        _first_slice_only(directory)


def fabricate(root: Path) -> Path:
    """The campaign tree of ROLES, RETIRED_LR and HALVING_LRS under `root` (the working directory):
    written by the report tests' writer, each run edited into its role, its grid recorded twice
    (with the retired point, then without, as collect records an edited campaign file), the packed-4
    rung decided by the real decide step, collected (campaign.json) and started (status/plan.json) as
    the workflow does."""
    earlier = json.loads(json.dumps(CAMPAIGN))
    earlier["grid"]["learning_rates"][SYNC] = sorted([RETIRED_LR, *ROLES])
    specs = [
        *(_spec(SYNC, lr, role) for lr, role in ROLES.items()),
        _spec(SYNC, RETIRED_LR),
        *(_spec(PACKED, lr) for lr in HALVING_LRS),
    ]
    campaign_dir = write_campaign(root, NAME, specs, epochs=2, campaign_json=False, audit=None)
    campaign = campaign_from_dict(CAMPAIGN)
    paths = campaign.paths
    write_slice_plan(plan_slices(2, 1), paths.slice_plan("base"))
    record_grid(paths, NAME, "", campaign_from_dict(earlier).grid)
    now, dead = time.time(), _dead_pid()
    for lr, role in ROLES.items():
        _edit(paths, _run_id(SYNC, lr), role, now, dead)
    members = sorted(_run_id(SYNC, lr) for lr, role in ROLES.items() if role.startswith("packed"))
    for member in members:
        (paths.run(member).directory / "packs.json").write_text(json.dumps({"2": members}))
    pack_log = paths.pack_record("base", 2, pack_digest(members)).relative_to(paths.directory).with_suffix(".log")
    _log(paths.directory, pack_log.as_posix(), _start_record(dead, now - 3600) + pack_log_header(members) + "\n")
    halving = campaign_search(campaign)
    (bracket,) = [bracket for bracket in halving.groups if bracket.mode == PACKED]
    halving.decide(bracket, 1)
    stopped = sorted(run for run, rung in halving.fates(bracket).items() if rung is not None)
    for run in stopped:
        _first_slice_only(paths.run(run).directory)
    _log(paths.directory, f"runs/{stopped[0]}/final.log", _start_record(dead, now - 3600))
    collect_campaign(campaign)  # records the active grid: the retired point is retired
    write_plan(campaign, campaign_plans(campaign))
    return campaign_dir


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return fabricate(tmp_path)


def _expected() -> dict[str, Outcome]:
    """Every run's outcome: its role's status word mapped to an outcome; the retired run retired;
    the packed-4 runs as the bracket's decision on disk has them (stopped at the rung, or complete)."""
    halving = campaign_search(campaign_from_dict(CAMPAIGN))
    (bracket,) = [bracket for bracket in halving.groups if bracket.mode == PACKED]
    fates = halving.fates(bracket)
    expected = {_run_id(SYNC, lr): STATUS_OUTCOME.get(STATES[role], STATES[role]) for lr, role in ROLES.items()}
    expected[_run_id(SYNC, RETIRED_LR)] = Outcome.RETIRED
    for lr in HALVING_LRS:
        run = _run_id(PACKED, lr)
        expected[run] = Outcome.COMPLETE if fates[run] is None else Outcome.STOPPED
    return expected


def test_status_collect_and_audit_classify_every_run_alike(tree: Path) -> None:
    """Status, the runs table and the audit give each run the same outcome (status's words mapped:
    done is complete, a live state incomplete). A run a reader does not list is compared where it
    lists it: status lists the retired run directory apart (`retired`), not as a row; the runs table
    lists the grid runs without a resolved recipe apart (`unresolved`: missing, or as their job
    stands); the audit classifies run directories only, so those runs are in no outcome of its
    record. Status's states are compared
    too: a starting job is training or validating, never failed."""
    status = campaign_status(tree)
    results = read_results(tree)
    audit = audit_campaign(tree, stage="runs")
    result = (
        {
            "status": {
                **{row.run: STATUS_OUTCOME.get(row.state, row.state) for row in status.runs},
                **dict.fromkeys(status.retired, Outcome.RETIRED),
            },
            "runs table": {**dict(zip(results.runs["run"], results.runs["status"], strict=True)), **results.unresolved},
            "audit": {run: outcome for outcome, runs in audit["outcomes"].items() for run in runs},
        },
        {row.run: row.state for row in status.runs if row.run.startswith(SYNC)},
    )
    expected = _expected()
    nothing = _run_id(SYNC, next(lr for lr, role in ROLES.items() if role == "nothing"))
    undirected = {
        _run_id(SYNC, lr) for lr, role in ROLES.items() if role in ("nothing", "resolve-failed", "resolve-starting")
    }
    assert result == (
        {
            "status": expected,
            "runs table": expected | {nothing: Outcome.MISSING},
            "audit": {run: outcome for run, outcome in expected.items() if run not in undirected},
        },
        {_run_id(SYNC, lr): STATES[role] for lr, role in ROLES.items()},
    )


# --- a real campaign whose jobs start slowly, polled while it runs ---

SLOW = {**workflow.TINY, "seeds": [42, 43]}
"""The workflow tests' tiny campaign with two seeds: two runs of two one-epoch slices."""
SLOW_START_S = 3
POLL_S = 0.5


@pytest.mark.slow
def test_status_polled_through_a_campaign_with_slow_starts_never_shows_a_failed_run(tmp_path: Path) -> None:
    """Every `ebd2n` command line (each training and validation job among them) waits 3 s before it
    starts (EBD2N_SLOW_START), cold (EBD2N_WARM=0): a job's log holds only its start record all that
    time. Status, polled every 0.5 s until Snakemake exits, sees runs training or validating and
    never a failed one."""
    repo = workflow.copy_repo(tmp_path)
    campaign = workflow.write_campaign(repo, SLOW)
    env = {**workflow.environment(), "EBD2N_SLOW_START": str(SLOW_START_S), "EBD2N_WARM": "0"}
    campaign_dir = repo / "results" / SLOW["campaign"]
    command = [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", campaign]
    failed, live, polls = [], set(), 0
    started = time.monotonic()
    with open(tmp_path / "snakemake.out", "wb") as out:
        controller = subprocess.Popen(command, cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            while controller.poll() is None:
                try:
                    status = campaign_status(campaign_dir)
                except UserError:  # status/plan.json is not written yet
                    pass
                else:
                    polls += 1
                    moment = round(time.monotonic() - started, 1)
                    failed += [(moment, row.run, row.detail) for row in status.runs if row.state == "failed"]
                    live |= {row.state for row in status.runs if row.state in ("training", "validating")}
                if time.monotonic() - started > workflow.TIMEOUT:
                    break
                time.sleep(POLL_S)
        finally:
            if controller.poll() is None:
                controller.kill()
            controller.wait()
    output = (tmp_path / "snakemake.out").read_text(errors="replace")
    result = (controller.returncode, polls > 0, sorted(live), failed)
    assert result == (0, True, ["training", "validating"], []), output[-4000:]
