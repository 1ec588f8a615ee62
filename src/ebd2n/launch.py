"""How a workflow job starts `ebd2n train|validate`: its GPU slots, then one process, torchrun, or srun + torchrun.

`python -m ebd2n.launch --gpus G --processes P --nodes N COMMAND ARGS...` is the launcher of the
workflow's training and validation jobs (`workflow/rules/common.smk`: get_launcher). Outside SLURM it
takes G device ids of the machine's pool (`ebd2n.slots`) and exports them as
CUDA_VISIBLE_DEVICES; a SLURM job has its devices from the scheduler. Then it execs, keeping the
slot locks open for the job's life:
- one process: the warm-start launcher (`python -m ebd2n.warm COMMAND ...`, cold under SLURM);
- P processes on one node: `torchrun --standalone --nproc-per-node P -m ebd2n COMMAND ...`;
- P processes over N nodes of a SLURM job: `srun` one torchrun agent per node, P/N processes each,
  meeting at a c10d rendezvous on the job's first node (where the batch script, and so this
  launcher, runs); rank 0 owns the run directory as on one node.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from ebd2n.errors import UserError
from ebd2n.slots import VISIBLE_ENV, acquire, machine_pool, slots_directory

CLUSTER_JOB = "SLURM_JOB_ID"
RENDEZVOUS_PORT = 29400
"""Port of the c10d rendezvous on the first node (torchrun's default)."""


def torchrun_command(
    processes: int, nodes: int, endpoint: str | None, rendezvous_id: str, argv: list[str]
) -> list[str]:
    """One torchrun agent's command: standalone on one node, else a c10d rendezvous at `endpoint`."""
    if nodes == 1:
        placement = ["--standalone", "--nnodes", "1"]
    else:
        placement = [
            "--nnodes",
            str(nodes),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            str(endpoint),
            "--rdzv-id",
            rendezvous_id,
        ]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *placement,
        "--nproc-per-node",
        str(processes // nodes),
        "-m",
        "ebd2n",
        *argv,
    ]


def job_command(processes: int, nodes: int, argv: list[str], environ: dict[str, str]) -> list[str]:
    """What the job runs (see the module docstring); a multi-node run needs a SLURM allocation."""
    if processes % nodes:
        raise UserError(f"{processes} processes do not split evenly over {nodes} nodes; set resources: gpus_per_node")
    if processes == 1:
        return [sys.executable, "-m", "ebd2n.warm", *argv]
    if nodes == 1:
        return torchrun_command(processes, 1, None, "", argv)
    if CLUSTER_JOB not in environ:
        raise UserError(
            f"this run spans {nodes} nodes (resources: nodes), which needs a SLURM job: "
            "run the campaign with --profile slurm, or set nodes: 1 to train it on this machine"
        )
    job = environ[CLUSTER_JOB]
    endpoint = f"{socket.gethostname()}:{RENDEZVOUS_PORT}"
    srun = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        f"--jobid={job}",
    ]
    return [*srun, *torchrun_command(processes, nodes, endpoint, f"ebd2n-{job}", argv)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ebd2n.launch", description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=0, help="GPUs the job asked for (local slots to take)")
    parser.add_argument("--processes", type=int, default=1, help="processes of the run (pipeline stages x replicas)")
    parser.add_argument("--nodes", type=int, default=1, help="nodes the run spans (SLURM only when above 1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the ebd2n command: train|validate ...")
    args = parser.parse_args(argv)
    try:
        command = job_command(args.processes, args.nodes, args.command, dict(os.environ))
        if args.gpus and CLUSTER_JOB not in os.environ:
            pool = machine_pool()
            if pool:  # a machine without GPUs has none to hand out: the job runs on what it finds
                slots = acquire(args.gpus, pool, slots_directory())
                os.environ[VISIBLE_ENV] = slots.visible_devices
    except UserError as error:
        print(f"ebd2n.launch: error: {error}", file=sys.stderr)
        sys.exit(2)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
