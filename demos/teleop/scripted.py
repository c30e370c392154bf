"""The scripted expert as a teleop device, so collection, tests and benchmarks run unattended."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from robot_rl.demos.teleop.base import DeviceCommand
from robot_rl.sim.experts import ScriptedExpert


class ScriptedDevice:
    """Acts through the same command path as a human; never presses episode buttons (the env decides)."""

    name = "scripted"
    source = "scripted"

    def __init__(self, noise_std: float = 0.0, seed: int | None = None) -> None:
        self._expert = ScriptedExpert(noise_std=noise_std, seed=seed)

    def reset(self) -> None:
        self._expert.reset()

    def poll(self, env: gym.Env) -> DeviceCommand:
        a = self._expert.act(env)
        twist = np.zeros(6, np.float32)
        twist[:3] = a[:3]
        if a.size == 5:
            twist[5] = a[3]
        return DeviceCommand(twist=twist, gripper=float(a[-1]))

    def close(self) -> None:
        """Nothing to release."""
