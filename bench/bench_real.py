"""Real-robot deployment (issue #5): control-loop timing at 10 and 50 Hz and the latency from a robot state
message to the command computed from it, over DDS with the sim robot in another process, as on a robot.

Latency is measured where both ends share a clock: the sim robot stamps each state message just before publishing
it, the control loop notes the time just after publishing the command computed from the newest state (transport,
decoding, observation assembly and the safety filter included; the policy is a scripted circle, so inference is
not). Run alone: `.venv/bin/python bench/bench_real.py [--quick]`.
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys

import numpy as np

from robot_rl.envs import make_env
from robot_rl.real.config import load_robot_config
from robot_rl.real.robot import RobotEnv
from robot_rl.real.timing import percentiles_ms
from robot_rl.sim.config import EnvConfig
from robot_rl.types import ObsLayout

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")


def control_loop(domain: int, hz: float, seconds: float) -> dict:
    cfg = load_robot_config("sim", [f"domain_id={domain}", "reset_timeout_s=60"])
    ref = make_env(EnvConfig())
    env = RobotEnv(
        cfg,
        ObsLayout.from_slices(ref.unwrapped.state_layout, control_hz=hz),
        max_episode_steps=2**62,
        node_name=f"bench_{hz:.0f}hz",
    )
    ref.close()
    try:
        env.reset(seed=0)
        env.latencies.clear()
        scale = 0.5 * 10.0 / hz  # the same 12.5 cm/s circle at every rate
        for i in range(int(seconds * hz)):
            phase = 2.0 * math.pi * i / (2.0 * hz)
            env.step(np.array([scale * math.cos(phase), scale * math.sin(phase), 0.0, -1.0]))
        stats = env.rate.stats()
        p50, p99 = percentiles_ms(env.latencies)
    finally:
        env.close()
    return {
        "bench": f"control loop at {hz:.0f} Hz over ROS 2, sim robot in another process",
        "cycles": stats["cycles"],
        "period_mean_ms": stats["period_mean_ms"],
        "jitter_p50_ms": stats["jitter_p50_ms"],
        "jitter_p99_ms": stats["jitter_p99_ms"],
        "deadline_misses": stats["deadline_misses"],
        "state_to_command_p50_ms": p50,
        "state_to_command_p99_ms": p99,
        "safety_holds": env.safety.holds,
    }


def main(quick: bool = False) -> list[dict]:
    domain = random.randint(100, 200)
    sim = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.cli", "sim-robot", "--domain", str(domain)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        return [control_loop(domain, hz, 5.0 if quick else 30.0) for hz in (10.0, 50.0)]
    finally:
        sim.terminate()
        sim.wait()


if __name__ == "__main__":
    for r in main(quick="--quick" in sys.argv):
        print(r)
