"""Stand-in cells nobody tuned on (issue #54): from a seed, every factor a camera run's training draws, set just
outside what it drew.

`draw_cell(seed)` reads the training ranges from the presets (the visual preset for what the cameras see, `robust`
for friction and mass, which camera runs do not randomise at all) and puts each factor beyond its range by at least
`margin` of the range's width, at most 1.5 times that: "outside by a margin", not absurd, so a policy that learned
the task should still mostly succeed. Colours move one channel beyond the preset's +- jitter (the others stay
nominal); the cube only darker or towards crimson, never towards the table's brown. Latency and stream jitter, which
no camera run trains with, come from `LATENCY_S` and `STREAM_JITTER_S`. Shadows are left out: the preset draws them
both ways, so no setting of them is outside.

A cell is a dict of `SimRobotConfig` fields (`robot-rl sim-robot --cell random:SEED`, real/sim_robot.py `load_cell`):
per-camera moves fixed in a drawn direction, the visual randomiser's fields pinned to one value, physics and timing.
`cell_randomization` turns one into the in-process env's `RandomizationConfig` (bench/bench_visual_transfer.py):
the sizes are the cell's, but the env draws the camera directions per episode, and it has no latency under a control
step nor stream jitter, so those two stay with the sim robot. Nothing here imports MuJoCo or ROS.
"""

from __future__ import annotations

import random
from importlib import resources
from typing import Any

import numpy as np
import yaml

from robot_rl.sim.config import RandomizationConfig, VisualConfig, nominal, randomization_config

MARGIN = 0.2  # a drawn value lies this fraction of its range's width beyond the range, up to 1.5 times that
LATENCY_S = (0.02, 0.05)  # seconds of command latency: a driver's path; camera runs train with none
STREAM_JITTER_S = (0.005, 0.02)  # seconds each state and camera message may come late; training has none
CAMERAS = ("front", "wrist")  # `front` placed in the cell (`camera_shift`), `wrist` on the hand (`hand_camera_shift`)
# The shown colours of the nominal scene (sim/assets: table material, cube geom, panda_white material).
NOMINAL_RGB = {"table_rgb": (0.55, 0.45, 0.35), "object_rgb": (0.85, 0.15, 0.15), "robot_rgb": (0.92, 0.93, 0.93)}
# (channel, sign) moves the cube may take: darker red or towards crimson, so it stays "the red cube" (its green
# channel up turns it orange, the table's way).
_OBJECT_MOVES = ((0, -1), (2, 1))
# What a drawn cell changes, by family (the in-process env's fields; latency and stream jitter stay with the sim
# robot): `cell_randomization(cell, base, family)` applies one family alone, so a table shows which factor a
# policy loses to, and "kept in every family" can be read on cells nobody tuned on.
FAMILIES: dict[str, tuple[str, ...]] = {
    "cameras": ("camera_shift", "hand_camera_shift", "camera_turn", "fovy"),
    "lights": ("light_intensity", "light_tilt", "light_tint", "extra_lights"),
    "colours": ("table_rgb", "object_rgb", "robot_rgb", "texture_prob"),
    "distractors": ("distractors",),
    "image": ("blur_sigma", "exposure", "white_tint", "noise_std", "jpeg_prob", "jpeg_quality"),
    "physics": ("friction_scale", "mass_scale"),
}


def preset(name: str) -> RandomizationConfig:
    """configs/randomization/<name>.yaml as a `RandomizationConfig` (a visual preset sits under env.randomization)."""
    raw = yaml.safe_load((resources.files("robot_rl.configs") / "randomization" / f"{name}.yaml").read_text()) or {}
    return randomization_config(raw.get("env", {}).get("randomization", raw))


def draw_cell(seed: int, visual: str | RandomizationConfig = "visual", physics: str | RandomizationConfig = "robust",
              margin: float = MARGIN) -> dict[str, Any]:  # fmt: skip
    """A cell outside `visual`'s camera-side ranges and `physics`' friction and mass (preset names or configs), as
    plain values (yaml and json safe)."""
    v = (preset(visual) if isinstance(visual, str) else visual).visual
    phys = preset(physics) if isinstance(physics, str) else physics
    rng = np.random.default_rng(seed)

    def beyond(lo: float, hi: float, low: bool = True, high: bool = True) -> float:
        m = margin * (hi - lo)
        out = rng.uniform(m, 1.5 * m)
        return float(lo - out if rng.choice([s for s, ok in ((0, low), (1, high)) if ok]) == 0 else hi + out)

    # Both lenses wider or both narrower: the in-process env has one `fovy` range for both (`cell_randomization`).
    wider = bool(rng.random() < 0.5)
    shift = {"front": beyond(*v.camera_shift, low=False), "wrist": beyond(*v.hand_camera_shift, low=False)}
    vis = {
        "light_intensity": [beyond(*v.light_intensity, low=v.light_intensity[0] > 0.0)] * 2,
        "light_tilt": [beyond(*v.light_tilt, low=False)] * 2,
        "light_tint": _tint(rng, beyond(-v.light_color, v.light_color, low=False)),
        "extra_lights": [v.extra_lights[1] + 1] * 2,
        **{key: _color(rng, key, beyond(-jitter, jitter, low=False)) for key, jitter in
           (("table_rgb", v.table_color), ("object_rgb", v.object_color), ("robot_rgb", v.robot_color))},
        "texture_prob": 1.0,
        "distractors": [v.distractors[1] + 1] * 2,
        "blur_sigma": [beyond(*v.blur_sigma, low=False)] * 2,
        "exposure": [beyond(*v.exposure)] * 2,
        "white_tint": _tint(rng, beyond(-v.white_balance, v.white_balance, low=False)),
        "noise_std": [beyond(*v.noise_std, low=False)] * 2,
        "jpeg_prob": 1.0,
        "jpeg_quality": [round(beyond(*v.jpeg_quality, high=False))] * 2,
    }  # fmt: skip
    cell = {
        "camera_shift": {cam: _direction(rng, shift[cam]) for cam in CAMERAS},
        "camera_turn": {cam: _direction(rng, beyond(*v.camera_turn, low=False)) for cam in CAMERAS},
        "camera_fovy": {cam: beyond(*v.fovy, low=not wider, high=wider) for cam in CAMERAS},
        "latency_s": float(rng.uniform(*LATENCY_S)),
        "stream_jitter_s": float(rng.uniform(*STREAM_JITTER_S)),
        "randomization": {
            "friction_scale": [beyond(*phys.friction_scale)] * 2,
            "mass_scale": [beyond(*phys.mass_scale)] * 2,
            "visual": vis,
        },
    }
    return _rounded(cell)


def draw_cells(n: int, seed: int) -> list[tuple[str, dict[str, Any]]]:
    """`n` cells as (`--cell` spec, cell), their seeds drawn from `seed`: a test set drawn at run time."""
    rng = random.Random(seed)
    return [(f"random:{s}", draw_cell(s)) for s in (rng.randrange(2**31) for _ in range(n))]


def cell_randomization(
    cell: dict[str, Any], base: RandomizationConfig, family: str | None = None
) -> RandomizationConfig:
    """`cell` in the in-process env, for a policy trained with `base` (its observation-shaping fields kept): the
    visual and physics values fixed, each camera move's size fixed and its direction drawn per episode. With
    `family` (a `FAMILIES` key), only that family's factors; the rest nominal."""
    rand = cell["randomization"]
    shift = {cam: float(np.linalg.norm(v)) for cam, v in cell["camera_shift"].items()}
    turn = [float(np.linalg.norm(v)) for v in cell["camera_turn"].values()]
    fovy = list(cell["camera_fovy"].values())
    cameras = {"camera_shift": [shift["front"]] * 2, "hand_camera_shift": [shift["wrist"]] * 2,
               "camera_turn": [min(turn), max(turn)], "fovy": [min(fovy), max(fovy)]}  # fmt: skip
    fields = {**rand["visual"], **cameras, "friction_scale": rand["friction_scale"], "mass_scale": rand["mass_scale"]}
    if family is not None:
        fields = {k: v for k, v in fields.items() if k in FAMILIES[family]}
    physics = {k: tuple(fields.pop(k)) for k in FAMILIES["physics"] if k in fields}
    return nominal(base, **physics, visual=VisualConfig(**fields))


def _rounded(x: Any) -> Any:
    """`x` with its floats to 4 decimals, far below any margin: a cell a person can read in one log line."""
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return round(x, 4) if isinstance(x, float) else x


def _direction(rng: np.random.Generator, size: float) -> list[float]:
    """A vector of length `size` in a random direction."""
    d = rng.normal(size=3)
    return [float(x) for x in size * d / np.linalg.norm(d)]


def _tint(rng: np.random.Generator, out: float) -> list[float]:
    """Per-channel gains, one channel `out` from 1 (either way), the others 1."""
    gains = [1.0, 1.0, 1.0]
    gains[int(rng.integers(3))] = 1.0 + float(rng.choice((-1.0, 1.0))) * out
    return gains


def _color(rng: np.random.Generator, key: str, out: float) -> list[float]:
    """The nominal colour with one channel moved by `out`, kept in [0, 1] (the cube: `_OBJECT_MOVES` only)."""
    rgb = list(NOMINAL_RGB[key])
    moves = _OBJECT_MOVES if key == "object_rgb" else [(c, s) for c in range(3) for s in (-1, 1)]
    moves = [(c, s) for c, s in moves if 0.0 <= rgb[c] + s * out <= 1.0]
    c, s = moves[int(rng.integers(len(moves)))]
    rgb[c] += s * out
    return rgb
