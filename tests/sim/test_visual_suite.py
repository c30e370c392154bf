"""The visual validation suite (bench/bench_visual_transfer.py): every cell lies outside what the visual preset
draws, and the bench runs end to end, fresh cells and blanked cameras included."""

from __future__ import annotations

import colorsys
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from robot_rl.config import load_config
from robot_rl.envs import make_env
from robot_rl.sim import EnvConfig
from robot_rl.sim.cells import FAMILIES, draw_cell, draw_cells
from robot_rl.sim.rendering import gl_available

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _suite():
    sys.path.insert(0, str(BENCH))  # the bench imports its sibling `common`
    try:
        spec = importlib.util.spec_from_file_location("bench_visual_transfer", BENCH / "bench_visual_transfer.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(BENCH))
    return mod


def _hue_degrees(a, b) -> float:
    """How far apart two RGB colours' hues are, in degrees (0 .. 180)."""
    d = abs(colorsys.rgb_to_hsv(*map(float, a))[0] - colorsys.rgb_to_hsv(*map(float, b))[0]) * 360.0
    return min(d, 360.0 - d)


def test_every_cell_lies_outside_the_visual_preset() -> None:
    suite = _suite()
    dr = load_config(["randomization=visual"]).env.randomization
    m = make_env(EnvConfig()).unwrapped.model
    centres = {"table_rgb": (m.mat_rgba[m.material("table").id], dr.visual.table_color),
               "object_rgb": (m.geom_rgba[m.geom("cube").id], dr.visual.object_color),
               "robot_rgb": (m.mat_rgba[m.material("panda_white").id], dr.visual.robot_color)}  # fmt: skip
    assert len(suite.SHIFTS) >= 14
    for name, fields in suite.SHIFTS.items():
        for field, value in fields.get("visual", {}).items():
            if field in centres:
                shown, jitter = centres[field]
                assert np.abs(np.array(value) - shown[:3]).max() > jitter + 0.05, (name, field)
                if field == "object_rgb":  # and outside the hues the preset turns the object through
                    assert _hue_degrees(value, shown[:3]) > dr.visual.object_hue + 20.0, (name, field)
            else:
                lo, hi = getattr(dr.visual, field)
                assert value[0] == value[1] and not lo <= value[0] <= hi, (name, field, (lo, hi))
        if "obs_delay" in fields:
            assert fields["obs_delay"] > max(dr.obs_delay, dr.obs_delay_max), name
        assert set(fields) <= {"visual", "obs_delay"}, name


@pytest.mark.skipif(not gl_available(), reason="no headless OpenGL backend (EGL or OSMesa) works here")
def test_quick_suite_runs_the_expert_through_every_cell(tmp_path: Path) -> None:
    suite = _suite()
    rows = suite.main(quick=True, out=tmp_path, cells_seed=5)
    expert = [r for r in rows if r["policy"] == "expert"]
    fresh = [spec for spec, _ in draw_cells(2, 5)]
    families = [f"fresh {f}" for f in FAMILIES]
    assert [r["shift"] for r in expert] == ["nominal", "blanked front", "blanked wrist", *suite.SHIFTS, *fresh,
                                            *families]  # fmt: skip
    assert all(r["success"] == 1.0 for r in expert)  # it reads the simulator: the cells are solvable as posed
    assert all(r["kept"] == 1.0 for r in expert if "fresh" not in r["suite"])  # visual cells leave the physics alone
    assert [r["shift"] for r in rows if r["policy"] == "expert, stale view"] == ["nominal", "stale frame"]
    whole, by_family = expert[-len(families) - 2 : -len(families)], expert[-len(families) :]
    assert all(r["cells_seed"] == 5 and r["drawn"] == draw_cell(int(r["shift"][7:])) for r in whole)
    assert all(r["drawn"] == fresh and r["episodes"] == 2 for r in by_family)
    assert "| validation | green table |" in (tmp_path / "visual_transfer.md").read_text()
    doc = json.loads((tmp_path / "visual_transfer.json").read_text())
    assert doc["cells_seed"] == 5 and list(doc["fresh_cells"]) == fresh
