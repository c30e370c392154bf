"""`robot-rl convert lerobot-export|lerobot-import|rosbag|session|legacy-zarr`: episode stores to and from other
formats."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from robot_rl.commands.common import add_out, resolve_out

TASK_HELP = "the episodes' task: a `train task=` name (e.g. peg_insert) to train on them, or any label"


def build_parser() -> argparse.ArgumentParser:
    from robot_rl.configs import env_task
    from robot_rl.demos.store import SOURCES

    p = argparse.ArgumentParser(prog="robot-rl convert", description="convert between episode stores and other formats")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("lerobot-export", help="store -> LeRobot v3.0 dataset directory")
    s.add_argument("store", type=Path)
    add_out(s, "the LeRobot dataset directory to write", positional_before=True)
    s.add_argument("--fps", type=int, default=10, help="control rate; LeRobot stores an integer")
    s.add_argument("--vcodec", choices=["libsvtav1", "h264"], default="libsvtav1", help="AV1 (LeRobot's default)")
    s.add_argument("--robot-type", default="panda", help="'' for none")
    s.add_argument("--image-key", action="append", default=[], help="camera stored as PNG frames, not video")
    s = sub.add_parser("lerobot-import", help="LeRobot v3.0 dataset directory -> new store")
    s.add_argument("root", type=Path)
    add_out(s, "the new store", positional_before=True)
    s.add_argument("--source", choices=sorted(SOURCES), default="teleop")
    s = sub.add_parser("rosbag", help="ROS 2 bags (sqlite3 or MCAP) -> store")
    s.add_argument("bags", type=Path, nargs="+")
    add_out(s, "the new store")
    s.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="TOPIC=KEY[:FIELD]",
        help="e.g. /joint_states=state:position, /camera/image_raw=front",
    )
    s.add_argument("--reference", help="topic whose messages are the ticks (default: first --topic)")
    s.add_argument("--episode-gap", type=float, default=1.0)
    s.add_argument("--max-age", type=float, default=0.5)
    s.add_argument("--task", type=env_task, default="", help=TASK_HELP)
    s.add_argument("--source", choices=sorted(SOURCES), default="teleop")
    s = sub.add_parser("session", help="robot sessions recorded by `deploy --record FILE.mcap` -> store")
    s.add_argument("recordings", type=Path, nargs="+", help="FILE.mcap (a killed run's FILE.mcap.part reads too)")
    add_out(s, "the new store")
    s.add_argument("--episode-gap", type=float, default=1.0, help="seconds without a command that end an episode")
    s.add_argument("--task", type=env_task, default="", help=TASK_HELP)
    s.add_argument("--source", choices=sorted(SOURCES), default="policy")
    s = sub.add_parser("legacy-zarr", help="diffusion_policy/robomimic zarr v2 replay buffer -> store")
    s.add_argument("src", type=Path)
    add_out(s, "the new store", positional_before=True)
    s.add_argument("--task", type=env_task, default="", help=TASK_HELP)
    s.add_argument("--source", choices=sorted(SOURCES), default="teleop")
    return p


def main(argv: list[str]) -> int:
    p = build_parser()
    ns = p.parse_args(argv)
    resolve_out(p, ns)
    if ns.cmd == "lerobot-export":
        from robot_rl.demos.interop.lerobot import export_lerobot

        result: object = export_lerobot(
            ns.store, ns.out, fps=ns.fps, robot_type=ns.robot_type, vcodec=ns.vcodec, image_keys=tuple(ns.image_key)
        )
    elif ns.cmd == "lerobot-import":
        from robot_rl.demos.interop.lerobot import import_lerobot

        result = import_lerobot(ns.root, ns.out, source=ns.source)
    elif ns.cmd == "rosbag":
        from robot_rl.demos.interop.rosbag import import_rosbag

        topics = dict(t.split("=", 1) for t in ns.topic)
        result = {
            "episodes": import_rosbag(
                ns.bags,
                ns.out,
                topics,
                reference=ns.reference,
                episode_gap_s=ns.episode_gap,
                max_age_s=ns.max_age,
                source=ns.source,
                task=ns.task,
            )
        }
    elif ns.cmd == "session":
        from robot_rl.demos.interop.session import import_session

        result = {"episodes": import_session(ns.recordings, ns.out, episode_gap_s=ns.episode_gap, source=ns.source,
                                             task=ns.task)}  # fmt: skip
    else:
        from robot_rl.demos.interop.legacy_zarr import import_legacy_zarr

        result = {"episodes": import_legacy_zarr(ns.src, ns.out, source=ns.source, task=ns.task)}
    print(json.dumps(result, indent=1))
    return 0
