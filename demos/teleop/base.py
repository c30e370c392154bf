"""One teleop device interface: a 6-DoF delta twist + gripper, an intervene toggle and episode buttons.

Every device (SpaceMouse, gamepad, keyboard, scripted expert) produces a `DeviceCommand` per control
tick; `to_action` maps it onto the env's action convention [dx, dy, dz, (dyaw), gripper] so the
collection loop never depends on which device is plugged in.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

__all__ = ["DeviceCommand", "TeleopDevice", "PacketError", "EVENTS", "to_action", "apply_deadzone"]

EVENTS = frozenset({"success", "failure", "rerecord"})

_log = logging.getLogger(__name__)


class PacketError(ValueError):
    """A device sent bytes we cannot interpret; the poll yields a zero-motion command instead."""


@dataclass
class DeviceCommand:
    """twist: (6,) in [-1, 1] = [dx, dy, dz, droll, dpitch, dyaw]; gripper: -1 open .. +1 close."""

    twist: np.ndarray = field(default_factory=lambda: np.zeros(6, np.float32))
    gripper: float = -1.0
    intervene: bool = False
    events: frozenset[str] = frozenset()


@runtime_checkable
class TeleopDevice(Protocol):
    """What the collection loop needs from an input device."""

    name: str
    source: str  # meta["source"] of episodes this device drives: "teleop" or "scripted"

    def reset(self) -> None:
        """Start of an episode: clear latched buttons (toggles like intervene persist by design)."""

    def poll(self, env: gym.Env) -> DeviceCommand:
        """Latest command; never blocks longer than a control tick and never raises for bad input."""

    def close(self) -> None:
        """Release the hardware / restore the terminal."""


def to_action(cmd: DeviceCommand, action_dim: int) -> np.ndarray:
    """[dx, dy, dz, gripper] or, for 5-D yaw envs, [dx, dy, dz, dyaw, gripper]."""
    if action_dim not in (4, 5):
        raise ValueError(f"teleop supports 4-D or 5-D delta actions, got action_dim={action_dim}")
    t = np.clip(np.asarray(cmd.twist, np.float32), -1.0, 1.0)
    parts = [t[:3], t[5:6]] if action_dim == 5 else [t[:3]]
    return np.concatenate([*parts, np.float32([np.clip(cmd.gripper, -1.0, 1.0)])]).astype(np.float32)


def apply_deadzone(x: np.ndarray, deadzone: float) -> np.ndarray:
    """Zero small values and rescale the rest so output is continuous at the deadzone edge."""
    mag = np.abs(x)
    out = np.where(mag <= deadzone, 0.0, np.sign(x) * (mag - deadzone) / max(1e-9, 1.0 - deadzone))
    return np.clip(out, -1.0, 1.0).astype(np.float32)


def log_bad_packet(device: str, err: Exception) -> None:
    _log.warning("%s: dropped malformed input (%s); sending zero motion", device, err)
