"""Placement: contiguous units over pipeline stages, balancing compute within each device's memory.

A pipeline runs at the pace of its slowest stage, so the planner minimises the largest stage
compute, counted in forward FLOPs per token from the shapes: the tied output head of a small
model costs as much as several blocks, which a parameter count would miss. The search is exact
(dynamic programming over contiguous partitions, integer costs) and deterministic: among the
optimal partitions the one with the earliest split points wins.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from ebd2n.errors import UserError
from ebd2n.model.units import Unit

_INFEASIBLE = float("inf")


@dataclass(frozen=True)
class Placement:
    """Which units each pipeline stage holds, and what it costs."""

    stages: list[list[str]]
    """Unit names of each stage, in forward order; stage 0 holds the embedding."""
    cost: list[int]
    """Forward FLOPs per token of each stage."""
    parameters: list[int]
    """Parameters each stage holds; the last stage counts its copy of the tied embedding matrix."""
    tied_copy: int
    """Parameters of the tied matrix copy held by the head's stage (0 when the embedding's stage has the head)."""

    def max_over_mean(self) -> float:
        """Largest stage cost over the mean: 1.0 is a perfect balance."""
        return max(self.cost) / (sum(self.cost) / len(self.cost))

    def describe(self, devices: Sequence[str] | None = None) -> str:
        """One line per stage for train.log: devices, unit span, compute share and parameters."""
        total = sum(self.cost) or 1
        lines = []
        for index, (names, cost, params) in enumerate(zip(self.stages, self.cost, self.parameters, strict=True)):
            where = f" [{devices[index]}]" if devices else ""
            tied = " incl. the tied head copy" if self.tied_copy and index == len(self.stages) - 1 else ""
            lines.append(
                f"stage {index}{where}: {names[0]} .. {names[-1]} ({len(names)} units) | "
                f"{cost / 1e6:,.2f} MFLOP/token ({100 * cost / total:.1f} %) | {params:,} parameters{tied}"
            )
        return "\n".join(lines)


def plan_placement(
    units: list[Unit],
    stages: int,
    memory_per_device: int | None = None,
    bytes_per_parameter: int = 16,
    tied_head: bool = True,
) -> Placement:
    """Split `units` into `stages` contiguous non-empty stages minimising the largest stage FLOPs.

    Memory per stage is parameters x bytes_per_parameter (16: FP32 weight, gradient and two AdamW
    moments; activations are not counted). With more than one stage and a tied head the head's
    stage also holds a copy of the embedding matrix. Stages split only between unit segments.
    """
    n = len(units)
    splits = [j for j in range(1, n) if units[j].segment is None or units[j].segment != units[j - 1].segment]
    if not 1 <= stages <= len(splits) + 1:
        groups = f"{n} units" if len(splits) + 1 == n else f"{len(splits) + 1} unit segments ({n} units)"
        raise UserError(f"parallel.pipeline_stages ({stages}) must be between 1 and the model's {groups}")
    tied = sum(u.parameters for u in units if u.kind == "embedding") if stages > 1 and tied_head else 0
    allowed = set(splits)
    cost_prefix, param_prefix = [0], [0]
    for unit in units:
        cost_prefix.append(cost_prefix[-1] + unit.flops_per_token)
        param_prefix.append(param_prefix[-1] + unit.parameters)

    def stage_cost(i: int, j: int) -> float:
        """FLOPs of units[i:j] as one stage, or infinity when its parameters do not fit."""
        params = param_prefix[j] - param_prefix[i] + (tied if j == n else 0)
        if memory_per_device is not None and params * bytes_per_parameter > memory_per_device:
            return _INFEASIBLE
        if j < n and j not in allowed:
            return _INFEASIBLE
        return cost_prefix[j] - cost_prefix[i]

    # best[k][i]: smallest achievable maximum stage cost of units[i:] in k stages.
    best = [[_INFEASIBLE] * (n + 1) for _ in range(stages + 1)]
    for i in range(n):
        best[1][i] = stage_cost(i, n)
    for k in range(2, stages + 1):
        for i in range(n - k + 1):
            best[k][i] = min(max(stage_cost(i, j), best[k - 1][j]) for j in range(i + 1, n - k + 2))
    bound = best[stages][0]
    if bound == _INFEASIBLE:
        raise UserError(
            f"parallel.pipeline_stages ({stages}): the model does not fit in "
            f"{memory_per_device / 1e9:.1f} GB per device "
            f"at {bytes_per_parameter} bytes per parameter; use more pipeline stages"
        )

    bounds, start = [], 0
    for k in range(stages, 1, -1):  # earliest split that keeps the rest achievable within the bound
        start = next(
            j for j in range(start + 1, n - k + 2) if stage_cost(start, j) <= bound and best[k - 1][j] <= bound
        )
        bounds.append(start)
    edges = [0, *bounds, n]
    spans = list(itertools.pairwise(edges))
    return Placement(
        stages=[[u.name for u in units[i:j]] for i, j in spans],
        cost=[cost_prefix[j] - cost_prefix[i] for i, j in spans],
        parameters=[param_prefix[j] - param_prefix[i] + (tied if j == n else 0) for i, j in spans],
        tied_copy=tied,
    )
