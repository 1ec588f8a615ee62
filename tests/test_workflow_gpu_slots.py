"""A real local campaign on a declared pool of two GPU slots (EBD2N_GPUS=0,1, CPU recipe, --cores 2).

Each training job takes one slot (ebd2n.launch) and records it in its train.log block; one job is
SIGKILLed while it holds slot 0, and the next job must get that slot back from the kernel.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from workflow_support import TIMEOUT, TINY, copy_repo, environment, write_campaign

SLOT_LINE = "gpu slots CUDA_VISIBLE_DEVICES="


def job_blocks(run_dir: Path) -> list[dict]:
    """Every job block of a run's train.log: its slot ids, first and last line times."""
    blocks = []
    for line in (run_dir / "train.log").read_text().splitlines():
        stamp, text = datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S"), line[20:]
        if text.startswith("########## job "):
            blocks.append({"run": run_dir.name, "slots": None, "start": stamp, "end": stamp})
        blocks[-1]["end"] = stamp
        if text.startswith(SLOT_LINE):
            blocks[-1]["slots"] = text[len(SLOT_LINE) :]
    return blocks


def training_pids(repo: Path, run: str) -> list[int]:
    """The processes writing the run's training job log (one: the jobs start cold)."""
    log = str(repo / "results/slots/logs/runs" / run / "final.log")
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if os.readlink(entry / "fd/1") == log:
                pids.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return pids


@pytest.fixture(scope="module")
def campaign_with_a_killed_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, set[str]]:
    """Four runs on two slots; the first job seen holding slot 0 is SIGKILLed once both slots are
    taken. Returns the runs, the killed run and the runs training at the kill."""
    root = tmp_path_factory.mktemp("slots")
    repo = copy_repo(root)
    raw = json.loads(json.dumps(TINY))
    raw["campaign"] = "slots"
    raw["grid"]["learning_rates"]["synchronous"] = [0.001, 0.002, 0.003, 0.004]
    raw["overrides"].update({"training.max_tokens": 32768, "training.epoch_tokens": 16384})
    raw["epochs_per_slice"] = 2  # one training job per run
    raw["resources"]["default"]["gpus"] = 1
    campaign = write_campaign(repo, raw, "slots.yaml")
    env = environment() | {"EBD2N_GPUS": "0,1", "EBD2N_SLOTS_DIR": str(root / "slots"), "EBD2N_WARM": "0"}
    # the training jobs only: validation jobs take slots too, but leave no start and end times
    targets = [
        f"results/slots/runs/synchronous-lr{lr}-beta20.99-seed42/final.pt"
        for lr in raw["grid"]["learning_rates"]["synchronous"]
    ]
    command = [
        sys.executable,
        "-m",
        "snakemake",
        *targets,
        "--cores",
        "2",
        "--resources",
        "gpu=2",
        "--configfile",
        campaign,
    ]
    runs = repo / "results/slots/runs"
    with subprocess.Popen(
        command, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as snakemake:
        deadline = time.monotonic() + TIMEOUT
        killed = None
        while killed is None and time.monotonic() < deadline and snakemake.poll() is None:
            held = {}
            for log in runs.glob("*/train.log") if runs.is_dir() else []:
                slots = [block["slots"] for block in job_blocks(log.parent)]
                if slots and slots[-1] is not None and not (log.parent / "final.pt").exists():
                    held[slots[-1]] = log.parent.name
            if {"0", "1"} <= set(held):
                pids = training_pids(repo, held["0"])
                if len(pids) == 1:
                    os.kill(pids[0], signal.SIGKILL)
                    killed = held["0"], set(held.values())
            time.sleep(0.05)
        output, _ = snakemake.communicate(timeout=TIMEOUT)
    assert killed is not None, output
    return runs, *killed


@pytest.mark.slow
def test_slots_no_two_concurrent_jobs_share_an_id(campaign_with_a_killed_job: tuple[Path, str, set[str]]) -> None:
    runs, _, _ = campaign_with_a_killed_job
    blocks = [block for run in sorted(runs.iterdir()) for block in job_blocks(run)]
    shared = [
        (a["run"], b["run"])
        for i, a in enumerate(blocks)
        for b in blocks[i + 1 :]
        if a["slots"] == b["slots"] and a["start"] < b["end"] and b["start"] < a["end"]
    ]
    assert (len(blocks), shared) == (4, [])


@pytest.mark.slow
def test_slots_every_job_records_its_id(campaign_with_a_killed_job: tuple[Path, str, set[str]]) -> None:
    runs, killed, _ = campaign_with_a_killed_job
    result = sorted(block["slots"] for run in runs.iterdir() for block in job_blocks(run))
    finished = [run for run in runs.iterdir() if run.name != killed]
    recorded = {json.loads((run / "run.json").read_text())["visible_devices"] for run in finished}
    shown = all(
        f"GPU slots (CUDA_VISIBLE_DEVICES)</th><td>{json.loads((run / 'run.json').read_text())['visible_devices']}</td>"
        in (run / "report.html").read_text()
        for run in finished
    )
    assert (result.count("0") + result.count("1"), recorded <= {"0", "1"}, len(finished), shown) == (4, True, 3, True)


@pytest.mark.slow
def test_slots_killed_jobs_slot_goes_to_the_next_job(campaign_with_a_killed_job: tuple[Path, str, set[str]]) -> None:
    """The kernel dropped the killed job's lock: slot 0 went to a job started after the kill (with
    the lock left behind, every later job would have waited for slot 1)."""
    runs, _, running = campaign_with_a_killed_job
    later = [block for run in runs.iterdir() for block in job_blocks(run) if block["run"] not in running]
    result = len(later), "0" in {block["slots"] for block in later}
    assert result == (2, True)


def test_slots_resources_above_the_pool_said_in_one_line(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path)
    campaign = write_campaign(repo, TINY)
    env = environment() | {"EBD2N_GPUS": "0,1"}
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--resources", "gpu=8", "--configfile", campaign],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    lines = [line for line in result.stderr.splitlines() if "GPU pool" in line]
    assert (result.returncode, lines) == (
        0,
        [
            "ebd2n: warning: --resources gpu=8, but this machine's GPU pool holds 2 "
            "(0,1: EBD2N_GPUS, else CUDA_VISIBLE_DEVICES, "
            "else every GPU): at most 2 GPU(s) are in use at once, and GPU jobs wait for a free slot"
        ],
    )
