"""A random ROS domain per test (discovery stays on this host: tests/conftest.py), one trained checkpoint."""

from __future__ import annotations

import random
from pathlib import Path

import pytest


@pytest.fixture
def domain() -> int:
    return random.randint(1, 200)


@pytest.fixture(scope="session")
def checkpoint(pickcube_run: Path) -> Path:
    return pickcube_run / "checkpoints" / "final"
