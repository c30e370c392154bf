"""Diffusion steering (DSRL): the stock SAC acts in the frozen diffusion policy's initial-noise space.

An env-side adapter, not a fork of the learner: one agent step = one DDIM chunk planned from the agent's noise
and its `n_action_steps` executed in the env. Chunk semantics: the agent's reward is the chunk's env rewards
aggregated by `chunk_reward`, and `sac.discount` applies once per chunk. The noise is bounded: the agent's
tanh action in [-1, 1] is scaled by `noise_bound`, so it stays near the noise the policy was trained on.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from robot_rl.algos.residual import agent_space
from robot_rl.types import NpObs


@dataclass
class DSRLConfig:
    base: str = ""  # checkpoint folder of the frozen diffusion policy (a `algo=bc_diffusion` run)
    # |noise| <= this per element: past the bulk of the training noise, or the base's actions barely move with it
    # (docs/log/benchmarks.md, "Diffusion policy, residual RL, DSRL").
    noise_bound: float = 2.0
    chunk_reward: str = "sum"  # sum | max of the env rewards over the executed chunk
    agent_cameras: bool = True  # false: the agent sees proprio state only; the base still reads cameras


class NoiseEnv(gym.Wrapper):
    def __init__(self, env: gym.Env, policy: torch.nn.Module, cfg: DSRLConfig) -> None:
        super().__init__(env)
        if not hasattr(policy, "noise_shape"):
            raise ValueError(f"DSRL needs a generative chunk policy with a noise seam; got {type(policy).__name__}")
        if cfg.chunk_reward not in ("sum", "max"):
            raise ValueError(f"dsrl.chunk_reward={cfg.chunk_reward!r}; expected 'sum' or 'max'")
        if cfg.noise_bound <= 0:
            raise ValueError(f"dsrl.noise_bound must be > 0, got {cfg.noise_bound}")
        self.policy = policy.eval().requires_grad_(False)
        self.cfg = cfg
        self.noise_shape = tuple(policy.noise_shape)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (int(np.prod(self.noise_shape)),), np.float32)
        self.observation_space = agent_space(env.observation_space, cfg.agent_cameras)
        self.sim_steps = 0  # env steps actually executed (agent steps count chunks)
        self._obs: NpObs | None = None

    def reset(self, **kwargs) -> tuple[NpObs, dict]:
        obs, info = self.env.reset(**kwargs)
        self.policy.reset()
        self._obs = obs
        return self._agent_obs(obs), info

    def _agent_obs(self, obs: NpObs) -> NpObs:
        """The policy keeps the full observation (`_obs`); the agent gets its view of it."""
        return obs if self.cfg.agent_cameras else {k: obs[k] for k in self.observation_space.spaces}

    def noise(self, action: np.ndarray) -> torch.Tensor:
        """Agent action in [-1, 1] -> the diffusion start noise (1, horizon, Da), inside +-noise_bound."""
        a = np.clip(np.asarray(action, np.float32), -1.0, 1.0)
        return torch.from_numpy(a * self.cfg.noise_bound).reshape(1, *self.noise_shape)

    def step(self, action: np.ndarray):
        if self.policy.queued:
            raise RuntimeError("the diffusion policy still has queued actions at a chunk boundary")
        noise, obs = self.noise(action), self._obs
        rewards, executed = [], []
        for i in range(self.policy.n_action_steps):
            a = self.policy.select_action(obs, noise=noise if i == 0 else None)
            obs, reward, terminated, truncated, info = self.env.step(a)
            executed.append(a)
            rewards.append(float(reward))
            self.sim_steps += 1
            if terminated or truncated:
                self.policy.reset()
                break
        self._obs = obs
        reward = sum(rewards) if self.cfg.chunk_reward == "sum" else max(rewards)
        info = {**info, "chunk_actions": np.stack(executed), "chunk_length": len(executed)}
        return self._agent_obs(obs), reward, terminated, truncated, info
