"""Safety layer: whatever the policy says and whatever the robot reports, the command stays inside the limits."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from robot_rl.limits import REPORT_TOL, KeepOutBox, Limiter, SafetyConfig, SlowZone, quat_angle, segment_box_entry
from robot_rl.real.config import load_robot_config
from robot_rl.real.safety import FOLLOW_RATIO, FOLLOW_SLACK, FollowWatchdog, RobotState, SafetyFilter, quat_normalize

DT = 0.1
CFG = SafetyConfig(
    workspace_lo=(0.3, -0.25, 0.01),
    workspace_hi=(0.7, 0.25, 0.3),
    keep_out=[KeepOutBox(lo=(0.55, 0.05, 0.0), hi=(0.65, 0.15, 0.2))],
    slow_zones=[SlowZone(lo=(0.3, -0.25, 0.0), hi=(0.5, 0.25, 0.08), max_velocity=0.1)],
    max_translation_step=0.05,
    max_rotation_step=0.1,
    max_velocity=0.4,
    max_acceleration=3.0,
    gripper_max_delta=0.3,
    joint_lower=[-2.0, -2.0],
    joint_upper=[2.0, 2.0],
    joint_margin=0.05,
    state_timeout_s=0.2,
)
EPS = 1e-9
LO, HI = np.array(CFG.workspace_lo), np.array(CFG.workspace_hi)
BOX_LO, BOX_HI = np.array(CFG.keep_out[0].lo), np.array(CFG.keep_out[0].hi)
ZONE = CFG.slow_zones[0]

any_float = st.floats(allow_nan=True, allow_infinity=True)
coord = st.one_of(st.floats(-1.0, 1.0), any_float)
vec3 = st.tuples(coord, coord, coord).map(np.array)
quat = st.tuples(*[st.one_of(st.floats(-1, 1), any_float)] * 4).map(np.array)
near_ws = st.tuples(st.floats(0.25, 0.75), st.floats(-0.3, 0.3), st.floats(-0.05, 0.35)).map(np.array)
down = np.array([0.0, 1.0, 0.0, 0.0])
state_quat = st.one_of(st.just(down), st.tuples(*[st.floats(-1, 1)] * 4).map(np.array), quat)


@st.composite
def robot_states(draw: st.DrawFn) -> RobotState:
    return RobotState(
        tcp_pos=draw(st.one_of(near_ws, vec3)),
        tcp_quat=draw(state_quat),
        gripper=draw(st.one_of(st.floats(0, 1), any_float)),
        joint_pos=np.array(draw(st.lists(st.one_of(st.floats(-2.2, 2.2), any_float), min_size=2, max_size=2))),
        stamp=draw(st.one_of(st.floats(-0.3, 0.0), st.just(math.nan))),  # relative to now = 0 + step * DT
    )


actions = st.tuples(st.one_of(near_ws, vec3), st.one_of(st.just(down), quat), st.one_of(st.floats(-2, 2), any_float))


def check(cmd, state: RobotState, f: SafetyFilter, prev_vel: np.ndarray, prev_grip: float | None, now: float) -> None:
    assert np.isfinite(cmd.linear_vel).all() and np.isfinite(cmd.angular_vel).all()
    assert np.linalg.norm(cmd.linear_vel) <= CFG.max_velocity + EPS
    if cmd.gripper is not None:
        assert 0.0 <= cmd.gripper <= 1.0
        if prev_grip is not None:
            assert abs(cmd.gripper - prev_grip) <= CFG.gripper_max_delta + EPS
    if cmd.target_pos is None:
        assert cmd.hold and cmd.target_quat is None
        return
    tcp = np.asarray(state.tcp_pos, float)
    tol = CFG.workspace_tolerance
    assert np.isfinite(cmd.target_pos).all() and np.isfinite(cmd.target_quat).all()
    assert np.linalg.norm(cmd.target_pos - tcp) <= f.step_limit + EPS
    assert (cmd.target_pos >= LO - tol - EPS).all() and (cmd.target_pos <= HI + tol + EPS).all()
    if (tcp >= LO).all() and (tcp <= HI).all():
        assert (cmd.target_pos >= LO - EPS).all() and (cmd.target_pos <= HI + EPS).all()
    assert not ((cmd.target_pos > BOX_LO).all() and (cmd.target_pos < BOX_HI).all()), "inside keep-out box"
    # The straight path never crosses the box either: sample it.
    for t in np.linspace(0, 1, 21):
        p = tcp + t * (cmd.target_pos - tcp)
        assert not ((p > BOX_LO + EPS).all() and (p < BOX_HI - EPS).all())
    step = cmd.target_pos - tcp
    if not {"workspace", "keep_out"} & set(cmd.reasons):  # in the slow zone at its speed, up to its face at any
        t = segment_box_entry(tcp, step, np.array(ZONE.lo), np.array(ZONE.hi))
        assert t is None or t >= 1 - 1e-9 or np.linalg.norm(step) <= ZONE.max_velocity * DT + EPS
    measured = quat_normalize(state.tcp_quat)
    assert quat_angle(measured, cmd.target_quat) <= CFG.max_rotation_step + 1e-6
    assert now - state.stamp <= CFG.state_timeout_s  # a pose is only ever commanded from fresh state
    if not cmd.hold and not {"workspace", "keep_out", "slow_zone"} & set(cmd.reasons):
        accel = np.linalg.norm(cmd.linear_vel - prev_vel) / DT
        assert accel <= CFG.max_acceleration + 1e-6


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(robot_states(), actions), min_size=1, max_size=6))
def test_any_policy_output_and_robot_state_gives_a_command_inside_limits(seq) -> None:
    f = SafetyFilter(CFG, DT)
    for i, (state, (pos, q, grip)) in enumerate(seq):
        now = i * DT
        state.stamp += now
        prev_vel, prev_grip = f.prev_vel.copy(), f.prev_gripper
        cmd = f.filter(pos, q, grip, state, now)
        check(cmd, state, f, prev_vel, prev_grip, now)


inside_ws = st.tuples(st.floats(0.3, 0.7), st.floats(-0.25, 0.25), st.floats(0.01, 0.3)).map(np.array)
unit_quat = st.tuples(*[st.floats(-1, 1)] * 4).map(quat_normalize).filter(lambda q: q is not None)


Z = np.array([0.0, 0.0, 0.0, 1.0])
# Into the corner at full speed, where the workspace leaves a zero step (once a division by zero).
CORNER_PATH = [((0.5, 0, 0.25), (0.5, 0, 0)), ((0.5, 0, 0.15625), (0.25, 0, 0)), ((0.3, 0, 0.01), (0.25, 0, 0))]
CORNER = [(np.array(p), Z, np.array(t), Z, 0.0) for p, t in CORNER_PATH]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(inside_ws, unit_quat, near_ws, unit_quat, st.floats(-1, 2)), min_size=1, max_size=6))
@example(CORNER)
def test_a_command_the_limits_shaped_passes_the_filter_uncut(seq) -> None:
    """What the `Limiter` commands (a sim run inside a robot's limits), the robot's filter passes as it is, from
    the same measured state: no reasons, the same target and gripper. Re-limiting rounds, it never cuts. This holds
    where the arm may stop within one step (max_acceleration * dt >= the step's speed limit), as on every shipped
    robot; otherwise a workspace stop outranks the acceleration limit and is cut again."""
    cfg = dataclasses.replace(CFG, max_acceleration=4.0)  # stops within one step: a * dt = 0.4 m/s = max_velocity
    limiter, f = Limiter(cfg, DT), SafetyFilter(cfg, DT)
    for i, (pos, quat, target, target_quat, grip) in enumerate(seq):
        if (pos > BOX_LO).all() and (pos < BOX_HI).all():
            continue  # a TCP inside a keep-out box is a fault, not a command
        delta, q, _ = limiter.pose(pos, quat, target, target_quat)
        g = limiter.gripper(grip, 0.7)
        cmd = f.filter(pos + delta, q, g, RobotState(pos, quat, 0.7, np.zeros(2), i * DT), i * DT)
        assert not cmd.hold and cmd.reasons == ()
        assert np.allclose(cmd.target_pos, pos + delta, rtol=0, atol=REPORT_TOL) and cmd.gripper == g
        assert quat_angle(cmd.target_quat, q) < 1e-6


def good_state(pos=(0.5, 0.0, 0.15), stamp: float = 0.0) -> RobotState:
    return RobotState(np.array(pos), down.copy(), 1.0, np.zeros(2), stamp)


def test_nan_action_holds_for_one_step_only() -> None:
    f = SafetyFilter(CFG, DT)
    cmd = f.filter(np.array([np.nan, 0.5, 0.1]), down, 0.5, good_state(), 0.0)
    assert cmd.hold and cmd.reasons == ("non_finite_action",) and np.allclose(cmd.target_pos, [0.5, 0.0, 0.15])
    assert f.latched is None and f.rejected == 1
    cmd = f.filter(np.array([0.52, 0.0, 0.15]), down, 0.5, good_state(stamp=0.1), 0.1)
    assert not cmd.hold and np.allclose(cmd.target_pos, [0.52, 0.0, 0.15])


def test_workspace_clamp_and_step_limit() -> None:
    f = SafetyFilter(CFG, DT)
    cmd = f.filter(np.array([0.5, 0.0, -5.0]), down, 1.0, good_state(pos=(0.5, 0.0, 0.02)), 0.0)
    assert cmd.target_pos[2] == CFG.workspace_lo[2] and "workspace" in cmd.reasons
    f = SafetyFilter(dataclasses.replace(CFG, max_acceleration=100.0), DT)
    cmd = f.filter(np.array([5.0, 0.0, 0.15]), down, 1.0, good_state(), 0.0)
    assert math.isclose(np.linalg.norm(cmd.target_pos - [0.5, 0.0, 0.15]), f.step_limit)
    # From rest the acceleration clamp is the tighter one.
    f = SafetyFilter(CFG, DT)
    cmd = f.filter(np.array([5.0, 0.0, 0.15]), down, 1.0, good_state(), 0.0)
    assert math.isclose(np.linalg.norm(cmd.target_pos - [0.5, 0.0, 0.15]), CFG.max_acceleration * DT * DT)


def test_stale_state_latches_until_reset_and_commands_no_pose() -> None:
    f = SafetyFilter(CFG, DT)
    assert not f.filter(np.array([0.5, 0.0, 0.16]), down, 1.0, good_state(), 0.0).hold
    cmd = f.filter(np.array([0.5, 0.0, 0.16]), down, 1.0, good_state(stamp=0.0), 0.5)
    assert cmd.hold and cmd.target_pos is None and f.latched.startswith("stale_state")
    assert f.watchdog.misses == 1
    # Fresh state again: still latched (a human must acknowledge), the hold now targets the measured pose.
    cmd = f.filter(np.array([0.5, 0.0, 0.16]), down, 1.0, good_state(stamp=0.6), 0.6)
    assert cmd.hold and np.allclose(cmd.target_pos, [0.5, 0.0, 0.15])
    f.reset()
    assert not f.filter(np.array([0.5, 0.0, 0.16]), down, 1.0, good_state(stamp=0.7), 0.7).hold


def test_action_watchdog_and_estop_latch() -> None:
    f = SafetyFilter(CFG, DT)
    w = f.watchdog
    w.feed_action(0.0)
    assert w.check(0.4) and not w.check(0.6) and w.latched.startswith("no_action")
    assert not w.check(0.7) and w.misses == 1  # one miss per latch, not per poll
    f.reset()
    f.estop("teleop button")
    cmd = f.filter(np.array([0.5, 0.0, 0.16]), down, 1.0, good_state(), 0.0)
    assert cmd.hold and f.latched == "teleop button"
    f.reset()
    assert not f.filter(np.array([0.5, 0.0, 0.16]), down, 1.0, good_state(), 0.0).hold


def test_joint_near_limit_and_tcp_outside_workspace_are_latched_faults() -> None:
    f = SafetyFilter(CFG, DT)
    s = good_state()
    s.joint_pos = np.array([1.97, 0.0])
    cmd = f.filter(np.array([0.5, 0.0, 0.16]), down, 1.0, s, 0.0)
    assert cmd.hold and f.latched.startswith("joint_limit")
    f.reset()
    cmd = f.filter(np.array([0.5, 0.0, 0.16]), down, 1.0, good_state(pos=(0.5, 0.0, 0.5)), 0.0)
    assert cmd.hold and cmd.target_pos is None and f.latched.startswith("tcp_outside_workspace")


def test_keep_out_box_stops_before_entering() -> None:
    f = SafetyFilter(CFG, DT)
    cmd = f.filter(np.array([0.6, 0.1, 0.15]), down, 1.0, good_state(pos=(0.6, 0.02, 0.15)), 0.0)
    assert "keep_out" in cmd.reasons and cmd.target_pos[1] < BOX_LO[1]


def test_slow_zone_full_speed_to_its_face_then_its_speed() -> None:
    f = SafetyFilter(CFG, DT)
    above = f.filter(np.array([0.45, 0.0, 0.0]), down, 1.0, good_state(pos=(0.45, 0.0, 0.1)), 0.0)
    assert "slow_zone" in above.reasons and above.target_pos[2] == pytest.approx(ZONE.hi[2])  # 2 cm at 0.2 m/s
    f.reset()
    inside = f.filter(np.array([0.45, 0.0, 0.0]), down, 1.0, good_state(pos=(0.45, 0.0, 0.06)), 0.0)
    assert inside.target_pos[2] == pytest.approx(0.06 - ZONE.max_velocity * DT)
    f.reset()
    beside = f.filter(np.array([0.59, -0.1, 0.06]), down, 1.0, good_state(pos=(0.56, -0.1, 0.06)), 0.0)
    assert "slow_zone" not in beside.reasons and beside.target_pos[0] == pytest.approx(0.59)


def test_a_slower_zone_inside_a_zone_sets_the_speed_from_its_face() -> None:
    """The PegInsert cell's nesting: 0.15 m/s near the block, 0.1 m/s in its last centimetre (the landing speed)."""
    band = [SlowZone(lo=(0.3, -0.25, 0.0), hi=(0.5, 0.25, z), max_velocity=v) for z, v in ((0.125, 0.15), (0.11, 0.1))]
    f = SafetyFilter(dataclasses.replace(CFG, slow_zones=band), DT)
    for z, lands in ((0.13, 0.115), (0.115, 0.105), (0.105, 0.095)):
        f.reset()
        cmd = f.filter(np.array([0.45, 0.0, 0.0]), down, 1.0, good_state(pos=(0.45, 0.0, z)), 0.0)
        assert "slow_zone" in cmd.reasons and cmd.target_pos[2] == pytest.approx(lands)
    f.reset()
    above = f.filter(np.array([0.3, 0.0, 0.12]), down, 1.0, good_state(pos=(0.45, 0.0, 0.12)), 0.0)
    assert above.target_pos[0] == pytest.approx(0.45 - 0.015)  # sideways above the band: the outer zone's speed


def test_slow_zones_load_from_a_robot_config_and_bad_ones_are_refused() -> None:
    zone = "safety.slow_zones=[{lo: [0.4, -0.15, 0.0], hi: [0.66, 0.15, 0.125], max_velocity: 0.1}]"
    cfg = load_robot_config("sim", [zone])
    assert cfg.safety.slow_zones[0].hi[2] == 0.125 and cfg.safety.slow_zones[0].max_velocity == 0.1
    with pytest.raises(ValueError, match="slow_zones"):
        load_robot_config("sim", [zone.replace("0.125", "-0.1")])


def test_follow_watchdog_fires_after_a_window_of_commands_the_arm_did_not_follow() -> None:
    dog = FollowWatchdog(window=3, tolerance=0.03, contact_n=10.0)
    assert [dog.update(0.02, 0.0, 0.0) for _ in range(2)] == [None, None] and dog.unconfirmed == 2 + FOLLOW_SLACK
    assert dog.update(0.02, 0.001, 0.0) == "not_following: commanded 60 mm over 3 steps, moved 1.0 mm"


@pytest.mark.parametrize(
    ("commanded", "moved", "force_n", "why"),
    [
        (0.0, 0.0, 0.0, "a hold, a workspace clip to nothing, a gripper-only action: nothing was asked"),
        (0.009, 0.0, 0.0, "under tolerance / window: the policy asks for ~0 motion"),
        (0.02, FOLLOW_RATIO * 0.02, 0.0, "the arm followed a fifth of it: lagging, not stopped"),
        (0.02, 0.0, 12.0, "pressed into something: a stall in contact is legitimate"),
    ],
)
def test_follow_watchdog_never_counts_a_step_that_asked_nothing_moved_or_touched(commanded, moved, force_n, why):
    dog = FollowWatchdog(window=3, tolerance=0.03, contact_n=10.0)
    dog.update(0.02, 0.0, 0.0)
    dog.update(0.02, 0.0, 0.0)
    assert dog.update(commanded, moved, force_n) is None and dog.unconfirmed == FOLLOW_SLACK, why
    off = FollowWatchdog(0, 0.0, 0.0)
    assert off.update(1.0, 0.0, 0.0) is None and off.unconfirmed == 0


def test_follow_keys_load_from_a_robot_config_and_bad_ones_are_refused() -> None:
    cfg = load_robot_config("sim", ["follow_window=4", "follow_tolerance_m=0.02"])
    assert (cfg.follow_window, cfg.follow_tolerance_m, cfg.follow_contact_n) == (4, 0.02, 3.0)
    for bad in ("follow_window=1", "follow_window=-1", "follow_tolerance_m=-0.1", "follow_contact_n=-1"):
        with pytest.raises(ValueError, match="follow_"):
            load_robot_config("sim", [bad])


@pytest.mark.parametrize("servo", [True, False])
def test_twists_to_a_lagging_servo_arm_stop_at_the_workspace_face(servo: bool) -> None:
    """MoveIt Servo integrates each twist from its own last command, which leads a moving arm by its tracking lag.
    Driven at full speed into the workspace's face, a filter that knows it is talking to a servo stops servo's
    command at the face; one that works twists out from the measured TCP alone carries the arm past it."""
    cfg = dataclasses.replace(CFG, keep_out=[], slow_zones=[], max_acceleration=10.0)
    f = SafetyFilter(cfg, DT, servo=servo)
    down = np.array([0.0, 1.0, 0.0, 0.0])
    arm = command = np.array([0.6, 0.0, 0.2])
    lowest = np.inf
    for i in range(20):
        state = RobotState(arm.copy(), down, 1.0, np.zeros(2), i * DT)
        cmd = f.filter(arm - [cfg.max_translation_step, 0, 0], down, 1.0, state, i * DT)
        if cmd.hold:
            break
        command = command + cmd.linear_vel * DT  # servo's integration
        arm = arm + 0.6 * (command - arm)  # a first-order arm: 40 % of its error left after each period
        lowest = min(lowest, arm[0], command[0])
    if servo:
        assert lowest >= LO[0] - 1e-9 and not cmd.hold
    else:
        assert lowest < LO[0] - 0.01  # more than a tolerance past the face: a latched stop on the robot


@pytest.mark.parametrize("servo_moved", [True, False])
def test_a_home_move_leaves_servo_where_its_twists_took_it(servo_moved: bool) -> None:
    """A reset's home move is our twists too: servo's command leads the arm when it ends, and the episode's first
    step starts from there. A filter that took servo to be at the arm after the reset stops servo's command past
    the workspace's face by the lag it forgot."""
    cfg = dataclasses.replace(CFG, keep_out=[], slow_zones=[], max_acceleration=10.0)
    f = SafetyFilter(cfg, DT, servo=True)
    down = np.array([0.0, 1.0, 0.0, 0.0])
    arm = command = np.array([LO[0] + 0.08, 0.0, 0.2])
    lowest = np.inf
    for i in range(20):
        if i == 2:  # the home move ends here, the arm still moving
            f.reset(servo_moved=servo_moved)
        state = RobotState(arm.copy(), down, 1.0, np.zeros(2), i * DT)
        cmd = f.filter(arm - [cfg.max_translation_step, 0, 0], down, 1.0, state, i * DT)
        command = command + cmd.linear_vel * DT
        arm = arm + 0.6 * (command - arm)
        lowest = min(lowest, arm[0], command[0])
    assert (lowest >= LO[0] - 1e-9) == servo_moved, lowest - LO[0]
