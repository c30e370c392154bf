"""Loopback-only DDS for every process of these tests, a random domain per test, one trained checkpoint."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from robot_rl.transport.base import LOOPBACK_DDS_CONFIG

os.environ["CYCLONEDDS_URI"] = LOOPBACK_DDS_CONFIG  # inherited by the node processes


@pytest.fixture
def domain() -> int:
    return random.randint(1, 200)


@pytest.fixture(scope="session")
def checkpoint(pickcube_run: Path) -> Path:
    return pickcube_run / "checkpoints" / "final"
