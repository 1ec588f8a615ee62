"""GPU slots of local jobs (ebd2n.slots) and how ebd2n.launch starts one, several or multi-node processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ebd2n.errors import UserError
from ebd2n.launch import job_command, torchrun_command
from ebd2n.slots import acquire, machine_pool, pool_warnings


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"EBD2N_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}, ["2", "3"]),
        ({"CUDA_VISIBLE_DEVICES": "4,5"}, ["4", "5"]),
        ({"CUDA_VISIBLE_DEVICES": ""}, []),
    ],
)
def test_machine_pool_from_environment(environ: dict, expected: list[str]) -> None:
    result = machine_pool(environ)
    assert result == expected


def test_machine_pool_bad_ids_refused() -> None:
    with pytest.raises(UserError, match=r"EBD2N_GPUS=0,0: give distinct device ids separated by commas"):
        machine_pool({"EBD2N_GPUS": "0,0"})


def test_slots_two_jobs_get_different_ids(tmp_path: Path) -> None:
    first = acquire(1, ["0", "1"], tmp_path)
    second = acquire(1, ["0", "1"], tmp_path)
    result = (first.ids, second.ids)
    assert result == (("0",), ("1",))


def test_slots_taken_pool_makes_a_job_wait(tmp_path: Path) -> None:
    held = acquire(2, ["0", "1"], tmp_path)
    with pytest.raises(TimeoutError, match=r"no 1 free GPU slot\(s\) of 0,1"):
        acquire(1, ["0", "1"], tmp_path, timeout=0.5)
    held.release()


def test_slots_more_than_the_pool_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"asks for 3 GPU\(s\) but the machine's pool holds 2 \(0,1\); set EBD2N_GPUS"):
        acquire(3, ["0", "1"], tmp_path)


def test_slots_of_a_killed_job_are_free_again(tmp_path: Path) -> None:
    """A job holds its slot in an exec'd process; SIGKILL, and the kernel drops the lock."""
    holder = textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        from ebd2n.slots import acquire
        slots = acquire(1, ["0"], Path({str(tmp_path)!r}))
        print(slots.visible_devices, flush=True)
        os.execvp("sleep", ["sleep", "60"])
    """)
    with subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True) as job:
        taken = job.stdout.readline().strip()
        with pytest.raises(TimeoutError):
            acquire(1, ["0"], tmp_path, timeout=0.3)
        os.kill(job.pid, signal.SIGKILL)
        job.wait()
    result = taken, acquire(1, ["0"], tmp_path, timeout=5).ids
    assert result == ("0", ("0",))


def test_pool_warning_when_resources_exceed_the_pool() -> None:
    result = pool_warnings(8, ["0", "1"])
    assert len(result) == 1 and result[0].startswith("--resources gpu=8, but this machine's GPU pool holds 2 (0,1")


def test_launch_one_process_is_the_warm_launcher() -> None:
    result = job_command(1, 1, ["train", "--config", "r.yaml"], {})[1:]
    assert result == ["-m", "ebd2n.warm", "train", "--config", "r.yaml"]


def test_launch_one_node_is_standalone_torchrun() -> None:
    result = job_command(4, 1, ["train"], {})[1:]
    assert result == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "4",
        "-m",
        "ebd2n",
        "train",
    ]


def test_launch_two_nodes_srun_one_agent_per_node_with_c10d_rendezvous() -> None:
    result = job_command(8, 2, ["train"], {"SLURM_JOB_ID": "77"})
    srun, torchrun = result[: result.index(sys.executable)], result[result.index(sys.executable) + 1 :]
    assert srun == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--jobid=77"]
    assert torchrun[:12] == [
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"{os.uname().nodename}:29400",
        "--rdzv-id",
        "ebd2n-77",
        "--nproc-per-node",
        "4",
    ]


def test_launch_two_nodes_outside_slurm_refused() -> None:
    with pytest.raises(UserError, match=r"this run spans 2 nodes \(resources: nodes\), which needs a SLURM job"):
        job_command(4, 2, ["train"], {})


def test_torchrun_agent_splits_processes_over_nodes() -> None:
    result = torchrun_command(4, 2, "localhost:1", "x", ["train"])
    assert result[result.index("--nproc-per-node") + 1] == "2"
