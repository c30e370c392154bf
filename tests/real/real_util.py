"""Plain helpers for tests/real; a unique module name, since every test folder has its own `conftest`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from plain_ros import random_domain

from robot_rl.real.config import RobotConfig, load_robot_config


def inproc_robot(*overrides: str) -> RobotConfig:
    """The sim robot's config on the in-process transport, in a domain of its own: drawn from 1000 up, apart from the
    DDS draws and the fixed ids of the bus's own tests (tests/transport)."""
    return load_robot_config("sim", [f"domain_id={random_domain(1000, 100_000)}", "backend=inproc", *overrides])


def spawn(*args: str) -> subprocess.Popen:
    """A `robot-rl` subcommand as its own process: stdout (the JSON summary) and stderr (logs) kept apart. Python's
    fault handler is on, so a process stuck where signals cannot reach Python tells where on SIGABRT (`dump`)."""
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen([sys.executable, "-m", "robot_rl.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip


def dump(p: subprocess.Popen, why: str) -> AssertionError:
    """A process that ignored SIGTERM: its threads' stacks (SIGABRT, see `spawn`) and stderr in one error."""
    p.send_signal(signal.SIGABRT)
    try:
        err = p.communicate(timeout=10)[1]
    except subprocess.TimeoutExpired:
        p.kill()
        err = p.communicate()[1]
    return AssertionError(f"{why}; its stacks and stderr:\n{err[-6000:]}")


def run(*args: str, timeout: float = 600) -> str:
    """A `robot-rl` subcommand to its end: its stdout; a failure asserts with the tail of its stderr."""
    p = spawn(*args)
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err[-3000:]
    return out


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


def children(pid: int) -> dict[str, int]:
    """`robot-rl launch`'s live node processes: "learner" / "actor" -> pid."""
    out = {}
    for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        cmd = Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0")
        role = next((a.decode() for a in cmd if a in (b"learner", b"actor")), None)
        if role:
            out[role] = int(c)
    return out


def latest(run: Path) -> int:
    """Env steps of the newest committed checkpoint (0 before the first)."""
    f = run / "checkpoints" / "latest"
    return int(f.read_text().strip().removeprefix("step_")) if f.exists() and "step_" in f.read_text() else 0
