"""The one policy interface every actor, evaluator and robot node talks to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from robot_rl.types import Batch

Obs = Mapping[str, torch.Tensor]


@runtime_checkable
class Policy(Protocol):
    """Observations in, action chunks out. Shapes: obs values (B, ...), chunks (B, Ta, Da) in [-1, 1]."""

    def predict_action_chunk(
        self, obs: Obs, *, noise: torch.Tensor | None = None, deterministic: bool = False
    ) -> torch.Tensor: ...

    def select_action(self, obs: Mapping[str, np.ndarray], deterministic: bool = False) -> np.ndarray:
        """One unbatched action for the env; owns the chunk queue for chunked policies."""
        ...

    def reset(self) -> None: ...

    def compute_loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]: ...


def batch_obs(obs: Mapping[str, np.ndarray], device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Unbatched numpy observation -> batch of one on `device` (uint8 images stay uint8)."""
    return {k: torch.as_tensor(np.asarray(v)).unsqueeze(0).to(device) for k, v in obs.items()}


def start_noise(
    shape: tuple[int, ...], noise: torch.Tensor | None, deterministic: bool, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """The initial sample of a generative chunk policy (diffusion, flow): the given `noise` (shape-checked: it is
    the seam noise-space RL steers through), zeros when `deterministic` (the mode-seeking start), else N(0, I)."""
    if noise is not None:
        if tuple(noise.shape) != tuple(shape):
            raise ValueError(f"noise must have shape {tuple(shape)}, got {tuple(noise.shape)}")
        return noise.to(device, dtype)
    if deterministic:
        return torch.zeros(shape, device=device, dtype=dtype)
    return torch.randn(shape, device=device, dtype=dtype)
