"""`robot-rl sim-robot --lockstep` as its own process: the policy side's commands clock the simulation."""

from __future__ import annotations

import time

import numpy as np
import pytest
from real_util import spawn, stop

from robot_rl.envs import make_env
from robot_rl.real.config import load_robot_config
from robot_rl.real.robot import RobotEnv
from robot_rl.sim.config import EnvConfig
from robot_rl.types import ObsLayout

pytestmark = pytest.mark.realtime

N = 30  # steps: 3 s of robot time at the sim robot's 10 Hz control rate


def test_lockstep_robot_env_runs_faster_than_real_time_and_each_step_answers_its_command(domain: int) -> None:
    ref = make_env(EnvConfig(obs_frame="absolute"))
    layout = ref.unwrapped.state_layout
    ref.close()
    # The weld arm: it covers each commanded step within the step, so a lagging observation is unambiguous (the
    # impedance arm covers about half of a step's command in that step and coasts into the next).
    sim = spawn("sim-robot", "--lockstep", "--domain", str(domain), "--cameras", "front", "--arm", "mocap")
    try:
        robot = load_robot_config("sim", [f"domain_id={domain}", "lockstep=true", "reset_timeout_s=20"])
        env = RobotEnv(robot, ObsLayout.from_slices(layout, cameras=("front",), image_size=robot.image_size))
        assert env.hz == 10.0  # the control period both sides agree on: one step is 0.1 s of robot time
        obs, info = env.reset(seed=7)
        x = [float(obs["state"][layout["tcp_pos"]][0])]
        stamps = [info["state_timestamp"]]
        t0 = time.monotonic()
        for t in range(N):
            a = np.array([0.0 if t % 3 == 2 else (0.5 if t < N // 2 else -0.5), 0.0, 0.0, -1.0])
            sent = time.time()
            obs, _, _, _, info = env.step(a)
            assert info["state_timestamp"] > sent and info["camera_timestamps"]["front"] == info["state_timestamp"]
            assert not info["hold"]
            x.append(float(obs["state"][layout["tcp_pos"]][0]))
            stamps.append(info["state_timestamp"])
        elapsed = time.monotonic() - t0
        # A slow policy: far longer than every wall-clock timeout on both sides (command watchdog 0.25 s, state
        # timeout 0.2 s, staleness 0.1 s); in lockstep the robot waited, so nothing is stale and nothing holds.
        time.sleep(0.6)
        obs, _, _, _, info = env.step(np.array([0.0, 0.0, 1.0, -1.0]))
        assert not info["hold"] and obs["front"].std() > 0
        env.close()
    finally:
        stop(sim)
    print(f"\n{N} lockstep steps in {elapsed:.2f} s ({N / elapsed:.0f} steps/s; real time would take {N / 10:.1f} s)")
    assert elapsed < 0.5 * N / 10.0, f"{N} steps took {elapsed:.2f}s, real time is {N / 10.0:.1f}s"
    dx = np.diff(x)
    moving = np.array([t % 3 != 2 for t in range(N)])
    sign = np.where(np.arange(N) < N // 2, 1.0, -1.0)  # half steps: 12.5 cm out and back, inside the workspace
    # Each observation answers the command just sent: the TCP moved most of a half step (1.25 cm) in its direction
    # after every moving command, and barely after every hold command (a lagging observation fails both).
    assert (sign[moving] * dx[moving] > 0.3 * env.max_step).all(), dx.round(4).tolist()
    assert (np.abs(dx[~moving]) < 0.1 * env.max_step).all(), dx.round(4).tolist()
    assert (np.diff(stamps) > 0).all()
