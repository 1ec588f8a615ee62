"""The pages of a run, for the jobs that train it (ebd2n.train.jobs), which sit in the layer below
and so take them from their caller. Each page's module loads on first use: a job into a finished
run loads none."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ebd2n.report.live_dashboard import LiveDashboard


class RunDashboards:
    """ebd2n.train.jobs.RunPages: live.html while the run trains (ebd2n.report.live_dashboard),
    report.html once it is complete (ebd2n.report.dashboard)."""

    def live(self, run_dir: Path) -> LiveDashboard:
        from ebd2n.report.live_dashboard import LiveDashboard

        return LiveDashboard(run_dir)

    def final(self, run_dir: Path, results: dict | None = None) -> Path:
        """report.html; `results`: the full validation being recorded (else its results.json, if any)."""
        from ebd2n.report.dashboard import write_dashboard

        return write_dashboard(run_dir, results=results)

    def remove_live(self, run_dir: Path) -> None:
        from ebd2n.report.live_dashboard import remove_live_page

        remove_live_page(run_dir)
