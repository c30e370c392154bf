"""The arm behaves like a force-limited Franka (arm=osc), not like a mocap weld that teleports the hand."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from robot_rl.envs import make_env
from robot_rl.evaluation import rollout
from robot_rl.sim import EnvConfig, ExpertPolicy


def _step_response(arm: str) -> np.ndarray:
    """TCP displacement (m) along x over 0.4 s (one sample per 10 ms), for a 2.5 cm target step from rest."""
    env = make_env(EnvConfig(arm=arm), seed=0)
    u = env.unwrapped
    env.reset(seed=0)
    d = u.data
    start = d.site_xpos[u._tcp_id].copy()
    d.mocap_pos[u._mocap_id] = start + [0.025, 0.0, 0.0]
    xs = []
    for _ in range(40):
        mujoco.mj_step(u.model, d, round(0.01 / u.model.opt.timestep))
        xs.append(d.site_xpos[u._tcp_id][0] - start[0])
    return np.array(xs)


def test_impedance_arm_settles_like_a_real_arm_and_mocap_does_not() -> None:
    osc, mocap = _step_response("osc"), _step_response("mocap")
    assert mocap[4] > 0.9 * 0.025  # the weld: there within 50 ms
    assert osc[4] < 0.5 * 0.025  # the impedance arm: under half way after 50 ms ...
    assert abs(osc[-1] - 0.025) < 0.002  # ... settled within 2 mm after 0.4 s
    assert osc.max() - 0.025 < 0.006  # with a small overshoot


def test_pushing_into_the_table_is_limited_by_the_arm() -> None:
    """Closed fingers driven at full speed onto the cube: after the impact the push is the controller's clipped
    force, not the kilonewtons of a weld, and the cube does not sink into the table."""
    env = make_env(EnvConfig(ee_force_limit=0.0), seed=0)
    u = env.unwrapped
    env.reset(seed=0)
    for _ in range(12):
        s = u.sim_state()
        env.step(np.r_[np.clip((s["object_pos"] + [0, 0, 0.06] - s["tcp"]) / s["max_step"], -1, 1), 1.0])
    for _ in range(6):
        _, _, _, _, info = env.step(np.array([0.0, 0.0, -1.0, 1.0]))
        tau = u.data.qfrc_actuator[:7]
        assert (np.abs(tau) <= u.model.jnt_actfrcrange[:7, 1] + 1e-9).all()  # joint torque limits hold
    assert u.contacts.step_ee_force < 40.0  # the sustained push: the 30 N per-axis clip, filtered
    assert info["max_penetration"] < 0.002


@pytest.mark.parametrize("arm", ["osc", "mocap"])
def test_expert_succeeds_with_either_arm(arm: str) -> None:
    env = make_env(EnvConfig(task="PegInsert", arm=arm), seed=0)
    assert sum(rollout(env, ExpertPolicy(env), ep).success for ep in range(10)) >= 9
