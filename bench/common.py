"""Shared timing helpers: wall and CPU rates from the same run, percentiles, one row format."""

from __future__ import annotations

import math
import subprocess
import sys
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


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (float("nan"), float("nan"))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def kept_ci(nominal: list[bool], shifted: list[bool], n_boot: int = 4000, seed: int = 0) -> tuple[float, float]:
    """Bootstrap 95 % CI of shifted/nominal success, resampling the two sets of episodes independently."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(nominal, float), np.asarray(shifted, float)
    num = b[rng.integers(0, len(b), (n_boot, len(b)))].mean(1)
    den = a[rng.integers(0, len(a), (n_boot, len(a)))].mean(1)
    ratio = num / np.maximum(den, 1e-9)
    return (float(np.quantile(ratio, 0.025)), float(np.quantile(ratio, 0.975)))


def cli(*args: str, timeout: float | None = None) -> str:
    """A `robot-rl` command as its own process; its stdout, or the tail of its stderr on failure."""
    p = subprocess.run([sys.executable, "-m", "robot_rl.cli", *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"robot-rl {args[0]} failed ({p.returncode}): {p.stderr[-3000:]}")
    return p.stdout
