"""Shows a campaign's status: the table and campaign line for a terminal, and the status page that
reloads itself until the campaign has finished."""

from __future__ import annotations

import html
import time
from pathlib import Path

from ebd2n.atomic import atomic_write_text
from ebd2n.campaign.runs import run_label
from ebd2n.campaign.status import DONE, CampaignStatus, RunStatus
from ebd2n.layout import CampaignPaths
from ebd2n.outcomes import RUNNING, LiveState, Outcome
from ebd2n.quantities import format_amount, format_duration

REFRESH_S = 30
"""How often the page reloads itself."""

COLUMNS = ("run", "state", "epochs", "subset val loss", "subset acc.", "full val loss", "wall", "note")
LOSSES = (
    "subset val loss: the last epoch's check on a fixed validation subset; "
    "full val loss: the whole validation split, which the report ranks runs by."
)
"""What the two loss columns are, under the table."""
CURVE = "training loss"
"""The page's last column: each running run's loss by step, drawn (live, as the page reloads)."""
CURVE_SIZE = (120, 28)
_COLOURS = {
    DONE: "32",
    LiveState.TRAINING: "36",
    LiveState.VALIDATING: "36",
    Outcome.FAILED: "31",
    LiveState.PENDING: "2",
    Outcome.STOPPED: "33",
    Outcome.DIVERGED: "33",
}


def format_status(status: CampaignStatus, colour: bool = False) -> str:
    """The table and the campaign line; `colour`: ANSI colours for a terminal, else plain text."""
    rows = [_cells(row) for row in status.runs]
    widths = [max(len(column), *(len(cells[i]) for cells in rows)) for i, column in enumerate(COLUMNS)]
    lines = [_joined(COLUMNS, widths)]
    for row, cells in zip(status.runs, rows, strict=True):
        text = _joined(cells, widths)
        lines.append(f"\033[{_COLOURS[row.state]}m{text}\033[0m" if colour else text)
    lines.append(LOSSES)
    lines.extend(status.brackets)
    if status.retired:
        lines.append(f"retired (kept on disk, no longer in the campaign file's grid): {', '.join(status.retired)}")
    lines.append(campaign_line(status))
    return "\n".join(lines)


def _joined(cells: tuple[str, ...] | list[str], widths: list[int]) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()


def campaign_line(status: CampaignStatus) -> str:
    counts = status.counts
    if finished(status):
        eta = "none (nothing is training, validating or waiting)"
    else:
        eta = "unknown (no slice finished yet)" if status.eta_s is None else format_duration(status.eta_s)
    stopped = f"{counts[Outcome.STOPPED]} {Outcome.STOPPED}, " if Outcome.STOPPED in counts else ""
    stopped += f"{counts[Outcome.DIVERGED]} {Outcome.DIVERGED}, " if counts.get(Outcome.DIVERGED) else ""
    return (
        f"campaign {status.campaign}: {len(status.runs)} runs: {counts[DONE]} {DONE}, {counts[RUNNING]} {RUNNING}, "
        f"{stopped}{counts[Outcome.FAILED]} {Outcome.FAILED}, {counts[LiveState.PENDING]} {LiveState.PENDING}; "
        f"{format_amount(status.gpu_hours)} GPU-hours, "
        f"{format_amount(status.cpu_hours)} CPU-hours so far; ETA {eta}"
    )


def finished(status: CampaignStatus) -> bool:
    """Whether no run trains, validates or waits any more (a stopped run waits for nothing): the
    page has nothing left to follow."""
    return status.counts[RUNNING] == status.counts[LiveState.PENDING] == 0


def _cells(row: RunStatus) -> list[str]:
    training = row.state == LiveState.TRAINING
    return [
        row.run,
        f"training {row.detail}" if training else row.state,
        f"{row.epochs_done}/{row.epochs}",
        f"{row.loss:.4f} at epoch {row.loss_epoch}" if row.loss is not None else "-",
        f"{100 * row.accuracy:.2f} %" if row.accuracy is not None else "-",
        f"{row.full_loss:.4f}" if row.full_loss is not None else "-",
        format_duration(row.wall_s) if row.wall_s else "-",
        "" if training else row.detail,
    ]


def write_status_page(campaign_dir: Path, status: CampaignStatus) -> Path:
    """results/<campaign>/status.html: the same table, reloading itself every REFRESH_S seconds until
    the campaign has finished."""
    paths = CampaignPaths(Path(campaign_dir))
    rows = "\n".join(
        f'<tr class="{row.state}"><td>{_run_cell(row.run, paths)}</td>'
        + "".join(f"<td>{html.escape(cell)}</td>" for cell in _cells(row)[1:])
        + f'<td class="curve">{_curve(row.curve)}</td></tr>'
        for row in status.runs
    )
    header = "".join(f"<th>{html.escape(column)}</th>" for column in (*COLUMNS, CURVE))
    items = "".join(f"\n<li>{html.escape(line)}</li>" for line in status.brackets)
    brackets = f'\n<ul id="brackets">{items}\n</ul>' if items else ""  # successive halving's rungs
    reloads = (
        "no run is left to train or validate, so this page no longer reloads"
        if finished(status)
        else f"this page reloads every {REFRESH_S} s"
    )
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
{"" if finished(status) else f'<meta http-equiv="refresh" content="{REFRESH_S}">'}
<title>{html.escape(status.campaign)} — ebd2n campaign status</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 1.5rem; color: #1d232b; }}
table {{ border-collapse: collapse; }}
.scroll {{ overflow-x: auto; max-width: 100%; }}
th, td {{ padding: 0.2rem 0.7rem; text-align: left; border-bottom: 1px solid #e3e7ec; }}
td:nth-child(n+3):nth-child(-n+7) {{ text-align: right; font-variant-numeric: tabular-nums; }}
td:nth-child(-n+7) {{ white-space: nowrap; }}
td.curve {{ padding: 0 0.7rem; line-height: 0; }} td.curve svg {{ display: block; }}
tr.done td:nth-child(2) {{ color: #1e7a3c; }} tr.failed td {{ color: #b3261e; }}
tr.training td:nth-child(2), tr.validating td:nth-child(2) {{ color: #1f5fa8; font-weight: 600; }}
tr.pending {{ color: #6b7480; }}
tr.stopped td:nth-child(2), tr.diverged td:nth-child(2) {{ color: #8a5a00; }}
</style>
</head>
<body>
<h1>{html.escape(status.campaign)}</h1>
<p id="campaign">{html.escape(campaign_line(status))}</p>{brackets}
<p class="muted">Written {time.strftime("%Y-%m-%d %H:%M:%S")} by <code>ebd2n status</code>; {reloads}.
The report, once the campaign is done: <a href="report/index.html">report/index.html</a>.</p>
<div class="scroll"><table id="runs"><thead><tr>{header}</tr></thead><tbody>
{rows}
</tbody></table></div>
<p class="muted">{html.escape(LOSSES)}</p>
</body>
</html>
"""
    atomic_write_text(paths.status_page, page)
    return paths.status_page


def _curve(losses: list[float]) -> str:
    """A run's training loss by step as a small inline line chart (empty with under two points)."""
    if len(losses) < 2:
        return ""
    low, high = min(losses), max(losses)
    span = high - low or 1.0
    points = " ".join(
        f"{CURVE_SIZE[0] * i / (len(losses) - 1):.1f},{2 + (CURVE_SIZE[1] - 4) * (high - loss) / span:.1f}"
        for i, loss in enumerate(losses)
    )
    text = f"training loss by step: {losses[0]:.3f} to {losses[-1]:.3f} (lowest {low:.3f})"
    width, height = CURVE_SIZE
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{text}"><title>{text}</title><polyline fill="none" stroke="#1f5fa8" '
        f'stroke-width="1.5" points="{points}"/></svg>'
    )


def _run_cell(run_id: str, paths: CampaignPaths) -> str:
    """The run id, a link to the run's dashboard (or live page) once it has one; its grid point on hover."""
    label = run_label(run_id)
    title = f' title="{html.escape(label)}"' if label else ""
    run = paths.run(run_id)
    dashboard = run.dashboard if run.dashboard.is_file() else run.live_dashboard  # a run still training: its live page
    if not dashboard.is_file():
        return f"<span{title}>{html.escape(run_id)}</span>"
    href = html.escape(dashboard.relative_to(paths.directory).as_posix())
    return f'<a href="{href}"{title}>{html.escape(run_id)}</a>'
