"""Every algorithm a run can train (`algo=`), each declaring its own choices in one place.

The trainer, `Checkpoint.policy`, deploy, the demo reader and the config checks ask `algorithm(cfg.algo)` instead of
testing the name, so a new algorithm is a new entry here, not a branch in six files. Entries are declarative:
classes and small functions from this layer and below; loop code (which loads a frozen base, builds the env,
runs the training) calls them with what they take.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import torch

from robot_rl.algos.dsrl import NoiseEnv
from robot_rl.algos.residual import ResidualEnv, ResidualPolicy
from robot_rl.algos.sac import make_policy
from robot_rl.errors import UserError
from robot_rl.policies.chunked import make_chunk_policy
from robot_rl.types import Transition

if TYPE_CHECKING:
    from robot_rl.config import TrainConfig


def _as_is(env: gym.Env, episode: Iterable[Transition]) -> Iterable[Transition]:
    return episode


def _residual_terms(env: gym.Env, episode: Iterable[Transition]) -> Iterable[Transition]:
    """Env-space demo actions as the residuals that, on the frozen base, execute them (`env` is the ResidualEnv)."""
    return env.convert_episode(episode)


def _no_problem(cfg: TrainConfig) -> str:
    return ""


def _dsrl_problem(cfg: TrainConfig) -> str:
    if cfg.intervention.enabled or cfg.sac.demo_ratio > 0:
        return ("algo=dsrl acts in noise space, where env-space demos and human actions have no counterpart: set "
                "intervention.enabled=false and sac.demo_ratio=0 (as configs/algo/dsrl.yaml does)")  # fmt: skip
    return ""


def _noise_dim(weights: Mapping[str, torch.Tensor]) -> int:
    """A noise-space agent's action size from its weights: the Gaussian head emits (mean, log_std) per dim."""
    head = [v for k, v in weights.items() if k.startswith("policy.head.") and v.ndim == 2]
    return head[-1].shape[0] // 2


@dataclass(frozen=True)
class Algorithm:
    name: str
    # The actor network a checkpoint holds (what eval, deploy and the actor nodes build) and the config section it
    # is built from: `make(attrgetter(policy_options)(cfg), state_dim, action_dim, cameras, image_size)`.
    make: Callable[..., torch.nn.Module]
    policy_options: str
    # Trains from the demo store alone (loop/bc.py's `train_bc`), no env steps; else the online loop
    # (loop/trainer.py's `train`).
    offline: bool = False
    # The env adapter its agent acts in, `adapter(env, base, options)`, around a frozen base whose folder is
    # `<base_options>.base`; None: the task env itself.
    adapter: Callable[[gym.Env, torch.nn.Module, Any], gym.Env] | None = None
    base_options: str = ""
    reads_demos: bool = True  # env-space demos mean something to it (DSRL's agent acts in noise space)
    # Demo episodes in the agent's terms, given its env (the adapter) and one episode of env-space transitions.
    convert_episode: Callable[[gym.Env, Iterable[Transition]], Iterable[Transition]] = _as_is
    # What acts in the task's own action space (deploy), `env_policy(base, agent, options)`; None: the agent
    # itself. `not_stepwise` says why its agent has no such per-step policy.
    env_policy: Callable[[torch.nn.Module, torch.nn.Module, Any], Any] | None = None
    not_stepwise: str = ""
    # The policy's action size from a checkpoint's weights, for checkpoints from before layout.json whose policy
    # acts in other terms than the env (None: the env's).
    action_dim_from: Callable[[Mapping[str, torch.Tensor]], int] | None = None
    # What else only it can do: `init_from` (start from another run's weights), a batched actor
    # (`loop.num_envs` > 1), a run on a robot.
    init_from: bool = False
    batched_envs: bool = False
    on_robot: bool = False
    check: Callable[[TrainConfig], str] = _no_problem  # its own cross-field rules: the problem, or ""

    def policy_config(self, cfg: TrainConfig) -> Any:
        return operator.attrgetter(self.policy_options)(cfg)

    def build_policy(
        self, cfg: TrainConfig, state_dim: int, action_dim: int, cameras: tuple[str, ...] = (), image_size: int = 64
    ) -> torch.nn.Module:
        """Its actor network, untrained, for a policy layout's sizes."""
        return self.make(self.policy_config(cfg), state_dim, action_dim, cameras, image_size)

    def options(self, cfg: TrainConfig) -> Any:
        """Its adapter's config section (`residual`, `dsrl`), or None."""
        return getattr(cfg, self.base_options) if self.base_options else None

    def base_path(self, cfg: TrainConfig) -> str:
        """The frozen base's folder, "" when it has none."""
        return self.options(cfg).base if self.base_options else ""

    def wrap(self, env: gym.Env, base: torch.nn.Module, cfg: TrainConfig) -> gym.Env:
        return self.adapter(env, base, self.options(cfg)) if self.adapter else env

    def problem(self, cfg: TrainConfig) -> str:
        """What in `cfg` it cannot run with, in one line naming the key; "" when nothing."""
        if self.base_options and not self.base_path(cfg):
            return f"algo={self.name} needs {self.base_options}.base=<checkpoint folder of the frozen base policy>"
        return self.check(cfg)

    def check_stepwise(self) -> None:
        """Raises `UserError` when its agent cannot act step by step in the task's action space (deploy)."""
        if self.not_stepwise:
            raise UserError(self.not_stepwise)


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("sac", make_policy, "sac", init_from=True, batched_envs=True, on_robot=True),
        Algorithm("bc", make_chunk_policy, "bc.policy", offline=True),
        Algorithm("residual", make_policy, "sac", adapter=ResidualEnv, base_options="residual",
                  convert_episode=_residual_terms, env_policy=ResidualPolicy),
        Algorithm("dsrl", make_policy, "sac", adapter=NoiseEnv, base_options="dsrl", reads_demos=False,
                  action_dim_from=_noise_dim, check=_dsrl_problem,
                  not_stepwise=("an algo=dsrl agent picks the noise of a whole action chunk and cannot run step by "
                                "step on a robot; deploy its base (dsrl.base) or a sac / bc / residual checkpoint")),
    )
}  # fmt: skip


def algorithm(name: str) -> Algorithm:
    """The registered algorithm `name` (`algo=` of a run's config)."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algo {name!r}: expected one of {' | '.join(ALGORITHMS)}")
    return ALGORITHMS[name]
