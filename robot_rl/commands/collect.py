"""`robot-rl collect STORE -n N`: device-driven episodes into a store, resumable after a crash or Ctrl-C."""

from __future__ import annotations

import argparse
from pathlib import Path

from robot_rl.commands.common import add_robot_args, renamed_flag
from robot_rl.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    from robot_rl.configs import task_names
    from robot_rl.demos.collect import HUMAN_EPISODE_S
    from robot_rl.demos.teleop import DEVICES

    p = argparse.ArgumentParser(prog="robot-rl collect", description=__doc__.split(": ", 1)[1])
    p.add_argument("store", type=Path, help="the episode store to create (or extend with --resume)")
    p.add_argument(
        "--task", default="pick_cube", help=f"{' | '.join(task_names())} (the names of `robot-rl train task=`)"
    )
    p.add_argument("--episodes", "-n", type=int, required=True, help="target number of episodes in the store")
    p.add_argument(
        "--teleop",
        choices=DEVICES,
        default="scripted",
        help="who drives: the scripted expert, a person (spacemouse, gamepad: pip install -e '.[teleop]'), "
        "or the simulated operator (on the sim robot only)",
    )
    add_robot_args(p, None, robot_help="record on this robot over ROS 2: sim | franka | ur5e | a robot yaml "
                   "(default: in the simulator, no robot)", positional_before=False)  # fmt: skip
    p.add_argument("--sim", default="", help="simulator config as in `train sim=` (mujoco, maniskill, gym, gym_hil)")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env settings as in `train env.KEY=VALUE` (repeatable), e.g. gym.kwargs.random_block_position=true",
    )
    p.add_argument("--obs", default="both", choices=("state", "pixels", "both"), help="what is recorded")
    p.add_argument("--cameras", default="front,wrist", help="comma-separated camera names")
    p.add_argument("--image-size", type=int, default=64, help="camera frame height and width in pixels")
    p.add_argument(
        "--max-steps",
        type=int,
        default=0,
        help=f"episode step limit (0: {HUMAN_EPISODE_S:.0f} s for a person, the task default for scripted)",
    )
    p.add_argument("--instruction", default="", help="language instruction (default: per task)")
    p.add_argument("--success-only", action="store_true", help="discard episodes that did not succeed")
    p.add_argument(
        "--label-frames",
        type=int,
        default=0,
        metavar="N",
        help="label frames for a success classifier: each row records the operator's verdict (`label`: on from the "
        "success key, off from the failure key); the success key ends the episode N steps later, not at once",
    )
    p.add_argument("--resume", action="store_true", help="append to an existing store")
    p.add_argument("--seed", type=int, default=0, help="seed of the first episode (then one more per episode)")
    p.add_argument("--noise", type=float, default=0.0, help="--teleop scripted: action noise std")
    p.add_argument("--wander", type=int, default=0, metavar="N", help="--teleop simulated: first N steps of each "
                   "episode to a random pose and gripper (failure frames for a classifier)")  # fmt: skip
    p.add_argument("--operator", choices=("oracle", "person"), default="oracle", help="--teleop simulated: an "
                   "oracle (exact poses and success), or with a person's limits (intervention.person's defaults: "
                   "estimated poses, late and sometimes wrong success keys)")  # fmt: skip
    p.add_argument("--control-hz", type=float, default=None, help="control rate (default: 10 for human devices, "
                   "unpaced scripted; with --robot the robot config's)")  # fmt: skip
    p.add_argument("--no-fsync", action="store_true", help="faster; survives process crashes, not power loss")
    renamed_flag(p, "--hz", "--control-hz", type=float)
    renamed_flag(p, "--device", "--teleop", choices=DEVICES)
    renamed_flag(p, "--backend", "--robot NAME (no --robot: the simulator)", dest="backend", choices=("sim", "robot"))
    return p


def main(argv: list[str]) -> int:
    from robot_rl.config import load_config  # the env exactly as `train` composes it, through the one env factory
    from robot_rl.configs import task_option
    from robot_rl.demos.collect import HUMAN_EPISODE_S, CollectConfig, collect
    from robot_rl.demos.teleop import UNATTENDED
    from robot_rl.sim.config import PersonConfig

    p = build_parser()
    ns = p.parse_args(argv)
    # the old `--backend robot [--robot X]` (X defaulted to sim) and `--backend sim` (--robot ignored)
    robot = {None: ns.robot, "robot": ns.robot or "sim", "sim": None}[getattr(ns, "backend", None)]
    human = ns.teleop not in UNATTENDED
    hz = ns.control_hz if ns.control_hz is not None else (10.0 if human else 0.0)
    robot_overrides = (*ns.robot_set, *([f"domain_id={ns.domain}"] if ns.domain is not None else []))
    if ns.episodes < 1 or hz < 0 or ns.max_steps < 0 or ns.image_size < 1 or ns.label_frames < 0:
        raise UserError("--episodes and --image-size must be >= 1, --control-hz, --max-steps and --label-frames >= 0")
    if ns.operator == "person" and ns.teleop != "simulated":
        raise UserError("--operator person is the simulated operator's: add --teleop simulated")
    env_cfg = load_config(
        [f"task={task_option(ns.task)}", *([f"sim={ns.sim}"] if ns.sim else []), *(f"env.{kv}" for kv in ns.env)]
    ).env
    cfg = CollectConfig(
        task=env_cfg.task,
        env=env_cfg,
        backend="sim" if robot is None else "robot",
        obs=ns.obs,
        cameras=tuple(c for c in ns.cameras.split(",") if c),
        image_size=ns.image_size,
        max_episode_steps=ns.max_steps or (round(HUMAN_EPISODE_S * (hz or 10.0)) if human else 0),
        instruction=ns.instruction,
        success_only=ns.success_only,
        seed=ns.seed,
        hz=0.0 if robot is not None else hz,  # a RobotEnv keeps its own control rate
        robot=robot or "sim",
        robot_overrides=robot_overrides,
        control_hz=ns.control_hz or 0.0,
        label_frames=ns.label_frames,
    )
    person = PersonConfig() if ns.operator == "person" else None
    stats = collect(cfg, ns.store, ns.episodes, device_name=ns.teleop, noise=ns.noise, wander=ns.wander,
                    person=person, resume=ns.resume, fsync=not ns.no_fsync)  # fmt: skip
    mb = stats.bytes_written / 1e6
    print(
        f"collected {stats.kept} episodes in {ns.store} ({stats.steps} steps, {mb:.1f} MB raw, "
        f"{stats.bytes_written / 1e6 / max(stats.write_s, 1e-9):.1f} MB/s write)"
    )
    return 0
