"""Packed trials in a campaign (`execution.pack`): the workflow trains each slice of up to K
synchronous runs as one packed model in one job, and every run is still a run.

One real campaign of the demo model is trained twice, alone and packed (pack 3: six runs make two
packs per slice, one holding the point that diverges, in the second of three slices), and the
packed runs are held to their solo runs within the documented tolerance (docs/training.md, "Packed
trials"). The slow tests kill a pack mid-slice, and re-form packs after a successive-halving rung.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import torch
from workflow_support import (
    TINY,
    assert_states_equal,
    comparable_metrics,
    copy_repo,
    environment,
    killed_write,
    snakemake,
    write_campaign,
)

from ebd2n.campaign.check import campaign_from_dict, campaign_warnings
from ebd2n.campaign.job_logs import EMPTY_LOG, JobLogs
from ebd2n.campaign.runs import Run
from ebd2n.campaign.status import campaign_status
from ebd2n.campaign.workflow import WorkflowPlan
from ebd2n.errors import UserError
from ebd2n.layout import JOB_RECORDS, SELECTION_JSON, named_campaign, run_paths
from ebd2n.train.pack_record import pack_digest, pack_log_header, read_packs, record_pack, record_pack_job
from ebd2n.train.records import log_lines, read_metrics

LRS = [0.003, 0.006, 100.0]
DIVERGING = 100.0
SEEDS = [42, 43]
SOLO = json.loads(json.dumps(TINY)) | {"campaign": "solo", "seeds": SEEDS}
SOLO["overrides"] = SOLO["overrides"] | {"training.max_tokens": 24576, "training.epoch_tokens": 8192}  # 3 x 8 steps
SOLO["grid"] = SOLO["grid"] | {"learning_rates": {"synchronous": LRS}}
PACKED = SOLO | {"campaign": "packed", "execution": {"pack": 3}}  # 0.006 seed 43 packs with the diverging point
TOLERANCE = 1e-4
"""Relative, on every per-step and subset loss of a run that finishes, over 24 steps (docs/training.md)."""
SD_FRACTION = 1e-3
"""Of the point's seed SD, on the full-validation loss (docs/training.md)."""
RUNS = [Run(None, "synchronous", lr, 0.99, seed) for lr in LRS for seed in SEEDS]


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def campaigns(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A repository copy holding the solo and the packed campaign, and the packed one's dry run."""
    repo = copy_repo(tmp_path_factory.mktemp("packed"))
    snakemake(repo, "--configfile", write_campaign(repo, SOLO, "solo.yaml"))
    packed = write_campaign(repo, PACKED, "packed.yaml")
    dry = snakemake(repo, "-n", "--configfile", packed)
    CONSOLE.append(snakemake(repo, "--configfile", packed).stderr)
    return repo, dry.stdout + dry.stderr


CONSOLE: list[str] = []
"""What the packed campaign's console said (the `campaigns` fixture's)."""


def test_the_console_names_each_diverged_member_on_its_pack_jobs_line(campaigns: tuple[Path, str]) -> None:
    said = [line for line in CONSOLE[0].splitlines() if "diverged at step" in line]
    diverged = sorted(run.id for run in RUNS if run.lr == DIVERGING)
    assert said and all(" train_pack packed/base epoch 2 digest " in line for line in said)
    assert ["\n".join(said).count(f"{run} diverged at step") for run in diverged] == [1] * len(diverged)
    assert "were not present when the DAG was created" not in CONSOLE[0]


def run_dir(repo: Path, campaign: str, run: Run) -> Path:
    return repo / named_campaign(campaign).run(run.id).directory


def losses(directory: Path) -> list[float]:
    """Every per-step and subset loss of a run, in order."""
    records = read_metrics(directory)
    return [r[key] for r in records for key in ("loss", "val_loss") if r.get(key) is not None]


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def test_a_packed_campaign_trains_every_run_as_its_solo_run_within_the_tolerance(campaigns: tuple[Path, str]) -> None:
    """Runs that finish: every per-step and subset loss within TOLERANCE, the full-validation loss
    within SD_FRACTION of its point's seed SD. Runs that diverge: at the same step (their losses on
    the way, grown by orders of magnitude, carry the rounding further). The same winner."""
    repo, _ = campaigns
    results = {
        (c, run.id): json.loads(run_paths(run_dir(repo, c, run)).results.read_text())
        for c in ("packed", "solo")
        for run in RUNS
    }
    worst, off_by_sd, outcomes = 0.0, 0.0, {}
    for run in RUNS:
        packed, solo = results["packed", run.id], results["solo", run.id]
        outcomes[run.id] = (packed["status"], solo["status"], (packed.get("diverged") or {}).get("step"))
        outcomes[run.id] += ((solo.get("diverged") or {}).get("step"),)
        if solo["status"] != "complete":
            continue
        ours, theirs = losses(run_dir(repo, "packed", run)), losses(run_dir(repo, "solo", run))
        assert len(ours) == len(theirs) > 0
        worst = max([worst, *(relative(a, b) for a, b in zip(ours, theirs, strict=True))])
        seed_sd = statistics.stdev(results["solo", Run(None, run.mode, run.lr, run.beta2, s).id]["loss"] for s in SEEDS)
        off_by_sd = max(off_by_sd, abs(packed["loss"] - solo["loss"]) / seed_sd)
    diverged = sorted(run_id for run_id, outcome in outcomes.items() if outcome[0] == "diverged")
    selections = [
        {mode: (point["lr"], point["beta2"]) for mode, point in json.loads(path.read_text()).items()}
        for path in (repo / named_campaign(c).report / SELECTION_JSON for c in ("packed", "solo"))
    ]
    assert worst <= TOLERANCE and off_by_sd <= SD_FRACTION
    assert all(
        ours == theirs and packed_step == solo_step for ours, theirs, packed_step, solo_step in outcomes.values()
    )
    assert diverged == sorted(run.id for run in RUNS if run.lr == DIVERGING)
    assert selections[0] == selections[1]


def test_a_diverging_member_stops_while_the_others_of_its_pack_finish(campaigns: tuple[Path, str]) -> None:
    repo, _ = campaigns
    packs = {run.id: read_packs(run_dir(repo, "packed", run)) for run in RUNS}
    diverging = [run for run in RUNS if run.lr == DIVERGING]
    mates = [run for run in RUNS if run.lr != DIVERGING and run.id in packs[diverging[0].id][1]]
    steps = {
        run.id: len([r for r in read_metrics(run_dir(repo, "packed", run)) if r["type"] == "step"]) for run in RUNS
    }
    assert mates and all(steps[run.id] == 24 for run in mates)
    assert all(8 < steps[run.id] < 16 for run in diverging)  # in the second slice


def test_the_dry_run_lists_the_pack_jobs_and_their_members(campaigns: tuple[Path, str]) -> None:
    _, dry = campaigns
    line = next(line for line in dry.splitlines() if "pack job" in line)
    assert line.startswith("  in 6 pack jobs (execution.pack)")
    assert all(run.id in line for run in RUNS)


def test_each_packed_run_records_its_packs_and_the_report_shows_them(campaigns: tuple[Path, str]) -> None:
    repo, _ = campaigns
    sizes = {run.id: {len(members) for members in read_packs(run_dir(repo, "packed", run)).values()} for run in RUNS}
    table = {c: pl.read_csv(repo / named_campaign(c).runs_csv) for c in ("packed", "solo")}
    page = (repo / named_campaign("packed").report_index).read_text()
    shares = [
        json.loads(line).get("pack", 1)
        for run in RUNS
        for line in (run_dir(repo, "packed", run) / JOB_RECORDS).read_text().splitlines()
        if json.loads(line)["kind"] == "train"
    ]
    assert list(sizes.values()) == [{3}] * len(RUNS)
    assert table["packed"]["packed"].to_list() == [3] * len(RUNS)
    assert table["solo"]["packed"].null_count() == len(RUNS)
    assert page.count("in packs of 3") == len(RUNS)
    assert sorted(shares) == [1] + [3] * 15  # the diverged pair trained nothing of the last slice
    for run in RUNS:  # each run's own page names its pack mates
        mates = set(read_packs(run_dir(repo, "packed", run))[1]) - {run.id}
        dashboards = [run_paths(run_dir(repo, c, run)).dashboard.read_text() for c in ("packed", "solo")]
        assert "Trained in packs" in dashboards[0] and all(mate in dashboards[0] for mate in mates)
        assert "Trained in packs" not in dashboards[1]


def test_the_audit_passes_and_names_a_member_whose_pack_record_was_edited_or_removed(
    campaigns: tuple[Path, str], tmp_path: Path
) -> None:
    repo = Path(shutil.copytree(campaigns[0], tmp_path / "repo", symlinks=True))
    audit = json.loads((repo / named_campaign("packed").audit).read_text())
    edited, removed = RUNS[0], RUNS[-1]
    path = run_paths(run_dir(repo, "packed", edited)).packs
    packs = json.loads(path.read_text())
    packs["1"] = packs["1"][:-1] if packs["1"][-1] != edited.id else packs["1"][1:]
    path.write_text(json.dumps(packs))
    run_paths(run_dir(repo, "packed", removed)).packs.unlink()
    command = [sys.executable, "-m", "ebd2n", "audit", str(named_campaign("packed").directory)]
    result = subprocess.run(command, cwd=repo, env=environment(), capture_output=True, text=True, timeout=300)
    lines = result.stderr.splitlines()
    named = [line for line in lines if "no job of that pack is recorded" in line]
    unrecorded = [line for line in lines if "does not record that pack" in line]
    assert audit["passed"] is True
    assert result.returncode != 0 and len(named) == 1 and edited.id in named[0]
    assert len(unrecorded) == 2 and all(removed.id in line for line in unrecorded)  # each slice it trained in


def test_the_audit_names_a_deleted_or_edited_job_line_resealed(campaigns: tuple[Path, str], tmp_path: Path) -> None:
    """The cost on every page adds the runs' jobs.jsonl: a training job's line deleted, another's
    pack raised, and the ledger re-baselined (--accept): the audit names both runs' job records."""
    repo = Path(shutil.copytree(campaigns[0], tmp_path / "repo", symlinks=True))
    deleted, edited = (run_paths(run_dir(repo, "packed", run)).directory / JOB_RECORDS for run in RUNS[:2])
    lines = deleted.read_text().splitlines()
    deleted.write_text("\n".join(line for line in lines if json.loads(line).get("epoch") != 2) + "\n")
    records = [json.loads(line) for line in edited.read_text().splitlines()]
    edited.write_text("".join(json.dumps(r | ({"pack": 9} if r["kind"] == "train" else {})) + "\n" for r in records))
    command = [sys.executable, "-m", "ebd2n", "audit", str(named_campaign("packed").directory), "--accept"]
    result = subprocess.run(command, cwd=repo, env=environment(), capture_output=True, text=True, timeout=300)
    named = [line for line in result.stderr.splitlines() if f": {JOB_RECORDS}: " in line]
    assert result.returncode != 0
    assert [line for line in named if RUNS[0].id in line] == [
        next(line for line in named if "no training job's record of the slice to epoch 2" in line)
    ]
    assert len([line for line in named if RUNS[1].id in line and "in a pack of 9" in line]) == 3


def test_a_pack_job_clears_what_a_killed_write_of_its_record_left(in_tmp: Path) -> None:
    record = in_tmp / "packs" / "base" / "slice-1-0123456789abcdef.json"
    record.parent.mkdir(parents=True)
    leftover = killed_write(record, b"{")
    record_pack_job(record, [in_tmp / "runs" / "a", in_tmp / "runs" / "b"], 1)
    assert not leftover.exists() and json.loads(record.read_text()) == {"epoch": 1, "members": ["a", "b"]}


def test_status_counts_each_packed_run_its_share_of_the_packs_time(campaigns: tuple[Path, str]) -> None:
    """Each epoch's time divided by the runs that trained it in one job: three, but in the last slice
    of the pack whose other two runs had diverged; the hours sum the shares."""
    repo, _ = campaigns
    status = campaign_status(repo / named_campaign("packed").directory)
    rows = {row.run: row for row in status.runs}
    alone = next(run for run in RUNS if run.lr == LRS[1] and run.seed == SEEDS[1])
    last = [r["wall_s"] for r in read_metrics(run_dir(repo, "packed", alone)) if r["type"] == "epoch"][-1]
    expected = {run.id: rows[run.id].wall_s / 3 for run in RUNS} | {alone.id: (rows[alone.id].wall_s - last) / 3 + last}
    assert {run_id: row.charged_s for run_id, row in rows.items()} == pytest.approx(expected)
    assert status.cpu_hours * 3600 == pytest.approx(sum(expected.values()))


def test_a_failed_pack_jobs_log_is_its_runs_failure(in_tmp: Path) -> None:
    campaign = campaign_from_dict(PACKED)
    members = [campaign.paths.run(run.id).directory for run in RUNS[:3]]
    for directory in members:
        directory.mkdir(parents=True)
    record_pack(members, 1, members=members)
    record = campaign.paths.pack_record("base", 1, pack_digest([d.name for d in members]))
    log = campaign.paths.logs / record.relative_to(campaign.paths.directory).with_suffix(".log")
    log.parent.mkdir(parents=True)
    log.write_text("Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n")
    job = JobLogs(campaign.paths).last(RUNS[1].id)
    assert (job.running, job.log, job.lines) == (
        False,
        log,
        ["Traceback (most recent call last):", "RuntimeError: CUDA out of memory"],
    )


def test_a_pack_job_killed_before_it_records_its_members_is_still_their_failure(tmp_path: Path) -> None:
    """The workflow names a pack job's members at the head of its log: killed before any packs.json,
    the job is each member's failure in status, with the killed job's empty-log hint."""
    repo = copy_repo(tmp_path)
    raw = PACKED | {"seeds": [42], "grid": {**PACKED["grid"], "learning_rates": {"synchronous": LRS[:2]}}}
    command = ("--configfile", write_campaign(repo, raw, "packed.yaml"))
    kill = {"EBD2N_KILL_AT": "before:*/runs/*/packs.json", "EBD2N_KILL_TARGET": ""}
    killed = snakemake(repo, *command, check=False, env=environment() | kill)
    directory = repo / named_campaign("packed").directory
    members = sorted(run.id for run in RUNS if run.seed == 42 and run.lr in LRS[:2])
    (log,) = (directory / "logs" / "packs").rglob("*.log")
    rows = {row.run: row for row in campaign_status(directory).runs}
    assert killed.returncode != 0 and not list(directory.rglob("packs.json")) and not list(directory.glob("packs/*/*"))
    assert log_lines(log)[0].split() == [*pack_log_header([]).split(), *members]
    assert {run: (row.state, row.detail) for run, row in rows.items()} == {
        run: ("failed", f"{log.relative_to(directory).as_posix()}: {EMPTY_LOG[:160]}") for run in members
    }


@pytest.mark.slow
def test_a_kill_mid_pack_and_the_same_command_again_give_the_packed_campaigns_bits(
    campaigns: tuple[Path, str], tmp_path: Path
) -> None:
    """A second packed campaign, killed while its first pack writes its members' checkpoints, then
    the same command: every run bitwise as the first packed campaign trained it."""
    repo = copy_repo(tmp_path)
    command = ("--configfile", write_campaign(repo, PACKED, "packed.yaml"))
    second = sorted(RUNS, key=lambda run: run.id)[1]
    kill = {"EBD2N_KILL_AT": f"after:*/runs/{second.id}/checkpoints/epoch-1.pt", "EBD2N_KILL_TARGET": ""}
    killed = snakemake(repo, *command, check=False, env=environment() | kill)
    assert killed.returncode != 0 and not run_paths(run_dir(repo, "packed", second)).slice_record(1).exists()
    snakemake(repo, *command, "--rerun-incomplete")
    for run in RUNS:
        ours, theirs = run_dir(repo, "packed", run), run_dir(campaigns[0], "packed", run)
        states = [torch.load(run_paths(d).final, weights_only=True) for d in (ours, theirs)]
        assert_states_equal(states[0]["engine"], states[1]["engine"])
        assert comparable_metrics(ours) == comparable_metrics(theirs)


@pytest.mark.slow
def test_halving_re_forms_the_packs_after_a_rung(tmp_path: Path) -> None:
    """Four points of one seed pack as one for the first slice; the rung keeps two, which pack again.
    A larger share later promotes a third, which packs alone: the audit accepts its grown packs.json."""
    raw = PACKED | {"seeds": [42], "search": {"method": "successive-halving", "keep": 0.5}, "execution": {"pack": 4}}
    raw["overrides"] = raw["overrides"] | {"training.max_tokens": 16384}  # two slices, the rung between them
    raw["grid"] = raw["grid"] | {"learning_rates": {"synchronous": [0.002, 0.004, 0.008, 0.016]}}
    repo = copy_repo(tmp_path)
    snakemake(repo, "--configfile", write_campaign(repo, raw, "packed.yaml"))
    runs = [Run(None, "synchronous", lr, 0.99, 42) for lr in raw["grid"]["learning_rates"]["synchronous"]]
    packs = {run.id: read_packs(run_dir(repo, "packed", run)) for run in runs}
    promoted = sorted(run_id for run_id, pack in packs.items() if 2 in pack)
    audit = json.loads((repo / named_campaign("packed").audit).read_text())
    assert all(pack[1] == sorted(packs) for pack in packs.values())
    assert len(promoted) == 2 and all(packs[run_id][2] == promoted for run_id in promoted)
    assert audit["passed"] is True
    snakemake(
        repo, "--configfile", write_campaign(repo, raw | {"search": {**raw["search"], "keep": 0.75}}, "packed.yaml")
    )
    grown = {run.id: read_packs(run_dir(repo, "packed", run)) for run in runs}
    third = [run_id for run_id, pack in grown.items() if 2 in pack and run_id not in promoted]
    audit = json.loads((repo / named_campaign("packed").audit).read_text())
    assert len(third) == 1 and grown[third[0]][2] == third
    assert audit["passed"] is True


@pytest.mark.slow
def test_packing_a_trained_campaign_trains_nothing_again(campaigns: tuple[Path, str], tmp_path: Path) -> None:
    """The solo campaign, finished, given execution.pack: its runs trained every slice alone and join
    no pack; the validation jobs run again and find their results as they were."""
    repo = Path(shutil.copytree(campaigns[0], tmp_path / "repo", symlinks=True))
    directories = [run_dir(repo, "solo", run) for run in RUNS]
    before = [(run_paths(d).results.read_bytes(), run_paths(d).metrics.read_bytes()) for d in directories]
    command = ("--configfile", write_campaign(repo, SOLO | {"execution": {"pack": 3}}, "solo.yaml"))
    snakemake(repo, *command)
    again = snakemake(repo, "-n", *command)
    after = [(run_paths(d).results.read_bytes(), run_paths(d).metrics.read_bytes()) for d in directories]
    audit = json.loads((repo / named_campaign("solo").audit).read_text())
    assert after == before and audit["passed"] is True
    assert not any(run_paths(d).packs.exists() for d in directories)
    assert "Dry run of campaign solo: 1 job would run." in again.stdout + again.stderr


def test_packs_keep_what_their_runs_recorded_when_the_grid_grows(in_tmp: Path) -> None:
    """Packs form K at a time in grid order; a run that recorded its pack keeps it with its members."""
    first = WorkflowPlan(campaign_from_dict(PACKED)).packing.packs("base", 1)
    grown = campaign_from_dict(PACKED | {"seeds": [*SEEDS, 44]})
    recorded = [grown.paths.run(run_id).directory for run_id in first[1].members]
    for directory in recorded:
        directory.mkdir(parents=True)
    record_pack(recorded, 1, members=recorded)
    packs = WorkflowPlan(grown).packing.packs("base", 1)
    result = ([len(p.members) for p in first], [len(p.members) for p in packs], packs[0] == first[1])
    assert result == ([3, 3], [3, 3, 3], True)
    assert sorted(member for pack in packs for member in pack.members) == sorted(run.id for run in grown.grid.runs())


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"grid": {**PACKED["grid"], "horizons": [0.5, 1.0]}}, "execution.pack: runs that branch"),
        (
            {"overrides": {**PACKED["overrides"], "optimizer.accum_iter": 2}},
            "execution.pack 3: base's synchronous runs",
        ),
    ],
)
def test_a_campaign_whose_runs_cannot_pack_is_refused_in_one_line(in_tmp: Path, change: dict, named: str) -> None:
    with pytest.raises(UserError, match=named):
        campaign_from_dict(PACKED | change)


def test_a_campaign_without_pack_plans_no_pack(in_tmp: Path) -> None:
    plan = WorkflowPlan(campaign_from_dict(SOLO))
    assert (plan.packing, plan.solo_runs()) == (None, {"run": r"[^/]+"})


def test_a_pack_job_asks_for_one_gpu_and_k_times_a_runs_time(in_tmp: Path) -> None:
    """One GPU per pack (as each synchronous run asks), its members' one process on it, K times the minutes."""
    plan = WorkflowPlan(campaign_from_dict(PACKED | {"resources": {"default": {"gpus": 1, "minutes": 9}}}))
    (run, threads), (pack, pack_threads) = plan.run_job_resources(), plan.pack_job_resources()
    result = (pack, pack_threads, plan.pack_launcher("base"))
    assert result == (run | {"runtime": 27}, threads, "-m ebd2n.launch --gpus 1 --processes 1 --nodes 1")
    assert pack["gpu"] == 1


def test_packing_a_grid_without_synchronous_runs_is_a_warning(in_tmp: Path) -> None:
    raw = PACKED | {"grid": {"modes": ["packed-4"], "learning_rates": {"packed-4": [0.003]}, "beta2": [0.99]}}
    assert [line.split(": ", 1)[1] for line in campaign_warnings(campaign_from_dict(raw))] == [
        "execution.pack 3, but grid.modes has no synchronous mode: no run packs (packed-K runs train alone)"
    ]


@pytest.mark.parametrize("preset", [None, "20m", "1.41b"])
def test_the_workflow_trains_synchronous_runs_in_packs_and_the_others_alone(in_tmp: Path, preset: str | None) -> None:
    plan = WorkflowPlan(campaign_from_dict(PACKED))
    ids = [Run(preset, mode, 0.001, 0.95, 42).id for mode in ("synchronous", "packed-4", "packed-12")]
    packed, solo = plan.packed_runs()["run"], plan.solo_runs()["run"]
    result = [(bool(re.fullmatch(packed, run_id)), bool(re.fullmatch(solo, run_id))) for run_id in ids]
    assert result == [(True, False), (False, True), (False, True)]
