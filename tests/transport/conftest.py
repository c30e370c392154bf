"""Loopback-only cyclonedds with a random domain per session, inherited by spawned subprocesses."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from robot_rl.transport.base import LOOPBACK_DDS_CONFIG  # noqa: E402

os.environ["CYCLONEDDS_URI"] = LOOPBACK_DDS_CONFIG
os.environ.setdefault("ROBOT_RL_TEST_DOMAIN", str(random.randint(1, 200)))

from robot_rl.transport import TransportConfig  # noqa: E402
from robot_rl.types import Transition  # noqa: E402


@pytest.fixture
def cfg() -> Callable[..., TransportConfig]:
    def make(**kw: object) -> TransportConfig:
        base = dict(backend="dds", domain_id=int(os.environ["ROBOT_RL_TEST_DOMAIN"]), task="reach")
        return TransportConfig(**{**base, **kw})  # type: ignore[arg-type]

    return make


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


@pytest.fixture
def episode() -> Iterator[Callable[..., list[Transition]]]:
    yield make_episode
