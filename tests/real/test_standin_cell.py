"""The stand-in real cells (`robot-rl sim-robot --cell standin | random:SEED`, issues #28, #54): the model is shifted
the way the cell says and every visual shift of `standin` lies outside what the visual preset draws (the drawn
cells': tests/sim/test_cells.py). Policies on them: bench/bench_sim_to_robot.py."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from real_util import inproc_robot

from robot_rl.errors import ConfigError
from robot_rl.real import msgs
from robot_rl.real.robot import STATE_QOS
from robot_rl.real.sim_robot import CELLS, SimRobot, SimRobotConfig, load_cell

pytestmark = pytest.mark.realtime

VISUAL_PRESET = Path(__file__).resolve().parents[2] / "configs/randomization/visual.yaml"


@pytest.fixture
def robot():
    return inproc_robot()


def test_the_standin_cell_moves_the_front_camera_and_shifts_looks_physics_and_latency(robot) -> None:
    nominal = SimRobot(SimRobotConfig(cameras=("front", "wrist")), robot)
    cell = SimRobot(SimRobotConfig(cameras=("front", "wrist"), **load_cell("standin")), robot)
    try:
        m0, m = nominal.model, cell.model
        front, wrist, cube = m.camera("front").id, m.camera("wrist").id, m.body("cube").id
        assert np.allclose(m.cam_pos[front] - m0.cam_pos[front], CELLS["standin"]["camera_shift"]["front"])
        assert not np.allclose(m.cam_quat[front], m0.cam_quat[front])
        assert np.allclose(m.cam_pos[wrist], m0.cam_pos[wrist]) and np.allclose(m.cam_quat[wrist], m0.cam_quat[wrist])
        assert m.body_mass[cube] == pytest.approx(1.4 * m0.body_mass[cube])
        assert np.allclose(m.geom_friction[:, 0], 0.7 * m0.geom_friction[:, 0])
        assert cell.cfg.latency_s == 0.03
        for seed in (3, 4):  # fixed, as a camera mounted elsewhere: the same move after every reset
            cell._reset_scene(seed)
            assert np.allclose(m.cam_pos[front] - m0.cam_pos[front], CELLS["standin"]["camera_shift"]["front"])
        frames = [r._renderer.render(r.data)["front"].astype(float) for r in (nominal, cell)]
        assert frames[1].mean() < 0.8 * frames[0].mean()  # half the light
    finally:
        cell.close()
        nominal.close()


def test_every_visual_shift_of_the_standin_cell_lies_outside_the_visual_preset() -> None:
    preset = yaml.safe_load(VISUAL_PRESET.read_text())["env"]["randomization"]["visual"]
    vis = CELLS["standin"]["randomization"]["visual"]
    lo, hi = preset["light_intensity"]
    assert not lo <= vis["light_intensity"][0] <= hi
    nominal = {"object_rgb": (0.85, 0.15, 0.15), "table_rgb": (0.55, 0.45, 0.35)}  # sim/assets: cube, table
    jitter = {"object_rgb": preset["object_color"], "table_rgb": preset["table_color"]}
    for key, centre in nominal.items():
        assert np.abs(np.subtract(vis[key], centre)).max() > jitter[key], key
    assert np.linalg.norm(CELLS["standin"]["camera_shift"]["front"]) > preset["camera_shift"][1]
    assert np.linalg.norm(CELLS["standin"]["camera_turn"]["front"]) > preset["camera_turn"][1]
    assert set(CELLS["standin"]) - {"randomization"} == {"latency_s", "camera_shift", "camera_turn"}
    assert set(vis) == {"light_intensity", "object_rgb", "table_rgb"}  # a shift added here needs its check above


def test_a_drawn_cell_moves_both_cameras_and_changes_their_view_physics_and_timing(robot) -> None:
    spec = load_cell("random:7")
    nominal = SimRobot(SimRobotConfig(), robot)
    cell = SimRobot(SimRobotConfig(cameras=("front", "wrist"), **spec), robot)
    try:
        m0, m, cube = nominal.model, cell.model, nominal.model.body("cube").id
        for seed in (3, 4):  # the same fixed moves after every reset
            cell._reset_scene(seed)
            for cam in ("front", "wrist"):
                i = m.camera(cam).id
                assert np.allclose(m.cam_pos[i] - m0.cam_pos[i], spec["camera_shift"][cam])
                assert not np.allclose(m.cam_quat[i], m0.cam_quat[i])
                assert m.cam_fovy[i] - m0.cam_fovy[i] == pytest.approx(spec["camera_fovy"][cam])
        rand = spec["randomization"]
        assert m.body_mass[cube] == pytest.approx(rand.mass_scale[0] * m0.body_mass[cube])
        assert np.allclose(m.geom_friction[:, 0], rand.friction_scale[0] * m0.geom_friction[:, 0])
        assert cell.cfg.latency_s > 0.0 and cell.cfg.stream_jitter_s > 0.0
        assert rand.visual.distractors == (3, 3) and rand.visual.texture_prob == 1.0
    finally:
        cell.close()
        nominal.close()


def test_stream_jitter_delivers_state_late_and_in_order(robot) -> None:
    def lateness(jitter_s: float) -> list[float]:
        """Seconds from each TCP pose's stamp to its arrival, over 30 ticks after 5 of warm-up."""
        node = SimRobot(SimRobotConfig(stream_jitter_s=jitter_s), robot)
        poses = node.tx.subscription(robot.ee_pose_topic, msgs.POSE, STATE_QOS)
        try:
            late, stamps = [], []
            for i in range(35):
                node.tick()
                now, got = time.time(), [msgs.stamp_of(p) for p in poses.take()]
                if i >= 5:
                    late += [now - s for s in got]
                    stamps += got
                time.sleep(0.01)
            assert stamps == sorted(stamps) and len(stamps) > 10  # late, never out of order
            return late
        finally:
            node.close()

    assert np.median(lateness(0.03)) > 0.005 > np.median(lateness(0.0))  # a wait of up to 30 ms, sent at a tick


def test_a_cell_from_yaml_and_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "cell.yaml"
    path.write_text("latency_s: 0.05\nrandomization: {friction_scale: [0.8, 0.8], visual: {exposure: [1.5, 1.5]}}\n")
    got = load_cell(str(path))
    assert got["latency_s"] == 0.05 and got["randomization"].visual.exposure == (1.5, 1.5)
    with pytest.raises(ConfigError, match="neither a cell"):
        load_cell("nowhere")
    with pytest.raises(ConfigError, match="random:SEED"):
        load_cell("random:x")
    path.write_text("lightz: 1\n")
    with pytest.raises(ConfigError, match="unknown keys"):
        load_cell(str(path))
