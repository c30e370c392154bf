"""Residual RL and DSRL adapters around the stock SAC learner: step 0, frozen bases, noise bounds, conversions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from frozen_base import run_and_check_base_frozen
from omegaconf import OmegaConf

from robot_rl.algos.dsrl import DSRLConfig, NoiseEnv
from robot_rl.algos.residual import ResidualConfig, ResidualEnv, ResidualPolicy
from robot_rl.algos.sac import SACConfig, make_policy
from robot_rl.checkpoint import save_checkpoint
from robot_rl.config import TrainConfig, load_config
from robot_rl.envs import make_env
from robot_rl.errors import UserError
from robot_rl.loop.adapters import env_policy
from robot_rl.loop.bc import BCState
from robot_rl.policies.chunked import ChunkPolicyConfig, make_chunk_policy
from robot_rl.sim.config import EnvConfig
from robot_rl.types import ObsLayout


def chunk_base(seed: int = 0):
    torch.manual_seed(seed)
    env = make_env(EnvConfig())
    state_dim = ObsLayout.of_env(env).state_dim
    return make_chunk_policy(ChunkPolicyConfig(), state_dim, env.action_space.shape[0]).eval()


@pytest.fixture(scope="module")
def base_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained diffusion policy saved the way `algo=bc_diffusion` saves one."""
    root = tmp_path_factory.mktemp("base") / "checkpoints"
    cfg_yaml = OmegaConf.to_yaml(OmegaConf.structured(TrainConfig(algo="bc")))
    counters = {"env_steps": 0, "updates": 0, "episodes": 0, "wall_clock_s": 0.0}
    return save_checkpoint(root, "final", BCState(chunk_base()), {}, counters, cfg_yaml)


def test_residual_step_zero_executes_exactly_the_base_action() -> None:
    env = ResidualEnv(make_env(EnvConfig(), seed=0), chunk_base(), ResidualConfig(scale=0.3))
    state_dim = ObsLayout.of_env(env).state_dim
    agent = make_policy(SACConfig(zero_init_actor=True), state_dim, env.action_space.shape[0])
    obs, _ = env.reset(seed=3)
    assert np.array_equal(obs["state"][-4:], env.base_action)  # the base action is part of what is stored
    for _ in range(6):
        base = env.base_action.copy()
        obs, _, _, _, info = env.step(agent.select_action(obs, deterministic=True))
        np.testing.assert_array_equal(info["executed_action"], np.clip(base, -1, 1))


def test_deployed_residual_policy_acts_as_the_agent_did_inside_its_env() -> None:
    cfg = ResidualConfig(scale=0.5)
    env = ResidualEnv(make_env(EnvConfig(), seed=0), chunk_base(seed=1), cfg)
    state_dim = ObsLayout.of_env(env).state_dim
    torch.manual_seed(0)
    agent = make_policy(SACConfig(), state_dim, env.action_space.shape[0])  # random init: residuals are not 0
    deployed = ResidualPolicy(chunk_base(seed=1), agent, cfg)  # its own copy of the same base, as deploy loads it
    robot = make_env(EnvConfig(), seed=0)
    obs, _ = env.reset(seed=5)
    robot_obs, _ = robot.reset(seed=5)
    deployed.reset()
    corrected = 0
    for _ in range(12):
        action = deployed.select_action(robot_obs)
        obs, _, _, _, info = env.step(agent.select_action(obs, deterministic=True))
        np.testing.assert_allclose(action, info["executed_action"], atol=1e-6)
        corrected += bool(np.abs(action - np.clip(info["base_action"], -1, 1)).max() > 1e-3)
        robot_obs, *_ = robot.step(action)
    assert corrected > 0


def test_dsrl_agents_are_refused_for_step_by_step_deployment() -> None:
    with pytest.raises(UserError, match="whole action chunk"):
        env_policy(TrainConfig(algo="dsrl"), chunk_base())


def test_residual_maps_human_actions_and_demos_into_residuals() -> None:
    env = ResidualEnv(make_env(EnvConfig(), seed=0), chunk_base(), ResidualConfig(scale=0.5))
    env.reset(seed=1)
    human = np.clip(env.base_action + np.array([0.2, -0.1, 0.05, 0.3]), -1, 1)
    r = env.agent_action(human)
    np.testing.assert_allclose(np.clip(env.base_action + 0.5 * r, -1, 1), human, atol=1e-6)
    # A takeover beyond the residual's reach still executes exactly what the human commanded.
    far = np.where(env.base_action > 0, -1.0, 1.0).astype(np.float32)  # >= 1 away from the base: out of reach
    stored = env.take_over(far)
    assert not np.allclose(np.clip(env.base_action + 0.5 * stored, -1, 1), far)
    _, _, _, _, info = env.step(stored)
    np.testing.assert_array_equal(info["executed_action"], far)
    assert np.abs(stored).max() <= 1.0
    # A recorded episode: its residuals reproduce the recorded actions where the scale reaches them.
    from robot_rl.sim.experts import ScriptedExpert
    from robot_rl.types import Transition

    raw, expert = make_env(EnvConfig(), seed=2), ScriptedExpert(0.0, 0)
    o, _ = raw.reset(seed=2)
    episode = []
    for _ in range(10):
        a = expert.act(raw)
        o2, rew, term, trunc, _ = raw.step(a)
        episode.append(Transition(o, a, rew, o2, term, trunc or len(episode) == 9))
        o = o2
    converted = list(env.convert_episode(episode))
    assert len(converted) == 10
    for t, c, nxt in zip(episode, converted, converted[1:] + [None], strict=True):
        base = c.obs["state"][-4:]
        np.testing.assert_array_equal(c.obs["state"][:-4], t.obs["state"])
        inside = np.abs(t.action - base) <= 0.5
        np.testing.assert_allclose((base + 0.5 * c.action)[inside], t.action[inside], atol=1e-5)
        if nxt is not None:  # next_obs carries the base action the base takes there
            np.testing.assert_array_equal(c.next_obs["state"], nxt.obs["state"])


def test_dsrl_noise_stays_inside_its_bound_and_a_step_runs_one_chunk() -> None:
    base = chunk_base()
    env = NoiseEnv(make_env(EnvConfig(), seed=0), base, DSRLConfig(noise_bound=0.7))
    assert env.action_space.shape == (int(np.prod(base.noise_shape)),)
    noise = env.noise(np.full(env.action_space.shape, 5.0))  # out-of-range agent actions are clipped first
    assert noise.shape == (1, *base.noise_shape) and noise.abs().max() <= 0.7 + 1e-6
    env.reset(seed=0)
    before = env.sim_steps
    _, _, term, trunc, info = env.step(np.zeros(env.action_space.shape, np.float32))
    assert info["chunk_length"] == env.sim_steps - before == base.n_action_steps or term or trunc
    # The executed chunk is exactly the policy's chunk for that (bounded) noise.
    env.reset(seed=0)
    a = np.random.default_rng(0).uniform(-1, 1, env.action_space.shape).astype(np.float32)
    _, _, _, _, info = env.step(a)
    base.reset()
    raw = make_env(EnvConfig(), seed=0)
    o, _ = raw.reset(seed=0)
    expected = base.select_action(o, noise=env.noise(a))
    np.testing.assert_allclose(info["chunk_actions"][0], expected, atol=1e-6)


@pytest.mark.parametrize("algo", ["residual", "dsrl"])
def test_updates_never_touch_the_frozen_base(algo: str, base_ckpt: Path, tmp_path: Path) -> None:
    cfg = load_config([
        f"algo={algo}", f"{algo}.base={base_ckpt}", f"run_dir={tmp_path}", "loop.learning_starts=8",
        "demos.n_episodes=2", "sac.hidden=[32,32]", "threads=1",
    ])  # fmt: skip
    run_and_check_base_frozen(cfg, steps=30)
