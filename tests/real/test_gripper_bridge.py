"""`robot-rl gripper-bridge` as its own process against a plain rclpy action server written here.

control_msgs (GripperCommand, what franka_gripper and Robotiq serve) has no pip wheel, so the server here serves
test_msgs/action/Fibonacci and the bridge is pointed at its goal field by config, exactly as the franka / ur5e
configs point it at GripperCommand's `command.position` / `command.max_effort`."""

from __future__ import annotations

import math
import time

import pytest
from plain_ros import PlainNode, msg_type
from real_util import spawn, stop

from robot_rl.errors import UserError
from robot_rl.real.gripper_bridge import action_class

pytestmark = pytest.mark.ros2


def test_openings_become_action_goals_on_change_only(domain: int) -> None:
    from rclpy.action import ActionServer
    from test_msgs.action import Fibonacci

    goals: list[int] = []

    def execute(handle):
        goals.append(handle.request.order)
        handle.succeed()
        return Fibonacci.Result()

    sets = ["gripper_bridge.action=/gripper/cmd", "gripper_bridge.action_type=test_msgs/action/Fibonacci",
            "gripper_bridge.position_field=order", "gripper_bridge.closed=0", "gripper_bridge.open=10",
            "gripper_bridge.effort_field=''"]  # fmt: skip
    robot_sets = (a for kv in sets for a in ("--robot-set", kv))
    bridge = spawn("gripper-bridge", "--robot", "sim", "--domain", str(domain), *robot_sets)
    try:
        with PlainNode(domain) as peer:
            server = ActionServer(peer.node, Fibonacci, "/gripper/cmd", execute)
            pub = peer.publisher("/robot_rl/gripper_command", "std_msgs/msg/Float64")  # as RobotEnv publishes it

            def command(opening: float, seconds: float, until=None) -> None:
                """Publish at 10 Hz, as a policy does, for `seconds` (or until `until()` holds)."""
                end = time.monotonic() + seconds
                while time.monotonic() < end and not (until and until()):
                    pub.publish(msg_type("std_msgs/msg/Float64")(data=opening))
                    deadline = time.monotonic() + 0.1
                    while time.monotonic() < deadline:
                        peer.executor.spin_once(timeout_sec=0.01)

            command(1.0, 30, until=lambda: goals)  # the bridge discovers the server, then sends one goal
            command(1.0, 0.5)
            command(0.97, 0.5)  # within the deadband: the gripper is already there
            command(0.0, 0.5)
            command(math.nan, 0.3)  # never moves the gripper
            command(0.5, 0.5)
            server.destroy()
    finally:
        stop(bridge)
    assert goals == [10, 0, 5], goals


def test_a_driver_action_that_is_not_installed_is_a_one_line_error() -> None:
    with pytest.raises(UserError, match="not installed.*robotiq_msgs"):
        action_class("robotiq_msgs/action/GripperCommand")
    with pytest.raises(UserError, match="expected <package>/action/<Name>"):
        action_class("std_msgs/msg/Float64")
