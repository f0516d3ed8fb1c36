"""What the GPU measurement scripts share: CUDA-event timing and one nvidia-smi reading.

Imported by the scripts beside it when run as ``python3 benchmarks/gpu/<script>.py`` (the
script's folder is first on the import path); needs PyTorch and a CUDA GPU.
"""

from __future__ import annotations

import statistics
import subprocess
from collections.abc import Callable

import torch


def time_ms(fn: Callable[[], object], warmup: int, iters: int) -> float:
    """Median milliseconds of ``fn()`` over ``iters`` calls, each timed with its own pair of
    CUDA events, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def smi_reading(query: str) -> list[str]:
    """One ``nvidia-smi --query-gpu=<query>`` reading of GPU 0, its fields as strings (no
    units, no header)."""
    text = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=5,
    ).stdout.strip()
    return [part.strip() for part in text.splitlines()[0].split(",")]
