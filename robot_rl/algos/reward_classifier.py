"""Learned success detector that replaces the env reward, as on a real robot where no simulator says "done".

Trained on frames labelled success / not-success (in sim: scripted episodes that keep holding the goal
after success, so positives are plentiful); used through `ClassifierReward` around any env.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from robot_rl.nets import MLP, ObsEncoder
from robot_rl.policies.base import batch_obs


class RewardClassifier(nn.Module):
    """Observation -> success logit. On pixels it sees only the cameras and proprio, never object state."""

    def __init__(self, state_dim: int, cameras: Sequence[str] = (), image_size: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.encoder = ObsEncoder(state_dim, cameras, image_size, feature_dim=32)
        self.head = MLP(self.encoder.out_dim, (hidden, hidden), 1)

    def forward(self, obs: dict[str, torch.Tensor], augment: bool = False) -> torch.Tensor:
        return self.head(self.encoder(obs, augment=augment)).squeeze(-1)

    @torch.no_grad()
    def success_prob(self, obs: dict[str, np.ndarray]) -> float:
        return torch.sigmoid(self(batch_obs(obs))).item()


@dataclass
class ClassifierData:
    obs: dict[str, np.ndarray]  # (N, ...) per key
    labels: np.ndarray  # (N,) float32 in {0, 1}

    def split(self, val_frac: float, seed: int) -> tuple[ClassifierData, ClassifierData]:
        idx = np.random.default_rng(seed).permutation(len(self.labels))
        n_val = int(len(idx) * val_frac)
        parts = idx[n_val:], idx[:n_val]
        return tuple(ClassifierData({k: v[p] for k, v in self.obs.items()}, self.labels[p]) for p in parts)


def record_classifier_data(env: gym.Env, act, episodes: int, seed: int = 0) -> ClassifierData:
    """Runs `act` (e.g. the scripted expert) and labels every observation with the env's success flag."""
    frames: dict[str, list] = {}
    labels: list[float] = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(act(env))
            for k, v in obs.items():
                frames.setdefault(k, []).append(v)
            labels.append(float(info["success"]))
            done = terminated or truncated
    return ClassifierData({k: np.stack(v) for k, v in frames.items()}, np.asarray(labels, np.float32))


def train_reward_classifier(
    clf: RewardClassifier, data: ClassifierData, steps: int, batch_size: int = 256, lr: float = 1e-3, seed: int = 0
) -> dict[str, float]:
    """Class-balanced BCE (successes are the minority); returns final train loss and accuracy."""
    rng = np.random.default_rng(seed)
    pos, neg = np.flatnonzero(data.labels > 0.5), np.flatnonzero(data.labels <= 0.5)
    if len(pos) == 0 or len(neg) == 0:
        raise ValueError(f"classifier data needs both classes: {len(pos)} success and {len(neg)} other frames")
    opt = torch.optim.Adam(clf.parameters(), lr=lr)
    clf.train()
    for _ in range(steps):
        idx = np.concatenate([rng.choice(pos, batch_size // 2), rng.choice(neg, batch_size - batch_size // 2)])
        obs = {k: torch.from_numpy(v[idx]) for k, v in data.obs.items()}
        y = torch.from_numpy(data.labels[idx])
        loss = F.binary_cross_entropy_with_logits(clf(obs, augment=True), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    clf.eval()
    return {"loss": loss.item(), **classifier_metrics(clf, data)}


@torch.no_grad()
def classifier_metrics(clf: RewardClassifier, data: ClassifierData, threshold: float = 0.5) -> dict[str, float]:
    pred = torch.sigmoid(clf({k: torch.from_numpy(v) for k, v in data.obs.items()})).numpy() > threshold
    truth = data.labels > 0.5
    return {
        "accuracy": float((pred == truth).mean()),
        "recall": float(pred[truth].mean()) if truth.any() else float("nan"),
        "false_positive_rate": float(pred[~truth].mean()) if (~truth).any() else float("nan"),
    }


class ClassifierReward(gym.Wrapper):
    """Reward and success-termination come from the classifier; the env's own flag stays in `info["success"]`
    so evaluation still measures the truth."""

    def __init__(self, env: gym.Env, clf: RewardClassifier, threshold: float = 0.5, terminate: bool = True) -> None:
        super().__init__(env)
        self.clf, self.threshold, self.terminate = clf, threshold, terminate

    def step(self, action):
        obs, _, terminated, truncated, info = self.env.step(action)
        p = self.clf.success_prob(obs)
        detected = p > self.threshold
        info["classifier_prob"] = p
        return obs, float(detected), (terminated or detected) if self.terminate else terminated, truncated, info
