"""Data that crosses module boundaries: one transition from an actor, one training batch for a learner.

Shape vocabulary: B batch, Da action dim, observations are dicts of `state` (B, Ds) float32 and one
(B, H, W, 3) uint8 array per camera.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

NpObs = dict[str, np.ndarray]
TorchObs = dict[str, torch.Tensor]


class EpisodeAborted(RuntimeError):
    """The env cannot go on with this episode for a reason the policy did not cause (a robot's e-stop, a driver's
    fault, silence). What the episode produced so far stays valid, and nothing about it is terminal: the stop says
    nothing about the policy. A stop the policy caused is no abort but the env's terminal step, with
    `info["safety_failure"]`, as the sim's force limit. `void_steps`: the newest steps before this one that the
    stop voids too (an arm found not following stopped earlier); the env held them back as `unconfirmed_steps`."""

    def __init__(self, *args: object, void_steps: int = 0) -> None:
        super().__init__(*args)
        self.void_steps = void_steps


@dataclass(frozen=True)
class ObsLayout:
    """What a policy reads and emits, one description for every side of a run: the sim envs and `RobotEnv` give
    observations in it, the trainer builds networks from it and every checkpoint saves it (`layout.json`), so
    `Checkpoint.policy` and deploy need neither an env nor the simulator."""

    state: dict[str, tuple[int, int]]  # field -> (start, stop) in obs["state"], in order (sim/envs.py names them)
    cameras: tuple[str, ...] = ()
    image_size: int = 0  # pixels of each square camera frame; 0 without cameras
    crops: dict[str, tuple[int, ...]] = field(default_factory=dict)  # camera -> [top, left, h, w] a robot cut
    action_dim: int = 4
    max_step: float = 0.025  # metres of target motion per step at |action| = 1
    control_hz: float = 10.0

    @property
    def state_dim(self) -> int:
        return max((stop for _, stop in self.state.values()), default=0)

    def slices(self) -> dict[str, slice]:
        return {k: slice(a, b) for k, (a, b) in self.state.items()}

    def observation_space(self) -> gym.spaces.Dict:
        size = (self.image_size, self.image_size, 3)
        spaces = {"state": gym.spaces.Box(-np.inf, np.inf, (self.state_dim,), np.float32)}
        return gym.spaces.Dict({**spaces, **{c: gym.spaces.Box(0, 255, size, np.uint8) for c in self.cameras}})

    def differences(self, other: ObsLayout) -> list[str]:
        """What a policy built for `self` would misread in `other`: the state fields and their order, the cameras
        and their size, the action and its scale, the rate. Crops are left out: they are each cell's own cut."""
        keys = ("state", "cameras", "image_size", "action_dim", "max_step", "control_hz")
        mine, theirs = self.to_dict(), other.to_dict()
        return [f"{k} {mine[k]} vs {theirs[k]}" for k in keys if mine[k] != theirs[k]]

    def replace(self, **changes: Any) -> ObsLayout:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "state": {k: list(v) for k, v in self.state.items()},
                "cameras": list(self.cameras), "crops": {k: list(v) for k, v in self.crops.items()}}  # fmt: skip

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ObsLayout:
        return ObsLayout(
            state={k: (int(a), int(b)) for k, (a, b) in d["state"].items()},
            cameras=tuple(d.get("cameras", ())),
            image_size=int(d.get("image_size", 0)),
            crops={k: tuple(v) for k, v in d.get("crops", {}).items()},
            action_dim=int(d.get("action_dim", 4)),
            max_step=float(d.get("max_step", 0.025)),
            control_hz=float(d.get("control_hz", 10.0)),
        )

    @staticmethod
    def from_slices(fields: dict[str, slice], **rest: Any) -> ObsLayout:
        return ObsLayout(state={k: (s.start, s.stop) for k, s in fields.items()}, **rest)

    @staticmethod
    def of_env(env: gym.Env, max_step: float = 0.025, control_hz: float = 10.0) -> ObsLayout:
        """The layout of what `env` (a wrapper too) observes: its spaces, and the state fields named by the
        outermost env in its wrapper chain that has a `state_layout` (an adapter that appends to the state says so)."""
        space = env.observation_space
        cameras = tuple(k for k, s in space.spaces.items() if len(s.shape) == 3)
        e = env
        while (fields := getattr(e, "state_layout", None)) is None and isinstance(e, gym.Wrapper):
            e = e.env
        return ObsLayout.from_slices(
            fields or {"state": slice(0, space["state"].shape[0])},
            cameras=cameras,
            image_size=space[cameras[0]].shape[0] if cameras else 0,
            crops=getattr(env.unwrapped, "crops", {}),  # a sim env for a robot keeps that robot's camera crops
            action_dim=env.action_space.shape[0],
            max_step=max_step,
            control_hz=control_hz,
        )


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


# What a real cell measures without a tracker, in this order (the joint fields sized by the arm; the wrench where the
# robot has a force-torque reading): `cell_state`.
PROPRIO_FIELDS = ("tcp_pos", "ee_yaw_sin_cos", "gripper_opening", "tcp_vel", "joint_pos", "joint_vel", "ee_force")


def cell_state(joints: int, wrench: bool) -> dict[str, slice]:
    """The state a robot run observes (TCP position and yaw, gripper opening, TCP velocity, joint positions and
    velocities, `ee_force` with a wrench), in the robot's base frame. A sim camera run that names the robot
    (`env.for_robot`) observes exactly this, so its checkpoint runs on that arm unchanged."""
    sizes = {"tcp_pos": 3, "ee_yaw_sin_cos": 2, "gripper_opening": 1, "tcp_vel": 3, "joint_pos": joints,
             "joint_vel": joints, "ee_force": 3 if wrench else 0}  # fmt: skip
    return stack_fields([(name, sizes[name]) for name in PROPRIO_FIELDS if sizes[name]])


def stack_fields(parts: list[tuple[str, int]]) -> dict[str, slice]:
    """Field -> slice of `obs["state"]` for fields of these sizes laid end to end."""
    layout, start = {}, 0
    for name, n in parts:
        layout[name] = slice(start, start + n)
        start += n
    return layout


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
