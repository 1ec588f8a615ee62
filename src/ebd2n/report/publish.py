"""Putting a freshly built report in place: staging folders, byte-identical rebuilds kept, older reports to history/."""

from __future__ import annotations

import filecmp
import os
import shutil
import time
from pathlib import Path

from ebd2n.atomic import pid_alive
from ebd2n.layout import HISTORY, REPORT_ASSETS, REPORT_INDEX

STAGING = ".report-"
"""Where a report is built before it is published: `.report-<pid>-<random>` in the campaign directory."""


def remove_killed_stagings(directory: Path) -> None:
    """Staging folders of report builds whose process is gone (killed before it cleaned up)."""
    for path in directory.glob(f"{STAGING}*"):
        pid = path.name.removeprefix(STAGING).split("-")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def report_files(directory: Path) -> set[str]:
    """Every file of a report directory, relative to it, earlier reports (history/) left out."""
    if not directory.is_dir():
        return set()
    return {
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if (p.is_file() or p.is_symlink()) and p.relative_to(directory).parts[0] != HISTORY
    }


def publish(staged: Path, published: Path) -> None:
    """Put a freshly built report in place. Identical to the published one: keep those files (only
    the index's time moves, for Snakemake). Different: the published one moves to history/ first."""
    fresh = report_files(staged)
    if fresh == report_files(published) and all(filecmp.cmp(staged / n, published / n, shallow=False) for n in fresh):
        os.utime(published / REPORT_INDEX)
        return
    # assets/ stays: run pages written earlier load their plotly.js from it
    current = (
        sorted(p.name for p in published.iterdir() if p.name not in (HISTORY, REPORT_ASSETS))
        if published.is_dir()
        else []
    )
    if (published / REPORT_INDEX).exists():  # a report, not only the assets the run pages wrote
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target, suffix = published / HISTORY / stamp, 1
        while target.exists():  # two reports within one second
            target, suffix = published / HISTORY / f"{stamp}-{suffix}", suffix + 1
        target.mkdir(parents=True)
        for name in current:
            (published / name).rename(target / name)
    else:
        for name in current:
            shutil.rmtree(published / name) if (published / name).is_dir() else (published / name).unlink()
    published.mkdir(parents=True, exist_ok=True)
    for entry in staged.iterdir():
        target = published / entry.name
        if entry.name == REPORT_ASSETS and target.is_dir():  # versioned names: add what is missing
            for item in entry.iterdir():
                if not (target / item.name).exists():
                    shutil.move(item, target / item.name)
        else:
            shutil.move(entry, target)
