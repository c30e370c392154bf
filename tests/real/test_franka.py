"""The shipped Franka config against `sim-robot --driver franka` (real/franka.py): franka_ros2 + CRISP's topics,
services and faults over ROS 2 on loopback, and RobotEnv's reading of them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import mujoco
import numpy as np
import pytest
import yaml
from plain_ros import PlainNode, msg_type
from real_util import run as run_cli
from real_util import spawn, stop

from robot_rl.demos.store import EpisodeStore
from robot_rl.envs import make_env
from robot_rl.loop.actor import Actor
from robot_rl.real.config import RobotConfig, load_robot_config, proprio_layout
from robot_rl.real.franka import HARDWARE, FrankaLink, _libfranka_text, _named_state, libfranka_hold
from robot_rl.real.robot import RobotEnv, RobotHold, SafetyStop, StaleDataError
from robot_rl.sim.config import EnvConfig
from robot_rl.types import EpisodeAborted, ObsLayout

pytestmark = [pytest.mark.ros2, pytest.mark.realtime]
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "ros2_control"
# What the sim stands in for beyond the driver: the person who resets the scene (the sim re-seeds it on our topic)
# and judges success (the sim's check on its `success` topic, where a cell has a classifier or a person's key).
# And the robot PC's timing: a Python sim arm ticking 100 Hz on a shared test host, not a real-time 1 kHz driver, can
# deliver a state late (0.29 s seen, run alone on the 2-core box): these tests are about faults, not timing.
STANDIN = ["scene_reset=topic", "success_topic=success", "reset_timeout_s=30", "safety.state_timeout_s=1.0",
           "staleness_s=1.0"]  # fmt: skip


def franka(domain: int) -> RobotConfig:
    return load_robot_config("franka", [f"domain_id={domain}", *STANDIN])


@pytest.fixture
def cell(domain: int) -> Iterator[RobotConfig]:
    """`sim-robot --robot franka` (its driver: franka; no command watchdog: CRISP holds its last target for ever;
    no cameras: no test here reads them, and rendering loads the shared box) and the gripper bridge the real driver
    needs, as their own processes, real time."""
    robot = franka(domain)
    sets = [a for kv in STANDIN for a in ("--robot-set", kv)]
    procs = [spawn("sim-robot", "--robot", "franka", "--domain", str(domain), "--command-timeout", "0", *sets),
             spawn("gripper-bridge", "--robot", "franka", "--domain", str(domain))]  # fmt: skip
    yield robot
    stop(*procs)


def sim_layout(robot: RobotConfig) -> ObsLayout:
    """The sim task's state layout (it reads the cube's pose, which the sim robot publishes as a tracker would)."""
    env = make_env(EnvConfig())
    lay = env.unwrapped.state_layout
    env.close()
    return ObsLayout.from_slices(lay, control_hz=robot.control_hz)


def reset(env: RobotEnv, seed: int) -> dict[str, np.ndarray]:
    """A reset, retried as the actor retries it: a loaded test host can deliver a state late (an abort, no fault)."""
    for _ in range(8):
        try:
            return env.reset(seed=seed)[0]
        except StaleDataError:
            time.sleep(0.5)
        except SafetyStop as e:
            if "stale_state" not in str(e):
                raise
    return env.reset(seed=seed)[0]


def step_until_held(env: RobotEnv, steps: int = 30) -> str:
    """Zero steps until the driver's hold is heard (a RobotHold's text). A loaded host may deliver the drill late,
    or starve the stand-in (12 s seen in CI): a stale state is an abort, not the fault, and is stepped past."""
    for _ in range(steps):
        try:
            env.step(np.zeros(4))
        except RobotHold as e:
            return str(e)
        except StaleDataError:
            time.sleep(0.5)
    raise AssertionError(f"no hold heard in {steps} steps")


def silent_for(heard: list[object], seconds: float) -> Callable[[], bool]:
    """A predicate: nothing new in `heard` for `seconds` (a broadcaster stopped, seen on the wire)."""
    last = [time.monotonic(), len(heard)]

    def silent() -> bool:
        if len(heard) != last[1]:
            last[:] = [time.monotonic(), len(heard)]
        return time.monotonic() - last[0] > seconds

    return silent


class Push:
    """Over the cube, then down through it with the gripper closed, until the force limit trips the reflex."""

    def __init__(self, lay: ObsLayout) -> None:
        self.to_cube, self.gripper = lay.slices()["cube_minus_tcp"], lay.slices()["gripper_opening"]

    def select_action(self, obs, deterministic=False):  # noqa: ANN001, ANN202
        if obs["state"][self.gripper][0] > 0.05:  # closed first (the bridge's goal takes a moment), holding still
            return np.array([0.0, 0.0, 0.0, 1.0])
        to_cube = obs["state"][self.to_cube]
        if np.linalg.norm(to_cube[:2]) > 0.005:
            return np.array([*np.clip(to_cube[:2] / 0.025, -1, 1), 0.0, 1.0])
        return np.array([0.0, 0.0, -1.0, 1.0])

    def reset(self) -> None:
        pass


class Rosout:
    """/rosout as a person's `ros2 topic echo` sees it, spun in a thread."""

    def __init__(self, domain: int) -> None:
        self.peer = PlainNode(domain, "rosout_reader")
        self.logs = self.peer.subscribe("/rosout", "rcl_interfaces/msg/Log")
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        while self.peer.context.ok():
            try:
                self.peer.executor.spin_once(timeout_sec=0.02)
            except Exception:  # closed under us
                return

    def errors(self, name: str) -> list[tuple[float, str]]:
        return [(m.stamp.sec + m.stamp.nanosec * 1e-9, m.msg) for m in list(self.logs) if m.name == name]

    def close(self) -> None:
        self.peer.context.try_shutdown()
        self.thread.join()


def test_a_reflex_is_a_safety_terminal_at_once_and_the_next_reset_recovers_it(cell: RobotConfig, domain: int) -> None:
    """Pushed through the cube, the arm's reflex stops franka_ros2's broadcasters: the step that heard it is the
    policy's safety terminal (not a staleness abort) within one control period, no later step runs, and the
    next reset runs error_recovery and re-activates hardware and controllers by itself; the arm then moves again."""
    lay = sim_layout(cell)
    env = RobotEnv(cell, lay, max_episode_steps=200)  # a starved sim arm pushes slower than real time
    rosout = Rosout(domain)
    ends: list[tuple[float, bool]] = []  # (when each step returned, terminal)
    step, recover, recoveries = env.step, env._driver.recover, []

    def timed_step(a):  # noqa: ANN001, ANN202
        out = step(a)
        ends.append((time.time(), out[2]))
        return out

    env.step = timed_step
    # A recovery of a fault the driver reports (a reset after a silent stop asks too, and finds nothing to do).
    env._driver.recover = lambda prompt: (env._driver.poll() and recoveries.append(time.time()), recover(prompt))
    try:
        actor = Actor(env, Push(lay), retry_s=0.0)
        stored = [actor.step()]
        while not stored[-1].done:
            stored.append(actor.step())
        last = stored[-1]
        assert last.terminated and last.reward == cell.safety_reward, last
        # A loaded host may abort an episode on a late message before the push; the reflex itself never aborts
        # (that would have reset, hence recovered, before the terminal).
        assert not recoveries

        def reflexes() -> list[float]:
            return [t for t, text in rosout.errors("FrankaHardwareInterface") if '["cartesian_reflex"]' in text]

        deadline = time.monotonic() + 10.0  # /rosout may reach this listener after the terminal step did
        while not reflexes() and time.monotonic() < deadline:
            time.sleep(0.05)
        reflex = reflexes()
        assert len(reflex) == 1, rosout.errors("FrankaHardwareInterface")
        after = [(t - reflex[0], done) for t, done in ends if t > reflex[0]]
        # The step that heard it is the terminal, and the last; on a loaded host the driver's message may arrive just
        # after the step that was running returned (0.09 s after the reflex seen), so that step is a plain one.
        assert [d for _, d in after] in ([True], [False, True]), after
        # Within its control period: 0.04 .. 0.07 s measured on an idle host; a loaded shared one adds up to 0.5 s.
        assert after[-1][0] < 1.0 / cell.control_hz + 0.5, after
        assert env._driver.poll() == "reflex: cartesian_reflex"
        # The next episode starts on a recovered arm, which moves again.
        obs = reset(env, 3)
        assert len(recoveries) == 1 and env._driver.poll() is None
        tcp = lay.slices()["tcp_minus_cube_start"]  # the cube's start is fixed: this moves as the TCP does
        z0 = obs["state"][tcp][2]
        for _ in range(3):
            obs = env.step(np.array([0.0, 0.0, 1.0, -1.0]))[0]
        assert obs["state"][tcp][2] > z0 + 0.02, (z0, obs["state"][tcp])
    finally:
        rosout.close()
        env.close()


def test_a_reflex_between_steps_ends_the_next_step_as_the_terminal_without_a_staleness_abort(
    cell: RobotConfig, domain: int
) -> None:
    """A reflex while the policy computes (heard at the next step's start, the broadcasters silent for longer than
    any staleness limit, through a scene reset) still ends that step as the policy's safety terminal, with nothing
    waited for."""
    env = RobotEnv(cell, ObsLayout.from_slices(proprio_layout(cell), control_hz=cell.control_hz))
    try:
        with PlainNode(domain, "drill") as peer:
            drill = peer.publisher("/franka_standin/fault", "std_msgs/msg/String")
            peer.spin_until(lambda: drill.get_subscription_count() > 0, 10, "the stand-in's drill topic")
            reset(env, 1)
            env.step(np.zeros(4))
            poses = peer.subscribe(cell.ee_pose_topic, "geometry_msgs/msg/PoseStamped")
            drill.publish(msg_type("std_msgs/msg/String")(data="cartesian_reflex"))
            peer.spin_until(silent_for(poses, cell.staleness_s), 20, "the broadcasters' silence after the reflex")
            peer.spin_until(lambda: env._driver.poll() is not None, 20, "the reflex heard by the link")
            # Our scene reset (the person's, here the sim's) does not clear the driver's fault.
            done = peer.subscribe("/robot_rl/reset_done", "std_msgs/msg/Int64")
            peer.spin_until(lambda: peer.node.count_subscribers("/robot_rl/reset") > 0, 10, "the reset topic")
            peer.publisher("/robot_rl/reset", "std_msgs/msg/Int64").publish(msg_type("std_msgs/msg/Int64")(data=7))
            peer.spin_until(lambda: any(m.data == 7 for m in done), 10, "reset_done 7")
            time.sleep(0.2)
        started = time.monotonic()
        _, reward, terminated, _, info = env.step(np.zeros(4))
        assert terminated and reward == cell.safety_reward and info["safety_failure"]
        assert info["robot_hold"] == "reflex: cartesian_reflex" and time.monotonic() - started < 0.5 / cell.control_hz
        assert time.time() - env.stamps()["state_timestamp"] > cell.staleness_s  # silent through the reset
        reset(env, 2)
        assert env._driver.poll() is None and not env.step(np.zeros(4))[2]
    finally:
        env.close()


def test_a_reflex_heard_after_the_deactivation_is_still_a_reflex(domain: int) -> None:
    """libfranka's error text (/rosout) and the controller_manager's deactivation (its activity topic) arrive in
    either order: the link waits a moment for the text before it calls a stopped hardware a fault."""
    from controller_manager_msgs.msg import ControllerManagerActivity
    from rcl_interfaces.msg import Log

    link = FrankaLink(franka(domain))
    try:
        with PlainNode(domain, "controller_manager") as peer:
            activity = peer.publisher(
                "controller_manager/activity", "controller_manager_msgs/msg/ControllerManagerActivity", "latched"
            )
            rosout = peer.publisher("/rosout", "rcl_interfaces/msg/Log")
            peer.spin_until(lambda: rosout.get_subscription_count() > 0 and activity.get_subscription_count() > 0,
                            10, "the link's subscriptions")  # fmt: skip
            m = ControllerManagerActivity(hardware_components=[_named_state(HARDWARE, False)])
            activity.publish(m)
            peer.spin_until(lambda: link.hardware is False, 10, "the deactivation")
            threading.Timer(0.05, lambda: rosout.publish(Log(name=HARDWARE, msg=_libfranka_text("cartesian_reflex"),
                                                             level=Log.ERROR))).start()  # fmt: skip
            assert link.poll() == "reflex: cartesian_reflex"
            link.error = None  # the text waited for once per deactivation: a missing one is a fault
            assert link.poll() == "fault: hardware inactive"
    finally:
        link.close()


@pytest.mark.parametrize(("log", "hold"), [
    ('["cartesian_reflex"]', "reflex: cartesian_reflex"),
    ('["joint_velocity_violation", "joint_motion_generator_velocity_limits_violation"]',
     "reflex: joint_velocity_violation, joint_motion_generator_velocity_limits_violation"),
    ("[communication_constraints_violation]", "fault: communication_constraints_violation"),
    ('["joint_velocity_violation", "communication_constraints_violation"]',
     "fault: joint_velocity_violation, communication_constraints_violation"),
])  # fmt: skip
def test_libfrankas_errors_are_the_policys_reflex_only_when_every_one_is_its_doing(log: str, hold: str) -> None:
    """As lab logs show libfranka's aborted moves (quoted or not, one Error or several): contact, limits and speed
    are the policy's; the control PC's timing is not, alone or beside them."""
    assert libfranka_hold(f"libfranka: Move command aborted: motion aborted by reflex! {log}") == hold
    rejected = "libfranka: Move command rejected: command not possible in the current mode!"
    assert libfranka_hold(rejected) == "fault: Move command rejected: command not possible in the current mode!"
    assert libfranka_hold("Deactivating following hardware components ...: [ FrankaHardwareInterface ]") is None


def test_a_driver_fault_aborts_the_episode_and_the_next_reset_recovers_it(cell: RobotConfig, domain: int) -> None:
    """communication_constraints_violation is no doing of the policy: the episode aborts (RobotHold, an
    EpisodeAborted) and the next reset recovers it through franka_ros2's services."""
    env = RobotEnv(cell, ObsLayout.from_slices(proprio_layout(cell), control_hz=cell.control_hz))
    try:
        reset(env, 1)
        env.step(np.zeros(4))
        with PlainNode(domain, "drill") as peer:
            drill = peer.publisher("/franka_standin/fault", "std_msgs/msg/String")
            peer.spin_until(lambda: drill.get_subscription_count() > 0, 10, "the stand-in's drill topic")
            drill.publish(msg_type("std_msgs/msg/String")(data="communication_constraints_violation"))
            assert "fault: communication_constraints_violation" in step_until_held(env)
        assert isinstance(RobotHold("x"), EpisodeAborted)
        reset(env, 2)
        assert env._driver.poll() is None and env.step(np.zeros(4))[1] == 0.0
    finally:
        env.close()


def test_crisp_ignoring_a_target_with_two_publishers_is_caught_as_not_following(cell: RobotConfig, domain: int) -> None:
    """A second publisher on target_pose (a teleop node left running) makes CRISP drop every target without a word:
    the arm stays, RobotEnv's not-following watchdog aborts the episode; with the node gone the arm follows again."""
    env = RobotEnv(cell, ObsLayout.from_slices(proprio_layout(cell), control_hz=cell.control_hz))
    up = np.array([0.0, 0.0, 1.0, -1.0])
    try:
        z0 = reset(env, 1)["state"][2]  # tcp_pos z
        with PlainNode(domain, "teleop") as peer:
            peer.publisher(cell.command_topic, "geometry_msgs/msg/PoseStamped")
            peer.spin_until(lambda: peer.node.count_publishers(cell.command_topic) == 2, 10, "two publishers")
            time.sleep(1.0)  # the stand-in's graph sees it too (a loaded host's discovery takes its time)
            with pytest.raises(RobotHold, match="not_following"):
                for _ in range(cell.follow_window + 3):
                    z = env.step(up)[0]["state"][2]
            assert abs(z - z0) < 0.003, (z0, z)
        time.sleep(0.3)
        z0 = reset(env, 2)["state"][2]
        for _ in range(3):
            z = env.step(up)[0]["state"][2]
        assert z > z0 + 0.02, (z0, z)
    finally:
        env.close()


def test_a_user_stop_aborts_and_the_next_reset_asks_the_person_once(cell: RobotConfig, domain: int) -> None:
    """ROBOT_MODE_USER_STOPPED has no service that clears it: the episode aborts, and the next reset prompts the
    person at the robot (one line) before franka_ros2's recovery, then the arm moves again."""
    env = RobotEnv(cell, ObsLayout.from_slices(proprio_layout(cell), control_hz=cell.control_hz))
    try:
        with PlainNode(domain, "drill") as peer:
            drill = peer.publisher("/franka_standin/fault", "std_msgs/msg/String")
            peer.spin_until(lambda: drill.get_subscription_count() > 0, 10, "the stand-in's drill topic")
            reset(env, 1)
            drill.publish(msg_type("std_msgs/msg/String")(data="user_stop"))
            assert "user stop" in step_until_held(env)
            prompts: list[str] = []

            def person(text: str) -> None:
                prompts.append(text)
                drill.publish(msg_type("std_msgs/msg/String")(data="user_stop_released"))

            env.operator_prompt = person
            reset(env, 2)
        assert len(prompts) == 1 and "user stop" in prompts[0], prompts
        assert env._driver.poll() is None and env.step(np.zeros(4))[1] == 0.0
    finally:
        env.close()


def test_the_shipped_franka_config_collects_trains_and_deploys_against_franka_ros2(
    cell: RobotConfig, domain: int, tmp_path: Path
) -> None:
    """configs/robot/franka.yaml as a lab ships it, against `sim-robot --driver franka` and the gripper bridge in
    real time: `collect` with the simulated operator, a short `train robot=franka` and `deploy` all run end to end
    through CRISP's target_pose, the broadcaster's pose and wrench, the merged /joint_states and franka_gripper."""
    d, store, run = str(domain), tmp_path / "demos", tmp_path / "run"
    sets = [a for kv in (*STANDIN, "max_episode_steps=12") for a in ("--robot-set", kv)]
    out = run_cli("collect", str(store), "--robot", "franka", "--domain", d, *sets, "-n", "1", "--teleop",
                  "simulated", "--obs", "state", "--max-steps", "12", "--no-fsync", timeout=120)  # fmt: skip
    assert "collected 1 episodes" in out
    with EpisodeStore(store) as st:
        ep, meta = st.episode(0), st.meta(0)
        assert meta["robot"]["name"] == "franka" and meta["robot"]["driver"] == "franka"
        d_cube = np.linalg.norm(ep["state"][:, st.meta(0)["state_layout"]["cube_minus_tcp"][0] :][:, :3], axis=1)
        assert d_cube[-1] < d_cube[0] - 0.02, d_cube.round(3)  # the operator reached for the cube
        assert (ep["state"][:, meta["state_layout"]["joint_pos"][0]] != 0).all()  # the merged /joint_states
    robot = [f"robot.{kv}" for kv in (*STANDIN, "max_episode_steps=12")]
    run_cli("train", "robot=franka", f"robot.domain_id={domain}", *robot, "intervention.enabled=false", "threads=1",
            "loop.env_steps=24", "loop.eval_every=0", "loop.final_eval_episodes=1", "loop.checkpoint_every=0",
            f"run_dir={run}", timeout=180)  # fmt: skip
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["robot"] == "franka" and summary["env_steps"] == 24
    dep = spawn("deploy", str(run), "--robot", "franka", "--domain", d, *sets, "--episodes", "1", "--quiet")
    out, err = dep.communicate(timeout=120)
    assert dep.returncode == 0, err[-3000:]
    summary = json.loads(out)
    # An episode a loaded host aborted on a late message is re-run; a driver fault never happens here.
    assert summary["episodes"] == 1 and summary["per_episode"][0]["steps"] >= 1
    assert "fault:" not in err and "reflex" not in err and "user stop" not in err, err[-3000:]


def test_crisp_gains_are_the_sim_arms() -> None:
    """configs/ros2_control/franka_crisp.yaml: CRISP's stiffness, damping and error clip are the sim arm's."""
    params = yaml.safe_load((CONFIGS / "franka_crisp.yaml").read_text())["/**"]
    task = params["cartesian_impedance_controller"]["ros__parameters"]["task"]
    env = make_env(EnvConfig())
    m = env.unwrapped.model
    try:
        for axis, key, clip in (("x", "pos_x", "x"), ("y", "pos_y", "y"), ("z", "pos_z", "z"), ("rx", "rot_x", "rx"),
                                ("ry", "rot_y", "ry"), ("rz", "rot_z", "rz")):  # fmt: skip
            a = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, f"tcp_{axis}")
            kp, kv, limit = m.actuator_gainprm[a, 0], -m.actuator_biasprm[a, 2], m.actuator_forcerange[a, 1]
            assert task[f"k_{key}"] == kp and task[f"d_{key}"] == kv, axis
            assert task["error_clip"][clip] == pytest.approx(limit / kp, abs=1e-4), axis
    finally:
        env.close()
