"""Shared by the latency benchmarks: run a call several times, keep its last result."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def timed(
    repeats: int, function: Callable[..., T], *args: Any, **kwargs: Any
) -> tuple[T, float, float]:
    """(the last result, median wall time, worst wall time) of ``repeats`` calls of
    function(*args, **kwargs)."""
    times = []
    result = None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function(*args, **kwargs)
        times.append(time.perf_counter() - started)
    return result, statistics.median(times), max(times)
