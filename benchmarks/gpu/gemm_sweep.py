"""Measure what the catalog otherwise takes from datasheets, on one NVIDIA GPU.

Not part of the package or its tests (they never need a GPU): run it by hand on a machine
with PyTorch and a CUDA GPU, then copy the numbers it prints into the system's catalog file
with this command as their source.

    python3 benchmarks/gpu/gemm_sweep.py --out gemm_sweep.json

What it measures (CUDA events; each figure the median of ``--iters`` timed calls after
``--warmup`` untimed ones, random normal data):

- GEMM throughput against size for transformer-shaped products (tokens × out × in, with the
  inner dimension h or 4h) and square ones, in bf16 and in fp8 e4m3 through
  ``torch._scaled_mm`` with tensorwise scales (one scale per operand, Transformer Engine's and
  torchao's tensorwise recipes) and rowwise scales (one per row of A and per column of B,
  torchao's rowwise recipe), each with and without fast accumulation;
- HBM bandwidth: a device-to-device copy, a read-only reduction, and the bf16 → fp8 cast with
  its amax, the memory-bound quantize work an fp8 recipe adds;
- the SM clock and board power while a large GEMM runs for a few seconds, read with
  ``nvidia-smi`` (the clock a power limit leaves).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import threading
import time

import torch
from cuda_timing import smi_reading, time_ms

FP8 = torch.float8_e4m3fn


def gemm_shapes() -> list[tuple[str, int, int, int]]:
    """(kind, M, N, K): transformer-shaped products and square ones."""
    shapes = []
    for tokens in (1024, 4096, 16384):
        for hidden in (1024, 2048, 4096, 8192, 16384):
            shapes.append(("h_to_h", tokens, hidden, hidden))
            shapes.append(("h_to_4h", tokens, 4 * hidden, hidden))
            shapes.append(("4h_to_h", tokens, hidden, 4 * hidden))
    for n in (512, 1024, 2048, 4096, 8192, 16384):
        shapes.append(("square", n, n, n))
    return shapes


def gemm_runners(m: int, n: int, k: int) -> dict[str, object]:
    """One closure per format: bf16 and the four fp8 scaled-mm variants."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a8 = a.to(FP8)
    b8t = b.to(FP8).t()  # column-major (K, N), as _scaled_mm wants its second operand
    one = torch.ones((), device="cuda", dtype=torch.float32)
    row_a = torch.ones(m, 1, device="cuda", dtype=torch.float32)
    col_b = torch.ones(1, n, device="cuda", dtype=torch.float32)
    bt = b.t()

    def scaled(scale_a, scale_b, fast):
        return lambda: torch._scaled_mm(
            a8,
            b8t,
            scale_a=scale_a,
            scale_b=scale_b,
            out_dtype=torch.bfloat16,
            use_fast_accum=fast,
        )

    return {
        "bf16": lambda: a @ bt,
        "fp8_tensorwise_fast": scaled(one, one, True),
        "fp8_tensorwise": scaled(one, one, False),
        "fp8_rowwise_fast": scaled(row_a, col_b, True),
        "fp8_rowwise": scaled(row_a, col_b, False),
    }


def sweep_gemms(args, peak_tflops: dict[str, float]) -> list[dict]:
    rows = []
    for kind, m, n, k in gemm_shapes():
        flops = 2.0 * m * n * k
        iters = args.iters if flops < 5e12 else max(5, args.iters // 4)
        row = {"kind": kind, "m": m, "n": n, "k": k, "gflop": flops / 1e9}
        for name, fn in gemm_runners(m, n, k).items():
            try:
                ms = time_ms(fn, args.warmup, iters)
            except RuntimeError as err:  # a format this GPU or torch build lacks
                row[name] = f"error: {str(err).splitlines()[0][:120]}"
                continue
            tflops = flops / ms / 1e9
            peak = peak_tflops["bf16" if name == "bf16" else "fp8"]
            row[name] = {
                "ms": round(ms, 5),
                "tflops": round(tflops, 1),
                "efficiency": round(tflops / peak, 4),
            }
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def bandwidth_cases(x: torch.Tensor, y: torch.Tensor) -> dict[str, tuple]:
    """name -> (closure, bytes it moves, or None where eager traffic is counted apart)."""
    elems = x.numel()
    return {
        "copy": (lambda: y.copy_(x), 4 * elems),
        "sum": (lambda: x.sum(dtype=torch.float32), 2 * elems),
        "amax_cast_fp8": (lambda: (x * (448.0 / x.abs().max().float())).to(FP8), None),
        "cast_fp8": (lambda: x.to(FP8), 3 * elems),
    }


def bandwidth(args) -> dict[str, dict]:
    """GB/s counting every byte read and written once."""
    out = {}
    for gib in (0.25, 1.0, 4.0):
        elems = int(gib * 2**30) // 2
        x = torch.randn(elems, device="cuda", dtype=torch.bfloat16)
        for name, (fn, nbytes) in bandwidth_cases(x, torch.empty_like(x)).items():
            ms = time_ms(fn, args.warmup, args.iters)
            entry = {"gib": gib, "ms": round(ms, 4)}
            if nbytes:
                entry["gbps"] = round(nbytes / ms / 1e6, 1)
            else:  # eager: abs (r+w), max (r), mul (r+w), cast (r + w 1 B) = 13 B per element
                entry["gbps_eager_traffic"] = round(13 * elems / ms / 1e6, 1)
                entry["effective_gbps_of_3_bytes"] = round(3 * elems / ms / 1e6, 1)
            out[f"{name}_{gib}gib"] = entry
            print(name, entry, flush=True)
        torch.cuda.empty_cache()
    return out


def sample_smi(stop: threading.Event, samples: list) -> None:
    query = (
        "clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active"
    )
    while not stop.is_set():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            samples.append(", ".join(smi_reading(query)))
        time.sleep(0.25)


def sustained(args) -> dict[str, dict]:
    """Throughput and SM clock/power while one 8192³ GEMM repeats for ``--sustain-s`` s."""
    out = {}
    for name in ("bf16", "fp8_tensorwise_fast", "fp8_rowwise"):
        fn = gemm_runners(8192, 8192, 8192)[name]
        samples: list[str] = []
        stop = threading.Event()
        watcher = threading.Thread(target=sample_smi, args=(stop, samples))
        fn()
        torch.cuda.synchronize()
        watcher.start()
        start = time.perf_counter()
        calls = 0
        while time.perf_counter() - start < args.sustain_s:
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            calls += 20
        elapsed = time.perf_counter() - start
        stop.set()
        watcher.join()
        tflops = 2 * 8192**3 * calls / elapsed / 1e12
        late = samples[len(samples) // 2 :]  # second half: after any ramp
        out[name] = {
            "tflops": round(tflops, 1),
            "seconds": round(elapsed, 2),
            "smi_samples_second_half": late,
        }
        print(name, out[name], flush=True)
        time.sleep(2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gemm_sweep.json")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--sustain-s", type=float, default=8.0)
    parser.add_argument("--peak-bf16-tflops", type=float, default=989.4)
    parser.add_argument("--peak-fp8-tflops", type=float, default=1978.9)
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    result = {
        "device": props.name,
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "smi": subprocess.run(
            ["nvidia-smi", "-q", "-d", "CLOCK,POWER"], capture_output=True, text=True
        ).stdout[-3000:],
        "peak_tflops": {"bf16": args.peak_bf16_tflops, "fp8": args.peak_fp8_tflops},
    }
    print({k: v for k, v in result.items() if k != "smi"}, flush=True)
    torch.manual_seed(0)
    sections = (
        ("sustained", sustained),
        ("bandwidth", bandwidth),
        ("gemms", lambda a: sweep_gemms(a, result["peak_tflops"])),
    )
    for key, run in sections:
        t0 = time.perf_counter()
        result[key] = run(args)
        result[f"{key}_wall_s"] = round(time.perf_counter() - t0, 1)
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
