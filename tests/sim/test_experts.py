"""Scripted expert quality and the simulated human's takeover behaviour."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.envs import make_env
from robot_rl.evaluation import rollout
from robot_rl.sim import (
    EnvConfig,
    ExpertPolicy,
    InterventionConfig,
    RandomizationConfig,
    ScriptedExpert,
    SimulatedHuman,
)

TASKS = ("PickCube", "PegInsert")


def _run(env, act, seed: int) -> bool:
    env.reset(seed=seed)
    while True:
        _, _, terminated, truncated, info = env.step(act())
        if terminated or truncated:
            return info["success"]


@pytest.mark.parametrize("task", TASKS)
def test_expert_success_rate(task: str) -> None:
    env = make_env(EnvConfig(task=task))
    expert = ScriptedExpert()
    wins = sum(_run(env, lambda: expert.act(env), seed) for seed in range(20))
    assert wins / 20 >= 0.9


@pytest.mark.parametrize("task", TASKS)
def test_expert_takes_over_mid_episode(task: str) -> None:
    """After 8 random steps (cube pushed, gripper closed, peg knocked) the expert still finishes."""
    env = make_env(EnvConfig(task=task, max_episode_steps=80))
    expert = ScriptedExpert()
    wins = 0
    for seed in range(10):
        env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for _ in range(8):
            env.step(rng.uniform(-1, 1, 4))
        while True:
            _, _, terminated, truncated, info = env.step(expert.act(env))
            if terminated or truncated:
                break
        wins += info["success"]
    assert wins >= 8


def test_stale_view_expert_acts_on_what_a_delayed_policy_sees() -> None:
    """The transfer suite's control row for observation delay: with no delay it is the live expert, action for
    action; one step late it acts on the previous step's state; two steps late it loses the task the live expert
    solves (a memoryless controller cannot carry a view that old)."""
    env = make_env(EnvConfig(randomization=RandomizationConfig(obs_delay=1)))
    stale, expert, prev = ExpertPolicy(env, stale_view=True), ScriptedExpert(), None
    obs, _ = env.reset(seed=0)
    stale.reset()
    for _ in range(10):
        now = env.unwrapped.sim_state()
        a = stale.select_action(obs)
        assert np.array_equal(a, expert.act(env, prev if prev is not None else now))
        prev = now
        obs, *_ = env.step(a)
    env = make_env(EnvConfig())
    assert [rollout(env, ExpertPolicy(env, stale_view=True), s).length for s in range(3)] == [
        rollout(env, ExpertPolicy(env), s).length for s in range(3)
    ]
    env = make_env(EnvConfig(randomization=RandomizationConfig(obs_delay=2)))
    live = sum(rollout(env, ExpertPolicy(env), s).success for s in range(8))
    late = sum(rollout(env, ExpertPolicy(env, stale_view=True), s).success for s in range(8))
    assert live >= 7 and late <= 4, (live, late)


def test_expert_noise_diversifies_actions() -> None:
    env = make_env(EnvConfig(), seed=0)
    env.reset(seed=0)
    clean, noisy = ScriptedExpert().act(env), ScriptedExpert(noise_std=0.1, seed=0).act(env)
    assert clean.shape == noisy.shape == (4,) and clean.dtype == np.float32
    assert not np.array_equal(clean[:3], noisy[:3])
    assert clean[3] == noisy[3]  # the gripper command stays crisp
    assert np.abs(noisy).max() <= 1.0


def test_expert_handles_yaw() -> None:
    env = make_env(EnvConfig(yaw=True))
    expert = ScriptedExpert()
    wins = sum(_run(env, lambda: expert.act(env), seed) for seed in range(10))
    assert wins >= 9


def test_human_rescues_random_policy() -> None:
    env = make_env(EnvConfig())
    human = SimulatedHuman(InterventionConfig(decay_steps=0), seed=0)
    rng = np.random.default_rng(0)

    def policy() -> np.ndarray:
        return rng.uniform(-1, 1, 4).astype(np.float32)

    alone = sum(_run(env, policy, seed) for seed in range(15))
    helped, acted_any = 0, 0
    for seed in range(15):
        env.reset(seed=seed)
        human.reset()
        while True:
            action, acted = human(env, policy())
            acted_any += acted
            _, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        helped += info["success"]
    assert acted_any > 0 and human.interventions > 0
    assert helped > alone
    stats = human.stats()
    assert 0.0 < stats["intervention_rate"] < 1.0
    assert stats["intervention_rate"] == pytest.approx(human.intervened_steps / human.total_steps)


def test_human_hands_back_after_takeover_steps() -> None:
    env = make_env(EnvConfig(max_episode_steps=200, terminate_on_success=False), seed=0)
    human = SimulatedHuman(InterventionConfig(patience=2, takeover_steps=4, decay_steps=0), seed=0)
    env.reset(seed=0)
    human.reset()
    away = np.array([-1.0, 1.0, 1.0, -1.0], dtype=np.float32)  # always away from the cube
    flags = []
    for _ in range(20):
        action, acted = human(env, away)
        flags.append(acted)
        env.step(action)
    runs, n = [], 0
    for f in flags:  # complete takeovers only: the 20 steps may end in the middle of one
        if f:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    assert runs and all(r == 4 for r in runs)
    assert not flags[0]  # the policy gets the first steps


def test_intervention_probability_decays() -> None:
    cfg = InterventionConfig(max_rate=1.0, min_rate=0.0, decay_steps=100)
    human = SimulatedHuman(cfg, seed=0)
    assert human.rate == 1.0
    human.set_progress(50)
    assert human.rate == pytest.approx(0.5)
    human.set_progress(100)
    assert human.rate == 0.0
    env = make_env(EnvConfig(), seed=0)
    env.reset(seed=0)
    human.reset()
    for _ in range(30):
        action, acted = human(env, np.array([-1.0, 1.0, 1.0, -1.0], dtype=np.float32))
        assert not acted
        env.step(action)


def test_disabled_human_passes_policy_through() -> None:
    env = make_env(EnvConfig(), seed=0)
    env.reset(seed=0)
    human = SimulatedHuman(InterventionConfig(enabled=False))
    a = np.array([0.3, -0.2, 0.1, 1.0], dtype=np.float32)
    out, acted = human(env, a)
    assert out is a and not acted and human.intervention_rate == 0.0


def test_unknown_trigger_rejected() -> None:
    with pytest.raises(ValueError, match="trigger"):
        SimulatedHuman(InterventionConfig(trigger="telepathy"))
