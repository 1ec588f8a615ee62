"""Shows a campaign's status: the table and the campaign line for a terminal, and each row's cells,
which the status page (ebd2n.report.status_page, in the report layer for its explorer) shows too."""

from __future__ import annotations

from ebd2n.campaign.status import DONE, CampaignStatus, RunStatus
from ebd2n.outcomes import RUNNING, LiveState, Outcome
from ebd2n.quantities import format_amount, format_duration

COLUMNS = ("run", "state", "epochs", "subset val loss", "subset acc.", "full val loss", "wall", "note")
LOSSES = (
    "subset val loss: the last epoch's check on a fixed validation subset; "
    "full val loss: the whole validation split, which the report ranks runs by."
)
"""What the two loss columns are, under the table."""
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
    rows = [row_cells(row) for row in status.runs]
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


def row_cells(row: RunStatus) -> list[str]:
    """One row's text under COLUMNS."""
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
