"""Data that crosses module boundaries: one transition from an actor, one training batch for a learner.

Shape vocabulary: B batch, Da action dim, observations are dicts of `state` (B, Ds) float32 and one
(B, H, W, 3) uint8 array per camera.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

NpObs = dict[str, np.ndarray]
TorchObs = dict[str, torch.Tensor]


class EpisodeAborted(RuntimeError):
    """The env cannot go on with this episode (a robot's e-stop, safety fault, or silence). What the episode produced
    so far stays valid, and nothing about it is terminal: a stop says nothing about the policy's task."""


@dataclass
class Transition:
    """One env step as an actor saw it. `terminated` stops bootstrapping; `truncated` only ends the episode."""

    obs: NpObs
    action: np.ndarray
    reward: float
    next_obs: NpObs
    terminated: bool
    truncated: bool
    intervened: bool = False
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@dataclass
class Batch:
    obs: TorchObs
    action: torch.Tensor  # (B, Da)
    reward: torch.Tensor  # (B,)
    next_obs: TorchObs
    terminated: torch.Tensor  # (B,) float: 1.0 where the next state is terminal
    intervened: torch.Tensor  # (B,) float
    extras: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.action.shape[0]

    @staticmethod
    def of_windows(obs: TorchObs, action: torch.Tensor) -> Batch:
        """A behaviour-cloning batch: observation windows (B, To, ...) and action chunks (B, horizon, Da)."""
        zeros = torch.zeros(action.shape[0], device=action.device)
        return Batch(obs=obs, action=action, reward=zeros, next_obs={}, terminated=zeros, intervened=zeros)

    def to(self, device: torch.device | str) -> Batch:
        def mv(d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {k: v.to(device, non_blocking=True) for k, v in d.items()}

        return Batch(
            obs=mv(self.obs),
            action=self.action.to(device, non_blocking=True),
            reward=self.reward.to(device, non_blocking=True),
            next_obs=mv(self.next_obs),
            terminated=self.terminated.to(device, non_blocking=True),
            intervened=self.intervened.to(device, non_blocking=True),
            extras=mv(self.extras),
        )

    @staticmethod
    def cat(a: Batch, b: Batch) -> Batch:
        """Concatenate two batches (the RLPD demo/online mix)."""

        def c(x: dict[str, torch.Tensor], y: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {k: torch.cat([x[k], y[k]]) for k in x.keys() & y.keys()}

        return Batch(
            obs=c(a.obs, b.obs),
            action=torch.cat([a.action, b.action]),
            reward=torch.cat([a.reward, b.reward]),
            next_obs=c(a.next_obs, b.next_obs),
            terminated=torch.cat([a.terminated, b.terminated]),
            intervened=torch.cat([a.intervened, b.intervened]),
            extras=c(a.extras, b.extras),
        )
