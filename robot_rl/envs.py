"""The one env factory: the in-process simulators (`sim/`) or a robot behind its ROS 2 topics (`real/RobotEnv`).

Train, the actor node, evaluation and checkpoints build their envs here, so a run with `robot=<name>` steps the arm
behind that robot config wherever a sim run would step MuJoCo; the learner never knows which.

On a robot the policy observes what a real cell measures (`real.robot.proprio_layout`: TCP pose, gripper, joint
positions and velocities) plus the configured cameras with their crops; never the object's pose, which only a
simulator (or a tracker we do not assume) knows. Reward on a robot comes from its success topic (`reward.source=env`
means "whatever the env reports": the sim's success check in sim, the success topic on a robot).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym

if TYPE_CHECKING:
    from robot_rl.real.config import RobotConfig
    from robot_rl.sim.envs import EnvConfig


def robot_cameras(cfg: EnvConfig) -> tuple[str, ...]:
    """The camera keys a robot run observes: `env.cameras` with obs=pixels, none with obs=state."""
    if cfg.obs == "both":
        raise ValueError("obs=both adds the object's pose, which a robot does not measure: use obs=state or pixels")
    return tuple(cfg.cameras) if cfg.obs == "pixels" else ()


def robot_obs_layout(cfg: EnvConfig, robot: RobotConfig) -> tuple[int, tuple[str, ...], int]:
    """(state dim, camera keys, image size) a robot run observes, without connecting to the robot: what a
    checkpoint's policy is built with (`sim.envs.obs_layout` of the env it would make)."""
    from robot_rl.real.robot import proprio_layout

    cameras = robot_cameras(cfg)
    return max(s.stop for s in proprio_layout(robot).values()), cameras, cfg.image_size if cameras else 0


def make_robot_env(
    cfg: EnvConfig, robot: RobotConfig, seed: int | None = None, node_name: str = "robot_rl_env"
) -> gym.Env:
    """`RobotEnv` on `robot`'s topics with the proprio layout, the task's episode length, `cfg`'s control rate, step
    size and image size (the training config wins over the robot file, as a checkpoint's does on deploy)."""
    import dataclasses

    from robot_rl.real.robot import RobotEnv, proprio_layout
    from robot_rl.sim.envs import HELD_GRIP, task_episode_steps

    robot = dataclasses.replace(robot, image_size=cfg.image_size, max_step=cfg.max_step)
    env = RobotEnv(robot, proprio_layout(robot), robot_cameras(cfg), hz=cfg.control_hz,
                   max_episode_steps=task_episode_steps(cfg), node_name=node_name,
                   delay_compensation=cfg.randomization.delay_compensation,
                   held_grip=HELD_GRIP.get(cfg.task))  # fmt: skip
    if seed is not None:
        env.action_space.seed(seed)  # the first reset is the caller's: it moves the robot
    return env


def make_env(
    cfg: EnvConfig, seed: int | None = None, robot: RobotConfig | None = None, node_name: str = "robot_rl_env"
) -> gym.Env:
    """A sim env of `cfg` (see `sim.envs.make_env`), or with `robot` that robot behind its topics."""
    if robot is not None:
        return make_robot_env(cfg, robot, seed, node_name)
    from robot_rl.sim.envs import make_env as make_sim_env

    return make_sim_env(cfg, seed)


def state_layout(env: gym.Env) -> dict[str, list[int]]:
    """Field -> [start, stop] of `obs["state"]` (what the policy sees), for the run's records."""
    layout = getattr(env.unwrapped, "state_layout", None) or {}
    return {k: [s.start, s.stop] for k, s in layout.items()}
