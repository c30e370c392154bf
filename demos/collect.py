"""Scripted (or any device-driven) episodes -> zarr store, and stored episodes -> transitions for RL."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import gymnasium as gym
import numpy as np
from robot_rl.demos.store import EpisodeStore
from tqdm import tqdm

from robot_rl.types import Transition

# Reads privileged env state (a scripted expert) or a device (a person) and returns the action to execute.
ActionSource = Callable[[gym.Env], np.ndarray]


def record_episode(env: gym.Env, act: ActionSource, seed: int) -> tuple[dict, dict, dict]:
    """Runs one episode; returns (per-step data, final observation, meta) in the store's layout."""
    obs, _ = env.reset(seed=seed)
    steps: dict[str, list] = {}
    done, info, ret = False, {"success": False}, 0.0
    while not done:
        action = np.asarray(act(env), np.float32)
        next_obs, reward, terminated, truncated, info = env.step(action)
        row = {
            **obs,
            "action": action,
            "reward": np.float32(reward),
            "terminated": terminated,
            "truncated": truncated,
            "intervened": False,
        }
        for k, v in row.items():
            steps.setdefault(k, []).append(v)
        obs, ret, done = next_obs, ret + float(reward), terminated or truncated
    data = {k: np.stack([np.asarray(x) for x in v]) for k, v in steps.items()}
    meta = {"success": bool(info["success"]), "return": ret, "length": len(data["action"]), "seed": seed}
    return data, obs, meta


def collect(
    env: gym.Env,
    act: ActionSource,
    store: EpisodeStore,
    n_episodes: int,
    source: str,
    task: str,
    seed: int = 0,
    success_only: bool = True,
    max_attempts_factor: int = 3,
) -> int:
    """Appends up to `n_episodes` episodes; failed ones are dropped when `success_only`. Returns kept count."""
    kept = attempts = 0
    bar = tqdm(total=n_episodes, desc=f"collect {task}", unit="ep", leave=False)
    while kept < n_episodes:
        if attempts >= max_attempts_factor * n_episodes:
            raise RuntimeError(f"only {kept}/{n_episodes} successful episodes in {attempts} attempts")
        data, final, meta = record_episode(env, act, seed=seed + attempts)
        attempts += 1
        if success_only and not meta["success"]:
            continue
        store.add_episode(data, meta={**meta, "source": source, "task": task}, final=final)
        kept += 1
        bar.update(1)
        bar.set_postfix(attempts=attempts)
    bar.close()
    return kept


def episode_transitions(store: EpisodeStore, i: int, obs_keys: list[str]) -> Iterator[Transition]:
    """Stored episode i as transitions; next_obs of the last step comes from the `final` record."""
    ep = store.episode(i)
    final = store.final(i)
    n = len(ep["action"])
    for t in range(n):
        nxt = {k: ep[k][t + 1] for k in obs_keys} if t + 1 < n else {k: final[k] for k in obs_keys}
        yield Transition(
            obs={k: ep[k][t] for k in obs_keys},
            action=ep["action"][t],
            reward=float(ep["reward"][t]),
            next_obs=nxt,
            terminated=bool(ep["terminated"][t]),
            truncated=bool(ep["truncated"][t]) or t == n - 1,
            intervened=bool(ep["intervened"][t]),
        )
