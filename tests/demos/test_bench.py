"""Benchmarks run end to end at tiny sizes and return well-formed rows."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_bench_demos_smoke() -> None:
    mod = _load("bench_demos")
    rows = mod.main(episodes=2, T=5, size=16, batch=8, reps=1)
    assert [r["bench"].split()[0] for r in rows] == ["write", "write", "random", "sequence"]
    assert all(v > 0 for r in rows for k, v in r.items() if k != "bench")


def test_the_fleet_speed_up_to_expect_is_the_ratio_of_the_seeds_means(monkeypatch) -> None:
    """One run per seed divides two noisy crossings; the fleet bench also reports the seeds' means, over the seeds
    where every fleet confirmed, with a bootstrap interval that holds them."""
    monkeypatch.syspath_prepend(str(BENCH))  # its sibling modules
    mod = _load("bench_fleet_robots")
    mins = {0: (10.0, 4.0), 1: (20.0, 12.0), 2: (30.0, 14.0), 3: (25.0, None)}  # seed 3's pair never confirmed
    rows = [{"seed": s, "robots": n, "robot_min_per_robot_to_confirmed": m} for s, ms in mins.items()
            for n, m in zip((1, 2), ms, strict=True)]  # fmt: skip
    (two,) = mod.fleet_means(rows)
    assert two["robots"] == 2 and two["seeds"] == [0, 1, 2] and two["speedup_of_means"] == 60.0 / 30.0
    lo, hi = two["speedup_of_means_90ci"]
    assert 1.5 < lo < 2.0 < hi < 2.5  # the resampled seeds' ratios: 20 / 12 at least, 50 / 22 at most
    assert mod.fleet_means(rows[:2]) == []  # one seed: no mean to speak of
