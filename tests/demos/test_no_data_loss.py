"""Dataset tools never lose data without a word: repair drops only unreadable episodes and keeps a backup, and a
tool writing a new store leaves nothing behind when it fails."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from demos_util import robot_rl

from robot_rl.demos.store import EpisodeStore

T = 64  # one image shard per episode: damage to one frame shard touches one episode


def _write(path: Path, n: int, images: bool = True, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    eps = []
    with EpisodeStore(path, "a", fsync=False) as st:
        for _ in range(n):
            data = {"state": rng.standard_normal((T, 7)).astype(np.float32), "action": np.zeros((T, 4), np.float32)}
            final = {"state": np.zeros(7, np.float32)}
            if images:
                data["img"] = rng.integers(0, 256, (T, 48, 48, 3), dtype=np.uint8)
                final["img"] = np.zeros((48, 48, 3), np.uint8)
            st.add_episode(data, {"source": "teleop"}, final)
            eps.append(data)
    return eps


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.md5(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()}


def _truncate(chunk: Path) -> None:
    chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])


def test_repair_drops_only_the_damaged_episode_and_keeps_a_backup(tmp_path: Path) -> None:
    path = tmp_path / "s"
    eps = _write(path, 4)
    _truncate(path / "data" / "img" / "c.1.0.0.0")  # the shard of episode 1 only
    before = _digest(path)

    out = robot_rl("dataset", "validate", str(path), "--repair")
    assert '"ok": true' in out.stdout and "dropped episode(s) 1 of 4" in out.stderr
    assert "data/img" in out.stdout  # the report names the array at fault
    with EpisodeStore(path) as st:
        assert len(st) == 3
        for j, i in enumerate([0, 2, 3]):
            assert all(np.array_equal(st.episode(j)[k], eps[i][k]) for k in eps[i])
    assert _digest(tmp_path / "s.bak") == before  # every original byte, intact arrays of episode 1 included


def test_repair_that_would_keep_nothing_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _write(path, 3)
    _truncate(path / "data" / "state" / "c.0.0")  # state rows of every episode live in one chunk
    before = _digest(path)
    out = robot_rl("dataset", "validate", str(path), "--repair", check=False)
    assert out.returncode == 2 and "data/state" in out.stderr and "left as it is" in out.stderr
    assert _digest(path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def test_info_reports_a_truncated_chunk(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _write(path, 2, images=False)
    _truncate(path / "data" / "state" / "c.0.0")
    out = robot_rl("dataset", "info", str(path), check=False)
    assert out.returncode == 1 and "dataset validate" in out.stderr and "--repair" in out.stderr


def test_merge_of_incompatible_stores_writes_nothing(tmp_path: Path) -> None:
    _write(tmp_path / "pixel", 2)
    _write(tmp_path / "state", 2, images=False)
    out = robot_rl("dataset", "merge", str(tmp_path / "pixel"), str(tmp_path / "state"), "--out",
                   str(tmp_path / "m"), check=False)  # fmt: skip
    assert out.returncode == 2 and "do not fit together" in out.stderr and "img" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pixel", "state"]


def test_merge_failing_half_way_leaves_no_partial_store(tmp_path: Path) -> None:
    _write(tmp_path / "a", 2)
    _write(tmp_path / "b", 2, seed=1)
    _truncate(tmp_path / "b" / "data" / "img" / "c.1.0.0.0")  # readable until its second episode is copied
    out = robot_rl("dataset", "merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m"),
                   check=False)  # fmt: skip
    assert out.returncode == 2 and "episode 1" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_split_and_filter_refuse_an_existing_output(tmp_path: Path) -> None:
    _write(tmp_path / "a", 3)
    robot_rl("dataset", "split", str(tmp_path / "a"), "--out", str(tmp_path / "sp"), "--val", "0.34")
    assert (tmp_path / "sp" / "train" / "commit.json").exists() and (tmp_path / "sp" / "val" / "commit.json").exists()
    before = _digest(tmp_path / "sp")
    out = robot_rl("dataset", "filter", str(tmp_path / "a"), "--out", str(tmp_path / "sp" / "train"), check=False)
    assert out.returncode == 2 and "already exists" in out.stderr
    assert _digest(tmp_path / "sp") == before
