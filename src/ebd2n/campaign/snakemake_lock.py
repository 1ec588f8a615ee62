"""Snakemake's directory lock, left behind by a killed controller: found and cleared safely.

A controller killed with SIGKILL (or with the session it ran in) leaves .snakemake/locks/, and
every later run stops with "Directory cannot be locked" until `snakemake --unlock`. The lock is
stale when no other Snakemake controller runs in the working directory on this machine (jobs
started with --nolock do not count): the workflow then removes it, as --unlock would, and says
so. A live controller's lock is left alone, and Snakemake refuses as usual. Controllers on other
machines cannot be seen from here: run a campaign's controller from one machine (README). Without
Linux's /proc (macOS) no process can be seen, so no controller is ever proven gone.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

LOCKS = Path(".snakemake/locks")
PROC = Path("/proc")
"""Linux's view of the live processes; absent on macOS."""


def clear_stale_lock(workdir: Path) -> bool:
    """Remove workdir's Snakemake lock when no Snakemake controller runs there; True if removed."""
    locks = workdir / LOCKS
    if not any(locks.glob("*.lock")) or not no_other_controller(workdir):
        return False
    shutil.rmtree(locks)
    return True


def no_other_controller(workdir: Path) -> bool:
    """True when provably no other Snakemake controller runs in workdir on this machine; False
    also where the live processes cannot be seen (no /proc)."""
    return (PROC / "self").is_dir() and not live_controllers(workdir)


def live_controllers(workdir: Path) -> list[int]:
    """Pids of the other Snakemake processes that may hold workdir's lock (Linux /proc)."""
    workdir = workdir.resolve()
    pids = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        snakemake = any(Path(arg).name == "snakemake" or arg.endswith("/snakemake/__main__.py") for arg in argv)
        if not snakemake or "--nolock" in argv:
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:  # another user's controller: where it runs cannot be seen, so it may hold this lock
            pids.append(int(entry.name))
            continue
        if cwd == workdir:
            pids.append(int(entry.name))
    return pids
