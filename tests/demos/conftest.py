"""Shared fixtures: one store of scripted PickCube demos collected through the real CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from demos_util import robot_rl

os.environ.setdefault("MUJOCO_GL", "egl")


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Acceptance: `robot-rl collect` with the scripted device writes 20 PickCube demos."""
    path = tmp_path_factory.mktemp("demos") / "pick"
    robot_rl(
        "collect",
        str(path),
        "--task",
        "pick_cube",
        "-n",
        "20",
        "--teleop",
        "scripted",
        "--obs",
        "both",
        "--image-size",
        "64",
        "--no-fsync",
        fresh=True,
    )
    return path
