"""Visual randomisation: the nominal scene is untouched, each draw reaches what the cameras see, and nothing else."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robot_rl.config import load_config
from robot_rl.envs import make_env
from robot_rl.errors import ConfigError
from robot_rl.sim import EnvConfig, RandomizationConfig, ScriptedExpert, envs, randomization
from robot_rl.sim.config import VisualConfig, nominal
from robot_rl.sim.envs import ASSETS
from robot_rl.sim.rendering import gl_available

needs_gl = pytest.mark.skipif(not gl_available(), reason="no headless OpenGL backend (EGL or OSMesa) works here")


class _NoVisualFace:
    """The randomiser as it was before the visual face."""

    def __init__(self, *args: object) -> None:
        pass

    def apply(self, rng: np.random.Generator) -> None:
        pass

    def frame(self, img: np.ndarray) -> np.ndarray:
        return img


@needs_gl
@pytest.mark.parametrize("task", ["PickCube", "PegInsert"])
def test_nominal_scene_renders_and_steps_bit_identically_without_the_visual_assets(
    task: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The env of today against one built from the assets without sim/assets/visual.xml, step by step."""
    for f in ASSETS.glob("*.xml"):
        xml = f.read_text()
        (tmp_path / f.name).write_text(xml.replace('  <include file="visual.xml"/>\n', ""))
    now = make_env(EnvConfig(task=task, obs="pixels"), seed=0)
    monkeypatch.setattr(envs, "ASSETS", tmp_path)
    monkeypatch.setattr(randomization, "VisualRandomizer", _NoVisualFace)
    before = make_env(EnvConfig(task=task, obs="pixels"), seed=0)
    assert before.unwrapped.model.ngeom == now.unwrapped.model.ngeom - 3  # the distractors are gone
    expert = ScriptedExpert(0.0, seed=0)
    a, b = now.reset(seed=3)[0], before.reset(seed=3)[0]
    for t in range(8):
        for name in now.unwrapped.cfg.cameras:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"{task} {name} step {t}")
        np.testing.assert_array_equal(a["state"], b["state"])
        np.testing.assert_array_equal(now.unwrapped.data.qpos, before.unwrapped.data.qpos)
        action = expert.act(now)
        a, b = now.step(action)[0], before.step(action)[0]
    now.close()
    before.close()


def test_preset_loads_and_nominal_drops_it() -> None:
    rand = load_config(["randomization=visual", "obs=pixels"]).env.randomization
    assert rand.visual.distractors == (0, 2) and rand.visual != VisualConfig()
    assert nominal(rand).visual == VisualConfig()
    with pytest.raises(ConfigError, match="light_intensity"):
        load_config(["randomization=visual", "env.randomization.visual.light_intensity=[1.5,0.5]"])
    with pytest.raises(ConfigError, match="distractors"):
        VisualConfig(distractors=(0, 4))


def test_preset_draws_reach_the_model_and_leave_the_physics_draws_alone() -> None:
    rand = load_config(["randomization=visual"]).env.randomization
    vis = rand.visual
    env, plain = make_env(EnvConfig(randomization=rand), seed=0), make_env(EnvConfig(), seed=0)
    m = env.unwrapped.model
    table, brown = m.geom("table").id, np.array([0.55, 0.45, 0.35])
    distractors = [m.geom(f"distractor{i}").id for i in range(3)]
    p = plain.unwrapped.model
    heads, shadows, extra, standing, textured, furthest_front = set(), set(), set(), set(), 0, 0.0
    for seed in range(12):
        env.reset(seed=seed)
        plain.reset(seed=seed)
        # The visual draws come from a child generator: the cube starts where the nominal env's does.
        start = plain.unwrapped.sim_state()["object_pos"]
        np.testing.assert_array_equal(env.unwrapped.sim_state()["object_pos"], start)
        heads.add(round(float(m.vis.headlight.diffuse[0]), 6))
        shadows.add(bool(m.light_castshadow[m.light("top").id]))
        extra.add(int(m.light_active[m.light("extra0").id]))
        textured += int(m.geom_matid[table] != m.material("table").id)
        mat = m.geom_matid[table]
        shown = m.mat_rgba[mat, :3] if np.all(m.geom_rgba[table] == 0.5) else m.geom_rgba[table, :3]
        assert np.all(np.abs(shown - brown) <= vis.table_color + 1e-6), shown  # brown +- the range, never grey
        on_table = [g for g in distractors if np.any(m.geom_pos[g] != p.geom_pos[g])]  # the rest stay parked
        standing.add(len(on_table))
        for g in on_table:
            assert 0.17 <= abs(m.geom_pos[g, 1]) <= 0.3 and m.geom_pos[g, 2] == m.geom_aabb[g, 5]
        assert np.all(np.abs(m.cam_fovy - p.cam_fovy) <= vis.fovy[1] + 1e-9)
        moved = {
            c: float(np.linalg.norm(m.cam_pos[m.camera(c).id] - p.cam_pos[m.camera(c).id])) for c in ("front", "wrist")
        }
        assert moved["front"] <= vis.camera_shift[1] + 1e-9 and moved["wrist"] <= vis.hand_camera_shift[1] + 1e-9
        furthest_front = max(furthest_front, moved["front"])
    assert furthest_front > vis.hand_camera_shift[1]  # the two ranges are drawn apart: the hand's is the smaller
    assert len(heads) == 12 and shadows == {True, False} and extra == {0, 1} and standing == {0, 1, 2}
    assert 0 < textured < 12


@needs_gl
def test_camera_pipeline_acts_on_every_frame_and_repeats_with_the_seed() -> None:
    def env(**visual: object):
        rand = RandomizationConfig(visual=VisualConfig(**visual))
        return make_env(EnvConfig(obs="pixels", cameras=("front",), randomization=rand), seed=0)

    clean = env().reset(seed=1)[0]["front"].astype(float)
    dark = env(exposure=(0.5, 0.5)).reset(seed=1)[0]["front"].astype(float)
    assert abs(dark.mean() - 0.5 * clean.mean()) < 1.0
    noisy = env(noise_std=(8.0, 8.0))
    first = noisy.reset(seed=1)[0]["front"].astype(float)
    assert 6.0 < np.std(first - clean) < 9.0
    again = noisy.unwrapped._renderer.render(noisy.unwrapped.data)["front"].astype(float)
    assert np.abs(again - first).mean() > 3.0  # fresh noise in every frame
    np.testing.assert_array_equal(noisy.reset(seed=1)[0]["front"], first)  # and the same for the same seed
    blurred = env(blur_sigma=(1.5, 1.5)).reset(seed=1)[0]["front"].astype(float)
    assert np.abs(np.diff(blurred, axis=1)).mean() < 0.8 * np.abs(np.diff(clean, axis=1)).mean()
    jpeg = env(jpeg_prob=1.0, jpeg_quality=(20, 20)).reset(seed=1)[0]["front"].astype(float)
    assert 1.0 < np.abs(jpeg - clean).mean() < 12.0  # blocks and ringing, the same scene


@needs_gl
def test_tints_colour_the_lights_and_the_camera() -> None:
    """`light_tint` and `white_tint` (a drawn cell's warmer light, its camera's white balance) are fixed gains."""

    def front(**visual: object) -> np.ndarray:
        rand = RandomizationConfig(visual=VisualConfig(**visual))
        env = make_env(EnvConfig(obs="pixels", cameras=("front",), randomization=rand), seed=0)
        return env.reset(seed=1)[0]["front"].reshape(-1, 3).astype(float).mean(0)

    clean = front()
    white = front(white_tint=(1.0, 1.0, 0.5))
    assert np.allclose(white[:2], clean[:2], atol=0.6) and abs(white[2] - 0.5 * clean[2]) < 1.0
    light = front(light_tint=(1.0, 1.0, 0.5))
    assert np.allclose(light[:2], clean[:2], atol=3.0) and light[2] < 0.85 * clean[2]
    with pytest.raises(ConfigError, match="light_tint"):
        VisualConfig(light_tint=(1.0, 1.0))
