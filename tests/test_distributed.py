"""Multi-process training on the CPU (gloo, 2 processes): pipeline and data-parallel runs equal one process."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from engine_steps import fixed_steps
from workflow_support import comparable_metrics

import ebd2n
from ebd2n.config import load_recipe
from ebd2n.data import open_cache
from ebd2n.errors import UserError
from ebd2n.evaluate import validate_run
from ebd2n.model import GPT, model_units
from ebd2n.parallel import distributed, plan_placement
from ebd2n.parallel.pipeline import StageModule, bubble_fraction, pipeline_rounds
from ebd2n.train.budget import budget_of
from ebd2n.train.checkpoint import load_checkpoint
from ebd2n.train.engine import build_engine

SHORT = ["training.max_tokens=16384", "training.epoch_tokens=4096"]
LAYOUTS = {
    "pipeline-1f1b": ["parallel.pipeline_stages=2", "parallel.pipeline_depth=2", "parallel.schedule=1f1b"],
    "pipeline-gpipe": ["parallel.pipeline_stages=2", "parallel.pipeline_depth=2", "parallel.schedule=gpipe"],
    "data-parallel": ["parallel.data_parallel=2"],
    "pipeline-depth3": [
        "parallel.pipeline_stages=2",
        "parallel.pipeline_depth=3",
        "parallel.schedule=1f1b",
    ],  # uneven rounds
}
ROWS = (16, 5, 1, 16)
"""Sequences of the compared steps: full ones and shortened ones (an epoch's last step) whose rows split
unevenly over replicas or leave a replica without rows."""


def _recipe(*overrides: str):
    return load_recipe("demo", [*SHORT, *overrides])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _steps(engine, recipe, rows: tuple[int, ...] = ROWS) -> list[dict]:
    return fixed_steps(engine, recipe, rows)


def _supervised_steps(engine, recipe) -> list[dict]:
    """Steps on supervised blocks: prompt prefixes of varying length masked (~id); in the short step two rows
    carry no loss at all, so a data-parallel replica gets none (its rows add nothing)."""
    generator = torch.Generator().manual_seed(1)
    results = []
    for count in (16, 5):
        sequences = torch.randint(
            0, recipe.model.vocab_size, (count, recipe.model.context_length + 1), generator=generator
        )
        for row in range(count):
            prompt = (
                recipe.model.context_length + 1
                if count == 5 and row >= 3
                else 3 + 7 * row % recipe.model.context_length
            )
            sequences[row, :prompt] = ~sequences[row, :prompt]
        results.append(dataclasses.asdict(engine.train_step(sequences, lr=0.01)))
    return results


def _layout_worker(rank: int, port: int, out_dir: Path) -> None:
    """One of two processes: every layout of LAYOUTS in turn, the steps of ROWS and then one step made non-finite on
    rank 1 only; rank 0 saves the results and the assembled weights."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    for name, overrides in LAYOUTS.items():
        recipe = _recipe(*overrides)
        context = distributed.init(recipe)
        torch.manual_seed(recipe.runtime.seed)
        engine = build_engine(recipe, budget_of(recipe), context.device, context)
        results = _steps(engine, recipe) + _supervised_steps(engine, recipe)
        if rank == 1:
            next(engine.model.parameters()).register_hook(lambda grad: grad * float("nan"))
        poisoned = _steps(engine, recipe, rows=(16,))[0]
        state = engine.state_dict()
        if context.is_main:
            torch.save({"results": results, "poisoned": poisoned, "model": state["model"]}, out_dir / f"{name}.pt")
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def reference() -> dict:
    recipe = _recipe()
    torch.manual_seed(recipe.runtime.seed)
    engine = build_engine(recipe, budget_of(recipe), torch.device("cpu"))
    results = _steps(engine, recipe) + _supervised_steps(engine, recipe)
    return {"results": results, "model": engine.state_dict()["model"]}


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out_dir = tmp_path_factory.mktemp("layouts")
    mp.spawn(_layout_worker, args=(_free_port(), out_dir), nprocs=2)
    return {name: torch.load(out_dir / f"{name}.pt", weights_only=True) for name in LAYOUTS}


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_layout_losses_equal_one_process(layouts: dict, reference: dict, layout: str) -> None:
    result = [
        v for r in layouts[layout]["results"] for v in (r["loss"], r["accuracy"], r["grad_norm"], float(r["skipped"]))
    ]
    expected = [
        v for r in reference["results"] for v in (r["loss"], r["accuracy"], r["grad_norm"], float(r["skipped"]))
    ]
    assert result == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_layout_weights_equal_one_process(layouts: dict, reference: dict, layout: str) -> None:
    result, expected = layouts[layout]["model"], reference["model"]
    torch.testing.assert_close(result, expected, rtol=0, atol=1e-4)  # also requires the same keys


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_layout_non_finite_gradient_on_one_rank_skips_everywhere(layouts: dict, layout: str) -> None:
    # rank 0 reports the skip, and its weights equal the reference's after the steps of ROWS (tested above)
    result = layouts[layout]["poisoned"]["skipped"]
    assert result is True


@pytest.mark.slow
def test_pipeline_tied_copies_stay_equal(layouts: dict) -> None:
    model = layouts["pipeline-1f1b"]["model"]
    assert torch.equal(model["head.weight"], model["embed.weight"])


# --- whole runs under torchrun: slices, checkpoints, records ---


def _torchrun_train(
    cache: Path, run_dir: Path, *arguments: str, layout: tuple[str, ...] = (*SHORT, *LAYOUTS["pipeline-1f1b"])
) -> None:
    """`torchrun --nproc-per-node 2 -m ebd2n train` of the demo as a 2-stage pipeline."""
    overrides = [f"data.cache_dir={cache}", f"runtime.output_dir={run_dir}", *layout]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "ebd2n",
        "train",
        "--config",
        "demo",
        "--quiet",
        *[f"--set={o}" for o in overrides],
        *arguments,
    ]
    source = str(Path(ebd2n.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    finished = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=900)
    assert finished.returncode == 0, finished.stderr[-4000:]


@pytest.fixture(scope="module")
def pipeline_runs(demo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One whole 2-stage run and the same run in two slices (epochs 0..2, then 2..4)."""
    root = tmp_path_factory.mktemp("pipeline-runs")
    _torchrun_train(demo_cache, root / "whole")
    _torchrun_train(demo_cache, root / "sliced", "--until-epoch", "2")
    _torchrun_train(demo_cache, root / "sliced", "--resume", str(root / "sliced/checkpoints/epoch-2.pt"))
    return root / "whole", root / "sliced"


@pytest.fixture(scope="module")
def depth3_runs(demo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Depth 3 (uneven rounds) with epochs of 50 blocks (steps of 16, 16, 16, then 2): whole, and sliced
    after epoch 1."""
    root = tmp_path_factory.mktemp("depth3-runs")
    layout = ("training.max_tokens=9600", "training.epoch_tokens=3200", *LAYOUTS["pipeline-depth3"])
    _torchrun_train(demo_cache, root / "whole", layout=layout)
    _torchrun_train(demo_cache, root / "sliced", "--until-epoch", "1", layout=layout)
    _torchrun_train(demo_cache, root / "sliced", "--resume", str(root / "sliced/checkpoints/epoch-1.pt"), layout=layout)
    return root / "whole", root / "sliced"


@pytest.mark.slow
def test_pipeline_depth3_shortened_steps_two_slices_equal_one_job(depth3_runs: tuple[Path, Path]) -> None:
    whole, sliced = (load_checkpoint(run / "final.pt")["engine"] for run in depth3_runs)
    metrics = [comparable_metrics(run) for run in depth3_runs]
    torch.testing.assert_close(sliced, whole, rtol=0, atol=0)
    assert metrics[1] == metrics[0] and [r["step"] for r in metrics[0] if r["type"] == "epoch"] == [4, 8, 12]


@pytest.mark.slow
def test_pipeline_two_slices_equal_one_job_weights(pipeline_runs: tuple[Path, Path]) -> None:
    whole, sliced = (load_checkpoint(run / "final.pt")["engine"] for run in pipeline_runs)
    torch.testing.assert_close(sliced, whole, rtol=0, atol=0)


@pytest.mark.slow
def test_pipeline_two_slices_equal_one_job_metrics(pipeline_runs: tuple[Path, Path]) -> None:
    whole, sliced = (comparable_metrics(run) for run in pipeline_runs)
    assert sliced == whole


@pytest.mark.slow
def test_pipeline_final_checkpoint_validates_in_one_process(pipeline_runs: tuple[Path, Path], demo_cache: Path) -> None:
    result = validate_run(pipeline_runs[0])["targets"]
    assert result == open_cache(demo_cache).validation_targets


@pytest.mark.slow
def test_pipeline_run_record_places_units_per_device(pipeline_runs: tuple[Path, Path]) -> None:
    record = json.loads((pipeline_runs[0] / "run.json").read_text())
    placement = [(entry["device"], entry["units"]) for entry in record["placement"]]
    result = placement, {unit["name"]: unit["device"] for unit in record["units"]}
    stages = plan_placement(model_units(_recipe().model), 2).stages
    expected = [("cpu:0", stages[0]), ("cpu:1", stages[1])], {name: f"cpu:{s}" for s in (0, 1) for name in stages[s]}
    assert result == expected


@pytest.mark.slow
def test_pipeline_train_log_has_stages_memory_and_bubble(pipeline_runs: tuple[Path, Path]) -> None:
    text = (pipeline_runs[0] / "train.log").read_text()
    result = (
        "stage 0 [cpu:0]: embedding" in text,
        "stage 1 [cpu:1]:" in text,
        "most loaded cpu:" in text,
        "theoretical bubble 0.3333" in text,
    )
    assert result == (True, True, True, True)


# --- single-process pieces ---


def test_stage_modules_chained_equal_gpt_forward() -> None:
    cfg = _recipe().model
    torch.manual_seed(0)
    gpt = GPT(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.context_length))
    stages = [["embedding", "block0.attention"], ["block0.mlp", "block1.attention", "block1.mlp"], ["head"]]
    x = idx
    for units in stages:
        x = StageModule(gpt, units, contextlib.nullcontext)(x)
    torch.testing.assert_close(x, gpt(idx)[0], rtol=0, atol=0)


def test_stage_module_keeps_gpt_parameter_names() -> None:
    gpt = GPT(_recipe().model)
    result = set(StageModule(gpt, ["block0.mlp", "block1.attention"], contextlib.nullcontext).state_dict())
    expected = {name for name in gpt.state_dict() if name.startswith(("blocks.0.mlp", "blocks.1.attn"))}
    assert result == expected


@pytest.mark.parametrize(
    ("sequences", "depth", "micro", "expected"),
    [
        (16, 2, 16, (1, 16)),
        (64, 2, 8, (4, 16)),
        (48, 3, 4, (4, 12)),
        (20, 4, 4, (5, 4)),
        (64, 3, 4, (6, 12)),
        (256, 3, 16, (6, 45)),
        (2, 3, 4, (1, 3)),
    ],
)
def test_pipeline_rounds(sequences: int, depth: int, micro: int, expected: tuple[int, int]) -> None:
    # even rounds when some count splits the sequences; else uneven: the last round padded
    result = pipeline_rounds(sequences, depth, micro)
    assert result == expected


def test_bubble_fraction_theoretical() -> None:
    result = bubble_fraction(4, 12)
    assert result == pytest.approx(3 / 15)


def test_multi_stage_recipe_without_torchrun_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(
        UserError, match=r"2 x 1 processes, but this job has 1; launch it with torchrun --nproc-per-node 2"
    ):
        distributed.init(_recipe("parallel.pipeline_stages=2"))


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        ({"cuda:0": {"allocated": 1, "peak": 2e9}}, ""),
        (
            {"cuda:0": {"allocated": 1, "peak": 2e9}, "cuda:1": {"allocated": 1, "peak": 3e9}},
            " | most loaded cuda:1 (3.00 GB peak)",
        ),
    ],
)
def test_most_loaded_device_called_out(memory: dict, expected: str) -> None:
    result = distributed.most_loaded(memory)
    assert result == expected


# --- a run over two nodes: two torchrun node agents on this machine, c10d rendezvous on localhost ---

TWO_NODE_BUDGET = ("training.max_tokens=8192", "training.epoch_tokens=2048")
"""4 epochs of 2 steps: few enough that fp32 reductions in another order stay within 1e-4 of one process."""
TWO_BY_TWO = (*TWO_NODE_BUDGET, *LAYOUTS["pipeline-1f1b"], "parallel.data_parallel=2")
"""A depth-2 pipeline x 2 replicas: 4 processes, 2 per node agent."""


def _two_node_train(cache: Path, run_dir: Path, *arguments: str, layout: tuple[str, ...] = TWO_BY_TWO) -> None:
    """Two node agents of the command ebd2n.launch gives each node of a SLURM job (torchrun_command),
    meeting at a c10d rendezvous on localhost, each starting 2 gloo processes."""
    from ebd2n.launch import torchrun_command

    overrides = [f"data.cache_dir={cache}", f"runtime.output_dir={run_dir}", *layout]
    argv = ["train", "--config", "demo", "--quiet", *[f"--set={o}" for o in overrides], *arguments]
    port = _free_port()
    command = torchrun_command(4, 2, f"127.0.0.1:{port}", f"two-nodes-{port}", argv)
    source = str(Path(ebd2n.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    agents = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outputs = [agent.communicate(timeout=900)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], "\n".join(output[-3000:] for output in outputs)


@pytest.fixture(scope="module")
def two_node_runs(demo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The 2 x 2 run over two node agents whole, and in two slices (the second resumes by itself);
    and the same recipe in one process."""
    root = tmp_path_factory.mktemp("two-nodes")
    _two_node_train(demo_cache, root / "whole")
    _two_node_train(demo_cache, root / "sliced", "--until-epoch", "2")
    _two_node_train(demo_cache, root / "sliced")
    overrides = [f"data.cache_dir={demo_cache}", f"runtime.output_dir={root / 'one'}", *TWO_NODE_BUDGET]
    subprocess.run(
        [sys.executable, "-m", "ebd2n", "train", "--config", "demo", "--quiet", *[f"--set={o}" for o in overrides]],
        check=True,
        capture_output=True,
        timeout=900,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    return root / "whole", root / "sliced", root / "one"


@pytest.mark.slow
def test_two_nodes_final_weights_equal_one_process(two_node_runs: tuple[Path, Path, Path]) -> None:
    whole, _, one = (load_checkpoint(run / "final.pt")["engine"]["model"] for run in two_node_runs)
    torch.testing.assert_close(whole, one, rtol=0, atol=1e-4)  # also requires the same keys


@pytest.mark.slow
def test_two_nodes_two_slices_equal_one_job_bitwise(two_node_runs: tuple[Path, Path, Path]) -> None:
    whole, sliced, _ = (load_checkpoint(run / "final.pt")["engine"] for run in two_node_runs)
    metrics = [comparable_metrics(run) for run in two_node_runs[:2]]
    torch.testing.assert_close(sliced, whole, rtol=0, atol=0)
    assert metrics[1] == metrics[0]


@pytest.mark.slow
def test_two_nodes_run_record_places_stages_and_replicas(two_node_runs: tuple[Path, Path, Path]) -> None:
    record = json.loads((two_node_runs[0] / "run.json").read_text())
    result = [(entry["device"], entry["node"], entry["stage"], entry["replica"]) for entry in record["placement"]]
    host = socket.gethostname()
    expected = [("cpu:0", host, 0, 0), ("cpu:1", host, 1, 0), ("cpu:2", host, 0, 1), ("cpu:3", host, 1, 1)]
    assert result == expected


@pytest.mark.slow
def test_two_nodes_dashboard_shows_node_stage_and_replica(two_node_runs: tuple[Path, Path, Path]) -> None:
    result = (two_node_runs[0] / "report.html").read_text()
    assert f'<code>cpu:3</code> <span class="muted">node {socket.gethostname()}, stage 1, replica 1</span>' in result
