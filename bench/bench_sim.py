"""Env step rate next to the raw physics it wraps: how much Python and rendering add per control step.

The raw baseline steps the physics from the very states the env visited (random actions, resets included), so both
sides pay for the same contacts: a peg jammed against the block costs several times a peg held in free air.
"""

from __future__ import annotations

import mujoco
import numpy as np
from common import rates

from robot_rl.envs import make_env
from robot_rl.sim.config import EnvConfig


def random_stepper(env, rng: np.random.Generator, states: list[np.ndarray] | None = None):
    """One random-action env step per call; with `states`, each pre-step physics state is appended to it."""
    u = env.unwrapped
    spec = mujoco.mjtState.mjSTATE_INTEGRATION

    def step() -> None:
        if states is not None:
            s = np.empty(mujoco.mj_stateSize(u.model, spec))
            mujoco.mj_getState(u.model, u.data, s, spec)
            states.append(s)
        _, _, term, trunc, _ = env.step(rng.uniform(-1, 1, env.action_space.shape))
        if term or trunc:
            env.reset()

    return step


def raw_stepper(m: mujoco.MjModel, d: mujoco.MjData, n: int, states: list[np.ndarray]):
    """`mj_step(m, d, n)` from each recorded state in turn (restoring one costs ~1 us against ~200 us of physics)."""
    it = iter(states * 2)
    spec = mujoco.mjtState.mjSTATE_INTEGRATION

    def step() -> None:
        mujoco.mj_setState(m, d, next(it), spec)
        mujoco.mj_step(m, d, n)

    return step


def main(quick: bool = False) -> list[dict]:
    reps = 200 if quick else 2000
    rows = []
    for task in ("PickCube", "PegInsert"):
        env = make_env(EnvConfig(task=task), seed=0)
        u = env.unwrapped
        states: list[np.ndarray] = []
        env.reset(seed=1)
        record = random_stepper(env, np.random.default_rng(0), states)  # the timed run's states, outside the timing
        for _ in range(reps + 2):  # + rates()'s warm-up calls
            record()
        env.reset(seed=1)
        st_wall, st_cpu = rates(random_stepper(env, np.random.default_rng(0)), reps)
        raw_wall, raw_cpu = rates(raw_stepper(u.model, u.data, u.n_substeps, states), reps)
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
    rng = np.random.default_rng(0)
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
