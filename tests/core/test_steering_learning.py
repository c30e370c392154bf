"""Residual RL must raise a weak diffusion base's PickCube success (same evaluation seeds for both); DSRL must
steer a diffusion policy to the rewarded one of its modes. The full PickCube DSRL runs (~10k env steps each)
are a benchmark, `bench/run.py --only steering_runs`, not a test."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from robot_rl.algos.dsrl import DSRLConfig, NoiseEnv
from robot_rl.algos.sac import SAC, SACConfig
from robot_rl.buffers import ReplayBuffer
from robot_rl.checkpoint import Checkpoint
from robot_rl.config import load_config
from robot_rl.evaluation import evaluate, evaluate_checkpoint
from robot_rl.loop.actor import Actor
from robot_rl.loop.bc import train_bc
from robot_rl.loop.learner import Learner
from robot_rl.loop.trainer import train
from robot_rl.policies.chunked import ChunkPolicyConfig, make_chunk_policy
from robot_rl.types import Batch

pytestmark = pytest.mark.slow
EVAL = ["loop.final_eval_episodes=30", "loop.eval_episodes=10", "loop.checkpoint_every=0", "threads=1"]


@pytest.fixture(scope="module")
def weak_base(tmp_path_factory: pytest.TempPathFactory) -> dict:
    run = tmp_path_factory.mktemp("bc_base")
    cfg = load_config(["algo=bc_diffusion", f"run_dir={run}", "demos.n_episodes=20", "demos.expert_noise=0.3",
                       "bc.steps=1000", "bc.eval_every=0", *EVAL])  # fmt: skip
    summary = json.loads(train_bc(cfg).read_text())
    assert summary["final_val_loss"] is not None
    return summary


def gain(summary_path: Path, base: dict) -> float:
    s = json.loads(summary_path.read_text())
    return s["final_success_rate"] - base["final_success_rate"]


def test_the_base_is_weak_but_not_useless(weak_base: dict) -> None:
    assert 0.05 <= weak_base["final_success_rate"] <= 0.7, weak_base["final_success_rate"]


def test_residual_rl_improves_on_the_base(weak_base: dict, tmp_path: Path) -> None:
    cfg = load_config(["algo=residual", f"residual.base={weak_base['checkpoint']}", f"run_dir={tmp_path}",
                       "loop.env_steps=1500", "loop.eval_every=500", "loop.stop_at_success=0.9", *EVAL])  # fmt: skip
    summary = train(cfg)
    assert gain(summary, weak_base) >= 0.25
    # `robot-rl eval` runs the saved agent inside its adapter (the base reloaded from its own folder).
    final = json.loads(summary.read_text())
    res = evaluate_checkpoint(Checkpoint(final["checkpoint"]), episodes=10, seed=1_000_000)
    assert abs(res["success_rate"] - final["evals"][-1]["success_rate"]) <= 0.3


class TargetBand(gym.Env):
    """A chunk-long task whose answer the base knows only as one mode among many: success when the executed
    action's first coordinate lands in [0.5, 0.9]. The base clones uniform actions, so which action comes out
    is decided by the diffusion noise alone -- exactly what DSRL steers."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict({"state": gym.spaces.Box(-1, 1, (3,), np.float32)})
        self.action_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        return {"state": self.np_random.uniform(-1, 1, 3).astype(np.float32)}, {}

    def step(self, action: np.ndarray):
        self._t += 1
        success = bool(0.5 <= action[0] <= 0.9)
        obs = {"state": self.np_random.uniform(-1, 1, 3).astype(np.float32)}
        return obs, float(success), success, self._t >= 2, {"success": success}


def test_dsrl_steers_a_diffusion_policy_to_the_rewarded_mode() -> None:
    torch.manual_seed(0)
    base = make_chunk_policy(ChunkPolicyConfig(horizon=4, n_obs_steps=1, n_action_steps=2), 3, 2)
    opt = torch.optim.AdamW(base.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):  # clone uniformly random chunks: a wide, noise-controlled action distribution
        actions = torch.rand(256, 4, 2, generator=gen) * 2 - 1
        loss, _ = base.compute_loss(Batch.of_windows({"state": torch.rand(256, 1, 3) * 2 - 1}, actions))
        opt.zero_grad()
        loss.backward()
        opt.step()
    env = NoiseEnv(TargetBand(), base.eval(), DSRLConfig())
    before = evaluate(env, _NoiseOf(base, env), 60).success_rate  # the base's own sampling: random noise
    evaluated = env.sim_steps
    sac = SAC(SACConfig(hidden=(64, 64), utd=4, demo_ratio=0.0), 3, env.action_space.shape[0])
    learner = Learner(sac, ReplayBuffer(4000, seed=0), ReplayBuffer(4000, seed=1), 50)
    actor = Actor(env, copy.deepcopy(sac.policy), seed=0)
    for _ in range(400):
        learner.add(actor.step())
        learner.train_to_rate_limit()
        actor.load_weights(learner.policy_weights(), learner.updates)
    # The learner's env-step count is what the env executed for its transitions (more than one per agent step).
    assert learner.sim_steps == env.sim_steps - evaluated > learner.env_steps
    after = evaluate(env, actor.policy, 60).success_rate
    assert after >= before + 0.3, (before, after)


class _NoiseOf:
    """The base acting alone through the noise env: standard normal noise, clipped to the bound."""

    def __init__(self, base: torch.nn.Module, env: NoiseEnv) -> None:
        self.rng, self.env = np.random.default_rng(0), env

    def reset(self) -> None:
        pass

    def select_action(self, obs: dict, deterministic: bool = False) -> np.ndarray:
        z = self.rng.standard_normal(self.env.action_space.shape) / self.env.cfg.noise_bound
        return np.clip(z, -1, 1).astype(np.float32)
