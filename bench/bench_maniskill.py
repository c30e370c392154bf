"""ManiSkill 3 env steps/s next to our MuJoCo env: 1 and N envs, state and RGB, CPU (and GPU PhysX with CUDA).

Rates count env steps (a batch of N is N steps), at our 10 Hz control, random actions, resets when episodes end.
CPU ManiSkill 3.0 has one env per PhysX scene, so N CPU envs are N scenes stepped in turn; on GPU the N envs are
one batched ManiSkill env (`num_envs=N`).

"train loop" rows: `loop.num_envs=N` as `train` runs it (state, the machine's profile): the batched actor's
released episodes into the learner, one update per env step, weights back after each; `actor_env_steps_per_s` is
the actor alone (policy included), `env_steps_per_s` the whole loop.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch
from common import rates

from robot_rl.algos.sac import SAC
from robot_rl.buffers import ReplayBuffer
from robot_rl.config import load_config
from robot_rl.envs import make_env, make_vec_env
from robot_rl.loop.actor import VecActor
from robot_rl.loop.learner import Learner
from robot_rl.sim.config import EnvConfig
from robot_rl.sim.maniskill import ManiSkillVecEnv, vulkan_available

TASK = "PickCube-v1"


def _vec_stepper(vec: ManiSkillVecEnv, rng: np.random.Generator):
    def step() -> None:
        _, _, term, trunc, _ = vec.step(rng.uniform(-1, 1, (vec.num_envs, vec.action_dim)))
        done = np.flatnonzero(term | trunc)
        if done.size:
            vec.reset(env_idx=done)

    return step


def _row(name: str, n: int, reps: int, make, startup: bool = False) -> dict:
    t = time.perf_counter()
    vec = make()
    start_s = time.perf_counter() - t
    vec.reset(seed=0)
    wall, cpu = rates(_vec_stepper(vec, np.random.default_rng(0)), reps)
    vec.close()
    row = {"bench": name, "envs": n, "env_steps_per_s": wall * n, "env_steps_per_cpu_s": cpu * n}
    if startup:
        row["startup_s"] = start_s
    return row


def _train_loop_row(n: int, rounds: int) -> dict:
    """Timed over `rounds` episodes of every env, after one episode of the actor alone and one to warm up."""
    cfg = load_config(["sim=maniskill", f"task={TASK}", f"loop.num_envs={n}", "intervention.enabled=false"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    vec = make_vec_env(cfg.env, n)
    algo = SAC(cfg.sac, vec.state_dim, vec.action_dim).to(device)
    buffers = (ReplayBuffer(cfg.loop.buffer_capacity, seed=0), ReplayBuffer(cfg.loop.buffer_capacity, seed=1))
    learner = Learner(algo, *buffers, device)
    actor = VecActor(vec, copy.deepcopy(algo.policy).cpu(), seed=0)
    actor_rate, _ = rates(actor.step, vec.max_episode_steps, warmup=0)  # one whole episode: envs end in lockstep

    def feed(env_steps: int) -> None:
        target = learner.env_steps + env_steps
        while learner.env_steps < target:
            for i, t in actor.step():
                learner.add(t, f"env{i}")
                learner.train_to_rate_limit()
                actor.load_weights(learner.policy_weights(), learner.updates)

    episode = n * vec.max_episode_steps
    feed(episode)
    t = time.perf_counter()
    feed(rounds * episode)
    wall = time.perf_counter() - t
    vec.close()
    return {"bench": f"train loop ManiSkill {TASK} state {vec.backend}", "envs": n,
            "env_steps_per_s": rounds * episode / wall, "actor_env_steps_per_s": actor_rate * n,
            "updates": learner.updates, "utd": cfg.sac.utd}  # fmt: skip


def main(quick: bool = False, n_cpu: int = 4, n_gpu: int = 256) -> list[dict]:
    ok, why = vulkan_available()  # SAPIEN needs a Vulkan device even for state
    if not ok:
        return [{"bench": "maniskill", "skipped": why}]
    reps = 50 if quick else 300
    rows = []
    mj = make_env(EnvConfig(task="PickCube"), seed=0)
    rng = np.random.default_rng(0)

    def mj_step() -> None:
        _, _, term, trunc, _ = mj.step(rng.uniform(-1, 1, 4))
        if term or trunc:
            mj.reset()

    wall, cpu = rates(mj_step, reps * 4)
    rows.append({"bench": "MuJoCo PickCube state", "envs": 1, "env_steps_per_s": wall, "env_steps_per_cpu_s": cpu})

    obs_modes = [("state", "state", 64), ("rgb front 128px", "pixels", 128)]
    for label, obs, size in obs_modes:
        r = reps if obs == "state" else max(reps // 10, 10)
        kw = dict(obs=obs, cameras=("front",), image_size=size)
        rows.append(_row(f"ManiSkill {TASK} {label} cpu", 1, r,
                         lambda kw=kw: ManiSkillVecEnv(TASK, 1, backend="cpu", **kw), startup=True))  # fmt: skip
        rows.append(_row(f"ManiSkill {TASK} {label} cpu", n_cpu, max(r // n_cpu, 5),
                         lambda kw=kw: ManiSkillVecEnv(TASK, n_cpu, backend="cpu", **kw)))  # fmt: skip
        if torch.cuda.is_available():
            for n in (1, n_gpu):
                rows.append(_row(f"ManiSkill {TASK} {label} gpu", n, r,
                                 lambda kw=kw, n=n: ManiSkillVecEnv(TASK, n, backend="gpu", **kw),
                                 startup=True))  # fmt: skip
    for n in (1, n_cpu, *((n_gpu,) if torch.cuda.is_available() else ())):
        rows.append(_train_loop_row(n, 1 if quick else 4))
    return rows


if __name__ == "__main__":
    import sys

    quick = "--quick" in sys.argv
    for r in main(quick=quick):
        print(r)
