"""ManiSkill adapter logic without SAPIEN: task checks, state/action mapping, episode ends, experts, dispatch.

These always run (CI may lack Vulkan or the optional extra); tests/sim/test_maniskill_sim.py drives the real sim.
"""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.envs import make_env
from robot_rl.sim import EnvConfig
from robot_rl.sim import maniskill as ms

CUBE_TASKS = ("PickCube-v1", "PushCube-v1")


def _raw(b: int = 2, peg: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    q = np.tile([1.0, 0.0, 0.0, 0.0], (b, 1))
    raw = {
        "tcp_pos": rng.uniform(-0.2, 0.2, (b, 3)),
        "tcp_quat": q,
        "finger_qpos": np.tile([0.02, 0.02], (b, 1)),
        "obj_pos": rng.uniform(-0.2, 0.2, (b, 3)),
        "obj_quat": q,
        "goal_pos": rng.uniform(-0.2, 0.2, (b, 3)),
    }
    if peg:
        raw.update(peg_head=rng.uniform(-0.2, 0.2, (b, 3)), goal_quat=q)
    return raw


def test_task_names_and_unsupported_tasks() -> None:
    assert ms.is_maniskill_task("PickCube-v1") and ms.is_maniskill_task("PegInsertionSide-v1")
    assert not ms.is_maniskill_task("PickCube") and not ms.is_maniskill_task("peg_insert")
    for task in ("PickCube-v1", "PushCube-v1", "PegInsertionSide-v1"):
        assert ms.check_task(task).episode_steps > 0
    with pytest.raises(ValueError, match="not supported.*Supported: PickCube-v1"):
        ms.check_task("OpenCabinetDrawer-v1")


def test_asset_tasks_say_why_when_maniskill_is_installed() -> None:
    ok, why = ms.maniskill_available()
    if not ok:
        pytest.skip(why)
    with pytest.raises(ValueError, match="needs downloaded assets.*offline"):
        ms.check_task("PickSingleYCB-v1")


@pytest.mark.parametrize("task", [*CUBE_TASKS, "PegInsertionSide-v1"])
@pytest.mark.parametrize("yaw", [False, True])
@pytest.mark.parametrize("obs", ["state", "pixels"])
def test_state_layout_matches_built_state(task: str, yaw: bool, obs: str) -> None:
    raw = _raw(peg=task.startswith("Peg"))
    layout = ms.state_layout(task, yaw, obs)
    state = ms.build_state(task, raw, raw["tcp_pos"] - 0.01, 0.1, yaw, obs)
    assert state.dtype == np.float32 and state.shape == (2, max(s.stop for s in layout.values()))
    assert list(layout)[:1] == ["tcp_pos"] and "gripper_opening" in layout and "tcp_vel" in layout
    assert ("cube_pos" in layout or "peg_pos" in layout) == (obs != "pixels")


def test_build_state_values() -> None:
    raw = _raw()
    yaw = np.pi / 6
    raw["tcp_quat"] = np.tile([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)], (2, 1))
    raw["obj_quat"] = np.tile([np.cos(0.1 / 2), 0.0, 0.0, np.sin(0.1 / 2)], (2, 1))
    prev = raw["tcp_pos"] - np.array([0.01, 0.0, -0.02])
    s = ms.build_state("PickCube-v1", raw, prev, 0.1, True, "state")
    lay = ms.state_layout("PickCube-v1", True, "state")
    np.testing.assert_allclose(s[:, lay["tcp_pos"]], raw["tcp_pos"], atol=1e-6)
    np.testing.assert_allclose(s[:, lay["ee_yaw_sin_cos"]], [[np.sin(yaw), np.cos(yaw)]] * 2, atol=1e-6)
    np.testing.assert_allclose(s[:, lay["gripper_opening"]], 0.5, atol=1e-6)
    np.testing.assert_allclose(s[:, lay["tcp_vel"]], [[0.1, 0.0, -0.2]] * 2, atol=1e-5)
    np.testing.assert_allclose(s[:, lay["cube_minus_tcp"]], raw["obj_pos"] - raw["tcp_pos"], atol=1e-6)
    np.testing.assert_allclose(s[:, lay["goal_minus_cube"]], raw["goal_pos"] - raw["obj_pos"], atol=1e-6)
    np.testing.assert_allclose(s[:, lay["cube_yaw4_sin_cos"]], [[np.sin(0.4), np.cos(0.4)]] * 2, atol=1e-6)


def test_quat_yaw() -> None:
    for yaw in (-2.0, 0.0, 0.7, 3.0):
        assert ms.quat_yaw(np.array([np.cos(yaw / 2), 0, 0, np.sin(yaw / 2)])) == pytest.approx(yaw)


def test_action_mapping() -> None:
    tcp = np.zeros((3, 3))
    ws = ((-0.3, -0.3, 0.005), (0.3, 0.3, 0.45))
    a = np.array([[1.0, -1.0, 0.0, 1.0], [0.5, 0.0, 2.0, -1.0], [0.0, 0.0, -1.0, 0.0]])
    out = ms.to_maniskill_action(a, tcp + [0, 0, 0.1], yaw=False, max_step=0.025, max_yaw_step=0.25, workspace=ws)
    assert out.shape == (3, 4) and out.dtype == np.float32
    # 2.5 cm per step at |a| = 1 in units of the controller's 10 cm; out-of-range actions clip to 1
    np.testing.assert_allclose(out[:, :3], [[0.25, -0.25, 0.0], [0.125, 0.0, 0.25], [0.0, 0.0, -0.25]], atol=1e-6)
    np.testing.assert_allclose(out[:, 3], [-1.0, 1.0, 0.0])  # ours: +1 closes; ManiSkill: -1 closes
    # the workspace floor stops a downward move at the table
    low = ms.to_maniskill_action(a[2:], np.array([[0.0, 0.0, 0.01]]), yaw=False, max_step=0.025, max_yaw_step=0.25,
                                 workspace=ws)  # fmt: skip
    assert low[0, 2] == pytest.approx((0.005 - 0.01) / ms.EE_DELTA_LIMIT)
    y = ms.to_maniskill_action(np.array([[0, 0, 0, 0.2, 1.0], [0, 0, 0, 1.0, 1.0]]), tcp[:2], yaw=True,
                               max_step=0.025, max_yaw_step=0.25, workspace=ws)  # fmt: skip
    assert y.shape == (2, 7)
    np.testing.assert_allclose(y[:, 3:6], [[0, 0, -0.5], [0, 0, -1.0]])  # world +yaw is hand -z; saturates at 0.1 rad
    with pytest.raises(ValueError, match="shape"):
        ms.to_maniskill_action(a[:, :3], tcp, yaw=False, max_step=0.025, max_yaw_step=0.25, workspace=ws)
    with pytest.raises(ValueError, match="NaN"):
        ms.to_maniskill_action(a * np.nan, tcp, yaw=False, max_step=0.025, max_yaw_step=0.25, workspace=ws)


def test_episode_ends() -> None:
    success = np.array([True, False, False, True])
    t = np.array([3, 3, 50, 50])
    term, trunc = ms.episode_ends(success, t, 50, True)
    assert term.tolist() == [True, False, False, True] and trunc.tolist() == [False, False, True, False]
    term, trunc = ms.episode_ends(success, t, 50, False)
    assert not term.any() and trunc.tolist() == [False, False, True, True]


def _state(**kw) -> dict:
    s = {"tcp": np.array([0.0, 0.0, 0.15]), "object_pos": np.array([0.05, 0.02, 0.02]),
         "goal_pos": np.array([0.0, 0.1, 0.2]), "grasped": False, "gripper_closed_cmd": False,
         "gripper_gap": 0.08, "success": False, "peg_head": np.zeros(3)}  # fmt: skip
    s.update(kw)
    return s


def test_pick_place_expert_phases() -> None:
    goal, grip = ms.pick_place_goal(_state())
    assert grip == ms.GRIP_OPEN and np.allclose(goal[:2], [0.05, 0.02])  # over the cube, open
    goal, grip = ms.pick_place_goal(_state(tcp=np.array([0.05, 0.02, 0.022])))
    assert grip == ms.GRIP_CLOSE  # around the cube: close
    s = _state(tcp=np.array([0.05, 0.02, 0.03]), object_pos=np.array([0.05, 0.02, 0.03]), grasped=True)
    goal, grip = ms.pick_place_goal(s)
    assert grip == ms.GRIP_CLOSE and np.allclose(goal, s["goal_pos"])  # carry the cube onto the goal
    goal, grip = ms.pick_place_goal(_state(gripper_closed_cmd=True, gripper_gap=0.0))
    assert grip == ms.GRIP_OPEN  # closed on nothing: open again


def test_push_expert_gets_behind_then_pushes() -> None:
    cube, target = np.array([0.0, 0.0, 0.02]), np.array([0.12, 0.0, 0.001])
    goal, _ = ms.push_goal(_state(tcp=np.array([0.1, 0.05, 0.15]), object_pos=cube, goal_pos=target))
    assert goal[0] < cube[0]  # heads for the side away from the target
    goal, grip = ms.push_goal(_state(tcp=np.array([-0.037, 0.0, 0.02]), object_pos=cube, goal_pos=target))
    assert grip == ms.GRIP_CLOSE and goal[0] > 0.05 and abs(goal[1]) < 1e-9  # pushes along the line


def test_goal_distance_rewards_progress() -> None:
    far = ms.maniskill_goal_distance("PickCube-v1", _state())
    held = ms.maniskill_goal_distance("PickCube-v1", _state(grasped=True))
    at_goal = ms.maniskill_goal_distance("PickCube-v1", _state(grasped=True, object_pos=np.array([0.0, 0.1, 0.2])))
    assert far > held > at_goal == 0.0


def test_make_env_dispatch_errors() -> None:
    with pytest.raises(ValueError, match="add sim=maniskill"):
        make_env(EnvConfig(task="PickCube-v1", sim="mujoco"))
    with pytest.raises(ValueError, match="sim=maniskill runs ManiSkill tasks"):
        make_env(EnvConfig(task="PickCube", sim="maniskill"))
    with pytest.raises(ValueError, match="unknown sim"):
        make_env(EnvConfig(sim="isaac"))
    with pytest.raises(ValueError, match="not supported"):
        make_env(EnvConfig(task="Foo-v1", sim="maniskill"))
    assert type(make_env(EnvConfig(task="PickCube", sim="auto"))).__name__ == "PandaEnv"


def test_config_groups() -> None:
    from robot_rl.config import load_config

    cfg = load_config(["sim=maniskill", "task=PickCube-v1", "profile=cpu"])
    assert (cfg.env.sim, cfg.env.task) == ("maniskill", "PickCube-v1")
    assert load_config(["profile=cpu"]).env.sim == "mujoco"
    assert load_config(["sim=maniskill", "task=PegInsertionSide-v1", "profile=cpu"]).env.yaw


def test_domain_randomization_is_refused_for_maniskill_tasks() -> None:
    from robot_rl.config import load_config
    from robot_rl.errors import ConfigError

    with pytest.raises(ConfigError, match="env.randomization applies to the MuJoCo tasks"):
        load_config(["sim=maniskill", "task=PickCube-v1", "randomization=robust"])
