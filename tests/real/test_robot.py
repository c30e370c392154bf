"""RobotEnv against the sim robot in one process (in-process transport): layout, motion, reset, staleness."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator

import cv2
import numpy as np
import pytest
from real_util import inproc_robot

from robot_rl.checkpoint import Checkpoint
from robot_rl.demos.interop.session import read_session
from robot_rl.demos.store import EpisodeStore
from robot_rl.demos.teleop import DeviceCommand
from robot_rl.envs import make_env
from robot_rl.real import msgs
from robot_rl.real.config import load_robot_config, proprio_layout
from robot_rl.real.deploy import deploy
from robot_rl.real.robot import STATE_FIELDS, RobotEnv, RobotHold, SafetyStop, StaleDataError
from robot_rl.real.safety import FOLLOW_SLACK
from robot_rl.real.sim_robot import SimRobot, SimRobotConfig
from robot_rl.real.timing import RateKeeper
from robot_rl.sim.config import EnvConfig, RandomizationConfig
from robot_rl.transport import TransportConfig, make_transport, typesys
from robot_rl.types import EE_FORCE_UNIT_N, PRIVILEGED_FIELDS, ObsLayout

pytestmark = pytest.mark.realtime


class Served:
    """A SimRobot ticking in real time (`physics_hz`, absolute deadlines, as `robot-rl sim-robot` does) in a thread
    that owns it (GL contexts are per thread); `paused` stops its ticks (the robot PC hanging) without closing it."""

    def __init__(self, robot_cfg, **kw) -> None:
        self.tx = make_transport(TransportConfig(backend="inproc", domain_id=robot_cfg.domain_id))
        self.stop, self.paused, ready = threading.Event(), threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, args=(robot_cfg, kw, ready), daemon=True)
        self.thread.start()
        assert ready.wait(30)

    def _run(self, robot_cfg, kw, ready: threading.Event) -> None:
        node = SimRobot(SimRobotConfig(**kw), robot_cfg, self.tx)
        self.node = node  # read-only from the test thread (a fault drill's `frozen`)
        ready.set()
        rate = RateKeeper(node.cfg.physics_hz)
        try:
            while not self.stop.is_set():
                if not self.paused.is_set():
                    node.tick()
                rate.sleep()
        finally:
            node.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.tx.close()


@pytest.fixture
def robot_cfg():
    return inproc_robot()


@pytest.fixture
def served(robot_cfg) -> Iterator[Served]:
    s = Served(robot_cfg)
    yield s
    s.close()


def layout() -> dict[str, slice]:
    env = make_env(EnvConfig())
    out = env.unwrapped.state_layout
    env.close()
    return out


@pytest.mark.parametrize("command_type", ["pose", "twist"])
def test_observation_matches_the_sim_task_and_actions_move_the_tcp(robot_cfg, command_type: str) -> None:
    robot_cfg.command_type = command_type  # twist: servo-style TwistStamped, as a UR with moveit_servo takes
    served = Served(robot_cfg)
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(layout(), control_hz=20.0))
    obs, info = env.reset(seed=123)
    ref = make_env(EnvConfig())
    ref_obs, _ = ref.reset(seed=123)
    assert obs["state"].shape == ref_obs["state"].shape == (13,)
    # Same seed => same scene: TCP, gripper and cube (positions within a few mm; the arm is still settling).
    np.testing.assert_allclose(obs["state"][:4], ref_obs["state"][:4], atol=5e-3)
    np.testing.assert_allclose(obs["state"][7:], ref_obs["state"][7:], atol=5e-3)
    x0 = obs["state"][0]
    # 4 steps of up to 2.5 cm move it 2.4-3.6 cm (the impedance arm lags); this thread's robot ticks less often on a
    # busy host (a twist is integrated per tick), so up to 8 steps may be needed.
    for _ in range(8):
        obs, _, _, _, info = env.step(np.array([1.0, 0.0, 0.0, -1.0]))
        if obs["state"][0] - x0 > 0.02:
            break
    assert obs["state"][0] - x0 > 0.02
    assert obs["state"][4:7].max() > 0.1  # tcp_vel sees the motion
    assert info["latency_s"] < 0.05 and not info["hold"]
    env.close()
    served.close()


def test_past_actions_are_observed_like_the_sim_env_when_the_policy_was_trained_with_them(robot_cfg, served) -> None:
    ref = make_env(EnvConfig(randomization=RandomizationConfig(action_history=2)))
    sl = ref.unwrapped.state_layout["last_actions"]
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(ref.unwrapped.state_layout, control_hz=20.0))
    ref_obs, _ = ref.reset(seed=3)
    obs, _ = env.reset(seed=3)
    assert obs["state"].shape == ref_obs["state"].shape == (21,)
    assert obs["state"][sl].tolist() == ref_obs["state"][sl].tolist() == [0.0, 0.0, 0.0, -1.0] * 2
    for action in (np.array([0.5, 2.0, -0.25, 1.0]), np.array([0.0, 0.5, 0.0, -0.5])):
        assert env.step(action)[0]["state"][sl].tolist() == ref.step(action)[0]["state"][sl].tolist()
    held = env.step(np.array([np.nan, 0.0, 0.0, 0.0]))[0]["state"][sl].tolist()
    assert held == [0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, -0.5]  # a rejected action is observed as the hold it became
    env.close()
    ref.close()
    # A task that holds its grip (PegInsert) is sent and shown holding it, as its sim env shows it.
    peg = make_env(EnvConfig(task="PegInsert", randomization=RandomizationConfig(action_history=2)))
    held = RobotEnv(
        robot_cfg, ObsLayout.from_slices(ref.unwrapped.state_layout, control_hz=20.0), held_grip=peg.unwrapped.held_grip
    )
    assert held.reset(seed=3)[0]["state"][sl].tolist() == peg.reset(seed=3)[0]["state"][sl].tolist()
    sent, publish = [], held.publish
    held.publish = lambda cmd: (sent.append(cmd), publish(cmd))[1]
    for action in (np.array([0.5, 2.0, -0.25, -1.0]), np.array([0.0, 0.5, 0.0, 0.3])):
        assert held.step(action)[0]["state"][sl].tolist() == peg.step(action)[0]["state"][sl].tolist()
    assert [c.gripper for c in sent] == [0.0, 0.0]  # the opening sent: closed, whatever the policy said
    held.close()
    peg.close()


def test_delay_compensation_advances_a_late_view_by_the_commands_it_cannot_show(robot_cfg, served) -> None:
    """The robot side of `randomization.delay_compensation`: the view's age from the state's stamp, its TCP fields
    advanced by gain x the commands sent since, as the sim env does for a queued observation."""
    robot_cfg.staleness_s = robot_cfg.safety.state_timeout_s = 5.0  # the paused arm's state may age here
    lay = make_env(EnvConfig(randomization=RandomizationConfig(action_history=3))).unwrapped.state_layout
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(lay, control_hz=20.0), delay_compensation=0.6)
    env.reset(seed=5)
    served.paused.set()  # no new state from here: every view is older than the commands that follow it
    time.sleep(0.2)
    still = env.step(np.array([0.0, 0.0, 0.0, -1.0]))[0]["state"]  # nothing commanded yet: the view as measured
    env.step(np.array([1.0, 0.0, 0.0, -1.0]))
    late = env.step(np.array([0.0, -1.0, 0.5, -1.0]))[0]["state"]  # > 3 periods old: all three past actions
    step = 0.6 * env.max_step
    np.testing.assert_allclose(late[lay["tcp_minus_cube_start"]] - still[lay["tcp_minus_cube_start"]],
                               [step, -step, 0.5 * step], atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(late[lay["cube_minus_tcp"]] - still[lay["cube_minus_tcp"]],
                               [-step, step, -0.5 * step], atol=1e-6)  # fmt: skip
    np.testing.assert_array_equal(late[lay["cube_minus_start"]], still[lay["cube_minus_start"]])
    served.paused.clear()
    env.close()


def test_relative_obs_frame_is_assembled_from_the_robot_topics_like_the_sim_env(robot_cfg, served) -> None:
    ref = make_env(EnvConfig(obs_frame="relative"))
    lay = ref.unwrapped.state_layout
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(lay, control_hz=20.0))
    obs, _ = env.reset(seed=5)
    ref_obs, _ = ref.reset(seed=5)
    np.testing.assert_allclose(obs["state"], ref_obs["state"], atol=5e-3)  # the same scene, the arm settling
    assert not obs["state"][lay["cube_minus_start"]].any()  # the start is the object's first pose after the reset
    z0 = obs["state"][lay["tcp_minus_cube_start"]][2]
    for _ in range(3):
        obs = env.step(np.array([0.0, 0.0, 1.0, -1.0]))[0]
    assert obs["state"][lay["tcp_minus_cube_start"]][2] - z0 > 0.01
    np.testing.assert_allclose(obs["state"][lay["cube_minus_start"]], 0.0, atol=1e-3)  # the cube stays put
    env.close()
    ref.close()


def test_stale_state_raises_and_publishes_no_pose(robot_cfg, served) -> None:
    spy_tx = make_transport(TransportConfig(backend="inproc", domain_id=robot_cfg.domain_id))
    spy = spy_tx.subscription(robot_cfg.command_topic, msgs.POSE)
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(layout(), control_hz=20.0))
    env.reset(seed=1)
    env.step(np.zeros(4))
    spy.take()
    served.paused.set()
    time.sleep(0.3)
    with pytest.raises(StaleDataError, match="stale"):
        env.step(np.array([1.0, 0.0, 0.0, 0.0]))
    assert spy.take() == []  # no pose from stale data
    served.paused.clear()
    env.reset(seed=2)  # clears the latch once fresh state flows again
    env.step(np.zeros(4))
    assert len(spy.take()) == 1
    env.close()
    spy_tx.close()


def test_estop_topic_latches_both_sides_until_released_and_reset(robot_cfg, served) -> None:
    tx = make_transport(TransportConfig(backend="inproc", domain_id=robot_cfg.domain_id))
    estop = tx.publisher(robot_cfg.estop_topic, msgs.BOOL)
    status = tx.subscription(robot_cfg.status_topic, msgs.STRING)
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(layout(), control_hz=20.0))
    env.reset(seed=3)
    env.step(np.zeros(4))
    estop.publish(msgs.scalar(msgs.BOOL, True))
    with pytest.raises(SafetyStop, match="estop"):
        env.step(np.array([1.0, 0.0, 0.0, 0.0]))
    with pytest.raises(SafetyStop, match="e-stop is pressed"):
        env.reset(seed=3)
    time.sleep(0.05)
    assert any(m.data == "hold: estop" for m in status.take())  # the robot side latched too
    estop.publish(msgs.scalar(msgs.BOOL, False))
    env.reset(seed=3)
    assert not env.step(np.zeros(4))[4]["hold"]
    env.close()
    tx.close()


def test_an_estop_heard_during_the_step_outranks_the_staleness_of_the_state(robot_cfg, served) -> None:
    """The robot stalls and its e-stop arrives while the step waits for the next observation: the step stops on
    the e-stop (deploy exits "stopped by SafetyStop"), not on state older than `staleness_s`, which it also is."""
    tx = make_transport(TransportConfig(backend="inproc", domain_id=robot_cfg.domain_id))
    estop = tx.publisher(robot_cfg.estop_topic, msgs.BOOL)
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(layout(), control_hz=20.0))
    env.reset(seed=3)
    env.step(np.zeros(4))

    def stall_then_estop() -> None:
        served.paused.set()  # no state from here on
        time.sleep(2 * robot_cfg.staleness_s)
        estop.publish(msgs.scalar(msgs.BOOL, True))

    env.rate.sleep = stall_then_estop
    with pytest.raises(SafetyStop, match="estop"):
        env.step(np.zeros(4))
    served.paused.clear()
    env.close()
    tx.close()


def test_a_robot_hold_mid_episode_ends_it_within_the_step_and_an_evaluation_runs_it_again(robot_cfg) -> None:
    """The policy process stalls past the robot's command watchdog (a slow update, a checkpoint save): the robot
    holds the arm, RobotEnv says so in the step it happened (no transition for a command that did nothing), the actor
    goes on with a new episode, and an evaluation runs the held episode again: a stall is no verdict on the policy."""
    from robot_rl.evaluation import evaluate
    from robot_rl.loop.actor import Actor

    served = Served(robot_cfg, command_timeout_s=0.15)
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(layout(), control_hz=20.0), max_episode_steps=6)
    sleep, stalls = env.rate.sleep, [3]  # the third step stalls 0.4 s, past the 0.15 s watchdog

    def stall_once() -> None:
        stalls[0] -= 1
        time.sleep(0.4) if stalls[0] == 0 else sleep()

    env.rate.sleep = stall_once

    class Still:
        def select_action(self, obs, deterministic=False):  # noqa: ANN001, ANN202
            return np.array([0.0, 0.0, 1.0, 0.0])

        def reset(self) -> None:
            pass

    try:
        actor = Actor(env, Still(), retry_s=0.0)
        stored = [actor.step(), actor.step()]
        stored.append(actor.step())  # the stall and the hold: that step yields nothing, a new episode starts
        assert actor.stats.aborted == 1 and [x.done for x in stored] == [False, False, False]
        assert not np.array_equal(stored[1].next_obs["state"], stored[2].obs["state"])  # not stitched: new episode
        stalls[0] = 3
        res = evaluate(env, Still(), 2, seed=5, retry_s=0.0)  # the first episode is held at its third step
        assert res.episodes == 2 and res.aborted_episodes == 0 and res.safety_failure_rate == 0.0
    finally:
        env.close()
        served.close()


def test_a_hold_is_reported_by_the_step_it_happened_in(robot_cfg) -> None:
    served = Served(robot_cfg, command_timeout_s=0.15)
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(layout(), control_hz=20.0))
    try:
        env.reset(seed=3)
        env.step(np.zeros(4))
        env.rate.sleep = lambda: time.sleep(0.4)
        with pytest.raises(RobotHold, match="no_action"):
            env.step(np.array([0.0, 0.0, 1.0, 0.0]))
        env.rate.sleep = lambda: time.sleep(0.05)
        env.reset(seed=4)  # the reset clears the robot's hold
        assert not env.step(np.zeros(4))[4]["hold"]
    finally:
        env.close()
        served.close()


class Wave:
    """Sweeps the TCP along y and back at 0.8 of a full step, the gripper open; `frozen[id(obs)]` says whether the
    sim robot was dropping commands when the action for `obs` was chosen."""

    def __init__(self, served: Served, scale: float = 0.8) -> None:
        self.served, self.scale, self.i = served, scale, 0
        self.frozen: dict[int, bool] = {}
        self.seen: list = []  # keeps each obs alive, so its id stays its own

    def select_action(self, obs, deterministic=False):  # noqa: ANN001, ANN202
        self.frozen[id(obs)] = self.served.node.frozen
        self.seen.append(obs)
        self.i += 1
        return np.array([0.0, self.scale * (1 if (self.i // 6) % 2 == 0 else -1), 0.0, -1.0])

    def reset(self) -> None:
        self.i = 0


def test_an_arm_that_stops_following_is_held_within_the_window_and_the_episode_aborts(robot_cfg) -> None:
    """A driver's silent stop (the sim robot's fault drill: commands dropped, state and an "ok" status streaming
    on, as a UR protective stop): the env holds and aborts the episode `follow_window` steps after the first
    command that did nothing, naming the reason in one line."""
    served = Served(robot_cfg, freeze_after_s=0.5)
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(layout(), control_hz=20.0), max_episode_steps=60)
    wave, window = Wave(served), robot_cfg.follow_window
    try:
        obs, _ = env.reset(seed=2)
        steps, first_frozen = 0, None
        with pytest.raises(RobotHold, match=rf"^not_following: commanded \d+ mm over {window} steps, moved [\d.]+ mm;"):
            while steps < 60:
                action = wave.select_action(obs)
                if first_frozen is None and served.node.frozen:
                    first_frozen = steps
                steps += 1
                obs = env.step(action)[0]
        assert first_frozen is not None and first_frozen > window  # it moved freely first: no false alarm
        # `steps` counts the raising one: the frozen steps, plus those the arm spent braking
        assert window <= steps - first_frozen <= window + FOLLOW_SLACK, (first_frozen, steps)
        assert env.safety.latched.startswith("not_following")  # held: nothing moves until a reset
        assert env.command_target(env.robot_state().tcp_pos + 0.02, 1.0).hold
        env.reset(seed=3)  # clears the drill and the latch
        assert not env.step(np.array([0.0, 0.5, 0.0, -1.0]))[4]["hold"]
    finally:
        env.close()
        served.close()


def test_an_actor_stores_no_transition_from_an_arm_that_stopped_following(robot_cfg) -> None:
    """The window's steps are held back by the actor until the arm is seen to follow them; the abort voids them, so
    nothing acted on a frozen arm reaches the buffers, and everything before it does."""
    from robot_rl.loop.actor import Actor

    served = Served(robot_cfg, freeze_after_s=0.5)
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(layout(), control_hz=20.0), max_episode_steps=60)
    wave = Wave(served)
    try:
        actor = Actor(env, wave, retry_s=0.0)
        stored = []
        while actor.stats.aborted == 0 and len(stored) < 60:
            stored.append(actor.step())
        assert actor.stats.aborted == 1
        first = stored[:-1]  # the last one is the next episode's first
        live = sum(not f for f in list(wave.frozen.values())[: len(wave.frozen) - 1])  # the first episode's
        assert [wave.frozen[id(t.obs)] for t in first].count(True) == 0
        # every command the arm took is stored, bar those voided as the arm's braking
        assert live - FOLLOW_SLACK - 1 <= len(first) <= live, (live, len(first))
        assert not wave.frozen[id(stored[-1].obs)]  # the reset cleared the drill
    finally:
        env.close()
        served.close()


def test_the_follow_watchdog_stays_quiet_over_free_motion_and_when_no_motion_is_asked(robot_cfg) -> None:
    """A moving arm is never suspect for a window, and a frozen arm the policy asks nothing of (zero motion, the
    gripper only) is no fault: nothing was dropped that mattered."""
    served = Served(robot_cfg)
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(layout(), control_hz=20.0), max_episode_steps=30)
    try:
        wave, obs = Wave(served), env.reset(seed=4)[0]
        unconfirmed = []
        for _ in range(30):
            obs, _, terminated, truncated, info = env.step(wave.select_action(obs))
            unconfirmed.append(info["unconfirmed_steps"])
        assert truncated and not terminated and max(unconfirmed) < robot_cfg.follow_window + FOLLOW_SLACK
    finally:
        env.close()
        served.close()
    served = Served(robot_cfg, freeze_after_s=0.05)
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(layout(), control_hz=20.0), max_episode_steps=20)
    try:
        env.reset(seed=5)
        for i in range(20):
            info = env.step(np.array([0.0, 0.0, 0.0, 1.0 if (i // 3) % 2 else -1.0]))[4]
        assert served.node.frozen and info["unconfirmed_steps"] == FOLLOW_SLACK
    finally:
        env.close()
        served.close()


def test_camera_frames_reach_the_observation(robot_cfg) -> None:
    s = Served(robot_cfg, cameras=("front",), camera_hz=30.0, image_size=32)
    try:
        lay = ObsLayout.from_slices(layout(), cameras=("front",), image_size=64, control_hz=20.0)
        env = RobotEnv(robot_cfg, lay)
        obs, _ = env.reset(seed=4)
        assert obs["front"].shape == (64, 64, 3) and obs["front"].dtype == np.uint8 and obs["front"].std() > 0
        env.close()
    finally:
        s.close()


def test_a_10hz_camera_is_on_time_and_a_stopped_stream_is_late(robot_cfg) -> None:
    """Limits follow each stream's measured rate: a 10 Hz camera's newest frame is up to 0.1 s old by design (a fixed
    0.1 s limit aborted every such episode at its first step), a stream that stops is late all the same."""
    s = Served(robot_cfg, cameras=("front",), camera_hz=10.0, image_size=32)
    try:
        env = RobotEnv(robot_cfg, ObsLayout.from_slices(layout(), cameras=("front",), image_size=32, control_hz=10.0))
        env.reset(seed=4)
        for _ in range(12):
            env.step(np.zeros(4))
        s.paused.set()  # the robot PC hangs: nothing new on any stream
        env.rate.sleep = lambda: time.sleep(0.6)
        with pytest.raises(StaleDataError, match="streams every"):
            env.step(np.zeros(4))
        env.close()
    finally:
        s.paused.clear()
        s.close()


def test_the_success_flag_is_on_time_for_a_control_period_as_it_carries_no_stamp(robot_cfg) -> None:
    """A Bool has no stamp: its age counts from the poll that took it, and a real-time step polls once a control
    period, so a flag that missed one poll is a period old. Its limit adds that period, as a stamped stream's adds
    its own (a fixed 0.1 s aborted a loaded host's episode on a flag 0.102 s old); a stopped flag is late."""
    s = Served(robot_cfg)
    try:
        env = RobotEnv(robot_cfg, ObsLayout.from_slices(layout(), control_hz=10.0))
        env.reset(seed=4)
        for _ in range(3):
            env.step(np.zeros(4))
        flag = env._flag_seen[0]
        env._flag_seen = (flag, time.time() - 0.19)  # one missed poll: on time
        env._success()
        env._flag_seen = (flag, time.time() - 0.21)
        with pytest.raises(StaleDataError, match=r"success: newest is 0.21\ds old; it has no stamp"):
            env._success()
        env.close()
    finally:
        s.close()


def test_stream_clock_learns_period_and_jitter_and_skips_gaps_and_repeats() -> None:
    from robot_rl.real.timing import StreamClock

    clock, rng, t = StreamClock(), np.random.default_rng(0), 100.0
    for i in range(300):
        t += 1 / 30 + rng.uniform(-0.003, 0.003)
        clock.add(t)
        clock.add(t)  # an idle re-publication keeps its stamp
        if i == 150:
            t += 2.0  # a reset's gap is not the stream's rate
    assert abs(clock.period - 1 / 30) < 0.002 and 0.0005 < clock.jitter < 0.003
    assert 1 / 30 < clock.spread < 1 / 30 + 0.012


def test_image_decoding_handles_raw_encodings_and_compressed() -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    raw = msgs.image_msg(rgb, 1.5, "cam")
    raw.data.flags.writeable = False  # as a received message's buffer may be
    np.testing.assert_array_equal(decoded := msgs.decode_image(raw, False, 8), rgb)
    assert decoded.flags.writeable  # its own memory: torch takes it without a warning, the message can go
    bgr = msgs.image_msg(rgb[..., ::-1], 1.5, "cam")
    bgr.encoding = "bgr8"
    np.testing.assert_array_equal(msgs.decode_image(bgr, False, 8), rgb)
    ok, png = cv2.imencode(".png", rgb[..., ::-1])
    comp = typesys.msg_class(msgs.COMPRESSED_IMAGE)(header=msgs.header_at(1.5, "cam"), format="png", data=png.ravel())
    np.testing.assert_array_equal(msgs.decode_image(comp, True, 8), rgb)
    assert msgs.decode_image(comp, True, 4).shape == (4, 4, 3)
    raw.encoding = "bayer_rggb8"
    with pytest.raises(ValueError, match="unsupported image encoding"):
        msgs.decode_image(raw, False, 8)


@pytest.mark.parametrize(("encoding", "packing", "other"), [
    ("yuv422_yuy2", cv2.COLOR_RGB2YUV_YUY2, "uyvy"), ("yuyv", cv2.COLOR_RGB2YUV_YUY2, "yuv422"),
    ("yuv422", cv2.COLOR_RGB2YUV_UYVY, "yuv422_yuy2"), ("uyvy", cv2.COLOR_RGB2YUV_UYVY, "yuyv"),
])  # fmt: skip
def test_packed_yuv_frames_decode_to_the_rgb_they_were_packed_from(encoding: str, packing: int, other: str) -> None:
    """A webcam's uncompressed frames (usb_cam's default yuyv publishes yuv422_yuy2; ROS's "yuv422" is UYVY). Pixel
    pairs share their colour, so the 4:2:2 packing loses only video-range rounding; read in the other byte order
    (`other`), the same bytes are far off."""
    rgb = np.repeat(np.random.default_rng(1).integers(20, 236, (8, 4, 3), dtype=np.uint8), 2, axis=1)  # (8, 8, 3)
    packed = cv2.cvtColor(rgb, packing).reshape(-1)  # 2 bytes a pixel
    msg = typesys.msg_class(msgs.IMAGE)(header=msgs.header_at(1.5, "cam"), height=8, width=8, encoding=encoding,
                                        is_bigendian=0, step=16, data=packed)  # fmt: skip
    assert np.abs(msgs.decode_image(msg, False, 8).astype(int) - rgb).max() <= 3
    msg.encoding = other
    assert np.abs(msgs.decode_image(msg, False, 8).astype(int) - rgb).max() > 30


def test_image_crop_cuts_source_pixels_before_the_resize() -> None:
    rgb = np.zeros((16, 16, 3), np.uint8)
    rgb[4:12, 2:10] = 200  # the crop window, bright; everything else dark
    raw = msgs.image_msg(rgb, 1.5, "cam")
    out = msgs.decode_image(raw, False, 4, crop=[4, 2, 8, 8])
    assert out.shape == (4, 4, 3) and (out == 200).all()
    assert (msgs.decode_image(raw, False, 4) < 200).any()  # uncropped, the dark border is in the frame
    with pytest.raises(ValueError, match="does not fit"):
        msgs.decode_image(raw, False, 4, crop=[10, 0, 8, 8])
    with pytest.raises(ValueError, match="crop must be"):
        load_robot_config("sim", ["cameras=[{name: front, topic: t, crop: [0, 0, 8]}]"])


def test_proprio_layout_observes_joint_positions_and_velocities_the_wrench_and_no_object(robot_cfg, served) -> None:
    lay = proprio_layout(robot_cfg)
    assert list(lay) == ["tcp_pos", "ee_yaw_sin_cos", "gripper_opening", "tcp_vel", "joint_pos", "joint_vel",
                         "ee_force"]  # fmt: skip
    assert "ee_force" not in proprio_layout(load_robot_config("sim", ["wrench_topic=''"]))  # a cell without a sensor
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(lay, control_hz=20.0))
    try:
        obs, _ = env.reset(seed=3)
        assert obs["state"].shape == (26,) and "object" not in env._subs
        for _ in range(3):
            obs, *_ = env.step(np.array([1.0, 0.0, 0.0, -1.0]))
        joints = obs["state"][lay["joint_pos"]]
        limits = np.array(robot_cfg.safety.joint_lower), np.array(robot_cfg.safety.joint_upper)
        assert ((joints > limits[0]) & (joints < limits[1])).all()
        assert np.abs(obs["state"][lay["joint_vel"]]).max() > 1e-3  # the arm is moving in +x
    finally:
        env.close()


def test_rate_keeper_sleeps_to_absolute_deadlines_and_counts_misses() -> None:
    rate = RateKeeper(100.0)
    t0 = time.monotonic()
    for i in range(20):
        if i == 10:
            time.sleep(0.03)  # one overrun cycle
        rate.sleep()
    elapsed = time.monotonic() - t0
    assert rate.misses == 1
    assert 0.2 <= elapsed < 0.26  # 20 periods plus the overrun, no catch-up burst, no drift


class TakeoverDevice:
    """A human who takes over at once, lifts the arm, then presses the failure (e-stop) button on step 5."""

    name, source = "fake", "teleop"

    def __init__(self) -> None:
        self.polls = 0

    def reset(self) -> None:
        pass

    def poll(self, env: object) -> DeviceCommand:
        self.polls += 1
        twist = np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0], np.float32)
        return DeviceCommand(twist, -1.0, True, frozenset({"failure"}) if self.polls == 5 else frozenset())

    def close(self) -> None:
        pass


def test_deploy_takeover_and_teleop_estop_are_recorded_and_stop_the_run(robot_cfg, checkpoint, tmp_path) -> None:
    s = Served(robot_cfg)
    try:
        summary = deploy(Checkpoint(checkpoint), robot_cfg, 3, record=tmp_path / "store", device=TakeoverDevice(),
                         status=False, bag=tmp_path / "session.mcap")  # fmt: skip
    finally:
        s.close()
    assert summary["episodes"] == 1 and summary["stopped"].startswith("SafetyStop: teleop e-stop")
    assert summary["interventions"] == 4 and summary["aborted_episodes"] == 1
    with EpisodeStore(tmp_path / "store") as store:
        ep, meta = store.episode(0), store.meta(0)
    assert meta["source"] == "intervention" and not meta["success"] and ep["intervened"].all()
    np.testing.assert_allclose(ep["action"][:, 2], 1.0)  # the human's command, not the policy's, was executed
    assert ep["state"][-1, 2] > ep["state"][0, 2] + 0.03  # and it lifted the arm (the impedance arm lags)
    # the session's MCAP recording holds the same commands: the human's lift, then the e-stop it pressed
    assert summary["recording"] == str(tmp_path / "session.mcap")
    session = read_session(tmp_path / "session.mcap")
    assert session.complete and [m.data for _, _, m in session.decoded(f"{robot_cfg.namespace}/estop")] == [True]
    sent = np.array([msgs.pose_of(m)[0] for _, _, m in session.decoded(f"{robot_cfg.namespace}/ee_target")])
    assert len(sent) >= len(ep["action"]) and sent[-1, 2] > sent[0, 2] + 0.03


@pytest.mark.parametrize("task", ["PickCube", "PegInsert"])
@pytest.mark.parametrize("frame", ["absolute", "relative"])
def test_every_sim_state_field_is_assembled_on_a_robot_or_marked_privileged(task: str, frame: str) -> None:
    rand = RandomizationConfig(action_history=2, observe_force=True)
    env = make_env(EnvConfig(task=task, obs_frame=frame, randomization=rand))
    fields = set(env.unwrapped.state_layout)
    env.close()
    assert {"last_actions", "ee_force"} <= fields <= set(STATE_FIELDS) | set(PRIVILEGED_FIELDS)


def test_the_wrench_topic_becomes_the_observed_force_as_the_sim_env_observes_it(robot_cfg) -> None:
    served = Served(robot_cfg, task="PegInsert")
    lay = {"tcp_pos": slice(0, 3), "ee_force": slice(3, 6)}
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(lay, control_hz=20.0))
    try:
        env.reset(seed=1)
        for _ in range(3):  # the peg held still (the force is low-passed: settled after a few steps)
            obs = env.step(np.array([0.0, 0.0, 0.0, 1.0]))[0]
        peg = make_env(EnvConfig(task="PegInsert"))
        weight = peg.unwrapped.model.body("peg").mass[0] * 9.81
        peg.close()
        np.testing.assert_allclose(obs["state"][3:], [0.0, 0.0, -weight / EE_FORCE_UNIT_N], atol=0.01)
        for _ in range(30):
            obs = env.step(np.array([0.0, 0.0, -1.0, 1.0]))[0]
        assert obs["state"][5] * EE_FORCE_UNIT_N > 3.0  # pressed on the block, it pushes back up
    finally:
        env.close()
        served.close()
    no_wrench = load_robot_config("sim", [f"domain_id={robot_cfg.domain_id}", "backend=inproc", "wrench_topic=''"])
    with pytest.raises(ValueError, match="wrench_topic"):
        RobotEnv(no_wrench, ObsLayout.from_slices(lay))


def test_a_force_limit_hold_ends_the_episode_as_the_sims_safety_terminal(robot_cfg) -> None:
    """A policy that pushes the closed gripper down through the cube trips the sim robot's force limit: the step
    that did it comes back terminal, worth `safety_reward`, and is stored (the critic learns what a push costs, as
    in the sim); nothing is aborted, and an evaluation counts the episode as a safety failure."""
    from robot_rl.evaluation import evaluate
    from robot_rl.loop.actor import Actor

    served = Served(robot_cfg)
    lay = layout()
    # ~20 steps to the hold when idle; a starved host ticks the arm slower, and the limit is a budget, not the claim
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(lay, control_hz=20.0), max_episode_steps=80)

    class Push:
        """Over the cube, then down through it with the gripper closed."""

        def select_action(self, obs, deterministic=False):  # noqa: ANN001, ANN202
            to_cube = obs["state"][lay["cube_minus_tcp"]]
            if np.linalg.norm(to_cube[:2]) > 0.005:
                return np.array([*np.clip(to_cube[:2] / 0.025, -1, 1), 0.0, 1.0])
            return np.array([0.0, 0.0, -1.0, 1.0])

        def reset(self) -> None:
            pass

    try:
        actor = Actor(env, Push(), retry_s=0.0)
        stored = [actor.step()]
        while not stored[-1].done:
            stored.append(actor.step())
        last = stored[-1]
        assert last.terminated and last.reward == robot_cfg.safety_reward, last
        assert actor.stats.aborted == 0
        res = evaluate(env, Push(), 1, seed=5, retry_s=0.0)
        assert res.safety_failure_rate == 1.0 and res.success_rate == 0.0
    finally:
        env.close()
        served.close()


def test_deploy_stops_with_the_reason_when_the_robot_never_answers_a_reset(robot_cfg, checkpoint) -> None:
    """No robot side on the domain: the first reset times out and the run ends `stopped` (exit 3), no traceback."""
    summary = deploy(Checkpoint(checkpoint), dataclasses.replace(robot_cfg, reset_timeout_s=0.5), 2, status=False)
    assert summary["episodes"] == 0 and summary["stopped"].startswith("StaleDataError: [sim] no subscriber on")
