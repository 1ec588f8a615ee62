"""TensorBoard's HParams view of runs as the trainer writes them, read back with TensorBoard's own
backend (its event multiplexer and the hparams plugin's handlers, offline): one row per run however
many slices trained it, its hyperparameters those of its recipe, its metrics the last subset loss,
the best one and the last training loss, and its status success, failure (diverged) or, between
slices, unknown."""

from __future__ import annotations

from pathlib import Path

import pytest
from sliced_runs import short_demo

from ebd2n.train import train
from ebd2n.train.records import read_metrics

pytest.importorskip("tensorboard")
START = "_hparams_/session_start_info"


def _rows(logdir: Path) -> dict[str, dict]:
    """TensorBoard's HParams table over `logdir`: session group -> its sessions, status, hparams, metrics."""
    from google.protobuf import json_format
    from tensorboard import context
    from tensorboard.backend.event_processing.data_provider import MultiplexerDataProvider
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups

    multiplexer = EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = MultiplexerDataProvider(multiplexer, str(logdir))
    backend = backend_context.Context(base_plugin.TBContext(logdir=str(logdir), data_provider=provider))
    request = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=100, allowed_statuses=api_pb2.Status.values())
    response = list_session_groups.Handler(context.RequestContext(), backend, "", request).run()
    return {
        group.name: {
            "sessions": [session.name for session in group.sessions],
            "status": [api_pb2.Status.Name(session.status) for session in group.sessions],
            "hparams": {key: json_format.MessageToDict(value) for key, value in group.hparams.items()},
            "metrics": {metric.name.tag: metric.value for metric in group.metric_values},
        }
        for group in response.session_groups
    }


def _expected_hparams(recipe, run_id: str) -> dict:
    """The recipe's values as the HParams table holds them (numbers as floats)."""
    optimizer, training = recipe.optimizer, recipe.training
    return {
        "mode": recipe.mode,
        "lr": optimizer.lr,
        "beta1": optimizer.beta1,
        "beta2": optimizer.beta2,
        "weight_decay": optimizer.weight_decay,
        "schedule": optimizer.schedule,
        "batch_tokens": float(training.batch_tokens),
        "max_tokens": float(training.max_tokens),  # the budget: tokens_per_parameter is ignored beside it
        "layers": float(recipe.model.layers),
        "width": float(recipe.model.width),
        "seed": float(recipe.runtime.seed),
        "run": run_id,
    }


@pytest.fixture(scope="module")
def campaign(demo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two runs under one logdir: `sliced` trained in two slices (the table read between them and
    after), `diverged` at lr 1000; their recipes and the tables."""
    runs = tmp_path_factory.mktemp("hparams") / "runs"
    sliced = short_demo(demo_cache, runs / "sliced", "optimizer.beta1=0.85", "optimizer.weight_decay=0.05")
    diverged = short_demo(demo_cache, runs / "diverged", "optimizer.lr=1000", "training.max_consecutive_skips=3")
    train(sliced, until_epoch=2, progress=False)
    between = _rows(runs)
    train(sliced, progress=False)
    train(diverged, progress=False)
    return {"runs": runs, "sliced": sliced, "diverged": diverged, "between": between, "after": _rows(runs)}


def test_hparams_session_start_of_a_run_equals_its_recipe(campaign: dict) -> None:
    """TensorBoard's own reader and the hparams plugin's parser find the recipe's values in the run."""
    from google.protobuf import json_format
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams.metadata import parse_session_start_info_plugin_data

    reader = EventAccumulator(str(campaign["runs"] / "sliced/tensorboard"))
    reader.Reload()
    start = parse_session_start_info_plugin_data(reader.SummaryMetadata(START).plugin_data.content)
    result = {key: json_format.MessageToDict(value) for key, value in start.hparams.items()}
    assert result == _expected_hparams(campaign["sliced"], "sliced")


def test_hparams_view_shows_one_row_per_run_with_its_status_and_metrics(campaign: dict) -> None:
    runs = campaign["runs"]
    epochs = [r for r in read_metrics(runs / "sliced") if r["type"] == "epoch"]
    steps = [r for r in read_metrics(runs / "sliced") if r["type"] == "step"]
    after = campaign["after"]
    result = (
        len(list((runs / "sliced/tensorboard").glob("events.out.tfevents.*"))),
        {name: (row["sessions"], row["status"]) for name, row in after.items()},
        after["sliced/tensorboard"]["hparams"],
        after["sliced/tensorboard"]["metrics"],
        after["diverged/tensorboard"]["hparams"]["lr"],
    )
    assert result == (
        2,  # one event file per slice, one row
        {
            "diverged/tensorboard": (["diverged/tensorboard"], ["STATUS_FAILURE"]),
            "sliced/tensorboard": (["sliced/tensorboard"], ["STATUS_SUCCESS"]),
        },
        _expected_hparams(campaign["sliced"], "sliced"),
        {
            "subset_validation/loss": pytest.approx(epochs[-1]["val_loss"], rel=1e-6),
            "subset_validation/best_loss": pytest.approx(min(e["val_loss"] for e in epochs), rel=1e-6),
            "train/loss": pytest.approx(steps[-1]["loss"], rel=1e-6),
        },
        1000.0,
    )


def test_hparams_view_between_slices_shows_the_run_with_no_end_yet(campaign: dict) -> None:
    between = campaign["between"]
    result = {name: (row["status"], row["hparams"]["run"]) for name, row in between.items()}
    assert result == {"sliced/tensorboard": (["STATUS_UNKNOWN"], "sliced")}


def test_best_loss_counts_the_epochs_of_earlier_slices(tmp_path: Path) -> None:
    """A slice whose epoch is worse than an earlier slice's best writes that best (read from
    metrics.jsonl, as the resumed slice left it), not its own loss."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ebd2n.train.events import BEST_LOSS, EventLog
    from ebd2n.train.runlog import MetricsLog

    slices = [
        [{"type": "step", "step": 1, "loss": 4.0}, {"type": "epoch", "epoch": 1, "step": 1, "val_loss": 3.0}],
        [{"type": "step", "step": 2, "loss": 3.5}, {"type": "epoch", "epoch": 2, "step": 2, "val_loss": 2.0}],
        [{"type": "step", "step": 3, "loss": 3.9}, {"type": "epoch", "epoch": 3, "step": 3, "val_loss": 2.5}],
    ]
    written = tmp_path / "metrics.jsonl"
    for records in slices:  # each slice resumes where the one before ended
        metrics, events = MetricsLog(tmp_path), EventLog(tmp_path)
        metrics.load_state_dict({"offset": written.stat().st_size if written.exists() else 0})
        for record in records:
            metrics.append(record)
            events.add(record)
        metrics.close()
        events.close()
    reader = EventAccumulator(str(tmp_path / "tensorboard"))
    reader.Reload()
    result = [(event.step, event.value) for event in reader.Scalars(BEST_LOSS)]
    assert result == [(1, 3.0), (2, 2.0), (3, 2.0)]
