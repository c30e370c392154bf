"""Env contract: spaces, dtypes, episode-end semantics, action validation, seeding, randomisation."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.envs import make_env
from robot_rl.sim import EnvConfig, RandomizationConfig, ScriptedExpert
from robot_rl.sim.rendering import gl_available

TASKS = ("PickCube", "PegInsert")


def _check_obs(env, obs) -> None:
    space = env.observation_space
    assert set(obs) == set(space.spaces)
    for key, sub in space.spaces.items():
        assert obs[key].dtype == sub.dtype, key
        assert obs[key].shape == sub.shape, key
    assert space.contains(obs)


@pytest.mark.parametrize("task", TASKS)
def test_state_obs_and_step_types(task: str) -> None:
    env = make_env(EnvConfig(task=task, obs_frame="absolute"), seed=0)
    obs, info = env.reset(seed=0)
    _check_obs(env, obs)
    assert set(obs) == {"state"}
    assert obs["state"].dtype == np.float32
    assert isinstance(info["success"], bool)
    assert env.action_space.shape == (4,)
    layout = env.unwrapped.state_layout
    assert max(s.stop for s in layout.values()) == obs["state"].shape[0]
    assert np.allclose(obs["state"][layout["tcp_pos"]], env.unwrapped.sim_state()["tcp"], atol=1e-5)
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        _check_obs(env, obs)
        assert isinstance(reward, float)
        assert isinstance(terminated, bool) and isinstance(truncated, bool)
        assert isinstance(info["success"], bool)


@pytest.mark.skipif(not gl_available(), reason="no headless OpenGL backend (EGL or OSMesa) works here")
@pytest.mark.parametrize("task", TASKS)
def test_pixel_obs(task: str) -> None:
    env = make_env(EnvConfig(task=task, obs="pixels", image_size=64), seed=0)
    obs, _ = env.reset(seed=0)
    _check_obs(env, obs)
    assert set(obs) == {"state", "front", "wrist"}
    for cam in ("front", "wrist"):
        assert obs[cam].shape == (64, 64, 3) and obs[cam].dtype == np.uint8
        assert obs[cam].std() > 5.0, f"{cam} image is blank"
    # pixels mode: proprio only, no privileged object state
    assert "cube_pos" not in env.unwrapped.state_layout and "peg_bottom" not in env.unwrapped.state_layout
    first = obs["wrist"]
    obs, *_ = env.step(np.array([1.0, 0.0, -1.0, -1.0]))
    assert not np.array_equal(first, obs["wrist"]), "wrist view did not change after the hand moved"
    both = make_env(EnvConfig(task=task, obs="both", cameras=("front",), image_size=64), seed=0)
    obs, _ = both.reset(seed=0)
    assert set(obs) == {"state", "front"}
    assert obs["state"].shape[0] > 7
    env.close()
    both.close()


def test_yaw_adds_action_dim_and_rotates() -> None:
    env = make_env(EnvConfig(yaw=True), seed=0)
    obs, _ = env.reset(seed=0)
    assert env.action_space.shape == (5,)
    layout = env.unwrapped.state_layout
    assert "ee_yaw_sin_cos" in layout and "cube_yaw4_sin_cos" in layout
    yaw0 = env.unwrapped.sim_state()["ee_yaw"]
    for _ in range(2):
        obs, *_ = env.step(np.array([0.0, 0.0, 0.0, 1.0, -1.0]))
    assert env.unwrapped.sim_state()["ee_yaw"] > yaw0 + 0.3
    sin, cos = obs["state"][layout["ee_yaw_sin_cos"]]
    assert np.isclose(np.arctan2(sin, cos), env.unwrapped.sim_state()["ee_yaw"], atol=1e-3)


@pytest.mark.parametrize("task", TASKS)
def test_truncation_at_time_limit(task: str) -> None:
    env = make_env(EnvConfig(task=task, max_episode_steps=5), seed=0)
    env.reset(seed=0)
    zero = np.zeros(4)
    for t in range(1, 6):
        _, _, terminated, truncated, info = env.step(zero)
        assert not terminated and not info["success"]
        assert truncated == (t == 5)


@pytest.mark.parametrize("task", TASKS)
def test_success_terminates_not_truncates(task: str) -> None:
    for terminate in (True, False):
        env = make_env(EnvConfig(task=task, terminate_on_success=terminate), seed=1)
        expert = ScriptedExpert()
        env.reset(seed=1)
        for _ in range(env.unwrapped.max_episode_steps):
            _, reward, terminated, truncated, info = env.step(expert.act(env))
            if info["success"]:
                break
        assert info["success"] and reward == 1.0
        assert terminated == terminate and not truncated


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_action_raises_before_physics(bad: float) -> None:
    env = make_env(EnvConfig(), seed=0)
    env.reset(seed=0)
    data = env.unwrapped.data
    time0, qpos0, mocap0 = data.time, data.qpos.copy(), data.mocap_pos.copy()
    with pytest.raises(ValueError, match="NaN or inf"):
        env.step(np.array([0.1, bad, 0.0, 0.0]))
    assert data.time == time0
    assert np.array_equal(data.qpos, qpos0) and np.array_equal(data.mocap_pos, mocap0)


def test_wrong_action_shape_raises() -> None:
    env = make_env(EnvConfig(), seed=0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(5))


def test_actions_are_clipped() -> None:
    results = []
    for scale in (1.0, 7.0):
        env = make_env(EnvConfig(), seed=0)
        obs, _ = env.reset(seed=0)
        obs, *_ = env.step(np.array([1.0, -1.0, 1.0, -1.0]) * scale)
        results.append(obs["state"])
    assert np.array_equal(results[0], results[1])


@pytest.mark.parametrize(("arm", "lo", "hi"), [("mocap", 0.93, 1.07), ("osc", 0.5, 0.8)])
def test_action_moves_about_max_step(arm: str, lo: float, hi: float) -> None:
    """The weld covers max_step per step; the impedance arm lags its target (from rest: ~60 % over 3 steps)."""
    cfg = EnvConfig(arm=arm)
    env = make_env(cfg, seed=0)
    env.reset(seed=0)
    start = env.unwrapped.sim_state()["tcp"]
    for _ in range(3):
        env.step(np.array([1.0, 0.0, 0.0, -1.0]))
    moved = env.unwrapped.sim_state()["tcp"] - start
    assert lo * 3 * cfg.max_step < moved[0] < hi * 3 * cfg.max_step
    assert np.abs(moved[1:]).max() < 0.003


@pytest.mark.parametrize("task", TASKS)
def test_seeding_is_reproducible(task: str) -> None:
    def rollout(seed: int) -> list[np.ndarray]:
        env = make_env(EnvConfig(task=task), seed=seed)
        obs, _ = env.reset(seed=seed)
        actions = np.random.default_rng(seed).uniform(-1, 1, (15, 4))
        states = [obs["state"]]
        for a in actions:
            obs, *_ = env.step(a)
            states.append(obs["state"])
        return states

    a, b, c = rollout(3), rollout(3), rollout(4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])


def test_reset_randomises_object_pose() -> None:
    env = make_env(EnvConfig(obs_frame="absolute"), seed=0)
    cubes = [env.reset(seed=s)[0]["state"][env.unwrapped.state_layout["cube_pos"]] for s in range(10)]
    spread = np.ptp(np.stack(cubes), axis=0)
    assert spread[0] > 0.02 and spread[1] > 0.02 and spread[2] < 1e-3


def test_dense_reward_shapes_progress() -> None:
    env = make_env(EnvConfig(reward="dense"), seed=2)
    expert = ScriptedExpert()
    env.reset(seed=2)
    rewards = []
    for _ in range(env.unwrapped.max_episode_steps):
        _, reward, terminated, _, _ = env.step(expert.act(env))
        rewards.append(reward)
        if terminated:
            break
    assert all(0.0 <= r <= 1.0 for r in rewards)
    assert rewards[-1] == 1.0 and rewards[0] < 0.5
    sparse = make_env(EnvConfig(reward="sparse"), seed=2)
    sparse.reset(seed=2)
    assert sparse.step(np.zeros(4))[1] == 0.0


def test_domain_randomisation_changes_model_and_restores() -> None:
    rand = RandomizationConfig(
        friction_scale=(0.5, 1.5),
        mass_scale=(0.5, 2.0),
        damping_scale=(0.5, 2.0),
        camera_pos_jitter=0.02,
        color_jitter=0.1,
    )
    env = make_env(EnvConfig(randomization=rand), seed=0)
    model = env.unwrapped.model
    cube = model.body("cube").id
    masses, frictions, cams = set(), set(), set()
    for s in range(5):
        env.reset(seed=s)
        masses.add(round(float(model.body_mass[cube]), 6))
        frictions.add(round(float(model.geom_friction[0, 0]), 6))
        cams.add(round(float(model.cam_pos[0, 0]), 6))
        assert 0.025 - 1e-9 <= model.body_mass[cube] <= 0.1 + 1e-9
    assert len(masses) == 5 and len(frictions) == 5 and len(cams) == 5
    plain = make_env(EnvConfig(), seed=0)
    plain.reset(seed=0)
    assert plain.unwrapped.model.body_mass[cube] == pytest.approx(0.05)


def test_action_latency_delays_motion() -> None:
    env = make_env(EnvConfig(randomization=RandomizationConfig(action_latency=2)), seed=0)
    env.reset(seed=0)
    start = env.unwrapped.sim_state()["tcp"]
    push = np.array([1.0, 0.0, 0.0, -1.0])
    env.step(push)
    env.step(push)
    assert np.allclose(env.unwrapped.sim_state()["target"], start, atol=0.003)  # still the zero actions
    env.step(push)
    assert env.unwrapped.sim_state()["target"][0] > start[0] + 0.02


def test_invalid_config_rejected() -> None:
    with pytest.raises(ValueError, match="task"):
        make_env(EnvConfig(task="Stack"))
    with pytest.raises(ValueError, match="obs"):
        make_env(EnvConfig(obs="depth"))
    with pytest.raises(ValueError, match="obs_frame"):
        make_env(EnvConfig(obs_frame="world"))


def test_relative_obs_frame_has_no_absolute_position_and_shows_the_lift() -> None:
    peg = make_env(EnvConfig(task="PegInsert", obs_frame="relative")).unwrapped
    assert list(peg.state_layout) == ["tcp_minus_hole_top", "gripper_opening", "tcp_vel", "hole_minus_peg_bottom"]
    s = peg.reset(seed=0)[0]["state"]
    sim = peg.sim_state()
    np.testing.assert_allclose(s[peg.state_layout["tcp_minus_hole_top"]], sim["tcp"] - sim["hole_top"], atol=1e-5)
    # A table 2.5 cm higher moves the cube, not what the policy sees of it (the gripper starts 2.5 cm closer).
    obs = {}
    for dz in (1e-7, 0.025):  # both draw the height, so both scenes are the same draw
        rand = RandomizationConfig(table_height=(dz, dz))
        env = make_env(EnvConfig(obs_frame="relative", randomization=rand))
        obs[dz], u = env.reset(seed=4)[0]["state"], env.unwrapped
    lay = u.state_layout
    assert list(lay) == ["tcp_minus_cube_start", "gripper_opening", "tcp_vel", "cube_minus_start", "cube_minus_tcp"]
    np.testing.assert_allclose(obs[0.025] - obs[1e-7], [0, 0, -0.025, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.025], atol=1e-5)
    np.testing.assert_allclose(obs[1e-7][lay["tcp_minus_cube_start"]], -obs[1e-7][lay["cube_minus_tcp"]], atol=1e-6)
    expert, done, state = ScriptedExpert(), False, obs[0.025]
    while not done:
        state, _, terminated, truncated, info = env.step(expert.act(env))
        done = terminated or truncated
        state = state["state"]
    assert info["success"] and state[lay["cube_minus_start"]][2] >= 0.05  # the lift, on the raised table
