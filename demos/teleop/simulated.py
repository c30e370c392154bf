"""A simulated operator: drives PickCube from what the policy observes, for collecting on a robot in tests.

The scripted device reads the simulator's privileged state, which a robot does not have. This one reads only the
newest observation (`env.unwrapped.last_obs`, e.g. `RobotEnv`'s): the TCP and gripper opening from the robot's
state topics and the cube from `object_pose`, which on the sim robot is the simulator's pose standing in for a
tracker (a real cell needs a tracker publishing it). Whether the cube is grasped is inferred, not read: the
gripper was told to close and stopped at about the cube's width.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from robot_rl.demos.teleop.base import DeviceCommand
from robot_rl.sim.envs import LIFT_HEIGHT
from robot_rl.sim.experts import GRIP_CLOSE, ScriptedExpert

CUBE_HALF = 0.02  # sim/assets/pick_cube.xml's cube on a table at z = 0: what this operator assumes of the cell


class SimulatedOperator:
    """The scripted PickCube strategy on observable state; remembers only its own last gripper command."""

    name = "simulated"
    source = "teleop"  # a stand-in for a person at the robot

    def __init__(self) -> None:
        self._grip = -1.0

    def reset(self) -> None:
        self._grip = -1.0

    def poll(self, env: gym.Env) -> DeviceCommand:
        u = env.unwrapped
        obs, layout = getattr(u, "last_obs", None), getattr(u, "state_layout", {})
        if obs is None or not {"tcp_pos", "cube_pos", "gripper_opening"} <= set(layout):
            raise ValueError("the simulated operator needs an env with `last_obs` observing tcp_pos, cube_pos and "
                             "gripper_opening (RobotEnv on PickCube)")  # fmt: skip
        s = obs["state"]
        tcp, cube = s[layout["tcp_pos"]].astype(np.float64), s[layout["cube_pos"]].astype(np.float64)
        gap = float(s[layout["gripper_opening"]][0]) * getattr(u.cfg, "gripper_max_width", 0.08)
        closed = self._grip > 0
        near = np.linalg.norm(cube - tcp) < 0.02
        grasped = closed and near and 2 * CUBE_HALF - 0.01 <= gap <= 2 * CUBE_HALF + 0.01
        state = {"tcp": tcp, "object_pos": cube, "grasped": grasped, "gripper_closed_cmd": closed, "gripper_gap": gap,
                 "object_half": np.full(3, CUBE_HALF), "lift_z": CUBE_HALF + LIFT_HEIGHT}  # fmt: skip
        goal, grip = ScriptedExpert._pick_cube(state)
        self._grip = float(grip)
        twist = np.zeros(6, np.float32)
        twist[:3] = np.clip((goal - tcp) / u.max_step, -1.0, 1.0)
        return DeviceCommand(twist=twist, gripper=GRIP_CLOSE if grip > 0 else -1.0)

    def close(self) -> None:
        """Nothing to release."""
