"""Achieved fraction of peak for a matrix multiply of a given size.

The curve is piecewise-linear in log10(FLOPs) between the accelerator's points and flat beyond
the first and last point (DESIGN.md §4: smooth, not a step function, so that the optimum does
not jump when a GEMM crosses a threshold).
"""

from __future__ import annotations

import numpy as np

from planner.specs import AcceleratorSpec, AttentionKernelPoint


def matmul_efficiency(accelerator: AcceleratorSpec, flops: np.ndarray | float) -> np.ndarray:
    """Fraction of peak achieved by one GEMM of ``flops`` FLOPs (array in, array out)."""
    sizes = np.log10([point.gflop * 1e9 for point in accelerator.matmul_efficiency])
    values = np.array([point.efficiency for point in accelerator.matmul_efficiency])
    log_flops = np.log10(np.maximum(np.asarray(flops, dtype=float), 1.0))
    return np.interp(log_flops, sizes, values)


def matmul_time_s(
    accelerator: AcceleratorSpec, peak_flops: float, flops: np.ndarray | float
) -> np.ndarray:
    """Time of one GEMM: FLOPs / (peak · efficiency(FLOPs))."""
    flops = np.asarray(flops, dtype=float)
    return flops / (peak_flops * matmul_efficiency(accelerator, flops))


def attention_kernel_efficiency(
    points: tuple[AttentionKernelPoint, ...], seq_len: np.ndarray | float
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) fraction of peak of a measured attention kernel at ``seq_len``
    (array in, arrays out): linear in log2(sequence length) between the measured points, flat
    beyond them."""
    lengths = np.log2([point.seq_len for point in points])
    where = np.log2(np.maximum(np.asarray(seq_len, dtype=float), 1.0))
    forward = np.interp(where, lengths, [point.forward for point in points])
    backward = np.interp(where, lengths, [point.backward for point in points])
    return forward, backward
