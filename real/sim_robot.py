"""`robot-rl sim-robot`: the MuJoCo PickCube arm behind the same ROS 2 topics and types as a real robot.

What runs: one fixed-rate loop (`physics_hz`, default 100 Hz, real time) that drains the command topics, applies
each command `latency_s` after it arrived, advances the sim env by one tick and publishes the robot state
(`sensor_msgs/JointState`, TCP `geometry_msgs/PoseStamped`), the cube or peg pose (`PoseStamped` on `object_pose`:
a tracker's job on a real cell), with PegInsert the hole's top on `fixture_pose` (what a person at the cell sees;
both reach only the simulated operator, never a policy), `std_msgs/Bool` success, `std_msgs/String` status and
optionally camera frames (`sensor_msgs/Image`, rendered at `camera_hz`).

How the arm is driven: through the env's own `step`, built at `control_hz = physics_hz` with a large `max_step`, so
that each tick's action `(target - tcp) / max_step` puts the env's target exactly on the commanded TCP target, which
the env's arm (`arm`: the Cartesian impedance controller by default, the training env's) then tracks. Physics,
controller, gripper, success and domain randomisation (friction, mass, damping, camera pose via
`RandomizationConfig`, re-sampled at every reset) are therefore the training env's, not a re-implementation. A
push past the env's end-effector force limit holds the arm (status `hold: force limit ...`) until the next reset,
as a Franka's reflex stops it.

A stand-in real cell (`--cell standin`, or `--cell my_cell.yaml` with the same keys): one named set of fixed shifts
that none of the training saw, its values all in `CELLS`: the front camera moved and turned (fixed, as a camera
mounted elsewhere; `camera_shift` / `camera_turn`), lights, colours (the visual randomiser's fields pinned to one
value), friction and mass, command latency. `--cell random:SEED` draws one with every factor outside the training
ranges (`robot_rl.sim.cells.draw_cell`: both cameras' poses and fields of view, the image pipeline, physics, latency
and `stream_jitter_s`, state and frames published late by a random wait). Explicit flags (`--latency`,
`--friction`, ...) override the cell's. The simulated operator still watches through its own eyes: the cube pose
and success topics are the sim's.

Robot-side safety, independent of the policy side: non-finite commands are ignored; no Cartesian command for
`command_timeout_s` after the first one (policy process died, network down) or an e-stop freezes the target at the
TCP's current position, latched until the next reset request (`std_msgs/Int64` seed on `reset`, answered on
`reset_done` once the new scene is published).

Lockstep (`--lockstep`, or `lockstep=true` in the robot config): the command stream is the clock. Each Cartesian
command advances physics by one control period (`physics_hz / control_hz` ticks, in simulated time), after which
the state (and every camera frame) is published stamped with the wall time after the advance, so the policy side
(`RobotEnv` with `lockstep=true`) waits for a state stamped after its command instead of sleeping to a deadline
and runs as fast as both sides compute. Without commands simulated time stands still, so there is no command
watchdog (a slow policy cannot be timed out; the e-stop still holds); while idle the newest state is re-published
with its original stamp, so a late subscriber sees it and it can never be mistaken for the answer to a command.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np
import yaml

from robot_rl.envs import make_env
from robot_rl.errors import ConfigError
from robot_rl.real import msgs
from robot_rl.real.config import RobotConfig
from robot_rl.real.drivers import driver_part, face_class, make_face
from robot_rl.real.robot import COMMAND_READER_QOS, STATE_QOS, EstopListener
from robot_rl.real.safety import Watchdog
from robot_rl.real.timing import stop_on_signals
from robot_rl.sim.cells import draw_cell
from robot_rl.sim.config import EnvConfig, RandomizationConfig, randomization_config
from robot_rl.transport import LATCHED_QOS, Transport, TransportConfig, make_transport

log = logging.getLogger("robot_rl.sim_robot")
_ENV_MAX_STEP = 0.2  # metres: far above any safe per-tick motion, so the env never clips a commanded target

# Cells for `--cell`: each shift just outside what `randomization=visual` (configs/randomization/visual.yaml) draws,
# and physics and latency that no preset a camera run trains with changes. Measured in the sim with a visual-preset
# camera policy (docs/sim_to_real.md, "A stand-in real cell"): the front camera moved this way costs it little, the
# same size drawn in a random direction for both cameras, the wrist camera on the hand too, half its success.
CELLS: dict[str, dict[str, Any]] = {
    "standin": {
        "latency_s": 0.03,  # a driver's command path; training had none
        "camera_shift": {"front": (0.0, -0.03, 0.02)},  # 3.6 cm (preset: 0 .. 3 cm)
        "camera_turn": {"front": (0.0, 0.0, 0.1)},  # rad, about the world's z (preset: 0 .. 0.08 rad)
        "randomization": {
            "friction_scale": (0.7, 0.7),
            "mass_scale": (1.4, 1.4),
            "visual": {
                "light_intensity": (0.5, 0.5),  # preset: x0.6 .. 1.3
                "object_rgb": (0.6, 0.1, 0.1),  # a darker red cube (nominal 0.85, 0.15, 0.15; preset +-0.2)
                "table_rgb": (0.76, 0.6, 0.42),  # a lighter wood (nominal 0.55, 0.45, 0.35; preset +-0.2)
            },
        },
    },
}
_CELL_KEYS = ("latency_s", "noise_std", "stream_jitter_s", "camera_shift", "camera_turn", "camera_fovy",
              "randomization")  # fmt: skip


def load_cell(spec: str) -> dict[str, Any]:
    """`SimRobotConfig` fields of a cell: a name in `CELLS`, `random:SEED` (drawn: `draw_cell`) or a yaml file with
    the same keys. Logs the cell's values in one line."""
    if spec in CELLS:
        raw = CELLS[spec]
    elif spec.startswith("random:"):
        try:
            raw = draw_cell(int(spec.removeprefix("random:")))
        except ValueError:
            raise ConfigError(f"--cell {spec}: expected random:SEED, SEED an integer") from None
    elif spec.endswith((".yaml", ".yml")):
        try:
            raw = yaml.safe_load(open(spec).read()) or {}
        except OSError as e:
            raise ConfigError(f"--cell {spec}: {e.strerror}") from None
    else:
        raise ConfigError(f"--cell {spec}: neither a cell ({', '.join(CELLS)}), random:SEED nor a .yaml file")
    if bad := set(raw) - set(_CELL_KEYS):
        raise ConfigError(f"--cell {spec}: unknown keys {sorted(bad)}; a cell has {list(_CELL_KEYS)}")
    out = {k: v for k, v in raw.items() if k != "randomization"}
    try:
        out["randomization"] = randomization_config(raw.get("randomization") or {})
    except TypeError as e:
        raise ConfigError(f"--cell {spec}: randomization: {e}") from None
    for key in ("camera_shift", "camera_turn"):
        out[key] = {cam: tuple(float(x) for x in v) for cam, v in (raw.get(key) or {}).items()}
        if any(len(v) != 3 for v in out[key].values()):
            raise ConfigError(f"--cell {spec}: {key}: three values per camera")
    out["camera_fovy"] = {cam: float(v) for cam, v in (raw.get("camera_fovy") or {}).items()}
    log.info("cell %s: %s", spec, json.dumps(raw))
    return out


@dataclass
class SimRobotConfig:
    task: str = "PickCube"
    physics_hz: float = 100.0  # loop rate: commands are picked up and state published once per tick
    latency_s: float = 0.0  # a command takes effect this long after it arrived
    # Real time: each state and camera message goes out at the first tick after a fresh uniform wait of up to this
    # long past its stamp (never overtaking its topic's previous one), as a driver's and a camera's pipelines deliver
    # them late by varying amounts. Lockstep: none (the policy side waits for each state anyway).
    stream_jitter_s: float = 0.0
    noise_std: float = 0.0  # metres of Gaussian noise on the published TCP and object positions
    command_timeout_s: float = 0.25  # robot-side watchdog on the Cartesian command stream
    cameras: tuple[str, ...] = ()  # render and publish these model cameras (topic from the robot config)
    camera_hz: float = 30.0  # a USB / GigE camera's class of rate; RobotEnv's limits follow whatever it measures
    image_size: int = 64
    seed: int = 0
    lockstep: bool = False  # physics advances one control period per command received (see the module docstring)
    control_hz: float = 10.0  # lockstep: the policy's control rate, i.e. the simulated time one command advances
    randomization: RandomizationConfig = field(default_factory=RandomizationConfig)
    # A camera's fixed move at every reset, on top of the randomisation's: metres in its parent body's frame (the
    # world for `front`), and a rotation vector (rad) in that frame.
    camera_shift: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    camera_turn: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    camera_fovy: dict[str, float] = field(default_factory=dict)  # degrees added to a camera's field of view
    # The env's arm (sim/envs.py EnvConfig.arm): osc (Cartesian impedance, force-limited: a Franka) | mocap (stiff: a
    # position-controlled arm) | "": the command's, mocap under twists (MoveIt Servo drives a UR's position
    # controller, which tracks within milliseconds; an impedance arm's lag under servo's integration oscillates).
    arm: str = ""
    # Fault drill: this many simulated seconds after each reset the arm stops where it is and drops Cartesian
    # commands while its state and an "ok" status stream on, as a UR protective stop or a halted servo does (what
    # RobotEnv's not-following watchdog must catch); the next reset clears it. 0: never.
    freeze_after_s: float = 0.0
    # A stock driver's face (`real/drivers.py`: franka | ur5e): its topics, types, frames, services and faults
    # instead of ours. "": the sim robot's own (our status topic, our gripper topic).
    driver: str = ""
    # The driver's fault drills in force from the start (`StandinFace.drill`), e.g. ("mute",): a UR never heard.
    drills: tuple[str, ...] = ()


class SimRobot:
    """One simulated arm; `tick()` is one loop iteration (tests and benchmarks may drive it directly)."""

    def __init__(self, cfg: SimRobotConfig, robot: RobotConfig, transport: Transport | None = None) -> None:
        self.cfg, self.robot = cfg, robot
        rand = dataclasses.replace(cfg.randomization, action_latency=0, action_latency_max=0)  # latency: here, in s
        env_cfg = EnvConfig(
            task=cfg.task, obs="state", control_hz=cfg.physics_hz, max_step=_ENV_MAX_STEP, max_episode_steps=2**62,
            terminate_on_success=False, randomization=rand,
            arm=cfg.arm or ("mocap" if robot.command_type == "twist" else "osc"),
        )  # fmt: skip
        if (force := face_class(cfg.driver).force_limit_n) is not None:
            env_cfg = dataclasses.replace(env_cfg, ee_force_limit=force)
        self.env = make_env(env_cfg, seed=cfg.seed)
        u = self.env.unwrapped
        self.model, self.data = u.model, u.data
        self._fovy = self.model.cam_fovy.copy()  # the randomiser restores fields of view only when it draws them
        self._tcp_site = self.model.site("tcp").id
        self._object = self.model.body("cube" if cfg.task == "PickCube" else "peg").id
        # An insertion's fixture, the hole's top: a person at the cell sees it (the simulated operator's eyes).
        self._fixture = self.model.site("hole_top").id if cfg.task == "PegInsert" else None
        names = robot.joint_names + robot.gripper_joints
        self._joint_names = names
        joints = [self.model.joint(n) for n in self._model_joints(cfg.driver, names)]
        self._qadr = np.array([j.qposadr[0] for j in joints])
        self._dadr = np.array([j.dofadr[0] for j in joints])
        self.rng = np.random.default_rng(cfg.seed)
        if cfg.lockstep and abs(cfg.physics_hz / cfg.control_hz - round(cfg.physics_hz / cfg.control_hz)) > 1e-6:
            raise ValueError(f"lockstep: physics_hz {cfg.physics_hz} is no multiple of control_hz {cfg.control_hz}")
        self.ticks_per_command = max(1, round(cfg.physics_hz / cfg.control_hz))
        # Lockstep: no commands, no simulated time, nothing to time out (the e-stop trips it all the same).
        self.watchdog = Watchdog(0.0, 0.0 if cfg.lockstep else cfg.command_timeout_s)
        self.sim_time = 0.0  # seconds of simulated time since start; the lockstep clock for `latency_s`
        self.tx = transport or make_transport(
            TransportConfig(backend=robot.backend, domain_id=robot.domain_id, namespace=robot.namespace,
                            node_name="sim_robot")
        )  # fmt: skip
        self._own_transport = transport is None
        self._cmd_sub = self.tx.subscription(robot.command_topic, msgs.COMMAND[robot.command_type], COMMAND_READER_QOS)
        self._grip_sub = self.tx.subscription(robot.gripper_topic, msgs.FLOAT64, COMMAND_READER_QOS)
        self._reset_sub = self.tx.subscription(robot.reset_topic, msgs.INT64)
        self._estop = EstopListener(self.tx, robot.estop_topic)
        self._pubs = {
            "joints": self.tx.publisher(robot.joint_state_topic, msgs.JOINT_STATE, STATE_QOS),
            "ee": self.tx.publisher(robot.ee_pose_topic, msgs.POSE, STATE_QOS),
            "object": self.tx.publisher(robot.object_pose_topic or "object_pose", msgs.POSE, STATE_QOS),
            "success": self.tx.publisher(robot.success_topic or "success", msgs.BOOL, STATE_QOS),
            "wrench": self.tx.publisher(robot.wrench_topic or "ee_wrench", msgs.WRENCH, STATE_QOS),
            "status": self.tx.publisher(robot.status_topic, msgs.STRING, LATCHED_QOS),  # late joiners see a hold
            "reset_done": self.tx.publisher(robot.reset_done_topic, msgs.INT64),
        }
        if self._fixture is not None:
            fixture_topic = robot.fixture_pose_topic or "fixture_pose"
            self._pubs["fixture"] = self.tx.publisher(fixture_topic, msgs.POSE, STATE_QOS)
        # A camera the config reads compressed gets a jpeg CompressedImage (image_transport's), any other an rgb8 Image.
        cams = {c.name: c for c in robot.cameras}
        self._compressed = {c: c in cams and cams[c].compressed for c in cfg.cameras}
        for c in cfg.cameras:
            kind = msgs.COMPRESSED_IMAGE if self._compressed[c] else msgs.IMAGE
            self._pubs[f"camera:{c}"] = self.tx.publisher(cams[c].topic if c in cams else f"camera/{c}/image", kind,
                                                          STATE_QOS)  # fmt: skip
        self.frames: dict[str, np.ndarray] = {}  # the newest rendered RGB frame per camera (a face may re-encode it)
        self._renderer = None
        if cfg.cameras:
            from robot_rl.sim.rendering import CameraRenderer

            # The visual randomisation's image pipeline (exposure, noise, ...), as the training env's renderer has it.
            process = u._randomizer.visual.frame
            self._renderer = CameraRenderer(self.model, tuple(cfg.cameras), cfg.image_size, process)
        self._next_frame = 0.0
        self._last_msgs: dict[str, tuple[Any, Any]] = {}  # publisher key -> (publisher, newest message)
        self._last_publish = 0.0
        self._pending: deque[tuple[float, str, Any]] = deque()  # (apply at, kind, message)
        self._outbox: list[tuple[float, int, Any, Any]] = []  # stream jitter: (send at, order, publisher, message)
        self._order = itertools.count()
        self._last_due: dict[str, float] = {}  # topic -> when its newest message goes out
        self._twist = np.zeros(3)
        self.hold_reason: str | None = None
        self._status = ""
        self._status_sent = 0.0
        self.ticks = 0
        self.face = make_face(cfg.driver, self)
        for kind in cfg.drills:
            self.face.drill(kind)
        self._reset_scene(cfg.seed)

    # ------------------------------------------------------------------------------------------ helpers

    def tcp(self) -> np.ndarray:
        return self.data.site_xpos[self._tcp_site].copy()

    @staticmethod
    def _model_joints(driver: str, names: list[str]) -> list[str]:
        """The sim arm's joints behind a robot config's names: its own, or the driver's joint map."""
        if not driver:
            return names
        mapping = driver_part(driver, 3)
        return [mapping.get(n, n) for n in names]

    def _reset_scene(self, seed: int) -> None:
        self.model.cam_fovy[:] = self._fovy
        _, info = self.env.reset(seed=seed)
        self._reach = self.env.unwrapped.workspace  # this scene's: its table top sets the floor
        self._move_cameras()
        self._success = bool(info["success"])
        self._target = self.tcp()
        self._gripper = 1.0
        self._twist[:] = 0.0
        self._pending.clear()
        self._outbox.clear()  # the old scene's late messages are dropped: the new one is published at once
        self._last_due.clear()
        self.watchdog.reset()
        self.hold_reason = None
        self._reset_time = time.time()
        self._reset_sim = self.sim_time
        self.frozen = False

    def _move_cameras(self) -> None:
        """The cell's fixed camera moves, after the reset's randomisation restored and drew the camera poses."""
        m = self.model
        for name, shift in self.cfg.camera_shift.items():
            m.cam_pos[m.camera(name).id] += shift
        for name, turn in self.cfg.camera_turn.items():
            angle, i, dq = float(np.linalg.norm(turn)), m.camera(name).id, np.zeros(4)
            if angle > 0.0:
                mujoco.mju_axisAngle2Quat(dq, np.asarray(turn) / angle, angle)
                mujoco.mju_mulQuat(m.cam_quat[i], dq, m.cam_quat[i].copy())
        for name, degrees in self.cfg.camera_fovy.items():
            m.cam_fovy[m.camera(name).id] += degrees

    def _hold(self, reason: str) -> None:
        """Freeze the target where the TCP is now: the arm stops within this tick, whatever was commanded."""
        if self.hold_reason is None:
            self.hold_reason = reason
            self._target = self.tcp()
            self._twist[:] = 0.0
            self._pending.clear()
            log.warning("holding: %s", reason)
            self.face.on_hold(reason)

    def _drain(self, now: float) -> tuple[int, int]:
        """Queue what arrived (to act `latency_s` after `now`); (Cartesian commands, gripper commands) taken."""
        n_cmd = n_grip = 0
        for m in self._cmd_sub.take():
            if msgs.stamp_of(m) >= self._reset_time:  # a late command from the previous episode must not act
                self.watchdog.feed_action(now)
                self._pending.append((now + self.cfg.latency_s, "cmd", m))
                n_cmd += 1
        for m in self._grip_sub.take():
            if self.face.reads_gripper_topic:
                self._pending.append((now + self.cfg.latency_s, "gripper", m))
                n_grip += 1
        pressed = self._estop.poll() or self._estop.pressed
        for m in self._reset_sub.take():  # after the commands: a reset drops whatever was still pending
            if pressed:  # a reset moves the arm: not while the e-stop is pressed (the requester sees the hold)
                log.warning("reset %d ignored: the e-stop is pressed", int(m.data))
            else:
                self._reset_scene(int(m.data))
                self._publish_state(time.time(), jitter=False)
            self._pubs["reset_done"].publish(msgs.scalar(msgs.INT64, int(m.data)))
        if pressed:  # held while pressed, through reset requests too
            self.watchdog.trip("estop")
        return n_cmd, n_grip

    def _apply_due(self, now: float) -> None:
        while self._pending and self._pending[0][0] <= now:
            _, kind, m = self._pending.popleft()
            if self.hold_reason is not None or (kind == "cmd" and (self.frozen or not self.face.takes_commands())):
                continue
            if kind == "gripper":
                if np.isfinite(m.data):
                    self._gripper = float(np.clip(m.data, 0.0, 1.0))
            elif self.robot.command_type == "pose":
                pos, _ = msgs.pose_of(m)
                if np.isfinite(pos).all():
                    self._target = pos
            else:
                lin, _ = msgs.twist_of(m)
                if np.isfinite(lin).all():
                    self._twist = lin

    def _send(self, key: str, pub: Any, m: Any, stamp: float, jitter: bool) -> None:
        """Publish `m` on topic `key` now or, with stream jitter, a fresh random wait after `stamp` (each topic its own
        pipeline, never overtaking its previous message)."""
        self._last_msgs[key] = (pub, m)
        if not jitter or self.cfg.stream_jitter_s <= 0.0 or self.cfg.lockstep:
            pub.publish(m)
            return
        due = max(stamp + self.rng.uniform(0.0, self.cfg.stream_jitter_s), self._last_due.get(key, 0.0))
        self._last_due[key] = due
        heapq.heappush(self._outbox, (due, next(self._order), pub, m))

    def _flush(self, now: float) -> None:
        """Stream jitter: the messages whose wait is over."""
        while self._outbox and self._outbox[0][0] <= now:
            _, _, pub, m = heapq.heappop(self._outbox)
            pub.publish(m)

    def _publish_state(self, stamp: float, jitter: bool = True) -> None:
        d, r = self.data, self.robot
        render = self._renderer is not None and (self.cfg.lockstep or stamp >= self._next_frame)
        tcp = self.tcp() + self.rng.normal(0.0, self.cfg.noise_std, 3) * (self.cfg.noise_std > 0)
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, d.site_xmat[self._tcp_site])
        obj = d.xpos[self._object] + self.rng.normal(0.0, self.cfg.noise_std, 3) * (self.cfg.noise_std > 0)
        out = {
            "joints": msgs.joint_state(self._joint_names, d.qpos[self._qadr], d.qvel[self._dadr], stamp),
            "ee": msgs.pose_stamped(tcp, quat, stamp, r.base_frame),
            "object": msgs.pose_stamped(obj, d.xquat[self._object], stamp, r.base_frame),
            "success": msgs.scalar(msgs.BOOL, self._success),
            # The force the world exerts on the hand, as the sim env's `ee_force` (a Franka's external wrench).
            "wrench": msgs.wrench_stamped(self.env.unwrapped.contacts.ee_force, np.zeros(3), stamp, r.base_frame),
        }
        if self._fixture is not None:
            out["fixture"] = msgs.pose_stamped(d.site_xpos[self._fixture], np.array([1.0, 0.0, 0.0, 0.0]), stamp,
                                               r.base_frame)  # fmt: skip
        if render:
            self._next_frame = stamp + 1.0 / self.cfg.camera_hz
            self.frames = self._renderer.render(d)
            for name, img in self.frames.items():
                encode = msgs.jpeg_msg if self._compressed[name] else msgs.image_msg
                out[f"camera:{name}"] = encode(img, stamp, name)
        for key, m in self.face.state(out, stamp).items():
            self._send(key, self._pubs[key], m, stamp, jitter)
        self._last_publish = time.monotonic()

    def _republish(self) -> None:
        """The newest state again, original stamps and all: nothing moved since (lockstep, idle)."""
        for pub, m in self._last_msgs.values():
            pub.publish(m)
        self._last_publish = time.monotonic()

    def _publish_status(self, now: float) -> None:
        self.face.tick(now)
        if self.cfg.driver:  # a stock driver reports through its own topics (the face's)
            return
        status = "ok" if self.hold_reason is None else f"hold: {self.hold_reason}"
        if self.hold_reason == "estop" and not self._estop.pressed:
            status = "hold: estop released, waiting for a reset"  # a deploy node may reset now
        if status != self._status or now - self._status_sent > 0.5:
            self._pubs["status"].publish(msgs.string(status))
            self._status, self._status_sent = status, now

    # --------------------------------------------------------------------------------------------- loop

    def _physics_tick(self, now: float) -> None:
        """One physics tick at time `now` (wall time in real time, simulated time in lockstep)."""
        if not self.watchdog.check(now):
            self._hold(self.watchdog.latched or "watchdog")
        if not self.frozen and 0.0 < self.cfg.freeze_after_s <= self.sim_time - self._reset_sim:
            self.frozen, self._target, self._twist[:] = True, self.tcp(), 0.0  # silent: the status stays "ok"
            log.warning("fault drill: dropping Cartesian commands until the next reset")
        self._apply_due(now)
        if self.hold_reason is None and self.robot.command_type == "twist":
            # Servo integrates onto its own target; the cell's reach bounds it (never a robot config's workspace: the
            # policy side's, which a lab narrows around its task and servo does not know).
            self._target = np.clip(self._target + self._twist / self.cfg.physics_hz, *self._reach)
        tcp = self.tcp()
        action = np.empty(4)
        action[:3] = np.clip((self._target - tcp) / _ENV_MAX_STEP, -1.0, 1.0)
        action[3] = 1.0 - 2.0 * self._gripper  # the env's finger target is FINGER_OPEN * (1 - a) / 2
        info = self.env.step(action)[4]
        self._success = bool(info["success"])
        if info["safety_failure"]:
            self._hold(f"force limit: {self.env.unwrapped.contacts.step_ee_force:.0f} N on the end effector")
        self.ticks += 1
        self.sim_time += 1.0 / self.cfg.physics_hz

    def tick(self) -> None:
        now = time.time()
        self._drain(now)
        self._physics_tick(now)
        stamp = time.time()
        self._publish_state(stamp)
        self._flush(stamp)
        self._publish_status(stamp)

    def lockstep_tick(self, gripper_wait_s: float = 0.02) -> bool:
        """Lockstep: one control period of physics per Cartesian command that arrived, then publish; False (and
        at most a re-publish of the unchanged state) when none did."""
        n_cmd, n_grip = self._drain(self.sim_time)
        if n_cmd and not n_grip:
            # A policy step is a pose and a gripper command on two topics; DDS does not order them across topics.
            deadline = time.monotonic() + gripper_wait_s
            while not n_grip and time.monotonic() < deadline:
                time.sleep(0.001)
                more_cmd, n_grip = self._drain(self.sim_time)
                n_cmd += more_cmd
        if not n_cmd:
            if not self._published_recently():
                self._republish()
            self._publish_status(time.time())
            return False
        for _ in range(n_cmd * self.ticks_per_command):
            self._physics_tick(self.sim_time)
        stamp = time.time()  # after the advance, so after the command was sent
        self._publish_state(stamp)
        self._publish_status(stamp)
        return True

    def _published_recently(self) -> bool:
        return time.monotonic() - self._last_publish < 0.05  # idle re-publish at 20 Hz

    def run(self, stop: threading.Event, duration_s: float = 0.0) -> None:
        """Tick at `physics_hz` on absolute deadlines (lockstep: on each command) until `stop` is set (or
        `duration_s` of wall time passed)."""
        from robot_rl.real.timing import RateKeeper, frozen_heap

        end = time.monotonic() + duration_s if duration_s > 0 else float("inf")
        with frozen_heap():
            if self.cfg.lockstep:
                while not stop.is_set() and time.monotonic() < end:
                    if not self.lockstep_tick():
                        time.sleep(0.0005)
                log.info("sim robot (lockstep) stopped after %d ticks, %.1f s simulated", self.ticks, self.sim_time)
                return
            rate = RateKeeper(self.cfg.physics_hz)
            while not stop.is_set() and time.monotonic() < end:
                self.tick()
                rate.sleep()
        log.info("sim robot stopped after %d ticks; %s", self.ticks, rate.stats())

    def close(self) -> None:
        self.face.close()
        if self._renderer is not None:
            self._renderer.close()
        self.env.close()
        if self._own_transport:
            self.tx.close()


def serve_sim_robot(cfg: SimRobotConfig, robot: RobotConfig, duration_s: float = 0.0, cell: str = "") -> None:
    """`robot-rl sim-robot`: the MuJoCo arm on `robot`'s topics until SIGINT / SIGTERM (or `duration_s` seconds)."""
    stop = stop_on_signals()
    node = SimRobot(cfg, robot)
    mode = f"lockstep at {cfg.control_hz:g} Hz control" if cfg.lockstep else "real time"
    log.info("serving %s on domain %d, namespace %s at %.0f Hz (%s)%s", cfg.task, robot.domain_id, robot.namespace,
             cfg.physics_hz, mode, f", cell {cell}" if cell else "")  # fmt: skip
    try:
        node.run(stop, duration_s)
    finally:
        node.close()
