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
