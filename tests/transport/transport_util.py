"""Plain helpers for tests/transport; a unique module name, since every test folder has its own `conftest`."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from robot_rl.types import Transition


def wait_until(pred: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.01)


def make_episode(n: int, cams: tuple[str, ...] = (), hw: int = 64, seed: int = 0) -> list[Transition]:
    """Consecutive transitions that share obs objects like the Actor produces them."""
    rng = np.random.default_rng(seed)

    def obs() -> dict[str, np.ndarray]:
        o = {"state": rng.standard_normal(7).astype(np.float32)}
        o.update({c: rng.integers(0, 256, (hw, hw, 3), dtype=np.uint8) for c in cams})
        return o

    out, cur = [], obs()
    for i in range(n):
        nxt = obs()
        out.append(
            Transition(
                obs=cur,
                action=rng.standard_normal(4).astype(np.float32),
                reward=float(i),
                next_obs=nxt,
                terminated=i == n - 1,
                truncated=False,
                intervened=i % 3 == 0,
            )
        )
        cur = nxt
    return out
