"""Shared fixtures: one store of scripted PickCube demos collected through the real CLI."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")


def robot_rl(*args: str, check: bool = True, fresh: bool = False) -> subprocess.CompletedProcess:
    """Run `robot-rl ...`: in a fresh interpreter as a user would (fresh=True), else in-process (fast)."""
    if fresh:
        proc = subprocess.run([sys.executable, "-m", "robot_rl.cli", *args], capture_output=True, text=True)
    else:
        from robot_rl.cli import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(args))
        proc = subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())
    if check and proc.returncode != 0:
        raise AssertionError(f"robot-rl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Acceptance: `robot-rl collect` with the scripted device writes 20 PickCube demos."""
    path = tmp_path_factory.mktemp("demos") / "pick"
    robot_rl(
        "collect",
        str(path),
        "--task",
        "PickCube",
        "-n",
        "20",
        "--device",
        "scripted",
        "--obs",
        "both",
        "--image-size",
        "64",
        "--no-fsync",
        fresh=True,
    )
    return path
