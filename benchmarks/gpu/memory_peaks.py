"""Measure what an eager PyTorch Llama block stores and peaks at, on one NVIDIA GPU.

Not part of the package or its tests (they never need a GPU): run it by hand on a machine
with PyTorch and a CUDA GPU, then compare the numbers with planner's memory model
(tests/test_memory_measured.py reads the JSON it writes).

    python3 benchmarks/gpu/memory_peaks.py --out memory_peaks.json

What it measures, for Llama-shaped blocks in bf16 written as eager PyTorch modules the way the
eager stacks write them (HuggingFace transformers' LlamaRMSNorm: upcast to fp32, variance,
rsqrt, scale; SwiGLU as silu(w1(x)) * w3(x); rotary embedding by rotate_half; attention through
``scaled_dot_product_attention``, whose flash backend saves only its output and log-sum-exp),
and the same blocks with PyTorch's fused ``F.rms_norm``:

- ``context_bytes``: device memory in use once CUDA, PyTorch and cuBLAS are initialised beyond
  what PyTorch's allocator holds (``mem_get_info`` against ``memory_reserved``): the CUDA
  context, kernels and library workspaces;
- ``activation_bytes_per_block``: ``memory_allocated`` after the forward of ``layers`` blocks
  with autograd on, less before, over ``layers``: what one block saves for its backward;
- ``backward_peak_bytes``: ``max_memory_allocated`` during the backward less what was allocated
  when it started: the transient working set of one block's backward on top of the saved
  activations (gradients of activations, recomputed casts, weight gradients being written);
- ``reserved_over_allocated``: ``max_memory_reserved`` / ``max_memory_allocated`` over the whole
  step: the caching allocator's fragmentation at the peak;
- ``loss_peak_bytes``: the peak an LM head and a cross-entropy loss over a 128,256-token
  vocabulary add (bf16 logits, their fp32 upcast and the gradients), per token.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from torch import nn


class EagerRMSNorm(nn.Module):
    """HuggingFace transformers' LlamaRMSNorm (modeling_llama.py), op by op."""

    def __init__(self, hidden: int, fused: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden, dtype=torch.bfloat16))
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-5)
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + 1e-5)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, ffn: int, fused: bool) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        kw = {"bias": False, "dtype": torch.bfloat16}
        self.norm1 = EagerRMSNorm(hidden, fused)
        self.norm2 = EagerRMSNorm(hidden, fused)
        self.wq = nn.Linear(hidden, hidden, **kw)
        self.wk = nn.Linear(hidden, kv_heads * self.head_dim, **kw)
        self.wv = nn.Linear(hidden, kv_heads * self.head_dim, **kw)
        self.wo = nn.Linear(hidden, hidden, **kw)
        self.w1 = nn.Linear(hidden, ffn, **kw)
        self.w3 = nn.Linear(hidden, ffn, **kw)
        self.w2 = nn.Linear(ffn, hidden, **kw)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.norm1(x)
        q = self.wq(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        repeat = self.heads // self.kv_heads
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
        h = self.norm2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


def rope(seq: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (500000 ** (torch.arange(0, head_dim, 2, device="cuda").float() / head_dim))
    angles = torch.outer(torch.arange(seq, device="cuda").float(), inv)
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)


def measure_blocks(shape: dict, fused: bool) -> dict:
    hidden, heads, kv, ffn = shape["hidden"], shape["heads"], shape["kv_heads"], shape["ffn"]
    seq, mb, layers = shape["seq"], shape["micro_batch"], shape["layers"]
    torch.cuda.empty_cache()
    blocks = nn.ModuleList(Block(hidden, heads, kv, ffn, fused) for _ in range(layers)).cuda()
    cos, sin = rope(seq, hidden // heads)
    x = torch.randn(mb, seq, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for _ in range(2):  # warm-up: kernels chosen, workspaces allocated, gradients allocated
        y = x
        for block in blocks:
            y = block(y, cos, sin)
        y.float().pow(2).mean().backward()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    y = x
    for block in blocks:
        y = block(y, cos, sin)
    torch.cuda.synchronize()
    after_forward = torch.cuda.memory_allocated()
    loss = y.float().pow(2).mean()
    start_backward = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss.backward()
    torch.cuda.synchronize()
    backward_peak = torch.cuda.max_memory_allocated() - start_backward
    tokens_hidden = seq * mb * hidden
    per_block = (after_forward - before) / layers
    result = {
        **shape,
        "fused_rmsnorm": fused,
        "activation_bytes_per_block": per_block,
        "activation_coefficient": per_block / tokens_hidden,
        "backward_peak_bytes": backward_peak,
        "backward_peak_coefficient": backward_peak / tokens_hidden,
        "reserved_over_allocated": torch.cuda.max_memory_reserved()
        / max(1, torch.cuda.max_memory_allocated()),
    }
    del blocks, x, y, loss
    torch.cuda.empty_cache()
    return result


def measure_loss(hidden: int, vocab: int, seq: int, mb: int) -> dict:
    torch.cuda.empty_cache()
    head = nn.Linear(hidden, vocab, bias=False, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(mb, seq, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, vocab, (mb * seq,), device="cuda")
    for _ in range(2):
        F.cross_entropy(head(x).flatten(0, 1).float(), target).backward()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    F.cross_entropy(head(x).flatten(0, 1).float(), target).backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    return {
        "hidden": hidden,
        "vocab": vocab,
        "tokens": seq * mb,
        "loss_peak_bytes": peak,
        "loss_peak_bytes_per_logit": peak / (seq * mb * vocab),
    }


SHAPES = [  # Llama 3.2 1B, Llama 3.2 3B, Llama 3.1 8B widths; a few blocks each
    {"hidden": 2048, "heads": 32, "kv_heads": 8, "ffn": 8192, "seq": 4096, "micro_batch": 1},
    {"hidden": 2048, "heads": 32, "kv_heads": 8, "ffn": 8192, "seq": 4096, "micro_batch": 4},
    {"hidden": 3072, "heads": 24, "kv_heads": 8, "ffn": 8192, "seq": 4096, "micro_batch": 2},
    {"hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "seq": 4096, "micro_batch": 1},
    {"hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "seq": 8192, "micro_batch": 1},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="memory_peaks.json")
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    torch.cuda.init()
    free0, total = torch.cuda.mem_get_info()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info()
    context = (total - free1) - torch.cuda.memory_reserved()
    del a
    rows = []
    for shape in SHAPES:
        for fused in (False, True):
            row = measure_blocks({**shape, "layers": args.layers}, fused)
            rows.append(row)
            print(json.dumps(row))
    losses = [measure_loss(h, 128256, 4096, 1) for h in (2048, 4096)]
    for row in losses:
        print(json.dumps(row))
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "total_bytes": total,
        "context_bytes": context,
        "used_before_first_gemm_bytes": total - free0,
        "blocks": rows,
        "loss": losses,
    }
    with open(args.out, "w") as handle:
        json.dump(report, handle, indent=1)


if __name__ == "__main__":
    main()
