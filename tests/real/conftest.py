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
def checkpoint(pickcube_run: Path) -> Path:
    return pickcube_run / "checkpoints" / "final"


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
