"""Multi-device runs: placement of units over pipeline stages, the torchrun context, the distributed engine.

`distributed` (process context) and `engine` (DistributedEngine) are imported by their module
paths where needed; this package only re-exports the planner, which has no torch dependencies.
"""

from ebd2n.parallel.placement import Placement, plan_placement

__all__ = ["Placement", "plan_placement"]
