"""Benchmarks run end to end at tiny sizes and return well-formed rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

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


@pytest.mark.slow
@pytest.mark.ros2
def test_bench_sim_to_robot_quick(camera_run: Path, tmp_path: Path) -> None:
    """Every stage on the stand-in cell in real time, tiny budgets: demos, classifier, (b) deploy, (a) and (c) runs,
    the table, JSON and plot. 2-3.5 min on a shared 2-core box, most of it process start-ups."""
    mod = _load("bench_sim_to_robot")
    rows = mod.main(quick=True, checkpoint=camera_run, out=tmp_path)
    assert [r.get("arm") for r in rows] == ["zero-shot", "scratch", "fine-tuned", None]
    assert rows[2]["curve"][0][0] == 0.0 and rows[-1]["bench"] == "goals"  # (c)'s step-0 evaluation: the sim policy
    work = tmp_path / "sim_to_robot_quick"
    assert {"sim_to_robot.json", "sim_to_robot.md", "curve.png"} <= {p.name for p in work.iterdir()}
