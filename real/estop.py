"""`robot-rl estop press|release [--robot sim]`: latch or clear a robot's e-stop from any shell on its ROS 2 graph.

It publishes std_msgs/Bool (True = stop) on the robot config's `estop_topic` with latched QoS, the topic the
deployment node and the robot side hold on: latched, so a node that starts later still sees a pressed e-stop.
"""

from __future__ import annotations

import argparse
import time

from robot_rl.real import msgs
from robot_rl.real.config import RobotConfig, load_robot_config

__all__ = ["main", "publish_estop"]


def publish_estop(robot: RobotConfig, pressed: bool, linger_s: float) -> str:
    """Publishes the e-stop state and keeps the writer alive `linger_s` seconds: DDS delivers a latched sample to
    readers only while its writer lives, so a process that exits at once may reach nobody. Returns the topic."""
    from robot_rl.transport import LATCHED_QOS, TransportConfig, make_transport

    cfg = TransportConfig(backend=robot.backend, domain_id=robot.domain_id, namespace=robot.namespace,
                          node_name="robot_rl_estop")  # fmt: skip
    tx = make_transport(cfg)
    try:
        tx.publisher(robot.estop_topic, msgs.BOOL, LATCHED_QOS).publish(msgs.scalar(msgs.BOOL, pressed))
        time.sleep(linger_s)
    finally:
        tx.close()
    return cfg.resolve(robot.estop_topic)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="robot-rl estop", description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("action", choices=("press", "release"), help="press: stop the robot and hold; release: clear it")
    p.add_argument("--robot", default="sim", help="sim | franka | ur5e | path to a robot yaml (names the topic)")
    p.add_argument("--domain", type=int, default=None, help="DDS domain id (default: the robot config's)")
    p.add_argument("--linger", type=float, default=2.0, help="seconds to stay on the graph so every node hears it")
    ns = p.parse_args(argv)
    robot = load_robot_config(ns.robot)
    if ns.domain is not None:
        robot.domain_id = ns.domain
    topic = publish_estop(robot, ns.action == "press", max(0.0, ns.linger))
    print(f"e-stop {'pressed' if ns.action == 'press' else 'released'} on {topic} (domain {robot.domain_id})")
    return 0
