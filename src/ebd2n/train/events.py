"""A run's metrics as TensorBoard event files, written while it trains, so `tensorboard --logdir
results/<campaign>/runs` follows every run of a campaign live and its HParams tab compares them.

metrics.jsonl stays the record (the audit, the report and the metrics store read it); the event
files in the run's tensorboard/ folder are a view of the same records for TensorBoard, written by
torch's `SummaryWriter` (the `tensorboard` package: the `live` extra). Each slice opens a new event
file whose purge step is its first step, so TensorBoard drops whatever a killed attempt wrote past
the checkpoint it resumed from. Without the package the run trains as before, without events, and
train.log says so once.

HParams (TensorBoard's sweep view, one row per run): each slice's event file starts, at step 0, with
the run's hyperparameters from its recipe.yaml (`HPARAMS`, the same in every slice) and the
experiment naming them and `METRICS`; TensorBoard keeps the first copy of each, so a run sliced in
many jobs is one row. The job that finishes the run ends its session: success for a run trained to
the end of its budget, failure for a diverged one (TensorBoard's status filter then shows or hides
diverged runs; ebd2n still counts one as a result, see ebd2n.outcomes). A run still training has no
end yet (TensorBoard: unknown). The events never touch a random number generator or the weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ebd2n.layout import TENSORBOARD, RunPaths
from ebd2n.train.records import TYPE, Metrics, RecordType, RunRecord

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
BEST_LOSS = "subset_validation/best_loss"
"""The lowest subset-validation loss of the run so far, at each epoch (earlier slices' epochs count)."""
HPARAMS = {
    "lr": "optimizer.lr",
    "beta1": "optimizer.beta1",
    "beta2": "optimizer.beta2",
    "weight_decay": "optimizer.weight_decay",
    "schedule": "optimizer.schedule",
    "batch_tokens": "training.batch_tokens",
    "max_tokens": "training.max_tokens",
    "tokens_per_parameter": "training.tokens_per_parameter",
    "layers": "model.layers",
    "width": "model.width",
    "seed": "runtime.seed",
}
"""HParams name -> the recipe key it shows, after `mode` and before `run` (the run id, which in a
campaign names every grid axis and the preset). The horizon is the budget the recipe sets:
max_tokens, else tokens_per_parameter; a key without a value (a Hugging Face model's layers) is left out."""
METRICS = ("subset_validation/loss", BEST_LOSS, "train/loss")
"""The HParams metrics (each run's last value of the tag): the final and the best subset-validation
loss, the last step's training loss."""
MISSING = "no TensorBoard event files: the tensorboard package is not installed (pip install 'ebd2n[live]')"


class EventLog:
    """Mirrors the records a job appends to metrics.jsonl into the run's TensorBoard event files."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.directory = self.run_dir / TENSORBOARD
        self.writer: Any = None
        self.unavailable = False
        self.best: float | None = None
        self.diverged = False

    def add(self, record: dict[str, Any]) -> str | None:
        """Write the record's scalars at its step (epoch records flush, for live readers); a line for
        train.log the first time no events can be written, else None."""
        kind = record.get(TYPE)
        if kind == RecordType.DIVERGED:
            self.diverged = True
        fields = SCALARS.get(kind)
        if fields is None or self.unavailable:
            return None
        if self.writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                self.unavailable = True
                return MISSING
            self.writer = SummaryWriter(str(self.directory), purge_step=record["step"])
            self._start(record["step"])
        for field, tag in fields.items():
            value = record.get(field)
            if isinstance(value, int | float):
                self.writer.add_scalar(tag, value, record["step"])
        if kind == RecordType.EPOCH:
            if isinstance(loss := record.get("val_loss"), int | float):
                self.best = loss if self.best is None else min(self.best, loss)
                self.writer.add_scalar(BEST_LOSS, self.best, record["step"])
            self.writer.flush()
        return None

    def close(self) -> None:
        """End the HParams session when this job finished the run, then close the event file."""
        if self.writer is None:
            return
        if RunRecord(self.run_dir).finished:
            self.writer.file_writer.add_summary(_session_end(failed=self.diverged))
        self.writer.close()

    def _start(self, step: int) -> None:
        """The slice's HParams summaries, and the best subset loss of the epochs before `step`."""
        from torch.utils.tensorboard.summary import hparams

        earlier = [
            r["val_loss"]
            for r in Metrics(RunPaths(self.run_dir).metrics).epochs
            if isinstance(r.get("step"), int) and r["step"] < step and isinstance(r.get("val_loss"), int | float)
        ]
        self.best = min(earlier, default=None)
        values = run_hparams(self.run_dir)
        if values is None:
            return
        experiment, start, _ = hparams(values, dict.fromkeys(METRICS, 0.0))
        for summary in (experiment, start):
            self.writer.file_writer.add_summary(summary, 0)


def run_hparams(run_dir: Path) -> dict[str, float | int | str] | None:
    """The run's HParams values from its recipe.yaml (None without one)."""
    from ebd2n.config import load_recipe

    recipe_file = RunPaths(run_dir).recipe
    if not recipe_file.is_file():
        return None
    recipe = load_recipe(recipe_file)
    settings = recipe.model_dump(mode="json")
    values: dict[str, Any] = {"mode": recipe.mode}
    for name, key in HPARAMS.items():
        value: Any = settings
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        values[name] = value
    if values["max_tokens"] is not None:  # the budget it trains to: tokens_per_parameter is ignored then
        values["tokens_per_parameter"] = None
    values["run"] = Path(run_dir).name
    return {name: value for name, value in values.items() if isinstance(value, int | float | str)}


def _session_end(failed: bool) -> Any:
    """The HParams session-end summary: success, or failure for a diverged run."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    status = api_pb2.Status.Value("STATUS_FAILURE" if failed else "STATUS_SUCCESS")
    content = plugin_data_pb2.HParamsPluginData(session_end_info=plugin_data_pb2.SessionEndInfo(status=status))
    return Summary(
        value=[Summary.Value(tag=metadata.SESSION_END_INFO_TAG, metadata=metadata.create_summary_metadata(content))]
    )
