"""Gamepad over Linux evdev; `input_event` structs are parsed here from raw bytes so tests need no device.

struct input_event on 64-bit Linux: struct timeval (2 x long), u16 type, u16 code, s32 value = 24 bytes.
Axis values are latched per code and converted to a command at each poll; a SYN_DROPPED (the kernel
lost events) or an invalid event zeroes motion until the axes report again.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from robot_rl.demos.teleop.base import DeviceCommand, PacketError, apply_deadzone, log_bad_packet
from robot_rl.errors import UserError

EVENT = struct.Struct("llHHi")
EV_SYN, EV_KEY, EV_ABS = 0, 1, 3
EV_MAX = 0x1F
SYN_DROPPED = 3
# Xbox-style layout under the Linux gamepad API
ABS_X, ABS_Y, ABS_Z, ABS_RX, ABS_RY, ABS_RZ = 0, 1, 2, 3, 4, 5
BTN_SOUTH, BTN_EAST, BTN_NORTH, BTN_WEST, BTN_TL, BTN_TR, BTN_SELECT, BTN_START = 304, 305, 307, 308, 310, 311, 314, 315


class InputEvent(NamedTuple):
    sec: int
    usec: int
    type: int
    code: int
    value: int


class EventParser:
    """Splits a byte stream into input_events, keeping a partial struct for the next chunk."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[InputEvent]:
        self._buf += chunk
        n = len(self._buf) // EVENT.size * EVENT.size
        events = [InputEvent(*e) for e in EVENT.iter_unpack(self._buf[:n])]
        self._buf = self._buf[n:]
        return events


def check_event(ev: InputEvent) -> None:
    if ev.type > EV_MAX or ev.sec < 0 or not 0 <= ev.usec < 1_000_000:
        raise PacketError(f"invalid input_event {ev}")


@dataclass
class AxisSpec:
    """Raw range of one evdev axis, mapped to twist[index] with a sign; centred ranges map to [-1, 1]."""

    index: int
    sign: float = 1.0
    lo: int = -32768
    hi: int = 32767


@dataclass
class GamepadConfig:
    deadzone: float = 0.15
    # Left stick: x/y, right stick: z / yaw, like SERL's gamepad mapping.
    axes: dict[int, AxisSpec] = field(
        default_factory=lambda: {
            ABS_Y: AxisSpec(0, -1.0),
            ABS_X: AxisSpec(1, -1.0),
            ABS_RY: AxisSpec(2, -1.0),
            ABS_RX: AxisSpec(5, -1.0),
        }
    )
    buttons: dict[int, str] = field(
        default_factory=lambda: {
            BTN_TR: "gripper",
            BTN_TL: "intervene",
            BTN_SOUTH: "success",
            BTN_EAST: "failure",
            BTN_NORTH: "rerecord",
        }
    )


class Gamepad:
    """`read` returns whatever bytes are available (b"" or None when none)."""

    name = "gamepad"
    source = "teleop"

    def __init__(
        self,
        read: Callable[[], bytes | None],
        cfg: GamepadConfig | None = None,
        close: Callable[[], None] | None = None,
    ) -> None:
        self.cfg = cfg or GamepadConfig()
        self._read = read
        self._close = close
        self._parser = EventParser()
        self._raw = np.zeros(6, np.float32)
        self._cmd = DeviceCommand()
        self.bad_events = 0

    def reset(self) -> None:
        self._cmd = DeviceCommand(gripper=self._cmd.gripper, intervene=self._cmd.intervene)

    def feed(self, chunk: bytes) -> None:
        for ev in self._parser.feed(chunk):
            try:
                check_event(ev)
            except PacketError as e:
                self.bad_events += 1
                self._raw[:] = 0.0
                log_bad_packet(self.name, e)
                continue
            if ev.type == EV_SYN and ev.code == SYN_DROPPED:
                self._raw[:] = 0.0
            elif ev.type == EV_ABS and ev.code in self.cfg.axes:
                spec = self.cfg.axes[ev.code]
                mid, half = (spec.hi + spec.lo) / 2.0, max(1e-9, (spec.hi - spec.lo) / 2.0)
                self._raw[spec.index] = spec.sign * np.clip((ev.value - mid) / half, -1.0, 1.0)
            elif ev.type == EV_KEY and ev.value == 1 and ev.code in self.cfg.buttons:
                self._press(self.cfg.buttons[ev.code])

    def _press(self, what: str) -> None:
        c = self._cmd
        if what == "gripper":
            c.gripper = -c.gripper
        elif what == "intervene":
            c.intervene = not c.intervene
        else:
            c.events = c.events | {what}

    def poll(self, env: gym.Env | None = None) -> DeviceCommand:
        while chunk := self._read():
            self.feed(chunk)
        twist = apply_deadzone(self._raw, self.cfg.deadzone)
        out = DeviceCommand(twist, self._cmd.gripper, self._cmd.intervene, self._cmd.events)
        self._cmd.events = frozenset()
        return out

    def close(self) -> None:
        if self._close is not None:
            self._close()


def open_gamepad(path: str | None = None, cfg: GamepadConfig | None = None) -> Gamepad:
    """Open /dev/input/eventN (found with evdev when no path is given) and read it non-blocking."""
    if path is None:
        try:
            import evdev
        except ImportError as e:
            raise UserError("--teleop gamepad needs the 'evdev' package: pip install -e '.[teleop]'") from e
        for p in evdev.list_devices():
            caps = evdev.InputDevice(p).capabilities()
            if BTN_SOUTH in caps.get(EV_KEY, []):
                path = p
                break
        else:
            raise UserError("no gamepad found under /dev/input (plugged in? is this user in group 'input'?)")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)

    def read() -> bytes | None:
        try:
            return os.read(fd, EVENT.size * 64)
        except BlockingIOError:
            return None

    return Gamepad(read, cfg, close=lambda: os.close(fd))
