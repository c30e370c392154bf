"""RobotEnv reading what stock drivers publish, from plain rclpy nodes (tests/plain_ros.py): /joint_states split
across publishers (a UR arm and its Robotiq gripper launched apart), a wrench in the TCP frame (the UR driver's
tool0_controller), and frame ids that do not match the robot config."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from plain_ros import PlainNode, msg_type

from robot_rl.errors import UserError
from robot_rl.real.config import RobotConfig, load_robot_config, proprio_layout
from robot_rl.real.robot import FrameMismatchError, RobotEnv, StaleDataError
from robot_rl.types import EE_FORCE_UNIT_N, ObsLayout

pytestmark = [pytest.mark.ros2, pytest.mark.realtime]
NS = "/robot_rl"
ARM = [0.1, -0.2, 0.3, -1.5, 0.2, 1.6, 0.4]  # the sim config's joint1..joint7, inside its limits
HZ = 50.0


def header(m: object, stamp_ns: int, frame: str) -> object:
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(stamp_ns, 10**9)
    m.header.frame_id = frame
    return m


def joint_state(stamp_ns: int, names: list[str], pos: list[float], vel: list[float]) -> object:
    m = header(msg_type("sensor_msgs/msg/JointState")(), stamp_ns, "")
    m.name, m.position, m.velocity = names, [float(p) for p in pos], [float(v) for v in vel]
    return m


def pose(stamp_ns: int, quat_wxyz: np.ndarray, frame: str) -> object:
    m = header(msg_type("geometry_msgs/msg/PoseStamped")(), stamp_ns, frame)
    m.pose.position.x, m.pose.position.y, m.pose.position.z = 0.5, 0.0, 0.15
    o = m.pose.orientation
    o.w, o.x, o.y, o.z = (float(v) for v in quat_wxyz)
    return m


def wrench(stamp_ns: int, force: np.ndarray, torque: np.ndarray, frame: str) -> object:
    m = header(msg_type("geometry_msgs/msg/WrenchStamped")(), stamp_ns, frame)
    w = m.wrench
    w.force.x, w.force.y, w.force.z = (float(v) for v in force)
    w.torque.x, w.torque.y, w.torque.z = (float(v) for v in torque)
    return m


def matrix(q: np.ndarray) -> np.ndarray:
    """The rotation matrix of a unit quaternion (w, x, y, z), written out (not RobotEnv's formula)."""
    w, x, y, z = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


def tcp_quat(k: int) -> np.ndarray:
    """The TCP orientation of sample k: pointing down, tilted and turned further every sample."""
    a, b = 0.4 * k, 0.3
    down = np.array([0.0, 1.0, 0.0, 0.0])
    turn = np.array([math.cos(a / 2), math.sin(b) * math.sin(a / 2), 0.0, math.cos(b) * math.sin(a / 2)])
    w1, v1, w2, v2 = turn[0], turn[1:], down[0], down[1:]
    return np.array([w1 * w2 - v1 @ v2, *(w1 * v2 + w2 * v1 + np.cross(v1, v2))])


class Driver:
    """Stock-driver stand-ins on their own rclpy nodes, each publishing `make(k, stamp_ns)` at HZ from one thread
    until silenced; all of a sample's messages carry the sample's stamp."""

    def __init__(self, domain: int, streams: dict[str, tuple[str, str, Callable[[int, int], object]]]) -> None:
        self.nodes = {name: PlainNode(domain, f"driver_{name}") for name in streams}
        self.pubs = {name: self.nodes[name].publisher(topic, kind, "sensor") for name, (topic, kind, _) in
                     streams.items()}  # fmt: skip
        self.make = {name: make for name, (_, _, make) in streams.items()}
        self.silenced: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        k = 0
        while not self.stop.wait(1.0 / HZ):
            stamp = time.time_ns()
            for name, pub in self.pubs.items():
                if name not in self.silenced:
                    pub.publish(self.make[name](k, stamp))
            k += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for node in self.nodes.values():
            node.close()


def robot(domain: int, *overrides: str) -> RobotConfig:
    """The sim robot's topics on rclpy, reset by a person (no reset topic), no success topic."""
    return load_robot_config("sim", [f"domain_id={domain}", "reset=human", "success_topic=''", *overrides])


def env_for(cfg: RobotConfig) -> RobotEnv:
    env = RobotEnv(cfg, ObsLayout.from_slices(proprio_layout(cfg), control_hz=10.0), node_name="streams_test")
    env.operator_prompt = lambda _: None
    return env


@pytest.fixture
def closing() -> Iterator[list]:
    """Things to close after the test, whatever it raised."""
    opened: list = []
    yield opened
    for thing in reversed(opened):
        thing.close()


def test_joint_states_split_across_publishers_merge_per_joint_and_a_silent_joint_is_stale(domain, closing) -> None:
    cfg = robot(domain)
    down = np.array([0.0, 1.0, 0.0, 0.0])
    arm = list(reversed(cfg.joint_names))  # a driver's order, not the config's
    closing.append(Driver(domain, {
        "arm": (f"{NS}/joint_states", "sensor_msgs/msg/JointState",
                lambda k, t: joint_state(t, arm, ARM[::-1], [0.01 * i for i in range(7, 0, -1)])),
        "gripper": (f"{NS}/joint_states", "sensor_msgs/msg/JointState",
                    lambda k, t: joint_state(t, ["finger_right", "finger_left"], [0.03, 0.01], [0.0, 0.0])),
        "pose": (f"{NS}/ee_pose", "geometry_msgs/msg/PoseStamped", lambda k, t: pose(t, down, "")),  # empty: passes
        "wrench": (f"{NS}/ee_wrench", "geometry_msgs/msg/WrenchStamped",
                   lambda k, t: wrench(t, np.array([0.0, 0.0, 5.0]), np.zeros(3), "world")),
    }))  # fmt: skip
    driver = closing[-1]
    env = env_for(cfg)
    closing.append(env)
    lay = env.layout
    obs, _ = env.reset(seed=0)
    state = obs["state"]
    assert np.isfinite(state).all()
    np.testing.assert_allclose(state[lay["joint_pos"]], ARM, atol=1e-6)  # the config's order
    np.testing.assert_allclose(state[lay["joint_vel"]], [0.01 * i for i in range(1, 8)], atol=1e-6)
    np.testing.assert_allclose(state[lay["gripper_opening"]], [0.5], atol=1e-6)  # (0.01 + 0.03) / 0.08
    obs, *_ = env.step(np.zeros(4))
    assert np.isfinite(obs["state"]).all()
    driver.silenced.add("gripper")  # its driver hangs; the arm's goes on
    time.sleep(0.5)
    with pytest.raises(StaleDataError, match=r"/robot_rl/joint_states \[finger_left\]: newest is"):
        env.step(np.zeros(4))


def test_a_tcp_frame_wrench_is_observed_in_the_base_frame_by_the_tcp_pose_of_its_stamp(domain, closing) -> None:
    """The UR driver's wrench turns with the tool (frame tool0_controller). Here the TCP turns every sample and the
    wrench arrives a sample late (a filtering sensor), so only the pose stamped with the wrench turns it right."""
    cfg = robot(domain, "wrench_frame=tcp", "ee_frame=tool0_controller", "wrench_sign=-1")
    force, torque = np.array([1.5, -2.0, 4.0]), np.array([0.1, 0.2, -0.3])  # the base frame's, signed
    samples: list[tuple[int, int]] = []

    def late_tcp_wrench(k: int, t: int) -> object:  # the previous sample's reading, in that sample's TCP frame
        samples.append((k, t))
        k, t = samples[-2] if k else samples[-1]
        r = matrix(tcp_quat(k))
        return wrench(t, -r.T @ force, -r.T @ torque, "tool0_controller")  # the hand's force on the world

    closing.append(Driver(domain, {
        "arm": (f"{NS}/joint_states", "sensor_msgs/msg/JointState",
                lambda k, t: joint_state(t, cfg.joint_names + cfg.gripper_joints, [*ARM, 0.02, 0.02], [0.0] * 9)),
        "pose": (f"{NS}/ee_pose", "geometry_msgs/msg/PoseStamped", lambda k, t: pose(t, tcp_quat(k), "world")),
        "wrench": (f"{NS}/ee_wrench", "geometry_msgs/msg/WrenchStamped", late_tcp_wrench),
    }))  # fmt: skip
    env = env_for(cfg)
    closing.append(env)
    # The first observation may pair a wrench with the pose after its own (the readers matched between the two): the
    # nearest there is. From then on, each wrench's own pose has been received.
    env.reset(seed=0)
    for _ in range(3):
        time.sleep(0.05)
        obs, _ = env.reset(seed=0)
        np.testing.assert_allclose(obs["state"][env.layout["ee_force"]] * EE_FORCE_UNIT_N, force, atol=1e-6)
        f, tau = env._wrench()
        np.testing.assert_allclose(f, force, atol=1e-9)
        np.testing.assert_allclose(tau, torque, atol=1e-9)


def test_a_stream_in_another_frame_than_the_config_says_stops_the_run_in_one_line(domain, closing) -> None:
    cfg = robot(domain)
    down = np.array([0.0, 1.0, 0.0, 0.0])
    closing.append(Driver(domain, {
        "arm": (f"{NS}/joint_states", "sensor_msgs/msg/JointState",
                lambda k, t: joint_state(t, cfg.joint_names + cfg.gripper_joints, [*ARM, 0.02, 0.02], [0.0] * 9)),
        "pose": (f"{NS}/ee_pose", "geometry_msgs/msg/PoseStamped", lambda k, t: pose(t, down, "world")),
        "wrench": (f"{NS}/ee_wrench", "geometry_msgs/msg/WrenchStamped",  # a UR wrench, the config left at base
                   lambda k, t: wrench(t, np.zeros(3), np.zeros(3), "tool0_controller")),
    }))  # fmt: skip
    env = env_for(cfg)
    closing.append(env)
    with pytest.raises(FrameMismatchError) as e:
        env.reset(seed=0)
    assert isinstance(e.value, UserError) and "\n" not in str(e.value)  # the CLI's one line, exit 2
    assert "/robot_rl/ee_wrench is in frame 'tool0_controller', the robot config expects 'world'" in str(e.value)
    with pytest.raises(ValueError, match="wrench_frame must be one of"):
        robot(domain, "wrench_frame=tool0")


def test_a_driver_node_left_open_keeps_the_exit_code_of_its_process(domain: int) -> None:
    """A link's rclpy node still spinning when the interpreter ended aborted the process (-6, "terminate called
    without an active exception"; 9 exits of 10 beside two busy cores), hiding the code a run ended with."""
    code = (
        "import sys, time; from robot_rl.real.config import load_robot_config; from robot_rl.real.drivers import "
        f"RclNode; n = RclNode('left_open', load_robot_config('ur5e', ['domain_id={domain}'])); time.sleep(0.3); "
        "sys.exit(3)"
    )
    for _ in range(3):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert p.returncode == 3, p.stderr[-2000:]
