"""Device parsers on synthetic byte streams, including malformed input, and the action mapping."""

from __future__ import annotations

import logging
import struct

import numpy as np
import pytest

from robot_rl.demos.teleop import DeviceCommand, PacketError, ScriptedDevice, to_action
from robot_rl.demos.teleop.gamepad import (
    ABS_RX,
    ABS_X,
    ABS_Y,
    BTN_SOUTH,
    BTN_TR,
    EV_ABS,
    EV_KEY,
    EV_SYN,
    EVENT,
    EventParser,
    Gamepad,
)
from robot_rl.demos.teleop.keyboard import Keyboard, parse_keys
from robot_rl.demos.teleop.spacemouse import SpaceMouse, SpaceMouseConfig, parse_report
from robot_rl.envs import make_env
from robot_rl.sim import EnvConfig, ScriptedExpert


def _queue(items: list[bytes]):
    items = list(items)
    return lambda: items.pop(0) if items else None


def sm_trans(x: int, y: int, z: int) -> bytes:
    return bytes([1]) + struct.pack("<3h", x, y, z)


def sm_rot(a: int, b: int, c: int) -> bytes:
    return bytes([2]) + struct.pack("<3h", a, b, c)


def test_spacemouse_reports_parse() -> None:
    assert np.array_equal(parse_report(sm_trans(10, -20, 350)).translation, [10, -20, 350])
    assert np.array_equal(parse_report(sm_rot(-1, 2, -3)).rotation, [-1, 2, -3])
    six = parse_report(bytes([1]) + struct.pack("<6h", 1, 2, 3, 4, 5, 6))
    assert np.array_equal(six.translation, [1, 2, 3]) and np.array_equal(six.rotation, [4, 5, 6])
    assert parse_report(bytes([3, 0b10, 0])).buttons == 2


@pytest.mark.parametrize("bad", [b"", bytes([1, 0, 0]), bytes([2]), bytes([9, 1, 2, 3, 4, 5, 6]), bytes([3])])
def test_spacemouse_malformed_reports_raise(bad: bytes) -> None:
    with pytest.raises(PacketError):
        parse_report(bad)


def test_spacemouse_axis_mapping_deadzone_and_scaling() -> None:
    cfg = SpaceMouseConfig(deadzone=0.1, scale=(0.5, 1, 1, 1, 1, 1))
    dev = SpaceMouse(_queue([sm_trans(0, -350, -350), sm_rot(0, 0, 20)]), cfg)
    cmd = dev.poll()
    # device -y is robot +x (scaled by 0.5), device -z is robot +z; a 20/350 twist is inside the deadzone
    assert cmd.twist[0] == pytest.approx(0.5) and cmd.twist[2] == pytest.approx(1.0)
    assert cmd.twist[1] == 0.0 and cmd.twist[5] == 0.0


def test_spacemouse_malformed_packet_stops_motion_and_loop_continues(caplog: pytest.LogCaptureFixture) -> None:
    dev = SpaceMouse(_queue([sm_trans(0, -350, 0)]))
    assert dev.poll().twist[0] > 0.9
    dev._read = _queue([b"\x07garbage", bytes([1, 5])])  # unknown id, truncated report
    with caplog.at_level(logging.WARNING):
        cmd = dev.poll()
    assert np.all(cmd.twist == 0.0) and dev.bad_packets == 2
    assert "malformed" in caplog.text
    dev._read = _queue([sm_trans(0, 350, 0)])  # a good packet after the bad ones is used again
    assert dev.poll().twist[0] < -0.9


def test_spacemouse_buttons_toggle_on_press_edges() -> None:
    cfg = SpaceMouseConfig(buttons={0: "gripper", 1: "intervene", 2: "success"})
    dev = SpaceMouse(_queue([bytes([3, 0b001, 0]), bytes([3, 0b001, 0]), bytes([3, 0b110, 0])]), cfg)
    cmd = dev.poll()
    assert cmd.gripper == 1.0 and cmd.intervene and cmd.events == {"success"}
    assert dev.poll().events == frozenset()  # events are reported once


def ev(type_: int, code: int, value: int, sec: int = 1, usec: int = 0) -> bytes:
    return EVENT.pack(sec, usec, type_, code, value)


def test_gamepad_stream_split_across_reads() -> None:
    stream = ev(EV_ABS, ABS_Y, -32768) + ev(EV_ABS, ABS_X, 32767) + ev(EV_KEY, BTN_TR, 1) + ev(EV_SYN, 0, 0)
    chunks = [stream[:7], stream[7:50], stream[50:]]
    pad = Gamepad(_queue(chunks))
    cmd = pad.poll()
    assert cmd.twist[0] == pytest.approx(1.0) and cmd.twist[1] == pytest.approx(-1.0, abs=1e-4)
    assert cmd.gripper == 1.0


def test_gamepad_parser_keeps_partial_struct() -> None:
    p = EventParser()
    data = ev(EV_KEY, BTN_SOUTH, 1)
    assert p.feed(data[:10]) == []
    (e,) = p.feed(data[10:])
    assert (e.type, e.code, e.value) == (EV_KEY, BTN_SOUTH, 1)


def test_gamepad_malformed_event_zeroes_motion(caplog: pytest.LogCaptureFixture) -> None:
    pad = Gamepad(_queue([ev(EV_ABS, ABS_RX, 32767)]))
    assert abs(pad.poll().twist[5]) > 0.9
    pad._read = _queue([ev(0x7F, 0, 0), ev(EV_ABS, 0, 0, usec=5_000_000)])
    with caplog.at_level(logging.WARNING):
        cmd = pad.poll()
    assert np.all(cmd.twist == 0) and pad.bad_events == 2
    pad._read = _queue([ev(EV_SYN, 3, 0)])  # SYN_DROPPED also stops motion
    assert np.all(pad.poll().twist == 0)
    pad._read = _queue([ev(EV_KEY, BTN_SOUTH, 1)])
    assert pad.poll().events == {"success"}


def test_keyboard_parse_and_hold() -> None:
    assert parse_keys(b"w\x1b[A \x1b[Z\x1bq") == ["w", "up", "space", "q"]
    now = [0.0]
    kb = Keyboard(_queue([b"wwa\x1b[A", b"i"]), clock=lambda: now[0])
    cmd = kb.poll()
    assert list(cmd.twist[:3]) == [1.0, 1.0, 1.0] and cmd.intervene
    now[0] = 1.0  # keys not repeated for longer than hold_s count as released
    assert np.all(kb.poll().twist == 0)
    kb._read = _queue([b"y"])
    assert kb.poll().events == {"success"}


def test_to_action_matches_env_convention() -> None:
    cmd = DeviceCommand(np.array([0.1, 0.2, 2.0, 0.0, 0.0, -0.5], np.float32), gripper=1.0)
    assert np.allclose(to_action(cmd, 4), [0.1, 0.2, 1.0, 1.0])
    assert np.allclose(to_action(cmd, 5), [0.1, 0.2, 1.0, -0.5, 1.0])
    with pytest.raises(ValueError):
        to_action(cmd, 7)


def test_scripted_device_reproduces_expert_actions() -> None:
    env = make_env(EnvConfig(task="PickCube"), seed=0)
    env.reset(seed=3)
    a = ScriptedExpert().act(env)
    assert np.allclose(to_action(ScriptedDevice().poll(env), 4), a)


def test_the_simulated_operator_steps_in_at_once_at_a_jam() -> None:
    """The peg pressed on the block beside the hole is a jam: the operator takes over at that poll, as a person
    who sees one does, with no `patience` steps first; the peg going into the hole is no jam."""
    from robot_rl.demos.teleop.simulated import PEG_HALF_LENGTH, SimulatedOperator
    from robot_rl.real.scene import Sight
    from robot_rl.sim.envs import PEG_BELOW_TCP
    from robot_rl.sim.experts import InterventionConfig

    hole = np.array([0.5, 0.0, 0.05])

    def state(offset_xy: float, bottom_above_hole: float) -> dict:
        peg = hole + [offset_xy, 0.0, bottom_above_hole + PEG_HALF_LENGTH]
        sight = Sight(peg, False, fixture_pos=hole)
        return SimulatedOperator._peg_state(peg + [0.0, 0.0, PEG_BELOW_TCP], sight)

    assert state(0.006, 0.0005)["jammed"] and not state(0.0005, -0.01)["jammed"] and not state(0.006, 0.02)["jammed"]
    op = SimulatedOperator(eyes=None, cfg=InterventionConfig(trigger="no_progress", patience=5), seed=0)
    assert not op._watch(0.05, True, False)  # the first poll only sets the baseline
    assert op._watch(0.05, True, False, jammed=True)  # no progress for one step, but a jam: at once
