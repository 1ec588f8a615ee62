"""Campaign reports: tables, figures, selected recipes and one self-contained HTML page.

Importing the package stays light (the trainer imports `ebd2n.report.plotly_embed` for its run
dashboard); polars, scipy and matplotlib load only when a campaign report is built.
"""

from __future__ import annotations

from pathlib import Path


def build_report(campaign_dir: Path) -> Path:
    """Write `campaign_dir/report/` from disk alone and return the path of its index.html."""
    from ebd2n.report.campaign_report import build_report as build

    return build(campaign_dir)


__all__ = ["build_report"]
