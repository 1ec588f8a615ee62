"""A run's metrics as TensorBoard event files, written while it trains, so `tensorboard --logdir
results/<campaign>/runs` follows every run of a campaign live.

metrics.jsonl stays the record (the audit, the report and the metrics store read it); the event
files in the run's tensorboard/ folder are a view of the same records for TensorBoard, written by
torch's `SummaryWriter` (the `tensorboard` package: the `live` extra). Each slice opens a new event
file whose purge step is its first step, so TensorBoard drops whatever a killed attempt wrote past
the checkpoint it resumed from. Without the package the run trains as before, without events, and
train.log says so once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ebd2n.layout import TENSORBOARD
from ebd2n.train.records import TYPE, RecordType

SCALARS = {
    RecordType.STEP: {
        "loss": "train/loss",
        "accuracy": "train/accuracy",
        "lr": "train/lr",
        "grad_norm": "train/grad_norm",
    },
    RecordType.EPOCH: {
        "val_loss": "subset_validation/loss",
        "val_accuracy": "subset_validation/accuracy",
        "train_loss": "train/epoch_loss",
        "tokens_per_s": "throughput/tokens_per_s",
    },
}
"""metrics.jsonl record type -> field -> TensorBoard tag."""
MISSING = "no TensorBoard event files: the tensorboard package is not installed (pip install 'ebd2n[live]')"


class EventLog:
    """Mirrors the records a job appends to metrics.jsonl into the run's TensorBoard event files."""

    def __init__(self, run_dir: Path) -> None:
        self.directory = run_dir / TENSORBOARD
        self.writer: Any = None
        self.unavailable = False

    def add(self, record: dict[str, Any]) -> str | None:
        """Write the record's scalars at its step (epoch records flush, for live readers); a line for
        train.log the first time no events can be written, else None."""
        fields = SCALARS.get(record.get(TYPE))
        if fields is None or self.unavailable:
            return None
        if self.writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                self.unavailable = True
                return MISSING
            self.writer = SummaryWriter(str(self.directory), purge_step=record["step"])
        for field, tag in fields.items():
            value = record.get(field)
            if isinstance(value, int | float):
                self.writer.add_scalar(tag, value, record["step"])
        if record[TYPE] == RecordType.EPOCH:
            self.writer.flush()
        return None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
