"""Two controllers of one campaign started at the same moment: every job that can meet its own
twin finishes when the twin got there first (the same content, written atomically), never raises."""

from __future__ import annotations

import io
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from workflow_support import TINY, copy_repo, environment, write_campaign

from ebd2n.atomic import sha256_bytes

TRIALS = 5


def _together(commands: list[list[str]], cwd: Path) -> list[subprocess.CompletedProcess]:
    """Start every command at once, then wait for all (their output in files: a full pipe never stalls one)."""
    env = {**environment(), "EBD2N_WARM": "0"}
    with tempfile.TemporaryDirectory() as scratch:
        logs = [(Path(scratch) / f"{n}.out", Path(scratch) / f"{n}.err") for n in range(len(commands))]
        handles = [(out.open("w"), err.open("w")) for out, err in logs]
        started = [
            subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err)
            for command, (out, err) in zip(commands, handles, strict=True)
        ]
        codes = [process.wait(timeout=900) for process in started]
        for out, err in handles:
            out.close()
            err.close()
        return [
            subprocess.CompletedProcess(command, code, out.read_text(), err.read_text())
            for command, code, (out, err) in zip(commands, codes, logs, strict=True)
        ]


@pytest.mark.parametrize("trial", range(TRIALS))
def test_twins_freeze_at_once_both_finish_with_one_frozen_trainer(tmp_path: Path, trial: int) -> None:
    (tmp_path / "config" / "campaigns").mkdir(parents=True)
    campaign = write_campaign(tmp_path, TINY)
    freeze = [sys.executable, "-m", "ebd2n", "freeze", campaign]
    results = _together([freeze, freeze], tmp_path)
    frozen = tmp_path / "results" / "tiny" / "frozen"
    hashes = {result.stdout.split()[-1] for result in results if result.returncode == 0}
    found = ([result.returncode for result in results], [result.stderr for result in results], len(hashes))
    said = f"ebd2n freeze: campaign tiny: results/tiny (from {campaign})\n"  # the campaign it resolved, nothing else
    assert found == ([0, 0], [said, said], 1)
    assert (frozen / "SOURCE_HASH").read_text().strip() in hashes and not list(frozen.glob("src/.*partial*"))


@pytest.fixture(scope="module")
def twin_finals() -> list[dict[str, str]]:
    """The digest of every run's final weights in each trial so far (all trials must agree)."""
    return []


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(2))
def test_twins_two_controllers_started_together_both_finish_one_audited_campaign(
    tmp_path: Path, twin_finals: list[dict[str, str]], trial: int
) -> None:
    repo = copy_repo(tmp_path)
    campaign = write_campaign(repo, TINY)
    snakemake = [sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", campaign]
    results = _together([snakemake, snakemake], repo)
    directory = repo / "results" / "tiny"
    audited = subprocess.run(
        [sys.executable, "-m", "ebd2n", "audit", "results/tiny"],
        cwd=repo,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    outputs = "\n".join(result.stdout + result.stderr for result in results)
    assert ([result.returncode for result in results], (directory / "audit.passed").is_file(), audited.returncode) == (
        [0, 0],
        True,
        0,
    ), outputs + audited.stdout + audited.stderr
    twin_finals.append({path.parent.name: _weights_digest(path) for path in sorted(directory.glob("runs/*/final.pt"))})
    assert all(finals == twin_finals[0] for finals in twin_finals)  # the same model, bit for bit, in every trial


def _weights_digest(checkpoint: Path) -> str:
    """SHA-256 of a checkpoint's model and optimizer tensors (its job ids and times differ from trial to trial)."""
    engine = torch.load(checkpoint, map_location="cpu", weights_only=True)["engine"]
    buffer = io.BytesIO()
    torch.save(engine, buffer)
    return sha256_bytes(buffer.getvalue())
