"""Checks read the model's geometry: a resized cube on a raised table is still picked, and the env says so."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.envs import make_env
from robot_rl.evaluation import rollout
from robot_rl.sim import EnvConfig, ExpertPolicy, RandomizationConfig


def _expert_wins(env, episodes: int) -> int:
    return sum(rollout(env, ExpertPolicy(env), ep).success for ep in range(episodes))


@pytest.mark.parametrize(("height", "scale"), [(0.03, 1.0), (0.03, 1.25), (-0.02, 0.8)])
def test_resized_cube_on_a_moved_table_is_picked_and_detected(height: float, scale: float) -> None:
    rand = RandomizationConfig(table_height=(height, height), object_size_scale=(scale, scale))
    env = make_env(EnvConfig(randomization=rand), seed=0)
    u = env.unwrapped
    env.reset(seed=0)
    half = 0.02 * scale
    assert np.allclose(u.sim_state()["object_half"], half) and u.sim_state()["table_z"] == height
    for _ in range(5):  # the cube rests on the moved table (MuJoCo's cached table frame was not used)
        env.step(np.array([0.0, 0.0, 0.0, -1.0]))
    assert abs(u.data.xpos[u._obj_body, 2] - (height + half)) < 1e-3
    assert _expert_wins(env, 10) == 10


def test_raised_block_keeps_peg_insertion() -> None:
    env = make_env(EnvConfig(task="PegInsert", randomization=RandomizationConfig(table_height=(0.03, 0.03))), seed=0)
    env.reset(seed=0)
    assert abs(env.unwrapped.sim_state()["hole_top"][2] - 0.07) < 1e-6
    assert _expert_wins(env, 5) == 5
