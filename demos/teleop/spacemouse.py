"""3Dconnexion SpaceMouse over HID, with the report parsing in our code so it is testable offline.

HID input reports (first byte = report id, then little-endian int16s):
  id 1: x, y, z translation (7 bytes); newer receivers send all six axes in id 1 (13 bytes)
  id 2: rx, ry, rz rotation (7 bytes)
  id 3: button bitmask (>= 2 bytes)
Raw axis values span roughly +-350.  Device axes: x right, y towards the user, z down; the default
axis map turns that into the robot base frame (x forward, y left, z up).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from robot_rl.demos.teleop.base import DeviceCommand, PacketError, apply_deadzone, log_bad_packet
from robot_rl.errors import UserError

VENDOR_IDS = (0x046D, 0x256F)  # Logitech-era and 3Dconnexion-era devices


@dataclass
class SpaceMouseConfig:
    """axis_map[i] = (device axis index 0..5, sign) feeding twist component i."""

    full_scale: float = 350.0
    deadzone: float = 0.1
    scale: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    axis_map: tuple[tuple[int, float], ...] = ((1, -1.0), (0, -1.0), (2, -1.0), (4, -1.0), (3, -1.0), (5, -1.0))
    # button bit -> action: "gripper" toggles the gripper, "intervene" toggles takeover, or an episode event
    buttons: dict[int, str] = field(default_factory=lambda: {0: "gripper", 1: "intervene"})


@dataclass
class SpaceMouseReport:
    """One parsed report: which axes it updates (None = untouched) and the button mask if present."""

    translation: np.ndarray | None = None
    rotation: np.ndarray | None = None
    buttons: int | None = None


def parse_report(packet: bytes) -> SpaceMouseReport:
    """Decode one HID input report; raises PacketError for anything malformed."""
    if not packet:
        raise PacketError("empty report")
    rid = packet[0]
    if rid in (1, 2):
        if len(packet) < 7:
            raise PacketError(f"report {rid} needs 7 bytes, got {len(packet)}")
        if rid == 1 and len(packet) >= 13:
            axes = np.array(struct.unpack_from("<6h", packet, 1), np.float32)
            return SpaceMouseReport(translation=axes[:3], rotation=axes[3:])
        axes = np.array(struct.unpack_from("<3h", packet, 1), np.float32)
        return SpaceMouseReport(translation=axes) if rid == 1 else SpaceMouseReport(rotation=axes)
    if rid == 3:
        if len(packet) < 2:
            raise PacketError("button report without payload")
        return SpaceMouseReport(buttons=int.from_bytes(packet[1:3], "little"))
    raise PacketError(f"unknown report id {rid}")


class SpaceMouse:
    """Keeps the latest axis values; buttons act on press edges.  `read` returns one report or None."""

    name = "spacemouse"
    source = "teleop"

    def __init__(
        self,
        read: Callable[[], bytes | None],
        cfg: SpaceMouseConfig | None = None,
        close: Callable[[], None] | None = None,
    ) -> None:
        self.cfg = cfg or SpaceMouseConfig()
        self._read = read
        self._close = close
        self._axes = np.zeros(6, np.float32)
        self._buttons = 0
        self._cmd = DeviceCommand()
        self.bad_packets = 0

    def reset(self) -> None:
        self._cmd = DeviceCommand(gripper=self._cmd.gripper, intervene=self._cmd.intervene)

    def feed(self, packet: bytes) -> None:
        """Apply one report; a malformed one stops motion (a stale velocity is unsafe) and is logged."""
        try:
            rep = parse_report(packet)
        except PacketError as e:
            self.bad_packets += 1
            self._axes[:] = 0.0
            log_bad_packet(self.name, e)
            return
        if rep.translation is not None:
            self._axes[:3] = rep.translation
        if rep.rotation is not None:
            self._axes[3:] = rep.rotation
        if rep.buttons is not None:
            pressed = rep.buttons & ~self._buttons
            self._buttons = rep.buttons
            for bit, what in self.cfg.buttons.items():
                if pressed >> bit & 1:
                    self._press(what)

    def _press(self, what: str) -> None:
        c = self._cmd
        if what == "gripper":
            c.gripper = -c.gripper
        elif what == "intervene":
            c.intervene = not c.intervene
        else:
            c.events = c.events | {what}

    def poll(self, env: gym.Env | None = None) -> DeviceCommand:
        """Drain pending reports, then return the command; latched events are reported once."""
        while (packet := self._read()) is not None:
            self.feed(packet)
        norm = np.clip(self._axes / self.cfg.full_scale, -1.0, 1.0)
        twist = np.array([sign * norm[i] for i, sign in self.cfg.axis_map], np.float32)
        twist = np.clip(apply_deadzone(twist, self.cfg.deadzone) * np.asarray(self.cfg.scale, np.float32), -1, 1)
        out = DeviceCommand(twist.astype(np.float32), self._cmd.gripper, self._cmd.intervene, self._cmd.events)
        self._cmd.events = frozenset()
        return out

    def close(self) -> None:
        if self._close is not None:
            self._close()


def open_spacemouse(cfg: SpaceMouseConfig | None = None, product_id: int | None = None) -> SpaceMouse:
    """First SpaceMouse found through hidapi (imported here: only machines with the device need it)."""
    try:
        import hid
    except ImportError as e:
        raise UserError("--teleop spacemouse needs the 'hidapi' package: pip install -e '.[teleop]'") from e
    for info in hid.enumerate():
        if info["vendor_id"] in VENDOR_IDS and (product_id is None or info["product_id"] == product_id):
            dev = hid.device()
            dev.open_path(info["path"])
            dev.set_nonblocking(True)
            return SpaceMouse(_nonblocking_reader(dev), cfg, close=dev.close)
    raise UserError("no 3Dconnexion SpaceMouse found over HID (plugged in? udev permissions on /dev/hidraw*?)")


def _nonblocking_reader(dev: object) -> Callable[[], bytes | None]:
    def read() -> bytes | None:
        data = dev.read(64)
        return bytes(data) if data else None

    return read
