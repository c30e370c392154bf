"""Keyboard teleop for a plain terminal (works over SSH, no X server): raw mode + non-blocking stdin.

Terminals report key presses (and auto-repeat) but no releases, so a motion key counts as held for
`hold_s` after its last byte; with the usual auto-repeat rate that gives continuous motion while held.
"""

from __future__ import annotations

import os
import select
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from robot_rl.demos.teleop.base import DeviceCommand

# ANSI escape sequences of arrow keys -> names
_ESCAPES = {b"\x1b[A": "up", b"\x1b[B": "down", b"\x1b[C": "right", b"\x1b[D": "left"}

_MOTION_HELP = "w/s x  a/d y  up/down z  q/e yaw"
_BUTTON_LABELS = {"gripper": "gripper", "intervene": "intervene", "success": "success", "failure": "failure",
                  "rerecord": "re-record"}  # fmt: skip


def key_help(buttons: Iterable[str], labels: dict[str, str] | None = None, cfg: KeyboardConfig | None = None) -> str:
    """The banner: motion keys and only the `buttons` that act in this command, under their `labels` (deploy calls
    the failure button E-STOP)."""
    keys = {what: key for key, what in (cfg or KeyboardConfig()).buttons.items()}
    names = {**_BUTTON_LABELS, **(labels or {})}
    return "keys: " + "  ".join([_MOTION_HELP, *(f"{keys[b]} {names[b]}" for b in buttons)])


def parse_keys(data: bytes) -> list[str]:
    """Bytes from a raw-mode terminal -> key names; unknown escape sequences are skipped, not misread."""
    keys, i = [], 0
    while i < len(data):
        if data[i] == 0x1B:
            seq = data[i : i + 3]
            if seq in _ESCAPES:
                keys.append(_ESCAPES[seq])
                i += 3
                continue
            # Unknown/partial escape sequence: skip ESC '[' and the final byte in 0x40-0x7e, if present.
            j = i + 1
            if j < len(data) and data[j] == ord("["):
                j += 1
                while j < len(data) and not 0x40 <= data[j] <= 0x7E:
                    j += 1
                j += 1
            i = j
            continue
        ch = data[i]
        keys.append("space" if ch == 0x20 else chr(ch) if 0x21 <= ch < 0x7F else f"0x{ch:02x}")
        i += 1
    return keys


@dataclass
class KeyboardConfig:
    hold_s: float = 0.15
    speed: float = 1.0
    motion: dict[str, tuple[int, float]] = field(
        default_factory=lambda: {
            "w": (0, 1.0),
            "s": (0, -1.0),
            "a": (1, 1.0),
            "d": (1, -1.0),
            "up": (2, 1.0),
            "down": (2, -1.0),
            "q": (5, 1.0),
            "e": (5, -1.0),
        }
    )
    buttons: dict[str, str] = field(
        default_factory=lambda: {
            "space": "gripper",
            "i": "intervene",
            "y": "success",
            "n": "failure",
            "r": "rerecord",
        }
    )


class Keyboard:
    """`read` returns available bytes (None when none); `clock` is injectable for tests."""

    name = "keyboard"
    source = "teleop"

    def __init__(
        self,
        read: Callable[[], bytes | None],
        cfg: KeyboardConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        close: Callable[[], None] | None = None,
    ) -> None:
        self.cfg = cfg or KeyboardConfig()
        self._read = read
        self._clock = clock
        self._close = close
        self._last: dict[str, float] = {}
        self._cmd = DeviceCommand()

    def reset(self) -> None:
        self._last.clear()
        self._cmd = DeviceCommand(gripper=self._cmd.gripper, intervene=self._cmd.intervene)

    def feed(self, data: bytes) -> None:
        now = self._clock()
        for key in parse_keys(data):
            if key in self.cfg.motion:
                self._last[key] = now
            elif (what := self.cfg.buttons.get(key)) == "gripper":
                self._cmd.gripper = -self._cmd.gripper
            elif what == "intervene":
                self._cmd.intervene = not self._cmd.intervene
            elif what is not None:
                self._cmd.events = self._cmd.events | {what}

    def poll(self, env: gym.Env | None = None) -> DeviceCommand:
        while data := self._read():
            self.feed(data)
        now = self._clock()
        twist = np.zeros(6, np.float32)
        for key, t in self._last.items():
            if now - t <= self.cfg.hold_s:
                i, sign = self.cfg.motion[key]
                twist[i] += sign * self.cfg.speed
        out = DeviceCommand(np.clip(twist, -1, 1), self._cmd.gripper, self._cmd.intervene, self._cmd.events)
        self._cmd.events = frozenset()
        return out

    def close(self) -> None:
        if self._close is not None:
            self._close()


def open_terminal_keyboard(cfg: KeyboardConfig | None = None) -> Keyboard:
    """Put stdin (a TTY) into raw mode; close() restores the saved terminal settings."""
    import termios
    import tty

    fd = sys.stdin.fileno()
    if not os.isatty(fd):
        raise RuntimeError("keyboard teleop needs an interactive terminal on stdin")
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)  # byte-at-a-time, no echo; Ctrl-C still interrupts

    def read() -> bytes | None:
        if not select.select([fd], [], [], 0)[0]:
            return None
        return os.read(fd, 1024) or None

    return Keyboard(read, cfg, close=lambda: termios.tcsetattr(fd, termios.TCSADRAIN, saved))
