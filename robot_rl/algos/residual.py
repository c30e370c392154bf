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

from robot_rl.types import NpObs, ObsLayout, Transition


@dataclass
class ResidualConfig:
    base: str = ""  # checkpoint folder of the frozen base policy (e.g. a bc run's checkpoints/final)
    scale: float = 0.5  # executed = clip(base + scale * residual); 0.2 could not undo a weak base's mistakes
    base_deterministic: bool = True  # the base acts on its mode, so the residual corrects a consistent action
    agent_cameras: bool = True  # false: the agent sees state + base action only; the base still reads cameras


def agent_space(space: gym.spaces.Dict, cameras: bool) -> gym.spaces.Dict:
    """What an adapter's agent observes: everything, or without the camera frames ((H, W, 3) boxes) when the
    agent acts on proprio only while its frozen base (a VLA) still reads the full observation."""
    return space if cameras else gym.spaces.Dict({k: s for k, s in space.spaces.items() if len(s.shape) != 3})


def agent_obs(obs: NpObs, base_action: np.ndarray, cameras: bool) -> NpObs:
    """What the residual agent sees: the observation with the base action appended to `state`."""
    state = np.concatenate([obs["state"], base_action]).astype(np.float32)
    if cameras:
        return {**obs, "state": state}
    return {**{k: v for k, v in obs.items() if np.ndim(v) != 3}, "state": state}


def combine(base_action: np.ndarray, residual: np.ndarray, scale: float) -> np.ndarray:
    return np.clip(base_action + scale * np.asarray(residual), -1.0, 1.0)


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
        self.observation_space = agent_space(gym.spaces.Dict(spaces), cfg.agent_cameras)
        self.base_action = np.zeros(da, np.float32)
        self._human_action: np.ndarray | None = None

    @property
    def state_layout(self) -> dict[str, slice]:
        """The task's state fields, then the base action appended to them."""
        inner = ObsLayout.of_env(self.env)
        return {**inner.slices(), "base_action": slice(inner.state_dim, inner.state_dim + inner.action_dim)}

    def _augment(self, obs: NpObs) -> NpObs:
        self.base_action = np.asarray(self.base.select_action(obs, deterministic=self.cfg.base_deterministic))
        return agent_obs(obs, self.base_action, self.cfg.agent_cameras)

    def reset(self, **kwargs) -> tuple[NpObs, dict]:
        obs, info = self.env.reset(**kwargs)
        self.base.reset()
        return self._augment(obs), info

    def step(self, residual: np.ndarray):
        action = combine(self.base_action, residual, self.cfg.scale)
        if self._human_action is not None:
            action, self._human_action = self._human_action, None
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = {**info, "base_action": self.base_action, "executed_action": action}
        return self._augment(obs), reward, terminated, truncated, info

    def agent_action(self, env_action: np.ndarray) -> np.ndarray:
        """The residual that reproduces an env-space action as closely as the scale allows."""
        return np.clip((np.asarray(env_action) - self.base_action) / self.cfg.scale, -1.0, 1.0).astype(np.float32)

    def take_over(self, env_action: np.ndarray) -> np.ndarray:
        """A human drives the next step: it executes `env_action` exactly (a takeover is never limited to the
        base +- scale), and the returned residual, the closest the agent could have done, is what gets stored."""
        self._human_action = np.clip(np.asarray(env_action, np.float32), -1.0, 1.0)
        return self.agent_action(env_action)

    def convert_episode(self, transitions: Iterable[Transition]) -> Iterator[Transition]:
        """One recorded env-space episode (a demo) in the agent's terms: the base is re-run along it in order,
        so a chunked base sees the same history it would have seen acting. The transitions must carry what the
        base reads (a VLA's cameras) even when the agent does not see it (`agent_cameras=false`)."""
        self.base.reset()
        prev: Transition | None = None
        for t in transitions:
            try:
                obs = self._augment(t.obs)
            except KeyError as e:
                raise KeyError(
                    f"the base reads {e} but the recorded observation has only {sorted(t.obs)}: convert demos "
                    "with every key the base needs (or train without demos: demos.n_episodes=0)"
                ) from e
            if prev is not None:
                yield replace(prev, next_obs=obs)
            prev = replace(t, obs=obs, action=self.agent_action(t.action))
            if t.done:
                yield replace(prev, next_obs=self._augment(t.next_obs))
                prev = None


class ResidualPolicy:
    """A trained residual agent and its frozen base as one env-space policy: what `robot-rl deploy` runs on a
    robot, acting exactly as the agent acted inside `ResidualEnv` during training and evaluation."""

    def __init__(self, base: torch.nn.Module, agent: torch.nn.Module, cfg: ResidualConfig) -> None:
        self.base, self.agent, self.cfg = base.eval().requires_grad_(False), agent, cfg

    def reset(self) -> None:
        self.base.reset()
        self.agent.reset()

    def select_action(self, obs: NpObs, deterministic: bool = True) -> np.ndarray:
        base_action = np.asarray(self.base.select_action(obs, deterministic=self.cfg.base_deterministic))
        residual = self.agent.select_action(agent_obs(obs, base_action, self.cfg.agent_cameras), deterministic)
        return combine(base_action, residual, self.cfg.scale)
