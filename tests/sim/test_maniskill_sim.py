"""ManiSkill 3 through make_env: env contract, experts, batching, demos + replay, cameras, short training runs with
one env and with a batch of them (`VecActor`).

Needs the optional ManiSkill extra and a Vulkan device (SAPIEN wants one even for state); skips with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.envs import make_env
from robot_rl.sim import EnvConfig, ScriptedExpert
from robot_rl.sim.maniskill import ManiSkillVecEnv, state_layout, vulkan_available

_OK, _WHY = vulkan_available()
pytestmark = [
    pytest.mark.skipif(not _OK, reason=f"ManiSkill/SAPIEN unavailable: {_WHY}"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:mani_skill"),  # numpy 2 / logger.warn deprecations
]


def _check_obs(env, obs) -> None:
    space = env.observation_space
    assert set(obs) == set(space.spaces)
    assert space.contains(obs)


@pytest.mark.parametrize("task", ["PickCube-v1", "PushCube-v1", "PegInsertionSide-v1"])
def test_env_contract(task: str) -> None:
    env = make_env(EnvConfig(task=task, sim="maniskill", max_episode_steps=3), seed=0)
    obs, info = env.reset(seed=0)
    _check_obs(env, obs)
    assert isinstance(info["success"], bool)
    u = env.unwrapped
    assert np.allclose(obs["state"][u.state_layout["tcp_pos"]], u.sim_state()["tcp"], atol=1e-5)
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step(np.array([0.0, 0.0, 1.0, -1.0]))
        _check_obs(env, obs)
        assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
    assert truncated and not terminated  # the step limit truncates; only success terminates
    assert obs["state"][u.state_layout["tcp_vel"]][2] > 0.02  # +z moved the hand up
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(3))
    env.close()


@pytest.mark.parametrize("task", ["PickCube-v1", "PushCube-v1"])
def test_scripted_expert_solves_task(task: str) -> None:
    env = make_env(EnvConfig(task=task), seed=0)
    expert = ScriptedExpert(noise_std=0.1, seed=0)
    wins = 0
    for ep in range(3):
        env.reset(seed=100 + ep)
        for _ in range(env.unwrapped.max_episode_steps):
            _, reward, terminated, truncated, info = env.step(expert.act(env))
            if terminated or truncated:
                break
        wins += int(terminated and info["success"] and reward == 1.0)
    assert wins == 3
    env.close()


def test_batched_env_matches_single_envs() -> None:
    vec = ManiSkillVecEnv("PushCube-v1", 2, backend="cpu")
    single = make_env(EnvConfig(task="PushCube-v1"))
    obs, info = vec.reset(seed=5)
    assert obs["state"].shape == (2, vec.state_dim) and info["success"].shape == (2,)
    one, _ = single.reset(seed=6)  # env i of a batch seeded s is seeded s + i
    np.testing.assert_array_equal(obs["state"][1], one["state"])
    a = np.tile([0.3, 0.2, -0.5, 1.0], (2, 1))
    for _ in range(3):
        obs, reward, term, trunc, info = vec.step(a)
        one, *_ = single.step(a[1])
    assert reward.shape == term.shape == trunc.shape == (2,)
    np.testing.assert_allclose(obs["state"][1], one["state"], atol=1e-6)
    obs, _ = vec.reset(seed=[11], env_idx=[0])  # partial reset leaves env 1 where it was
    np.testing.assert_allclose(obs["state"][1], one["state"], atol=1e-6)
    vec.close()
    single.close()


def test_demo_collection_and_replay(tmp_path: Path) -> None:
    from robot_rl.demos.collect import CollectConfig, collect_to_store
    from robot_rl.demos.replay import reexecute
    from robot_rl.demos.store import EpisodeStore
    from robot_rl.demos.teleop.scripted import ScriptedDevice

    cfg = CollectConfig(task="PickCube-v1", obs="state", success_only=True, seed=3)
    with EpisodeStore(tmp_path / "d.zarr", "a") as store:
        stats = collect_to_store(cfg, ScriptedDevice(noise_std=0.05, seed=0), store, 2)
        assert stats.kept == 2 and store.meta(0)["task"] == "PickCube-v1"
    result = reexecute(tmp_path / "d.zarr", 1)
    assert result["success_replayed"] and not result["diverged"], result


def test_cameras_map_to_our_names() -> None:
    env = make_env(EnvConfig(task="PickCube-v1", obs="pixels", cameras=("front", "wrist"), image_size=32), seed=0)
    obs, _ = env.reset(seed=0)
    _check_obs(env, obs)
    assert set(obs) == {"state", "front", "wrist"} and "cube_pos" not in env.unwrapped.state_layout
    for cam in ("front", "wrist"):
        assert obs[cam].shape == (32, 32, 3) and obs[cam].dtype == np.uint8 and obs[cam].std() > 5.0, cam
    first = obs["wrist"]
    obs, *_ = env.step(np.array([1.0, 0.0, -1.0, -1.0]))
    assert not np.array_equal(first, obs["wrist"]), "wrist view did not change after the hand moved"
    env.close()


@pytest.mark.slow
def test_short_training_run(tmp_path: Path) -> None:
    """The main job end to end on a ManiSkill task: demos, HIL actor/learner, eval, checkpoint, summary."""
    from robot_rl.config import load_config
    from robot_rl.loop.trainer import train

    summary = train(load_config([
        "sim=maniskill", "task=PickCube-v1", f"run_dir={tmp_path}", "profile=cpu", "threads=1",
        "demos.n_episodes=1", "loop.env_steps=80", "loop.eval_every=40", "loop.eval_episodes=1",
        "loop.final_eval_episodes=1", "loop.checkpoint_every=0",
    ]))  # fmt: skip
    s = json.loads(Path(summary).read_text())
    assert s["task"] == "PickCube-v1" and s["env_steps"] == 80 and s["updates"] > 0
    assert 0.0 <= s["final_success_rate"] <= 1.0 and len(s["evals"]) == 3
    assert (Path(s["checkpoint"]) / "model.safetensors").exists()


def test_vec_actor_releases_each_envs_episodes_whole_and_in_order() -> None:
    from robot_rl.algos.sac import SACConfig, make_policy
    from robot_rl.loop.actor import VecActor

    vec = ManiSkillVecEnv("PickCube-v1", 3, backend="cpu", max_episode_steps=4)
    torch.manual_seed(0)
    actor = VecActor(vec, make_policy(SACConfig(), vec.state_dim, vec.action_dim), seed=7)
    got: dict[int, list] = {i: [] for i in range(3)}
    for step in range(9):
        ready = actor.step()
        assert len(ready) == (12 if step in (3, 7) else 0), step  # lockstep 4-step episodes: all end together
        assert [i for i, _ in ready] == sorted(i for i, _ in ready)  # env by env, each episode together
        for i, t in ready:
            got[i].append(t)
    assert actor.stats.episodes == 6 and actor.stats.steps == 27 and actor.stats.intervened_steps == 0
    for ts in got.values():
        assert [t.truncated for t in ts] == [False, False, False, True] * 2 and not any(t.terminated for t in ts)
        for j in (0, 1, 2, 4, 5, 6):  # within each episode
            np.testing.assert_array_equal(ts[j].next_obs["state"], ts[j + 1].obs["state"])
        assert not np.array_equal(ts[3].next_obs["state"], ts[4].obs["state"])  # reset in between
    single = make_env(EnvConfig(task="PickCube-v1"))
    one, _ = single.reset(seed=9)  # env i's first episode is seeded seed + i
    np.testing.assert_array_equal(got[2][0].obs["state"], one["state"])
    single.close()
    vec.close()


def test_training_with_batched_envs(tmp_path: Path) -> None:
    """loop.num_envs=2: the learner gets each env's episodes whole, so every stored transition's next obs follows
    its obs in the same env, and the ring spends one slot per transition plus one per episode, as with one env."""
    from robot_rl.buffers import ReplayBuffer
    from robot_rl.config import load_config
    from robot_rl.loop.trainer import train

    cfg = load_config([
        "sim=maniskill", "task=PickCube-v1", "loop.num_envs=2", "intervention.enabled=false", f"run_dir={tmp_path}",
        "profile=cpu", "threads=1", "demos.n_episodes=1", "loop.env_steps=200", "loop.eval_every=0",
        "loop.final_eval_episodes=1", "loop.checkpoint_every=0", "loop.buffer_capacity=1000",
    ])  # fmt: skip
    s = json.loads(Path(train(cfg)).read_text())
    assert s["env_steps"] == 200 and s["updates"] == 200
    buf = ReplayBuffer(cfg.loop.buffer_capacity)
    buf.load(Path(s["checkpoint"]) / "buffer_online.npz")
    assert len(buf) == 200
    state, lay = buf.obs["state"], state_layout("PickCube-v1", False, "state")
    idx = np.flatnonzero(buf.valid)
    tcp, vel = state[:, lay["tcp_pos"]], state[:, lay["tcp_vel"]]
    # the next obs's velocity is its TCP's move from this obs: it came out of the same env one step later
    np.testing.assert_allclose(vel[idx + 1] * 0.1, tcp[idx + 1] - tcp[idx], atol=1e-5)
    starts = np.flatnonzero(buf.valid & ~np.roll(buf.valid, 1))
    assert buf.cursor == len(buf) + len(starts) and len(starts) <= 5  # step-by-step interleaving: 200 runs
    single = make_env(EnvConfig(task="PickCube-v1"))
    for env_i, start in enumerate(starts[:2]):  # env 0's first episode, then env 1's
        np.testing.assert_array_equal(state[start], single.reset(seed=cfg.seed + env_i)[0]["state"])
    single.close()
