"""A RobotEnv session recorded to MCAP (real/record.py): opens in the mcap and rosbags readers with the values sent,
and `convert session` (demos/interop/session.py) turns it into episodes holding the same values."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest
from real_util import inproc_robot, wait_until
from test_robot import Served, layout

from robot_rl.demos.interop.session import import_session, read_session
from robot_rl.demos.store import EpisodeStore
from robot_rl.real import msgs
from robot_rl.real.record import SessionRecorder, header_stamp_ns, session_topics
from robot_rl.real.robot import RobotEnv
from robot_rl.transport import TransportConfig, make_transport, typesys
from robot_rl.types import ObsLayout

pytestmark = pytest.mark.realtime


def test_header_stamp_is_read_from_the_cdr_in_either_byte_order() -> None:
    msg = typesys.msg_class("std_msgs/msg/Header")(stamp=typesys.msg_class("builtin_interfaces/msg/Time")(
        sec=12, nanosec=345), frame_id="base")  # fmt: skip
    raw = typesys.serialize(msg, "std_msgs/msg/Header")
    assert header_stamp_ns(raw) == 12_000_000_345
    big = typesys.typestore().serialize_cdr(msg, "std_msgs/msg/Header", little_endian=False)
    assert header_stamp_ns(big) == 12_000_000_345


def test_a_recorded_session_opens_in_ros_tools_and_converts_to_the_values_sent(tmp_path) -> None:
    robot_cfg = inproc_robot()
    served = Served(robot_cfg, cameras=("front",), camera_hz=30.0, image_size=32)
    env = RobotEnv(robot_cfg, ObsLayout.from_slices(layout(), control_hz=20.0))
    path = tmp_path / "session.mcap"
    rec = SessionRecorder(env.tx, robot_cfg, path, flush_s=0.1)
    sent: list[tuple[np.ndarray, float]] = []  # (pose target, gripper) per step, as the env published them
    publish = env.publish

    def spy(cmd):
        sent.append((np.asarray(cmd.target_pos, np.float64).copy(), float(cmd.gripper)))
        publish(cmd)

    env.publish = spy  # type: ignore[method-assign]
    episodes = []
    try:
        for seed, actions in ((1, [[1, 0, 0, 1]] * 4), (2, [[0, 1, 0.5, -1]] * 3)):
            env.reset(seed=seed)
            del sent[:]  # a reset=topic reset sends no command; anything before the steps is not ours
            for a in actions:
                env.step(np.array(a, np.float32))
            episodes.append(list(sent))
        wait_until(lambda: rec.part.stat().st_size > 1000, 5, "a flushed chunk")
        time.sleep(0.3)
        shutil.copy(rec.part, tmp_path / "killed.mcap.part")  # what a killed recorder leaves
    finally:
        rec.close()
        env.close()
        served.close()
    assert path.is_file() and not rec.part.exists()

    # the mcap reader: ros2 profile, ros2msg schemas, CDR channels, every step's command counted
    from mcap.reader import make_reader

    with open(path, "rb") as f:
        reader = make_reader(f)
        assert reader.get_header().profile == "ros2"
        summary = reader.get_summary()
        topics = {c.topic: c for c in summary.channels.values()}
        counts = {c.topic: summary.statistics.channel_message_counts.get(i, 0) for i, c in summary.channels.items()}
        assert {summary.schemas[c.schema_id].encoding for c in topics.values()} == {"ros2msg"}
        assert {c.message_encoding for c in topics.values()} == {"cdr"}
    ns = robot_cfg.namespace
    assert set(topics) == {f"{ns}/{r.topic}" for r in session_topics(robot_cfg)}
    assert counts[f"{ns}/ee_target"] == counts[f"{ns}/gripper_command"] == 7
    assert counts[f"{ns}/joint_states"] > 7 and counts[f"{ns}/camera/front/image"] > 0
    assert counts[f"{ns}/reset"] == 2 and counts[f"{ns}/robot_status"] >= 1

    # rosbags (as `ros2 bag` would): the commands deserialise to the values sent
    from rosbags.highlevel import AnyReader

    flat = [s for ep in episodes for s in ep]
    with AnyReader([path]) as bag:
        conns = {c.topic: c for c in bag.connections}
        assert conns[f"{ns}/ee_target"].msgtype == "geometry_msgs/msg/PoseStamped"
        poses = [bag.deserialize(raw, c.msgtype) for c, _, raw in bag.messages([conns[f"{ns}/ee_target"]])]
        grips = [bag.deserialize(raw, c.msgtype) for c, _, raw in bag.messages([conns[f"{ns}/gripper_command"]])]
    got = np.array([[m.pose.position.x, m.pose.position.y, m.pose.position.z] for m in poses])
    np.testing.assert_array_equal(got, [p for p, _ in flat])
    assert [m.data for m in grips] == [g for _, g in flat]

    # convert: one episode per reset; each step holds its command and gripper, and the joint state and frame
    # stamped last before it, all as recorded
    assert import_session([path], tmp_path / "store") == 2
    recording = read_session(path)

    def stamped(topic: str) -> tuple[np.ndarray, list]:
        items = recording.decoded(f"{ns}/{topic}")
        return np.array([m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for _, _, m in items]), [
            m for _, _, m in items
        ]

    (cmd_t, _), (joint_t, joints), (frame_t, frames) = map(stamped, ("ee_target", "joint_states", "camera/front/image"))
    ticks = np.split(cmd_t, [len(episodes[0])])
    with EpisodeStore(tmp_path / "store") as store:
        assert store.meta(0)["robot"] == "sim" and store.meta(1)["topics"]["command"] == f"{ns}/ee_target"
        for i, steps in enumerate(episodes):
            ep = store.episode(i)
            np.testing.assert_array_equal(ep["command"][:, :3], np.array([p for p, _ in steps], np.float32))
            np.testing.assert_array_equal(ep["gripper"][:, 0], np.array([g for _, g in steps], np.float32))
            for k, tick in enumerate(ticks[i]):
                j = np.searchsorted(joint_t, tick, side="right") - 1
                np.testing.assert_array_equal(ep["joint_pos"][k], np.asarray(joints[j].position, np.float32))
                f = frames[np.searchsorted(frame_t, tick, side="right") - 1]
                np.testing.assert_array_equal(ep["front"][k], np.asarray(f.data).reshape(f.height, f.width, 3))

    # the same from the command line
    from robot_rl.commands.convert import main as convert

    assert convert(["session", str(path), "--out", str(tmp_path / "cli"), "--task", "pick_cube"]) == 0
    with EpisodeStore(tmp_path / "cli") as store:
        assert len(store) == 2 and store.meta(0)["source"] == "policy"

    # a recorder killed mid-session leaves a .part that reads up to its last flushed chunk
    cut = read_session(tmp_path / "killed.mcap.part")
    assert not cut.complete and len(cut.messages[f"{ns}/ee_target"]) >= 1


def test_a_late_poll_keeps_the_reset_between_the_commands_it_separates(tmp_path) -> None:
    """A recorder starved past a whole reset (a loaded control PC) takes an episode's last command, the reset request
    and the next episode's first command in one poll: their arrival times still split the episodes where they were."""
    cfg = inproc_robot()
    tx = make_transport(TransportConfig(backend="inproc", domain_id=cfg.domain_id, namespace=cfg.namespace))
    path = tmp_path / "late.mcap"
    rec = SessionRecorder(tx, cfg, path, poll_s=3600.0)  # polls once, at close
    pose, grip, reset = (tx.publisher(cfg.command_topic, msgs.POSE), tx.publisher(cfg.gripper_topic,
                         msgs.FLOAT64), tx.publisher(cfg.reset_topic, msgs.INT64))  # fmt: skip
    try:
        for x in (0.1, 0.2, None, 0.3):
            if x is None:
                reset.publish(msgs.scalar(msgs.INT64, 7))
            else:
                pose.publish(msgs.pose_stamped(np.array([x, 0.0, 0.2]), np.array([1.0, 0, 0, 0]), time.time(), "base"))
                grip.publish(msgs.scalar(msgs.FLOAT64, x))
            time.sleep(0.002)
    finally:
        rec.close()
        tx.close()
    assert import_session([path], tmp_path / "store") == 2
    with EpisodeStore(tmp_path / "store") as store:
        firsts = [store.episode(i)["command"][:, 0].tolist() for i in range(2)]
    np.testing.assert_allclose(firsts[0], [0.1, 0.2], rtol=1e-6)
    np.testing.assert_allclose(firsts[1], [0.3], rtol=1e-6)
