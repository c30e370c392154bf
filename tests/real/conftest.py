"""One trained checkpoint for tests/real (each test's ROS domain: the `domain` fixture of tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def checkpoint(pickcube_run: Path) -> Path:
    return pickcube_run / "checkpoints" / "final"
