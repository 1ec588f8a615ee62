"""Campaign reports: tables, figures, selected recipes and one self-contained HTML page.

Importing the package stays light (`ebd2n train` imports `ebd2n.report.dashboard` for the run's
dashboard); polars, scipy and matplotlib load only when a campaign report is built.
"""

from __future__ import annotations

from pathlib import Path


def build_report(campaign_dir: Path, out: Path | None = None) -> Path:
    """Write the campaign's report (into `out`, else its report/) from disk alone; return its index page."""
    from ebd2n.report.campaign_report import build_report as build

    return build(campaign_dir, out)


__all__ = ["build_report"]
