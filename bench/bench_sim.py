"""Env step rate next to the raw physics it wraps: how much Python and rendering add per control step."""

from __future__ import annotations

import mujoco
import numpy as np
from common import rates

from robot_rl.sim.envs import EnvConfig, make_env


def random_stepper(env, rng: np.random.Generator):
    def step() -> None:
        _, _, term, trunc, _ = env.step(rng.uniform(-1, 1, env.action_space.shape))
        if term or trunc:
            env.reset()

    return step


def main(quick: bool = False) -> list[dict]:
    reps = 200 if quick else 2000
    rows = []
    for task in ("PickCube", "PegInsert"):
        env = make_env(EnvConfig(task=task), seed=0)
        env.reset(seed=0)
        u = env.unwrapped
        rng = np.random.default_rng(0)
        m, d = u.model, u.data
        raw_wall, raw_cpu = rates(lambda: mujoco.mj_step(m, d, u.n_substeps), reps)  # noqa: B023

        env.reset(seed=1)
        st_wall, st_cpu = rates(random_stepper(env, rng), reps)
        rows.append(
            {"bench": f"{task} raw mj_step(m, d, {u.n_substeps})", "steps_per_s": raw_wall, "steps_per_cpu_s": raw_cpu}
        )
        rows.append(
            {
                "bench": f"{task} env.step state",
                "steps_per_s": st_wall,
                "steps_per_cpu_s": st_cpu,
                "fraction_of_raw": st_cpu / raw_cpu,
                "goal": 0.5,
            }
        )
    for size in (64, 128):
        env = make_env(EnvConfig(obs="pixels", image_size=size), seed=0)
        env.reset(seed=0)

        def step(env=env) -> None:
            _, _, term, trunc, _ = env.step(rng.uniform(-1, 1, env.action_space.shape))
            if term or trunc:
                env.reset()

        px_wall, px_cpu = rates(step, reps // 10)
        rows.append(
            {"bench": f"PickCube env.step pixels 2x{size}px", "steps_per_s": px_wall, "steps_per_cpu_s": px_cpu}
        )
        env.close()
    return rows
