"""Fixed-rate loops that sleep to absolute deadlines, so timing errors never accumulate into drift."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np


class RateKeeper:
    """`sleep()` waits for the next deadline t0 + k*period. A cycle that overran its deadline is counted as a miss
    and the schedule re-anchors at now (no burst of catch-up cycles, which would hammer the robot)."""

    def __init__(self, hz: float, miss_tolerance: float = 0.5) -> None:
        if hz <= 0:
            raise ValueError(f"rate must be positive, got {hz}")
        self.period = 1.0 / hz
        self.miss_tolerance = miss_tolerance  # fraction of a period late that counts as a miss
        self.misses = 0
        self.periods: list[float] = []  # measured wall time between consecutive wake-ups
        self.restart()

    def restart(self) -> None:
        """Start a fresh schedule (after a reset or a pause) without counting the gap as a miss."""
        self._deadline = time.monotonic() + self.period
        self._last_wake: float | None = None

    def sleep(self) -> None:
        now = time.monotonic()
        if now > self._deadline + self.miss_tolerance * self.period:
            self.misses += 1
            self._deadline = now
        else:
            while (left := self._deadline - time.monotonic()) > 0:
                time.sleep(left)
        wake = time.monotonic()
        if self._last_wake is not None:
            self.periods.append(wake - self._last_wake)
        self._last_wake = wake
        self._deadline += self.period

    def stats(self) -> dict[str, float]:
        """Period and jitter (|period - nominal|) percentiles in milliseconds, plus deadline misses."""
        p = np.asarray(self.periods) if self.periods else np.full(1, np.nan)
        jitter = np.abs(p - self.period)
        return {
            "hz": 1.0 / self.period,
            "cycles": len(self.periods),
            "period_mean_ms": float(1e3 * p.mean()),
            "jitter_p50_ms": float(1e3 * np.percentile(jitter, 50)),
            "jitter_p99_ms": float(1e3 * np.percentile(jitter, 99)),
            "deadline_misses": self.misses,
        }


def percentiles_ms(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) of samples given in seconds; NaN when there are none."""
    if not samples:
        return float("nan"), float("nan")
    a = 1e3 * np.asarray(samples)
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set, so a node's loop ends cleanly and closes what it opened."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return stop
