"""`robot-rl sim-robot`: the MuJoCo arm served on a robot's ROS 2 topics, a stand-in for a real cell."""

from __future__ import annotations

import argparse
import dataclasses
import logging

from robot_rl.commands.common import add_robot_args, renamed_flag, robot_from_args


def build_parser() -> argparse.ArgumentParser:
    from robot_rl.configs import task_names
    from robot_rl.real.sim_robot import CELLS
    from robot_rl.sim.config import TASKS  # the MuJoCo tasks, the ones this arm serves

    served = [name for name, task in task_names().items() if task in TASKS]
    p = argparse.ArgumentParser(prog="robot-rl sim-robot", description="serve the MuJoCo arm on robot topics")
    add_robot_args(p, "sim")
    p.add_argument("--task", default="pick_cube", help=f"{' | '.join(served)} (the names of `robot-rl train task=`)")
    p.add_argument("--physics-hz", type=float, default=100.0, help="physics tick and state publish rate (real time)")
    p.add_argument(
        "--lockstep",
        action="store_true",
        help="advance one control period per command received instead of real time (tests, benchmarks)",
    )
    p.add_argument(
        "--control-hz",
        type=float,
        default=None,
        help="lockstep: the policy's control rate (default: the robot config's control_hz)",
    )
    p.add_argument("--cell", default="",
                   help=f"a stand-in real cell: {' | '.join(CELLS)}, random:SEED (every factor drawn outside the"
                        " training ranges) or a yaml with the same keys (see CELLS); the flags below override its"
                        " values")  # fmt: skip
    p.add_argument("--latency", type=float, default=None,
                   help="seconds between a command arriving and acting; 0.1 is one control period of a 10 Hz policy,"
                        " what `randomization.action_latency=1` models in training")  # fmt: skip
    p.add_argument("--noise", type=float, default=None, help="metres of noise on published positions")
    p.add_argument("--command-timeout", type=float, default=0.25, help="hold when commands stop this long")
    p.add_argument("--cameras", default="", help="comma-separated model cameras to publish, e.g. front,wrist")
    p.add_argument("--camera-hz", type=float, default=30.0, help="camera frame publish rate")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--friction", type=float, nargs=2, default=None, metavar=("LO", "HI"))
    p.add_argument("--mass", type=float, nargs=2, default=None, metavar=("LO", "HI"))
    p.add_argument("--damping", type=float, nargs=2, default=None, metavar=("LO", "HI"))
    p.add_argument("--camera-jitter", type=float, nargs=2, default=None, metavar=("POS_M", "ROT_RAD"))
    p.add_argument("--object-range", type=float, nargs=2, default=None, metavar=("X_M", "Y_M"),
                   help="object (PegInsert: the hole) start offset +- around the task's spot; 0 0 pins it")  # fmt: skip
    p.add_argument(
        "--arm",
        choices=("osc", "mocap"),
        default="",
        help="the sim arm (sim/envs.py EnvConfig.arm; default: mocap under twist commands, else osc)",
    )
    p.add_argument("--driver", default=None, choices=("", "franka", "ur5e"),
                   help="serve a stock driver's topics, services and faults (real/drivers.py); default: the robot "
                        "config's `driver` ('' for our own topics)")  # fmt: skip
    p.add_argument("--drill", action="append", default=[], metavar="KIND",
                   help="a driver fault in force from the start (repeatable; tests, benches): e.g. ur5e's mute, "
                        "franka's user_stop; later ones go on /<driver>_standin/fault")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: until killed)")
    renamed_flag(p, "--hz", "--physics-hz", type=float)
    return p


def main(argv: list[str]) -> int:
    from robot_rl.configs import task_names, task_option
    from robot_rl.real.sim_robot import RandomizationConfig, SimRobotConfig, load_cell, serve_sim_robot
    from robot_rl.sim.config import TASKS

    p = build_parser()
    ns = p.parse_intermixed_args(argv)
    task = task_names()[task_option(ns.task, among=TASKS)]  # a wrong name fails here, before any ROS starts
    logging.basicConfig(level=logging.INFO, format="%(asctime)s sim-robot %(levelname)s %(message)s")
    robot = robot_from_args(p, ns)
    cell = load_cell(ns.cell) if ns.cell else {}
    rand = cell.pop("randomization", RandomizationConfig())
    flags = {"friction_scale": ns.friction, "mass_scale": ns.mass, "damping_scale": ns.damping,
             "object_xy_range": ns.object_range}  # fmt: skip
    rand = dataclasses.replace(rand, **{k: tuple(v) for k, v in flags.items() if v is not None})
    if ns.camera_jitter is not None:
        rand = dataclasses.replace(rand, camera_pos_jitter=ns.camera_jitter[0], camera_rot_jitter=ns.camera_jitter[1])
    cell.update({k: v for k, v in (("latency_s", ns.latency), ("noise_std", ns.noise)) if v is not None})
    cfg = SimRobotConfig(
        task=task, physics_hz=ns.physics_hz, command_timeout_s=ns.command_timeout,
        cameras=tuple(c for c in ns.cameras.split(",") if c), camera_hz=ns.camera_hz, image_size=ns.image_size,
        seed=ns.seed, randomization=rand, lockstep=ns.lockstep or robot.lockstep,
        control_hz=ns.control_hz or robot.control_hz, arm=ns.arm,
        driver=robot.driver if ns.driver is None else ns.driver, drills=tuple(ns.drill), **cell,
    )  # fmt: skip
    serve_sim_robot(cfg, robot, ns.duration, ns.cell)
    return 0
