"""The sim robot's arm has the env's force reflex: a push past the limit holds it until a reset."""

from __future__ import annotations

import numpy as np
import pytest
from real_util import inproc_robot

from robot_rl.real.sim_robot import SimRobot, SimRobotConfig

pytestmark = pytest.mark.realtime


def test_pushing_through_the_cube_holds_the_arm_until_reset() -> None:
    robot = inproc_robot()
    node = SimRobot(SimRobotConfig(), robot)
    try:
        cube = node.data.xpos[node._object].copy()
        node._gripper = 0.0  # closed on nothing
        for target in (cube + [0.0, 0.0, 0.06], cube - [0.0, 0.0, 0.05]):  # above the cube, then through it
            node._target = target
            for _ in range(100):
                node._physics_tick(node.sim_time)
                if node.hold_reason is not None:
                    break
        assert node.hold_reason is not None and node.hold_reason.startswith("force limit")
        held = node._target.copy()
        assert np.linalg.norm(held - cube) > 0.02  # the target froze at the TCP, above the cube, not through it
        node._reset_scene(1)
        assert node.hold_reason is None
    finally:
        node.close()
