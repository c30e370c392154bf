"""Benchmarks run end to end at tiny sizes and return well-formed rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_demos_smoke() -> None:
    mod = _load("bench_demos")
    rows = mod.main(episodes=2, T=5, size=16, batch=8, reps=1)
    assert [r["bench"].split()[0] for r in rows] == ["write", "write", "random", "sequence"]
    assert all(v > 0 for r in rows for k, v in r.items() if k != "bench")
