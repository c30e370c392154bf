"""Simulated Panda tasks, scripted experts and a simulated human intervener.

Nothing here imports MuJoCo until a name that needs it is used: `robot_rl.sim.config` (the configs a checkpoint
carries) loads on a robot PC without the simulator. MUJOCO_GL is set first, before anything imports mujoco.
"""

import ctypes.util
import importlib
import os

os.environ.setdefault("MUJOCO_GL", "egl" if ctypes.util.find_library("EGL") else "osmesa")

_EXPORTS = {
    "EnvConfig": "config",
    "RandomizationConfig": "config",
    "InterventionConfig": "config",
    "PandaEnv": "envs",
    "ExpertPolicy": "experts",
    "ScriptedExpert": "experts",
    "SimulatedHuman": "experts",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'robot_rl.sim' has no attribute {name!r}")
    return getattr(importlib.import_module(f"robot_rl.sim.{_EXPORTS[name]}"), name)
