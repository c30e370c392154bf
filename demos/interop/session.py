"""Import robot sessions recorded as MCAP (`robot-rl deploy --record FILE.mcap`, `real/record.py`) as episodes.

A recording names each topic's role in its `robot_rl.session` metadata record, so no robot config is needed.
Every message on the command topic is one step: its header stamp is the tick, and each other stream contributes
its latest message stamped at or before it (header stamps; the success Bool has none, so its receive time). The
gripper command (a Float64, unstamped) belongs to the pose or twist command the env sent just before it: the
recorder logs the two so that the gripper is never logged before its command. Episodes split at each reset request
and at gaps in the commands longer than `episode_gap_s` (a reset by hand sends nothing). Commands the env sends
outside an episode (a reset=home move to the home pose) are steps like the others.

Keys: command (PoseStamped: x y z qx qy qz qw; TwistStamped: linear, angular), gripper (opening, 0 closed .. 1
open), joint_pos and joint_vel (as the JointState carries them), ee_pose, object_pose, wrench (force, torque),
one RGB frame per camera under its name, success; each with `<key>_timestamp` beside `timestamp` (seconds since
the episode's first step). Values are the messages' own, unscaled: the policy's observation is assembled from
them with the checkpoint's layout (`RobotEnv`), which a `deploy --record STORE` zarr store holds instead.

A recording cut short (a killed process leaves `FILE.mcap.part`) is read up to its last complete chunk.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.demos.interop.rosbag import CONVERTERS, _align
from robot_rl.demos.store import EpisodeStore
from robot_rl.real.record import METADATA

__all__ = ["METADATA", "Recording", "import_session", "read_session"]

log = logging.getLogger("robot_rl.convert")
_SKIPPED = ("reset", "reset_done", "estop", "status")  # events, not streams sampled per step


class Recording:
    """One MCAP file read through: `roles` (role -> topic), `types` (topic -> ROS type), `messages` (topic ->
    [(log time ns, publish time ns, CDR bytes)] in log order), `complete` (the file has its footer)."""

    def __init__(self, roles: dict[str, str], robot: str, types: dict[str, str], complete: bool) -> None:
        self.roles, self.robot, self.types, self.complete = roles, robot, types, complete
        self.messages: dict[str, list[tuple[int, int, bytes]]] = {t: [] for t in types}

    def decoded(self, topic: str) -> list[tuple[int, int, Any]]:
        cdr, ros_type = _typestore().deserialize_cdr, self.types[topic]
        return [(lt, pt, cdr(memoryview(raw), ros_type)) for lt, pt, raw in self.messages[topic]]


@cache
def _typestore() -> Any:
    """The standard ROS 2 types (a session records no robot_rl_msgs), from rosbags as `convert rosbag` reads them."""
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_JAZZY)


def read_session(path: str | os.PathLike[str]) -> Recording:
    """Reads records in file order, so a file without its summary (cut short) reads up to its last whole chunk."""
    from mcap.exceptions import McapError
    from mcap.records import Channel, Footer, Message, Metadata, Schema
    from mcap.stream_reader import StreamReader

    schemas: dict[int, str] = {}
    channels: dict[int, tuple[str, str]] = {}
    meta: dict[str, str] = {}
    rows: list[tuple[int, int, bytes]] = []
    topics: list[str] = []
    complete = False
    with open(path, "rb") as f:
        try:
            for rec in StreamReader(f).records:
                if isinstance(rec, Schema):
                    schemas[rec.id] = rec.name
                elif isinstance(rec, Channel):
                    channels[rec.id] = (rec.topic, schemas[rec.schema_id])
                elif isinstance(rec, Metadata) and rec.name == METADATA:
                    meta = dict(rec.metadata)
                elif isinstance(rec, Message):
                    rows.append((rec.log_time, rec.publish_time, rec.data))
                    topics.append(channels[rec.channel_id][0])
                elif isinstance(rec, Footer):
                    complete = True
        except (McapError, EOFError, struct.error, ValueError) as e:
            log.warning("%s ends before its footer (%s: %s): read up to its last complete chunk", path,
                        type(e).__name__, e)  # fmt: skip
    if not meta:
        raise ValueError(f"{path}: no {METADATA} record; not a robot-rl session (`robot-rl convert rosbag` reads bags)")
    out = Recording(json.loads(meta["roles"]), meta.get("robot", ""), dict(channels.values()), complete)
    for i in sorted(range(len(rows)), key=lambda i: rows[i][0]):  # stable: messages of one log time keep their order
        out.messages[topics[i]].append(rows[i])
    return out


def _streams(rec: Recording) -> dict[str, tuple[np.ndarray, list[np.ndarray]]]:
    """key -> (stamps in seconds, rows), the command's stamps first."""
    cmd_topic = rec.roles["command"]
    cmds = rec.decoded(cmd_topic)
    cmd_log = np.array([lt for lt, _, _ in cmds], np.int64)
    cmd_t = np.array([pt for _, pt, _ in cmds], np.float64) * 1e-9
    conv = CONVERTERS[rec.types[cmd_topic]]
    out = {"command": (cmd_t, [conv(m, "") for _, _, m in cmds])}
    for role, topic in rec.roles.items():
        if role in ("command", *_SKIPPED) or not rec.messages.get(topic):
            continue
        items = rec.decoded(topic)
        if role == "gripper":  # unstamped: the tick of the command logged nearest to it (either may arrive first)
            k = _nearest(cmd_log, np.array([lt for lt, _, _ in items], np.int64))
            out["gripper"] = (cmd_t[k], [_row(rec, topic, m) for _, _, m in items])
            continue
        t = np.array([pt for _, pt, _ in items], np.float64) * 1e-9
        if role == "joint_states":
            out["joint_pos"] = (t, [CONVERTERS[rec.types[topic]](m, "position") for _, _, m in items])
            out["joint_vel"] = (t, [CONVERTERS[rec.types[topic]](m, "velocity") for _, _, m in items])
        else:
            out[role.removeprefix("camera:")] = (t, [_row(rec, topic, m) for _, _, m in items])
    for key, (t, rows) in out.items():
        order = np.argsort(t, kind="stable")
        out[key] = (t[order], [rows[i] for i in order])
    return out


def _nearest(sorted_times: np.ndarray, times: np.ndarray) -> np.ndarray:
    """For each of `times`, the index of the nearest of `sorted_times` (not empty)."""
    if len(sorted_times) == 1:
        return np.zeros(len(times), np.int64)
    right = np.clip(np.searchsorted(sorted_times, times), 1, len(sorted_times) - 1)
    left = right - 1
    return np.where(times - sorted_times[left] <= sorted_times[right] - times, left, right)


def _row(rec: Recording, topic: str, msg: Any) -> np.ndarray:
    return CONVERTERS[rec.types[topic]](msg, "")


def import_session(
    paths: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    episode_gap_s: float = 1.0,
    source: str = "policy",
    task: str = "",
) -> int:
    """Session recordings -> episodes appended to the store at `out`; returns how many were written."""
    n = 0
    with EpisodeStore(out, "a") as dst:
        for path in paths:
            rec = read_session(Path(path))
            cmd_topic = rec.roles.get("command", "")
            if not rec.messages.get(cmd_topic):
                log.warning("%s: no command on %s, so no steps", path, cmd_topic or "its command topic")
                continue
            streams = _streams(rec)
            cmd_log = np.array([lt for lt, _, _ in rec.messages[cmd_topic]], np.int64)
            resets = [lt for lt, _, _ in rec.messages.get(rec.roles.get("reset", ""), [])]
            cuts = set(np.searchsorted(cmd_log, resets, side="left").tolist())
            cuts |= set((np.flatnonzero(np.diff(streams["command"][0]) > episode_gap_s) + 1).tolist())
            bounds = sorted(c for c in cuts if 0 < c < len(cmd_log))
            keys = {k: k for k in streams}
            for seg in np.split(np.arange(len(cmd_log)), bounds):
                ep = _align(streams, keys, "command", seg, np.inf)
                if ep is None:
                    continue
                data, t0 = ep
                meta = {"source": source, "task": task, "length": len(data["timestamp"]), "recording": str(path),
                        "robot": rec.robot, "start_time": t0, "topics": rec.roles}  # fmt: skip
                dst.add_episode(data, meta=meta, final={k: np.asarray(data[k][-1]) for k in streams})
                n += 1
    return n
