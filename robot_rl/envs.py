"""The one env entry point, `make_env`: an in-process simulator (`sim/`: the MuJoCo tasks, ManiSkill, gymnasium ids)
or a robot behind its ROS 2 topics (`real/RobotEnv`), chosen by config; `make_vec_env` for N ManiSkill envs as one
batch (`loop.num_envs`).

Train, eval, collect, replay, deploy and the nodes build their envs here, so a run with `robot=<name>` steps the arm
behind that robot config wherever a sim run would step MuJoCo; the learner never knows which.

On a robot the policy observes what a real cell measures (`robot_layout`: TCP pose, gripper, joint positions and
velocities, the wrench where the robot names one) plus the configured cameras with their crops; never the object's
pose, which only a simulator (or a tracker we do not assume) knows. A sim run with `env.for_robot=<name>` trains for
that arm: MuJoCo inside its safety limits (a robot run has its safety layer), and with obs=pixels observing exactly
`robot_layout`, so the checkpoint deploys on the arm unchanged. A checkpoint's own layout (deploy) wins over both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym

from robot_rl.real.config import load_robot_config, proprio_layout
from robot_rl.sim.config import HELD_GRIP, task_episode_steps
from robot_rl.types import ObsLayout

if TYPE_CHECKING:
    from robot_rl.real.config import RobotConfig
    from robot_rl.sim.config import EnvConfig
    from robot_rl.sim.maniskill import ManiSkillVecEnv


def robot_layout(cfg: EnvConfig, robot: RobotConfig) -> ObsLayout:
    """What a robot run observes, without connecting to the robot: the proprio fields, `env.cameras` with obs=pixels
    (none with obs=state) and the robot's crops, the run's image size, step size and control rate."""
    cameras = tuple(cfg.cameras) if cfg.obs == "pixels" else ()
    crops = {c.name: tuple(c.crop) for c in robot.cameras if c.name in cameras and c.crop}
    return ObsLayout(
        state={k: (s.start, s.stop) for k, s in proprio_layout(robot).items()},
        cameras=cameras,
        image_size=cfg.image_size if cameras else 0,
        crops=crops,
        max_step=cfg.max_step,
        control_hz=cfg.control_hz,
    )


def make_env(
    cfg: EnvConfig,
    seed: int | None = None,
    robot: RobotConfig | None = None,
    node_name: str = "robot_rl_env",
    layout: ObsLayout | None = None,
) -> gym.Env:
    """The env of `cfg`: in the simulator, or with `robot` that arm behind its topics, observing `layout` (a
    checkpoint's; default `robot_layout`). With a seed, a sim env's first reset and its action space are seeded; a
    robot's first reset is the caller's (it moves the arm)."""
    if robot is None:
        from robot_rl.sim.envs import make_sim_env

        arm = load_robot_config(cfg.for_robot) if cfg.for_robot else None
        return make_sim_env(cfg, seed, arm and arm.safety, arm and robot_layout(cfg, arm))
    from robot_rl.real.robot import RobotEnv

    env = RobotEnv(robot, layout or robot_layout(cfg, robot), max_episode_steps=task_episode_steps(cfg),
                   node_name=node_name, delay_compensation=cfg.randomization.delay_compensation,
                   held_grip=HELD_GRIP.get(cfg.task))  # fmt: skip
    if seed is not None:
        env.action_space.seed(seed)
    return env


def make_vec_env(cfg: EnvConfig, num_envs: int) -> ManiSkillVecEnv:
    """`num_envs` envs of a ManiSkill task stepped as one batch (`loop.num_envs`): one ManiSkill env on PhysX GPU
    when CUDA is there, else CPU scenes stepped in turn. Unreset: the batched actor seeds the first reset."""
    from robot_rl.sim.maniskill import make_maniskill_vec_env

    return make_maniskill_vec_env(cfg, num_envs)
