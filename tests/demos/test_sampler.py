"""Sequence windows: table vs a brute-force reference, padding, observed-frame loading, splits, torch use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.demos.sampler import RamSource, SequenceDataset, create_indices, window_rows
from robot_rl.demos.store import EpisodeStore


def reference_windows(lengths: list[int], horizon: int, pad_before: int, pad_after: int) -> list[list[int]]:
    """Row indices per window, built the slow obvious way: pad each episode by edge repetition."""
    out, start = [], 0
    for n in lengths:
        rows = [start] * pad_before + list(range(start, start + n)) + [start + n - 1] * pad_after
        out += [rows[i : i + horizon] for i in range(len(rows) - horizon + 1)]
        start += n
    return out


@pytest.mark.parametrize("horizon,pad_before,pad_after", [(1, 0, 0), (4, 1, 2), (6, 5, 5), (8, 1, 7)])
def test_table_matches_reference(horizon: int, pad_before: int, pad_after: int) -> None:
    lengths = [3, 9, 1, 6]
    ends = np.cumsum(lengths)
    table = create_indices(ends, horizon, np.ones(4, bool), pad_before, pad_after)
    assert table.shape[1] == 4
    got = window_rows(table, horizon).tolist()
    assert got == reference_windows(lengths, horizon, pad_before, pad_after)


def test_episode_mask_excludes_episodes() -> None:
    table = create_indices(np.array([5, 10]), 3, np.array([False, True]))
    assert table[:, 0].min() >= 5


def _store(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    with EpisodeStore(tmp_path / "s", "a", fsync=False) as st:
        for n in (7, 12, 5, 9):
            st.add_episode(
                {
                    "img": rng.integers(0, 255, (n, 32, 32, 3), np.uint8),
                    "state": rng.standard_normal((n, 3)).astype(np.float32),
                    "action": rng.standard_normal((n, 2)).astype(np.float32),
                }
            )
    return tmp_path / "s"


def test_store_and_ram_give_identical_windows(tmp_path: Path) -> None:
    path = _store(tmp_path)
    disk = SequenceDataset(path, horizon=6, n_obs_steps=2, obs_keys=["img", "state"])
    with EpisodeStore(path) as st:
        ram = SequenceDataset(RamSource.from_store(st), horizon=6, n_obs_steps=2, obs_keys=["img", "state"])
        flat_action = st.read("action", 0, st.n_steps)
    assert len(disk) == len(ram) > 0
    idx = np.arange(len(disk))
    a, b = disk.get_batch(idx), ram.get_batch(idx)
    assert a["obs"]["img"].shape == (len(idx), 2, 32, 32, 3)  # only the observed frames are loaded
    assert a["action"].shape == (len(idx), 6, 2)
    for k in ("img", "state"):
        assert np.array_equal(a["obs"][k], b["obs"][k])
    assert np.array_equal(a["action"], b["action"])
    # first window of episode 0 is edge-padded at the start (n_obs_steps - 1 = 1 row)
    assert np.array_equal(a["action"][0, :2], flat_action[[0, 0]])


def test_split_by_episode_and_dataloader(tmp_path: Path) -> None:
    ds = SequenceDataset(_store(tmp_path), horizon=4, n_obs_steps=2, obs_keys=["state"])
    train, val = ds.split(0.25, seed=1)
    assert len(set(train.episodes) & set(val.episodes)) == 0 and len(val.episodes) == 1
    assert len(train) + len(val) == len(ds)
    loader = torch.utils.data.DataLoader(train, batch_size=5, shuffle=True, num_workers=0)
    batch = next(iter(loader))
    assert batch["obs"]["state"].shape == (5, 2, 3) and batch["action"].shape == (5, 4, 2)


def test_bad_window_args(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        SequenceDataset(_store(tmp_path), horizon=2, n_obs_steps=3, obs_keys=["state"])
