"""Which env an algorithm's agent acts in: the task env itself, or a residual / noise-space adapter around it.

One function for the trainer, the actor nodes, evaluation and replay, so all of them see the same agent
(`agent_env`, and `make_train_env` with the run's reward around it); and one (`env_policy`) for the deployment
node, which steps a robot in the task's own terms.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import gymnasium as gym
import torch

from robot_rl.algos.registry import algorithm
from robot_rl.algos.residual import ResidualPolicy
from robot_rl.algos.reward_classifier import ClassifierReward, RewardClassifier
from robot_rl.envs import make_env
from robot_rl.errors import UserError
from robot_rl.hardware import pick_device

if TYPE_CHECKING:
    from robot_rl.config import TrainConfig


def load_base(path: str | Path, device: torch.device | str = "cpu") -> torch.nn.Module:
    """The frozen base of a residual / DSRL agent, by what the folder holds: a `robot-rl train` checkpoint
    (config.yaml: bc, sac or residual runs) or a VLA checkpoint (`robot-rl vla-sft`'s vla.json, or a
    transformers / LeRobot pi0 config.json). Local folders only.

    A VLA loads onto `device`, in bf16 on a GPU that has it (it only acts, so no fp32 master copy is needed, and
    it halves a 3B model's memory); on CPU it stays fp32. A robot-rl checkpoint's small net stays on CPU, where
    the actor runs its own SAC copy too."""
    path = Path(path)
    if (path / "config.yaml").is_file():
        from robot_rl.checkpoint import Checkpoint

        return Checkpoint(path).policy()
    if (path / "vla.json").is_file() or (path / "config.json").is_file():
        from robot_rl.policies.vla import load_policy as load_vla  # the vla extra

        device = torch.device(device)
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()  # a VLA's size, not a critic's, decides
        return load_vla(path, device=device, dtype=torch.bfloat16 if bf16 else torch.float32)
    hint = " (a vla-sft output: pass its checkpoints/final)" if (path / "checkpoints").is_dir() else ""
    raise UserError(
        f"{path} is not a base policy folder{hint}: expected a robot-rl checkpoint (config.yaml, e.g. "
        "<run>/checkpoints/final) or a VLA checkpoint (vla.json or a pi0 config.json)"
    )


def agent_env(cfg: TrainConfig, env: gym.Env) -> gym.Env:
    """Wraps `env` in `cfg.algo`'s adapter (residual, dsrl), around its frozen base loaded with `load_base`."""
    algo = algorithm(cfg.algo)
    if algo.adapter is None:
        return env
    base = load_base(algo.base_path(cfg), pick_device(cfg.device)[0])
    reads = getattr(getattr(base, "cfg", None), "cameras", ())  # a VLA's cameras (its VLAConfig)
    if missing := [c for c in reads if c not in env.observation_space.spaces]:
        raise UserError(f"the base reads cameras {missing} the env does not render: set env.obs=pixels (or both)")
    return algo.wrap(env, base, cfg)


def env_policy(cfg: TrainConfig, agent: torch.nn.Module) -> torch.nn.Module | ResidualPolicy:
    """The policy that acts in the task's own action space: the agent itself, or a residual agent composed with
    its frozen base (`residual.base`). A DSRL agent's step is a whole chunk of env steps, so it has no per-step
    equivalent (`UserError`)."""
    algo = algorithm(cfg.algo)
    algo.check_stepwise()
    if algo.env_policy is None:
        return agent
    return algo.env_policy(load_base(algo.base_path(cfg), pick_device(cfg.device)[0]), agent, algo.options(cfg))


def make_train_env(
    cfg: TrainConfig, seed: int, clf: RewardClassifier | None = None, node_name: str = "robot_rl_actor"
) -> gym.Env:
    """The env a run's agent acts in: the task env (`make_env`) with, for reward.source=classifier, the
    classifier's verdict as the only reward and end of an episode (the sim's success no longer ends it; a robot's
    success topic is then for evaluation only), inside the algo's adapter (residual, DSRL: `agent_env`)."""
    if cfg.reward.source != "classifier":
        return agent_env(cfg, make_env(cfg.env, seed, cfg.robot, node_name))
    env_cfg = dataclasses.replace(cfg.env, terminate_on_success=False) if cfg.robot is None else cfg.env
    return agent_env(cfg, ClassifierReward(make_env(env_cfg, seed, cfg.robot, node_name), clf, cfg.reward.threshold))
