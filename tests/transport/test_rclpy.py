"""The rclpy backend against a real ROS 2 install; skipped where rclpy is missing (this dev box)."""

from __future__ import annotations

import numpy as np
import pytest
from transport_util import wait_until

from robot_rl.transport import make_transport, typesys

pytest.importorskip("rclpy")
pytestmark = pytest.mark.ros2


def test_rclpy_joint_state_round_trip(cfg) -> None:
    store = typesys.typestore(cfg().distro)
    t = store.types
    msg = t["sensor_msgs/msg/JointState"](
        header=t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=1, nanosec=2), frame_id="b"),
        name=["j"], position=np.array([0.5]), velocity=np.zeros(1), effort=np.zeros(1),
    )  # fmt: skip
    with make_transport(cfg(backend="rclpy", node_name="a")) as a, make_transport(cfg(backend="rclpy")) as b:
        pub = a.publisher("js", "sensor_msgs/msg/JointState")
        sub = b.subscription("js", "sensor_msgs/msg/JointState")
        wait_until(lambda: pub.matched() == 1)
        pub.publish(msg)
        got: list = []
        wait_until(lambda: sub.wait(0.05) and got.extend(sub.take()) is None and len(got) == 1)
    assert got[0].position.tolist() == [0.5] and got[0].header.frame_id == "b"
