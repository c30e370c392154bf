"""Simulated Panda tasks, scripted experts and a simulated human intervener.

`rendering` is imported first on purpose: it sets MUJOCO_GL before mujoco is first imported.
"""

from robot_rl.sim import rendering  # noqa: F401  (must run before anything imports mujoco)
from robot_rl.sim.envs import EnvConfig, PandaEnv, make_env
from robot_rl.sim.experts import ExpertPolicy, InterventionConfig, ScriptedExpert, SimulatedHuman
from robot_rl.sim.randomization import RandomizationConfig

__all__ = [
    "EnvConfig",
    "ExpertPolicy",
    "InterventionConfig",
    "PandaEnv",
    "RandomizationConfig",
    "ScriptedExpert",
    "SimulatedHuman",
    "make_env",
]
