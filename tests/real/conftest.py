"""A random ROS domain per test (discovery stays on this host: tests/conftest.py), one trained checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from real_util import random_domain


@pytest.fixture
def domain() -> int:
    return random_domain()


@pytest.fixture(scope="session")
def checkpoint(pickcube_run: Path) -> Path:
    return pickcube_run / "checkpoints" / "final"
