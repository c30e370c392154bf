"""Honest contacts: the force and penetration peaks are measured at every substep, reported in `info` and in
evaluation results, and a push past the force limit ends the episode as a safety failure."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.evaluation import rollout, summarize
from robot_rl.sim import EnvConfig, ScriptedExpert, make_env


class _ExpertPolicy:
    """The scripted expert behind the policy interface `rollout` drives."""

    def __init__(self, env) -> None:
        self.env, self.expert = env, ScriptedExpert()

    def select_action(self, obs, deterministic: bool = False) -> np.ndarray:
        return self.expert.act(self.env)

    def reset(self) -> None:
        self.expert.reset()


@pytest.mark.parametrize("task", ["PickCube", "PegInsert"])
def test_expert_stays_under_the_force_limit_without_sinking_objects(task: str) -> None:
    env = make_env(EnvConfig(task=task), seed=0)
    res = summarize([rollout(env, _ExpertPolicy(env), seed) for seed in range(10)])
    assert res.success_rate == 1.0 and res.safety_failure_rate == 0.0
    assert 0.0 < res.peak_ee_force_max < env.unwrapped.cfg.ee_force_limit
    assert 0.0 < res.peak_contact_force_max
    assert 0.0 <= res.max_penetration < 0.002


def _press_closed_fingers_on_the_cube(limit: float) -> list[dict]:
    env = make_env(EnvConfig(ee_force_limit=limit), seed=0)
    u = env.unwrapped
    env.reset(seed=0)
    for _ in range(12):  # closed fingers 6 cm above the cube
        s = u.sim_state()
        env.step(np.r_[np.clip((s["object_pos"] + [0, 0, 0.06] - s["tcp"]) / s["max_step"], -1, 1), 1.0])
    infos = []
    for _ in range(4):
        _, reward, terminated, _, info = env.step(np.array([0.0, 0.0, -1.0, 1.0]))
        infos.append({**info, "reward": reward, "terminated": terminated})
        if terminated:
            break
    return infos


def test_pressing_the_cube_into_the_table_is_a_safety_failure() -> None:
    infos = _press_closed_fingers_on_the_cube(50.0)
    last = infos[-1]
    assert last["terminated"] and last["safety_failure"] and not last["success"] and last["reward"] == 0.0
    assert last["peak_ee_force"] > 50.0 and last["max_penetration"] > 0.0
    # Without the limit the same push goes on and is measured, not hidden.
    free = _press_closed_fingers_on_the_cube(0.0)
    assert len(free) == 4 and not any(i["safety_failure"] for i in free)
    assert free[-1]["peak_ee_force"] >= last["peak_ee_force"]
