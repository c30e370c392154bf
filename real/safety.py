"""The safety layer between any action source (policy, human, reset script) and the robot.

Every Cartesian command goes through `SafetyFilter.filter`, which returns a `SafeCommand` that is inside the
configured limits whatever it is given (NaN, inf, 1e300, a stale or broken robot state). Guarantees, checked by
property tests in tests/real/test_safety.py:

* every number in a command is finite; a command with `target_pos` set satisfies
  |target - measured TCP| <= min(max_translation_step, max_velocity * dt), lies in the workspace box (grown by
  `workspace_tolerance` only while the measured TCP itself is that far outside), the straight segment from the TCP
  to it never enters a keep-out box, and its orientation is within `max_rotation_step` of the measured one;
* the gripper command is in [0, 1] (1 = open) and changes by at most `gripper_max_delta` per step;
* the acceleration clamp holds for every policy-driven step; safety stops (workspace, keep-out, hold) take
  priority over it, as on a real arm, where the impedance controller does the braking.

The limits themselves are `robot_rl.limits.Limiter`, which a sim run with `env.for_robot=<robot>` applies too; this
module adds what only a robot has: validation, faults, the watchdog and holds.

Faults that mean "a human must look" (stale state, missing actions, e-stop, TCP outside the workspace or inside a
keep-out box, a joint near its limit) latch a hold until `reset()`; a single non-finite action only holds that
step. Of these, `POLICY_FAULTS` are where the policy's own commands took the arm: `RobotEnv` ends the episode on
them as a safety failure, where any other latch aborts it. A hold targets the measured pose (a pose controller
stays put, a servo gets zero twist); without a valid measured pose the command carries no target at all, so nothing
can be published that was not checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from robot_rl.limits import Limiter, SafetyConfig

# Latched faults (reason prefixes) the arm reaches only by being driven there: commands stay inside the workspace
# and short of keep-out boxes, but nothing stops a policy from winding a joint into its margin or the arm from
# overshooting the box. Everything else that latches (e-stop, stale state, no actions, broken state) is not its doing.
POLICY_FAULTS = ("joint_limit", "tcp_outside_workspace", "tcp_in_keep_out")
# A step is suspect when the TCP moved under this share of what it was commanded: a frozen arm moves ~0, one that
# lags its target by a control period still covers most of it.
FOLLOW_RATIO = 0.2
# Control steps an arm at full speed takes to brake once its driver stops it: it still moves in them, so they look
# followed; a `not_following` verdict voids them with its run.
FOLLOW_SLACK = 2


@dataclass
class RobotState:
    """What the filter needs from the robot; `stamp` and `now` share one clock (seconds)."""

    tcp_pos: np.ndarray
    tcp_quat: np.ndarray  # w, x, y, z
    gripper: float  # opening, 0 closed .. 1 open
    joint_pos: np.ndarray
    stamp: float


@dataclass
class SafeCommand:
    """`target_pos`/`target_quat` are None only for a hold without a valid fresh measured pose; such a hold is
    published as nothing (pose control: the robot keeps its last safe target) or zero twist (servo control)."""

    target_pos: np.ndarray | None
    target_quat: np.ndarray | None
    gripper: float | None  # None: no gripper command (nothing known about it)
    linear_vel: np.ndarray  # m/s, what a servo (TwistStamped) robot is sent
    angular_vel: np.ndarray  # rad/s
    hold: bool
    reasons: tuple[str, ...] = ()


class Watchdog:
    """Deadlines on fresh robot state and new actions; a miss or an e-stop latches until `reset()`.

    A deadline of 0 disables that check. `misses` counts expiries (one per latch), not polls.
    """

    def __init__(self, state_timeout_s: float, action_timeout_s: float) -> None:
        self.state_timeout_s, self.action_timeout_s = state_timeout_s, action_timeout_s
        self.last_state: float | None = None
        self.last_action: float | None = None
        self.latched: str | None = None
        self.misses = 0

    def feed_state(self, stamp: float) -> None:
        self.last_state = stamp if self.last_state is None else max(self.last_state, stamp)

    def feed_action(self, t: float) -> None:
        self.last_action = t

    def trip(self, reason: str) -> None:
        """Latch a hold (e-stop, fault); the first reason is kept because it is the one a human must see."""
        if self.latched is None:
            self.latched = reason

    def check(self, now: float) -> bool:
        """True while everything is fresh; deadlines only start once the first state/action has arrived."""
        if self.latched is not None:
            return False
        for name, last, timeout in (
            ("stale_state", self.last_state, self.state_timeout_s),
            ("no_action", self.last_action, self.action_timeout_s),
        ):
            if timeout > 0 and last is not None and now - last > timeout:
                self.misses += 1
                self.trip(f"{name}: {now - last:.3f}s > {timeout:.3f}s")
                return False
        return True

    def reset(self) -> None:
        self.latched = None
        self.last_state = self.last_action = None


class FollowWatchdog:
    """Whether the arm still follows its commands. Stock drivers stop taking them and stream their state on without
    a word (a UR protective stop, MoveIt Servo halting at a singularity or joint bound, a Franka reflex), so only
    what the TCP did tells. A step is suspect when it commanded at least `tolerance / window` metres (a hold, a
    clipped-away or a gripper-only command asks for nothing), the TCP moved under `FOLLOW_RATIO` of it, and the hand
    felt no more than `contact_n` newtons (0: unchecked): an arm pressed into a block stalls legitimately.
    `window` suspect steps in a row mean it is not following. `window` 0 disables the check."""

    def __init__(self, window: int, tolerance: float, contact_n: float) -> None:
        self.window, self.tolerance, self.contact_n = window, tolerance, contact_n
        self.run: list[tuple[float, float]] = []  # (commanded, moved) metres of the suspect steps in a row

    @property
    def unconfirmed(self) -> int:
        """The newest steps that a `not_following` verdict may yet void: the suspect run and the braking before it."""
        return len(self.run) + FOLLOW_SLACK if self.window > 0 else 0

    def reset(self) -> None:
        self.run.clear()

    def update(self, commanded: float, moved: float, force_n: float) -> str | None:
        """One control step: metres commanded, metres the TCP moved, newtons on the hand; the reason once the arm
        has not followed for `window` steps, else None."""
        asked = self.window > 0 and commanded >= self.tolerance / self.window
        contact = 0.0 < self.contact_n <= force_n
        if not asked or contact or moved >= FOLLOW_RATIO * commanded:
            self.run.clear()
            return None
        self.run.append((commanded, moved))
        if len(self.run) < self.window:
            return None
        c, m = (sum(x) for x in zip(*self.run, strict=True))
        return f"not_following: commanded {c * 1e3:.0f} mm over {len(self.run)} steps, moved {m * 1e3:.1f} mm"


def _fmt(v: np.ndarray) -> str:
    return "[" + ", ".join(f"{x:.4g}" for x in v) + "]"


def quat_normalize(q: np.ndarray) -> np.ndarray | None:
    q = np.asarray(q, dtype=np.float64)
    if q.shape != (4,) or not np.isfinite(q).all():
        return None
    with np.errstate(over="ignore"):  # 1e300-sized garbage overflows to inf and is rejected below
        n = float(np.linalg.norm(q))
    return q / n if 1e-6 < n < 1e6 else None


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
    ])  # fmt: skip


def rotvec_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rotation vector (world frame) taking orientation a to orientation b."""
    d = quat_mul(b, a * np.array([1.0, -1.0, -1.0, -1.0]))
    if d[0] < 0:
        d = -d
    s = float(np.linalg.norm(d[1:]))
    if s < 1e-12:
        return np.zeros(3)
    return d[1:] / s * 2.0 * math.atan2(s, d[0])


class SafetyFilter(Limiter):
    """Stateful (previous command, watchdog) filter for one robot at one control period `dt`.

    `servo`: the robot takes twists (MoveIt Servo), which it integrates from its own last command, not from the
    measured TCP; that command leads a moving arm by its tracking lag, so a twist bounded at the measured TCP alone
    carries the arm past a limit by that lag (1.8 cm past the workspace at 0.25 m/s behind servo on the sim's
    impedance arm). Each step's end at servo's command (as far as the filter's own twists tell, while within two
    steps of the measured TCP; a halt or a timeout resets servo to the arm) stays inside the workspace and out of
    keep-out boxes too."""

    def __init__(self, cfg: SafetyConfig, dt: float, servo: bool = False) -> None:
        super().__init__(cfg, dt)
        self.watchdog = Watchdog(cfg.state_timeout_s, cfg.action_timeout_s)
        self.holds = 0
        self.rejected = 0  # non-finite or malformed actions
        self.servo = servo
        self._servo_at: np.ndarray | None = None  # where servo's integrated command is, after our last twist

    @property
    def latched(self) -> str | None:
        return self.watchdog.latched

    def estop(self, reason: str = "estop") -> None:
        self.watchdog.trip(reason)

    def reset(self, servo_moved: bool = False) -> None:
        """After a human (or the reset routine) has made the robot safe again. `servo_moved`: our own twists (a
        home move) were servo's last commands, so its integrated command is where the estimate says, not at the
        arm (a stop or a scene reset puts it there)."""
        self.watchdog.reset()
        if not servo_moved:
            self._servo_at = None
        super().reset()

    def _servo_bound(self, pos: np.ndarray, delta: np.ndarray, reasons: list[str]) -> np.ndarray:
        """`delta` shortened so that servo's command, moved by it, stays inside the limits (see the class)."""
        at = self._servo_at
        if at is None or float(np.linalg.norm(at - pos)) > 2.0 * self.step_limit:  # reset to the arm
            at = pos
        delta = self.bound(at, delta, reasons)
        self._servo_at, self.prev_vel = at + delta, delta / self.dt
        return delta

    def _valid_state(self, s: RobotState) -> tuple[np.ndarray, np.ndarray] | None:
        pos = np.asarray(s.tcp_pos, dtype=np.float64)
        quat = quat_normalize(s.tcp_quat)
        if pos.shape != (3,) or not np.isfinite(pos).all() or quat is None or not math.isfinite(s.stamp):
            return None
        return pos, quat

    def _pose_fault(self, pos: np.ndarray) -> str | None:
        tol = self.cfg.workspace_tolerance
        if (pos < self.lo - tol).any() or (pos > self.hi + tol).any():
            return f"tcp_outside_workspace: {_fmt(pos)}"
        for lo, hi in self.boxes:
            if (pos > lo).all() and (pos < hi).all():
                return f"tcp_in_keep_out: {_fmt(pos)}"
        return None

    def _joint_fault(self, s: RobotState) -> str | None:
        c = self.cfg
        if c.joint_lower:
            q = np.asarray(s.joint_pos, dtype=np.float64)
            lower, upper = np.asarray(c.joint_lower), np.asarray(c.joint_upper)
            if q.shape != lower.shape or not np.isfinite(q).all():
                return "joint_state_invalid"
            near = (q < lower + c.joint_margin) | (q > upper - c.joint_margin)
            if near.any():
                return f"joint_limit: joints {np.flatnonzero(near).tolist()} within {c.joint_margin} rad"
        return None

    def hold(self, state: RobotState | None, reason: str) -> SafeCommand:
        """Stay where the robot is (if its pose is known and allowed), keep the gripper as commanded."""
        self.holds += 1
        self.stop()
        self._servo_at = None
        pose = self._valid_state(state) if state is not None else None
        if pose is not None and self._pose_fault(pose[0]) is None:
            pos, quat = pose
        else:
            pos = quat = None
        measured = float(state.gripper) if state is not None else math.nan
        g = self.gripper(math.nan, measured)
        return SafeCommand(pos, quat, g, np.zeros(3), np.zeros(3), True, (reason,))

    def filter(
        self, target_pos: np.ndarray, target_quat: np.ndarray, gripper: float, state: RobotState, now: float
    ) -> SafeCommand:
        """Turn a desired pose + gripper opening into a command inside every limit (see the module docstring)."""
        pose = self._valid_state(state)
        if pose is None:
            self.watchdog.trip("robot_state_invalid")
            return self.hold(state, "robot_state_invalid")
        pos, quat = pose
        self.watchdog.feed_state(state.stamp)
        self.watchdog.feed_action(now)
        if not self.watchdog.check(now):
            # Holding at a stale pose could command a jump back; without fresh state, command no pose at all.
            fresh = now - state.stamp <= self.cfg.state_timeout_s or self.cfg.state_timeout_s <= 0
            return self.hold(state if fresh else None, f"latched: {self.watchdog.latched}")
        if 0 < self.cfg.state_timeout_s < now - state.stamp:
            # The watchdog saw fresher state earlier, but this command would start from an old pose.
            self.watchdog.misses += 1
            self.watchdog.trip(f"stale_state: {now - state.stamp:.3f}s > {self.cfg.state_timeout_s:.3f}s")
            return self.hold(None, self.watchdog.latched)
        if (fault := self._pose_fault(pos) or self._joint_fault(state)) is not None:
            self.watchdog.trip(fault)
            return self.hold(state, fault)
        tp = np.asarray(target_pos, dtype=np.float64)
        tq = quat_normalize(target_quat)
        try:
            g_want = float(gripper)
        except (TypeError, ValueError):
            g_want = float("nan")
        if tp.shape != (3,) or not np.isfinite(tp).all() or tq is None or not math.isfinite(g_want):
            self.rejected += 1
            return self.hold(state, "non_finite_action")

        delta, tq, cut = self.pose(pos, quat, tp, tq)
        reasons = list(cut)
        if self.servo:
            delta = self._servo_bound(pos, delta, reasons)
        return SafeCommand(
            pos + delta,
            tq,
            self.gripper(g_want, float(state.gripper)),
            delta / self.dt,
            rotvec_between(quat, tq) / self.dt,
            False,
            tuple(reasons),
        )
