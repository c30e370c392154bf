"""SIGKILL `robot-rl collect` mid-run, repeatedly: committed episodes stay intact, the next run resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from robot_rl.demos.dataset import validate
from robot_rl.demos.store import EpisodeStore

KILLS = 5


def _count(path: Path) -> int:
    try:
        with EpisodeStore(path, "r") as st:
            return len(st)
    except FileNotFoundError:
        return 0


def _check_intact(path: Path) -> int:
    """Open read-only (no repair): every committed episode must decode, pass its CRC and match its meta."""
    with EpisodeStore(path, "r") as st:
        for i in range(len(st)):
            ep, m = st.episode(i), st.meta(i)
            assert len(ep["action"]) == m["length"] and np.isfinite(ep["state"]).all()
            assert st.final(i)["front"].shape == ep["front"].shape[1:]
        seeds = [st.meta(i)["seed"] for i in range(len(st))]
        assert len(set(seeds)) == len(seeds), "a resumed run repeated a seed"
        return len(st)


@pytest.mark.slow
def test_sigkill_during_collect_never_tears(tmp_path: Path) -> None:
    store = tmp_path / "s"
    rng = np.random.default_rng(0)
    cmd = [
        sys.executable,
        "-m",
        "robot_rl.cli",
        "collect",
        str(store),
        "-n",
        "1000",
        "--resume",
        "--obs",
        "both",
        "--image-size",
        "48",
        "--teleop",
        "scripted",
    ]
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    seen = 0
    for _ in range(KILLS):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while _count(store) <= seen:  # wait for this run to commit something, then kill mid-episode
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline, "collector made no progress"
                time.sleep(0.05)
            time.sleep(float(rng.uniform(0.0, 0.4)))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stderr.close()
        n = _check_intact(store)
        assert n > seen
        seen = n
    target = seen + 2
    done = subprocess.run([*cmd[:6], str(target), *cmd[7:]], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _check_intact(store) == target
    report = validate(store)
    assert report["ok"], report["problems"]
