"""A UR5e behind Universal_Robots_ROS2_Driver, MoveIt Servo and a Robotiq 2F-85: its stand-in and its link.

Read in the sources (UniversalRobots/Universal_Robots_ROS2_Driver main @696e1a7, Jul 2026; moveit2 main @8fcb5d2,
Aug 2026; PickNikRobotics/ros2_robotiq_gripper main @3b6cf8f, May 2026; ros-drivers/usb_cam @772b25f, Feb 2026):
- ur_controllers/src/gpio_controller.cpp (`io_and_status_controller`): `~/safety_mode` (ur_dashboard_msgs/SafetyMode),
  `~/robot_mode`, `~/robot_program_running` (std_msgs/Bool), reliable + transient local, published on change;
  `~/resend_robot_program` (std_srvs/Trigger).
- ur_robot_driver/src/dashboard_client_ros.cpp (node `dashboard_client`): `~/unlock_protective_stop` (Trigger).
- ur_robot_driver/config/ur_controllers.yaml: joint_state_broadcaster, tcp_pose_broadcaster (`~/pose`, frame `base`,
  child `tool0_controller`), force_torque_sensor_broadcaster (`~/wrench`, frame `tool0_controller`),
  forward_position_controller (what servo drives); ur5e_update_rate.yaml: 500 Hz (the stand-in streams at its
  physics rate). doc/robot_state_helper.rst: a protective stop only pauses the program; restart it after one.
- moveit_servo/src/servo_node.cpp: `~/delta_twist_cmds` (TwistStamped, SystemDefaultsQoS), `~/switch_command_type`
  (moveit_msgs/ServoCommandType: no twist acts before TWIST), `~/status` (ServoStatus, SystemDefaultsQoS, every
  loop), `incoming_command_timeout` (halts when commands stop).
- robotiq_description/config/robotiq_controllers.yaml: `robotiq_gripper_controller`
  (parallel_gripper_action_controller: control_msgs/action/ParallelGripperCommand on `~/gripper_cmd`), joint
  `robotiq_85_left_knuckle_joint` (the only one with state interfaces on hardware: its own /joint_states carries
  only it), goal_tolerance 0.02, allow_stalling.
- usb_cam/src/usb_cam_node.cpp: image_transport camera publisher on `image_raw` (+ `camera_info`, and the compressed
  plugin's `image_raw/compressed`), QoS depth 100 (reliable); pixel_format yuyv publishes `yuv422_yuy2`.
Modelled, not read: the dashboard server's refusal to unlock within 5 s of a protective stop (PolyScope's
"Cannot unlock protective stop until 5s after occurrence"), and which servo halt a drill raises.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from robot_rl.errors import ConfigError
from robot_rl.real import msgs
from robot_rl.real.drivers import DriverLink, RclNode, StandinFace, rcl_qos
from robot_rl.real.robot import STATE_QOS

if TYPE_CHECKING:
    from robot_rl.real.config import RobotConfig
    from robot_rl.real.sim_robot import SimRobot

log = logging.getLogger("robot_rl.ur")

# The sim arm is a 7-DoF Panda: the UR's six joints stand on its joint1..6 (joint7 is not published); the Robotiq
# knuckle's value is derived from the sim fingers' gap (`UrStandin.state`), finger_left only locates it.
UR_JOINTS = {
    "shoulder_pan_joint": "joint1", "shoulder_lift_joint": "joint2", "elbow_joint": "joint3",
    "wrist_1_joint": "joint4", "wrist_2_joint": "joint5", "wrist_3_joint": "joint6",
    "robotiq_85_left_knuckle_joint": "finger_left",
}  # fmt: skip
IO = "/io_and_status_controller"
DASHBOARD = "/dashboard_client"
KNUCKLE_CLOSED = 0.8  # rad, robotiq_85_left_knuckle_joint's upper limit
_FINGER_GAP = 0.08  # the sim fingers' open gap (sim/envs.py FINGER_OPEN per finger)
UNLOCK_AFTER_S = 5.0  # PolyScope refuses to unlock a protective stop sooner
_GOAL_TOLERANCE = 0.02  # robotiq_controllers.yaml
_HALTS = ("HALT_FOR_SINGULARITY", "HALT_FOR_COLLISION", "JOINT_BOUND")


def servo_node(cfg: RobotConfig) -> str:
    """MoveIt Servo's node name, from its twist topic (`/servo_node/delta_twist_cmds` -> `/servo_node`)."""
    return cfg.command_topic.rsplit("/", 1)[0]


def usb_cam_topics(topic: str) -> tuple[str, str, str]:
    """(raw, compressed, camera_info) of the usb_cam node that publishes `topic` (either of its image topics)."""
    raw = topic.removesuffix("/compressed")
    return raw, f"{raw}/compressed", f"{raw.rsplit('/', 1)[0]}/camera_info"


class UrStandin(StandinFace):
    """`sim-robot --driver ur5e`: the sim arm as the UR driver, MoveIt Servo, the Robotiq and usb_cam present it.

    A protective stop (the sim's force limit, or `drill("protective_stop")`) sets the safety mode PROTECTIVE_STOP
    and stops the program; the state streams on, Cartesian commands are dropped, through scene resets, until
    `unlock_protective_stop` (refused for `UNLOCK_AFTER_S`) and `resend_robot_program`. A servo halt
    (`drill("JOINT_BOUND")`, ...) drops commands with that status until the next scene reset. `drill("mute")`
    publishes none of the status topics from then on (a driver that is not heard).
    """

    reads_gripper_topic = False  # the Robotiq takes its action (gripper-bridge), not our Float64
    force_limit_n = 150.0  # a UR5e's protective stop on TCP force: PolyScope's default safety limit (Normal mode)

    def __init__(self, robot: SimRobot) -> None:
        super().__init__(robot)
        from control_msgs.action import ParallelGripperCommand
        from moveit_msgs.msg import ServoStatus
        from moveit_msgs.srv import ServoCommandType
        from rclpy.action import ActionServer, CancelResponse
        from rclpy.callback_groups import ReentrantCallbackGroup
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Bool
        from std_srvs.srv import Trigger
        from ur_dashboard_msgs.msg import RobotMode, SafetyMode

        cfg = robot.robot
        self.status_topics = True
        self._lock = threading.Lock()
        self.safety = SafetyMode.NORMAL
        self.running = True
        # Servo's command type is TWIST; pose targets go to a controller that needs no switch (ur5e_compliant.yaml).
        self.twist = cfg.command_type != "twist"
        self.halt = ServoStatus.NO_WARNING
        self.stopped_at: float | None = None  # when the newest protective stop began (wall time)
        self._release = False  # the program restarted: the sim's own hold goes (in the loop's thread)
        self._brake = False  # a stop began: the arm stops at the next tick (in the loop's thread)
        self._force = False  # a force-limit drill: the sim's own hold at the next tick (in the loop's thread)
        self._timed_out: float | None = None  # when servo's incoming_command_timeout halted the arm
        self._seen_reset: float | None = None  # the sim's newest scene reset
        self._sent: dict[str, Any] = {}  # status topic -> newest value published (they publish on change)
        self._types = {"SafetyMode": SafetyMode, "RobotMode": RobotMode, "Bool": Bool, "ServoStatus": ServoStatus,
                       "JointState": JointState, "Result": ParallelGripperCommand.Result}  # fmt: skip
        self.ros = RclNode("ur_standin", cfg)
        n, servo = self.ros.node, servo_node(cfg)
        self._status_pubs = {
            "safety_mode": n.create_publisher(SafetyMode, f"{IO}/safety_mode", rcl_qos(latched=True)),
            "robot_mode": n.create_publisher(RobotMode, f"{IO}/robot_mode", rcl_qos(latched=True)),
            "robot_program_running": n.create_publisher(Bool, f"{IO}/robot_program_running", rcl_qos(latched=True)),
        }
        self._servo_pub = n.create_publisher(ServoStatus, f"{servo}/status", rcl_qos())
        self._knuckle_pub = n.create_publisher(JointState, cfg.joint_state_topic, rcl_qos())  # the Robotiq's own
        n.create_service(Trigger, f"{DASHBOARD}/unlock_protective_stop", self._unlock)
        n.create_service(Trigger, f"{IO}/resend_robot_program", self._resend)
        if cfg.command_type == "twist":
            n.create_service(ServoCommandType, f"{servo}/switch_command_type", self._switch)
        self._gripper = ActionServer(n, ParallelGripperCommand, cfg.gripper_bridge.action, self._grip,
                                     cancel_callback=lambda _: CancelResponse.ACCEPT,
                                     callback_group=ReentrantCallbackGroup())  # fmt: skip
        f = [robot.model.joint(j) for j in ("finger_left", "finger_right")]
        self._fingers = np.array([j.qposadr[0] for j in f]), np.array([j.dofadr[0] for j in f])
        self._arm_dofs = np.array([robot.model.joint(f"joint{i}").dofadr[0] for i in range(1, 8)])
        self.serve_drills(n, "ur_standin/fault")
        self._add_camera_publishers()

    def _add_camera_publishers(self) -> None:
        """usb_cam's three topics per camera, whichever of its two image topics the robot config reads."""
        r = self.robot
        cams = {c.name: c for c in r.robot.cameras}
        for name in r.cfg.cameras:
            raw, packed, info = usb_cam_topics(cams[name].topic if name in cams else f"camera/{name}/image")
            read = f"camera:{name}"
            own = r._pubs[read]  # the sim robot's: the topic the config reads, in its type
            if name in cams and cams[name].compressed:
                r._pubs[f"{read}:raw"] = r.tx.publisher(raw, msgs.IMAGE, STATE_QOS)
                r._pubs[f"{read}:compressed"] = own
            else:
                r._pubs[f"{read}:raw"] = own
                r._pubs[f"{read}:compressed"] = r.tx.publisher(packed, msgs.COMPRESSED_IMAGE, STATE_QOS)
            r._pubs[f"{read}:info"] = r.tx.publisher(info, msgs.CAMERA_INFO, STATE_QOS)

    # -------------------------------------------------------------------------------------------- state

    def takes_commands(self) -> bool:
        from ur_dashboard_msgs.msg import SafetyMode

        with self._lock:
            normal = self.safety in (SafetyMode.NORMAL, SafetyMode.REDUCED)
            return normal and self.running and self.twist and self.halt == self._types["ServoStatus"].NO_WARNING

    def state(self, out: dict[str, Any], stamp: float) -> dict[str, Any]:
        """The arm's six joints on joint_state_broadcaster's message, the knuckle on the Robotiq's own, the wrench in
        tool0_controller, cameras as usb_cam sends them."""
        r, cfg = self.robot, self.robot.robot
        joints, n = out.pop("joints"), len(cfg.joint_names)
        out["joints"] = msgs.joint_state(joints.name[:n], joints.position[:n], joints.velocity[:n], stamp)
        self._publish_knuckle(stamp)
        rot = r.data.site_xmat[r._tcp_site].reshape(3, 3)  # TCP -> base, the pose's orientation
        force, torque = msgs.wrench_of(out["wrench"])
        out["wrench"] = msgs.wrench_stamped(rot.T @ force, rot.T @ torque, stamp, cfg.ee_frame)
        for name, rgb in r.frames.items():
            key = f"camera:{name}"
            if (own := out.pop(key, None)) is None:  # not rendered this tick
                continue
            # image_transport encodes a transport only while it has a subscriber: the robot PC's CPU is spared
            for part, encode in ((":raw", msgs.yuyv_msg), (":compressed", msgs.jpeg_msg)):
                if r._pubs[key + part].matched():
                    reuse = part == ":compressed" and r._compressed[name]  # the sim robot's jpeg of this frame
                    out[key + part] = own if reuse else encode(rgb, stamp, name)
            out[f"{key}:info"] = msgs.camera_info(*rgb.shape[:2], stamp, name)
        return out

    def _knuckle(self) -> tuple[float, float]:
        """(angle, velocity) of the Robotiq knuckle from the sim fingers: 0 rad at the open gap, 0.8 rad closed."""
        qadr, dadr = self._fingers
        gap, rate = float(self.robot.data.qpos[qadr].sum()), float(self.robot.data.qvel[dadr].sum())
        scale = KNUCKLE_CLOSED / _FINGER_GAP
        return float(np.clip(KNUCKLE_CLOSED - gap * scale, 0.0, KNUCKLE_CLOSED)), -rate * scale

    def _publish_knuckle(self, stamp: float) -> None:
        m = self._types["JointState"]()
        m.header.stamp.sec, m.header.stamp.nanosec = divmod(int(stamp * 1e9), 10**9)
        angle, rate = self._knuckle()
        m.name, m.position, m.velocity = ["robotiq_85_left_knuckle_joint"], [angle], [rate]
        self._knuckle_pub.publish(m)

    # --------------------------------------------------------------------------------------------- faults

    def on_hold(self, reason: str) -> None:
        """The sim's force limit is the UR's protective stop; its command watchdog is servo's
        incoming_command_timeout, a silent halt that the next command ends (`tick`)."""
        if reason.startswith("force limit"):
            self._protective_stop(reason)
        elif reason.startswith("no_action"):
            self._timed_out = time.time()

    def drill(self, kind: str) -> None:
        """A fault for tests and benches, also on the `ur_standin/fault` topic (std_msgs/String): "protective_stop"
        (unannounced cause), "force_limit" (the sim's contact check, as a collision would), a servo halt named as
        in ServoStatus (e.g. "JOINT_BOUND"), or "mute" (the status topics go silent: a driver not heard)."""
        with self._lock:
            if kind == "force_limit":
                self._force = True
            elif kind == "mute":
                self.status_topics = False
            elif kind in _HALTS:
                self.halt, self._brake = getattr(self._types["ServoStatus"], kind), True
            elif kind != "protective_stop":
                raise ConfigError(f"drill {kind!r}: protective_stop, force_limit, mute or one of {', '.join(_HALTS)}")
        if kind == "protective_stop":
            self._protective_stop("drill")
        log.warning("drill: %s", kind)

    def _freeze(self, stop: bool = False) -> None:
        """The target where the TCP is (later twists are dropped); `stop`: the arm's joints at rest too (modelled: a
        UR's brake ramp taken as short against a control period; the impedance arm would otherwise overshoot the
        target and spring back, which reads as following)."""
        r = self.robot
        r._target, r._twist[:] = r.tcp(), 0.0
        if stop:
            r.data.qvel[self._arm_dofs] = 0.0

    def _protective_stop(self, why: str) -> None:
        from ur_dashboard_msgs.msg import SafetyMode

        with self._lock:
            self.safety, self.running, self.stopped_at = SafetyMode.PROTECTIVE_STOP, False, time.time()
            self._brake = True
        log.warning("protective stop (%s): the program stops, the state streams on", why)

    # ------------------------------------------------------------------------------------------ services

    def _unlock(self, _req: Any, res: Any) -> Any:
        from ur_dashboard_msgs.msg import SafetyMode

        with self._lock:
            if self.safety == SafetyMode.PROTECTIVE_STOP and time.time() - self.stopped_at < UNLOCK_AFTER_S:
                res.success, res.message = False, "Cannot unlock protective stop until 5s after occurrence"
                return res
            if self.safety == SafetyMode.PROTECTIVE_STOP:
                self.safety = SafetyMode.NORMAL
        res.success, res.message = True, "Protective stop releasing"
        return res

    def _resend(self, _req: Any, res: Any) -> Any:
        from ur_dashboard_msgs.msg import SafetyMode

        with self._lock:
            ok = self.safety in (SafetyMode.NORMAL, SafetyMode.REDUCED)
            self.running = self.running or ok
            self._release = self._release or ok
        res.success, res.message = ok, "" if ok else "the robot is not in normal safety mode"
        return res

    def _switch(self, req: Any, res: Any) -> Any:
        with self._lock:
            self.twist = req.command_type == req.TWIST
        res.success = req.command_type in (req.JOINT_JOG, req.TWIST, req.POSE)
        return res

    def _grip(self, goal: Any) -> Any:
        """ParallelGripperCommand: the knuckle target moves the sim fingers; done within the controller's goal
        tolerance, or stalled (on an object), or cancelled (the bridge's next goal)."""
        target = float(np.clip(goal.request.command.position[0], 0.0, KNUCKLE_CLOSED))
        self.robot._gripper = 1.0 - target / KNUCKLE_CLOSED
        result, last, still = self._types["Result"](), None, time.monotonic()
        while self.ros.context.ok():
            angle, _ = self._knuckle()
            if goal.is_cancel_requested:
                goal.canceled()
                return result
            if abs(angle - target) < _GOAL_TOLERANCE:
                result.reached_goal = True
                break
            if last is None or abs(angle - last) > 1e-4:
                last, still = angle, time.monotonic()
            elif time.monotonic() - still > 0.05 + 0.2:  # stall_timeout, after the fingers started
                result.stalled = True
                break
            time.sleep(0.01)
        result.state.name, result.state.position = ["robotiq_85_left_knuckle_joint"], [self._knuckle()[0]]
        goal.succeed()
        return result

    # ------------------------------------------------------------------------------------------- per tick

    def tick(self, now: float) -> None:
        """A stop brakes the arm; the program's restart ends the sim's own force hold, a scene reset a servo halt;
        the status topics on change, servo's every tick."""
        r = self.robot
        with self._lock:
            if self._brake:
                self._brake = False
                self._freeze(stop=True)
            if self._release:
                self._release = False
                if r.hold_reason is not None and r.hold_reason.startswith("force limit"):
                    r.hold_reason = None
                    self._freeze()
            if self._timed_out is not None and (r.watchdog.last_action or 0.0) > self._timed_out:
                self._resume(r)
            if r._reset_time != self._seen_reset:
                self._seen_reset, self.halt = r._reset_time, self._types["ServoStatus"].NO_WARNING
            state = {"safety_mode": self.safety, "robot_program_running": self.running}
            halt, force, self._force = self.halt, self._force, False
        if force:  # a servo timeout's silent halt is no reason to miss a collision
            self._resume(r)
            r._hold("force limit: drill")  # the face's on_hold makes it a protective stop
        if not self.status_topics:
            return
        from ur_dashboard_msgs.msg import RobotMode

        state["robot_mode"] = RobotMode.RUNNING
        for key, value in state.items():
            if self._sent.get(key) != value:
                m = self._types[{"safety_mode": "SafetyMode", "robot_mode": "RobotMode"}.get(key, "Bool")]()
                setattr(m, "data" if key == "robot_program_running" else "mode", value)
                self._status_pubs[key].publish(m)
                self._sent[key] = value
        if self.robot.robot.command_type == "twist":
            self._servo_pub.publish(self._types["ServoStatus"](code=halt, message=_code_name(halt) if halt else ""))

    def _resume(self, r: SimRobot) -> None:
        """A command after servo's timeout: it servoes again (the sim's latched command watchdog is let go)."""
        self._timed_out = None
        if r.hold_reason is not None and r.hold_reason.startswith("no_action"):
            r.hold_reason, r.watchdog.latched = None, None
            r._target = r.tcp()

    def close(self) -> None:
        self._gripper.destroy()
        self.ros.close()


def _code_name(code: int) -> str:
    from moveit_msgs.msg import ServoStatus

    return next((k for k in dir(ServoStatus) if k.isupper() and getattr(ServoStatus, k) == code), str(code))


class UrLink(DriverLink):
    """The robot side: the UR's safety mode and program state, servo's status; recovery through the driver's
    services. Servo is switched to TWIST at start (and again at each recovery), so a lab needs no manual call; pose
    targets (a compliance controller) have no servo to switch."""

    def __init__(self, cfg: RobotConfig) -> None:
        super().__init__(cfg)
        from moveit_msgs.msg import ServoStatus
        from moveit_msgs.srv import ServoCommandType
        from std_msgs.msg import Bool
        from std_srvs.srv import Trigger
        from ur_dashboard_msgs.msg import SafetyMode

        self._lock = threading.Lock()
        self.safety: int | None = None  # None: not heard (yet)
        self.running: bool | None = None
        self.servo_code = ServoStatus.NO_WARNING
        self.stopped_at: float | None = None  # when this link first heard the current protective stop
        self.ros = RclNode("robot_rl_ur_link", cfg)
        n, servo = self.ros.node, servo_node(cfg)
        n.create_subscription(SafetyMode, f"{IO}/safety_mode", self._on_safety, rcl_qos(latched=True))
        n.create_subscription(Bool, f"{IO}/robot_program_running", self._on_running, rcl_qos(latched=True))
        n.create_subscription(ServoStatus, f"{servo}/status", self._on_servo, rcl_qos(reliable=False, depth=5))
        self._switch = n.create_client(ServoCommandType, f"{servo}/switch_command_type")
        self._unlock = n.create_client(Trigger, f"{DASHBOARD}/unlock_protective_stop")
        self._resend = n.create_client(Trigger, f"{IO}/resend_robot_program")
        self.switched = self._switch_servo()

    def _on_safety(self, m: Any) -> None:
        with self._lock:
            if m.mode == m.PROTECTIVE_STOP and self.safety != m.PROTECTIVE_STOP:
                self.stopped_at = time.time()
            self.safety = m.mode

    def _on_running(self, m: Any) -> None:
        with self._lock:
            self.running = bool(m.data)

    def _on_servo(self, m: Any) -> None:
        with self._lock:
            self.servo_code = m.code

    def poll(self) -> str | None:
        """A stop of the UR's (safety mode, then program), then a servo halt; None while the arm may move.

        The safety mode does not say what caused a protective stop (a push, a joint or speed limit, the pendant):
        `RobotEnv` names the policy when the wrench read the robot's force stop just before (`force_stop_n`); any
        other aborts the episode, which is re-run."""
        from moveit_msgs.msg import ServoStatus
        from ur_dashboard_msgs.msg import SafetyMode as S

        with self._lock:
            safety, running, code = self.safety, self.running, self.servo_code
        if safety == S.PROTECTIVE_STOP:
            return "protective stop"
        if safety in (S.FAULT, S.VIOLATION, S.RECOVERY):
            return f"fault: safety mode {_safety_name(safety).lower()}"
        if safety not in (None, S.NORMAL, S.REDUCED):
            return _safety_name(safety).lower().replace("_", " ")
        if running is False:
            return "program stopped"
        if code in (ServoStatus.HALT_FOR_SINGULARITY, ServoStatus.HALT_FOR_COLLISION, ServoStatus.JOINT_BOUND):
            return f"servo halted: {_code_name(code)}"
        if not self.switched:
            return "servo not switched to TWIST (no switch_command_type service)"
        return None

    def recover(self, prompt: Any) -> None:
        """Unlock a protective stop (after the UR's 5 s), restart the program, switch servo to TWIST, wait for
        NORMAL and the program running; an emergency stop, safeguard stop or fault is the person's, one prompt.
        Called after a silent stop too (no status heard): then each call is made blindly."""
        from ur_dashboard_msgs.msg import SafetyMode as S

        log.warning("UR hold: %s; recovering", self.poll() or "none reported (the arm stopped following)")
        if self.safety not in (None, S.NORMAL, S.REDUCED, S.PROTECTIVE_STOP):
            prompt(f"[{self.cfg.name}] the UR reports {self.poll()}: clear it at the teach pendant, then press Enter ")
        deadline = time.monotonic() + self.cfg.reset_timeout_s
        while self.safety in (None, S.PROTECTIVE_STOP) and time.monotonic() < deadline:
            time.sleep(max(0.0, (self.stopped_at or 0.0) + UNLOCK_AFTER_S - time.time()))
            if self._call(self._unlock, "unlock_protective_stop"):
                self._wait(lambda: self.safety != S.PROTECTIVE_STOP, 1.0)
                break
            time.sleep(0.5)  # refused (too soon by the robot's clock): ask again
        if self.running is not True:
            self._call(self._resend, "resend_robot_program")
            self._wait(lambda: self.running is not False, self.cfg.reset_timeout_s)
        self.switched = self._switch_servo()

    def _wait(self, pred: Any, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not pred():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def _call(self, client: Any, what: str, request: Any = None) -> bool:
        """One service call, answered within `reset_timeout_s`: whether it succeeded."""
        if not client.wait_for_service(timeout_sec=self.cfg.reset_timeout_s):
            log.warning("no %s service", client.srv_name)
            return False
        future = client.call_async(request if request is not None else client.srv_type.Request())
        if not self._wait(future.done, self.cfg.reset_timeout_s) or future.result() is None:
            log.warning("%s: no answer", what)
            return False
        res = future.result()
        if not res.success:
            log.warning("%s refused: %s", what, getattr(res, "message", ""))
        return bool(res.success)

    def _switch_servo(self) -> bool:
        if self.cfg.command_type != "twist":
            return True
        req = self._switch.srv_type.Request(command_type=self._switch.srv_type.Request.TWIST)
        return self._call(self._switch, "switch_command_type", req)

    def close(self) -> None:
        self.ros.close()


def _safety_name(mode: int) -> str:
    from ur_dashboard_msgs.msg import SafetyMode

    return next((k for k in dir(SafetyMode) if k.isupper() and getattr(SafetyMode, k) == mode), str(mode))
