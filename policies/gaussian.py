"""Tanh-Gaussian policy: the SAC actor, and what HIL-SERL actors run on the robot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from robot_rl.nets import MLP, ObsEncoder
from robot_rl.policies.base import Obs, batch_obs
from robot_rl.types import Batch

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class GaussianHead(nn.Module):
    """Features -> tanh-squashed Gaussian over actions."""

    def __init__(self, in_dim: int, act_dim: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.trunk = MLP(in_dim, hidden, 2 * act_dim, layernorm=True)

    def forward(
        self, feat: torch.Tensor, deterministic: bool = False, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (action in [-1, 1], log-prob) with the tanh change of variables."""
        mean, log_std = self.trunk(feat).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1.0)
        std = log_std.exp()
        if deterministic:
            eps = torch.zeros_like(mean)
        else:
            eps = torch.randn_like(mean) if noise is None else noise
        u = mean + std * eps
        action = torch.tanh(u)
        # log N(u) - sum log(1 - tanh(u)^2), the latter in the numerically stable softplus form.
        log_prob = (-0.5 * eps.pow(2) - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
        log_prob = log_prob - (2.0 * (np.log(2.0) - u - nn.functional.softplus(-2.0 * u))).sum(-1)
        return action, log_prob

    def log_prob(self, feat: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        mean, log_std = self.trunk(feat).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1.0)
        u = torch.atanh(action.clamp(-0.999, 0.999))
        eps = (u - mean) / log_std.exp()
        lp = (-0.5 * eps.pow(2) - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
        return lp - (2.0 * (np.log(2.0) - u - nn.functional.softplus(-2.0 * u))).sum(-1)


class GaussianPolicy(nn.Module):
    """Encoder + Gaussian head. The encoder is trained by the critic; the actor sees detached features."""

    def __init__(self, encoder: ObsEncoder, act_dim: int, hidden: Sequence[int] = (256, 256)) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = GaussianHead(encoder.out_dim, act_dim, hidden)
        self.act_dim = act_dim

    def predict_action_chunk(
        self, obs: Obs, *, noise: torch.Tensor | None = None, deterministic: bool = False
    ) -> torch.Tensor:
        """(B, 1, Da): SAC acts one step at a time; `noise` is the (B, Da) pre-tanh standard normal."""
        action, _ = self.head(self.encoder(obs), deterministic=deterministic, noise=noise)
        return action.unsqueeze(1)

    @torch.no_grad()
    def select_action(self, obs: Mapping[str, np.ndarray], deterministic: bool = False) -> np.ndarray:
        device = next(self.parameters()).device
        chunk = self.predict_action_chunk(batch_obs(obs, device), deterministic=deterministic)
        return chunk[0, 0].cpu().numpy()

    def reset(self) -> None:
        """Stateless: nothing queued between steps."""

    def compute_loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """Behaviour-cloning negative log-likelihood of the batch actions."""
        nll = -self.head.log_prob(self.encoder(batch.obs), batch.action).mean()
        return nll, {"bc_nll": float(nll.detach())}
