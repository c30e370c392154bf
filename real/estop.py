"""`robot-rl estop press|release [--robot sim]`: latch or clear a robot's e-stop from any shell on its ROS 2 graph.

It publishes std_msgs/Bool (True = stop) on the robot config's `estop_topic` with latched QoS, the topic the
deployment node and the robot side hold on: latched, so a node that starts later still sees a pressed e-stop.
"""

from __future__ import annotations

import argparse
import sys
import time

from robot_rl.real import msgs
from robot_rl.real.config import RobotConfig, add_robot_args, robot_from_args

__all__ = ["main", "publish_estop"]
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


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="robot-rl estop", description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("action", choices=("press", "release"), help="press: stop the robot and hold; release: clear it")
    add_robot_args(p, "sim", overrides=False)
    p.add_argument("--wait", type=float, default=10.0, help="seconds to wait for a node that listens on the e-stop")
    ns = p.parse_args(argv)
    robot = robot_from_args(ns)
    topic, heard = publish_estop(robot, ns.action == "press", max(0.0, ns.wait))
    done = "pressed" if ns.action == "press" else "released"
    if not heard:
        print(f"e-stop {done} on {topic} (domain {robot.domain_id}) but no node listens there", file=sys.stderr)
        return 1
    print(f"e-stop {done} on {topic} (domain {robot.domain_id}); {heard} node endpoint(s) heard it")
    return 0
