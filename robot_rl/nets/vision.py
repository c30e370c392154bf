"""Image side of the observation: conv encoder per camera, DrQ random-shift augmentation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn
from torch.nn import functional as F


def random_shift(images: torch.Tensor, pad: int = 4) -> torch.Tensor:
    """DrQ augmentation: replicate-pad then crop back at a random integer offset per sample.

    images: (B, C, H, W) float. Integer shifts by gather are exact and cheaper on CPU than grid_sample.
    """
    b, c, h, w = images.shape
    padded = F.pad(images, (pad, pad, pad, pad), mode="replicate")
    ox = torch.randint(0, 2 * pad + 1, (b, 1, 1), device=images.device)
    oy = torch.randint(0, 2 * pad + 1, (b, 1, 1), device=images.device)
    rows = (torch.arange(h, device=images.device).view(1, h, 1) + oy).expand(b, h, w)
    cols = (torch.arange(w, device=images.device).view(1, 1, w) + ox).expand(b, h, w)
    flat = (rows * (w + 2 * pad) + cols).view(b, 1, h * w).expand(b, c, h * w)
    return padded.flatten(2).gather(2, flat).view(b, c, h, w)


class ConvEncoder(nn.Module):
    """Small stride-2 conv trunk (SERL/DrQ size) -> LayerNorm'd, tanh-squashed feature vector."""

    def __init__(self, image_size: int, channels: int = 32, n_layers: int = 4, feature_dim: int = 64) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for i in range(n_layers):
            layers += [nn.Conv2d(c_in, channels, 3, stride=2 if i < 3 else 1, padding=1), nn.ReLU()]
            c_in = channels
        self.trunk = nn.Sequential(*layers)
        with torch.no_grad():
            n_flat = self.trunk(torch.zeros(1, 3, image_size, image_size)).numel()
        self.head = nn.Sequential(nn.Linear(n_flat, feature_dim), nn.LayerNorm(feature_dim), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(x).flatten(1))


class ObsEncoder(nn.Module):
    """Maps an observation dict to one feature vector: proprio/state concatenated with per-camera features.

    With no cameras it is the identity on `state`, so state-only SAC pays nothing for it.
    """

    def __init__(
        self,
        state_dim: int,
        cameras: Sequence[str] = (),
        image_size: int = 64,
        feature_dim: int = 64,
        augment_pad: int = 4,
    ) -> None:
        super().__init__()
        self.cameras = tuple(cameras)
        self.augment_pad = augment_pad
        self.convs = nn.ModuleDict({c: ConvEncoder(image_size, feature_dim=feature_dim) for c in self.cameras})
        self.out_dim = state_dim + feature_dim * len(self.cameras)
        # Buffers, not parameters: they ride along in every checkpoint and weight push, so learner, eval and
        # robot node normalise identically. Centimetre-scale features need this to be learnable quickly.
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))

    def set_state_normalization(self, states: torch.Tensor, min_std: float = 0.01) -> None:
        """Fixes the state normaliser from data (e.g. the demos); `min_std` keeps near-constant dims sane."""
        self.state_mean.copy_(states.mean(0))
        self.state_std.copy_(states.std(0).clamp_min(min_std))

    def forward(self, obs: Mapping[str, torch.Tensor], augment: bool = False) -> torch.Tensor:
        feats = [(obs["state"] - self.state_mean) / self.state_std]
        for cam in self.cameras:
            img = obs[cam].permute(0, 3, 1, 2).float().div_(255.0)  # (B, H, W, 3) uint8 -> (B, 3, H, W)
            if augment and self.augment_pad:
                img = random_shift(img, self.augment_pad)
            feats.append(self.convs[cam](img))
        return feats[0] if len(feats) == 1 else torch.cat(feats, dim=-1)
