"""The embedded demo as a new user runs it (`snakemake --cores all` in a fresh copy of the checkout):
its console's counts are the README's, its last line names the report, and the report locates
each mode's learning-rate optimum with a closed interval (the shipped grid brackets it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from workflow_support import REPO, copy_repo, environment, snakemake


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    repo = copy_repo(tmp_path_factory.mktemp("demo"))
    return repo, snakemake(repo, "--cores", "2", env=environment()).stderr.splitlines()


@pytest.mark.slow
def test_demo_console_counts_are_the_readmes_and_its_last_line_is_the_report(demo) -> None:
    repo, console = demo
    claimed = re.search(r"([0-9]+) runs, ([0-9]+) jobs", (REPO / "README.md").read_text(encoding="utf-8"))
    done = [line for line in console if re.search(r"\] [0-9]+/[0-9]+ done ", line)]
    result = (done[-1].split("] ")[1].split(" done")[0], console[-1])
    assert result == (
        f"{claimed.group(2)}/{claimed.group(2)}",
        f"report: results/demo/report/index.html (audit: results/demo/audit.json); runs: {claimed.group(1)} complete",
    )


@pytest.mark.slow
def test_demo_report_locates_each_modes_optimum_with_a_closed_interval(demo) -> None:
    repo, _ = demo
    selection = json.loads((repo / "results/demo/report/selection.json").read_text())
    located = {
        mode: (entry["edge"], fit["low"] < fit["estimate"] < fit["high"])
        for mode, entry in selection.items()
        for fit in [entry["lr_optimum"]]
        if fit["estimate"] is not None and None not in (fit["low"], fit["high"])
    }
    page = (repo / "results/demo/report/index.html").read_text()
    assert (located, "does not locate" in page) == ({"synchronous": (None, True), "packed-4": (None, True)}, False)
