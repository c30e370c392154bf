"""`robot-rl train robot=sim` in real time: the sim robot without `--lockstep` moves on its own clock and holds the
arm when commands stop for 0.25 s (its command watchdog, as a real driver's). The run trains in this process (so a
stall can be forced into its learner) against the sim robot in its own."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from plain_ros import PlainNode, msg_type
from real_util import children, latest, spawn, stop

from robot_rl.config import load_config
from robot_rl.loop.learner import Learner
from robot_rl.loop.trainer import train
from robot_rl.real.robot import RobotEnv

pytestmark = [pytest.mark.ros2, pytest.mark.realtime]
PERIOD, EPISODE, STALL_S, STALL_AT = 0.1, 20, 1.0, 5  # 10 Hz control; the learner stalls in its 6th update


def test_a_learner_stall_leaves_the_control_rate_intact_and_evaluations_wait_for_episode_ends(
    domain: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps: list[tuple[str, int, float]] = []  # (thread, step of its episode, the robot's stamp of the new state)
    stalls: list[tuple[float, float]] = []
    robot_step, robot_close, learner_update = RobotEnv.step, RobotEnv.close, Learner.update
    closed: list[RobotEnv] = []

    def step(self: RobotEnv, action: np.ndarray) -> tuple:
        out = robot_step(self, action)
        steps.append((threading.current_thread().name, self._t, out[4]["state_timestamp"]))
        return out

    def update(self: Learner) -> None:
        if self.updates == STALL_AT:  # Python holding the GIL for a second, as a slow update or save can
            start = time.time()
            while time.time() < start + STALL_S:
                pass
            stalls.append((start, time.time()))
        learner_update(self)

    def close(self: RobotEnv) -> None:
        closed.append(self)
        robot_close(self)

    monkeypatch.setattr(RobotEnv, "step", step)
    monkeypatch.setattr(RobotEnv, "close", close)
    monkeypatch.setattr(Learner, "update", update)
    sim = spawn("sim-robot", "--domain", str(domain))
    try:
        summary = json.loads(train(load_config([
            "robot=sim", f"robot.domain_id={domain}", f"robot.max_episode_steps={EPISODE}",
            "intervention.enabled=false", "threads=1", "loop.env_steps=60", "loop.eval_every=30",
            "loop.eval_episodes=1", "loop.final_eval_episodes=1", "loop.checkpoint_every=20",
            f"run_dir={tmp_path / 'run'}",
        ])).read_text())  # fmt: skip
    finally:
        stop(sim)
    assert summary["status"] == "finished" and summary["env_steps"] == 60 and len(stalls) == 1
    assert len(closed) == 1  # the arm released: a driver's rclpy node left spinning aborts the process at exit
    # No episode ended on a hold: the robot's watchdog never saw the stall.
    assert summary["control"]["aborted_episodes"] == 0, summary["control"]
    # Step to step, on the robot's own stamps, within each episode: the control period, through the stall too.
    intervals = [(b[2] - a[2], a[2]) for a, b in zip(steps, steps[1:], strict=False) if b[1] == a[1] + 1]
    during = [dt for dt, t in intervals if stalls[0][0] - PERIOD < t < stalls[0][1]]
    assert len(during) >= 0.8 * STALL_S / PERIOD, (during, stalls)
    assert max(during) < 2 * PERIOD, during  # the watchdog's 0.25 s is far off
    print(f"control: {summary['control']}; through the stall: {np.round(during, 3).tolist()}")
    assert abs(np.median([dt for dt, _ in intervals]) - PERIOD) < 0.1 * PERIOD
    # The evaluation at env step 30 waited for the actor's episode to end (steps 21-40): none was cut short.
    assert [e["env_steps"] for e in summary["evals"]] == [30, 60, 60]  # periodic, periodic, final
    actor = [s[1] for s in steps if s[0] == "actor"]
    assert actor == [*range(1, EPISODE + 1)] * (len(actor) // EPISODE) and len(actor) >= 60, actor
    assert [s[1] for s in steps if s[0] != "actor"] == [*range(1, EPISODE + 1)] * 3


def test_a_stopped_learner_never_stops_the_arm_mid_episode(domain: int, tmp_path: Path) -> None:
    """`launch` in real time: SIGSTOP the learner (no weights, no credits) for 3 s. The actor finishes the episode
    under way at the control rate on the weights it has, then waits between episodes; none is aborted. The wait is
    arm time: the learner's summary counts it."""
    run, log_path = tmp_path / "run", tmp_path / "launch.log"
    sim = spawn("sim-robot", "--domain", str(domain))
    log = log_path.open("w")
    launch = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.cli", "launch", "robot=sim", f"robot.domain_id={domain}",
         f"distributed.transport.domain_id={domain}", f"robot.max_episode_steps={EPISODE}",
         "intervention.enabled=false", "loop.env_steps=100", "loop.eval_every=0", "loop.checkpoint_every=20",
         f"run_dir={run}", "threads=1", "profile=cpu"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
    )  # fmt: skip
    commands: list[float] = []  # when each arm command was seen
    resets: list[float] = []
    try:
        with PlainNode(domain) as peer:
            peer.node.create_subscription(msg_type("geometry_msgs/msg/PoseStamped"), "/robot_rl/ee_target",
                                          lambda m: commands.append(time.time()), 50)  # fmt: skip
            peer.node.create_subscription(msg_type("std_msgs/msg/Int64"), "/robot_rl/reset",
                                          lambda m: resets.append(time.time()), 10)  # fmt: skip
            peer.spin_until(lambda: latest(run) >= 20 or launch.poll() is not None, 90, "a first checkpoint")
            assert launch.poll() is None, log_path.read_text()[-3000:]
            learner = children(launch.pid)["learner"]
            os.kill(learner, signal.SIGSTOP)
            stopped = time.time()
            peer.spin_until(lambda: time.time() > stopped + 3.0, 10, "the stop")
            os.kill(learner, signal.SIGCONT)
            resumed = time.time()
            peer.spin_until(lambda: launch.poll() is not None, 90, "the run to finish")
        assert launch.wait() == 0, log_path.read_text()[-3000:]
    finally:
        stop(sim)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launch.pid, signal.SIGKILL)
        launch.wait()
        log.close()
    out = log_path.read_text()
    assert "episode aborted" not in out and json.loads((run / "summary.json").read_text())["env_steps"] == 100
    # While the learner was stopped: commands at the control rate within each episode, then the actor waited.
    during = [t for t in commands if stopped < t < resumed]
    gaps = [b - a for a, b in zip(during, during[1:], strict=False) if not any(a < r < b for r in resets)]
    assert gaps and max(gaps) < 2 * PERIOD, gaps
    assert resumed - during[-1] > 1.0, (during, resumed)  # it held between episodes, not acting on and on
    # ... and the learner's robot time counts that wait: the actor's arm reports its resets with its episodes.
    summary = json.loads((run / "summary.json").read_text())
    assert 60 * summary["robot_minutes_resets"] >= resumed - during[-1] - 2 * PERIOD, summary
    print(f"learner stopped {resumed - stopped:.1f} s: {len(during)} commands, gaps {max(gaps):.3f} s at most")
