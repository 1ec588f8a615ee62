"""Training runtime: schedule, slices and exact resume, checkpoints, skips, full validation."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from workflow_support import assert_states_equal, comparable_metrics, killed_write

from ebd2n.audit.run_history import log_blocks, overlapping_blocks
from ebd2n.config import load_recipe
from ebd2n.data import open_cache
from ebd2n.errors import UserError
from ebd2n.evaluate import validate_run
from ebd2n.train import train
from ebd2n.train.budget import budget_of
from ebd2n.train.checkpoint import load_checkpoint, save_checkpoint
from ebd2n.train.engine import build_engine, configure_torch
from ebd2n.train.records import read_metrics
from ebd2n.train.schedule import learning_rate

SRC = Path(__file__).resolve().parents[1] / "src"


def _recipe(cache_dir: Path, run_dir: Path, *overrides: str):
    return load_recipe(
        "demo",
        [
            f"data.cache_dir={cache_dir}",
            f"runtime.output_dir={run_dir}",
            "training.max_tokens=16384",
            "training.epoch_tokens=4096",
            *overrides,
        ],
    )


def _weights(run_dir: Path) -> dict:
    return load_checkpoint(run_dir / "final.pt")["engine"]


@pytest.mark.parametrize(("tokens", "expected"), [(1, 0.001 / 5), (4, 0.001 * 4 / 5), (5, 0.001), (100, 0.0001)])
def test_learning_rate_known_positions(tokens: int, expected: float) -> None:
    optimizer = load_recipe(
        "demo", ["optimizer.lr=0.001", "optimizer.min_lr_ratio=0.1", "optimizer.warmup_fraction=0.05"]
    ).optimizer
    result = learning_rate(tokens, 100, optimizer)  # warm-up over the first 5 of 100 tokens
    assert result == pytest.approx(expected)


def test_learning_rate_midpoint_of_cosine() -> None:
    optimizer = load_recipe(
        "demo", ["optimizer.lr=0.001", "optimizer.min_lr_ratio=0.1", "optimizer.warmup_fraction=0.05"]
    ).optimizer
    result = learning_rate(5 + 47, 100, optimizer)
    assert result == pytest.approx(0.0001 + 0.0009 * 0.5 * (1 + math.cos(math.pi * 47 / 95)))


def test_train_loss_falls_below_unigram_entropy(demo_cache: Path, tmp_path: Path) -> None:
    # 5 epochs: when the run leaves the unigram plateau varies by tens of steps with small schedule changes
    recipe = _recipe(demo_cache, tmp_path / "run", "training.max_tokens=245760", "training.epoch_tokens=49152")
    train(recipe, progress=False)
    cache = open_cache(demo_cache)
    tokens = np.fromfile(
        cache.directory / cache.manifest["splits"]["validation"]["shards"][0]["file"], dtype=cache.dtype
    )
    counts = np.bincount(tokens).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    unigram_entropy = float(-(p * np.log(p)).sum())
    final_val_loss = read_metrics(tmp_path / "run")[-1]["val_loss"]
    print("VAL", final_val_loss, unigram_entropy)
    assert final_val_loss < unigram_entropy - 1.0


def test_two_slices_equal_one_job_bitwise(demo_cache: Path, tmp_path: Path) -> None:
    whole = _recipe(demo_cache, tmp_path / "whole")
    train(whole, progress=False)
    sliced = _recipe(demo_cache, tmp_path / "sliced")
    train(sliced, until_epoch=2, progress=False)
    train(sliced, resume=tmp_path / "sliced/checkpoints/epoch-2.pt", progress=False)
    assert_states_equal(_weights(tmp_path / "whole"), _weights(tmp_path / "sliced"))
    assert comparable_metrics(tmp_path / "whole") == comparable_metrics(tmp_path / "sliced")


def test_packed_two_slices_equal_one_job_bitwise(demo_cache: Path, tmp_path: Path) -> None:
    whole = _recipe(demo_cache, tmp_path / "whole", "decentralized.num_models=4")
    train(whole, progress=False)
    sliced = _recipe(demo_cache, tmp_path / "sliced", "decentralized.num_models=4")
    train(sliced, until_epoch=1, progress=False)
    train(sliced, resume=tmp_path / "sliced/checkpoints/epoch-1.pt", until_epoch=3, progress=False)
    train(sliced, resume=tmp_path / "sliced/checkpoints/epoch-3.pt", progress=False)
    assert_states_equal(_weights(tmp_path / "whole"), _weights(tmp_path / "sliced"))
    assert comparable_metrics(tmp_path / "whole") == comparable_metrics(tmp_path / "sliced")


@pytest.mark.parametrize(
    "overrides",
    [
        ("training.max_tokens=9600", "training.epoch_tokens=3200"),  # epochs of 50 blocks: 3 steps of 16, then 2
        ("training.max_tokens=9984", "training.epoch_tokens=3328", "decentralized.num_models=4"),  # 52: 16, 16, 16, 4
    ],
)
def test_shortened_epoch_steps_resume_bitwise(demo_cache: Path, tmp_path: Path, overrides: tuple[str, ...]) -> None:
    whole = _recipe(demo_cache, tmp_path / "whole", *overrides)
    train(whole, progress=False)
    sliced = _recipe(demo_cache, tmp_path / "sliced", *overrides)
    train(sliced, until_epoch=1, progress=False)
    train(sliced, resume=tmp_path / "sliced/checkpoints/epoch-1.pt", progress=False)
    assert_states_equal(_weights(tmp_path / "whole"), _weights(tmp_path / "sliced"))
    metrics = comparable_metrics(tmp_path / "whole")
    assert metrics == comparable_metrics(tmp_path / "sliced")
    epochs = [(r["step"], r["tokens"]) for r in metrics if r["type"] == "epoch"]
    blocks = 50 if whole.decentralized is None else 52
    assert epochs == [(4 * e, e * blocks * 64) for e in (1, 2, 3)]


def test_slice_record_rewritten_without_a_killed_writers_temporary(demo_cache: Path, tmp_path: Path) -> None:
    """A job killed while it wrote its slice record leaves the record's temporary and no record; the
    job run again (its checkpoint is there: it trains nothing) writes the record and removes the
    temporary, which the audit would name as a stray file."""
    recipe = _recipe(demo_cache, tmp_path / "run")
    train(recipe, until_epoch=1, progress=False)
    record = tmp_path / "run" / "slices" / "epoch-1.json"
    content = record.read_bytes()
    record.unlink()
    leftover = killed_write(record, content)
    train(recipe, until_epoch=1, progress=False)
    assert record.read_bytes() == content and not leftover.exists()


def test_killed_slice_rerun_replaces_its_partial_metrics(demo_cache: Path, tmp_path: Path) -> None:
    recipe = _recipe(demo_cache, tmp_path / "run")
    train(recipe, until_epoch=2, progress=False)
    with open(tmp_path / "run/metrics.jsonl", "a") as handle:  # what a killed slice 2 left behind
        handle.write('{"type":"step","step":9,"loss":1.0}\n{"type":"st')
    train(recipe, resume=tmp_path / "run/checkpoints/epoch-2.pt", progress=False)
    steps = [r["step"] for r in read_metrics(tmp_path / "run") if r["type"] == "step"]
    assert steps == list(range(1, budget_of(recipe).total_steps + 1))


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("final", {"final.pt"}),
        ("epoch", {"final.pt", "checkpoints/epoch-1.pt", "checkpoints/epoch-2.pt", "checkpoints/epoch-3.pt"}),
        (
            "all",
            {
                "final.pt",
                "checkpoints/epoch-0.pt",
                "checkpoints/epoch-1.pt",
                "checkpoints/epoch-2.pt",
                "checkpoints/epoch-3.pt",
            },
        ),
        ("interval;training.checkpoint_epochs=2", {"final.pt", "checkpoints/epoch-2.pt"}),
        ("explicit;training.checkpoint_epochs=[3,1]", {"final.pt", "checkpoints/epoch-1.pt", "checkpoints/epoch-3.pt"}),
    ],
)
def test_checkpoint_policy_retention(demo_cache: Path, tmp_path: Path, policy: str, expected: set[str]) -> None:
    """Four epochs in two slices; under explicit, the first slice's end (epoch 2, kept while the run
    trains on) goes once the second slice is done."""
    recipe = _recipe(demo_cache, tmp_path / "run", *f"training.checkpoint_policy={policy}".split(";"))
    train(recipe, until_epoch=2, progress=False)
    train(recipe, resume=tmp_path / "run/checkpoints/epoch-2.pt", progress=False)
    result = {p.relative_to(tmp_path / "run").as_posix() for p in (tmp_path / "run").rglob("*.pt")}
    assert result == expected


@pytest.mark.parametrize("policy", ["epoch", "all"])
def test_first_slice_killed_midway_reruns_bitwise(demo_cache: Path, tmp_path: Path, policy: str) -> None:
    """A two-epoch first slice killed after its epoch-1 checkpoint: the same command again resumes from
    it and ends bit for bit as an uninterrupted slice; once more, it finds epoch 2 reached and does nothing."""
    whole = _recipe(demo_cache, tmp_path / "whole", f"training.checkpoint_policy={policy}")
    train(whole, until_epoch=2, progress=False)
    killed = _recipe(demo_cache, tmp_path / "killed", f"training.checkpoint_policy={policy}")
    train(killed, until_epoch=1, progress=False)  # what the killed slice left: its epoch-1 checkpoint
    train(killed, until_epoch=2, progress=False)
    assert_states_equal(
        load_checkpoint(tmp_path / "whole/checkpoints/epoch-2.pt")["engine"],
        load_checkpoint(tmp_path / "killed/checkpoints/epoch-2.pt")["engine"],
    )
    log = (tmp_path / "killed/train.log").read_bytes()
    again = train(killed, until_epoch=2, progress=False)
    assert (again, (tmp_path / "killed/train.log").read_bytes() == log) == (False, True)


def test_the_same_command_resumes_by_itself_bitwise(demo_cache: Path, tmp_path: Path) -> None:
    """No --resume: each job starts from the run directory's newest valid checkpoint; the consumed
    slice checkpoint and its emptied folder go (policy final), the slice record stays."""
    train(_recipe(demo_cache, tmp_path / "whole"), progress=False)
    sliced = _recipe(demo_cache, tmp_path / "sliced")
    first = train(sliced, until_epoch=1, progress=False)
    second = train(sliced, progress=False)
    assert_states_equal(_weights(tmp_path / "whole"), _weights(tmp_path / "sliced"))
    kept = sorted(p.relative_to(tmp_path / "sliced").as_posix() for p in (tmp_path / "sliced").rglob("*") if p.is_dir())
    records = json.loads((tmp_path / "sliced/slices/epoch-1.json").read_text())
    assert (first, second, kept, records) == (True, True, ["slices", "tensorboard"], {"epoch": 1, "epochs": 4})


def test_a_finished_run_trained_again_changes_nothing(demo_cache: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    recipe = _recipe(demo_cache, run)
    train(recipe, progress=False)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    result = (train(recipe, progress=False), train(recipe, until_epoch=1, progress=False))
    after = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert (result, after == before) == ((False, False), True)


def test_an_altered_newest_checkpoint_is_passed_over(demo_cache: Path, tmp_path: Path) -> None:
    """A newer checkpoint that fails its ledger hash is not resumed from: the run goes on from the
    newest valid one, says why in train.log, and ends as the uninterrupted run."""
    train(_recipe(demo_cache, tmp_path / "whole", "training.checkpoint_policy=epoch"), progress=False)
    recipe = _recipe(demo_cache, tmp_path / "run", "training.checkpoint_policy=epoch")
    train(recipe, until_epoch=2, progress=False)
    newest = tmp_path / "run/checkpoints/epoch-2.pt"
    newest.write_bytes(newest.read_bytes()[:-10])
    train(recipe, progress=False)
    log = (tmp_path / "run/train.log").read_text()
    assert_states_equal(_weights(tmp_path / "whole"), _weights(tmp_path / "run"))
    assert "passed over checkpoint" in log and "resume from checkpoints/epoch-1.pt at epoch 1" in log


def test_temporaries_of_killed_writes_are_removed_by_the_next_writer(demo_cache: Path, tmp_path: Path) -> None:
    """A job killed inside an atomic write leaves `.<name>.<random>.tmp`: the next trainer of the run
    (under its lease) and the run's validation remove it, so the run holds only what its policy keeps."""
    run = tmp_path / "run"
    recipe = _recipe(demo_cache, run)
    train(recipe, until_epoch=1, progress=False)
    in_checkpoints = killed_write(run / "checkpoints/epoch-2.pt", b"half a checkpoint")
    in_run = killed_write(run / "run.json", b"{")
    train(recipe, resume=run / "checkpoints/epoch-1.pt", progress=False)
    removed = [line for line in (run / "train.log").read_text().splitlines() if "temporary file of a write" in line]
    in_results = killed_write(run / "results.json", b"{")
    validate_run(run)
    assert ([p.exists() for p in (in_checkpoints, in_run, in_results)], len(removed)) == ([False, False, False], 2)


def test_best_json_has_null_weights_under_final(demo_cache: Path, tmp_path: Path) -> None:
    train(_recipe(demo_cache, tmp_path / "run"), progress=False)
    best = json.loads((tmp_path / "run/best.json").read_text())
    assert best["weights"] is None and best["epoch"] >= 1


def test_train_log_has_one_job_header_per_slice(demo_cache: Path, tmp_path: Path) -> None:
    recipe = _recipe(demo_cache, tmp_path / "run")
    train(recipe, until_epoch=1, progress=False)
    train(recipe, resume=tmp_path / "run/checkpoints/epoch-1.pt", progress=False)
    lines = (tmp_path / "run/train.log").read_text().splitlines()
    result = (
        Counter("##########" in line for line in lines)[True],
        sum(" | val loss " in line for line in lines),
        sum(line.endswith(" model:") for line in lines),
        sum(" recipe as in the first slice " in line for line in lines),
    )
    assert result == (2, 4, 1, 1)  # the whole recipe in the first slice only, its identity in the second


def test_cli_train_piped_prints_summaries_and_no_progress_bars(demo_cache: Path, tmp_path: Path) -> None:
    """Outside a terminal: no carriage-return progress bars; each slice ends on a line saying what it left."""
    run = tmp_path / "run"
    settings = [
        "--set",
        f"data.cache_dir={demo_cache}",
        "--set",
        f"runtime.output_dir={run}",
        "--set",
        "training.max_tokens=8192",
        "--set",
        "training.epoch_tokens=4096",
    ]
    first = _cli("train", "--config", "demo", *settings, "--until-epoch", "1")
    second = _cli("train", "--config", "demo", *settings, "--resume", str(run / "checkpoints/epoch-1.pt"))
    loss = read_metrics(run)[-1]["val_loss"]
    result = (
        [first.returncode, second.returncode],
        "\r" in first.stderr + second.stderr,
        first.stdout.splitlines()[-1].split(";")[0],
        second.stdout.splitlines()[-1].split(";")[0],
        f"validation loss {loss:.4f}," in second.stdout,
    )
    assert result == (
        [0, 0],
        False,
        f"slice done: epoch 1 of {run}",
        f"done: {run}/final.pt, dashboard {run}/report.html",
        True,
    )
    # the lines the jobs appended after their trainers' (dashboard, CPU time) are the audit's one trainer's
    blocks = log_blocks((run / "train.log").read_text())
    assert (len(blocks), overlapping_blocks(blocks)) == (2, [])


def test_optimizer_takes_the_recipes_betas_and_eps(demo_cache: Path, tmp_path: Path) -> None:
    recipe = _recipe(demo_cache, tmp_path / "run", "optimizer.beta1=0.8", "optimizer.beta2=0.95", "optimizer.eps=1e-6")
    engine = build_engine(recipe, budget_of(recipe), torch.device("cpu"))
    group = engine.optimizer.param_groups[0]
    assert (group["betas"], group["eps"]) == ((0.8, 0.95), 1e-6)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-m", "ebd2n", *args], capture_output=True, text=True, env=env, timeout=300)


def _is_recorded(run_dir: Path, relative: str) -> bool:
    """The file is there and is the one the run's ledger recorded (a verified load accepts it)."""
    try:
        load_checkpoint(run_dir / relative)
    except UserError:
        return False
    return True


def test_corrupt_checkpoint_refused(demo_cache: Path, tmp_path: Path) -> None:
    recipe = _recipe(demo_cache, tmp_path / "run")
    train(recipe, until_epoch=2, progress=False)
    checkpoint = tmp_path / "run/checkpoints/epoch-2.pt"
    whole = _is_recorded(tmp_path / "run", "checkpoints/epoch-2.pt")
    checkpoint.write_bytes(checkpoint.read_bytes()[:-100])
    with pytest.raises(UserError, match=r"epoch-2\.pt: SHA-256 .* does not match"):
        train(recipe, resume=checkpoint, progress=False)
    result = (
        whole,
        _is_recorded(tmp_path / "run", "checkpoints/epoch-2.pt"),
        _is_recorded(tmp_path / "run", "final.pt"),
    )
    assert result == (True, False, False)


def test_foreign_checkpoint_refused(demo_cache: Path, tmp_path: Path) -> None:
    train(_recipe(demo_cache, tmp_path / "run"), until_epoch=2, progress=False)
    other = _recipe(demo_cache, tmp_path / "run", "optimizer.lr=0.0042")
    with pytest.raises(UserError, match="recipe identity .* another recipe"):
        train(other, resume=tmp_path / "run/checkpoints/epoch-2.pt", progress=False)


def test_missing_checkpoint_refused(demo_cache: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="nope.pt: no such file"):
        train(_recipe(demo_cache, tmp_path / "run"), resume=tmp_path / "nope.pt", progress=False)


def test_until_epoch_beyond_budget_refused(demo_cache: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--until-epoch 9: must be .* at most the budget's 4 epochs"):
        train(_recipe(demo_cache, tmp_path / "run"), until_epoch=9, progress=False)


def test_output_dir_of_another_run_refused(demo_cache: Path, tmp_path: Path) -> None:
    train(_recipe(demo_cache, tmp_path / "run"), until_epoch=1, progress=False)
    before = (tmp_path / "run/recipe.yaml").read_bytes()
    with pytest.raises(UserError, match="holds a different run"):
        train(_recipe(demo_cache, tmp_path / "run", "runtime.seed=7"), progress=False)
    assert (tmp_path / "run/recipe.yaml").read_bytes() == before


def test_batch_not_divisible_into_blocks_refused(demo_cache: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"training.batch_tokens \(1000\) must be a multiple of model.context_length"):
        train(_recipe(demo_cache, tmp_path / "run", "training.batch_tokens=1000"), progress=False)


def test_non_finite_step_is_skipped_and_counted(demo_cache: Path, tmp_path: Path) -> None:
    recipe = _recipe(demo_cache, tmp_path / "run")
    torch.manual_seed(0)
    engine = build_engine(recipe, budget_of(recipe), torch.device("cpu"))
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    handle = engine.model.embed.weight.register_hook(lambda grad: grad * float("nan"))
    sequences = torch.randint(0, recipe.model.vocab_size, (16, recipe.model.context_length + 1))
    result = engine.train_step(sequences, lr=0.01)
    handle.remove()
    assert_states_equal(before, engine.model.state_dict())
    assert result.skipped and engine.optimizer.state == {}


def test_full_validation_counts_every_target(demo_cache: Path, tmp_path: Path) -> None:
    train(_recipe(demo_cache, tmp_path / "run"), progress=False)
    results = validate_run(tmp_path / "run")
    assert results["targets"] == open_cache(demo_cache).validation_targets


def test_full_validation_of_packed_run(demo_cache: Path, tmp_path: Path) -> None:
    train(_recipe(demo_cache, tmp_path / "run", "decentralized.num_models=4"), progress=False)
    results = validate_run(tmp_path / "run")
    assert results["mode"] == "packed-4" and math.isfinite(results["loss"])


def test_dashboard_of_each_slice_and_the_final_one_covering_every_slice(demo_cache: Path, tmp_path: Path) -> None:
    """`ebd2n train` (the trainer's caller) writes a page saying it is not final when a slice ends,
    and the final one when its slice completes the run."""
    settings = [
        "--set",
        f"data.cache_dir={demo_cache}",
        "--set",
        f"runtime.output_dir={tmp_path / 'run'}",
        "--set",
        "training.max_tokens=8192",
        "--set",
        "training.epoch_tokens=2048",
    ]
    _cli("train", "--config", "demo", *settings, "--until-epoch", "2")
    after_first_slice = 'id="live"' in (tmp_path / "run/live.html").read_text()
    _cli("train", "--config", "demo", *settings, "--resume", str(tmp_path / "run/checkpoints/epoch-2.pt"))
    job_ids = json.loads((tmp_path / "run/run.json").read_text())["job_ids"]
    page = (tmp_path / "run/report.html").read_text()
    writes = (tmp_path / "run/train.log").read_text().count(" dashboard ")
    live = (tmp_path / "run/live.html").exists()
    result = (after_first_slice, 'id="live"' in page, live, len(job_ids), all(j in page for j in job_ids), writes)
    assert result == (True, False, False, 2, True, 2)


def test_fresh_start_ignores_ledger_entries_of_deleted_checkpoints(demo_cache: Path, tmp_path: Path) -> None:
    recipe = _recipe(demo_cache, tmp_path / "run")
    train(recipe, until_epoch=1, progress=False)
    (tmp_path / "run/checkpoints/epoch-1.pt").unlink()  # what Snakemake does to a killed job's output
    train(recipe, until_epoch=1, progress=False)
    result = (tmp_path / "run/checkpoints/epoch-1.pt").exists()
    assert result


def test_deterministic_recipe_fixes_cublas_workspace_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    configure_torch(load_recipe("demo", ["runtime.deterministic=false"]))
    after_nondeterministic = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    configure_torch(load_recipe("demo", ["runtime.deterministic=true"]))
    after_deterministic = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    configure_torch(load_recipe("demo", ["runtime.deterministic=true"]))
    result = (after_nondeterministic, after_deterministic, os.environ["CUBLAS_WORKSPACE_CONFIG"])
    assert result == (None, ":4096:8", ":16:8")


def test_checkpoint_is_the_assembly_of_the_trainer_parts(demo_cache: Path, tmp_path: Path) -> None:
    """One entry per stateful part (engine, data position, RNG, counters, metrics writer) under the
    provenance header; the job ids once, in the counters."""
    run = tmp_path / "run"
    train(_recipe(demo_cache, run), until_epoch=1, progress=False)
    state = load_checkpoint(run / "checkpoints/epoch-1.pt")
    result = (
        sorted(state),
        state["data"],
        state["progress"]["epoch"],
        len(state["progress"]["job_ids"]),
        state["metrics"]["offset"] == (run / "metrics.jsonl").stat().st_size,
        state["tokens"],
    )
    assert result == (
        [
            "cache_identity",
            "data",
            "engine",
            "format",
            "metrics",
            "progress",
            "recipe_identity",
            "rng",
            "run_id",
            "source_hash",
            "tokens",
        ],
        {"step": 4},
        1,
        1,
        True,
        4096,
    )


def _as_format_1(state: dict) -> dict:
    """A format-2 checkpoint as an older ebd2n wrote it: counters, RNG and metrics offset in loose keys."""
    progress = {**state["progress"], "step": state["data"]["step"]}
    header = {key: state[key] for key in ("run_id", "recipe_identity", "cache_identity", "source_hash", "tokens")}
    return {
        **header,
        "format": 1,
        "epoch": progress["epoch"],
        "step": progress["step"],
        "engine": state["engine"],
        "progress": progress,
        "rng": state["rng"],
        "metrics_offset": state["metrics"]["offset"],
        "job_ids": progress["job_ids"],
    }


def test_older_checkpoint_format_is_refused_for_resume_in_one_line(demo_cache: Path, tmp_path: Path) -> None:
    recipe = _recipe(demo_cache, tmp_path / "run")
    train(recipe, until_epoch=1, progress=False)
    checkpoint = tmp_path / "run/checkpoints/epoch-1.pt"
    save_checkpoint(tmp_path / "run", "checkpoints/epoch-1.pt", _as_format_1(load_checkpoint(checkpoint)))
    with pytest.raises(
        UserError, match=r"epoch-1\.pt: format 1, written by an older ebd2n; .* training\.init_from"
    ) as refused:
        train(recipe, resume=checkpoint, progress=False)
    assert "\n" not in str(refused.value)


def test_older_final_checkpoint_still_validates_and_initialises(demo_cache: Path, tmp_path: Path) -> None:
    """Validation and training.init_from read the weights and job ids, which format 1 holds alike;
    a format this ebd2n does not know is refused."""
    from ebd2n.train.weights import checkpoint_weights

    run = tmp_path / "run"
    train(_recipe(demo_cache, run, "training.max_tokens=4096"), progress=False)
    current, state = validate_run(run), load_checkpoint(run / "final.pt")
    weights = checkpoint_weights(run / "final.pt")
    save_checkpoint(run, "final.pt", _as_format_1(state))
    older = validate_run(run)
    assert (older["loss"], older["job_ids"]) == (current["loss"], current["job_ids"])
    assert_states_equal(checkpoint_weights(run / "final.pt"), weights)
    save_checkpoint(run, "final.pt", {**state, "format": 3})
    with pytest.raises(
        UserError, match=r"final\.pt: format 3, not one this ebd2n reads .* the ebd2n version that wrote it"
    ):
        checkpoint_weights(run / "final.pt")


def test_tensorboard_events_mirror_metrics_between_slices_and_after_a_resume(demo_cache: Path, tmp_path: Path) -> None:
    """TensorBoard's own reader finds every step's loss and every epoch's subset loss, as metrics.jsonl
    has them, after the first slice; after epochs 3-4 are trained again from the epoch-2 checkpoint,
    each step is there once (the new event file purges what the earlier attempt wrote from there)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    recipe = _recipe(demo_cache, run, "training.checkpoint_policy=epoch")

    def events() -> tuple[list, list]:
        reader = EventAccumulator(str(run / "tensorboard"))
        reader.Reload()
        return tuple(
            [(e.step, e.value) for e in reader.Scalars(tag)] for tag in ("train/loss", "subset_validation/loss")
        )

    def recorded() -> tuple[list, list]:
        records = read_metrics(run)
        return tuple(
            [(r["step"], pytest.approx(r[field], rel=1e-6)) for r in records if r["type"] == kind]
            for kind, field in (("step", "loss"), ("epoch", "val_loss"))
        )

    train(recipe, until_epoch=2, progress=False)
    between = (events(), recorded())
    train(recipe, progress=False)
    train(recipe, resume=run / "checkpoints/epoch-2.pt", progress=False)
    after, steps = events(), [record["step"] for record in read_metrics(run) if record["type"] == "step"]
    assert (between[0] == between[1], after == recorded(), [step for step, _ in after[0]] == steps) == (
        True,
        True,
        True,
    )
