"""Which env an algorithm's agent acts in: the task env itself, or a residual / noise-space adapter around it.

One function for the trainer, the actor nodes, evaluation and replay, so all of them see the same agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym

from robot_rl.algos.dsrl import NoiseEnv
from robot_rl.algos.residual import ResidualEnv

if TYPE_CHECKING:
    from robot_rl.config import TrainConfig


def agent_env(cfg: TrainConfig, env: gym.Env) -> gym.Env:
    """Wraps `env` for `cfg.algo`; residual and dsrl load their frozen base from its checkpoint folder."""
    if cfg.algo not in ("residual", "dsrl"):
        return env
    from robot_rl.checkpoint import load_policy

    base_path = cfg.residual.base if cfg.algo == "residual" else cfg.dsrl.base
    if not base_path:
        raise ValueError(f"algo={cfg.algo} needs {cfg.algo}.base=<checkpoint folder of the frozen base policy>")
    base, _ = load_policy(base_path)
    if cfg.algo == "residual":
        return ResidualEnv(env, base, cfg.residual)
    return NoiseEnv(env, base, cfg.dsrl)
