"""Any registered gymnasium env behind our env contract (what `make_env` returns for `sim=gym`).

Our contract: `obs["state"]` float32 vector plus optional (S, S, 3) uint8 cameras at top level, a continuous
action in [-1, 1], `info["success"]`. `GymConfig` maps a foreign env onto it: which observation entries form
`state` (nested dicts addressed as `a.b`), which are cameras, how our action fills the env's action, and which
info key says success. Scripted demos and the simulated human need privileged state; a foreign env gets it from
a `privileged` plug-in (`module:Class`, e.g. sim/gym_hil.py) or refuses them with a clear message.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import cv2
import gymnasium as gym
import numpy as np

from robot_rl.sim.config import GymConfig

__all__ = ["GymConfig", "GymEnv", "NoPrivilegedState"]


class NoPrivilegedState(RuntimeError):
    """The env has no privileged-state plug-in, so scripted demos and the simulated human cannot run on it."""


def _leaves(space: gym.spaces.Space, prefix: str = "") -> dict[str, gym.spaces.Box]:
    if isinstance(space, gym.spaces.Dict):
        out = {}
        for k, s in space.spaces.items():
            out |= _leaves(s, f"{prefix}{k}.")
        return out
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"observation entry {prefix[:-1]!r} is a {type(space).__name__}; only Box entries map")
    return {prefix[:-1] or "obs": space}


def _get(obs: Any, path: str) -> np.ndarray:
    if path == "obs" and not isinstance(obs, dict):
        return np.asarray(obs)
    for part in path.split("."):
        obs = obs[part]
    return np.asarray(obs)


def _is_image(box: gym.spaces.Box) -> bool:
    return box.dtype == np.uint8 and len(box.shape) == 3 and box.shape[-1] == 3


class GymEnv(gym.Env):
    """A foreign gymnasium env as one of ours. `unwrapped` is this adapter, so experts find `sim_state()` here."""

    metadata = {"render_modes": []}

    def __init__(self, task: str, cfg: GymConfig, obs: str = "state", image_size: int = 64, max_steps: int = 0):
        kwargs = dict(cfg.kwargs) | ({"max_episode_steps": max_steps} if max_steps else {})
        namespace = task.split("/", 1)[0] if "/" in task else ""
        if cfg.module or (namespace and importlib.util.find_spec(namespace) is not None):
            importlib.import_module(cfg.module or namespace)
        self.env = gym.make(task, **kwargs)
        self.task, self.cfg, self.image_size = task, cfg, image_size
        leaves = _leaves(self.env.observation_space)
        images = {k for k, b in leaves.items() if _is_image(b)}
        self.state_keys = list(cfg.state_keys) or [k for k in leaves if k not in images]
        cams = dict(cfg.cameras) or {k.rsplit(".", 1)[-1]: k for k in sorted(images)}
        self.cameras = {} if obs == "state" else cams
        for k in [*self.state_keys, *self.cameras.values()]:
            if k not in leaves:
                raise ValueError(f"{task}: observation has no entry {k!r}; it has {sorted(leaves)}")
        if obs != "state" and not self.cameras:
            raise ValueError(f"{task}: obs={obs} but the env has no (H, W, 3) uint8 images (check env.gym.kwargs)")
        dim = sum(int(np.prod(leaves[k].shape)) for k in self.state_keys)
        spaces = {"state": gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)}
        spaces |= {c: gym.spaces.Box(0, 255, (image_size, image_size, 3), np.uint8) for c in self.cameras}
        self.observation_space = gym.spaces.Dict(spaces)
        act = self.env.action_space
        if not isinstance(act, gym.spaces.Box) or act.dtype.kind != "f":
            raise ValueError(f"{task}: action space {act} is not continuous; robot_rl acts with a float vector")
        if cfg.action_from:
            if len(cfg.action_from) != act.shape[0] or len(cfg.action_scale) != act.shape[0]:
                raise ValueError(f"{task}: action_from / action_scale need {act.shape[0]} entries, one per env dim")
            n = max(cfg.action_from) + 1
        else:
            if not (np.all(np.isfinite(act.low)) and np.all(np.isfinite(act.high))):
                raise ValueError(f"{task}: unbounded action space; give env.gym.action_from and action_scale")
            n = act.shape[0]
        self.action_space = gym.spaces.Box(-1.0, 1.0, (n,), np.float32)
        self._privileged = _load(cfg.privileged)() if cfg.privileged else None

    def _observe(self, raw: Any) -> dict[str, np.ndarray]:
        state = np.concatenate([_get(raw, k).astype(np.float32).reshape(-1) for k in self.state_keys])
        out = {"state": state}
        for c, k in self.cameras.items():
            img = _get(raw, k)
            if img.shape[:2] != (self.image_size, self.image_size):
                img = cv2.resize(img, (self.image_size, self.image_size), interpolation=cv2.INTER_AREA)
            out[c] = np.ascontiguousarray(img, np.uint8)
        return out

    def to_env_action(self, action: np.ndarray) -> np.ndarray:
        a = np.clip(np.asarray(action, np.float32), -1.0, 1.0)
        space = self.env.action_space
        if self.cfg.action_from:
            picked = np.array([a[i] if i >= 0 else 0.0 for i in self.cfg.action_from], np.float32)
            return (picked * np.asarray(self.cfg.action_scale, np.float32)).astype(space.dtype)
        return (space.low + (a + 1.0) * 0.5 * (space.high - space.low)).astype(space.dtype)

    def _info(self, info: dict[str, Any]) -> dict[str, Any]:
        return {**info, "success": bool(info.get(self.cfg.success_key, False))}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        raw, info = self.env.reset(seed=seed, options=options)
        return self._observe(raw), self._info(info)

    def step(self, action: np.ndarray):
        raw, reward, terminated, truncated, info = self.env.step(self.to_env_action(action))
        return self._observe(raw), float(reward), bool(terminated), bool(truncated), self._info(info)

    def close(self) -> None:
        self.env.close()

    def sim_state(self) -> dict[str, Any]:
        """Privileged state for scripted experts and the simulated human, from the `privileged` plug-in."""
        if self._privileged is None:
            raise NoPrivilegedState(
                f"{self.task} has no privileged-state plug-in (env.gym.privileged), so no scripted demos or simulated "
                "human: train with demos.n_episodes=0 intervention.enabled=false, or demos.path=<a store>"
            )
        return self._privileged.state(self.env.unwrapped)

    def expert_goal(self, s: dict[str, Any]) -> tuple[np.ndarray, float]:
        """(TCP goal position, gripper command) for ScriptedExpert, from the plug-in."""
        return self._privileged.goal(s)


def _load(path: str) -> type:
    module, _, name = path.partition(":")
    if not name:
        raise ValueError(f"env.gym.privileged={path!r}; expected 'module:Class'")
    return getattr(importlib.import_module(module), name)
