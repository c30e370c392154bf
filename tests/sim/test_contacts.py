"""Honest contacts: the force and penetration peaks are measured at every substep, reported in `info` and in
evaluation results, and a push past the force limit ends the episode as a safety failure."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.algos.reward_classifier import ClassifierReward, RewardClassifier
from robot_rl.buffers import ReplayBuffer
from robot_rl.envs import make_env
from robot_rl.evaluation import rollout, summarize
from robot_rl.loop.actor import Actor
from robot_rl.sim import EnvConfig, ExpertPolicy


@pytest.mark.parametrize("task", ["PickCube", "PegInsert"])
def test_expert_stays_under_the_force_limit_without_sinking_objects(task: str) -> None:
    env = make_env(EnvConfig(task=task), seed=0)
    res = summarize([rollout(env, ExpertPolicy(env), seed) for seed in range(10)])
    assert res.success_rate == 1.0 and res.safety_failure_rate == 0.0
    assert 0.0 < res.peak_ee_force_max < env.unwrapped.cfg.ee_force_limit
    assert 0.0 < res.peak_contact_force_max
    assert 0.0 <= res.max_penetration < 0.002


class _PressPolicy:
    """Closed fingers to 6 cm above the cube, then straight down at full speed: an impact like the ones trained
    policies made before the safety penalty (sim/envs.py `safety_reward`)."""

    def __init__(self, env) -> None:
        self.env, self.t = env, 0

    def select_action(self, obs, deterministic: bool = False) -> np.ndarray:
        s = self.env.unwrapped.sim_state()
        self.t += 1
        if self.t <= 12:
            return np.r_[np.clip((s["object_pos"] + [0, 0, 0.06] - s["tcp"]) / s["max_step"], -1, 1), 1.0]
        return np.array([0.0, 0.0, -1.0, 1.0])

    def reset(self) -> None:
        self.t = 0


def _press_closed_fingers_on_the_cube(limit: float) -> list[dict]:
    env = make_env(EnvConfig(ee_force_limit=limit), seed=0)
    env.reset(seed=0)
    policy, infos = _PressPolicy(env), []
    for _ in range(16):
        _, reward, terminated, _, info = env.step(policy.select_action(None))
        if policy.t > 12:
            infos.append({**info, "reward": reward, "terminated": terminated})
        if terminated:
            break
    return infos


def test_pressing_the_cube_into_the_table_is_a_safety_failure() -> None:
    infos = _press_closed_fingers_on_the_cube(50.0)
    last = infos[-1]
    assert last["terminated"] and last["safety_failure"] and not last["success"] and last["reward"] == -1.0
    assert last["peak_ee_force"] > 50.0 and last["max_penetration"] > 0.0
    assert all(i["reward"] == 0.0 for i in infos[:-1])  # the penalty is the stop's, not the approach's
    # Without the limit the same push goes on and is measured, not hidden.
    free = _press_closed_fingers_on_the_cube(0.0)
    assert len(free) == 4 and not any(i["safety_failure"] or i["reward"] < 0.0 for i in free)
    assert free[-1]["peak_ee_force"] >= last["peak_ee_force"]


def test_a_safety_stop_reaches_the_replay_buffer_as_a_penalised_terminal() -> None:
    """What the critic learns from: the stop's transition is stored with the penalty and terminated=1, so its
    target is the penalty alone (SAC does not bootstrap past `terminated`, tests/core/test_sac.py)."""
    env = make_env(EnvConfig(), seed=0)  # the main job's default: safety_reward=-1
    actor, buf = Actor(env, _PressPolicy(env)), ReplayBuffer(64, seed=0)
    while True:
        t = actor.step()
        buf.add(t)
        if t.done:
            break
    assert t.terminated and not t.truncated and t.reward == -1.0 and actor.last_episode.length < 20
    b = buf.sample(256)
    stop = b.terminated == 1.0
    assert stop.any() and (b.reward[stop] == -1.0).all() and (b.reward[~stop] == 0.0).all()


def test_a_safety_stop_ends_a_classifier_rewarded_episode_too() -> None:
    """With reward.source=classifier the env's own `terminated` is ignored (it is its success check); a stop is not."""
    base = make_env(EnvConfig(terminate_on_success=False), seed=0)
    env = ClassifierReward(base, RewardClassifier(base.observation_space["state"].shape[0]), threshold=1.0)
    env.reset(seed=0)
    policy = _PressPolicy(env)
    for _ in range(16):
        _, reward, terminated, truncated, info = env.step(policy.select_action(None))
        if terminated or truncated:
            break
    assert terminated and not truncated and info["safety_failure"] and reward == EnvConfig().safety_reward < 0.0


def test_touches_under_the_limit_cost_the_squared_force() -> None:
    """Closed fingers lowered slowly onto the cube: no stop, and every step short of success pays
    force_cost * (its peak EE force / limit)^2, so the critic sees contact before it ever trips the limit."""
    cfg = EnvConfig()
    env = make_env(cfg, seed=0)
    u = env.unwrapped
    env.reset(seed=0)
    policy, steps = _PressPolicy(env), []
    for _ in range(12):
        env.step(policy.select_action(None))
    for _ in range(20):
        _, reward, terminated, _, info = env.step(np.array([0.0, 0.0, -0.3, 1.0]))
        steps.append((reward, u.contacts.step_ee_force))
        assert not terminated
    forces = np.array([f for _, f in steps])
    assert forces.max() > 10.0 and info["peak_ee_force"] < cfg.ee_force_limit
    expected = [-cfg.force_cost * (f / cfg.ee_force_limit) ** 2 for f in forces]
    np.testing.assert_allclose([r for r, _ in steps], expected)
    assert min(expected) < -0.04


@pytest.mark.parametrize(("speed", "trips"), [(0.25, True), (0.1, False)])
def test_a_peg_landing_beside_the_hole_trips_the_limit_at_full_speed_not_at_a_tenth(speed: float, trips: bool) -> None:
    """Why the PegInsert robot cell slows the TCP near the block (`safety.slow_zones`, bench_robot_loop.py): the
    policy's held episodes began in free motion (0.5 N, the peg's weight) at ~0.1-0.2 m/s down; this impact is the
    same."""
    env = make_env(EnvConfig(task="PegInsert"), seed=0)
    env.reset(seed=0)
    u, peak, held = env.unwrapped, 0.0, False
    for t in range(40):
        s = u.sim_state()
        a = -speed / (10 * s["max_step"])  # m/s at the 10 Hz control rate, as a fraction of a full action
        # Over the block beside the hole, then down.
        action = np.array([0.6, 0.0, 0.0, 1.0]) if t < 3 else np.array([0.0, 0.0, a, 1.0])
        _, _, terminated, _, info = env.step(action)
        peak, held = max(peak, u.contacts.step_ee_force), held or info["safety_failure"]
        if terminated:
            break
    assert held == trips and (peak > 50.0 if trips else 5.0 < peak < 30.0), peak
