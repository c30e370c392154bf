"""Data that crosses module boundaries: one transition from an actor, one training batch for a learner.

Shape vocabulary: B batch, Da action dim, observations are dicts of `state` (B, Ds) float32 and one
(B, H, W, 3) uint8 array per camera.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

NpObs = dict[str, np.ndarray]
TorchObs = dict[str, torch.Tensor]


class EpisodeAborted(RuntimeError):
    """The env cannot go on with this episode (a robot's e-stop, safety fault, or silence). What the episode produced
    so far stays valid, and nothing about it is terminal: a stop says nothing about the policy's task."""


@dataclass
class Transition:
    """One env step as an actor saw it. `terminated` stops bootstrapping; `truncated` only ends the episode."""

    obs: NpObs
    action: np.ndarray
    reward: float
    next_obs: NpObs
    terminated: bool
    truncated: bool
    intervened: bool = False
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@dataclass
class Batch:
    obs: TorchObs
    action: torch.Tensor  # (B, Da)
    reward: torch.Tensor  # (B,)
    next_obs: TorchObs
    terminated: torch.Tensor  # (B,) float: 1.0 where the next state is terminal
    intervened: torch.Tensor  # (B,) float
    extras: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.action.shape[0]

    @staticmethod
    def of_windows(obs: TorchObs, action: torch.Tensor) -> Batch:
        """A behaviour-cloning batch: observation windows (B, To, ...) and action chunks (B, horizon, Da)."""
        zeros = torch.zeros(action.shape[0], device=action.device)
        return Batch(obs=obs, action=action, reward=zeros, next_obs={}, terminated=zeros, intervened=zeros)

    def to(self, device: torch.device | str) -> Batch:
        def mv(d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {k: v.to(device, non_blocking=True) for k, v in d.items()}

        return Batch(
            obs=mv(self.obs),
            action=self.action.to(device, non_blocking=True),
            reward=self.reward.to(device, non_blocking=True),
            next_obs=mv(self.next_obs),
            terminated=self.terminated.to(device, non_blocking=True),
            intervened=self.intervened.to(device, non_blocking=True),
            extras=mv(self.extras),
        )

    @staticmethod
    def cat(a: Batch, b: Batch) -> Batch:
        """Concatenate two batches (the RLPD demo/online mix)."""

        def c(x: dict[str, torch.Tensor], y: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {k: torch.cat([x[k], y[k]]) for k in x.keys() & y.keys()}

        return Batch(
            obs=c(a.obs, b.obs),
            action=torch.cat([a.action, b.action]),
            reward=torch.cat([a.reward, b.reward]),
            next_obs=c(a.next_obs, b.next_obs),
            terminated=torch.cat([a.terminated, b.terminated]),
            intervened=torch.cat([a.intervened, b.intervened]),
            extras=c(a.extras, b.extras),
        )


# State fields an object tracker provides on a robot (`RobotConfig.object_pose_topic`); `*_start` fields refer to the
# object's first pose after a reset (the sim env's `obs_frame=relative`).
OBJECT_FIELDS = ("cube_pos", "cube_minus_tcp", "cube_yaw4_sin_cos", "cube_minus_start", "tcp_minus_cube_start")
# Those and the ones only a simulator provides: none of them may reach a policy trained on a robot without a tracker.
PRIVILEGED_FIELDS = (*OBJECT_FIELDS, "peg_bottom", "hole_top", "hole_minus_peg_bottom", "tcp_minus_hole_top")

# The state's `ee_force` is in units of this many newtons, clipped to +-10 units: O(1) in contact and already
# scaled, so the state normaliser (`ObsEncoder.set_state_normalization`) leaves it as it is rather than blow up the
# demos' near-zero spread.
EE_FORCE_UNIT_N = 10.0
UNSCALED_FIELDS = ("ee_force",)


def ee_force_feature(force_n: np.ndarray) -> np.ndarray:
    """The force the world exerts on the hand (N, base frame) as the policy observes it."""
    return np.clip(np.asarray(force_n, np.float64) / EE_FORCE_UNIT_N, -10.0, 10.0)


# How a state field moves when the TCP moves by `s` (`advance_view`): a cube on the table stays, the held peg moves
# with the hand.
TCP_SIGN = {"tcp_pos": 1.0, "tcp_minus_cube_start": 1.0, "tcp_minus_hole_top": 1.0, "cube_minus_tcp": -1.0,
            "peg_bottom": 1.0, "hole_minus_peg_bottom": -1.0}  # fmt: skip


def advance_view(state: np.ndarray, layout: dict[str, slice], past_actions: np.ndarray, age_steps: float,
                 gain: float, max_step: float) -> np.ndarray:  # fmt: skip
    """`state` (a view `age_steps` control steps old) with its TCP fields moved by `gain` x the commanded motion
    since: the newest `age_steps` of `past_actions` (newest first, a fractional age weighs the last one in part).

    A memoryless policy cannot carry a late view (the scripted expert on a view two steps old: 0.10 on PickCube);
    predicted forward it acts as on a fresh one. A cube is taken as still, so a held one's offset to the TCP is off
    by the shift while the view is late; training with the same prediction teaches that."""
    weights = np.clip(age_steps - np.arange(len(past_actions)), 0.0, 1.0)
    if gain == 0.0 or not weights.any():
        return state
    shift = gain * max_step * (weights @ past_actions[:, :3])
    out = state.copy()
    for name, sign in TCP_SIGN.items():
        if name in layout:
            out[layout[name]] += sign * shift
    return out
