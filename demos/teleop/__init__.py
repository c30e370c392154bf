"""Teleop devices behind one interface; `make_device` builds one by name (hardware imports stay lazy)."""

from __future__ import annotations

from typing import Any

from robot_rl.demos.teleop.base import EVENTS, DeviceCommand, PacketError, TeleopDevice, to_action
from robot_rl.demos.teleop.scripted import ScriptedDevice

DEVICES = ("scripted", "spacemouse", "gamepad", "keyboard", "simulated")
UNATTENDED = ("scripted", "simulated")  # devices that need no person at the terminal

__all__ = [
    "DEVICES",
    "UNATTENDED",
    "EVENTS",
    "DeviceCommand",
    "PacketError",
    "ScriptedDevice",
    "TeleopDevice",
    "make_device",
    "to_action",
]


def make_device(
    name: str, seed: int | None = None, noise_std: float = 0.0, eyes: Any = None, wander: int = 0, person: Any = None
) -> TeleopDevice:
    """`eyes`: what the simulated operator sees of the scene (`real.scene.SceneWatcher` on the sim robot); `wander`:
    its steps of showing a failure before each episode's task; `person`: its limits (a `PersonConfig`; None: an
    oracle)."""
    if name == "scripted":
        return ScriptedDevice(noise_std=noise_std, seed=seed)
    if name == "simulated":
        from robot_rl.demos.teleop.simulated import SimulatedOperator

        if eyes is None:
            raise ValueError("the simulated operator needs eyes on the scene: it runs against the sim robot only")
        return SimulatedOperator(eyes, seed=seed, wander=wander, person=person)
    if name == "spacemouse":
        from robot_rl.demos.teleop.spacemouse import open_spacemouse

        return open_spacemouse()
    if name == "gamepad":
        from robot_rl.demos.teleop.gamepad import open_gamepad

        return open_gamepad()
    if name == "keyboard":
        from robot_rl.demos.teleop.keyboard import open_terminal_keyboard

        return open_terminal_keyboard()
    raise ValueError(f"unknown device {name!r}; expected one of {DEVICES}")
