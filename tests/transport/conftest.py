"""Transport configs on rclpy, in each test's own ROS domain (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from transport_util import make_episode

from robot_rl.transport import TransportConfig
from robot_rl.types import Transition


@pytest.fixture
def cfg(domain: int) -> Callable[..., TransportConfig]:
    def make(**kw: object) -> TransportConfig:
        base = dict(backend="rclpy", domain_id=domain, task="reach")
        return TransportConfig(**{**base, **kw})  # type: ignore[arg-type]

    return make


@pytest.fixture
def episode() -> Iterator[Callable[..., list[Transition]]]:
    yield make_episode
