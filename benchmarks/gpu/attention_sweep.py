"""Causal attention kernel efficiency against sequence length, through PyTorch SDPA.

Not part of the package or its tests: run it by hand on a machine with PyTorch and one
NVIDIA GPU.

    python3 benchmarks/gpu/attention_sweep.py --out attention_sweep.json

Times ``torch.nn.functional.scaled_dot_product_attention`` (bf16, causal, head dim 128, 32
heads, batch 1, as torchtitan's Llama 3 8B calls it after repeating its key/value heads) with
the flash (FlashAttention-2) and cuDNN backends, forward and forward + backward, at sequence
lengths 2k-128k. Efficiency is counted as the catalog's attention curves count it
(hardware_catalog/systems/*.yaml attention_kernels): forward 4·s²·d per head halved for the
causal mask, backward 2.5 × the forward, over the bf16 dense peak. CUDA-event medians.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from cuda_timing import time_ms
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def measure(seq: int, heads: int, head_dim: int, peak_tflops: float) -> dict:
    """One sequence length: each backend's forward and backward time and efficiency."""
    shape = (1, heads, seq, head_dim)
    q, k, v = (
        torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    forward_flops = 4.0 * seq * seq * head_dim * heads / 2
    iters = 10 if seq <= 16384 else 4
    peak = peak_tflops * 1e9  # FLOP per ms
    row: dict = {"seq_len": seq}
    for name, backend in BACKENDS.items():

        def forward(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def both(forward=forward):
            forward().backward(grad)

        try:
            fwd_ms = time_ms(forward, 2, iters)
            both_ms = time_ms(both, 2, iters)
        except RuntimeError as err:  # a backend this build or GPU lacks
            row[name] = {"error": str(err).splitlines()[0][:160]}
            continue
        bwd_ms = both_ms - fwd_ms
        row[name] = {
            "forward_ms": round(fwd_ms, 4),
            "backward_ms": round(bwd_ms, 4),
            "forward": round(forward_flops / fwd_ms / peak, 4),
            "backward": round(2.5 * forward_flops / bwd_ms / peak, 4),
        }
        q.grad = k.grad = v.grad = None
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="attention_sweep.json")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--peak-bf16-tflops", type=float, default=989.4)
    parser.add_argument("--lengths", default="2048,4096,8192,16384,32768,65536,131072")
    args = parser.parse_args()
    torch.manual_seed(0)
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": []}
    for seq in (int(s) for s in args.lengths.split(",")):
        row = measure(seq, args.heads, args.head_dim, args.peak_bf16_tflops)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
