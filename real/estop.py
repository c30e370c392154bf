"""`robot-rl estop press|release [--robot sim]`: latch or clear a robot's e-stop from any shell on its ROS 2 graph.

It publishes std_msgs/Bool (True = stop) on the robot config's `estop_topic` with latched QoS, the topic the
deployment node and the robot side hold on: latched, so a node that starts later still sees a pressed e-stop.
"""

from __future__ import annotations

import time

from robot_rl.real import msgs
from robot_rl.real.config import RobotConfig

__all__ = ["publish_estop"]
_SETTLE_S = 1.0
_REPEAT_S = 0.1


def publish_estop(robot: RobotConfig, pressed: bool, wait_s: float) -> tuple[str, int]:
    """Publishes the e-stop state and keeps the writer alive until a reader matched (up to `wait_s`), then a moment
    longer, publishing again: DDS delivers a latched sample only while its writer lives, and a volatile reader that
    matches after a publish never sees it (a node's live e-stop reader then keeps the old state). Returns the topic
    and how many readers matched."""
    from robot_rl.transport import LATCHED_QOS, TransportConfig, make_transport

    cfg = TransportConfig(backend=robot.backend, domain_id=robot.domain_id, namespace=robot.namespace,
                          node_name="robot_rl_estop")  # fmt: skip
    tx = make_transport(cfg)
    try:
        pub = tx.publisher(robot.estop_topic, msgs.BOOL, LATCHED_QOS)
        pub.publish(msgs.scalar(msgs.BOOL, pressed))
        deadline = time.monotonic() + wait_s
        while pub.matched() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        settle = time.monotonic() + (_SETTLE_S if pub.matched() else 0.0)
        while time.monotonic() < settle:  # readers matched meanwhile (volatile ones too) get the state
            time.sleep(_REPEAT_S)
            pub.publish(msgs.scalar(msgs.BOOL, pressed))
        matched = pub.matched()
    finally:
        tx.close()
    return cfg.resolve(robot.estop_topic), matched
