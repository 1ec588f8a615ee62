"""Campaign reports: tables, figures, selected recipes and one self-contained HTML page."""

from ebd2n.report.campaign_report import build_report

__all__ = ["build_report"]
