"""`robot-rl sim-robot` as its own process, seen by a plain rclpy node (tests/plain_ros.py) that uses none of
robot_rl's transport code and ROS defaults: what a stock ROS 2 graph on a robot PC would see and do."""

from __future__ import annotations

import time

import numpy as np
import pytest
from plain_ros import PlainNode, msg_type
from real_util import spawn, stop

pytestmark = [pytest.mark.ros2, pytest.mark.slow, pytest.mark.realtime]
NS = "/robot_rl"


def pose_cmd(xyz: np.ndarray) -> object:
    m = msg_type("geometry_msgs/msg/PoseStamped")()
    now = time.time_ns()
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(now, 10**9)
    m.header.frame_id = "world"
    m.pose.position.x, m.pose.position.y, m.pose.position.z = (float(v) for v in xyz)
    m.pose.orientation.y = 1.0  # the home orientation (x, y, z, w) = (0, 1, 0, 0)
    return m


def float64(v: float) -> object:
    m = msg_type("std_msgs/msg/Float64")()
    m.data = v
    return m


def tcp(msgs_: list) -> np.ndarray:
    p = msgs_[-1].pose.position
    return np.array([p.x, p.y, p.z])


def drive(peer: PlainNode, target: np.ndarray, seconds: float) -> None:
    """Stream the target (default-QoS publisher) and a gripper command (sensor-data-QoS publisher) at 20 Hz."""
    cmd = peer.publisher(f"{NS}/ee_target", "geometry_msgs/msg/PoseStamped", "default")
    grip = peer.publisher(f"{NS}/gripper_command", "std_msgs/msg/Float64", "sensor")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        cmd.publish(pose_cmd(target))
        grip.publish(float64(0.0))
        t_next = time.monotonic() + 0.05
        while time.monotonic() < t_next:
            peer.executor.spin_once(timeout_sec=0.01)


def test_plain_node_lists_reads_and_drives_the_sim_robot(domain: int) -> None:
    sim = spawn("sim-robot", "--domain", str(domain), "--cameras", "front")
    try:
        with PlainNode(domain) as peer:
            joints = peer.subscribe(f"{NS}/joint_states", "sensor_msgs/msg/JointState", "sensor")
            images = peer.subscribe(f"{NS}/camera/front/image", "sensor_msgs/msg/Image", "sensor")
            poses = peer.subscribe(f"{NS}/ee_pose", "geometry_msgs/msg/PoseStamped", "default")
            status = peer.subscribe(f"{NS}/robot_status", "std_msgs/msg/String", "default")
            wrench = peer.subscribe(f"{NS}/ee_wrench", "geometry_msgs/msg/WrenchStamped", "sensor")

            def listed() -> bool:
                if ("sim_robot", NS) not in peer.node.get_node_names_and_namespaces():
                    return False
                pubs, subs = peer.node_endpoints("sim_robot", NS)
                state = {f"{NS}/joint_states", f"{NS}/ee_pose", f"{NS}/ee_wrench", f"{NS}/camera/front/image"}
                return (
                    state <= pubs.keys() and {f"{NS}/ee_target", f"{NS}/gripper_command", f"{NS}/estop"} <= subs.keys()
                )

            peer.spin_until(listed, 60, "sim_robot listed with its endpoints")
            peer.spin_until(
                lambda: len(joints) > 5 and len(images) > 2 and len(poses) > 5 and bool(status) and len(wrench) > 5,
                30,
                "state, images and status",
            )
            js, img = joints[-1], images[-1]
            assert len(js.name) == len(js.position) == 9 and js.name[0] == "joint1"
            assert (img.height, img.width, img.encoding) == (64, 64, "rgb8") and len(img.data) == 64 * 64 * 3
            w = wrench[-1]  # in the base frame of the TCP pose; the hand in free air: no force on it
            assert w.header.frame_id == poses[-1].header.frame_id and w.header.stamp.sec > 0
            assert abs(w.wrench.force.z) < 1.0

            start = tcp(poses)
            target = start + np.array([0.0, 0.05, 0.05])
            drive(peer, target, 2.0)
            assert np.linalg.norm(tcp(poses) - target) < 0.01, (start, tcp(poses), target)
            assert status and status[-1].data == "ok"
    finally:
        stop(sim)


def test_estop_pressed_before_the_sim_robot_starts_holds_it(domain: int) -> None:
    sim = None  # killed after the node closes: Fast DDS's teardown can crash beside a participant killed under it
    try:
        with PlainNode(domain) as peer:
            estop = peer.publisher(f"{NS}/estop", "std_msgs/msg/Bool", "latched")
            pressed = msg_type("std_msgs/msg/Bool")()
            pressed.data = True
            estop.publish(pressed)
            sim = spawn("sim-robot", "--domain", str(domain))
            poses = peer.subscribe(f"{NS}/ee_pose", "geometry_msgs/msg/PoseStamped", "sensor")
            status = peer.subscribe(f"{NS}/robot_status", "std_msgs/msg/String", "default")
            # DDS delivers the latched press some time after the first state: wait for the robot to report it.
            peer.spin_until(lambda: len(poses) > 5 and status and status[-1].data == "hold: estop", 60, "the hold")
            start = tcp(poses)
            drive(peer, start + np.array([0.0, 0.05, 0.05]), 1.5)
            assert status[-1].data == "hold: estop", [s.data for s in status]
            assert np.linalg.norm(tcp(poses) - start) < 0.003  # commands were refused
    finally:
        if sim is not None:
            stop(sim)
