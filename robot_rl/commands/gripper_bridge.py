"""`robot-rl gripper-bridge --robot NAME`: the gripper opening `RobotEnv` publishes -> the driver's gripper action."""

from __future__ import annotations

import argparse
import logging

from robot_rl.commands.common import add_robot_args, robot_from_args


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robot-rl gripper-bridge", description=__doc__.splitlines()[0].split(": ", 1)[1])
    add_robot_args(p, "franka")
    return p


def main(argv: list[str]) -> int:
    from robot_rl.real.gripper_bridge import serve_gripper_bridge

    p = build_parser()
    ns = p.parse_intermixed_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s gripper-bridge %(levelname)s %(message)s")
    serve_gripper_bridge(robot_from_args(p, ns))
    return 0
