"""Demo-store benchmarks: write throughput at 2 x 128 px cameras, and batch sampling from disk vs RAM.

Run: `.venv/bin/python bench/bench_demos.py`.  The write rows say whether recording keeps up with a
10 Hz control loop (realtime_factor > 1: an episode is written faster than it was recorded).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.demos.sampler import RamSource, SequenceDataset
from robot_rl.demos.store import EpisodeStore

CONTROL_HZ = 10.0


def _episode(rng: np.random.Generator, T: int, size: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Camera-like frames (smooth + noise, so compression is realistic rather than trivial)."""
    base = rng.integers(0, 255, (1, size, size, 3), np.uint8)
    cams = {
        c: np.clip(base.astype(np.int16) + rng.integers(-8, 8, (T, size, size, 3)), 0, 255).astype(np.uint8)
        for c in ("front", "wrist")
    }
    data = {
        **cams,
        "state": rng.standard_normal((T, 10)).astype(np.float32),
        "action": rng.uniform(-1, 1, (T, 4)).astype(np.float32),
        "reward": np.zeros(T, np.float32),
        "terminated": np.zeros(T, bool),
        "truncated": np.arange(T) == T - 1,
        "intervened": np.zeros(T, bool),
        "timestamp": np.arange(T) / CONTROL_HZ,
    }
    final = {k: data[k][-1] for k in ("front", "wrist", "state")}
    return data, final


def bench_write(path: Path, episodes: int, T: int, size: int, fsync: bool) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    eps = [_episode(rng, T, size) for _ in range(episodes)]
    nbytes = sum(v.nbytes for d, f in eps for v in [*d.values(), *f.values()])
    with EpisodeStore(path, "w", fsync=fsync) as st:
        t = time.perf_counter()
        for i, (d, f) in enumerate(eps):
            st.add_episode(d, meta={"source": "scripted", "seed": i, "length": T}, final=f)
        dt = time.perf_counter() - t
    return {
        "bench": f"write fsync={fsync}",
        "episodes_per_s": episodes / dt,
        "MB_per_s": nbytes / 1e6 / dt,
        "realtime_factor": episodes * T / CONTROL_HZ / dt,
        "episodes": episodes,
        "steps": T,
        "px": size,
    }


def _rate(fn: Any, reps: int) -> float:
    fn()  # warm caches / first-touch
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return reps / (time.perf_counter() - t)


def bench_sampling(path: Path, batch: int, reps: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    rows: list[dict[str, Any]] = []
    with EpisodeStore(path, "r") as st:
        ram = RamSource.from_store(st)
        keys = ["front", "wrist", "state", "action"]

        def rand_batch(src: Any) -> Any:
            return lambda: [src.get_rows(k, rng.integers(0, st.n_steps, batch)) for k in keys]

        disk_r, ram_r = _rate(rand_batch(st), reps), _rate(rand_batch(ram), reps)
        rows.append(
            {
                "bench": f"random batch {batch} (2 cams + state + action)",
                "disk_batches_per_s": disk_r,
                "ram_batches_per_s": ram_r,
                "ram_over_disk": ram_r / disk_r,
            }
        )
        kw = dict(horizon=16, n_obs_steps=2, obs_keys=["front", "wrist", "state"])
        disk_ds, ram_ds = SequenceDataset(st, **kw), SequenceDataset(ram, **kw)
        windows = lambda ds: lambda: ds.get_batch(rng.integers(0, len(ds), batch))  # noqa: E731
        disk_w, ram_w = _rate(windows(disk_ds), reps), _rate(windows(ram_ds), reps)
        rows.append(
            {
                "bench": f"sequence windows {batch} (h16, 2 obs)",
                "disk_batches_per_s": disk_w,
                "ram_batches_per_s": ram_w,
                "ram_over_disk": ram_w / disk_w,
            }
        )
    return rows


def main(episodes: int = 30, T: int = 50, size: int = 128, batch: int = 256, reps: int = 5) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as d:
        rows = [
            bench_write(Path(d) / "nofsync", episodes, T, size, fsync=False),
            bench_write(Path(d) / "s", episodes, T, size, fsync=True),
        ]
        rows += bench_sampling(Path(d) / "s", batch, reps)
    for r in rows:
        print(
            r["bench"].ljust(44)
            + "  ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items() if k != "bench")
        )
    return rows


if __name__ == "__main__":
    main()
