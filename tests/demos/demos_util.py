"""Plain helpers for tests/demos; a unique module name, since every test folder has its own `conftest`."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys


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
