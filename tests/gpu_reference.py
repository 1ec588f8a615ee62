"""Recorded GPU figures that tests/test_gpu.py holds the code to; the one place they are kept.

Change a figure only with a new measurement on the GPU, and record it here and in
benchmarks/README.md with its command, device, torch version and date.
"""

PEAK_MEMORY = {
    "preset": "20m",
    "overrides": ["runtime.compile=true", "runtime.amp=true", "training.micro_batch_size=32"],
    "peak_gib": 9.1,
    "measured": "python benchmarks/gpu_train.py --steps 20 --warmup 8: torch.cuda.max_memory_allocated of the "
    "synchronous 20M step, one NVIDIA H200, torch 2.11.0+cu130, 2026-11-29 (benchmarks/README.md)",
}
"""Peak GPU memory (GiB, 2**30 bytes) of training steps of this recipe."""
PEAK_MARGIN = 0.10
"""A test fails when the peak rises more than this fraction above the recorded one."""

CUDA_RNG_STATE = {"dtype": "torch.uint8", "numel": 16}
"""One CUDA device's generator state as `torch.cuda.get_rng_state_all()` lists it (Philox: 8 bytes of
seed, 8 of offset): tests/test_gpu_paths_on_cpu.py writes checkpoints in this layout on the CPU, and
tests/test_gpu.py checks it on a CUDA device."""
