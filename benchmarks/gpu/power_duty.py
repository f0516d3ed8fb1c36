"""How the SM clock a power limit leaves depends on power: a duty-cycle experiment.

Not part of the package or its tests: run it by hand on a machine with PyTorch and one
NVIDIA GPU. It changes no GPU setting (no power limit, no clock lock).

    python3 benchmarks/gpu/power_duty.py --out power_duty.json

Bursts of one 8192³ bf16 GEMM on random data alternate with idle sleeps, at several duty
cycles d (the busy share of wall time). At low d the average board power stays under the
limit and the GEMMs run at the top boost clock; at d = 1 the board sits at its power limit and
the clock drops. The GEMM's own throughput (CUDA events) is proportional to the SM clock of a
compute-bound kernel, so each duty cycle gives a point (relative clock, power while busy),
with power while busy = (average power − (1 − d) · idle power) / d and average and idle power
read with ``nvidia-smi``. Two such points and the idle power fix the exponent α of
P_busy − P_idle ∝ f^α, which says what clock a lower power limit would leave:
f(cap) / f(limit) = ((cap − P_idle) / (limit − P_idle))^(1/α).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import torch
from cuda_timing import smi_reading

QUERY = "power.draw,clocks.sm,power.limit,temperature.gpu,clocks_throttle_reasons.active"


def sample(stop: threading.Event, rows: list[list[float]]) -> None:
    """Append nvidia-smi readings [W, MHz, limit W, °C, reasons] every 0.1 s until stopped."""
    while not stop.is_set():
        fields = smi_reading(QUERY)
        rows.append(
            [
                float(fields[0]),
                float(fields[1]),
                float(fields[2]),
                float(fields[3]),
                int(fields[4], 16),
            ]
        )
        time.sleep(0.1)


def run_phase(seconds: float, duty: float, gemm, burst_kernels: int) -> dict:
    """Alternate bursts of ``burst_kernels`` GEMMs with sleeps so that the busy share is
    ``duty``; return GEMM TFLOP/s inside bursts and the nvidia-smi averages."""
    rows: list[list[float]] = []
    stop = threading.Event()
    watcher = threading.Thread(target=sample, args=(stop, rows))
    watcher.start()
    start = time.perf_counter()
    kernel_ms: list[float] = []
    busy_s = 0.0
    while time.perf_counter() - start < seconds:
        if duty > 0:
            t0 = time.perf_counter()
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(burst_kernels):
                gemm()
            end.record()
            end.synchronize()
            burst_s = time.perf_counter() - t0
            busy_s += burst_s
            kernel_ms.append(begin.elapsed_time(end) / burst_kernels)
            if duty < 1:
                time.sleep(burst_s * (1 - duty) / duty)
        else:
            time.sleep(0.05)
    wall_s = time.perf_counter() - start
    stop.set()
    watcher.join()
    late = rows[len(rows) // 3 :]  # after the controller settles
    out = {
        "duty_target": duty,
        "duty_measured": round(busy_s / wall_s, 3),
        "power_avg_w": round(statistics.mean(r[0] for r in late), 1),
        "sm_clock_median_mhz": statistics.median(r[1] for r in late),
        "power_limit_w": late[-1][2],
        "temperature_c": late[-1][3],
        "throttle_reasons_seen": sorted({hex(r[4]) for r in late}),
    }
    if kernel_ms:
        settled = kernel_ms[len(kernel_ms) // 3 :]
        ms = statistics.median(settled)
        out["gemm_ms"] = round(ms, 4)
        out["gemm_tflops"] = round(2 * 8192**3 / ms / 1e9, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="power_duty.json")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--duties", default="0,0.15,0.3,0.45,0.6,0.8,1.0")
    args = parser.parse_args()
    torch.manual_seed(0)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def gemm():
        return a @ b

    for _ in range(5):
        gemm()
    torch.cuda.synchronize()
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "phases": []}
    for duty in (float(d) for d in args.duties.split(",")):
        phase = run_phase(args.seconds, duty, gemm, burst_kernels=10)
        result["phases"].append(phase)
        print(json.dumps(phase), flush=True)
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
        time.sleep(1.0)


if __name__ == "__main__":
    main()
