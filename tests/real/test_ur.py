"""The shipped UR5e config against `sim-robot --driver ur5e` (real/ur.py's stand-in of the UR driver, MoveIt Servo,
the Robotiq and usb_cam), over rclpy on loopback: its stops are holds, never transitions against a frozen arm, and
the next reset recovers them through the driver's own services; its split joint states, TCP-frame wrench and
usb_cam images read right."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from plain_ros import PlainNode, msg_type
from real_util import dump, spawn, stop, wait_until

from robot_rl.demos.store import EpisodeStore
from robot_rl.real import msgs
from robot_rl.real.config import RobotConfig, load_robot_config, proprio_layout
from robot_rl.real.robot import RobotEnv, RobotHold
from robot_rl.real.sim_robot import SimRobot, SimRobotConfig
from robot_rl.real.ur import UNLOCK_AFTER_S, UrStandin
from robot_rl.types import ObsLayout

pytestmark = [pytest.mark.ros2, pytest.mark.realtime]
HZ = 10.0


# The tests are about faults, not timing: a Python sim arm on the shared 2-core test box at times delivers a state
# past the shipped config's 0.1 s limits (starved past 1 s with the suite's other worker busy); the end-to-end test
# keeps them.
LOADED = ["scene_reset=topic", "safety.state_timeout_s=3.0", "staleness_s=2.0"]


def ur_env(cfg: RobotConfig, cameras: tuple[str, ...] = ()) -> RobotEnv:
    """The env of a shipped ur5e config; the sim resets the scene (the person at a real cell), and no reset asks."""
    layout = ObsLayout.from_slices(proprio_layout(cfg), control_hz=HZ, cameras=cameras, image_size=64)
    env = RobotEnv(cfg, layout, node_name="ur_test")
    env.operator_prompt = lambda text: pytest.fail(f"the reset asked the person: {text}")
    return env


class Standin:
    """`sim-robot --robot NAME` (its driver: ur5e) as its own process in real time, as a robot PC runs apart:
    `fault(kind)` publishes a drill on its `/ur_standin/fault` topic; `log` is its stderr once it stopped."""

    def __init__(self, domain: int, name: str, drills: tuple[str, ...]) -> None:
        args = [a for d in drills for a in ("--drill", d)]
        self.proc = spawn("sim-robot", "--robot", name, "--domain", str(domain), *args)
        self.peer = PlainNode(domain, "drill")
        self.log = ""
        self._pub = self.peer.publisher("/ur_standin/fault", "std_msgs/msg/String")
        try:
            self.peer.spin_until(lambda: self._pub.get_subscription_count() > 0, 60, "the stand-in's drill topic")
        except TimeoutError as e:
            self.close()
            raise TimeoutError(f"{e}; its stderr:\n{self.log[-3000:]}") from None

    def fault(self, kind: str) -> None:
        self._pub.publish(msg_type("std_msgs/msg/String")(data=kind))

    def close(self) -> None:
        self.peer.close()
        alive = self.proc.poll() is None
        self.proc.terminate()
        try:
            self.log = self.proc.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            raise dump(self.proc, "the stand-in ignored SIGTERM for 30 s") from None
        assert alive, self.log[-3000:]


@contextmanager
def ur5e(domain: int, *overrides: str, drills: tuple[str, ...] = (), name: str = "ur5e") -> Iterator:
    """(stand-in, env): a shipped ur5e config against its stand-in process (`Standin`)."""
    sim = Standin(domain, name, drills)
    try:
        env = ur_env(load_robot_config(name, [f"domain_id={domain}", *LOADED, *overrides]))
        try:
            yield sim, env
        finally:
            env.close()
    finally:
        sim.close()


@contextmanager
def ur5e_in_process(domain: int, *overrides: str, cameras: tuple[str, ...] = ()) -> Iterator:
    """(stand-in, env) for a test that reads or replaces the stand-in's own state: it runs in a thread here."""
    cfg = load_robot_config("ur5e", [f"domain_id={domain}", *LOADED, *overrides])
    with serving(SimRobotConfig(driver="ur5e", cameras=cameras), cfg) as sim:
        env = ur_env(cfg, cameras)
        try:
            yield sim, env
        finally:
            env.close()


@contextmanager
def serving(sim_cfg: SimRobotConfig, cfg: RobotConfig) -> Iterator[SimRobot]:
    """A sim robot built, run and closed in a thread of its own: a camera's GL context is current there."""
    made: list[SimRobot] = []
    stop, ready = threading.Event(), threading.Event()

    def serve() -> None:
        sim = SimRobot(sim_cfg, cfg)
        made.append(sim)
        ready.set()
        try:
            sim.run(stop)
        finally:
            sim.close()

    loop = threading.Thread(target=serve, daemon=True)
    loop.start()
    assert ready.wait(30.0)
    try:
        yield made[0]
    finally:
        stop.set()
        loop.join()


def action(k: int) -> np.ndarray:
    """Back and forth along x (half a step each control period), gripper open: inside the workspace for ever."""
    return np.array([0.5 if (k // 4) % 2 == 0 else -0.5, 0.0, 0.0, -1.0])


def steps_until_hold(env: RobotEnv, n: int) -> tuple[list[dict], RobotHold]:
    """The infos of the steps that returned (each a transition an actor would hold), and the hold that ended them."""
    infos = []
    with pytest.raises(RobotHold) as e:
        for k in range(n):
            infos.append(env.step(action(k))[4])
    return infos, e.value


def moves(env: RobotEnv) -> float:
    """How far the TCP moved over four steps after a reset."""
    start = env.robot_state().tcp_pos
    for _ in range(4):
        env.step(action(0))
    return float(np.linalg.norm(env.robot_state().tcp_pos - start))


def reported(env: RobotEnv) -> float:
    """Seconds until the link hears the driver report a stop (the driver's and the wire's latency, not ours)."""
    start = time.time()
    wait_until(lambda: env._driver.poll() is not None, 10.0, "the driver's report of the stop")
    return time.time() - start


@pytest.mark.parametrize(("drill", "hold"), [("protective_stop", "protective stop"),
                                             ("JOINT_BOUND", "servo halted: JOINT_BOUND")])  # fmt: skip
def test_a_ur_stop_is_a_hold_at_the_next_step_and_the_reset_recovers_it(domain: int, drill: str, hold: str) -> None:
    with ur5e(domain) as (sim, env):
        assert env._driver.switched  # servo switched to TWIST by the link at start, no manual call
        env.reset(seed=0)
        assert moves(env) > 0.01
        sim.fault(drill)
        stopped = time.time()
        heard = reported(env)
        infos, e = steps_until_hold(env, 5)
        assert hold in str(e) and not infos  # no transition from a step sent once the driver said so
        arm = env.robot_state().tcp_pos
        time.sleep(0.3)
        assert np.linalg.norm(env.robot_state().tcp_pos - arm) < 1e-3  # the arm stays where it stopped
        env.reset(seed=1)  # recovered by the link: unlock (after the UR's 5 s), program, servo
        recovered = time.time() - stopped
        assert env._driver.poll() is None and moves(env) > 0.01
    if drill == "protective_stop":
        assert recovered >= UNLOCK_AFTER_S
    print(f"\n{drill}: heard {heard * 1e3:.0f} ms after the drill, recovered at the reset {recovered:.1f} s after it")


def test_a_policy_pressing_past_the_urs_force_limit_is_its_safety_failure_and_the_reset_recovers(domain: int) -> None:
    """The hand pushed onto the cube: the stand-in's protective stop at 150 N says no cause, the wrench does
    (`force_stop_n`), so the step is the policy's penalised terminal, not an abort that would be re-run."""
    with ur5e_in_process(domain, "safety.workspace_lo=[0.25,-0.25,0.0]") as (sim, env):
        env.reset(seed=0)
        above = sim.data.xpos[sim._object][:2] + (0.0, 0.04)  # a finger over the cube's top, not straddling it
        out: tuple = ()
        for _ in range(60):
            dx, dy = (above - env.robot_state().tcp_pos[:2]) / env.max_step
            out = env.step(np.array([dx, dy, -1.0 if max(abs(dx), abs(dy)) < 0.3 else 0.0, -1.0]))
            if out[2] or out[3]:
                break
        _, reward, terminated, _, info = out
        assert terminated and info["safety_failure"] and reward == env.cfg.safety_reward, info
        assert info["robot_hold"].startswith("force limit (") and info["robot_hold"].endswith("protective stop")
        env.reset(seed=1)  # unlock after the UR's 5 s, program resent, servo switched
        assert env._driver.poll() is None and moves(env) > 0.01


def test_a_force_limit_is_a_protective_stop_that_outlasts_scene_resets_until_unlocked_and_resent(domain: int) -> None:
    """A protective stop the wrench did not see (the sim's force hold drilled: a collision elsewhere on the arm) is no
    failure of the policy's (an abort), still there after a scene reset, an unlock refused within 5 s; with a person
    resetting the scene (no reset topic), the link's unlock and program restart alone let the arm move home."""
    with ur5e(domain, "scene_reset=operator") as (sim, env):
        env.operator_prompt = lambda _: None  # the person at the cell presses Enter
        env.reset(seed=0)
        time.sleep(0.5)  # servo has timed out since the reset's last command: a collision still stops the arm
        sim.fault("force_limit")  # what the sim's contact check calls
        reported(env)
        infos, e = steps_until_hold(env, 5)
        assert "protective stop" in str(e) and not infos  # an abort, no safety_failure transition
        assert not env._driver._call(env._driver._unlock, "unlock_protective_stop")  # within 5 s: refused
        env._reset_via_topic(7)  # the scene reset alone clears nothing
        time.sleep(0.2)
        assert env._driver.poll() == "protective stop"
        with pytest.raises(RobotHold, match="protective stop"):
            env.step(action(0))
        env.reset(seed=1)  # unlock after 5 s, resend the program (ends the sim's hold), home, the person's Enter
        assert moves(env) > 0.01


def test_a_protective_stop_the_driver_does_not_report_is_caught_by_the_watchdog_alone(domain: int) -> None:
    with ur5e(domain, drills=("mute",)) as (sim, env):
        env.reset(seed=0)
        assert moves(env) > 0.01
        assert env._driver.poll() is None  # nothing heard from the driver, nothing held
        sim.fault("protective_stop")
        time.sleep(1.0)  # the drill lands: a loopback message, well within this on a loaded box
        infos, e = steps_until_hold(env, 20)
        assert "not_following" in str(e)
        # Every step that returned after the stop is one the actor still held back, and the hold voids them all.
        assert 0 < len(infos) <= e.void_steps and all(i["unconfirmed_steps"] >= 1 for i in infos)
        assert infos[-1]["unconfirmed_steps"] >= len(infos)
        env.reset(seed=1)  # the link recovers blindly: unlock (refused until 5 s), program, servo
        assert moves(env) > 0.01
    print(f"\nwatchdog: {len(infos)} steps after the stop, void_steps {e.void_steps}")


def test_servo_halts_when_commands_stop_and_the_next_command_moves_the_arm_again(domain: int) -> None:
    with ur5e(domain) as (sim, env):
        env.reset(seed=0)
        env.step(action(0))  # the sim's command watchdog (servo's timeout) starts with the first command
        time.sleep(0.5)  # a policy that paused: past servo's incoming_command_timeout (the sim's 0.25 s)
        assert env._driver.poll() is None and moves(env) > 0.01  # silent, and over with the next command
    assert "holding: no_action" in sim.log  # it did halt


def test_servo_integrates_twists_to_the_cells_reach_not_to_a_robot_configs_workspace(domain: int) -> None:
    """MoveIt Servo knows no workspace of ours: a stand-in started from the shipped yaml (z >= 0.03) takes a policy
    side whose workspace reaches the table (PickCube's cube centre is at z = 0.02) down past 0.03."""
    shipped = load_robot_config("ur5e", [f"domain_id={domain}", *LOADED])
    low = load_robot_config("ur5e", [f"domain_id={domain}", *LOADED, "safety.workspace_lo=[0.25,-0.25,0.02]"])
    with serving(SimRobotConfig(driver="ur5e"), shipped) as sim:
        env = ur_env(low)
        try:
            env.reset(seed=0)
            for k in range(24):  # away from the cube, and down at a landing speed that trips no force limit
                env.step(np.array([0.0, -0.5 * (k < 8), -0.5, -1.0]))
            assert sim._target[2] < 0.027, sim._target
            assert sim.env.unwrapped.cfg.ee_force_limit == UrStandin.force_limit_n  # its protective stop, not a reflex
        finally:
            env.close()


def test_the_compliant_config_drives_pose_targets_without_servo_and_holds_on_a_protective_stop(domain: int) -> None:
    compliant = str(Path(__file__).parents[2] / "configs" / "robot" / "ur5e_compliant.yaml")
    with ur5e(domain, name=compliant) as (sim, env):
        assert env.cfg.command_type == "pose" and env._driver.switched  # no servo to switch, none asked
        env.reset(seed=0)
        assert moves(env) > 0.01 and env._driver.poll() is None
        sim.fault("protective_stop")
        reported(env)
        infos, e = steps_until_hold(env, 5)
        assert "protective stop" in str(e) and not infos


def test_split_joint_states_tcp_wrench_and_usb_cam_images_read_right(domain: int) -> None:
    """The arm's and the Robotiq's /joint_states read per joint; the tool0_controller wrench, turned back by the TCP
    pose, is the sim's base-frame one; a compressed and a raw yuyv usb_cam camera decode to the rendered frame."""
    sent: dict[float, np.ndarray] = {}  # stamp -> base-frame force the stand-in was given (a contact stand-in)
    rendered: dict[float, dict[str, np.ndarray]] = {}  # stamp -> the frames rendered then
    raw_wrist = (
        "cameras=[{name: front, topic: /cameras/front/image_raw/compressed, compressed: true},"
        "{name: wrist, topic: /cameras/wrist/image_raw, compressed: false}]"
    )  # a raw yuyv usb_cam
    with ur5e_in_process(domain, raw_wrist, cameras=("front", "wrist")) as (sim, env), PlainNode(domain, "spy") as spy:
        joints = spy.subscribe("/joint_states", "sensor_msgs/msg/JointState")
        info = spy.subscribe("/cameras/front/camera_info", "sensor_msgs/msg/CameraInfo")
        state = sim.face.state

        def push(out: dict, stamp: float) -> dict:
            k = len(sent)
            force = np.array([3.0 * np.sin(k), -2.0, 5.0 + np.cos(k)])
            out["wrench"] = msgs.wrench_stamped(force, 0.1 * force, stamp, "base")
            sent[round(stamp, 6)] = force
            if "camera:front" in out:
                rendered[round(stamp, 6)] = {c: f.copy() for c, f in sim.frames.items()}
            return state(out, stamp)

        sim.face.state = push
        env.reset(seed=0)
        for k in range(3):
            obs, *_ = env.step(action(k))

        def publishers() -> set[tuple[str, ...]]:  # the joint sets the /joint_states messages carried
            return {tuple(m.name) for m in joints}

        spy.spin_until(lambda: len(info) > 0 and len(publishers()) > 1, 10.0, "both joint states and camera info")
        assert publishers() == {tuple(env.cfg.joint_names), ("robotiq_85_left_knuckle_joint",)}
        assert (info[-1].width, info[-1].height) == (64, 64)
        wrench = env._latest["wrench"][0]
        assert wrench.header.frame_id == "tool0_controller"
        force, torque = env._wrench()
        np.testing.assert_allclose(force, sent[round(msgs.stamp_of(wrench), 6)], atol=1e-6)
        assert not np.allclose(msgs.wrench_of(wrench)[0], force, atol=0.1)  # it was turned
        np.testing.assert_allclose(torque, 0.1 * force, atol=1e-6)
        assert abs(env.robot_state().gripper - 1.0) < 0.05  # the knuckle at 0 rad: open
        front, wrist = env._latest["camera:front"][0], env._latest["camera:wrist"][0]
        assert front.format.endswith("jpeg compressed bgr8") and wrist.encoding == "yuv422_yuy2"
        for cam, stamp in env.stamps()["camera_timestamps"].items():
            error = np.abs(obs[cam].astype(int) - rendered[round(stamp, 6)][cam].astype(int)).mean()
            assert error < 3.0, (cam, error)  # lossy (jpeg, 4:2:2 chroma), not garbage


def knuckle_after(domain: int, openings: tuple[float, ...]) -> list[float]:
    """Each opening sent on our gripper topic at 10 Hz (as RobotEnv sends it) until the Robotiq knuckle's angle on
    its own /joint_states is there (0 rad open, 0.8 closed) or 5 s passed: the angles reported then."""
    knuckle, angles = ["robotiq_85_left_knuckle_joint"], []
    with PlainNode(domain, "gripper_user") as node:
        joints = node.subscribe("/joint_states", "sensor_msgs/msg/JointState")
        pub = node.publisher("/robot_rl/gripper_command", "std_msgs/msg/Float64")

        def angle() -> float:
            return next((m.position[0] for m in reversed(joints) if list(m.name) == knuckle), np.nan)

        for opening in openings:
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and not abs(angle() - 0.8 * (1.0 - opening)) < 0.02:
                pub.publish(msg_type("std_msgs/msg/Float64")(data=opening))
                end = time.monotonic() + 0.1
                while time.monotonic() < end:
                    node.executor.spin_once(timeout_sec=0.01)
            angles.append(angle())
    return angles


@pytest.mark.slow
def test_the_shipped_ur5e_config_collects_trains_and_deploys_against_its_standin(domain: int, tmp_path: Path) -> None:
    """`collect`, `train robot=ur5e` and `deploy` with the shipped ur5e.yaml in real time, against `sim-robot --driver
    ur5e` (the driver from the robot config) and `gripper-bridge --robot ur5e`. Overrides only for what the sim stands
    in for: the person who resets the scene (`scene_reset=topic`) and judges success (the sim's success topic); the
    domain; and a short episode for the test's time."""
    sets = [f"domain_id={domain}", "scene_reset=topic", "success_topic=/success", "max_episode_steps=12"]
    robot_sets = [a for kv in sets for a in ("--robot-set", kv)]
    started = time.monotonic()
    sim = spawn("sim-robot", "--robot", "ur5e", "--domain", str(domain))
    bridge = spawn("gripper-bridge", "--robot", "ur5e", "--domain", str(domain))
    store, run = tmp_path / "demos", tmp_path / "run"
    try:
        col = spawn("collect", str(store), "--robot", "ur5e", *robot_sets, "-n", "2", "--teleop", "simulated",
                    "--obs", "state", "--no-fsync")  # fmt: skip
        _, err = col.communicate(timeout=120)
        assert col.returncode == 0, err[-3000:]
        tr = spawn("train", "robot=ur5e", *(f"robot.{kv}" for kv in sets), "intervention.enabled=false", "threads=1",
                   "loop.env_steps=24", "loop.eval_every=0", "loop.final_eval_episodes=1", "loop.checkpoint_every=0",
                   f"run_dir={run}")  # fmt: skip
        _, err = tr.communicate(timeout=120)
        assert tr.returncode == 0, err[-3000:]
        dep = spawn("deploy", str(run), "--robot", "ur5e", *robot_sets, "--episodes", "1", "--quiet")
        dout, err = dep.communicate(timeout=60)
        assert dep.returncode == 0, err[-3000:]
        assert sim.poll() is None, sim.communicate()[1][-3000:]  # it served all three runs
        opened, closed = knuckle_after(domain, (1.0, 0.0))
    finally:
        stop(sim)
        bridge.terminate()
        _, bridge_log = bridge.communicate(timeout=30)
    with EpisodeStore(store) as st:
        assert len(st) == 2 and st.meta(0)["robot"]["name"] == "ur5e"
        lay, state = st.meta(0)["state_layout"], np.concatenate([st.episode(i)["state"] for i in range(2)])
        assert lay["joint_pos"][1] - lay["joint_pos"][0] == 6  # the UR's six, the Robotiq's knuckle apart
        assert np.isfinite(state).all()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["robot"] == "ur5e" and summary["env"] == "RobotEnv"
    assert summary["env_steps"] == 24
    deployed = json.loads(dout)
    # An episode a loaded host aborted on a late message is re-run; a stop of the driver's never happens here.
    assert deployed["episodes"] == 1 and not any(w in err for w in ("protective stop", "servo halted", "fault:"))
    print(f"\nur5e end to end {time.monotonic() - started:.0f} s; knuckle {opened:.2f} rad open, {closed:.2f} closed")
    assert opened < 0.1 and closed > 0.7  # the bridge's goals moved the sim fingers; the knuckle reported it


def test_the_sim_robot_publishes_a_compressed_camera_as_compressed_images(domain: int) -> None:
    """Without a driver too: a camera the config reads `compressed: true` gets jpeg CompressedImages on its topic
    (before, a raw Image went out on it, which no CompressedImage reader matches)."""
    cameras = "cameras=[{name: front, topic: camera/front/image_raw/compressed, compressed: true}]"
    cfg = load_robot_config("sim", [f"domain_id={domain}", cameras])
    with serving(SimRobotConfig(cameras=("front",)), cfg) as sim:
        layout = ObsLayout.from_slices(proprio_layout(cfg), control_hz=HZ, cameras=("front",), image_size=64)
        env = RobotEnv(cfg, layout, node_name="camera_test")
        try:
            obs, _ = env.reset(seed=0)
            frame = env._latest["camera:front"][0]
            assert frame.format.endswith("jpeg compressed bgr8")
            assert np.abs(obs["front"].astype(int) - sim.frames["front"].astype(int)).mean() < 3.0
        finally:
            env.close()
