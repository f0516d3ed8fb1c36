"""One linear layer's forward and backward in bf16 and in dynamically scaled fp8, on one GPU.

Not part of the package or its tests: run it by hand on a machine with PyTorch and one NVIDIA
Hopper or newer GPU.

    python3 benchmarks/gpu/fp8_linear.py --out fp8_linear.json

Each layer runs its three GEMMs: output = x · Wᵀ, input gradient = g · W, weight gradient =
gᵀ · x. The fp8 variants follow torchao's float8 training recipes with dynamic scaling:

- tensorwise: one scale per tensor (amax of the whole tensor), e4m3 for x and W and e5m2 for
  the output gradient g, with the transposed copies the backward's operand layouts need;
- rowwise: one scale per row of the left operand and per column of the right one, each
  operand quantized along the axis its GEMM reduces over (so x, W and g are each quantized
  twice, once per axis), e4m3 throughout.

Quantization (amax, scale, cast, transpose) is compiled with ``torch.compile``, as torchao's
is; its time is part of each variant's figure. Timings are CUDA-event medians.
"""

from __future__ import annotations

import argparse
import json

import torch
from cuda_timing import time_ms

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
E4M3_MAX, E5M2_MAX = 448.0, 57344.0

# Llama 3 8B's linear layers (hidden 4096, 32 query and 8 key/value heads of 128, FFN 14336)
LLAMA3_8B = {
    "qkv": (6144, 4096),
    "attn_out": (4096, 4096),
    "w1_w3": (28672, 4096),
    "w2": (4096, 14336),
}


@torch.compile
def quantize_tensorwise(t: torch.Tensor, max_value: float, dtype: torch.dtype):
    """(t·s cast, its transpose made contiguous, 1/s) with s = max / amax(t)."""
    scale = max_value / t.abs().amax().float().clamp(min=1e-12)
    q = (t.float() * scale).clamp(-max_value, max_value).to(dtype)
    return q, q.t().contiguous(), scale.reciprocal()


@torch.compile
def quantize_rowwise(t: torch.Tensor, dim: int):
    """(t·s cast with one scale per slice along ``dim``, 1/s), e4m3."""
    scale = E4M3_MAX / t.abs().amax(dim=dim, keepdim=True).float().clamp(min=1e-12)
    q = (t.float() * scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q, scale.reciprocal()


def mm8(a, b, sa, sb):
    return torch._scaled_mm(
        a, b, scale_a=sa.contiguous(), scale_b=sb.contiguous(), out_dtype=torch.bfloat16
    )


def bf16_step(x, w, g):
    return x @ w.t(), g @ w, g.t() @ x


def tensorwise_step(x, w, g):
    x8, x8t, sx = quantize_tensorwise(x, E4M3_MAX, E4M3)
    w8, w8t, sw = quantize_tensorwise(w, E4M3_MAX, E4M3)
    g8, g8t, sg = quantize_tensorwise(g, E5M2_MAX, E5M2)
    out = mm8(x8, w8.t(), sx, sw)  # (T,K)·(K,N); w8.t() is column-major
    grad_x = mm8(g8, w8t.t(), sg, sw)  # (T,N)·(N,K); w8t.t() is column-major
    grad_w = mm8(g8t, x8t.t(), sg, sx)  # (N,T)·(T,K); x8t.t() is column-major
    return out, grad_x, grad_w


def rowwise_step(x, w, g):
    x_rows, sx_rows = quantize_rowwise(x, 1)  # reduce over K
    w_rows, sw_rows = quantize_rowwise(w, 1)  # reduce over K
    out = mm8(x_rows, w_rows.t(), sx_rows, sw_rows.t())
    g_rows, sg_rows = quantize_rowwise(g, 1)  # reduce over N
    w_cols, sw_cols = quantize_rowwise(w.t().contiguous(), 1)  # W per column of (N,K)
    grad_x = mm8(g_rows, w_cols.t(), sg_rows, sw_cols.t())
    g_cols, sg_cols = quantize_rowwise(g.t().contiguous(), 1)  # reduce over T
    x_cols, sx_cols = quantize_rowwise(x.t().contiguous(), 1)
    grad_w = mm8(g_cols, x_cols.t(), sg_cols, sx_cols.t())
    return out, grad_x, grad_w


def gemms_only(step):
    """The step's three GEMMs alone: quantize once, outside the timed closure."""

    def prepare(x, w, g):
        calls = []
        real_mm8 = globals()["mm8"]

        def record(a, b, sa, sb):
            calls.append((a, b, sa.contiguous(), sb.contiguous()))
            return real_mm8(a, b, sa, sb)

        globals()["mm8"] = record
        try:
            step(x, w, g)
        finally:
            globals()["mm8"] = real_mm8
        return lambda: [real_mm8(*call) for call in calls]

    return prepare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="fp8_linear.json")
    parser.add_argument("--tokens", default="8192,16384")
    parser.add_argument("--iters", type=int, default=30)
    args = parser.parse_args()
    torch.manual_seed(0)
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": []}
    steps = {"bf16": bf16_step, "fp8_tensorwise": tensorwise_step, "fp8_rowwise": rowwise_step}
    for tokens in (int(t) for t in args.tokens.split(",")):
        for name, (n, k) in LLAMA3_8B.items():
            x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
            g = torch.randn(tokens, n, device="cuda", dtype=torch.bfloat16) * 1e-3
            flops = 3 * 2.0 * tokens * n * k
            row = {"layer": name, "tokens": tokens, "n": n, "k": k}
            for variant, step in steps.items():
                try:
                    ms = time_ms(lambda step=step, x=x, w=w, g=g: step(x, w, g), 5, args.iters)
                except Exception as err:  # noqa: BLE001 - recorded, the sweep goes on
                    row[variant] = {"error": str(err).splitlines()[0][:160]}
                    continue
                row[variant] = {"ms": round(ms, 4), "tflops": round(flops / ms / 1e9, 1)}
                if variant != "bf16":
                    gemm_ms = time_ms(gemms_only(step)(x, w, g), 5, args.iters)
                    quant_ms = ms - gemm_ms
                    elements = x.numel() + w.numel() + g.numel()
                    row[variant]["gemms_ms"] = round(gemm_ms, 4)
                    row[variant]["quantize_ms"] = round(quant_ms, 4)
                    row[variant]["quantize_ns_per_element"] = round(quant_ms * 1e6 / elements, 4)
            for variant in ("fp8_tensorwise", "fp8_rowwise"):
                if "ms" in row[variant] and "ms" in row["bf16"]:
                    row[f"{variant}_speedup"] = round(row["bf16"]["ms"] / row[variant]["ms"], 3)
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
            with open(args.out, "w") as handle:
                json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
