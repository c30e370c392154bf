"""franka_ros2 (jazzy) + CRISP: the Franka FR3's driver faces (`real/drivers.py`).

What a lab's robot PC runs, read in frankarobotics/franka_ros2 @29cb85a (jazzy), ros-controls/ros2_control (jazzy)
and utiasDSL/crisp_controllers @8093548:
- franka_bringup/launch/franka.launch.py: `joint_state_publisher` merges `franka/joint_states` (the arm's
  joint_state_broadcaster) and `franka_gripper/joint_states` into `/joint_states` at `joint_state_rate` (30 Hz),
  stamping each message now, so it republishes the last joints with fresh stamps when a source goes silent.
- franka_robot_state_broadcaster: `~/robot_state` (FrankaRobotState, SystemDefaults QoS) and `~/current_pose`,
  `~/external_wrench_in_base_frame` (QoS(1) best effort), frames `fr3_link0` (franka_semantic_components).
- franka_hardware_interface.cpp `read()`: a libfranka ControlException is logged (`FrankaHardwareInterface`) and
  returns ERROR, so the controller_manager deactivates the hardware and every controller on it: broadcasters stop,
  commands are dropped. franka_action_server.cpp: `action_server/error_recovery` runs automaticErrorRecovery.
- controller_manager: `~/activity` (reliable, transient local), `~/set_hardware_component_state`,
  `~/switch_controller`.
- CRISP cartesian_controller.cpp: PoseStamped on `<controller>/target_pose`, ignored while it has more than one
  publisher.
- franka_gripper: `franka_gripper/gripper_action` (GripperCommand, position = half the finger gap), joint states at
  `state_publish_rate` 15 Hz.
libfranka's error: "libfranka: Move command aborted: motion aborted by reflex!" as its robot_impl.h words a
kReflexAborted move, followed by the Errors that are set (`["cartesian_reflex"]`) as lab logs show it (the code that
appends them not read). Modelled: a user stop only as robot_state's robot_mode (the arm's own reaction not modelled),
gripper goals that succeed at once, robot_state at the sim's tick rate (not 1 kHz).
"""

from __future__ import annotations

import contextlib
import importlib
import re
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from robot_rl.errors import ConfigError
from robot_rl.real import msgs
from robot_rl.real.drivers import DriverLink, RclNode, StandinFace, rcl_qos

if TYPE_CHECKING:
    from robot_rl.real.config import RobotConfig
    from robot_rl.real.sim_robot import SimRobot

FRANKA_JOINTS = {**{f"fr3_joint{i}": f"joint{i}" for i in range(1, 8)},
                "fr3_finger_joint1": "finger_left", "fr3_finger_joint2": "finger_right"}  # fmt: skip
HARDWARE = "FrankaHardwareInterface"  # the ros2_control component's name in franka_description (single arm)
BROADCASTERS = ("joint_state_broadcaster", "franka_robot_state_broadcaster")
CONTROLLER = "cartesian_impedance_controller"  # CRISP's controller as its franka config names it
ACTIVE, INACTIVE = 3, 2  # lifecycle_msgs/State ids
USER_STOPPED = 5  # FrankaRobotState.ROBOT_MODE_USER_STOPPED
_JOINT_STATE_HZ = 30.0  # franka.launch.py joint_state_rate
_GRIPPER_STATE_HZ = 15.0  # franka_gripper_node.yaml state_publish_rate
_FINGER_OPEN = 0.04  # metres per finger: the sim's and franka_gripper's open position
# For libfranka's error text after the hardware went inactive (`FrankaLink.poll`), once per deactivation: the arm is
# stopped by then, and a reflex whose text came later would be misread as a fault (0.2 s missed it on a loaded box).
ERROR_WAIT_S = 1.0
_ERROR = re.compile(r"libfranka: (?P<text>[^\[]*?)\s*(?:\[(?P<errors>[^\]]*)\])?\s*$")
# libfranka's Errors that a policy's commands cause (contact, limits, speed): its safety failure. Any other, as
# communication_constraints_violation (the control PC's timing, lab logs show it with the arm standing still), is a
# fault: the episode is re-run.
_POLICY_ERRORS = re.compile(r"_reflex$|_limits_violation$|^(joint|cartesian)_velocity_violation$|"
                            r"^self_collision_avoidance_violation$|^tau_j_range_violation$")  # fmt: skip


def libfranka_hold(log: str) -> str | None:
    """The hold a libfranka error logged by the hardware interface means: "reflex: <errors>" when every Error it
    names is the policy's doing, else "fault: <errors or text>"; None for a line that is not libfranka's error."""
    if (found := _ERROR.search(log)) is None:
        return None
    errors = re.findall(r"[a-z_]+", found["errors"] or "")
    policy = bool(errors) and all(_POLICY_ERRORS.search(e) for e in errors)
    return f"{'reflex' if policy else 'fault'}: {', '.join(errors) or found['text']}"


def _libfranka_text(error: str) -> str:
    """libfranka's ControlException text for a motion aborted by `error` (a franka_msgs/Errors field)."""
    return f'libfranka: Move command aborted: motion aborted by reflex! ["{error}"]'


def _rclpy(msg: Any, ros_type: str) -> Any:
    """Our transport's message (rosbags) as rclpy's class, by its CDR bytes: a field of an rclpy message."""
    from rclpy.serialization import deserialize_message

    from robot_rl.transport import typesys

    pkg, _, name = ros_type.split("/")
    cls = getattr(importlib.import_module(f"{pkg}.msg"), name)
    return deserialize_message(typesys.serialize(msg, ros_type), cls)


def _named_state(name: str, active: bool) -> Any:
    from controller_manager_msgs.msg import NamedLifecycleState

    s = NamedLifecycleState(name=name)
    s.state.id, s.state.label = (ACTIVE, "active") if active else (INACTIVE, "inactive")
    return s


class FrankaStandin(StandinFace):
    """The sim arm as franka_ros2 + CRISP serve it (module docstring), faults and recovery included."""

    reads_gripper_topic = False  # franka_gripper's action moves the fingers (`robot-rl gripper-bridge`)

    def __init__(self, robot: SimRobot) -> None:
        super().__init__(robot)
        from control_msgs.action import GripperCommand
        from controller_manager_msgs.msg import ControllerManagerActivity
        from controller_manager_msgs.srv import SetHardwareComponentState, SwitchController
        from franka_msgs.action import ErrorRecovery
        from franka_msgs.msg import FrankaRobotState
        from rcl_interfaces.msg import Log
        from rclpy.action import ActionServer

        self.ros = RclNode("franka_standin", robot.robot)
        n = self.ros.node
        self.error: str | None = None  # libfranka's, until error_recovery
        self.user_stopped = False
        self.hardware = True
        self.active = dict.fromkeys((*BROADCASTERS, CONTROLLER), True)
        self._activity = n.create_publisher(ControllerManagerActivity, "controller_manager/activity",
                                            rcl_qos(latched=True))  # fmt: skip
        self._rosout = n.create_publisher(Log, "/rosout", rcl_qos(latched=True, depth=1000))
        self._state = n.create_publisher(FrankaRobotState, "franka_robot_state_broadcaster/robot_state", rcl_qos())
        self._services = [
            ActionServer(n, ErrorRecovery, "action_server/error_recovery", self._error_recovery),
            ActionServer(n, GripperCommand, "franka_gripper/gripper_action", self._gripper_action),
            n.create_service(
                SetHardwareComponentState, "controller_manager/set_hardware_component_state", self._set_hardware
            ),  # fmt: skip
            n.create_service(SwitchController, "controller_manager/switch_controller", self._switch),
        ]
        self.serve_drills(n, "franka_standin/fault")
        self._arm: Any = None  # the arm's newest joint state while its broadcaster runs
        self._fingers: Any = None
        self._next_joints = self._next_fingers = 0.0
        self._publish_activity()

    # ------------------------------------------------------------------------------------------ hooks

    def takes_commands(self) -> bool:
        """The CRISP controller runs only on active hardware and drops a command topic with two publishers."""
        return (self.hardware and self.active[CONTROLLER] and not self.user_stopped
                and self.ros.node.count_publishers(self.robot.robot.command_topic) <= 1)  # fmt: skip

    def state(self, out: dict[str, Any], stamp: float) -> dict[str, Any]:
        joints = out.pop("joints")
        n_arm = len(self.robot.robot.joint_names)
        split = (joints.name[:n_arm], joints.position[:n_arm], joints.velocity[:n_arm])
        if self._broadcasting("franka_robot_state_broadcaster"):
            arm = msgs.joint_state(list(split[0]), np.asarray(split[1]), np.asarray(split[2]), stamp)
            self._publish_robot_state(out, arm, stamp)
        else:
            out.pop("ee")
            out.pop("wrench")
        if self._broadcasting("joint_state_broadcaster"):
            self._arm = split
        if stamp >= self._next_fingers:  # the gripper node runs on, whatever the arm does
            self._next_fingers = stamp + 1.0 / _GRIPPER_STATE_HZ
            self._fingers = (joints.name[n_arm:], joints.position[n_arm:], joints.velocity[n_arm:])
        if stamp >= self._next_joints and self._arm is not None:
            self._next_joints = stamp + 1.0 / _JOINT_STATE_HZ
            names, pos, vel = (list(a) + list(f) for a, f in zip(self._arm, self._fingers, strict=True))
            out["joints"] = msgs.joint_state(names, np.asarray(pos), np.asarray(vel), stamp)
        return out

    def on_hold(self, reason: str) -> None:
        if reason.startswith("force limit"):
            self.fault("cartesian_reflex")

    def close(self) -> None:
        self.ros.close()

    # ------------------------------------------------------------------------------------------ drills

    def fault(self, error: str) -> None:
        """libfranka aborts the motion with `error` (a franka_msgs/Errors field): read() returns ERROR, the
        controller_manager deactivates the hardware and its controllers (a drill for tests, and the reflex)."""
        self.error, self.hardware = error, False
        self.active = dict.fromkeys(self.active, False)
        self._log(HARDWARE, _libfranka_text(error))
        self._log("controller_manager", "Deactivating following hardware components as their read cycle "
                                        f"resulted in an error: [ {HARDWARE} ]")  # fmt: skip
        self._publish_activity()

    def user_stop(self, pressed: bool) -> None:
        """The external activation device: pressed, the robot stops and reports ROBOT_MODE_USER_STOPPED."""
        self.user_stopped = pressed

    def drill(self, kind: str) -> None:
        """user_stop, user_stop_released, or a libfranka error (a franka_msgs/Errors field name)."""
        from franka_msgs.msg import Errors

        if kind in ("user_stop", "user_stop_released"):
            self.user_stop(kind == "user_stop")
        elif kind in Errors.get_fields_and_field_types():
            self.fault(kind)
        else:
            raise ConfigError(f"drill {kind!r}: user_stop, user_stop_released or a franka_msgs/Errors field")

    # --------------------------------------------------------------------------------------- internals

    def _broadcasting(self, name: str) -> bool:
        return self.hardware and self.active[name]

    def _publish_robot_state(self, out: dict[str, Any], joints: Any, stamp: float) -> None:
        from franka_msgs.msg import FrankaRobotState

        m = FrankaRobotState(robot_mode=USER_STOPPED if self.user_stopped else 2)  # 2: ROBOT_MODE_MOVE
        m.header = _rclpy(msgs.header_at(stamp, self.robot.robot.base_frame), "std_msgs/msg/Header")
        m.o_t_ee, m.o_f_ext_hat_k = _rclpy(out["ee"], msgs.POSE), _rclpy(out["wrench"], msgs.WRENCH)
        m.measured_joint_state = _rclpy(joints, msgs.JOINT_STATE)
        self._state.publish(m)

    def _log(self, name: str, text: str) -> None:
        from rcl_interfaces.msg import Log

        m = Log(level=Log.ERROR, name=name, msg=text, file="", function="", line=0)
        m.stamp.sec, m.stamp.nanosec = divmod(time.time_ns(), 10**9)
        self._rosout.publish(m)

    def _publish_activity(self) -> None:
        from controller_manager_msgs.msg import ControllerManagerActivity

        m = ControllerManagerActivity()
        m.header = _rclpy(msgs.header_at(time.time(), ""), "std_msgs/msg/Header")
        m.controllers = [_named_state(name, on) for name, on in self.active.items()]
        m.hardware_components = [_named_state(HARDWARE, self.hardware)]
        self._activity.publish(m)

    def _error_recovery(self, handle: Any) -> Any:
        from franka_msgs.action import ErrorRecovery

        if self.user_stopped:  # automaticErrorRecovery throws while the user stop is pressed
            self._log("action_server", "Exception during automatic error recovery: User stop pressed")
            handle.abort()
        else:
            self.error = None
            handle.succeed()
        return ErrorRecovery.Result()

    def _set_hardware(self, req: Any, res: Any) -> Any:
        if req.name == HARDWARE and self.error is None and not self.user_stopped:
            self.hardware = req.target_state.id == ACTIVE
            self._publish_activity()
            res.ok = True
        res.state.id = ACTIVE if self.hardware else INACTIVE
        return res

    def _switch(self, req: Any, res: Any) -> Any:
        names = set(req.activate_controllers) | set(req.deactivate_controllers)
        res.ok = self.hardware and names <= set(self.active)
        if res.ok:
            self.active |= dict.fromkeys(req.deactivate_controllers, False) | dict.fromkeys(req.activate_controllers,
                                                                                           True)  # fmt: skip
            self._publish_activity()
            self.robot._target = self.robot.tcp()  # CRISP's on_activate: the target is where the arm is
        return res

    def _gripper_action(self, handle: Any) -> Any:
        from control_msgs.action import GripperCommand

        pos = float(np.clip(handle.request.command.position, 0.0, _FINGER_OPEN))
        self.robot._gripper = pos / _FINGER_OPEN
        handle.succeed()
        return GripperCommand.Result(position=pos, reached_goal=True)


class FrankaLink(DriverLink):
    """The robot side: the controller_manager's activity, the hardware's errors on /rosout and robot_state's
    robot_mode make up the hold; recovery is franka_ros2's error_recovery, then hardware and controllers active."""

    def __init__(self, cfg: RobotConfig) -> None:
        super().__init__(cfg)
        from controller_manager_msgs.msg import ControllerManagerActivity
        from controller_manager_msgs.srv import SetHardwareComponentState, SwitchController
        from franka_msgs.action import ErrorRecovery
        from franka_msgs.msg import FrankaRobotState
        from rcl_interfaces.msg import Log
        from rclpy.action import ActionClient

        self.ros = RclNode("robot_rl_franka_link", cfg)
        n = self.ros.node
        self.hardware: bool | None = None  # None: no activity heard yet
        self.inactive: list[str] = []
        self.error: str | None = None  # libfranka's, as a hold (`libfranka_hold`)
        self.mode: int | None = None
        self._awaited = False  # this deactivation's error text waited for
        n.create_subscription(ControllerManagerActivity, "controller_manager/activity", self._on_activity,
                              rcl_qos(latched=True))  # fmt: skip
        n.create_subscription(Log, "/rosout", self._on_log, rcl_qos(depth=100))
        n.create_subscription(FrankaRobotState, "franka_robot_state_broadcaster/robot_state", self._on_state,
                              rcl_qos(reliable=False, depth=1))  # fmt: skip
        self.recovery = ActionClient(n, ErrorRecovery, "action_server/error_recovery")
        self.set_hardware = n.create_client(SetHardwareComponentState,
                                            "controller_manager/set_hardware_component_state")  # fmt: skip
        self.switch = n.create_client(SwitchController, "controller_manager/switch_controller")

    def _on_activity(self, m: Any) -> None:
        self.hardware = all(c.state.id == ACTIVE for c in m.hardware_components if c.name == HARDWARE)
        self._awaited = self._awaited and not self.hardware
        self.inactive = [c.name for c in m.controllers if c.name in (*BROADCASTERS, CONTROLLER)
                         and c.state.id != ACTIVE]  # fmt: skip

    def _on_log(self, m: Any) -> None:
        if m.name == HARDWARE and (hold := libfranka_hold(m.msg)) is not None:
            self.error = hold

    def _on_state(self, m: Any) -> None:
        self.mode = m.robot_mode

    def poll(self) -> str | None:
        if self.mode == USER_STOPPED:
            return "user stop"
        if self.hardware is False and self.error is None:
            self._await_error()
        if self.error is not None:
            return self.error
        if self.hardware is False:
            return "fault: hardware inactive"
        if self.hardware and self.inactive:
            return f"fault: controllers inactive: {', '.join(self.inactive)}"
        return None

    def _await_error(self) -> None:
        """The hardware's error text and the deactivation come on two topics, in either order: wait a moment for the
        text, once per deactivation, so that a reflex (the policy's doing) is not taken for a fault."""
        if self._awaited:
            return
        self._awaited = True
        with contextlib.suppress(TimeoutError):
            self._wait(lambda: self.error is not None, ERROR_WAIT_S)

    def recover(self, prompt: Any) -> None:
        """error_recovery, then the hardware and controllers active again, confirmed by the activity topic. A user
        stop has no service: the person at the robot releases it first."""
        from robot_rl.real.robot import SafetyStop

        if self.poll() is None:  # after a silent stop (the follow watchdog) with nothing wrong here: nothing to redo
            return
        if self.mode == USER_STOPPED:
            prompt(f"[{self.cfg.name}] release the Franka's user stop, then press Enter ")
            self.mode = None  # robot_state says again once its broadcaster runs
        timeout = self.cfg.reset_timeout_s
        try:
            self._error_recovery(timeout)
            self._call(self.set_hardware, _hardware_request(), timeout)
            self._call(self.switch, _switch_request(), timeout)
            self._wait(lambda: self.hardware and not self.inactive, timeout)
        except TimeoutError as e:
            raise SafetyStop(f"franka: recovery failed ({e}); see the robot's Desk and /rosout") from None
        self.error = None

    def _error_recovery(self, timeout: float) -> None:
        from franka_msgs.action import ErrorRecovery

        if not self.recovery.wait_for_server(timeout_sec=timeout):
            raise TimeoutError("no action_server/error_recovery")
        sent = self.recovery.send_goal_async(ErrorRecovery.Goal())
        self._wait(sent.done, timeout)
        done = sent.result().get_result_async()
        self._wait(done.done, timeout)
        if done.result().status != 4:  # action_msgs/GoalStatus.STATUS_SUCCEEDED
            raise TimeoutError("error_recovery did not succeed (user stop still pressed?)")

    def _call(self, client: Any, req: Any, timeout: float) -> None:
        if not client.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"no service {client.srv_name}")
        fut = client.call_async(req)
        self._wait(fut.done, timeout)
        if not fut.result().ok:
            raise TimeoutError(f"{client.srv_name} refused")

    @staticmethod
    def _wait(pred: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise TimeoutError("no answer")
            time.sleep(0.005)

    def close(self) -> None:
        self.ros.close()


def _hardware_request() -> Any:
    from controller_manager_msgs.srv import SetHardwareComponentState

    req = SetHardwareComponentState.Request(name=HARDWARE)
    req.target_state.id, req.target_state.label = ACTIVE, "active"
    return req


def _switch_request() -> Any:
    from controller_manager_msgs.srv import SwitchController

    return SwitchController.Request(activate_controllers=[*BROADCASTERS, CONTROLLER],
                                    strictness=SwitchController.Request.STRICT)  # fmt: skip
