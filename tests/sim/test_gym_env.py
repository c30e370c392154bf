"""Foreign gymnasium envs through make_env (sim=gym): observation / action / success mapping, refusals, and a short
training run plus eval on one, with an env registered here (gym-hil's own test needs the optional extra)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from robot_rl.envs import make_env
from robot_rl.sim.config import EnvConfig
from robot_rl.sim.gym_env import GymConfig, NoPrivilegedState


class NestedReach(gym.Env):
    """A point reaching a goal, with gym-hil's shape of API: nested observation dict, camera dict, narrow action
    bounds, success under info["succeed"]."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict(
            {
                "agent": gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32)}),
                "goal": gym.spaces.Box(-1, 1, (2,), np.float32),
                "pixels": gym.spaces.Dict({"top": gym.spaces.Box(0, 255, (24, 24, 3), np.uint8)}),
            }
        )
        self.action_space = gym.spaces.Box(-0.2, 0.2, (2,), np.float32)

    def _obs(self) -> dict:
        img = np.zeros((24, 24, 3), np.uint8)
        img[..., 0] = np.uint8(127 * (self.pos[0] + 1))
        return {"agent": {"pos": self.pos.copy()}, "goal": self.goal.copy(), "pixels": {"top": img}}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-0.8, 0.8, 2).astype(np.float32)
        self.goal = self.np_random.uniform(-0.8, 0.8, 2).astype(np.float32)
        return self._obs(), {}

    def step(self, action: np.ndarray):
        self.pos = np.clip(self.pos + action, -1, 1).astype(np.float32)
        dist = float(np.linalg.norm(self.goal - self.pos))
        succeed = dist < 0.1
        return self._obs(), float(succeed), succeed, False, {"succeed": succeed}


gym.register("robot_rl_test/NestedReach-v0", entry_point=NestedReach, max_episode_steps=25)
ID = "robot_rl_test/NestedReach-v0"


def test_observation_action_and_success_mapping() -> None:
    env = make_env(EnvConfig(task=ID, sim="gym", obs="both", image_size=16, gym=GymConfig(success_key="succeed")), 3)
    assert env.unwrapped is env and set(env.observation_space.spaces) == {"state", "top"}
    obs, _ = env.reset(seed=3)
    inner = env.env.unwrapped
    assert np.array_equal(obs["state"], np.concatenate([inner.pos, inner.goal]))  # `agent.pos`, then `goal`
    assert obs["top"].shape == (16, 16, 3) and obs["top"].dtype == np.uint8
    assert env.action_space.shape == (2,) and env.action_space.high[0] == 1.0
    step = np.clip((inner.goal - inner.pos) / 0.2, -1, 1)  # full scale in ours is the env's 0.2
    before = inner.pos.copy()
    obs, _, _, _, info = env.step(step)
    assert np.allclose(inner.pos, np.clip(before + 0.2 * step, -1, 1), atol=1e-6)
    done, n = False, 1
    while not done:
        a = np.clip((inner.goal - inner.pos) / 0.2, -1, 1)
        obs, r, terminated, truncated, info = env.step(a)
        done, n = terminated or truncated, n + 1
    assert info["success"] and info["succeed"] and r == 1.0 and n < 25


def test_action_subset_and_refusals() -> None:
    cfg = GymConfig(state_keys=["goal"], action_from=[-1, 0], action_scale=[0.0, 0.1])
    env = make_env(EnvConfig(task=ID, sim="gym", gym=cfg), seed=0)
    assert env.observation_space["state"].shape == (2,) and env.action_space.shape == (1,)
    assert np.allclose(env.to_env_action(np.array([1.0])), [0.0, 0.1])
    assert "top" not in env.reset(seed=0)[0]  # obs=state: cameras left out
    with pytest.raises(NoPrivilegedState, match="demos.n_episodes=0"):
        env.sim_state()
    with pytest.raises(ValueError, match="no entry 'nope'"):
        make_env(EnvConfig(task=ID, sim="gym", gym=GymConfig(state_keys=["nope"])))
    with pytest.raises(ValueError, match="one per env dim"):
        make_env(EnvConfig(task=ID, sim="gym", gym=GymConfig(action_from=[0], action_scale=[1.0])))


@pytest.mark.slow
def test_train_and_eval_on_a_foreign_env(tmp_path: Path) -> None:
    """Zero demos, no simulated human, success from info["succeed"]; the checkpoint evaluates through make_env."""
    from robot_rl.cli import main
    from robot_rl.config import load_config
    from robot_rl.loop.run import default_run_dir
    from robot_rl.loop.trainer import train

    overrides = ["sim=gym", f"env.task={ID}", "env.gym.success_key=succeed", "loop.env_steps=100"]
    overrides += ["loop.eval_every=100", "loop.eval_episodes=2", "loop.final_eval_episodes=2", "profile=cpu"]
    overrides += ["sac.hidden=[32,32]", "sac.utd=1", "sac.batch_size=32"]  # the plumbing, not the learning
    cfg = load_config([*overrides, f"run_dir={tmp_path / 'run'}"])
    assert cfg.demos.n_episodes == 0 and not cfg.intervention.enabled
    assert "/" not in default_run_dir(cfg).name
    summary = json.loads(train(cfg).read_text())
    assert summary["env_steps"] >= 100
    ckpt = tmp_path / "run/checkpoints" / (tmp_path / "run/checkpoints/latest").read_text().strip()
    assert main(["eval", str(ckpt), "--episodes", "2"]) == 0


def test_gym_hil_panda_pick_cube() -> None:
    """The worked example (optional extra): gym-hil's PandaPickCube mapped by configs/sim/gym_hil.yaml, solved by
    ScriptedExpert through the privileged-state plug-in, with a random block."""
    pytest.importorskip("gym_hil")
    from robot_rl.config import load_config
    from robot_rl.sim.experts import ScriptedExpert

    cfg = load_config(["sim=gym_hil", "+env.gym.kwargs.random_block_position=true"])
    env, expert = make_env(cfg.env, seed=0), ScriptedExpert()
    assert env.observation_space["state"].shape == (21,) and env.action_space.shape == (4,)
    wins = 0
    for ep in range(3):
        env.reset(seed=ep)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(expert.act(env))
            done = terminated or truncated
        wins += info["success"]
    assert wins == 3


class HandsOff:
    """A teleop device nobody touches: the policy acts throughout (collect's policy-driven mode)."""

    name, source = "none", "policy"

    def reset(self) -> None: ...

    def poll(self, env: gym.Env):
        from robot_rl.demos.teleop import DeviceCommand

        return DeviceCommand(np.zeros(6, np.float32))

    def close(self) -> None: ...


def test_collect_and_replay_build_a_foreign_env_through_the_factory(tmp_path: Path) -> None:
    """Episodes recorded on a gymnasium env record how that env was built; `replay --reexecute` rebuilds it from
    the store alone (not from a task name) and reproduces the trajectory exactly."""
    from robot_rl.demos.collect import CollectConfig, collect_to_store
    from robot_rl.demos.replay import reexecute
    from robot_rl.demos.store import EpisodeStore

    env_cfg = EnvConfig(task=ID, sim="gym", gym=GymConfig(success_key="succeed"))
    cfg = CollectConfig(task=ID, env=env_cfg, obs="state", cameras=(), seed=5)

    def towards_goal(obs: dict) -> np.ndarray:
        pos, goal = obs["state"][:2], obs["state"][2:]
        return np.clip((goal - pos) / 0.2, -1, 1).astype(np.float32)

    with EpisodeStore(tmp_path / "s", "a") as store:
        stats = collect_to_store(cfg, HandsOff(), store, 2, policy=towards_goal)
        meta = store.meta(0)
    assert stats.kept == 2 and meta["env"]["sim"] == "gym" and meta["env"]["gym"]["success_key"] == "succeed"
    for i in range(2):
        out = reexecute(tmp_path / "s", i)
        assert not out["diverged"] and out["max_state_error"] == 0.0 and out["success_replayed"], out
