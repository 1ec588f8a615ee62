"""`ebd2n train-pack`: real runs of the demo model trained as one pack, each in its own directory,
against the same runs trained alone (`ebd2n.train.train`): the same files, per-step and subset
losses within the rounding of batched kernels, a solo-layout final.pt; the pack again, and the pack
in two slices, bitwise equal to itself; a diverging member stops while the others finish; the job's
time split among its runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import torch

from ebd2n.commands import train_job, train_pack_job
from ebd2n.config import load_recipe, save_recipe
from ebd2n.errors import UserError
from ebd2n.faults import KILL_AT
from ebd2n.job_time import recorded_jobs
from ebd2n.layout import PACKS, RunPaths, slice_checkpoint
from ebd2n.train.checkpoint import load_checkpoint
from ebd2n.train.pack_record import read_packs
from ebd2n.train.records import read_metrics

SRC = Path(__file__).resolve().parents[1] / "src"
MEMBERS = [("1e-3", "0.95", 1), ("3e-3", "0.99", 2), ("1e-2", "0.999", 3)]
DIVERGING = ("30", "0.95", 4)
"""A learning rate far past the edge: the run the sweep is there to find."""
TOLERANCE = 1e-5
"""Relative, on every per-step and subset loss: measured ~2e-7 over the demo budget (FP32, CPU)."""
TIMINGS = {"tokens_per_s", "batches_per_s", "wall_s", "memory"}


def _runs(cache: Path, root: Path, members=MEMBERS, *extra: str) -> list[Path]:
    """Resolved run directories (their recipe.yaml written, as `ebd2n resolve` leaves them)."""
    run_dirs = []
    for index, (lr, beta2, seed) in enumerate(members):
        run_dir = root / f"run{index}"
        recipe = load_recipe(
            "demo",
            [
                f"data.cache_dir={cache}",
                f"runtime.output_dir={run_dir}",
                "training.max_tokens=16384",
                "training.epoch_tokens=4096",
                f"optimizer.lr={lr}",
                f"optimizer.beta2={beta2}",
                f"runtime.seed={seed}",
                *extra,
            ],
        )
        run_dir.mkdir(parents=True)
        save_recipe(recipe, RunPaths(run_dir).recipe)
        run_dirs.append(run_dir)
    return run_dirs


def _records(run_dir: Path, kind: str, key: str) -> list[float]:
    return [record[key] for record in read_metrics(run_dir) if record["type"] == kind]


def _untimed(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in record.items() if k not in TIMINGS} for record in read_metrics(run_dir)]


def _weights(run_dir: Path) -> dict:
    return load_checkpoint(RunPaths(run_dir).final)["engine"]


def _relative(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) > 0
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def campaign(demo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    root = tmp_path_factory.mktemp("train-pack")
    packed = _runs(demo_cache, root / "packed")
    before = time.time()
    train_pack_job(packed)
    after = time.time()
    again = _runs(demo_cache, root / "again")
    train_pack_job(again)
    sliced = _runs(demo_cache, root / "sliced")
    train_pack_job(sliced, until_epoch=2)
    train_pack_job(sliced)
    solo = _runs(demo_cache, root / "solo")
    for run_dir in solo:
        train_job(str(RunPaths(run_dir).recipe), [])
    alone = _runs(demo_cache, root / "alone")  # packed to epoch 2, then each run on its own
    train_pack_job(alone, until_epoch=2)
    for run_dir in alone:
        train_job(str(RunPaths(run_dir).recipe), [])
    return {"packed": packed, "again": again, "sliced": sliced, "solo": solo, "alone": alone, "timed": [before, after]}


def test_a_packed_run_writes_what_its_solo_run_writes_and_its_packs(campaign) -> None:
    names = [sorted(path.name for path in run_dir.iterdir()) for run_dir in campaign["packed"]]
    solo = [sorted(path.name for path in run_dir.iterdir()) for run_dir in campaign["solo"]]
    assert names == [sorted([*files, PACKS]) for files in solo]
    assert all(read_packs(run_dir) for run_dir in campaign["packed"])


def test_a_run_packed_for_a_slice_goes_on_alone_as_its_solo_run(campaign) -> None:
    """The pack's epoch-2 checkpoint holds the solo engine's state: `ebd2n train` resumes from it."""
    worst = [
        _relative(_records(a, "step", "loss"), _records(s, "step", "loss"))
        for a, s in zip(campaign["alone"], campaign["solo"], strict=True)
    ]
    assert max(worst) < TOLERANCE and all(RunPaths(run_dir).final.is_file() for run_dir in campaign["alone"])


def test_packed_runs_losses_follow_their_solo_runs(campaign) -> None:
    steps = [
        _relative(_records(p, "step", "loss"), _records(s, "step", "loss"))
        for p, s in zip(campaign["packed"], campaign["solo"], strict=True)
    ]
    subset = [
        _relative(_records(p, "epoch", "val_loss"), _records(s, "epoch", "val_loss"))
        for p, s in zip(campaign["packed"], campaign["solo"], strict=True)
    ]
    assert max(steps + subset) < TOLERANCE


def test_a_packed_runs_final_checkpoint_has_the_solo_layout(campaign) -> None:
    for packed, solo in zip(campaign["packed"], campaign["solo"], strict=True):
        mine, theirs = _weights(packed), _weights(solo)
        assert mine["model"].keys() == theirs["model"].keys()
        assert mine["optimizer"]["param_groups"] == theirs["optimizer"]["param_groups"]
        assert max(float((mine["model"][n] - theirs["model"][n]).abs().max()) for n in theirs["model"]) < 1e-4


@pytest.mark.parametrize("other", ["again", "sliced"])
def test_the_same_pack_again_or_in_slices_is_bitwise_the_same(campaign, other: str) -> None:
    for packed, run_dir in zip(campaign["packed"], campaign[other], strict=True):
        mine, theirs = _weights(packed)["model"], _weights(run_dir)["model"]
        assert all(torch.equal(mine[name], theirs[name]) for name in theirs)
        assert _untimed(packed) == _untimed(run_dir)


def test_each_packed_run_records_its_share_of_the_jobs_time(campaign) -> None:
    """Each run's line holds a third of the job's seconds: start + seconds x pack is when the job
    recorded it, within the call that trained the pack."""
    jobs = [recorded_jobs(run_dir) for run_dir in campaign["packed"]]
    assert [[(job["pack"], job["job"]) for job in records] for records in jobs] == [[(3, jobs[0][0]["job"])]] * 3
    before, after = campaign["timed"]
    ends = [datetime.fromisoformat(r[0]["started"]).timestamp() + r[0]["seconds"] * r[0]["pack"] for r in jobs]
    assert all(before - 0.01 <= end <= after + 0.01 for end in ends)


def test_a_diverging_member_stops_while_the_others_finish(demo_cache: Path, tmp_path: Path) -> None:
    run_dirs = _runs(demo_cache, tmp_path, [MEMBERS[0], DIVERGING, MEMBERS[2]])
    train_pack_job(run_dirs)
    steps = [len(_records(run_dir, "step", "loss")) for run_dir in run_dirs]
    diverged = [bool(_records(run_dir, "diverged", "step")) for run_dir in run_dirs]
    finals = [RunPaths(run_dir).final.is_file() for run_dir in run_dirs]
    assert (diverged, finals, steps[0], steps[2], steps[1] < steps[0]) == (
        [False, True, False],
        [True] * 3,
        16,
        16,
        True,
    )


def test_a_kill_between_two_members_checkpoints_then_the_same_command_gives_the_same_bits(
    demo_cache: Path, tmp_path: Path
) -> None:
    """Killed right after the second member's epoch-2 checkpoint: the third is an epoch behind. The
    same command again takes the first two back to epoch 1 and trains on: the uninterrupted pack's bits."""
    policy = "training.checkpoint_policy=epoch"
    reference = _runs(demo_cache, tmp_path / "reference", MEMBERS, policy)
    train_pack_job(reference)
    run_dirs = _runs(demo_cache, tmp_path / "killed", MEMBERS, policy)
    command = [sys.executable, "-m", "ebd2n", "train-pack", *map(str, run_dirs)]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    killed = subprocess.run(
        command, env={**env, KILL_AT: f"after:*/killed/run1/{slice_checkpoint(2)}"}, capture_output=True, timeout=300
    )
    behind = [(run_dir / slice_checkpoint(2)).is_file() for run_dir in run_dirs]
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert (killed.returncode, behind, again.returncode) == (-9, [True, True, False], 0)
    for mine, theirs in zip(run_dirs, reference, strict=True):
        assert all(
            torch.equal(a, b)
            for a, b in zip(_weights(mine)["model"].values(), _weights(theirs)["model"].values(), strict=True)
        )
        assert _untimed(mine) == _untimed(theirs)
    assert f"goes back from epoch 2 to {slice_checkpoint(1)}" in RunPaths(run_dirs[0]).train_log.read_text()


def test_a_pack_whose_every_member_diverges_ends_with_their_records(demo_cache: Path, tmp_path: Path) -> None:
    run_dirs = _runs(demo_cache, tmp_path, [DIVERGING, ("50", "0.99", 5)])
    train_pack_job(run_dirs)
    diverged = [bool(_records(run_dir, "diverged", "step")) for run_dir in run_dirs]
    records = [RunPaths(run_dir).record.is_file() and RunPaths(run_dir).final.is_file() for run_dir in run_dirs]
    assert (diverged, records) == ([True, True], [True, True])


def test_a_run_that_finished_a_slice_past_the_others_is_refused(demo_cache: Path, tmp_path: Path) -> None:
    """Adding a fresh run to runs trained to epoch 2 would retrain them: refused, nothing trained."""
    trained = _runs(demo_cache, tmp_path / "trained", MEMBERS[:2])
    train_pack_job(trained, until_epoch=2)
    fresh = _runs(demo_cache, tmp_path / "fresh", MEMBERS[2:])
    before = [read_metrics(run_dir) for run_dir in trained]
    with pytest.raises(UserError, match="trained to epoch 2, the pack's other runs stand at epoch 0"):
        train_pack_job([*trained, *fresh])
    assert [read_metrics(run_dir) for run_dir in trained] == before


def test_a_run_named_twice_is_refused(demo_cache: Path, tmp_path: Path) -> None:
    run_dirs = _runs(demo_cache, tmp_path, MEMBERS[:1])
    with pytest.raises(UserError, match=f"^{re.escape(str(run_dirs[0]))}: this run directory is named twice; "):
        train_pack_job([run_dirs[0], run_dirs[0]], wait=True)


def test_runs_that_do_not_pack_are_refused_with_one_line(demo_cache: Path, tmp_path: Path) -> None:
    run_dirs = _runs(demo_cache, tmp_path, MEMBERS[:2])
    recipe = load_recipe(RunPaths(run_dirs[1]).recipe, ["model.width=128"])
    save_recipe(recipe, RunPaths(run_dirs[1]).recipe)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    command = [sys.executable, "-m", "ebd2n", "train-pack", *map(str, run_dirs)]
    completed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    left = sorted(path.name for run_dir in run_dirs for path in run_dir.iterdir())
    assert (completed.returncode, completed.stderr.count("\n"), "model.width" in completed.stderr) == (2, 1, True)
    assert left == ["recipe.yaml", "recipe.yaml"]


def test_the_pack_record_is_in_each_runs_train_log(campaign) -> None:
    logs = [RunPaths(run_dir).train_log.read_text() for run_dir in campaign["packed"]]
    assert all("trained in a pack of 3 runs" in log and "run0, run1, run2" in log for log in logs)
    assert json.loads(RunPaths(campaign["packed"][0]).record.read_text())


def _tree(run_dir: Path) -> dict[str, bytes]:
    return {path.relative_to(run_dir).as_posix(): path.read_bytes() for path in run_dir.rglob("*") if path.is_file()}


def test_a_finished_member_is_left_byte_for_byte_as_it_was(demo_cache: Path, tmp_path: Path) -> None:
    """`ebd2n train-pack A DONE`, DONE finished alone: A trains, DONE is reported done already and no
    byte of it changes (no packs.json: a job writes only into the runs it trains)."""
    fresh, done = _runs(demo_cache, tmp_path, MEMBERS[:2])
    train_job(str(RunPaths(done).recipe), [])
    before = _tree(done)
    lines = train_pack_job([fresh, done], record=tmp_path / "pack.json")
    assert _tree(done) == before and not RunPaths(done).packs.exists()
    assert "done already (nothing trained)" in lines[1] and RunPaths(fresh).final.is_file()
    assert read_packs(fresh) == {4: sorted([fresh.name, done.name])}


def test_a_kill_before_a_diverged_members_run_json_then_the_same_command_gives_the_same_bits(
    demo_cache: Path, tmp_path: Path
) -> None:
    """Policy epoch: the other member kept its checkpoint of the epoch the diverged one left in,
    which the diverged one never wrote. Killed before the diverged member's run.json, the same
    command restores it from its final.pt to write its records, the other from its own epoch."""
    policy = "training.checkpoint_policy=epoch"
    reference = _runs(demo_cache, tmp_path / "reference", [MEMBERS[0], DIVERGING], policy)
    train_pack_job(reference)
    run_dirs = _runs(demo_cache, tmp_path / "killed", [MEMBERS[0], DIVERGING], policy)
    command = [sys.executable, "-m", "ebd2n", "train-pack", *map(str, run_dirs)]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    killed = subprocess.run(command, env={**env, KILL_AT: "before:*/killed/run1/run.json"}, capture_output=True)
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert (killed.returncode, again.returncode) == (-9, 0), again.stderr
    for mine, theirs in zip(run_dirs, reference, strict=True):
        assert all(
            torch.equal(a, b)
            for a, b in zip(_weights(mine)["model"].values(), _weights(theirs)["model"].values(), strict=True)
        )
        assert _untimed(mine) == _untimed(theirs) and RunPaths(mine).record.is_file()
