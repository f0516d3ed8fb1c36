"""Time the per-rank weight GEMMs of Llama 3 8B and 70B at TP 8 (torchtitan's 2025-06 AsyncTP
benchmark shapes: 12 x 8192 and 16 x 8192 tokens per rank) in bf16, forward, input gradient
and weight gradient, against an 8192^3 reference, on one NVIDIA GPU.

Not part of the package or its tests: run it by hand where PyTorch sees a CUDA GPU.

    python3 benchmarks/gpu/tp_shapes.py --out tp_shapes.json

Each figure is the median of ``--iters`` CUDA-event timings after ``--warmup`` calls, on
random normal data; efficiency is TFLOP/s over the bf16 dense peak given by ``--peak``.
"""

from __future__ import annotations

import argparse
import json

import torch
from cuda_timing import time_ms


def shapes() -> list[tuple[str, int, int, int]]:
    """(name, M, N, K) of each GEMM: Y[M, N] = X[M, K] W[K, N]."""
    out = [("ref 8192^3", 8192, 8192, 8192)]
    for model, tokens, h, q, kv, f in (
        ("8b", 12 * 8192, 4096, 4096, 1024, 14336),
        ("70b", 16 * 8192, 8192, 8192, 1024, 28672),
    ):
        t = 8
        layers = {
            "qkv": (h, (q + 2 * kv) // t),
            "wo": (q // t, h),
            "w1": (h, f // t),
            "w2": (f // t, h),
        }
        for name, (k, n) in layers.items():
            out.append((f"{model} {name} fwd", tokens, n, k))
            out.append((f"{model} {name} dgrad", tokens, k, n))
            out.append((f"{model} {name} wgrad", k, n, tokens))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="tp_shapes.json")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--peak", type=float, default=989.4, help="bf16 dense TFLOP/s")
    args = parser.parse_args()
    rows = []
    for name, m, n, k in shapes():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ms = time_ms(lambda a=a, b=b: torch.mm(a, b), args.warmup, args.iters)
        gflop = 2 * m * n * k / 1e9
        eff = gflop / ms / args.peak  # GFLOP per ms = TFLOP/s
        rows.append({"name": name, "m": m, "n": n, "k": k, "gflop": gflop, "ms": ms, "eff": eff})
        print(f"{name:18s} M={m:6d} N={n:6d} K={k:6d} {gflop:8.0f} GFLOP {ms:8.3f} ms {eff:.3f}")
        del a, b
        torch.cuda.empty_cache()
    device = torch.cuda.get_device_name()
    with open(args.out, "w") as f:
        json.dump({"device": device, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
