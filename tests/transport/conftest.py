"""ROS 2 (rclpy) on this host only, with a random domain per session, inherited by spawned subprocesses."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator

import pytest
from transport_util import make_episode

os.environ.setdefault("ROBOT_RL_TEST_DOMAIN", str(random.SystemRandom().randint(1, 200)))

from robot_rl.transport import TransportConfig  # noqa: E402
from robot_rl.types import Transition  # noqa: E402


@pytest.fixture
def cfg() -> Callable[..., TransportConfig]:
    def make(**kw: object) -> TransportConfig:
        base = dict(backend="rclpy", domain_id=int(os.environ["ROBOT_RL_TEST_DOMAIN"]), task="reach")
        return TransportConfig(**{**base, **kw})  # type: ignore[arg-type]

    return make


@pytest.fixture
def episode() -> Iterator[Callable[..., list[Transition]]]:
    yield make_episode
