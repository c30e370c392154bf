"""`robot-rl train robot=sim` in real time: the sim robot without `--lockstep` moves on its own clock and holds the
arm when commands stop for 0.25 s (its command watchdog, as a real driver's). The run trains in this process (so a
stall can be forced into its learner) against the sim robot in its own."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from real_util import spawn, stop

from robot_rl.config import load_config
from robot_rl.loop.learner import Learner
from robot_rl.loop.trainer import train
from robot_rl.real.robot import RobotEnv

pytestmark = pytest.mark.ros2
PERIOD, EPISODE, STALL_S, STALL_AT = 0.1, 20, 1.0, 5  # 10 Hz control; the learner stalls in its 6th update


def test_a_learner_stall_leaves_the_control_rate_intact_and_evaluations_wait_for_episode_ends(
    domain: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps: list[tuple[str, int, float]] = []  # (thread, step of its episode, the robot's stamp of the new state)
    stalls: list[tuple[float, float]] = []
    robot_step, learner_update = RobotEnv.step, Learner.update

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

    monkeypatch.setattr(RobotEnv, "step", step)
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
