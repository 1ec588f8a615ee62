"""Kill points: tests stop a campaign with SIGKILL at a named place, chosen by name, never by timing.

`EBD2N_KILL_AT=<point>[@<scope>...]` names the place (a point of `POINTS`; each `@scope` must be
one the call site names, such as a run id or a checkpoint); `EBD2N_KILL_TARGET` says what dies
there: a process group id (the test's controller session: controller and jobs), `parent` (a warm
trainer's server) or nothing. The process that reaches the point then SIGKILLs itself too, so a
trainer forked from the warm-start server (whose process group is not the controller's) dies with
the campaign. `term:<pid>` instead sends SIGTERM to that process (the controller) and carries on.
Outside tests the variable is unset and `kill_point` only reads it; a name that is no point
of `POINTS` is refused (a misspelt point would otherwise kill nothing and the test pass).
"""

from __future__ import annotations

import os
import signal

from ebd2n.errors import UserError

KILL_AT = "EBD2N_KILL_AT"
KILL_TARGET = "EBD2N_KILL_TARGET"

POINTS = (
    "prepare.building",  # the cache's shards written, not yet renamed into place
    "resolve.written",  # recipe.yaml written, before the job ends
    "plan.written",  # a base recipe's slice plan (frozen/plans/<base>.json) written, before the job ends
    "train.checkpoint",  # a slice checkpoint or final.pt about to be written (scope: run id, checkpoint)
    "train.checkpoint-written",  # ... written and recorded in the ledger
    "train.consumed",  # the consumed slice checkpoint deleted, before the job ends
    "train.job-end",  # the run's dashboard written, the last act of a training job
    "validate.results",  # results.json about to be written
    "validate.results-written",  # ... written, before the job ends
    "collect.campaign-written",  # campaign.json written, runs.csv not yet
    "audit.record",  # an audit stage's checks done, its record not yet written (scope: runs, full)
    "audit.sealed",  # the passing audit's seal (audit.passed) written, before the job ends
    "report.staged",  # the report built in its staging folder, not yet published
)


def kill_point(point: str, *scope: str) -> None:
    """SIGKILL the named target and this process if EBD2N_KILL_AT names this point and scope."""
    wanted = os.environ.get(KILL_AT)
    if not wanted:
        return
    name, *where = wanted.split("@")
    if name not in POINTS:
        raise UserError(f"{KILL_AT}={wanted}: {name} is not a kill point (one of {', '.join(POINTS)})")
    if name != point or not set(where) <= set(scope):
        return
    target = os.environ.get(KILL_TARGET, "")
    if target.startswith("term:"):  # a polite stop: the controller ends its jobs itself
        os.kill(int(target.removeprefix("term:")), signal.SIGTERM)
        return
    if target.isdigit():
        os.killpg(int(target), signal.SIGKILL)
    elif target == "parent":
        os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
