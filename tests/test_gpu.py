"""GPU checks of issue #19 (`pytest -m gpu`; skipped without a CUDA device): exact resume on CUDA,
BF16 + torch.compile training that runs and resumes, packed resume, peak memory of the 20M step against
the recorded figure and the CUDA RNG state's layout (tests/gpu_reference.py). The same code paths on
the CPU (compile, BF16 autocast, fused AdamW, CUDA-layout checkpoints) are tests/test_gpu_paths_on_cpu.py,
which CI runs. benchmarks/gpu_check.sh runs these."""

from __future__ import annotations

import gc
import json
import math
from pathlib import Path

import pytest
import torch
from gpu_reference import CUDA_RNG_STATE, PEAK_MARGIN, PEAK_MEMORY
from sliced_runs import final_weights, short_demo, step_losses, whole_and_sliced
from workflow_support import assert_states_equal, comparable_metrics

from ebd2n.config import load_recipe
from ebd2n.data import open_cache
from ebd2n.evaluate import validate_run
from ebd2n.train.budget import budget_of
from ebd2n.train.engine import build_engine, configure_torch
from ebd2n.train.state import RandomState

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

COMPILER_IMPORT = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
"""torch._inductor's import warns through torch.utils.mkldnn in torch 2.13; torch's matter, not ebd2n's."""
BF16_RTOL = 0.02
"""Relative difference of step losses allowed between nondeterministic BF16 runs of one recipe
(about five BF16 rounding units; benchmarks/gpu_train.py's LOSS_RTOL is the same)."""


def _recipe(cache_dir: Path, run_dir: Path, *overrides: str):
    """The demo model on CUDA with BF16 autocast, 4 epochs x 4 steps of 1,024 tokens."""
    return short_demo(cache_dir, run_dir, "runtime.device=cuda", "runtime.amp=true", *overrides)


def _whole_and_sliced(cache_dir: Path, tmp_path: Path, *overrides: str) -> tuple[Path, Path]:
    return whole_and_sliced(lambda run_dir: _recipe(cache_dir, run_dir, *overrides), tmp_path)


def test_cuda_two_slices_equal_one_job_bitwise(demo_cache: Path, tmp_path: Path) -> None:
    whole, sliced = _whole_and_sliced(demo_cache, tmp_path, "runtime.deterministic=true")
    assert_states_equal(final_weights(whole), final_weights(sliced))
    assert comparable_metrics(whole) == comparable_metrics(sliced)


def test_packed_cuda_two_slices_equal_one_job_bitwise(demo_cache: Path, tmp_path: Path) -> None:
    whole, sliced = _whole_and_sliced(demo_cache, tmp_path, "runtime.deterministic=true", "decentralized.num_models=4")
    assert_states_equal(final_weights(whole), final_weights(sliced))
    assert comparable_metrics(whole) == comparable_metrics(sliced)


@COMPILER_IMPORT
def test_bf16_compiled_run_trains_resumes_and_validates(demo_cache: Path, tmp_path: Path) -> None:
    whole, sliced = _whole_and_sliced(demo_cache, tmp_path, "runtime.compile=true", "runtime.deterministic=false")
    expected, result = step_losses(whole), step_losses(sliced)
    numerics = json.loads((sliced / "run.json").read_text())["numerics"]
    validation = validate_run(sliced)
    assert numerics == {"dtype": "bf16", "compile": True, "deterministic": False}
    assert len(result) == 16 and all(math.isfinite(loss) for loss in result) and result[-1] < result[0]
    assert result == pytest.approx(expected, rel=BF16_RTOL)
    assert validation["targets"] == open_cache(demo_cache).validation_targets and math.isfinite(validation["loss"])


@COMPILER_IMPORT
def test_peak_memory_of_20m_steps_within_recorded_peak() -> None:
    recipe = load_recipe(PEAK_MEMORY["preset"], ["runtime.device=cuda", *PEAK_MEMORY["overrides"]])
    configure_torch(recipe)
    budget = budget_of(recipe)
    device = torch.device("cuda")
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(0)
    engine = build_engine(recipe, budget, device)
    shape = (budget.sequences_per_step, recipe.model.context_length + 1)
    sequences = torch.randint(0, recipe.model.vocab_size, shape, device=device)
    for _ in range(3):  # the optimizer's moments exist from the first step on
        engine.train_step(sequences, lr=1e-4)
    peak = torch.cuda.max_memory_allocated(device) / 2**30
    assert peak <= PEAK_MEMORY["peak_gib"] * (1 + PEAK_MARGIN), (
        f"peak {peak:.2f} GiB; recorded {PEAK_MEMORY['peak_gib']} GiB"
    )


def test_cuda_rng_state_has_recorded_layout() -> None:
    result = [{"dtype": str(state.dtype), "numel": state.numel()} for state in RandomState().state_dict()["cuda"]]
    assert result == [CUDA_RNG_STATE] * torch.cuda.device_count()
