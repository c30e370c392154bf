"""`robot-rl deploy RUN_DIR|CHECKPOINT --robot NAME`: run a checkpoint's policy on a robot at a fixed rate."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from robot_rl.commands.common import add_robot_args, renamed_flag, robot_from_args


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robot-rl deploy", description="run a checkpoint's policy on a robot")
    p.add_argument("checkpoint", type=Path, help="a run dir (its final or latest checkpoint) or a checkpoint folder")
    add_robot_args(p, "sim")
    p.add_argument("--episodes", type=int, default=10, help="episodes to run")
    p.add_argument("--control-hz", type=float, default=None, help="control rate (default: the checkpoint's, 10-50 Hz)")
    p.add_argument(
        "--record",
        type=Path,
        action="append",
        default=[],
        help="append episodes to this zarr episode store; a FILE.mcap records the session's ROS 2 topics instead "
        "(rosbag2 MCAP: ros2 bag, Foxglove; `convert session` reads it); give --record twice for both",
    )
    p.add_argument(
        "--teleop",
        default="none",
        choices=("none", "spacemouse", "gamepad", "keyboard"),
        help="human takeover device (the scripted expert needs sim state, so it is not offered)",
    )
    p.add_argument("--seed", type=int, default=2_000_000, help="first episode seed (reset=topic robots)")
    p.add_argument("--quiet", action="store_true", help="no live status line")
    renamed_flag(p, "--hz", "--control-hz", type=float)
    return p


def main(argv: list[str]) -> int:
    from robot_rl.demos.teleop import make_device
    from robot_rl.real.deploy import ESTOP_EVENT, SUCCESS_EVENT, deploy

    p = build_parser()
    ns = p.parse_intermixed_args(argv)
    robot = robot_from_args(p, ns)
    if ns.control_hz is not None and not 1.0 <= ns.control_hz <= 100.0:
        p.error("--control-hz must be within 1..100")
    from robot_rl.checkpoint import Checkpoint

    bags = [r for r in ns.record if r.suffix == ".mcap"]
    stores = [r for r in ns.record if r.suffix != ".mcap"]
    if len(bags) > 1 or len(stores) > 1:
        p.error("--record takes at most one zarr store and one .mcap file")
    checkpoint = Checkpoint(ns.checkpoint)  # a wrong path says so before a teleop device is opened
    device = make_device(ns.teleop) if ns.teleop != "none" else None
    if ns.teleop == "keyboard":
        from robot_rl.demos.teleop.keyboard import key_help

        labels = {"intervene": "take over / hand back", ESTOP_EVENT: "E-STOP", SUCCESS_EVENT: "episode succeeded"}
        keys = ("intervene", "gripper", ESTOP_EVENT, *((SUCCESS_EVENT,) if not robot.success_topic else ()))
        print(key_help(keys, labels), file=sys.stderr)
    try:
        summary = deploy(checkpoint, robot, ns.episodes, ns.control_hz, next(iter(stores), None), device, ns.seed,
                         not ns.quiet, bag=next(iter(bags), None))  # fmt: skip
    finally:
        if device is not None:
            device.close()
    print(json.dumps(summary, indent=1))
    if stopped := summary["stopped"]:  # an e-stop or a silent robot is not a normal end: scripts must see it
        if stopped.startswith("SafetyStop"):
            fix = f"`robot-rl estop release --robot {ns.robot}` clears the latched e-stop"
        else:
            fix = "is the robot side up, on this domain?"
        print(f"robot-rl deploy: stopped by {stopped}; {fix}", file=sys.stderr)
        return 3
    return 0
