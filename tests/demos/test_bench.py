"""The demo benchmark runs end to end (tiny sizes) and returns well-formed rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def test_bench_demos_smoke() -> None:
    path = Path(__file__).resolve().parents[2] / "bench/bench_demos.py"
    spec = importlib.util.spec_from_file_location("bench_demos", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.main(episodes=2, T=5, size=16, batch=8, reps=1)
    assert [r["bench"].split()[0] for r in rows] == ["write", "write", "random", "sequence"]
    assert all(v > 0 for r in rows for k, v in r.items() if k != "bench")
