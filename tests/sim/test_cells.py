"""Drawn stand-in cells (robot_rl.sim.cells, issue #54): every factor the generator draws lies outside what training
drew, by the margin, read here from the presets' yaml; the in-process form keeps the sizes."""

from __future__ import annotations

import colorsys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from robot_rl.envs import make_env
from robot_rl.sim import EnvConfig
from robot_rl.sim.cells import FAMILIES, MARGIN, NOMINAL_RGB, cell_randomization, draw_cell, draw_cells, preset
from robot_rl.sim.config import nominal

PRESETS = Path(__file__).resolve().parents[2] / "configs/randomization"
VISUAL = yaml.safe_load((PRESETS / "visual.yaml").read_text())["env"]["randomization"]["visual"]
ROBUST = yaml.safe_load((PRESETS / "robust.yaml").read_text())
SEEDS = range(8)
TOL = 2e-4  # the cell's 4-decimal rounding


def outside(lo: float, hi: float) -> Callable[[float], bool]:
    """A value at least `MARGIN` of the range's width below `lo` or above `hi`."""
    m = MARGIN * (hi - lo)
    return lambda x: x <= lo - m + TOL or x >= hi + m - TOL


def pinned(check: Callable[[float], bool]) -> Callable[[list], bool]:
    """A (lo, hi) pair pinned to one value that passes `check`."""
    return lambda v: v[0] == v[1] and check(v[0])


def tint(jitter: float) -> Callable[[list], bool]:
    """Per-channel gains: one beyond 1 +- `jitter` by the margin."""
    return lambda g: max(abs(np.subtract(g, 1.0))) >= jitter + MARGIN * 2 * jitter - TOL


def color(key: str, jitter: float) -> Callable[[list], bool]:
    """A valid RGB beyond the nominal +- `jitter` in a channel, by the margin."""
    far = jitter + MARGIN * 2 * jitter - TOL
    return lambda rgb: all(0.0 <= c <= 1.0 for c in rgb) and max(abs(np.subtract(rgb, NOMINAL_RGB[key]))) >= far


def norm_outside(hi: float) -> Callable[[list], bool]:
    return lambda v: float(np.linalg.norm(v)) >= hi + MARGIN * hi - TOL


V = VISUAL
CHECKS: dict[str, Callable] = {
    "camera_shift.front": norm_outside(V["camera_shift"][1]),
    "camera_shift.wrist": norm_outside(V["hand_camera_shift"][1]),
    "camera_turn.front": norm_outside(V["camera_turn"][1]),
    "camera_turn.wrist": norm_outside(V["camera_turn"][1]),
    "camera_fovy.front": outside(*V["fovy"]),
    "camera_fovy.wrist": outside(*V["fovy"]),
    "latency_s": lambda x: x > 0.0,  # camera runs train with no latency (the visual preset sets none)
    "stream_jitter_s": lambda x: x > 0.0,  # nor any stream jitter
    "randomization.friction_scale": pinned(outside(*ROBUST["friction_scale"])),
    "randomization.mass_scale": pinned(outside(*ROBUST["mass_scale"])),
    "randomization.visual.light_intensity": pinned(outside(*V["light_intensity"])),
    "randomization.visual.light_tilt": pinned(outside(*V["light_tilt"])),
    "randomization.visual.light_tint": tint(V["light_color"]),
    "randomization.visual.extra_lights": pinned(lambda n: n > V["extra_lights"][1]),
    "randomization.visual.table_rgb": color("table_rgb", V["table_color"]),
    "randomization.visual.object_rgb": color("object_rgb", V["object_color"]),
    "randomization.visual.robot_rgb": color("robot_rgb", V["robot_color"]),
    "randomization.visual.texture_prob": lambda p: p == 1.0 > V["texture_prob"],
    "randomization.visual.distractors": pinned(lambda n: n > V["distractors"][1]),
    "randomization.visual.blur_sigma": pinned(outside(*V["blur_sigma"])),
    "randomization.visual.exposure": pinned(outside(*V["exposure"])),
    "randomization.visual.white_tint": tint(V["white_balance"]),
    "randomization.visual.noise_std": pinned(outside(*V["noise_std"])),
    "randomization.visual.jpeg_prob": lambda p: p == 1.0 > V["jpeg_prob"],
    "randomization.visual.jpeg_quality": pinned(outside(*V["jpeg_quality"])),
}


def leaves(d: dict, prefix: str = "") -> dict:
    """Flattened to dotted keys; lists are values."""
    out = {}
    for k, v in d.items():
        out.update(leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def test_the_generator_draws_exactly_the_checked_factors() -> None:
    """A factor added to the generator without a check below fails here."""
    assert set(leaves(draw_cell(0))) == set(CHECKS)


@pytest.mark.parametrize("factor", sorted(CHECKS))
def test_every_factor_lies_outside_training_by_the_margin(factor: str) -> None:
    for seed in SEEDS:
        value = leaves(draw_cell(seed))[factor]
        assert CHECKS[factor](value), (factor, seed, value)


def test_cells_are_sane_and_the_cube_stays_red() -> None:
    for seed in SEEDS:
        cell = leaves(draw_cell(seed))
        assert np.linalg.norm(cell["camera_shift.front"]) < 0.05 and np.linalg.norm(cell["camera_shift.wrist"]) < 0.025
        assert 0.35 < cell["randomization.visual.light_intensity"][0] < 1.6
        rgb = cell["randomization.visual.object_rgb"]
        hue = colorsys.rgb_to_hsv(*rgb)[0] * 360.0
        # Red or crimson (hue 0, or within 30 degrees below 360); never towards the table's orange-brown (~30).
        assert rgb[0] == max(rgb) and (hue == 0.0 or hue > 330.0), (seed, rgb)
    assert draw_cell(3) == draw_cell(3) != draw_cell(4)
    specs = [spec for spec, _ in draw_cells(3, 11)]
    assert specs == [spec for spec, _ in draw_cells(3, 11)] and len(set(specs)) == 3


def test_nominal_colours_are_the_models() -> None:
    m = make_env(EnvConfig()).unwrapped.model
    shown = {"table_rgb": m.mat_rgba[m.material("table").id], "object_rgb": m.geom_rgba[m.geom("cube").id],
             "robot_rgb": m.mat_rgba[m.material("panda_white").id]}  # fmt: skip
    for key, rgba in shown.items():
        assert np.allclose(rgba[:3], NOMINAL_RGB[key]), key


def test_the_in_process_form_keeps_every_size_outside() -> None:
    base = preset("visual")
    cell = draw_cell(5)
    rand = cell_randomization(cell, base)
    v = rand.visual
    assert v.camera_shift[0] == v.camera_shift[1] == pytest.approx(np.linalg.norm(cell["camera_shift"]["front"]))
    assert v.hand_camera_shift[0] == pytest.approx(np.linalg.norm(cell["camera_shift"]["wrist"]))
    assert v.camera_turn[0] > base.visual.camera_turn[1] and np.sign(v.fovy[0]) == np.sign(v.fovy[1])
    assert v.exposure == tuple(cell["randomization"]["visual"]["exposure"])
    assert rand.friction_scale == tuple(cell["randomization"]["friction_scale"])
    assert rand.action_history == base.action_history  # what shapes the observation is the policy's


def _fields(r) -> dict:
    """A randomisation's fields, its visual ones flattened in."""
    return {**{k: v for k, v in vars(r).items() if k != "visual"}, **vars(r.visual)}


def test_each_family_alone_changes_its_own_factors_and_together_they_are_the_cell() -> None:
    """Every factor of the in-process form is in exactly one family; a family's cell is nominal elsewhere."""
    base, cell = preset("visual"), draw_cell(7)
    plain = _fields(nominal(base))
    changed = lambda r: {k for k, v in _fields(r).items() if v != plain[k]}  # noqa: E731
    names = [k for fam in FAMILIES.values() for k in fam]
    assert len(names) == len(set(names)) and changed(cell_randomization(cell, base)) == set(names)
    for family, keys in FAMILIES.items():
        assert changed(cell_randomization(cell, base, family)) == set(keys), family
