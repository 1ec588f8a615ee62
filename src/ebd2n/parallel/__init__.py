"""Multi-device runs: placement of units over pipeline stages, the torchrun process context, pipeline stages.

This package builds on `ebd2n.model` and nothing of `ebd2n.train` (the distributed engine that
uses it is `ebd2n.train.distributed_engine`). `distributed` (process context) and `pipeline`
are imported by their module paths where needed; this package only re-exports the planner,
which has no torch dependencies.
"""

from ebd2n.parallel.placement import Placement, plan_placement

__all__ = ["Placement", "plan_placement"]
