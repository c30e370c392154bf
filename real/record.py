"""Record a robot session as a rosbag2 MCAP file: what `RobotEnv` reads and what it sends, as they went over the wire.

`SessionRecorder` subscribes, on the env's own transport, to every topic a `RobotEnv` of the same robot config reads
(joint states, TCP and object poses, wrench, cameras, success flag, status, e-stop, reset echo) and publishes
(command, gripper, reset request), and writes each message's CDR bytes unchanged, with its type's full `ros2msg`
definition as the channel schema: `ros2 bag info/play FILE.mcap`, Foxglove and `rosbags` open it as any bag that
`ros2 bag record -s mcap` wrote. Each message's log time is when it arrived (the DDS reception time, as `ros2 bag`
logs it), so messages of different topics taken in one late poll keep the order they were sent in (a reset request
between an episode's last command and the next one's first); its publish time is the header stamp where the type
has one (else the log time).

Crash safety: the file grows as `FILE.mcap.part` and is renamed to `FILE.mcap` on `close()`, so a finished name
always holds a complete file (footer and index). A chunk is flushed at least every `flush_s`, so a killed process
leaves a `.part` that is intact up to its last flush: `robot-rl convert session` reads it as it is, and
`mcap recover FILE.mcap.part -o FILE.mcap` (the mcap CLI) gives other tools a complete file.

A thread polls the subscriptions (no executor, as everywhere in robot_rl); readers are best-effort, so they
match any writer, with deep queues so a poll period of bursts loses nothing.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from robot_rl.real import msgs
from robot_rl.real.config import RobotConfig
from robot_rl.transport import TopicQos, Transport, typesys

log = logging.getLogger("robot_rl.record")
METADATA = "robot_rl.session"  # the MCAP metadata record naming each topic's role (`demos/interop/session.py`)

RECORD_QOS = TopicQos(reliable=False, depth=200)
# The robot's status is latched (the sim robot publishes it transient-local): a latched reader gets the state the
# session starts in, not only its changes.
STATUS_QOS = TopicQos(reliable=True, transient_local=True, depth=50)
PART = ".part"


@dataclass(frozen=True)
class RecordedTopic:
    role: str  # what the topic is to a RobotEnv: joint_states, ee_pose, ..., camera:<name>, command, gripper
    topic: str  # as given in the robot config (relative names resolve under its namespace)
    ros_type: str
    qos: TopicQos = RECORD_QOS


def session_topics(cfg: RobotConfig) -> list[RecordedTopic]:
    """The topics a `RobotEnv` on `cfg` reads or publishes, each once; empty names (no such topic) skipped."""
    cmd = msgs.COMMAND[cfg.command_type]
    rows = [
        ("gripper", cfg.gripper_topic, msgs.FLOAT64),
        ("command", cfg.command_topic, cmd),
        ("reset", cfg.reset_topic, msgs.INT64),
        ("estop", cfg.estop_topic, msgs.BOOL),
        ("joint_states", cfg.joint_state_topic, msgs.JOINT_STATE),
        ("ee_pose", cfg.ee_pose_topic, msgs.POSE),
        ("object_pose", cfg.object_pose_topic, msgs.POSE),
        ("wrench", cfg.wrench_topic, msgs.WRENCH),
        *((f"camera:{c.name}", c.topic, msgs.COMPRESSED_IMAGE if c.compressed else msgs.IMAGE) for c in cfg.cameras),
        ("success", cfg.success_topic, msgs.BOOL),
        ("reset_done", cfg.reset_done_topic, msgs.INT64),
    ]
    out = [RecordedTopic(role, t, ty) for role, t, ty in rows if t]
    out.append(RecordedTopic("status", cfg.status_topic, msgs.STRING, STATUS_QOS))
    seen: set[str] = set()
    return [r for r in out if not (r.topic in seen or seen.add(r.topic))]


def _has_header(ros_type: str, distro: str) -> bool:
    fields = typesys.typestore(distro).fielddefs[ros_type][1]
    return bool(fields) and fields[0][1][1] == "std_msgs/msg/Header"


def header_stamp_ns(raw: bytes | memoryview) -> int:
    """The header stamp of a CDR message whose first field is a `std_msgs/Header` (0 when unset): the encapsulation
    header's second byte says the byte order, the stamp's sec (int32) and nanosec (uint32) follow it."""
    sec, nsec = struct.unpack_from("<iI" if raw[1] & 1 else ">iI", raw, 4)
    return sec * 1_000_000_000 + nsec


class SessionRecorder:
    """Records `cfg`'s session topics on `transport` to the MCAP file `path` until `close()`.

    Create it before the env's first command so nothing is missed; `close()` stops the thread, takes what is
    still queued, writes the summary and renames the file into place. Also a context manager.
    """

    def __init__(
        self,
        transport: Transport,
        cfg: RobotConfig,
        path: str | os.PathLike[str],
        *,
        poll_s: float = 0.005,
        flush_s: float = 1.0,
    ) -> None:
        from mcap.writer import CompressionType, Writer

        self.path = Path(path)
        if self.path.suffix != ".mcap":
            raise ValueError(f"{self.path}: a session recording is an .mcap file")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.part = self.path.with_name(self.path.name + PART)
        self.poll_s, self.flush_s = poll_s, flush_s
        distro = transport.cfg.distro
        store = typesys.typestore(distro)
        self._file = self.part.open("wb")
        # lz4: cheap on the control PC's CPU, and every MCAP reader (rosbag2, Foxglove, rosbags, mcap) decodes it.
        self._writer = Writer(self._file, compression=CompressionType.LZ4)
        self._writer.start(profile="ros2", library="robot_rl")
        self._subs = []
        self.counts: dict[str, int] = {}
        schemas: dict[str, int] = {}
        roles: dict[str, str] = {}
        for r in session_topics(cfg):
            if r.ros_type not in schemas:
                text = store.generate_msgdef(r.ros_type, ros_version=2)[0]
                schemas[r.ros_type] = self._writer.register_schema(r.ros_type, "ros2msg", text.encode())
            sub = transport.subscription(r.topic, r.ros_type, r.qos)
            channel = self._writer.register_channel(sub.topic, "cdr", schemas[r.ros_type])
            self._subs.append((sub, channel, _has_header(r.ros_type, distro)))
            self.counts[sub.topic] = 0
            roles[r.role] = sub.topic
        # What each topic is, so a recording converts without its robot config (`demos/interop/session.py`).
        self._writer.add_metadata(METADATA, {"robot": cfg.name, "roles": json.dumps(roles)})
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="session-recorder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last_flush = time.monotonic()
        while not self._stop.wait(self.poll_s):
            self.poll()
            if time.monotonic() - last_flush >= self.flush_s:
                with self._lock:
                    self._writer.flush()
                last_flush = time.monotonic()

    def poll(self) -> int:
        """Takes and writes every queued message, each with its arrival time as log time; returns how many."""
        n = 0
        with self._lock:
            for sub, channel, stamped in self._subs:
                for arrived, raw in sub.take_received():
                    stamp = header_stamp_ns(raw) if stamped and len(raw) >= 12 else 0
                    self._writer.add_message(channel, log_time=arrived, data=bytes(raw), publish_time=stamp or arrived,
                                             sequence=self.counts[sub.topic])  # fmt: skip
                    self.counts[sub.topic] += 1
                    n += 1
        return n

    def close(self) -> None:
        """Finish the file and rename it into place; idempotent. The subscriptions end with their transport."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._thread.join()
        self.poll()
        self._writer.finish()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self.part, self.path)
        log.info("recorded %d messages to %s", sum(self.counts.values()), self.path)

    def __enter__(self) -> SessionRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
