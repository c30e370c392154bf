"""Learned success detector that replaces the env reward, as on a real robot where no simulator says "done".

Trained on frames labelled success / not-success (in sim: scripted episodes that keep holding the goal
after success, so positives are plentiful; on a robot: frames a person labelled during teleop, `robot-rl
classifier train`); used through `ClassifierReward` around any env. The decision threshold travels inside the
weights (a buffer, like the encoder's normaliser) and the observation layout in the file's metadata, so a robot
PC loads the classifier it was given without knowing how it was trained.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn
from torch.nn import functional as F

from robot_rl.nets import MLP, ObsEncoder
from robot_rl.policies.base import batch_obs
from robot_rl.types import Transition


class RewardClassifier(nn.Module):
    """Observation -> success logit. On pixels it sees only the cameras and proprio, never object state."""

    def __init__(self, state_dim: int, cameras: Sequence[str] = (), image_size: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.encoder = ObsEncoder(state_dim, cameras, image_size, feature_dim=32)
        self.head = MLP(self.encoder.out_dim, (hidden, hidden), 1)
        # Success probability above which the classifier says "done"; `classifier train` picks it on held-out
        # episodes for a low false-positive rate.
        self.register_buffer("threshold", torch.tensor(0.5))

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
    clf: RewardClassifier,
    data: ClassifierData,
    steps: int,
    batch_size: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
    weights: np.ndarray | None = None,
) -> dict[str, float]:
    """Class-balanced BCE (successes are the minority); returns final train loss and accuracy. `weights` (N,):
    how often a frame is drawn relative to the others of its class (default: all alike)."""
    rng = np.random.default_rng(seed)
    pos, neg = np.flatnonzero(data.labels > 0.5), np.flatnonzero(data.labels <= 0.5)
    if len(pos) == 0 or len(neg) == 0:
        raise ValueError(f"classifier data needs both classes: {len(pos)} success and {len(neg)} other frames")
    w = np.ones(len(data.labels)) if weights is None else np.asarray(weights, np.float64)
    p_pos, p_neg = w[pos] / w[pos].sum(), w[neg] / w[neg].sum()
    opt = torch.optim.Adam(clf.parameters(), lr=lr)
    clf.train()
    for _ in range(steps):
        idx = np.concatenate([rng.choice(pos, batch_size // 2, p=p_pos),
                              rng.choice(neg, batch_size - batch_size // 2, p=p_neg)])  # fmt: skip
        obs = {k: torch.from_numpy(v[idx]) for k, v in data.obs.items()}
        y = torch.from_numpy(data.labels[idx])
        loss = F.binary_cross_entropy_with_logits(clf(obs, augment=True), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    clf.eval()
    return {"loss": loss.item(), **classifier_metrics(clf, data)}


@torch.no_grad()
def success_probs(clf: RewardClassifier, obs: dict[str, np.ndarray], batch: int = 512) -> np.ndarray:
    """(N,) success probabilities of N observations, in batches (frames of a whole store fit no single batch)."""
    n = len(next(iter(obs.values())))
    out = [torch.sigmoid(clf({k: torch.from_numpy(v[i : i + batch]) for k, v in obs.items()})).numpy()
           for i in range(0, n, batch)]  # fmt: skip
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def rates_at(probs: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, float | None]:
    """Precision, recall, false-positive rate and accuracy of "success iff prob > threshold" (None: undefined,
    e.g. precision when nothing was called a success)."""
    pred, truth = probs > threshold, labels > 0.5
    tp, fp = int((pred & truth).sum()), int((pred & ~truth).sum())
    return {
        "accuracy": float((pred == truth).mean()) if len(truth) else None,
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": float(pred[truth].mean()) if truth.any() else None,
        "false_positive_rate": float(pred[~truth].mean()) if (~truth).any() else None,
        "positives": int(truth.sum()),
        "negatives": int((~truth).sum()),
    }


def classifier_metrics(
    clf: RewardClassifier, data: ClassifierData, threshold: float | None = None
) -> dict[str, float | None]:
    """`rates_at` the classifier's own threshold (or `threshold`)."""
    thr = float(clf.threshold) if threshold is None else threshold
    return rates_at(success_probs(clf, data.obs), data.labels, thr)


def pick_threshold(probs: np.ndarray, labels: np.ndarray, max_fpr: float) -> float:
    """A threshold whose false-positive rate on these frames is at most `max_fpr` with the most recall that allows,
    in the middle of the range of such thresholds (between the highest negative it must exceed and the lowest
    positive above that), so a frame scored slightly off on new episodes does not flip the verdict. A false
    positive pays the policy for failing, which it learns to exploit, while a missed success only costs a longer
    episode: hence a cap on false positives rather than the best accuracy. With few negatives,
    `max_fpr * negatives < 1` means no false positive at all."""
    neg = np.sort(probs[labels <= 0.5])[::-1]
    allowed = int(np.floor(max_fpr * len(neg)))  # negatives that may score above the threshold
    lo = float(neg[allowed]) if allowed < len(neg) else 0.0
    above = probs[(labels > 0.5) & (probs > lo)]
    return 0.5 * (lo + float(above.min())) if len(above) else lo


def save_classifier(clf: RewardClassifier, path: str | Path, meta: dict[str, Any]) -> None:
    """Weights (threshold and normaliser included) + `meta` (observation layout, metrics) in one safetensors file."""
    tensors = {k: v.contiguous() for k, v in clf.state_dict().items()}
    save_file(tensors, str(path), metadata={"robot_rl": json.dumps(meta)})


def classifier_meta(path: str | Path) -> dict[str, Any]:
    """What `save_classifier` stored besides the weights ({} for a file without it)."""
    with safe_open(str(path), "pt") as f:
        return json.loads((f.metadata() or {}).get("robot_rl", "{}"))


def load_classifier(path: str | Path) -> tuple[RewardClassifier, dict[str, Any]]:
    """A classifier built from its own metadata (`state_layout`, `cameras`, `image_size`), in eval mode."""
    from robot_rl.errors import read_tensors

    weights = read_tensors(path)  # first: a damaged or truncated file says so, not that its header is unreadable
    meta = classifier_meta(path)
    if "state_layout" not in meta:
        raise ValueError(f"{path} does not say which observation it reads: save it with `robot-rl classifier train`")
    state_dim = max((b for _, b in meta["state_layout"].values()), default=0)
    clf = RewardClassifier(state_dim, meta["cameras"], meta["image_size"])
    clf.load_state_dict(weights)
    return clf.eval(), meta


def classifier_rewards(episode: Iterable[Transition], clf: RewardClassifier) -> Iterator[Transition]:
    """A stored episode rewarded as `ClassifierReward` would have: 1 and the end at the first transition whose next
    observation the classifier calls a success, 0 before (a robot run's demos carry no reward it may use)."""
    for t in episode:
        hit = clf.success_prob(t.next_obs) > float(clf.threshold)
        yield dataclasses.replace(t, reward=float(hit), terminated=hit, truncated=t.truncated and not hit)
        if hit:
            return


class ClassifierReward(gym.Wrapper):
    """Reward and success-termination come from the classifier alone; the env's own flag stays in
    `info["success"]` so evaluation still measures the truth. A robot with no success topic has no such flag
    (`judges_success` False): there the classifier's verdict is `info["success"]` too, what training statistics,
    evaluations and `deploy` then count.

    The env's `terminated` is its own success check (the sim's, or a robot's success topic), so it is ignored:
    the episode ends on the classifier's verdict or on the time limit, counted here (a robot env does not
    truncate in a step where its success topic says yes). A safety stop (`info["safety_failure"]`, the sim arm's
    force limit) is the exception: it ends the episode with the env's penalty whatever the frames look like."""

    def __init__(self, env: gym.Env, clf: RewardClassifier, threshold: float | None = None) -> None:
        super().__init__(env)
        self.clf = clf
        self.threshold = float(clf.threshold) if threshold is None else threshold
        self._t = 0

    def reset(self, **kwargs):
        self._t = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, _, truncated, info = self.env.step(action)
        self._t += 1
        if info.get("safety_failure"):
            return obs, float(reward), True, False, info
        p = self.clf.success_prob(obs)
        detected = p > self.threshold
        info["classifier_prob"], info["classifier_success"] = p, detected
        if not getattr(self.env.unwrapped, "judges_success", True):
            info["success"] = detected
        out_of_time = truncated or self._t >= self.env.unwrapped.max_episode_steps
        return obs, float(detected), detected, out_of_time and not detected, info
