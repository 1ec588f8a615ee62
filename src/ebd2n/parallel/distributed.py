"""This process's place in a training job: rank, device, process groups and the placement.

`init(recipe)` is the one entry point. On a single process it resolves the recipe's device and
nothing else changes. Under `torchrun --nproc-per-node S*D -m ebd2n train ...` (RANK, WORLD_SIZE
and LOCAL_RANK set) it joins the process group (NCCL on CUDA, gloo on the CPU), pins the
device and builds the groups an S x D job needs. Ranks are replica-major: rank = replica x S +
stage, so ranks 0..S-1 hold one whole model and rank 0 (stage 0 of replica 0) writes the records.
"""

from __future__ import annotations

import os
import resource
import socket
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ebd2n.config import Recipe
from ebd2n.errors import UserError
from ebd2n.model.units import model_units, ties_head
from ebd2n.parallel.placement import Placement, plan_placement


@dataclass(frozen=True)
class Groups:
    """Process groups of one rank (None where the group would hold this rank alone)."""

    pipeline: dist.ProcessGroup | None
    """The S stages of this rank's replica, in stage order."""
    data: dist.ProcessGroup | None
    """The D replicas of this rank's stage (DDP averages gradients over it)."""
    tied: dist.ProcessGroup | None
    """First and last stage of this rank's replica: the two copies of the tied embedding matrix."""
    objects: dist.ProcessGroup
    """gloo over the whole job, for Python objects (checkpoints, memory records) kept off the GPUs."""


@dataclass(frozen=True)
class Context:
    """Who this process is in the job, on which device, and which units each device holds."""

    rank: int
    world_size: int
    device: torch.device
    stages: int
    replicas: int
    placement: Placement
    devices: list[str]
    """Device label of every rank, by rank ('cuda:3', or 'cpu:1' for the CPU of process 1; '<host>/cuda:3'
    when the job spans several hosts)."""
    hosts: list[str]
    """The node (host name) of every rank, by rank."""
    groups: Groups | None
    owns_process_group: bool

    @property
    def stage(self) -> int:
        return self.rank % self.stages

    @property
    def replica(self) -> int:
        return self.rank // self.stages

    @property
    def is_main(self) -> bool:
        """Rank 0 writes logs, metrics, checkpoints and records; other ranks only compute."""
        return self.rank == 0

    def stage_devices(self, stage: int) -> str:
        """The devices holding one stage (one per replica), comma-separated."""
        return ", ".join(self.devices[replica * self.stages + stage] for replica in range(self.replicas))

    def placement_lines(self) -> list[str]:
        """train.log lines saying which units each device holds."""
        names = [name for stage in self.placement.stages for name in stage]
        if self.world_size == 1:
            return [f"placement {self.device}: {len(names)} units ({names[0]} .. {names[-1]})"]
        header = (
            f"placement: {self.stages} pipeline stage(s) x {self.replicas} data-parallel replica(s) on "
            f"{self.world_size} devices | max/mean stage compute {self.placement.max_over_mean():.3f}"
        )
        devices = [self.stage_devices(stage) for stage in range(self.stages)]
        return [header, *self.placement.describe(devices).splitlines()]

    def placement_record(self) -> list[dict[str, Any]]:
        """run.json's `placement`: every device with the units it holds."""
        if self.world_size == 1:
            return [{"device": str(self.device), "units": self.placement.stages[0]}]
        return [
            {
                "device": self.devices[rank],
                "node": self.hosts[rank],
                "stage": rank % self.stages,
                "replica": rank // self.stages,
                "units": self.placement.stages[rank % self.stages],
            }
            for rank in range(self.world_size)
        ]

    def unit_devices(self) -> dict[str, str]:
        """Unit name -> the device(s) holding it (run.json's per-unit `device`)."""
        if self.world_size == 1:
            return {name: str(self.device) for name in self.placement.stages[0]}
        return {name: self.stage_devices(stage) for stage, names in enumerate(self.placement.stages) for name in names}

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's object, by rank, on rank 0 (None elsewhere); tensors must be on the CPU."""
        if self.groups is None:
            return [obj]
        received = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, received, dst=0, group=self.groups.objects)
        return received

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's object, on every rank."""
        if self.groups is None:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.groups.objects)
        return box[0]

    def close(self) -> None:
        """Leave the process group if this context joined it."""
        if self.owns_process_group:
            dist.destroy_process_group()


def resolve_device(name: str) -> torch.device:
    """`auto` means CUDA when there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def init(recipe: Recipe) -> Context:
    """The context of this process for the recipe; joins the torchrun job when there is one."""
    stages, replicas = recipe.parallel.pipeline_stages, recipe.parallel.data_parallel
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != stages * replicas:
        raise UserError(
            f"parallel.pipeline_stages x parallel.data_parallel = {stages} x {replicas} processes, but this job has "
            f"{world}; launch it with torchrun --nproc-per-node {stages * replicas} -m ebd2n train ... "
            "(or set both to 1 for one device)"
        )
    device = resolve_device(recipe.runtime.device)
    if world == 1:
        placement = plan_placement(model_units(recipe.model), 1)
        return Context(
            0, 1, device, 1, 1, placement, [str(device)], [socket.gethostname()], None, owns_process_group=False
        )
    if recipe.decentralized is not None:
        raise UserError("decentralized: packed-K runs train their K models on one device; launch them without torchrun")
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    groups = _groups(stages, replicas)
    memory = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    placement = plan_placement(model_units(recipe.model), stages, memory, tied_head=ties_head(recipe.model))
    label = str(device) if device.type == "cuda" else f"cpu:{rank}"
    labels: list[tuple[str, str]] = [("", "")] * world
    dist.all_gather_object(labels, (socket.gethostname(), label), group=groups.objects)
    several_hosts = len({host for host, _ in labels}) > 1
    devices = [f"{host}/{name}" if several_hosts else name for host, name in labels]
    hosts = [host for host, _ in labels]
    return Context(rank, world, device, stages, replicas, placement, devices, hosts, groups, owns_process_group=owns)


def _groups(stages: int, replicas: int) -> Groups:
    """Every rank creates every group, in the same order (torch.distributed requires it)."""

    def mine(rank_lists: list[list[int]]) -> dist.ProcessGroup:
        return dist.new_subgroups_by_enumeration(rank_lists)[0]

    pipeline = mine([[r * stages + s for s in range(stages)] for r in range(replicas)]) if stages > 1 else None
    data = mine([[r * stages + s for r in range(replicas)] for s in range(stages)]) if replicas > 1 else None
    tied = mine([[r * stages, r * stages + stages - 1] for r in range(replicas)]) if stages > 1 else None
    objects = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else dist.group.WORLD
    return Groups(pipeline, data, tied, objects)


def device_memory(device: torch.device) -> dict[str, dict[str, int]]:
    """Allocated and peak bytes per device (the CPU reports the process's resident set)."""
    if device.type == "cuda":
        return {
            f"cuda:{i}": {"allocated": torch.cuda.memory_allocated(i), "peak": torch.cuda.max_memory_allocated(i)}
            for i in range(torch.cuda.device_count())
        }
    page = os.sysconf("SC_PAGE_SIZE")
    with open("/proc/self/statm") as statm:
        resident = int(statm.read().split()[1]) * page
    return {"cpu": {"allocated": resident, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}


def gather_memory(context: Context) -> dict[str, dict[str, int]]:
    """Allocated and peak bytes of every device of the job, on rank 0 ({} on other ranks)."""
    if context.world_size == 1:
        return device_memory(context.device)
    if context.device.type == "cuda":
        own = {
            "allocated": torch.cuda.memory_allocated(context.device),
            "peak": torch.cuda.max_memory_allocated(context.device),
        }
    else:
        own = device_memory(context.device)["cpu"]
    parts = context.gather(own)
    return {} if parts is None else dict(zip(context.devices, parts, strict=True))


def most_loaded(memory: dict[str, dict[str, int]]) -> str:
    """` | most loaded cuda:3 (47.80 GB peak)` when there are several devices, else ''."""
    if len(memory) < 2:
        return ""
    name = max(memory, key=lambda key: memory[key]["peak"])
    return f" | most loaded {name} ({memory[name]['peak'] / 1e9:.2f} GB peak)"


def to_cpu(obj: Any) -> Any:
    """A copy of nested dicts/lists/tuples with every tensor moved to the CPU (for `gather`)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {key: to_cpu(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(value) for value in obj)
    return obj
