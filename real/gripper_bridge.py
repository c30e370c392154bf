"""`robot-rl gripper-bridge --robot franka|ur5e`: the gripper opening `RobotEnv` publishes -> the driver's action.

`RobotEnv` (and `sim-robot`) speak one gripper interface, a `std_msgs/Float64` opening on `gripper_topic` (0 closed ..
1 open, every control step). Stock gripper drivers take an action instead: franka_ros2's `franka_gripper_node`
serves `control_msgs/action/GripperCommand` on `~/gripper_action` (position = half the finger gap; closing is a
grasp with `max_effort` newtons), Robotiq / ros2_controllers' `gripper_action_controller` the same type on
`<controller>/gripper_cmd`. This node subscribes to the opening and sends a goal whenever it moved by more than
`deadband` (a policy repeats itself at 10 Hz; a gripper takes ~0.5 s), cancelling a goal still running. The action
type and its goal fields come from `RobotConfig.gripper_bridge`, so another driver's action is a config change.
Plain rclpy: actions are not part of robot_rl's topic transport.
"""

from __future__ import annotations

import importlib
import logging
import math
import threading
from typing import Any

from robot_rl.errors import UserError
from robot_rl.real.config import RobotConfig
from robot_rl.real.timing import stop_on_signals

log = logging.getLogger("robot_rl.gripper_bridge")


def action_class(ros_type: str) -> Any:
    """`pkg/action/Name` -> the generated class; a missing package is a one-line error naming it."""
    pkg, kind, name = (ros_type.split("/") + ["", ""])[:3]
    if kind != "action" or not name:
        raise UserError(f"gripper_bridge.action_type={ros_type!r}: expected <package>/action/<Name>")
    try:
        return getattr(importlib.import_module(f"{pkg}.action"), name)
    except (ImportError, AttributeError):
        raise UserError(f"gripper_bridge.action_type={ros_type}: not installed; source the ROS workspace that "
                        f"has {pkg} (e.g. apt install ros-$ROS_DISTRO-{pkg.replace('_', '-')})") from None  # fmt: skip


def _set(msg: Any, path: str, value: float) -> None:
    *parents, leaf = path.split(".")
    for p in parents:
        msg = getattr(msg, p)
    field = getattr(msg, leaf)
    if isinstance(field, (int, float)):
        setattr(msg, leaf, type(field)(value))  # an int field (the test's action) gets an int
    else:  # a sequence: ParallelGripperCommand's sensor_msgs/JointState command, one joint
        setattr(msg, leaf, [float(value)])


class GripperBridge:
    """One rclpy node; `spin(stop)` until the event is set."""

    def __init__(self, robot: RobotConfig) -> None:
        import rclpy
        from rclpy.action import ActionClient
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from std_msgs.msg import Float64

        self.cfg = robot.gripper_bridge
        if not self.cfg.action:
            raise UserError(f"robot {robot.name}: gripper_bridge.action is empty (its driver reads "
                            f"{robot.gripper_topic} itself, no bridge needed)")  # fmt: skip
        self.action_t = action_class(self.cfg.action_type)
        self.context = Context()
        rclpy.init(context=self.context, domain_id=robot.domain_id)
        ns = robot.namespace.rstrip("/") or "/"
        self.node = rclpy.create_node("robot_rl_gripper_bridge", namespace=ns, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        # Best effort reads every publisher, reliable (RobotEnv) and sensor-data (a teleop node) alike.
        qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
        self.node.create_subscription(Float64, robot.gripper_topic, self._on_opening, qos)
        self.client = ActionClient(self.node, self.action_t, self.cfg.action)
        self.sent: float | None = None  # the opening of the newest goal
        self.goals = 0
        self._running: Any = None  # future of the newest goal's handle

    def _on_opening(self, msg: Any) -> None:
        if not math.isfinite(msg.data):
            return  # RobotEnv never sends one; a broken publisher must not move the gripper
        opening = min(1.0, max(0.0, float(msg.data)))
        if self.sent is not None and abs(opening - self.sent) < self.cfg.deadband:
            return
        if not self.client.server_is_ready():
            log.warning("no action server on %s yet; dropping opening %.2f", self.cfg.action, opening)
            return
        if self._running is not None and self._running.done() and (handle := self._running.result()) is not None:
            handle.cancel_goal_async()  # a finished goal ignores it; a running one makes way for the new target
        goal = self.action_t.Goal()
        _set(goal, self.cfg.position_field, self.cfg.closed + opening * (self.cfg.open - self.cfg.closed))
        if self.cfg.effort_field:
            _set(goal, self.cfg.effort_field, self.cfg.max_effort)
        self._running = self.client.send_goal_async(goal)
        self.sent, self.goals = opening, self.goals + 1
        log.info("opening %.2f -> %s goal %d", opening, self.cfg.action, self.goals)

    def spin(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def close(self) -> None:
        self.executor.shutdown()
        self.client.destroy()
        self.node.destroy_node()
        self.context.try_shutdown()


def serve_gripper_bridge(robot: RobotConfig) -> None:
    """`robot-rl gripper-bridge`: bridges `robot`'s gripper opening to its driver's action until SIGINT / SIGTERM."""
    bridge = GripperBridge(robot)
    stop = stop_on_signals()
    log.info("%s (std_msgs/Float64 opening) -> %s (%s)", robot.gripper_topic, robot.gripper_bridge.action,
             robot.gripper_bridge.action_type)  # fmt: skip
    try:
        bridge.spin(stop)
    finally:
        bridge.close()
