"""An arm's motion limits, one implementation for both sides: the safety layer (`real/safety.py`) cuts every command
sent to a robot with `Limiter`, and the simulator (`env.for_robot=<robot>`) cuts every command in training with the same
`Limiter` and that robot's `SafetyConfig`, so a sim policy learns under exactly the clipping the arm will apply.

Plain numpy, no ROS and no simulator: the core layer, importable from `sim/` and `real/` alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

Vec3 = tuple[float, float, float]
# A cut smaller than this (metres, radians) is float rounding, e.g. a command the limits already shaped, shaped again
# from `pos + delta`: it is applied, but not reported as a reason.
REPORT_TOL = 1e-9


@dataclass
class KeepOutBox:
    """An axis-aligned box (metres, robot base frame) the TCP must never enter: a fixture, a camera, a person."""

    lo: Vec3 = (0.0, 0.0, 0.0)
    hi: Vec3 = (0.0, 0.0, 0.0)


@dataclass
class SlowZone:
    """An axis-aligned box (metres, robot base frame) where the TCP moves at most `max_velocity`: the approach to a
    fixture, as a cell's reduced-speed zone. Momentum is what a force limit cannot stop (a peg landing on its block at
    0.25 m/s trips 50 N), so a cell slows near contact and keeps its speed in free motion."""

    lo: Vec3 = (0.0, 0.0, 0.0)
    hi: Vec3 = (0.0, 0.0, 0.0)
    max_velocity: float = 0.1


@dataclass
class SafetyConfig:
    workspace_lo: Vec3 = (0.3, -0.25, 0.01)
    workspace_hi: Vec3 = (0.7, 0.25, 0.3)
    # The measured TCP may sit this far outside the box (tracking error) before it is a latched fault.
    workspace_tolerance: float = 0.01
    keep_out: list[KeepOutBox] = field(default_factory=list)
    keep_out_clearance: float = 0.002  # stop this far (along the motion) before a keep-out box
    slow_zones: list[SlowZone] = field(default_factory=list)
    max_translation_step: float = 0.05  # metres per control step (norm)
    max_rotation_step: float = 0.1  # radians per control step
    max_velocity: float = 0.5  # m/s of the commanded TCP motion
    max_acceleration: float = 10.0  # m/s^2 between consecutive policy-driven steps
    gripper_max_delta: float = 1.0  # fraction of the full opening per step
    # Joint limits in `RobotConfig.joint_names` order; empty disables the check.
    joint_lower: list[float] = field(default_factory=list)
    joint_upper: list[float] = field(default_factory=list)
    joint_margin: float = 0.05  # radians from a limit that already counts as a fault
    state_timeout_s: float = 0.2  # newest robot state older than this => latched hold
    action_timeout_s: float = 0.5  # no new action for this long => latched hold (where actions are watched)


def clip_norm(v: np.ndarray, limit: float) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v * (limit / n) if n > limit else v


def quat_angle(a: np.ndarray, b: np.ndarray) -> float:
    """Rotation angle between two unit quaternions (q and -q are the same rotation)."""
    return 2.0 * math.acos(min(1.0, abs(float(np.dot(a, b)))))


def slerp(a: np.ndarray, b: np.ndarray, t: float) -> np.ndarray:
    if float(np.dot(a, b)) < 0:
        b = -b
    omega = math.acos(min(1.0, float(np.dot(a, b))))
    if omega < 1e-9:
        return a.copy()
    out = (math.sin((1 - t) * omega) * a + math.sin(t * omega) * b) / math.sin(omega)
    return out / np.linalg.norm(out)


def segment_box_entry(p: np.ndarray, d: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float | None:
    """Smallest t in [0, 1] where p + t*d is in the closed box, or None (slab method)."""
    t0, t1 = 0.0, 1.0
    for i in range(3):
        if abs(d[i]) < 1e-15:
            if p[i] < lo[i] or p[i] > hi[i]:
                return None
            continue
        a, b = (lo[i] - p[i]) / d[i], (hi[i] - p[i]) / d[i]
        t0, t1 = max(t0, min(a, b)), min(t1, max(a, b))
        if t0 > t1:
            return None
    return t0


class Limiter:
    """The per-step limits of `cfg` at control period `dt`: step and speed, acceleration against the previous
    command, workspace box, keep-out boxes, rotation, gripper rate. Stateful: it remembers the last command."""

    def __init__(self, cfg: SafetyConfig, dt: float) -> None:
        self.cfg, self.dt = cfg, dt
        self.lo, self.hi = np.asarray(cfg.workspace_lo, float), np.asarray(cfg.workspace_hi, float)
        self.boxes = [(np.asarray(b.lo, float), np.asarray(b.hi, float)) for b in cfg.keep_out]
        self.zones = [(np.asarray(z.lo, float), np.asarray(z.hi, float), z.max_velocity * dt) for z in cfg.slow_zones]
        self.step_limit = min(cfg.max_translation_step, cfg.max_velocity * dt)
        self.prev_vel = np.zeros(3)
        self.prev_gripper: float | None = None

    def reset(self) -> None:
        """A new start: from rest, the gripper measured afresh."""
        self.prev_vel = np.zeros(3)
        self.prev_gripper = None

    def pose(
        self, pos: np.ndarray, quat: np.ndarray, target_pos: np.ndarray, target_quat: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
        """(step, orientation, reasons): the step from the measured `pos` towards `target_pos` and the orientation
        from the measured `quat` towards `target_quat` (unit, w x y z) that may be commanded, and which limits cut.
        Hard limits (workspace, keep-out, slow zones) come after the acceleration clamp and win over it, as on a real
        arm. What it returns passes it again uncut from the same state wherever the arm may stop within one step
        (`max_acceleration` * dt >= the step's speed limit), so a sim command is one the arm's filter leaves alone."""
        reasons: list[str] = []
        dt, limit = self.dt, self.step_limit
        with np.errstate(over="ignore"):
            wanted = np.clip(target_pos - pos, -1e6, 1e6)  # keeps the norm finite for inputs like 1e308
        delta = _cut(reasons, "step_limit", wanted, clip_norm(wanted, limit))
        # Acceleration: move from the previous step's displacement towards the wanted one by at most a_max*dt^2.
        # Both ends are within `limit`, so the result is too (the ball is convex).
        prev, radius = self.prev_vel * dt, self.cfg.max_acceleration * dt * dt
        if np.linalg.norm(change := delta - prev) > radius:
            delta = _cut(reasons, "acceleration", delta, prev + clip_norm(change, radius))
        # Workspace: projection never lengthens a step that starts inside.
        clipped = np.clip(pos + delta, self.lo, self.hi)
        if not np.array_equal(clipped, pos + delta):
            inside = bool((pos >= self.lo).all() and (pos <= self.hi).all())
            stop = _brake(clipped - pos, prev, radius) if inside else clip_norm(clipped - pos, limit)
            delta = _cut(reasons, "workspace", delta, stop)
        delta = self._keep_out(pos, delta, reasons)
        # Last, as shortening a step along itself keeps it inside the box and out of keep-out boxes.
        if (allowed := self._zone_limit(pos, delta)) < float(np.linalg.norm(delta)):
            delta = _cut(reasons, "slow_zone", delta, _brake(clip_norm(delta, allowed), prev, radius))
        angle = quat_angle(quat, target_quat)
        if angle > self.cfg.max_rotation_step:
            target_quat = slerp(quat, target_quat, self.cfg.max_rotation_step / angle)
            if angle > self.cfg.max_rotation_step + REPORT_TOL:
                reasons.append("rotation_limit")
        self.prev_vel = delta / dt
        return delta, target_quat, tuple(reasons)

    def _zone_limit(self, pos: np.ndarray, delta: np.ndarray) -> float:
        """The longest step along `delta` the slow zones allow: full speed up to a zone's face, its speed inside."""
        allowed, norm = math.inf, float(np.linalg.norm(delta))
        for lo, hi, step in self.zones:
            if (t := segment_box_entry(pos, delta, lo, hi)) is not None:
                allowed = min(allowed, max(t * norm, step))
        return allowed

    def _keep_out(self, pos: np.ndarray, delta: np.ndarray, reasons: list[str]) -> np.ndarray:
        """Stop `keep_out_clearance` (along the motion) before the first keep-out box the step would enter."""
        norm = float(np.linalg.norm(delta))
        for lo, hi in self.boxes:
            t = segment_box_entry(pos, delta, lo, hi) if norm > 0 else None
            if t is not None:
                t = max(0.0, t - self.cfg.keep_out_clearance / norm)
                delta = delta * t
                norm = float(np.linalg.norm(delta))
                reasons += [] if "keep_out" in reasons else ["keep_out"]
        return delta

    def bound(self, start: np.ndarray, delta: np.ndarray, reasons: list[str]) -> np.ndarray:
        """`delta` shortened so that `start + delta` stays inside the workspace and out of keep-out boxes (a step
        measured from another point than the TCP: where a servo's own command is)."""
        delta = _cut(reasons, "workspace", delta, np.clip(start + delta, self.lo, self.hi) - start)
        return self._keep_out(start, delta, reasons)

    def stop(self) -> None:
        """A hold: the arm is brought to rest, so the next step accelerates from zero."""
        self.prev_vel = np.zeros(3)

    def gripper(self, want: float, measured: float) -> float | None:
        """Clip to [0, 1] and rate-limit against the last command (or the measured opening before the first).
        A non-finite `want` keeps the last command; None when nothing is known (sending "open" could drop what the
        gripper holds)."""
        prev = self.prev_gripper
        if prev is None and math.isfinite(measured):
            prev = min(1.0, max(0.0, measured))
        if not math.isfinite(want):
            want = prev if prev is not None else math.nan
        if not math.isfinite(want):
            return None
        g = min(1.0, max(0.0, want))
        if prev is not None:
            d = self.cfg.gripper_max_delta
            g = min(prev + d, max(prev - d, g))
        self.prev_gripper = g
        return g


def _brake(step: np.ndarray, prev: np.ndarray, radius: float) -> np.ndarray:
    """`step` shortened along itself until it is within `radius` of `prev` (the acceleration limit), where stopping
    is (|prev| <= radius): a workspace stop that slides along a face then brakes no harder than the limit allows, so
    every command lies inside every limit and passes them again unchanged. Otherwise the stop wins, unshortened."""
    if not step.any() or np.linalg.norm(step - prev) <= radius or np.linalg.norm(prev) > radius + REPORT_TOL:
        return step
    sp, ss = float(step @ prev), float(step @ step)  # largest t with |t * step - prev| = radius; 0 <= t < 1
    t = (sp + math.sqrt(max(0.0, sp * sp - ss * (float(prev @ prev) - radius * radius)))) / ss
    return step * min(1.0, max(0.0, t))


def _cut(reasons: list[str], why: str, before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """`after`, noting `why` when it differs from `before` by more than rounding."""
    if float(np.abs(after - before).max()) > REPORT_TOL and why not in reasons:
        reasons.append(why)
    return after
