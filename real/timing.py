"""Fixed-rate loops that sleep to absolute deadlines, so timing errors never accumulate into drift."""

from __future__ import annotations

import contextlib
import gc
import signal
import threading
import time
from collections.abc import Iterator

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


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Around a real-time loop: what start-up built (imports, the model, the policy) is moved out of the collector's
    reach, so a full collection no longer walks it. One took 120-200 ms in a loaded 2-core robot process and 0.55 s
    in a deploy inside a long test process: a command watchdog tripped, states older than their staleness. Unfrozen
    after, so a process that goes on (a test run) can still collect what the loop's start-up left."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def one_inference_thread() -> Iterator[None]:
    """Around a loop that runs a policy on one observation at a time beside other busy processes (the robot's
    driver, a learner): torch on one intra-op thread. On the 2-core box with both cores busy, a batch-1 two-camera
    policy took p50 1.7 ms but p99 115 ms on two threads (one waits out the other's time slice at every parallel
    region's barrier), p50 1.3 / p99 6 ms on one: deploy's 110 ms jitter p99 that tripped the sim robot's 0.25 s
    command watchdog. Restored after, for a process that goes on (a test run)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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


class StreamClock:
    """A stream's period and jitter from the stamps it carries (running means), so a freshness limit follows the
    rate the stream really has: a 10 Hz camera's newest frame is routinely 0.1 s old, a 100 Hz state's is not. A gap
    of over 5 periods (a reset, a pause) is not the stream's rate and is left out."""

    def __init__(self, alpha: float = 0.1) -> None:
        self.alpha = alpha
        self.period = 0.0  # seconds; 0 until two stamps were seen
        self.jitter = 0.0  # mean absolute deviation of the period, seconds
        self._last: float | None = None

    def add(self, stamp: float) -> None:
        last, self._last = self._last, max(stamp, self._last or stamp)
        if last is None or stamp <= last:  # a re-publication keeps its stamp
            return
        dt = stamp - last
        if self.period == 0.0:
            self.period = dt
        elif dt <= 5.0 * self.period:
            self.jitter += self.alpha * (abs(dt - self.period) - self.jitter)
            self.period += self.alpha * (dt - self.period)

    @property
    def spread(self) -> float:
        """How old the newest message of a stream on time can be: a period and four mean deviations."""
        return self.period + 4.0 * self.jitter


ARM_ACTIVITIES = ("training", "evaluation", "demos", "resets")


class ArmClock:
    """Robot time the arm was busy, by what for (`ARM_ACTIVITIES`): an episode's steps count as the activity of
    whoever holds the arm (`doing`), a reset with its home move, and whatever the arm waited for between two
    episodes, as "resets". `RobotEnv` books it (`RobotEnv._book`)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(ARM_ACTIVITIES, 0.0)
        self.activity = "training"

    def book(self, seconds: float, activity: str | None = None) -> None:
        self.seconds[activity or self.activity] += seconds

    @contextlib.contextmanager
    def doing(self, activity: str) -> Iterator[None]:
        """The arm's steps in this block count as `activity`."""
        before, self.activity = self.activity, activity
        try:
            yield
        finally:
            self.activity = before


def arm_minutes(seconds: dict[str, float]) -> dict[str, float]:
    """`robot_minutes_<activity>` for each of an `ArmClock`'s, and `robot_minutes_whole`: their sum."""
    out = {f"robot_minutes_{k}": round(v / 60.0, 3) for k, v in seconds.items()}
    return out | {"robot_minutes_whole": round(sum(seconds.values()) / 60.0, 3)}
