"""Shared timing helpers: wall and CPU rates from the same run, percentiles, one row format."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np


def rates(fn: Callable[[], object], reps: int, warmup: int = 2) -> tuple[float, float]:
    """(calls per wall-second, calls per CPU-second of this process, all threads counted)."""
    for _ in range(warmup):
        fn()
    w, c = time.perf_counter(), time.process_time()
    for _ in range(reps):
        fn()
    return reps / (time.perf_counter() - w), reps / max(time.process_time() - c, 1e-9)


def latency_ms(fn: Callable[[], object], reps: int, warmup: int = 10) -> tuple[float, float]:
    """(p50, p99) in milliseconds."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(1e3 * (time.perf_counter() - t))
    return float(np.percentile(ts, 50)), float(np.percentile(ts, 99))
