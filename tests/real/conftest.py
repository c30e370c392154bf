"""Loopback-only DDS for every process of these tests, a random domain per test, one trained checkpoint."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from robot_rl.transport.base import LOOPBACK_DDS_CONFIG

os.environ["CYCLONEDDS_URI"] = LOOPBACK_DDS_CONFIG  # inherited by the node processes


@pytest.fixture
def domain() -> int:
    return random.randint(1, 200)


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PickCube policy trained for this session (~1 min on 2 CPU cores); ROBOT_RL_TEST_CKPT reuses one."""
    if given := os.environ.get("ROBOT_RL_TEST_CKPT"):
        return Path(given)
    run = tmp_path_factory.mktemp("pick_cube_run")
    cmd = [sys.executable, "-m", "robot_rl.cli", "train", f"run_dir={run}", "loop.env_steps=2500",
           "loop.stop_at_success=0.9", "loop.final_eval_episodes=5", "profile=cpu"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return run / "checkpoints" / "final"


def spawn(*args: str) -> subprocess.Popen:
    """A `robot-rl` subcommand as its own process: stdout (the JSON summary) and stderr (logs) kept apart."""
    return subprocess.Popen([sys.executable, "-m", "robot_rl.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate()


def wait_until(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.005)
