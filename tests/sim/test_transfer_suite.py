"""The held-out transfer suite (bench/bench_transfer.py) shifts every family beyond what its task's DR preset draws."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from robot_rl.config import load_config

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _suite():
    sys.path.insert(0, str(BENCH))  # bench_transfer imports its sibling `common`
    try:
        spec = importlib.util.spec_from_file_location("bench_transfer", BENCH / "bench_transfer.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(BENCH))
    return mod


@pytest.mark.parametrize("task", ["PickCube", "PegInsert"])
def test_every_shift_family_lies_outside_the_dr_preset(task: str) -> None:
    bt = _suite()
    preset = bt.PRESETS[task][1]
    dr = load_config([f"task={bt.TASK_CONFIG[task]}", f"randomization={preset}"]).env.randomization
    families = {k: v for k, v in bt.shifts(task).items() if k not in ("nominal", "combined")}
    assert len(families) >= 8
    for name, fields in families.items():
        for field, value in fields.items():
            if field == "object_xy_range":  # the outer edge; object_xy_min is what keeps starts out
                continue
            if field == "object_xy_min":
                assert value >= max(dr.object_xy_range), name
            elif isinstance(value, tuple):
                lo, hi = getattr(dr, field)
                assert not lo < value[0] < hi and not lo < value[1] < hi, (name, field, (lo, hi))
            else:
                drawn = max(getattr(dr, field), getattr(dr, f"{field}_max", 0))
                assert value > drawn, (name, field, drawn)
