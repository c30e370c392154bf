"""Deterministic evaluation rollouts and the statistics that make a few seeds honest (IQM, bootstrap CIs)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np

from robot_rl.policies.base import Policy


@dataclass
class EvalResult:
    success_rate: float
    success_ci: tuple[float, float]
    mean_return: float
    mean_length: float  # steps per episode
    mean_success_length: float  # cycle time of successful episodes, in steps (nan if none)
    episodes: int

    def as_dict(self) -> dict:
        return asdict(self)


def evaluate(env: gym.Env, policy: Policy, episodes: int, seed: int = 1_000_000) -> EvalResult:
    """Runs the policy's mean action, no human; seeds are disjoint from training resets."""
    successes, returns, lengths = [], [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        policy.reset()
        ret, length, done, info = 0.0, 0, False, {"success": False}
        while not done:
            obs, reward, terminated, truncated, info = env.step(policy.select_action(obs, deterministic=True))
            ret += float(reward)
            length += 1
            done = terminated or truncated
        successes.append(bool(info["success"]))
        returns.append(ret)
        lengths.append(length)
    s = np.array(successes, dtype=float)
    ok_lengths = [n for n, ok in zip(lengths, successes, strict=True) if ok]
    return EvalResult(
        success_rate=float(s.mean()),
        success_ci=bootstrap_ci(s, np.mean),
        mean_return=float(np.mean(returns)),
        mean_length=float(np.mean(lengths)),
        mean_success_length=float(np.mean(ok_lengths)) if ok_lengths else float("nan"),
        episodes=episodes,
    )


def iqm(x: Sequence[float] | np.ndarray) -> float:
    """Interquartile mean (Agarwal et al. 2021): robust to one lucky or broken seed, less noisy than median."""
    x = np.sort(np.asarray(x, dtype=float))
    n = len(x)
    if n == 0:
        return float("nan")
    lo, hi = int(np.floor(0.25 * n)), int(np.ceil(0.75 * n))
    return float(x[lo:hi].mean()) if hi > lo else float(x.mean())


def bootstrap_ci(
    x: Sequence[float] | np.ndarray, stat=np.mean, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of `stat` over the samples in `x`."""
    x = np.asarray(x, dtype=float)
    if len(x) == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    stats = np.array([stat(x[rng.integers(0, len(x), len(x))]) for _ in range(n_boot)])
    return (float(np.quantile(stats, alpha / 2)), float(np.quantile(stats, 1 - alpha / 2)))


def aggregate_runs(run_dirs: Sequence[Path]) -> dict:
    """Across seeds: IQM and bootstrap CI of final success, plus mean wall-clock and env steps."""
    summaries = [json.loads((Path(d) / "summary.json").read_text()) for d in run_dirs]
    success = [s["final_success_rate"] for s in summaries]
    return {
        "runs": [str(d) for d in run_dirs],
        "task": sorted({s["task"] for s in summaries}),
        "success_iqm": iqm(success),
        "success_ci": bootstrap_ci(success, iqm),
        "success_per_run": success,
        "wall_clock_s_mean": float(np.mean([s["wall_clock_s"] for s in summaries])),
        "env_steps_mean": float(np.mean([s["env_steps"] for s in summaries])),
    }
