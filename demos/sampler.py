"""Sequence windows for imitation learning (diffusion_policy style) over an episode store or RAM arrays.

A window is `horizon` consecutive steps of one episode.  The window table holds, per window,
(buffer_start, buffer_end, sample_start, sample_end): rows [buffer_start, buffer_end) of the flat
buffer fill positions [sample_start, sample_end) of the window; positions outside repeat the edge
row (pad_before = n_obs_steps - 1 and pad_after = n_action_steps - 1 by default, as diffusion_policy).
Observation keys load only the first `n_obs_steps` rows of a window: images are the expensive part.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import Dataset

from robot_rl.demos.dataset import split_episodes
from robot_rl.demos.store import EpisodeStore

__all__ = ["RowSource", "RamSource", "create_indices", "window_rows", "SequenceDataset"]


class RowSource(Protocol):
    """What the sampler reads from: EpisodeStore satisfies it, and so does RamSource."""

    @property
    def episode_ends(self) -> np.ndarray: ...

    @property
    def keys(self) -> list[str]: ...

    def get_rows(self, key: str, idx: np.ndarray) -> np.ndarray: ...


class RamSource:
    """Episodes held as numpy arrays in memory (the baseline the on-disk store is benchmarked against)."""

    def __init__(self, data: dict[str, np.ndarray], episode_ends: np.ndarray) -> None:
        self.data = data
        self._ends = np.asarray(episode_ends, np.int64)

    @classmethod
    def from_store(cls, store: EpisodeStore, keys: Sequence[str] | None = None) -> RamSource:
        keys = list(store.keys if keys is None else keys)
        return cls({k: store.read(k, 0, store.n_steps) for k in keys}, store.episode_ends)

    @property
    def episode_ends(self) -> np.ndarray:
        return self._ends

    @property
    def keys(self) -> list[str]:
        return sorted(self.data)

    def get_rows(self, key: str, idx: np.ndarray) -> np.ndarray:
        return self.data[key][idx]


def create_indices(
    episode_ends: np.ndarray, sequence_length: int, episode_mask: np.ndarray, pad_before: int = 0, pad_after: int = 0
) -> np.ndarray:
    """Window table (n, 4) int64: buffer_start, buffer_end, sample_start, sample_end (diffusion_policy)."""
    if sequence_length < 1 or pad_before < 0 or pad_after < 0:
        raise ValueError("sequence_length must be >= 1 and paddings >= 0")
    pad_before = min(pad_before, sequence_length - 1)
    pad_after = min(pad_after, sequence_length - 1)
    ends = np.asarray(episode_ends, np.int64)
    starts = np.concatenate([[0], ends[:-1]])
    rows = []
    for i in np.flatnonzero(np.asarray(episode_mask, bool)):
        start, length = starts[i], ends[i] - starts[i]
        idx = np.arange(-pad_before, length - sequence_length + pad_after + 1)
        buf_start = np.maximum(idx, 0) + start
        buf_end = np.minimum(idx + sequence_length, length) + start
        sample_start = buf_start - (idx + start)
        sample_end = sequence_length - ((idx + sequence_length + start) - buf_end)
        rows.append(np.stack([buf_start, buf_end, sample_start, sample_end], axis=1))
    return np.concatenate(rows).astype(np.int64) if rows else np.zeros((0, 4), np.int64)


def window_rows(table: np.ndarray, length: int) -> np.ndarray:
    """(n, length) flat row indices of windows, edge rows repeated where the table pads."""
    table = np.atleast_2d(table)
    bs, be, ss = table[:, :1], table[:, 1:2], table[:, 2:3]
    return np.clip(np.arange(length)[None] - ss + bs, bs, be - 1)


class SequenceDataset(Dataset):
    """torch Dataset of windows: {"obs": {key: (n_obs_steps, ...)}, "action": (horizon, A)} as tensors.

    `source` is a RowSource or a store path; a path is opened lazily once per process so DataLoader
    workers each get their own read-only handle.
    """

    def __init__(
        self,
        source: RowSource | str | os.PathLike[str],
        horizon: int,
        n_obs_steps: int,
        obs_keys: Sequence[str],
        action_key: str = "action",
        n_action_steps: int | None = None,
        episodes: Sequence[int] | None = None,
    ) -> None:
        self._path = None if hasattr(source, "get_rows") else Path(source)
        self._source: RowSource | None = None if self._path is not None else source
        self._pid = os.getpid()
        if not 1 <= n_obs_steps <= horizon:
            raise ValueError(f"need 1 <= n_obs_steps <= horizon, got {n_obs_steps}, {horizon}")
        self.horizon, self.n_obs_steps = horizon, n_obs_steps
        self.obs_keys, self.action_key = list(obs_keys), action_key
        self.n_action_steps = horizon - n_obs_steps + 1 if n_action_steps is None else n_action_steps
        ends = self.source.episode_ends
        self.episodes = np.arange(len(ends)) if episodes is None else np.asarray(episodes, np.int64)
        mask = np.zeros(len(ends), bool)
        mask[self.episodes] = True
        self.table = create_indices(ends, horizon, mask, n_obs_steps - 1, self.n_action_steps - 1)

    @property
    def source(self) -> RowSource:
        if self._source is None or (self._path is not None and self._pid != os.getpid()):
            self._source, self._pid = EpisodeStore(self._path, "r"), os.getpid()
        return self._source

    def __getstate__(self) -> dict[str, Any]:
        """Path-backed datasets travel to workers without their handle; RAM ones travel whole."""
        state = dict(self.__dict__)
        if self._path is not None:
            state["_source"] = None
        return state

    def split(self, val_fraction: float, seed: int = 0) -> tuple[SequenceDataset, SequenceDataset]:
        """(train, val) datasets over disjoint episodes of this one."""
        train, val, _ = split_episodes(len(self.episodes), val_fraction, seed)
        src = self._path if self._path is not None else self.source
        kw = dict(
            horizon=self.horizon,
            n_obs_steps=self.n_obs_steps,
            obs_keys=self.obs_keys,
            action_key=self.action_key,
            n_action_steps=self.n_action_steps,
        )
        return SequenceDataset(src, episodes=self.episodes[train], **kw), SequenceDataset(
            src, episodes=self.episodes[val], **kw
        )

    def __len__(self) -> int:
        return len(self.table)

    def get_batch(self, windows: np.ndarray) -> dict[str, Any]:
        """Numpy batch for window ids: one vectorised read per key (the fast path for training loops)."""
        rows = window_rows(self.table[np.asarray(windows)], self.horizon)
        src = self.source
        obs = {k: src.get_rows(k, rows[:, : self.n_obs_steps]) for k in self.obs_keys}
        return {"obs": obs, "action": src.get_rows(self.action_key, rows)}

    def __getitem__(self, i: int) -> dict[str, Any]:
        b = self.get_batch(np.array([i]))
        return {
            "obs": {k: torch.from_numpy(v[0]) for k, v in b["obs"].items()},
            "action": torch.from_numpy(b["action"][0]),
        }
