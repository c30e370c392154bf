"""Per-robot configuration: which standard ROS 2 topics carry what, rates, tolerances, limits.

Shipped robots live in `configs/robot/<name>.yaml` (installed as `robot_rl.configs`); any other yaml path works
too. Loading goes through OmegaConf's structured configs, so a misspelled key fails at start-up, not mid-motion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from omegaconf import OmegaConf

from robot_rl.errors import UserError
from robot_rl.limits import SafetyConfig
from robot_rl.real.drivers import DRIVERS
from robot_rl.types import cell_state

ROBOTS = ("sim", "franka", "ur5e")
COMMAND_TYPES = ("pose", "twist")
RESET_MODES = ("topic", "home", "human")
SCENE_RESETS = ("operator", "topic")
WRENCH_FRAMES = ("base", "tcp")


@dataclass
class CameraConfig:
    name: str = "front"  # observation key; must match the camera names the policy was trained with
    topic: str = "camera/front/image"
    compressed: bool = False  # sensor_msgs/CompressedImage (jpeg/png) instead of sensor_msgs/Image
    # [top, left, height, width] in the camera's own pixels, cut before the resize to `image_size` (empty: the
    # whole frame): keeps the workspace in view at 64 px instead of the cell's walls.
    crop: list[int] = field(default_factory=list)


@dataclass
class GripperBridgeConfig:
    """`robot-rl gripper-bridge` (real/gripper_bridge.py): the opening on `gripper_topic` -> a driver's action."""

    action: str = ""  # the driver's action, e.g. /franka_gripper/gripper_action ("": the driver reads gripper_topic)
    action_type: str = "control_msgs/action/GripperCommand"
    position_field: str = "command.position"  # goal field (dotted path) that gets the target
    closed: float = 0.0  # its value for opening 0
    open: float = 0.04  # its value for opening 1 (franka: half the 8 cm finger gap)
    effort_field: str = "command.max_effort"  # "" when the goal has none
    max_effort: float = 20.0  # newtons a closing (grasping) goal may squeeze with
    deadband: float = 0.05  # opening change that sends a new goal


@dataclass
class RobotConfig:
    name: str = "sim"
    namespace: str = "/robot_rl"  # relative topic names below resolve under it
    domain_id: int = 0
    backend: str = "rclpy"  # transport backend (ROS 2); "inproc" only for single-process tests
    # State in: sensor_msgs/JointState + geometry_msgs/PoseStamped of the TCP (+ the tracked object, if any).
    joint_state_topic: str = "joint_states"
    ee_pose_topic: str = "ee_pose"
    object_pose_topic: str = "object_pose"  # "" => the task needs no object state
    # geometry_msgs/PoseStamped of an insertion's fixture (the hole's top): what a person beside the cell sees, read
    # only by the simulated operator's eyes (real/scene.py), never by a policy; the sim robot publishes it for
    # PegInsert. "" => none.
    fixture_pose_topic: str = ""
    # std_msgs/Bool the robot side streams (the sim robot: the simulator's check), read fresh each step; "" => none,
    # as on a real cell: a run's classifier (reward.source=classifier) or a person's key judges success instead.
    success_topic: str = "success"
    # The success topic is an event (an operator button that publishes True only when pressed): a True received
    # since the episode's reset is success, and its silence is never stale.
    success_event: bool = False
    # geometry_msgs/WrenchStamped, the force the world exerts on the hand, observed in the base frame (a policy
    # trained with `randomization.observe_force` reads it); "" => none. `wrench_sign` -1 flips a driver that reports
    # the hand's force on the world instead: pressing the gripper down on the table must read +z
    # (docs/ros2_interface.md).
    wrench_topic: str = "ee_wrench"
    wrench_sign: float = 1.0
    # The frame the wrench's force and torque are expressed in: base (`base_frame`: franka_ros2's
    # external_wrench_in_base_frame, the sim robot) | tcp (`ee_frame`, turning with the hand: the UR driver's
    # tool0_controller), rotated into the base frame by the TCP orientation measured nearest the wrench's stamp.
    wrench_frame: str = "base"
    # Commands out: pose => geometry_msgs/PoseStamped target (Cartesian impedance, Franka style);
    # twist => geometry_msgs/TwistStamped (servo, UR style). Gripper: std_msgs/Float64 opening, 0 closed .. 1 open.
    command_type: str = "pose"
    command_topic: str = "ee_target"
    gripper_topic: str = "gripper_command"
    estop_topic: str = "estop"  # std_msgs/Bool, True = stop; both sides latch a hold on it
    reset_topic: str = "reset"  # std_msgs/Int64 seed, for reset=topic
    reset_done_topic: str = "reset_done"  # std_msgs/Int64 echo of the seed
    status_topic: str = "robot_status"  # std_msgs/String from the robot side: "ok" or "hold: <reason>"
    # The frame_id the first pose (TCP, object) and wrench message must carry, or the run stops (the frames would
    # be mixed up silently); an empty frame_id passes, as many stand-ins and trackers leave it unset.
    base_frame: str = "base"
    ee_frame: str = "tcp"  # the TCP frame `ee_pose_topic` measures, and a wrench_frame=tcp wrench's frame
    joint_names: list[str] = field(default_factory=list)
    gripper_joints: list[str] = field(default_factory=list)  # finger joints whose positions add up to the gap
    # A robot may split /joint_states across publishers, each with its own joints (a UR arm and a Robotiq gripper
    # launched apart): each joint is read from the newest message that carried it and is stale on its own.
    # The gripper's opening (0 closed .. 1 open) is (sum of gripper_joints - gripper_closed) / (gripper_max_width -
    # gripper_closed): fingers in metres (Franka, the sim: 0 .. 0.08), or a knuckle angle that grows as it closes
    # (Robotiq 2F-85: gripper_closed 0.8 rad, gripper_max_width 0.0).
    gripper_max_width: float = 0.08  # the joints' sum when fully open
    gripper_closed: float = 0.0  # ... and when closed
    # The fingers' gap fully open, in metres, whatever the joints read in: what a person at the cell sees (a Robotiq
    # 2F-85: 0.085), which the simulated operator infers a grasp from.
    gripper_stroke: float = 0.08
    cameras: list[CameraConfig] = field(default_factory=list)
    # The sim robot's camera frames, and `collect --robot NAME`'s rate; a run (`env.image_size`, `env.control_hz`)
    # and a checkpoint (its layout) say what the policy sees and how fast it acts.
    image_size: int = 64
    control_hz: float = 10.0
    # A stream's newest message older than its own measured period and jitter plus `staleness_s` (transport
    # latency) at observation time is an error, as are streams whose stamps differ by more than `align_tol_s` plus
    # the slowest stream's period and jitter: a policy never sees a mix of old and new, and a 10 Hz camera's frame
    # of 0.1 s is not "late" the way a 100 Hz state's would be.
    staleness_s: float = 0.1
    align_tol_s: float = 0.05
    # Lockstep (a sim robot started with --lockstep): the robot advances one control period per command, so a step
    # waits for the state stamped after its command instead of sleeping to a deadline, and data ages are not
    # checked against the wall clock (the world stands still between commands). Never set for a real arm.
    lockstep: bool = False
    # After each episode: topic (the robot resets arm and scene itself, answering on `reset_done`: the sim robot) |
    # home (the arm moves to a home pose drawn within `home_box` through the safety layer, then `scene_reset`) |
    # human (a person resets arm and scene, then presses Enter on this terminal).
    reset: str = "topic"
    # With reset=home, who resets the objects: operator (a prompt, then Enter on this terminal) | topic (a reset
    # request the robot answers first, then the home move: the sim robot re-seeds its scene).
    scene_reset: str = "operator"
    reset_timeout_s: float = 10.0  # a reset (or, lockstep, a step) the robot does not answer within this aborts
    home_pos: tuple[float, float, float] = (0.5, 0.0, 0.15)
    home_box: tuple[float, float, float] = (0.0, 0.0, 0.0)  # metres either side of home_pos each reset's home is drawn
    home_quat: tuple[float, float, float, float] = (0.0, 1.0, 0.0, 0.0)  # w, x, y, z: gripper pointing down
    max_episode_steps: int = 0  # 0 => the checkpoint's task length
    # A driver's hold whose reason starts with one of these is the policy's doing (it pushed past the force limit):
    # the step ends the episode as the sim env's safety terminal, worth `safety_reward` and stored, so the critic
    # learns what a push costs, as in the sim. Any other hold (command watchdog, fault) aborts the episode.
    policy_holds: tuple[str, ...] = ("force limit",)
    # The robot's own stop on TCP force, newtons (a UR's PolyScope force limit; 0: none known). A driver hold whose
    # status names no cause (a UR protective stop) heard while the wrench topic read at least 80 % of it within the
    # last two control periods is the policy's push: reported as "force limit (...): <hold>", so `policy_holds`
    # makes it a safety terminal instead of an abort that is re-run.
    force_stop_n: float = 0.0
    safety_reward: float = -1.0  # the sim's `env.safety_reward`
    # Not-following watchdog (real/safety.py `FollowWatchdog`): `follow_window` control steps in a row that each
    # commanded at least `follow_tolerance_m / follow_window` of TCP motion, out of contact (under
    # `follow_contact_n` newtons on the wrench topic, if any; 0: unchecked), while the TCP moved under 20 % of it,
    # abort the episode: the driver stopped taking commands without saying so. `follow_window` 0 disables it;
    # `follow_tolerance_m` 0 is the window times a quarter of the largest step the env can command.
    follow_window: int = 5
    follow_tolerance_m: float = 0.0
    # Above a held object's weight and a wrench's noise, under what a stalled arm presses with (the sim arm: 8 N
    # with a peg pressed on its block).
    follow_contact_n: float = 3.0
    # The stock driver behind the topics (`real/drivers.py`): franka | ur5e read its status, faults and stops and
    # recover at reset through its services; "" a robot that reports on `status_topic` (the sim robot).
    driver: str = ""
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    gripper_bridge: GripperBridgeConfig = field(default_factory=GripperBridgeConfig)


class UnknownRobotError(UserError, FileNotFoundError):
    """--robot names no shipped robot and no yaml file."""


def robot_config_path(name_or_path: str) -> Path:
    if name_or_path in ROBOTS:
        return Path(str(resources.files("robot_rl.configs") / "robot" / f"{name_or_path}.yaml"))
    path = Path(name_or_path)
    if not path.is_file():
        raise UnknownRobotError(f"--robot {name_or_path}: neither one of {', '.join(ROBOTS)} nor a robot yaml file")
    return path


def load_robot_config(name_or_path: str, overrides: list[str] | None = None) -> RobotConfig:
    """A shipped robot by name (sim | franka | ur5e) or a yaml file, plus `key=value` dotlist overrides."""
    merged = OmegaConf.merge(
        OmegaConf.structured(RobotConfig),
        OmegaConf.load(robot_config_path(name_or_path)),
        OmegaConf.from_dotlist(list(overrides or [])),
    )
    cfg: RobotConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    check_robot_config(cfg)
    return cfg


def check_robot_config(cfg: RobotConfig) -> None:
    """Values a structured config cannot type-check: enums, crops, limits per joint."""
    if cfg.command_type not in COMMAND_TYPES:
        raise ValueError(f"command_type must be one of {COMMAND_TYPES}, got {cfg.command_type!r}")
    for cam in cfg.cameras:
        if cam.crop and (len(cam.crop) != 4 or min(cam.crop[2:]) <= 0 or min(cam.crop[:2]) < 0):
            raise ValueError(f"camera {cam.name}: crop must be [top, left, height, width], got {cam.crop}")
    if cfg.reset not in RESET_MODES:
        raise ValueError(f"reset must be one of {RESET_MODES}, got {cfg.reset!r}")
    if cfg.wrench_frame not in WRENCH_FRAMES:
        raise ValueError(f"wrench_frame must be one of {WRENCH_FRAMES}, got {cfg.wrench_frame!r}")
    if cfg.driver and cfg.driver not in DRIVERS:
        raise ValueError(f"driver must be one of {', '.join(DRIVERS)} or empty, got {cfg.driver!r}")
    if cfg.scene_reset not in SCENE_RESETS:
        raise ValueError(f"scene_reset must be one of {SCENE_RESETS}, got {cfg.scene_reset!r}")
    if cfg.gripper_max_width == cfg.gripper_closed:
        raise ValueError("gripper_max_width and gripper_closed must differ (the joints' sum open and closed)")
    if not cfg.gripper_stroke > 0:
        raise ValueError(f"gripper_stroke: the fingers' open gap in metres, > 0; got {cfg.gripper_stroke}")
    if min(cfg.home_box) < 0:
        raise ValueError(f"home_box holds half-widths (metres), all >= 0; got {list(cfg.home_box)}")
    if cfg.follow_window < 0 or cfg.follow_window == 1:
        raise ValueError(f"follow_window counts control steps: 0 (off) or >= 2, got {cfg.follow_window}")
    if cfg.force_stop_n < 0 or (cfg.force_stop_n and not cfg.wrench_topic):
        raise ValueError(f"force_stop_n: the robot's force stop in newtons (0: none), read on a wrench_topic; got "
                         f"{cfg.force_stop_n} with wrench_topic {cfg.wrench_topic!r}")  # fmt: skip
    if cfg.follow_tolerance_m < 0 or cfg.follow_contact_n < 0:
        raise ValueError("follow_tolerance_m and follow_contact_n must be >= 0 (0: derived / unchecked)")
    s = cfg.safety
    if len(s.joint_lower) != len(s.joint_upper) or (s.joint_lower and len(s.joint_lower) != len(cfg.joint_names)):
        raise ValueError("safety.joint_lower/joint_upper must both list one limit per joint in joint_names")
    for z in s.slow_zones:
        if not (all(a < b for a, b in zip(z.lo, z.hi, strict=True)) and z.max_velocity > 0):
            raise ValueError(f"safety.slow_zones: each needs lo < hi on every axis and max_velocity > 0, got {z}")


def proprio_layout(cfg: RobotConfig) -> dict[str, slice]:
    """What `cfg`'s cell measures without a tracker (`robot_rl.types.cell_state`): what training on it observes."""
    return cell_state(len(cfg.joint_names), bool(cfg.wrench_topic))
