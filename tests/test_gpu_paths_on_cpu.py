"""The GPU path's code, run on the CPU in CI (issue 41): torch.compile in its default mode (what
runtime.compile=true runs, and benchmarks/gpu_check.sh's reference variant `default/32`), BF16
autocast and fused AdamW through the test-only runtime.cuda_path_on_cpu (the very decisions a CUDA
run takes, ebd2n.train.step.takes_cuda_path), and a checkpoint in the CUDA path's layout (a CUDA RNG
state per device) resumed on the CPU. What needs a CUDA device stays in tests/test_gpu.py.

One compiled model serves the module: compiling takes about a minute on two cores (cold inductor
cache), every later build of the same graph reuses it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from gpu_reference import CUDA_RNG_STATE
from sliced_runs import final_weights, short_demo, step_losses, whole_and_sliced
from workflow_support import assert_states_equal, comparable_metrics

from ebd2n.config import load_recipe
from ebd2n.data import iter_full_validation, open_cache
from ebd2n.evaluate import validate_run
from ebd2n.layout import RunPaths
from ebd2n.targets import split_block
from ebd2n.train import train
from ebd2n.train.budget import budget_of
from ebd2n.train.checkpoint import load_checkpoint, save_checkpoint
from ebd2n.train.engine import build_engine
from ebd2n.train.validation import evaluate_sequences
from ebd2n.train.weights import evaluation_state_dict, model_with_weights

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
"""torch._inductor's import warns through torch.utils.mkldnn in torch 2.13; torch's matter, not ebd2n's."""

CUDA_PATH = ("runtime.cuda_path_on_cpu=true", "runtime.amp=true")
"""What a CUDA run decides (BF16 autocast, fused AdamW), taken on the CPU."""
FIRST_STEPS = 4
"""The steps compared across numerics: the first epoch, before training amplifies rounding differences."""
LOSS_RTOL = 2e-3
"""Relative loss difference allowed where the kernels differ (compiled against eager, BF16 against
FP32; training losses over FIRST_STEPS, full validation): half of BF16's rounding unit (2**-8).
Measured on this CPU (torch 2.13): 4.9e-5 compiled against eager and 1.6e-4 BF16 against FP32 over
FIRST_STEPS (by step 16 training has amplified both to 1.3 %), 8e-6 in full validation; a wrong mask,
dtype or lost update is orders larger."""


def _recipe(cache_dir: Path, run_dir: Path, *overrides: str):
    """A one-block demo model (compiling a second, identical block only costs time), 4 epochs x 4 steps."""
    return short_demo(cache_dir, run_dir, "model.layers=1", *overrides)


def _whole_and_sliced(cache_dir: Path, directory: Path, *overrides: str) -> tuple[Path, Path]:
    return whole_and_sliced(lambda run_dir: _recipe(cache_dir, run_dir, *overrides), directory)


def _fp32_validation_loss(run_dir: Path) -> float:
    """Full validation of the run's final weights on the CPU's own path (FP32)."""
    recipe = load_recipe(RunPaths(run_dir).recipe)
    model = model_with_weights(recipe, evaluation_state_dict(recipe, final_weights(run_dir)))
    batches = iter_full_validation(
        open_cache(recipe.data.cache_dir), recipe.model.context_length, recipe.evaluation.batch_size
    )
    return evaluate_sequences(model, batches, torch.device("cpu"), amp=False)[0]


def _assert_validates_in_bf16(run_dir: Path, cache_dir: Path, numerics: dict) -> None:
    """`ebd2n validate` counts every validation target to a finite loss, under BF16 autocast (its loss
    is not, but is close to, the FP32 one of the same weights), and run.json records the numerics."""
    validation = validate_run(run_dir)
    fp32 = _fp32_validation_loss(run_dir)
    assert json.loads((run_dir / "run.json").read_text())["numerics"] == numerics
    assert validation["targets"] == open_cache(cache_dir).validation_targets and math.isfinite(validation["loss"])
    assert validation["loss"] != fp32 and validation["loss"] == pytest.approx(fp32, rel=LOSS_RTOL)


@pytest.fixture(scope="module")
def fp32_runs(demo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The CPU's own path (FP32, foreach AdamW, eager): the reference."""
    return _whole_and_sliced(demo_cache, tmp_path_factory.mktemp("fp32"))


@pytest.fixture(scope="module")
def eager_runs(demo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The CUDA path without compilation: BF16 autocast and fused AdamW."""
    return _whole_and_sliced(demo_cache, tmp_path_factory.mktemp("eager"), *CUDA_PATH)


@pytest.fixture(scope="module")
def compiled_runs(demo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """The whole CUDA path: compiled (one compilation, which the sliced run's models reuse), BF16, fused
    AdamW; with torch._dynamo's counters of what it compiled."""
    import torch._dynamo  # noqa: PLC0415 - imported by the one fixture that compiles (the import takes seconds)

    torch._dynamo.reset()  # counters and compiled code of this module's run only
    directory = tmp_path_factory.mktemp("compiled")
    whole, sliced = _whole_and_sliced(demo_cache, directory, *CUDA_PATH, "runtime.compile=true")
    counters = {name: dict(values) for name, values in torch._dynamo.utils.counters.items()}
    return whole, sliced, counters


@pytest.mark.parametrize(
    ("overrides", "fused", "dtype"),
    [((), False, torch.float32), (CUDA_PATH, True, torch.bfloat16)],
    ids=["cpu-path", "cuda-path"],
)
def test_engine_takes_cuda_path_decisions_on_cpu(overrides: tuple, fused: bool, dtype: torch.dtype) -> None:
    recipe = load_recipe("demo", ["model.layers=1", *overrides])
    torch.manual_seed(0)
    engine = build_engine(recipe, budget_of(recipe), torch.device("cpu"))
    inputs, targets = split_block(torch.randint(0, recipe.model.vocab_size, (2, recipe.model.context_length + 1)))
    with engine.autocast():
        logits, loss = engine.forward(inputs, targets)
    defaults = engine.optimizer.defaults
    assert (defaults["fused"], defaults["foreach"]) == (fused, None if fused else True)
    assert (logits.dtype, loss.dtype) == (dtype, torch.float32)


def test_cuda_path_on_cpu_two_slices_equal_one_job_bitwise(eager_runs: tuple[Path, Path]) -> None:
    whole, sliced = eager_runs
    assert_states_equal(final_weights(whole), final_weights(sliced))
    assert comparable_metrics(whole) == comparable_metrics(sliced)


def test_cuda_path_on_cpu_losses_within_tolerance_of_fp32(
    eager_runs: tuple[Path, Path], fp32_runs: tuple[Path, Path]
) -> None:
    result, expected = step_losses(eager_runs[0])[:FIRST_STEPS], step_losses(fp32_runs[0])[:FIRST_STEPS]
    assert result != expected  # BF16 rounds: equal losses would mean autocast never ran
    assert result == pytest.approx(expected, rel=LOSS_RTOL)


def test_cuda_path_on_cpu_run_validates(eager_runs: tuple[Path, Path], demo_cache: Path) -> None:
    _assert_validates_in_bf16(eager_runs[1], demo_cache, {"dtype": "bf16", "compile": False, "deterministic": True})


def test_compiled_two_slices_equal_one_job_bitwise(compiled_runs: tuple[Path, Path, dict]) -> None:
    """Bitwise, as eager: both slices run the same compiled kernels, deterministic on one CPU thread."""
    whole, sliced, _ = compiled_runs
    assert_states_equal(final_weights(whole), final_weights(sliced))
    assert comparable_metrics(whole) == comparable_metrics(sliced)


def test_compiled_first_steps_within_tolerance_of_eager(
    compiled_runs: tuple[Path, Path, dict], eager_runs: tuple[Path, Path]
) -> None:
    """Within LOSS_RTOL, not bitwise: inductor fuses and reorders the FP32 work around the BF16 matmuls."""
    result, expected = step_losses(compiled_runs[0]), step_losses(eager_runs[0])
    assert len(result) == 16 and all(math.isfinite(loss) for loss in result) and result[-1] < result[0]
    assert result[:FIRST_STEPS] == pytest.approx(expected[:FIRST_STEPS], rel=LOSS_RTOL)


def test_compiled_forward_is_one_graph(compiled_runs: tuple[Path, Path, dict]) -> None:
    """The training forward compiles whole: a graph break would cost every GPU run its fusion."""
    counters = compiled_runs[2]
    assert counters["stats"]["unique_graphs"] >= 1 and not counters.get("graph_break")


def test_compiled_run_validates(compiled_runs: tuple[Path, Path, dict], demo_cache: Path) -> None:
    _assert_validates_in_bf16(compiled_runs[1], demo_cache, {"dtype": "bf16", "compile": True, "deterministic": True})


def test_checkpoint_with_cuda_rng_states_resumes_on_cpu(
    fp32_runs: tuple[Path, Path], demo_cache: Path, tmp_path: Path
) -> None:
    """A slice a CUDA job wrote (its generators' states beside the CPU's) resumes on the CPU, which
    restores the CPU's and has no CUDA generator to restore: the run ends as the uninterrupted one."""
    run_dir = tmp_path / "from-cuda"
    recipe = _recipe(demo_cache, run_dir)
    train(recipe, until_epoch=2, progress=False)
    relative = "checkpoints/epoch-2.pt"
    state = load_checkpoint(run_dir / relative, resume=True)
    state["rng"]["cuda"] = [torch.zeros(CUDA_RNG_STATE["numel"], dtype=torch.uint8) for _ in range(2)]  # two devices
    save_checkpoint(run_dir, relative, {key: value for key, value in state.items() if key != "format"})
    written = load_checkpoint(run_dir / relative, resume=True)["rng"]
    train(recipe, resume=run_dir / relative, progress=False)
    assert [str(s.dtype) for s in written["cuda"]] == [CUDA_RNG_STATE["dtype"]] * 2
    assert_states_equal(final_weights(fp32_runs[0]), final_weights(run_dir))
    assert comparable_metrics(fp32_runs[0]) == comparable_metrics(run_dir)
