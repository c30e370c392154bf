"""`RobotEnv`: a gymnasium env over a robot's standard ROS 2 topics, with the sim task's observation layout.

Per step: the action [dx, dy, dz, gripper] in [-1, 1] becomes a target `measured TCP + action * max_step` (SERL's
relative-frame actions; the sim env does the same) and a gripper opening `(1 - gripper) / 2`; the `SafetyFilter`
turns that into the command that is published; the env then sleeps to the next absolute deadline and assembles the
observation from the newest messages. Every stream used in an observation must be younger than
`cfg.staleness_s` and all stamps must agree within `cfg.align_tol_s`, otherwise `StaleDataError` is raised:
a policy never acts on old data. A stop the policy caused (the arm driven into a joint's margin, out of the workspace or
into a keep-out box, or held by the robot for a reason in `policy_holds`, or by a stop that names no cause while the
hand pressed at the robot's `force_stop_n`) ends the episode as the sim env's safety terminal: `info["safety_failure"]`,
reward `safety_reward`, after the hold went out. Any other latched fault (e-stop, watchdog) raises `SafetyStop` after
the hold; `reset()` clears it once the e-stop is released. An arm that stops following its commands while its state
streams on (a driver's silent stop: `FollowWatchdog`) raises `RobotHold` after the hold; `info["unconfirmed_steps"]`
says how many of the newest steps that verdict may yet void.
Success comes from a streaming success topic (checked like the state; a Bool has no stamp, so its age counts from
the poll that took it), from an event topic (`cfg.success_event`: an operator button, never stale), or from nothing
(`judges_success` False: the run's classifier or a person's key judges, `ClassifierReward` or the actor).

With `cfg.lockstep` (a sim robot that advances one control period per command) a step waits for the state
stamped after its command instead of sleeping, so it runs as fast as both sides compute; ages are not checked
against the wall clock (the robot's world stands still between commands, so a slow policy is never stale), the
safety filter runs on the robot's clock and `tcp_vel` divides by the control period. Stamps must still agree.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.errors import UserError
from robot_rl.real import msgs
from robot_rl.real.config import RobotConfig, proprio_layout
from robot_rl.real.drivers import make_link
from robot_rl.real.safety import POLICY_FAULTS, FollowWatchdog, RobotState, SafeCommand, SafetyFilter
from robot_rl.real.timing import ArmClock, RateKeeper, StreamClock
from robot_rl.transport import LATCHED_QOS, Subscription, TopicQos, Transport, TransportConfig, make_transport
from robot_rl.types import (
    OBJECT_FIELDS,
    PROPRIO_FIELDS,
    EpisodeAborted,
    ObsLayout,
    advance_view,
    ee_force_feature,
)

# QoS by the ROS conventions (docs/ros2_interface.md has the table): a best-effort reader matches every writer, a
# reliable writer every reader. So state is read best-effort (camera drivers publish sensor-data QoS) and published
# reliable (a default-QoS subscriber and a `qos_profile_sensor_data` one both match); commands likewise are
# published reliable and read best-effort, so a teleop node on either profile drives the robot. Old samples are
# useless for both, hence keep-last with small depths.
SENSOR_QOS = TopicQos(reliable=False, depth=5)
STATE_QOS = TopicQos(reliable=True, depth=5)
COMMAND_QOS = TopicQos(reliable=True, depth=1)
COMMAND_READER_QOS = TopicQos(reliable=False, depth=5)
STATE_FIELDS = (*PROPRIO_FIELDS, "last_actions", *OBJECT_FIELDS)
_ROBOT_CLEARS_S = 2.0  # after a release, how long a reset waits for the robot's status to stop reporting the e-stop
_HOME_TOL_M = 0.005  # a reset's home move ends this close to its target
# A causeless driver stop is the policy's push when the wrench read this share of the robot's force stop within the
# last two control periods (`RobotConfig.force_stop_n`): a UR's TCP force estimate is good to about a tenth of it.
_FORCE_STOP_SHARE = 0.8
REST_ACTION = (0.0, 0.0, 0.0, -1.0)  # `last_actions` after a reset: hold, gripper open (as the sim env)
# TCP poses kept to turn a tcp-frame wrench: a poll takes at most a reader's depth (5) of each, so this spans several
# polls of a driver that stamps its wrench and pose from one sample.
_POSE_HISTORY = 32


ACTION_DIM = 4  # [dx, dy, dz, gripper] in [-1, 1]


def envelope_states(cfg: RobotConfig, seed: int, n: int = 2000) -> np.ndarray:
    """(n, state dim) proprio states drawn uniformly from what the robot config allows: TCP in the workspace, yaw
    within 0.5 rad of home, any gripper opening, TCP speed up to `max_velocity`, joints within their limits (+-pi
    without limits) at up to 1 rad/s. A state normaliser for runs with no demos that costs no arm time."""
    rng, s = np.random.default_rng(seed), cfg.safety
    n_joints = len(cfg.joint_names)
    lower = np.asarray(s.joint_lower or [-math.pi] * n_joints, np.float64)
    upper = np.asarray(s.joint_upper or [math.pi] * n_joints, np.float64)
    yaw = _yaw(np.asarray(cfg.home_quat, np.float64)) + rng.uniform(-0.5, 0.5, n)
    parts = {
        "tcp_pos": rng.uniform(s.workspace_lo, s.workspace_hi, (n, 3)),
        "ee_yaw_sin_cos": np.stack([np.sin(yaw), np.cos(yaw)], 1),
        "gripper_opening": rng.uniform(0.0, 1.0, (n, 1)),
        "tcp_vel": rng.uniform(-s.max_velocity, s.max_velocity, (n, 3)),
        "joint_pos": rng.uniform(lower, upper, (n, n_joints)),
        "joint_vel": rng.uniform(-1.0, 1.0, (n, n_joints)),
        "ee_force": np.zeros((n, 3)),  # already in O(1) units: the normaliser leaves it as it is
    }
    layout = proprio_layout(cfg)
    out = np.zeros((n, max(sl.stop for sl in layout.values())), np.float32)
    for name, sl in layout.items():
        out[:, sl] = parts[name]
    return out


class StaleDataError(EpisodeAborted):
    """A stream needed for the observation is missing, too old, or out of step with the others (or the robot did
    not answer a reset in time)."""


class FrameMismatchError(UserError):
    """A stream's messages are in another frame than the robot config says: its vectors would be misread."""


class SafetyStop(EpisodeAborted):
    """The safety layer latched a hold (e-stop, watchdog, limit fault); a reset (and a human) must clear it."""


class RobotHold(SafetyStop):
    """The robot's driver holds the arm mid-episode for a reason not in `policy_holds` (its command watchdog, a
    fault): whatever is commanded from here does nothing until a reset, so the episode ends here."""


def _yaw(quat_wxyz: np.ndarray) -> float:
    w, x, y, z = quat_wxyz
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def _rotate(quat_wxyz: np.ndarray, v: np.ndarray) -> np.ndarray:
    """`v` turned by the unit quaternion `quat_wxyz`: a vector in the TCP frame expressed in the base frame."""
    q = quat_wxyz / np.linalg.norm(quat_wxyz)
    w, u = q[0], q[1:]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def _ee_yaw_sin_cos(q: np.ndarray) -> np.ndarray:
    """[R10, R00] of the TCP rotation matrix, the sim env's `ee_yaw_sin_cos`."""
    w, x, y, z = q / np.linalg.norm(q)
    return np.array([2.0 * (x * y + w * z), 1.0 - 2.0 * (y * y + z * z)])


class EstopListener:
    """The e-stop state from any publisher, including one that pressed it before we started.

    Two readers: a transient-local one gets the press latched before this node existed (it matches only
    transient-local publishers, like ours), a volatile best-effort one matches every publisher (a `ros2 topic pub`
    with default QoS, a teleop node on sensor-data QoS). Once the live reader has delivered anything, it alone
    decides: the latched reader only repeats what the live one already saw, possibly late.
    """

    def __init__(self, tx: Transport, topic: str) -> None:
        self._latched: Subscription = tx.subscription(topic, msgs.BOOL, LATCHED_QOS)
        self._live: Subscription = tx.subscription(topic, msgs.BOOL, COMMAND_READER_QOS)
        self._seen_live = False
        self.pressed = False

    def poll(self) -> bool:
        """Drain both readers; True when a press arrived since the last poll (`pressed` is the newest state)."""
        history, live = self._latched.take(), self._live.take()
        if live:
            self._seen_live = True
            got = live
        else:
            got = history if not self._seen_live else []
        if got:
            self.pressed = bool(got[-1].data)
        return any(m.data for m in got)


class RobotEnv(gym.Env):
    """One robot behind its topics, observing `layout` (a checkpoint's, or `robot_rl.envs.robot_layout` for a robot
    run): its state fields, cameras, image size, step size and control rate, so observations line up with training
    by construction. The robot config says only where the topics are (and its cameras' crops)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        cfg: RobotConfig,
        layout: ObsLayout,
        max_episode_steps: int = 50,
        transport: Transport | None = None,
        node_name: str = "robot_rl_deploy",
        delay_compensation: float = 0.0,
        held_grip: float | None = None,
    ) -> None:
        if layout.action_dim != ACTION_DIM:
            raise ValueError(f"a robot takes [dx, dy, dz, gripper] actions; the policy emits {layout.action_dim}")
        state_layout, cameras = layout.slices(), layout.cameras
        unknown = set(state_layout) - set(STATE_FIELDS)
        if unknown:
            raise ValueError(f"cannot assemble state fields {sorted(unknown)} from robot topics; know {STATE_FIELDS}")
        cams = {c.name: c for c in cfg.cameras}
        if missing := [c for c in cameras if c not in cams]:
            raise ValueError(f"policy needs cameras {missing}, robot config {cfg.name!r} has {sorted(cams)}")
        self.cfg = cfg
        self.obs_layout = layout
        self.layout = state_layout
        self.hz = layout.control_hz
        self.dt = 1.0 / self.hz
        self.max_step = layout.max_step
        # The checkpoint's `randomization.delay_compensation`: the view is advanced by the commands it cannot show
        # yet, its age from the state's stamp, as the sim env does from its observation queue.
        self.delay_compensation = delay_compensation
        # The gripper command a task holds whatever the policy says (`sim.envs.HELD_GRIP`: PegInsert keeps the peg
        # grasped), sent and shown in `last_actions` as the sim env does. None: the policy's.
        self.held_grip = held_grip
        self.max_episode_steps = cfg.max_episode_steps or max_episode_steps
        self.home_quat = np.asarray(cfg.home_quat, np.float64)
        self.safety = SafetyFilter(cfg.safety, self.dt, servo=cfg.command_type == "twist")
        # Derived tolerance: a quarter of the largest step this env can command, every step of the window.
        step = min(self.max_step, self.safety.step_limit)
        self.follow = FollowWatchdog(cfg.follow_window, cfg.follow_tolerance_m or cfg.follow_window * step / 4,
                                     cfg.follow_contact_n)  # fmt: skip
        self.rate = RateKeeper(self.hz)
        self.clock = ArmClock()  # the arm's busy time by activity: the run summary's and the benches' robot time
        self._booked_at: float | None = None  # the state stamp the clock was last booked at (real time)
        self._answered = 0  # lockstep: commands the robot answered since the last booking
        self.tx = transport or make_transport(
            TransportConfig(backend=cfg.backend, domain_id=cfg.domain_id, namespace=cfg.namespace, node_name=node_name)
        )
        self._own_transport = transport is None
        self._needs_object = bool(set(state_layout) & set(OBJECT_FIELDS))
        self._needs_joint_vel = "joint_vel" in state_layout
        if self._needs_object and not cfg.object_pose_topic:
            raise ValueError("the policy observes the object but the robot config has no object_pose_topic")
        if "ee_force" in state_layout and not cfg.wrench_topic:
            raise ValueError("the policy observes the end-effector force but the robot config has no wrench_topic")
        # Streams that make up an observation: key -> (subscription, has a header stamp).
        self._subs: dict[str, Any] = {
            "joints": self.tx.subscription(cfg.joint_state_topic, msgs.JOINT_STATE, SENSOR_QOS),
            "ee": self.tx.subscription(cfg.ee_pose_topic, msgs.POSE, SENSOR_QOS),
        }
        if self._needs_object:
            self._subs["object"] = self.tx.subscription(cfg.object_pose_topic, msgs.POSE, SENSOR_QOS)
        if "ee_force" in state_layout:
            self._subs["wrench"] = self.tx.subscription(cfg.wrench_topic, msgs.WRENCH, SENSOR_QOS)
        # The follow watchdog's contact check reads the wrench even where the policy does not observe it (never
        # checked for age: without it, a stall is simply not excused).
        self._contact_sub = None
        contact_checked = cfg.follow_window and cfg.follow_contact_n
        if cfg.wrench_topic and "wrench" not in self._subs and (contact_checked or cfg.force_stop_n):
            self._contact_sub = self.tx.subscription(cfg.wrench_topic, msgs.WRENCH, SENSOR_QOS)
        self._force_n = 0.0  # the newest wrench's force on the hand, newtons
        self._forces: deque[tuple[float, float]] = deque(maxlen=1024)  # (received, N): what `_blame` looks back on
        self._blamed: tuple[str, str] | None = None  # a driver's stop and the policy-named reason it was given
        self._cams = {c: cams[c] for c in cameras}
        for name, cam in self._cams.items():
            kind = msgs.COMPRESSED_IMAGE if cam.compressed else msgs.IMAGE
            self._subs[f"camera:{name}"] = self.tx.subscription(cam.topic, kind, SENSOR_QOS)
        # The stamped streams an observation reads: each subscription but the joint states, which count per joint
        # (`joint:<name>`, the newest message that carried it), as drivers split them across publishers.
        self._joint_keys = {f"joint:{n}": n for n in (*cfg.joint_names, *cfg.gripper_joints)}
        self._streams = [k for k in self._subs if k != "joints"] + list(self._joint_keys)
        # The frame_id each pose and wrench stream must carry, and the config key that names it.
        base = (cfg.base_frame, "base_frame")
        wrench = base if cfg.wrench_frame == "base" else (cfg.ee_frame, "ee_frame, as wrench_frame is tcp")
        self._frames = {"ee": base, "object": base, "wrench": wrench}
        self._poses: deque[tuple[float, np.ndarray]] = deque(maxlen=_POSE_HISTORY)  # (stamp, TCP quat w, x, y, z)
        # The streaming success flag: a Bool has no stamp, so its age counts from the poll that took it.
        self._flag = None
        if cfg.success_topic and not cfg.success_event:
            self._flag = self.tx.subscription(cfg.success_topic, msgs.BOOL, SENSOR_QOS)
        self._flag_seen: tuple[Any, float] | None = None  # (message, local receive time)
        # A button publishes only when pressed, with whatever QoS its node has: the volatile best-effort reader
        # matches every publisher, and a press from before this node started is no verdict on this episode.
        self._button = None
        if cfg.success_topic and cfg.success_event:
            self._button = self.tx.subscription(cfg.success_topic, msgs.BOOL, COMMAND_READER_QOS)
        self._pressed = False  # the button said success since the episode's reset
        self._estop = EstopListener(self.tx, cfg.estop_topic)
        # Robots that report their own hold (the sim robot; drivers that do not publish it leave this silent).
        self._status_sub = self.tx.subscription(cfg.status_topic, msgs.STRING, LATCHED_QOS)
        self._robot_estop = False
        self._status_hold: str | None = None  # a hold on our status topic other than the e-stop (the sim robot's)
        self._robot_hold: str | None = None  # the robot's own hold: the status topic's or the stock driver's
        self._driver = make_link(cfg)  # a stock driver's status, faults and recovery (real/drivers.py)
        self._reset_done_sub = self.tx.subscription(cfg.reset_done_topic, msgs.INT64)
        self._cmd_pub = self.tx.publisher(cfg.command_topic, msgs.COMMAND[cfg.command_type], COMMAND_QOS)
        self._grip_pub = self.tx.publisher(cfg.gripper_topic, msgs.FLOAT64, COMMAND_QOS)
        self._reset_pub = self.tx.publisher(cfg.reset_topic, msgs.INT64)
        self._estop_pub = self.tx.publisher(cfg.estop_topic, msgs.BOOL, LATCHED_QOS)
        self._latest: dict[str, tuple[Any, float]] = {}  # stream -> (message, local receive time)
        # The largest force on the hand (N) in any wrench message of this episode: `info["peak_ee_force"]`, what
        # evaluation reports (a lockstep sim robot sends one per control period, a driver one per state sample).
        self._peak_force = 0.0
        self._clocks = {k: StreamClock() for k in self._streams}  # each stream's measured rate
        self.last_obs: dict[str, np.ndarray] | None = None  # what the policy saw last (a device may read it)
        self._reset_done: list[tuple[int, float]] = []
        self._prev_tcp: tuple[np.ndarray, float] | None = None
        self._obj_start: np.ndarray | None = None  # the object's first pose after a reset
        self._t = 0
        # The actions sent last, newest first, as many as the layout's `last_actions` holds (the sim env's
        # `action_history`).
        history = state_layout.get("last_actions", slice(0, 0))
        self._past = np.tile(REST_ACTION, ((history.stop - history.start) // ACTION_DIM, 1))
        self.latencies: list[float] = []  # state stamp -> command publication, seconds
        # How a reset asks the person at the robot to reset the scene (reset=home|human): a prompt and Enter.
        self.operator_prompt: Any = input

        self.observation_space = layout.observation_space()
        self.action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)

    # ------------------------------------------------------------------------------------------- streams

    def _poll(self) -> None:
        now = time.time()
        for key, sub in self._subs.items():
            for m in sub.take():
                self._receive(key, m, now)
        if self._flag is not None and (got := self._flag.take()):
            self._flag_seen = (got[-1], now)
        if self._button is not None and any(m.data for m in self._button.take()):
            self._pressed = True
        if self._contact_sub is not None:
            for m in self._contact_sub.take():
                self._heard_force(m, now)
        if self._estop.poll():
            self.safety.estop("estop topic")
        if status := self._status_sub.take():
            text = status[-1].data
            self._robot_estop = text == "hold: estop"
            if self._robot_estop:
                self.safety.estop("estop held by the robot")
            held = text.startswith("hold: ") and not text.startswith("hold: estop")
            self._status_hold = text.removeprefix("hold: ") if held else None
        self._robot_hold = self._blame(self._status_hold or (self._driver.poll() if self._driver else None), now)
        for m in self._reset_done_sub.take():
            self._reset_done.append((int(m.data), now))

    def _receive(self, key: str, msg: Any, now: float) -> None:
        """`msg` becomes the newest of its stream (a joint state: of each joint it carries that the config names),
        its stamp goes to the stream's clock; the first message of a stream must be in the frame the config says."""
        streams = [k for n in msg.name if (k := f"joint:{n}") in self._joint_keys] if key == "joints" else [key]
        for k in streams:
            if k not in self._latest:
                self._check_frame(k, msg)
            self._latest[k] = (msg, now)
            self._clocks[k].add(msgs.stamp_of(msg))
        if key == "wrench":
            self._heard_force(msg, now)
            self._peak_force = max(self._peak_force, self._force_n)
        elif key == "ee":
            self._poses.append((msgs.stamp_of(msg), msgs.pose_of(msg)[1]))

    def _heard_force(self, msg: Any, now: float) -> None:
        self._force_n = float(np.linalg.norm(msgs.wrench_of(msg)[0]))
        self._forces.append((now, self._force_n))

    def _blame(self, hold: str | None, now: float) -> str | None:
        """`hold`, named the policy's force stop ("force limit (...): hold") when it gives no cause of the policy's
        and the hand pressed at the robot's force stop just before (`force_stop_n`); it stays so until it clears."""
        limit = self.cfg.force_stop_n
        if hold is None or not limit or hold.startswith(tuple(self.cfg.policy_holds)):
            self._blamed = None
            return hold
        if self._blamed is not None and self._blamed[0] == hold:
            return self._blamed[1]
        peak = max((f for t, f in self._forces if t >= now - 2.0 * self.dt), default=0.0)
        if peak < _FORCE_STOP_SHARE * limit:
            return hold
        self._blamed = (hold, f"force limit ({peak:.0f} N on the hand, the robot stops at {limit:.0f} N): {hold}")
        return self._blamed[1]

    def _check_frame(self, key: str, msg: Any) -> None:
        """A pose or wrench in another frame than the config's would be misread, not stale: the run stops (a
        `UserError`). An empty frame_id passes: many stand-ins and trackers leave it unset."""
        want, which = self._frames.get(key, ("", ""))
        got = msg.header.frame_id
        if want and got and got != want:
            raise FrameMismatchError(f"{self._topic(key)} is in frame {got!r}, the robot config expects {want!r} "
                                     f"({which}); fix the config or the driver")  # fmt: skip

    def _book(self, activity: str | None = None) -> None:
        """Books the arm's time since the last booking (`ArmClock`): in real time from the robot's own state stamps;
        in lockstep, where the stamps also run while the robot waits for the learner, one control period per
        command it answered."""
        if self.cfg.lockstep:
            seconds, self._answered = self._answered * self.dt, 0
        else:
            stamp = self._stamp("ee")
            seconds = 0.0 if self._booked_at is None else max(stamp - self._booked_at, 0.0)
            self._booked_at = max(stamp, self._booked_at or stamp)
        self.clock.book(seconds, activity)

    def _stamp(self, key: str) -> float:
        return msgs.stamp_of(self._latest[key][0])

    def _check_fresh(self, now: float) -> None:
        """Every stream an observation reads is young enough (`_age_limit`) and all agree in time."""
        missing = [k for k in self._streams if k not in self._latest]
        if missing:
            raise StaleDataError(f"no message yet on {[self._topic(k) for k in missing]}")
        stamps = {k: self._stamp(k) for k in self._streams}
        for k, s in stamps.items():
            self._check_age(self._topic(k), now - s, *self._age_limit(k))
        spread = max(stamps.values()) - min(stamps.values())
        tol = self.cfg.align_tol_s + max(self._clocks[k].spread for k in stamps)
        if spread > tol:
            raise StaleDataError(f"streams {sorted(stamps)} are {spread:.3f}s apart (limit {tol:.3f}s: "
                                 f"align_tol_s + the slowest stream's period and jitter)")  # fmt: skip

    def _age_limit(self, key: str) -> tuple[float, str]:
        """How old a stream's newest message may be, and why: transport latency (`staleness_s`) plus the stream's
        own period and jitter."""
        clock = self._clocks[key]
        return self.cfg.staleness_s + clock.spread, f"it streams every {clock.period:.3f}s (+-{clock.jitter:.3f}s)"

    def _check_age(self, topic: str, age: float, limit: float, why: str) -> None:
        """A newest message older than `limit` is stale; never in lockstep, where the robot's world waits for us."""
        if not self.cfg.lockstep and age > limit:
            raise StaleDataError(f"{topic}: newest is {age:.3f}s old; {why}, limit {limit:.3f}s")

    def _silent_since(self, since: float) -> list[str]:
        """The topics, the success flag's included, that brought nothing after `since` (local receive time)."""
        silent = [self._topic(k) for k in self._streams if k not in self._latest or self._latest[k][1] <= since]
        if self._flag is not None and (self._flag_seen is None or self._flag_seen[1] <= since):
            silent.append(self._flag.topic)
        return silent

    def _aligned(self) -> bool:
        """Whether an observation now would pass `_check_fresh`: a reset waits for one (a loaded host's first frames
        can straddle a camera period) instead of failing on the first."""
        try:
            self._check_fresh(time.time())
        except StaleDataError:
            return False
        return True

    def _topic(self, key: str) -> str:
        if key in self._joint_keys:
            return f"{self._subs['joints'].topic} [{self._joint_keys[key]}]"
        return self._subs[key].topic

    def _joints(self, names: list[str], read: Any) -> np.ndarray:
        """`read` (`msgs.joint_positions` or `joint_velocities`) of `names`, in their order, each from the newest
        message that carried it."""
        return np.array([read(self._latest[f"joint:{n}"][0], [n])[0] for n in names], np.float64)

    def _wrench(self) -> tuple[np.ndarray, np.ndarray]:
        """(force, torque) the world exerts on the hand in the base frame, signed by `wrench_sign`: a tcp-frame wrench
        is turned by the TCP orientation measured nearest its stamp (a driver samples both together)."""
        msg = self._latest["wrench"][0]
        force, torque = msgs.wrench_of(msg)
        if self.cfg.wrench_frame == "tcp":
            stamp = msgs.stamp_of(msg)
            quat = min(self._poses, key=lambda p: abs(p[0] - stamp))[1]
            force, torque = _rotate(quat, force), _rotate(quat, torque)
        return self.cfg.wrench_sign * force, self.cfg.wrench_sign * torque

    def robot_state(self) -> RobotState | None:
        """The newest measured state for the safety layer (None until the pose and every configured joint was heard)."""
        if "ee" not in self._latest or any(k not in self._latest for k in self._joint_keys):
            return None
        ee, c = self._latest["ee"][0], self.cfg
        pos, quat = msgs.pose_of(ee)
        gap = self._joints(c.gripper_joints, msgs.joint_positions).sum() if c.gripper_joints else math.nan
        return RobotState(
            pos, quat, float((gap - c.gripper_closed) / (c.gripper_max_width - c.gripper_closed)),
            self._joints(c.joint_names, msgs.joint_positions),
            msgs.stamp_of(ee),
        )  # fmt: skip

    def _observe(self, checked: bool = True) -> dict[str, np.ndarray]:
        if checked:
            self._check_fresh(time.time())
        state = self.robot_state()
        assert state is not None  # _check_fresh saw both streams
        tcp, stamp = state.tcp_pos, state.stamp
        if self._prev_tcp is None:
            vel = np.zeros(3)
        else:
            prev, prev_stamp = self._prev_tcp
            # Lockstep: one step is exactly one control period of the robot's (simulated) time.
            vel = (tcp - prev) / (self.dt if self.cfg.lockstep else max(stamp - prev_stamp, 0.5 * self.dt))
        self._prev_tcp = (tcp, stamp)
        parts: dict[str, np.ndarray] = {
            "tcp_pos": tcp,
            "ee_yaw_sin_cos": _ee_yaw_sin_cos(state.tcp_quat),
            "gripper_opening": np.array([state.gripper]),
            "tcp_vel": vel,
            "last_actions": self._past.ravel(),
            "joint_pos": state.joint_pos,
        }
        if "wrench" in self._subs:
            parts["ee_force"] = ee_force_feature(self._wrench()[0])
        if self._needs_joint_vel:
            parts["joint_vel"] = self._joints(self.cfg.joint_names, msgs.joint_velocities)
        if self._needs_object:
            obj, obj_quat = msgs.pose_of(self._latest["object"][0])
            yaw4 = 4.0 * _yaw(obj_quat)
            if self._obj_start is None:
                self._obj_start = obj
            parts["cube_pos"], parts["cube_minus_tcp"] = obj, obj - tcp
            parts["cube_minus_start"], parts["tcp_minus_cube_start"] = obj - self._obj_start, tcp - self._obj_start
            parts["cube_yaw4_sin_cos"] = np.array([math.sin(yaw4), math.cos(yaw4)])
        vec = np.zeros(self.observation_space["state"].shape, np.float32)
        for name, sl in self.layout.items():
            vec[sl] = parts[name]
        if self.delay_compensation:
            age = 0.0 if self.cfg.lockstep else max(time.time() - stamp, 0.0) / self.dt
            vec = advance_view(vec, self.layout, self._past, age, self.delay_compensation, self.max_step)
            vec = vec.astype(np.float32, copy=False)
        if not np.isfinite(vec).all():
            raise StaleDataError(f"robot state contains NaN/inf: {vec}")
        obs = {"state": vec}
        for name, cam in self._cams.items():
            obs[name] = msgs.decode_image(
                self._latest[f"camera:{name}"][0], cam.compressed, self.obs_layout.image_size, cam.crop
            )
        self.last_obs = obs
        return obs

    def stamps(self) -> dict[str, Any]:
        """Header stamps (seconds, the robot's wall clock) of the newest observation: for recording."""
        return {
            "state_timestamp": msgs.stamp_of(self._latest["ee"][0]),
            "camera_timestamps": {c: msgs.stamp_of(self._latest[f"camera:{c}"][0]) for c in self._cams},
        }

    @property
    def state_layout(self) -> dict[str, slice]:
        """Field -> slice of `obs["state"]`, as the sim env names it (episode meta records it)."""
        return dict(self.layout)

    @property
    def judges_success(self) -> bool:
        """Whether `info["success"]` says anything: False without a success topic (then it is always False)."""
        return bool(self.cfg.success_topic)

    def _success(self) -> bool:
        """The button since the reset, or the newest success flag. The flag's age counts from the poll that took
        it, and a real-time step polls once a control period: its limit adds that period to transport latency, as
        a stamped stream's adds the stream's own."""
        if self._button is not None:
            return self._pressed
        if self._flag is None:
            return False
        if self._flag_seen is None:
            raise StaleDataError(f"no message yet on {[self._flag.topic]}")
        msg, received = self._flag_seen
        period = self.rate.period
        self._check_age(self._flag.topic, time.time() - received, self.cfg.staleness_s + period,
                        f"it has no stamp and is polled every {period:.3f}s")  # fmt: skip
        return bool(msg.data)

    # ------------------------------------------------------------------------------------------ commands

    def publish(self, cmd: SafeCommand) -> None:
        """Send a filtered command; a hold without a valid pose sends no pose (servo: zero twist)."""
        now = time.time()
        if self.cfg.command_type == "twist":
            self._cmd_pub.publish(msgs.twist_stamped(cmd.linear_vel, cmd.angular_vel, now, self.cfg.base_frame))
        elif cmd.target_pos is not None:
            self._cmd_pub.publish(msgs.pose_stamped(cmd.target_pos, cmd.target_quat, now, self.cfg.base_frame))
        if cmd.gripper is not None:
            self._grip_pub.publish(msgs.scalar(msgs.FLOAT64, cmd.gripper))

    def command_target(self, pos: np.ndarray, gripper_opening: float, poll: bool = True) -> SafeCommand:
        """Filter and send a TCP target (home orientation); used by steps and by the scripted home move."""
        if poll:
            self._poll()
        state = self.robot_state()
        # Lockstep: nothing moves between commands, so the newest state is current on the robot's own clock.
        now = state.stamp if self.cfg.lockstep and state is not None else time.time()
        cmd = self.safety.hold(None, "no_robot_state") if state is None else self.safety.filter(
            pos, self.home_quat, gripper_opening, state, now
        )  # fmt: skip
        self.publish(cmd)
        if state is not None:
            self.latencies.append(time.time() - state.stamp)
        return cmd

    def estop(self, reason: str = "estop") -> None:
        """Latch a hold here and tell the robot side (latched topic, so late joiners see it too)."""
        self.safety.estop(reason)
        self._estop_pub.publish(msgs.scalar(msgs.BOOL, True))

    # ------------------------------------------------------------------------------------------- gym API

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        a = np.array(action, dtype=np.float64).reshape(-1)
        if a.shape != (ACTION_DIM,):
            raise ValueError(f"action must have shape ({ACTION_DIM},), got {a.shape}")
        if self.held_grip is not None:
            a[3] = self.held_grip
        if len(self._past):
            self._past[1:] = self._past[:-1].copy()
            self._past[0] = np.where(np.isfinite(a), np.clip(a, -1.0, 1.0), 0.0)  # a rejected value holds
        self._poll()  # the delta is taken from the newest measured TCP, as in the sim env
        pushed_before = self._pushed()  # heard since the last step's poll: this step is the terminal, no wait
        if not pushed_before:
            self._raise_if_held()
        state = self.robot_state()
        tcp = state.tcp_pos if state is not None else np.full(3, np.nan)
        target = tcp + np.clip(a[:3], -1.0, 1.0) * self.max_step  # NaN stays NaN: the filter rejects it
        sent = time.time()
        if pushed_before:  # the arm stopped while the policy computed: hold it, judge nothing by its silent state
            cmd = self.safety.hold(state, "robot_hold")
            self.publish(cmd)
        else:
            cmd = self.command_target(target, 0.5 * (1.0 - float(np.clip(a[3], -1.0, 1.0))), poll=False)
        fault = self._policy_fault()
        if state is None:
            raise StaleDataError("no robot state received yet")
        if fault is None and not pushed_before:  # a hold has nothing to wait for (nor a pose to answer)
            if self.cfg.lockstep:
                self._await_answer(sent)
            else:
                self.rate.sleep()
                self._poll()
            if (reason := self.safety.latched) is not None and reason.startswith("estop"):
                raise SafetyStop(reason)  # heard while waiting: it outranks how old the state that came with it is
        pushed = self._pushed()
        failed = pushed or fault is not None
        if not failed:
            self._raise_if_held()  # this step's command may not have acted: no transition for it
        # A held driver may stop its state streams (a Franka reflex): the terminal shows the newest state, unchecked.
        obs = self._observe(checked=not pushed)
        self._book()
        if not failed:
            self._check_following(state, cmd)
        self._t += 1
        success = not failed and self._success()
        truncated = not success and not failed and self._t >= self.max_episode_steps
        info = {"success": success, "hold": cmd.hold, "safety": cmd.reasons, "latency_s": self.latencies[-1],
                "unconfirmed_steps": min(self.follow.unconfirmed, self._t)}  # fmt: skip
        if failed:  # the sim env's safety terminal (EnvConfig.safety_reward), not an abort
            info |= {"safety_failure": True, **({"robot_hold": self._robot_hold} if pushed else {})}
        if "wrench" in self._subs:
            info["peak_ee_force"] = self._peak_force
        reward = self.cfg.safety_reward if failed else float(success)
        return obs, reward, success or failed, truncated, {**info, **self.stamps()}

    def _pushed(self) -> bool:
        """Whether the robot holds the arm for a reason the policy caused (`policy_holds`: a force reflex)."""
        return self._robot_hold is not None and self._robot_hold.startswith(tuple(self.cfg.policy_holds))

    def _policy_fault(self) -> str | None:
        """The latched fault if the policy's commands led to it (`POLICY_FAULTS` after the episode's first step; at
        the first the arm is where the reset left it); raises for any other latch."""
        reason = self.safety.latched
        if reason is None or (reason.startswith(POLICY_FAULTS) and self._t > 0):
            return reason
        if reason.startswith("stale_state"):
            raise StaleDataError(f"robot state is stale ({reason}); holding")
        raise SafetyStop(reason)

    def _check_following(self, before: RobotState, cmd: SafeCommand) -> None:
        """Raises `RobotHold`, after a hold went out, once the arm has not followed `follow_window` commands in a
        row: a driver that drops commands and streams its state on (a protective stop) would have the episode run
        on against a frozen arm. What was commanded is what the filter sent (a hold: nothing)."""
        after = self.robot_state()
        assert after is not None  # the observation just read it
        moved = float(np.linalg.norm(after.tcp_pos - before.tcp_pos))
        reason = self.follow.update(float(np.linalg.norm(cmd.linear_vel)) * self.dt, moved, self._force_n)
        if reason is None:
            return
        self.safety.watchdog.trip(reason)
        self.publish(self.safety.hold(after, reason))
        raise RobotHold(f"{reason}; the robot stopped taking commands (a protective stop? a halted servo?)",
                        void_steps=self.follow.unconfirmed - 1)  # fmt: skip

    def _raise_if_held(self) -> None:
        if self._robot_hold is not None:
            raise RobotHold(f"the robot holds the arm ({self._robot_hold}); the episode ends here")

    def _await_answer(self, sent: float) -> None:
        """Lockstep: wait for every stamped stream to carry a stamp after `sent` (the robot advanced on our
        command; its idle re-publications keep their old stamps), then for the success flag sent with it."""

        def answered() -> bool:
            return all(k in self._latest and self._stamp(k) > sent for k in self._streams)

        def success_too() -> bool:
            # Bool has no stamp: the robot publishes it right after the pose, so take the first one received with
            # or after the answering pose (an idle re-publication is older: the robot was busy advancing).
            return self._flag is None or bool(self._flag_seen and self._flag_seen[1] >= self._latest["ee"][1])

        try:
            self._wait_for(answered, "state stamped after the command (lockstep)")
            self._wait_for(success_too, "success flag after the command (lockstep)")
        except TimeoutError as e:
            raise StaleDataError(str(e)) from None
        self._answered += 1

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """A new episode as `cfg.reset` says (module config docs); `SafetyStop` while an e-stop is pressed,
        `StaleDataError` when the robot does not answer within `reset_timeout_s` (both `EpisodeAborted`: an actor
        retries)."""
        super().reset(seed=seed)
        self._poll()
        if self._booked_at is None and "ee" in self._latest:
            self._booked_at = self._stamp("ee")  # the arm's time when this env first asks it for anything

        def cleared() -> bool:  # released here: the robot's status may not have caught up yet
            return not self._robot_estop or self._estop.pressed

        with contextlib.suppress(TimeoutError):
            self._wait_for(cleared, "release reported by the robot", _ROBOT_CLEARS_S)
        if self._estop.pressed or self._robot_estop:
            raise SafetyStop("e-stop is pressed; release it (`robot-rl estop release`) to continue")
        # Before the home move: a stopped arm takes no commands. A silent stop (the not-following watchdog) may be
        # one the driver did not report: it gets the driver's recovery too.
        silent = (self.safety.latched or "").startswith("not_following")
        if self._driver is not None and (self._robot_hold is not None or silent):
            self._driver.recover(self.operator_prompt)
        self.safety.reset()
        if seed is None:
            seed = int(self.np_random.integers(0, 2**31))
        since = time.time()
        try:
            if self.cfg.reset == "topic" or (self.cfg.reset == "home" and self.cfg.scene_reset == "topic"):
                self._reset_via_topic(seed)
            if self.cfg.reset == "home":
                self._move_home(self.home_target())
                if self.cfg.scene_reset == "operator":
                    self.operator_prompt(f"[{self.cfg.name}] the arm is home: reset the scene, then press Enter ")
            elif self.cfg.reset == "human":
                self.operator_prompt(f"[{self.cfg.name}] reset the scene (object, robot), then press Enter ")
            since = time.time()

            self._wait_for(lambda: not self._silent_since(since) and self._aligned(), "fresh, aligned state")
        except TimeoutError as e:
            silent = self._silent_since(since)
            hint = " (a sim robot publishes cameras only with --cameras)" if any("camera" in t for t in silent) else ""
            raise StaleDataError(f"{e}; nothing fresh on {silent}{hint}" if silent else str(e)) from None
        if self._robot_estop:  # the robot answered the reset and still holds its e-stop (its status is latched)
            raise SafetyStop("e-stop is pressed on the robot side; release it (`robot-rl estop release`) to continue")
        with contextlib.suppress(TimeoutError):  # the reset clears a sim robot's hold; its status follows
            self._wait_for(lambda: self._robot_hold is None, "hold cleared by the reset", _ROBOT_CLEARS_S)
        if self._robot_hold is not None:
            raise SafetyStop(f"the robot still holds the arm after the reset ({self._robot_hold}): clear it there")
        self.safety.reset(servo_moved=self.cfg.reset == "home")
        self.follow.reset()
        self._prev_tcp = None
        self._peak_force = 0.0
        self._obj_start = None  # the next observation's object pose
        self._t = 0
        self._pressed = False  # a press while the scene was being reset is no verdict on the new episode
        self._past[:] = REST_ACTION
        if self.held_grip is not None:
            self._past[:, 3] = self.held_grip
        obs = self._observe()
        self._book("resets")
        self.rate.restart()
        return obs, {"success": self._success(), **self.stamps()}

    def _wait_for(self, pred: Any, what: str, timeout_s: float | None = None) -> None:
        timeout_s = self.cfg.reset_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while not pred():
            if time.monotonic() > deadline:
                raise TimeoutError(f"[{self.cfg.name}] no {what} within {timeout_s}s")
            time.sleep(0.002)
            self._poll()

    def _reset_via_topic(self, seed: int) -> None:
        """The robot side resets itself (the sim robot re-seeds its scene) and echoes the seed when done."""
        self._wait_for(lambda: self._reset_pub.matched() > 0, f"subscriber on {self._reset_pub.topic}")
        self._reset_done.clear()
        last_request = 0.0

        def done() -> bool:
            # Re-ask every second: right after discovery the robot's reset_done writer may not see us yet.
            nonlocal last_request
            if time.monotonic() - last_request > 1.0:
                self._reset_pub.publish(msgs.scalar(msgs.INT64, seed))
                last_request = time.monotonic()
            return any(s == seed for s, _ in self._reset_done)

        self._wait_for(done, f"reset_done {seed}")

    def home_target(self) -> np.ndarray:
        """This reset's home: `home_pos` plus a uniform draw within +-`home_box` (the env's seeded generator), kept
        inside the safety workspace."""
        home = np.asarray(self.cfg.home_pos, np.float64)
        box = np.asarray(self.cfg.home_box, np.float64)
        home = home + self.np_random.uniform(-box, box)
        return np.clip(home, self.safety.lo, self.safety.hi)

    def _move_home(self, home: np.ndarray) -> None:
        """Scripted move to `home` with the gripper open (a held grip stays closed: PegInsert's peg stays in the
        hand), every command through the safety layer (step, velocity and acceleration limits, workspace), at the
        control rate (lockstep: one answered command per step)."""
        self._wait_for(lambda: self.robot_state() is not None, "robot state")
        rate = RateKeeper(self.hz)
        opening = 1.0 if self.held_grip is None else 0.5 * (1.0 - self.held_grip)
        deadline = time.monotonic() + self.cfg.reset_timeout_s
        while np.linalg.norm(self.robot_state().tcp_pos - home) > _HOME_TOL_M:
            if time.monotonic() > deadline:
                raise TimeoutError(f"[{self.cfg.name}] home {home.tolist()} not reached in {self.cfg.reset_timeout_s}s")
            sent = time.time()
            self.command_target(home, opening)
            if self.safety.latched is not None:
                raise SafetyStop(self.safety.latched)
            if self.cfg.lockstep:
                self._await_answer(sent)
            else:
                rate.sleep()
                self._poll()

    def close(self) -> None:
        if self._driver is not None:
            self._driver.close()
        if self._own_transport:
            self.tx.close()
