from __future__ import annotations

import importlib.util
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import robot_rl.demos.store as store_mod
from robot_rl.demos.store import EpisodeStore, StoreCorruptError, StoreLockedError

_WRITER = Path(__file__).with_name("store_writer.py")
_spec = importlib.util.spec_from_file_location("store_writer", _WRITER)
assert _spec is not None and _spec.loader is not None
store_writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(store_writer)


def _episode(rng: np.random.Generator, T: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    reward = rng.standard_normal(T)
    reward[0] = np.nan  # floats are stored as given, NaN/inf included
    reward[-1] = -np.inf
    data = {
        "state": rng.standard_normal((T, 7)).astype(np.float32),
        "img": rng.integers(0, 256, (T, 64, 64, 3), dtype=np.uint8),
        "reward": reward,
        "step": np.arange(T, dtype=np.int32),
        "done": rng.random(T) < 0.3,
    }
    final = {
        "state": rng.standard_normal(7).astype(np.float32),
        "img": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
    }
    return data, final


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-exact equality (NaN payloads included)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _fill(path: Path, lengths: list[int], seed: int = 0) -> list[tuple[dict, dict, dict]]:
    rng = np.random.default_rng(seed)
    eps = []
    with EpisodeStore(path, "a") as s:
        for j, T in enumerate(lengths):
            data, final = _episode(rng, T)
            meta = {"success": bool(j % 2), "source": "teleop", "task": f"task{j}", "notes": [j, None]}
            assert s.add_episode(data, meta, final) == j
            eps.append((data, meta, final))
    return eps


def _disk_rows(path: Path, name: str) -> int:
    return zarr.open_array(str(path / name), mode="r").shape[0]


def test_round_trip_is_bit_exact(tmp_path: Path) -> None:
    lengths = [37, 1, 64, 50, 90]  # crosses several 64-frame shards
    eps = _fill(tmp_path / "s", lengths)
    with EpisodeStore(tmp_path / "s") as s:
        assert len(s) == len(lengths)
        assert s.n_steps == sum(lengths)
        assert s.episode_ends.tolist() == np.cumsum(lengths).tolist()
        assert s.keys == sorted(eps[0][0])
        for i, (data, meta, final) in enumerate(eps):
            got = s.episode(i)
            assert got.keys() == data.keys()
            for k in data:
                assert _same(got[k], data[k]), (i, k)
            assert s.meta(i) == meta
            got_final = s.final(i)
            assert got_final.keys() == final.keys() and all(_same(got_final[k], final[k]) for k in final)
        assert _same(s.episode(-1, keys=["img"])["img"], eps[-1][0]["img"])
        for k in eps[0][0]:
            full = np.concatenate([d[k] for d, _, _ in eps])
            assert _same(s.read(k, 30, 170), full[30:170])
            idx = np.random.default_rng(1).integers(0, s.n_steps, (8, 32))
            assert _same(s.get_rows(k, idx), full[idx])
        assert s.validate() == {
            "ok": True,
            "problems": [],
            "n_episodes": 5,
            "n_steps": sum(lengths),
            "valid_episodes": 5,
        }
        s.meta(0)["success"] = "mutated"
        assert s.meta(0) == eps[0][1]


def test_bounds_are_the_committed_range(tmp_path: Path) -> None:
    _fill(tmp_path / "s", [5, 6])
    with EpisodeStore(tmp_path / "s") as s:
        with pytest.raises(IndexError):
            s.read("state", 0, 12)
        with pytest.raises(IndexError):
            s.get_rows("img", np.array([0, 11]))
        with pytest.raises(IndexError):
            s.get_rows("img", np.array([-1]))
        with pytest.raises(IndexError):
            s.episode(2)
        with pytest.raises(KeyError, match="nope"):
            s.read("nope", 0, 1)
        with pytest.raises(PermissionError):
            s.add_episode(*_episode(np.random.default_rng(0), 3))


@pytest.mark.parametrize(
    "mutate, error, match",
    [
        (lambda d, f, m: d.pop("img"), ValueError, "missing \\['img'\\]"),
        (lambda d, f, m: d.update(extra=np.zeros(len(d["step"]))), ValueError, "extra \\['extra'\\]"),
        (lambda d, f, m: d.update(state=d["state"].astype(np.float64)), ValueError, "'state'.*float64"),
        (lambda d, f, m: d.update(img=d["img"][:, :32]), ValueError, "'img'"),
        (lambda d, f, m: d.update(reward=d["reward"][:-1]), ValueError, "same length"),
        (lambda d, f, m: d.update(state=d["state"].tolist()), TypeError, "'state'"),
        (lambda d, f, m: d.update(state=d["state"].astype(np.complex64)), ValueError, "'state'.*complex"),
        (lambda d, f, m: f.pop("img"), ValueError, "final keys"),
        (lambda d, f, m: f.update(state=f["state"][:3]), ValueError, "final\\['state'\\]"),
        (lambda d, f, m: m.update(x=object()), ValueError, "JSON"),
        (lambda d, f, m: m.update(source="teleoperation"), ValueError, "source"),
        (lambda d, f, m: d.clear(), ValueError, "non-empty"),
        (lambda d, f, m: [d.update({k: v[:0]}) for k, v in list(d.items())], ValueError, "T >= 1"),
    ],
)
def test_bad_episode_is_rejected_and_store_unchanged(tmp_path: Path, mutate: Any, error: type, match: str) -> None:
    path = tmp_path / "s"
    _fill(path, [4])
    record = (path / "commit.json").read_bytes()
    rows = {k: _disk_rows(path, f"data/{k}") for k in ("img", "state", "reward")}
    data, final = _episode(np.random.default_rng(7), 6)
    meta: dict[str, Any] = {"source": "policy"}
    mutate(data, final, meta)
    with EpisodeStore(path, "a") as s:
        with pytest.raises(error, match=match):
            s.add_episode(data, meta, final)
        assert len(s) == 1
    assert (path / "commit.json").read_bytes() == record
    assert {k: _disk_rows(path, f"data/{k}") for k in rows} == rows
    with EpisodeStore(path) as s:
        assert s.validate()["ok"]


def test_first_episode_errors_create_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with EpisodeStore(path, "a") as s:
        with pytest.raises(ValueError, match="same length"):
            s.add_episode({"a": np.zeros(3), "b": np.zeros(4)})
        with pytest.raises(ValueError, match="must match"):
            s.add_episode({"a/b": np.zeros(3)})
        assert len(s) == 0 and s.keys == []
    assert not [p for p in (path / "data").iterdir() if p.is_dir()]


def test_torn_append_is_invisible_then_truncated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s"
    eps = _fill(path, [20, 30, 15])
    committed = (path / "commit.json").read_bytes()

    def crash(*_: object) -> None:  # the process "dies" after the rows, before the commit record
        raise KeyboardInterrupt

    rng = np.random.default_rng(99)
    s = EpisodeStore(path, "a")
    monkeypatch.setattr(store_mod, "_write_json_atomic", crash)
    with pytest.raises(KeyboardInterrupt):
        s.add_episode(*_episode(rng, 70)[:1], final=_episode(rng, 1)[1])
    monkeypatch.undo()
    s.close()
    assert (path / "commit.json").read_bytes() == committed
    assert _disk_rows(path, "data/img") == 65 + 70  # the torn rows really are on disk
    assert _disk_rows(path, "final/img") == 4

    with EpisodeStore(path) as r:  # read-only open does not touch the tail and never shows it
        assert len(r) == 3 and r.n_steps == 65
        with pytest.raises(IndexError):
            r.read("img", 60, 70)
        assert r.validate()["ok"]
    assert _disk_rows(path, "data/img") == 135

    with caplog.at_level(logging.WARNING, logger="robot_rl.demos.store"), EpisodeStore(path, "a") as s:
        assert "70 uncommitted row(s) of data/img" in caplog.text
        assert _disk_rows(path, "data/img") == 65 and _disk_rows(path, "final/img") == 3
        data, final = _episode(rng, 12)
        assert s.add_episode(data, {"source": "intervention"}, final) == 3
    with EpisodeStore(path) as r:
        assert r.episode_ends.tolist() == [20, 50, 65, 77]
        assert all(_same(r.episode(3)[k], data[k]) for k in data)
        assert all(_same(r.episode(1)[k], eps[1][0][k]) for k in data)
        assert r.validate()["ok"]


def test_failed_append_leaves_handle_usable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    _fill(path, [10])
    rng = np.random.default_rng(3)
    real = store_mod._write_json_atomic
    with EpisodeStore(path, "a") as s:
        monkeypatch.setattr(store_mod, "_write_json_atomic", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
        with pytest.raises(OSError):
            s.add_episode(*_episode(rng, 50)[:1], final=_episode(rng, 1)[1])
        monkeypatch.setattr(store_mod, "_write_json_atomic", real)
        data, final = _episode(rng, 3)
        assert s.add_episode(data, None, final) == 1
        assert s.n_steps == 13 and _same(s.episode(1)["img"], data["img"])


def test_uncommitted_first_episode_arrays_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    with EpisodeStore(path, "a") as s:
        monkeypatch.setattr(store_mod, "_write_json_atomic", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            s.add_episode({"x": np.ones((4, 2), np.float32)})
        monkeypatch.undo()
    assert (path / "data" / "x").is_dir()
    with EpisodeStore(path) as r:
        assert len(r) == 0 and r.keys == []
    with EpisodeStore(path, "a") as s:
        assert not (path / "data" / "x").exists()
        assert s.add_episode({"y": np.ones(2, np.int8)}) == 0 and s.keys == ["y"]


def test_missing_chunk_is_corrupt_and_repair_keeps_prefix(tmp_path: Path) -> None:
    path = tmp_path / "s"
    eps = _fill(path, [40, 40, 40, 40])  # img shards hold rows 0-63, 64-127, 128-159
    (path / "data" / "img" / "c.1.0.0.0").unlink()
    for mode in ("r", "a"):
        with pytest.raises(StoreCorruptError, match="data/img.*c.1.0.0.0"):
            EpisodeStore(path, mode)
    with EpisodeStore(path, "a", strict=False) as s:
        report = s.validate()
        assert not report["ok"] and report["valid_episodes"] == 1  # episode 1 spans rows 40-79
        assert any("data/img" in p for p in report["problems"])
        with pytest.raises(StoreCorruptError, match="repair"):
            s.add_episode(eps[0][0], None, eps[0][2])
        fixed = s.repair()
        assert fixed["kept"] == 1 and fixed["dropped"] == 3
        assert len(s) == 1 and s.validate()["ok"]
        data, final = _episode(np.random.default_rng(5), 30)
        assert s.add_episode(data, None, final) == 1
    with EpisodeStore(path) as r:
        assert r.episode_ends.tolist() == [40, 70]
        assert all(_same(r.episode(0)[k], eps[0][0][k]) for k in data)
        assert all(_same(r.episode(1)[k], data[k]) for k in data)


def test_shrunk_array_is_corrupt_and_repair_keeps_prefix(tmp_path: Path) -> None:
    path = tmp_path / "s"
    eps = _fill(path, [10, 10, 10])
    zarr.open_array(str(path / "data" / "state"), mode="r+").resize((25, 7))
    with pytest.raises(StoreCorruptError, match="data/state: 25 rows on disk.*30"):
        EpisodeStore(path)
    with EpisodeStore(path, strict=False) as r:  # read-only: intact episodes still readable
        assert r.validate()["valid_episodes"] == 2
        assert _same(r.episode(1)["state"], eps[1][0]["state"])
        with pytest.raises(PermissionError):
            r.repair()
    with EpisodeStore(path, "a", strict=False) as s:
        assert s.repair()["kept"] == 2
    with EpisodeStore(path) as r:
        assert len(r) == 2 and r.n_steps == 20 and r.validate()["ok"]


def test_damaged_chunk_bytes_never_read_silently(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _fill(path, [10, 10])
    chunk = path / "data" / "state" / "c.0.0"
    raw = bytearray(chunk.read_bytes())
    for j in range(len(raw) // 2, len(raw)):
        raw[j] ^= 0x5A
    chunk.write_bytes(bytes(raw))
    with EpisodeStore(path) as r:  # cheap open-time checks pass: the file exists
        with pytest.raises(StoreCorruptError, match="data/state"):
            r.episode(1)
        report = r.validate()
        assert not report["ok"] and report["valid_episodes"] == 0
    with EpisodeStore(path, "a") as s:
        assert s.repair() == {"kept": 0, "dropped": 2, "problems": report["problems"]}
        assert s.keys == [] and s.add_episode({"z": np.arange(3)}) == 0


def test_unparseable_commit_record(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _fill(path, [5])
    rec = path / "commit.json"
    rec.write_bytes(rec.read_bytes()[:40])
    for mode in ("r", "a"):
        with pytest.raises(StoreCorruptError, match="commit.json.*unparseable"):
            EpisodeStore(path, mode)
    rec.write_text(json.dumps({**json.loads(json.dumps({"format": "robot_rl.episode_store"})), "version": 99}))
    with pytest.raises(StoreCorruptError, match="version 99"):
        EpisodeStore(path)
    with EpisodeStore(path, "w") as s:  # overwrite is the way out
        assert len(s) == 0
    assert not (path / "data" / "img").exists()


def test_overwrite_refuses_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not an episode store"):
        EpisodeStore(tmp_path, "w")
    with pytest.raises(StoreCorruptError, match="no commit.json"):
        EpisodeStore(tmp_path, "a")
    assert (tmp_path / "notes.txt").read_text() == "keep me"
    with pytest.raises(FileNotFoundError):
        EpisodeStore(tmp_path / "missing")


def test_second_writer_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _fill(path, [5])
    with EpisodeStore(path, "a"):
        for mode in ("a", "w"):
            with pytest.raises(StoreLockedError, match=f"already open for writing.*pid {os.getpid()}"):
                EpisodeStore(path, mode)
        child = subprocess.run(
            [sys.executable, "-c", f"from robot_rl.demos.store import EpisodeStore; EpisodeStore({str(path)!r}, 'a')"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert child.returncode != 0 and "StoreLockedError" in child.stderr
        with EpisodeStore(path) as r:  # readers are never blocked
            assert len(r) == 1
    with EpisodeStore(path, "a") as s:
        assert len(s) == 1


def _check_episodes(path: Path, lo: int) -> int:
    """Verify committed episodes lo.. bit-exactly against their generator; returns the count."""
    with EpisodeStore(path) as r:
        for i in range(lo, len(r)):
            data, meta, final = store_writer.make_episode(i)
            got = r.episode(i)
            assert all(_same(got[k], data[k]) for k in data), f"episode {i} differs"
            got_final = r.final(i)
            assert all(_same(got_final[k], final[k]) for k in final), f"final of episode {i} differs"
            assert r.meta(i) == meta
        assert (
            r.episode_ends.tolist()
            == np.cumsum([store_writer.make_episode(i)[1]["length"] for i in range(len(r))]).tolist()
        )
        return len(r)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_never_exposes_torn_episodes(tmp_path: Path) -> None:
    path = tmp_path / "s"
    rng = random.Random(20240611)
    counts = [0]
    torn_seen = 0
    for rnd in range(18):
        with open(tmp_path / "child.err", "w") as err:
            child = subprocess.Popen(
                [sys.executable, str(_WRITER), str(path)], stdout=subprocess.PIPE, stderr=err, text=True
            )
        try:
            if rnd and rnd % 4 == 0:
                time.sleep(rng.uniform(0.0, 0.4))  # may land in startup or in recovery
            else:
                line = child.stdout.readline() if child.stdout else ""
                assert line.startswith("ready"), (tmp_path / "child.err").read_text()
                time.sleep(rng.uniform(0.05, 0.5))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            if child.stdout:
                child.stdout.close()
        assert child.returncode == -signal.SIGKILL, (tmp_path / "child.err").read_text()
        img_rows = _disk_rows(path, "data/img") if (path / "data" / "img").exists() else 0
        n = _check_episodes(path, max(0, counts[-1] - 2))
        with EpisodeStore(path) as r:
            torn_seen += img_rows > r.n_steps
        assert n >= counts[-1], "committed episodes disappeared"
        counts.append(n)
    grew = sum(b > a for a, b in zip(counts, counts[1:], strict=False))
    assert grew >= 6 and counts[-1] >= 15, f"too little progress across kills: {counts}"
    assert torn_seen >= 1, f"no kill landed mid-append, recovery went untested: {counts}"
    assert _check_episodes(path, 0) == counts[-1]
    with EpisodeStore(path, "a") as s:
        assert s.validate()["ok"]
        n = len(s)
        assert s.add_episode(*store_writer.make_episode(n)) == n
    assert _check_episodes(path, n) == n + 1
