"""Residual RL on a frozen base policy (ResiP / residual off-policy fine-tuning) as an env-side adapter.

The stock SAC learns a residual `r` in [-1, 1]; the env executes clip(base + scale * r) in normalised action
space. The base action is appended to `state`, so every transition stores it and the critic and actor
condition on it. Step 0 equals the base: with `sac.zero_init_actor` the head's deterministic action starts
at exactly zero.
Only the SAC's own parameters exist in its optimisers: the base lives here, frozen, outside the learner.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import gymnasium as gym
import numpy as np
import torch

from robot_rl.types import NpObs, Transition


@dataclass
class ResidualConfig:
    base: str = ""  # checkpoint folder of the frozen base policy (e.g. a bc run's checkpoints/final)
    scale: float = 0.2  # executed = clip(base + scale * residual): how far the head can move the base
    base_deterministic: bool = True  # the base acts on its mode, so the residual corrects a consistent action


class ResidualEnv(gym.Wrapper):
    def __init__(self, env: gym.Env, base: torch.nn.Module, cfg: ResidualConfig) -> None:
        super().__init__(env)
        if cfg.scale <= 0:
            raise ValueError(f"residual.scale must be > 0, got {cfg.scale}")
        self.base = base.eval().requires_grad_(False)
        self.cfg = cfg
        da = env.action_space.shape[0]
        state = env.observation_space["state"]
        spaces = dict(env.observation_space.spaces)
        spaces["state"] = gym.spaces.Box(-np.inf, np.inf, (state.shape[0] + da,), np.float32)
        self.observation_space = gym.spaces.Dict(spaces)
        self.base_action = np.zeros(da, np.float32)

    def _augment(self, obs: NpObs) -> NpObs:
        self.base_action = np.asarray(self.base.select_action(obs, deterministic=self.cfg.base_deterministic))
        return {**obs, "state": np.concatenate([obs["state"], self.base_action]).astype(np.float32)}

    def reset(self, **kwargs) -> tuple[NpObs, dict]:
        obs, info = self.env.reset(**kwargs)
        self.base.reset()
        return self._augment(obs), info

    def step(self, residual: np.ndarray):
        action = np.clip(self.base_action + self.cfg.scale * np.asarray(residual), -1.0, 1.0)
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = {**info, "base_action": self.base_action, "executed_action": action}
        return self._augment(obs), reward, terminated, truncated, info

    def agent_action(self, env_action: np.ndarray) -> np.ndarray:
        """The residual that reproduces an env-space action (a human's) as closely as the scale allows."""
        return np.clip((np.asarray(env_action) - self.base_action) / self.cfg.scale, -1.0, 1.0).astype(np.float32)

    def convert_episode(self, transitions: Iterable[Transition]) -> Iterator[Transition]:
        """One recorded env-space episode (a demo) in the agent's terms: the base is re-run along it in order,
        so a chunked base sees the same history it would have seen acting."""
        self.base.reset()
        prev: Transition | None = None
        for t in transitions:
            obs = self._augment(t.obs)
            if prev is not None:
                yield replace(prev, next_obs=obs)
            prev = replace(t, obs=obs, action=self.agent_action(t.action))
            if t.done:
                yield replace(prev, next_obs=self._augment(t.next_obs))
                prev = None
