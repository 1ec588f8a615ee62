"""Fault injection for the tests: SIGKILL a campaign where a named file is written, never by timing.

Every write that matters goes through `ebd2n.atomic` (files written whole, directories published,
checkpoints let go), and that one place calls `at(when, path)`. A test names the moment with
`EBD2N_KILL_AT=<when>:<pattern>`: `before` or `after` the write or publication, or `removing`
(before) or `removed` (after) the removal, of a path matching the fnmatch pattern (matched
against the path as written and as an absolute path, so `*/runs/*seed42/checkpoints/epoch-1.pt`
works from any directory). `EBD2N_KILL_TARGET` says what
dies there besides the writing process: a process group id (the test's controller session:
controller and jobs), `parent` (the process that started this one, e.g. a warm-start server), or
nothing; `term:<pid>` instead sends SIGTERM to that process (the controller) and carries on, and
`int:<pgid>` sends SIGINT to that process group, as Ctrl-C at a terminal does, and carries on.
Outside tests the variable is unset and `at` only reads it.

`EBD2N_SLOW_START=<seconds>` makes every command line wait that long before it starts (`slow_start`),
as a job on a busy machine or a slow file system does while it imports torch: a job that has not
said a word yet is still a starting job.
"""

from __future__ import annotations

import fnmatch
import os
import signal
import time
from pathlib import Path

from ebd2n.errors import UserError

SLOW_START = "EBD2N_SLOW_START"
KILL_AT = "EBD2N_KILL_AT"
KILL_TARGET = "EBD2N_KILL_TARGET"
MOMENTS = ("before", "after", "removing", "removed")


def slow_start() -> None:
    """Wait EBD2N_SLOW_START seconds, when set (a test's slow start-up)."""
    seconds = os.environ.get(SLOW_START)
    if seconds:
        time.sleep(float(seconds))


def at(when: str, path: str | os.PathLike) -> None:
    """Kill the named target (and this process) if EBD2N_KILL_AT names this moment of `path`."""
    wanted = os.environ.get(KILL_AT)
    if not wanted:
        return
    moment, _, pattern = wanted.partition(":")
    if moment not in MOMENTS or not pattern:
        raise UserError(
            f"{KILL_AT}={wanted}: expected before:<pattern>, after:<pattern>, removing:<pattern> or removed:<pattern>"
        )
    if moment != when or not any(
        fnmatch.fnmatchcase(name, pattern) for name in (os.fspath(path), str(Path(path).absolute()))
    ):
        return
    target = os.environ.get(KILL_TARGET, "")
    if target.startswith("term:"):  # a polite stop: the controller ends its jobs itself
        os.kill(int(target.removeprefix("term:")), signal.SIGTERM)
        return
    if target.startswith("int:"):  # Ctrl-C: every process of the foreground group is told at once
        os.killpg(int(target.removeprefix("int:")), signal.SIGINT)
        return
    if target.isdigit():
        os.killpg(int(target), signal.SIGKILL)
    elif target == "parent":
        os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
