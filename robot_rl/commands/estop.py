"""`robot-rl estop press|release [--robot NAME]`: latch or clear a robot's e-stop from any shell on its ROS 2 graph."""

from __future__ import annotations

import argparse
import sys

from robot_rl.commands.common import add_robot_args, robot_from_args


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robot-rl estop", description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("action", choices=("press", "release"), help="press: stop the robot and hold; release: clear it")
    add_robot_args(p, "sim", overrides=False)
    p.add_argument("--wait", type=float, default=10.0, help="seconds to wait for a node that listens on the e-stop")
    return p


def main(argv: list[str]) -> int:
    from robot_rl.real.estop import publish_estop

    p = build_parser()
    ns = p.parse_args(argv)
    robot = robot_from_args(p, ns)
    topic, heard = publish_estop(robot, ns.action == "press", max(0.0, ns.wait))
    done = "pressed" if ns.action == "press" else "released"
    if not heard:
        print(f"e-stop {done} on {topic} (domain {robot.domain_id}) but no node listens there", file=sys.stderr)
        return 1
    print(f"e-stop {done} on {topic} (domain {robot.domain_id}); {heard} node endpoint(s) heard it")
    return 0
