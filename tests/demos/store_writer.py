"""Child process for the SIGKILL test: appends deterministic episodes until it is killed.

Episode i's content is a pure function of i, so the parent can check every committed episode
bit-exactly without any channel from the child other than the store itself.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from robot_rl.demos.store import EpisodeStore

_SOURCES = ("scripted", "teleop", "policy", "intervention")


def make_episode(i: int) -> tuple[dict[str, np.ndarray], dict[str, Any], dict[str, np.ndarray]]:
    rng = np.random.default_rng(i)
    T = 3 + (i * 7) % 40
    data = {
        "img": rng.integers(0, 256, (T, 48, 48, 3), dtype=np.uint8),  # frame-sized rows: sharded layout
        "state": rng.standard_normal((T, 5)).astype(np.float32),
        "step": i * 1000 + np.arange(T, dtype=np.int64),
        "done": np.arange(T) == T - 1,
    }
    meta = {"i": i, "source": _SOURCES[i % 4], "success": i % 3 == 0, "length": T}
    final = {
        "img": rng.integers(0, 256, (48, 48, 3), dtype=np.uint8),
        "state": rng.standard_normal(5).astype(np.float32),
    }
    return data, meta, final


def main(path: str) -> None:
    with EpisodeStore(path, "a") as store:
        print("ready", len(store), flush=True)
        while True:
            store.add_episode(*make_episode(len(store)))


if __name__ == "__main__":
    main(sys.argv[1])
