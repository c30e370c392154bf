"""Import ROS 2 bags (rosbag2 sqlite3 or MCAP, read with `rosbags`: no ROS install needed) as episodes.

Chosen topics map onto episode keys.  Alignment: the reference topic's messages are the ticks of the
episode; every other topic contributes its latest message at or before each tick (sample-and-hold,
as a controller would have seen it), and a tick is dropped while any topic has no message yet or its
latest one is older than `max_age_s`.  A gap longer than `episode_gap_s` in the reference stream
starts a new episode, so one bag recorded across several demonstrations splits on its own.
Header stamps are used when set, else the bag's receive time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from robot_rl.demos.store import EpisodeStore

__all__ = ["import_rosbag", "CONVERTERS"]


def _joint_state(msg: Any, field: str) -> np.ndarray:
    return np.asarray(getattr(msg, field or "position"), np.float32)


def _pose(msg: Any, field: str) -> np.ndarray:
    p, q = msg.pose.position, msg.pose.orientation
    return np.array([p.x, p.y, p.z, q.x, q.y, q.z, q.w], np.float32)


def _twist(msg: Any, field: str) -> np.ndarray:
    lin, ang = msg.twist.linear, msg.twist.angular
    return np.array([lin.x, lin.y, lin.z, ang.x, ang.y, ang.z], np.float32)


def _wrench(msg: Any, field: str) -> np.ndarray:
    f, t = msg.wrench.force, msg.wrench.torque
    return np.array([f.x, f.y, f.z, t.x, t.y, t.z], np.float32)


def _float(msg: Any, field: str) -> np.ndarray:
    return np.array([msg.data], np.float32)


def _bool(msg: Any, field: str) -> np.ndarray:
    return np.asarray(bool(msg.data))


def _image(msg: Any, field: str) -> np.ndarray:
    channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}
    if msg.encoding not in channels:
        raise ValueError(f"unsupported Image encoding {msg.encoding!r} (expected one of {sorted(channels)})")
    c = channels[msg.encoding]
    rows = np.asarray(msg.data, np.uint8).reshape(msg.height, msg.step)
    img = rows[:, : msg.width * c].reshape(msg.height, msg.width, c)
    if msg.encoding == "mono8":
        return np.repeat(img, 3, axis=2)
    if msg.encoding.startswith("bgr"):
        img = img[..., 2::-1]
    return np.ascontiguousarray(img[..., :3])


def _compressed_image(msg: Any, field: str) -> np.ndarray:
    img = cv2.imdecode(np.asarray(msg.data, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError(f"cannot decode CompressedImage (format {msg.format!r})")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


# ROS message type -> (message, field) -> row
CONVERTERS: dict[str, Callable[[Any, str], np.ndarray]] = {
    "sensor_msgs/msg/JointState": _joint_state,
    "geometry_msgs/msg/PoseStamped": _pose,
    "geometry_msgs/msg/TwistStamped": _twist,
    "geometry_msgs/msg/WrenchStamped": _wrench,
    "std_msgs/msg/Float64": _float,
    "std_msgs/msg/Bool": _bool,
    "sensor_msgs/msg/Image": _image,
    "sensor_msgs/msg/CompressedImage": _compressed_image,
}


def _stamp(msg: Any, bag_ns: int) -> float:
    header = getattr(msg, "header", None)
    if header is not None and (header.stamp.sec or header.stamp.nanosec):
        return header.stamp.sec + header.stamp.nanosec * 1e-9
    return bag_ns * 1e-9


def _read_topics(bag: Path, topics: dict[str, str]) -> dict[str, tuple[np.ndarray, list[np.ndarray]]]:
    """topic -> (sorted times, rows)."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    spec = {t: (f.partition(":")[0], f.partition(":")[2]) for t, f in topics.items()}
    out: dict[str, list[tuple[float, np.ndarray]]] = {t: [] for t in topics}
    with AnyReader([bag], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as reader:
        conns = [c for c in reader.connections if c.topic in topics]
        missing = set(topics) - {c.topic for c in conns}
        if missing:
            raise ValueError(f"{bag}: topics {sorted(missing)} not in bag (has {sorted(reader.topics)})")
        for c in conns:
            if c.msgtype not in CONVERTERS:
                raise ValueError(f"{c.topic}: message type {c.msgtype} unsupported; supported: {sorted(CONVERTERS)}")
        for conn, bag_ns, raw in reader.messages(connections=conns):
            msg = reader.deserialize(raw, conn.msgtype)
            out[conn.topic].append((_stamp(msg, bag_ns), CONVERTERS[conn.msgtype](msg, spec[conn.topic][1])))
    result = {}
    for t, items in out.items():
        items.sort(key=lambda x: x[0])
        result[t] = (np.array([s for s, _ in items], np.float64), [r for _, r in items])
    return result


def import_rosbag(
    bags: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    topics: dict[str, str],
    *,
    reference: str | None = None,
    episode_gap_s: float = 1.0,
    max_age_s: float = 0.5,
    source: str = "teleop",
    task: str = "",
    instruction: str = "",
) -> int:
    """Bags -> episodes appended to the store at `out`; returns how many were written.

    topics: {topic: key} or {topic: "key:field"} (field picks JointState position|velocity|effort).
    reference: topic whose messages define the ticks (default: the first topic given).
    """
    if not topics:
        raise ValueError("map at least one topic onto an episode key")
    keys = {t: f.partition(":")[0] for t, f in topics.items()}
    reference = reference or next(iter(topics))
    if reference not in topics:
        raise ValueError(f"reference topic {reference!r} is not among the mapped topics")
    n = 0
    with EpisodeStore(out, "a") as dst:
        for bag in bags:
            streams = _read_topics(Path(bag), topics)
            ref_t = streams[reference][0]
            if len(ref_t) == 0:
                continue
            cuts = np.flatnonzero(np.diff(ref_t) > episode_gap_s) + 1
            for seg in np.split(np.arange(len(ref_t)), cuts):
                ep = _align(streams, keys, reference, seg, max_age_s)
                if ep is None:
                    continue
                data, t0 = ep
                final = {k: np.asarray(data[k][-1]) for k in keys.values()}
                meta = {
                    "source": source,
                    "task": task,
                    "instruction": instruction,
                    "length": len(data["timestamp"]),
                    "bag": str(bag),
                    "start_time": t0,
                    "topics": topics,
                    "reference": reference,
                }
                dst.add_episode(data, meta=meta, final=final)
                n += 1
    return n


def _align(
    streams: dict[str, tuple[np.ndarray, list[np.ndarray]]],
    keys: dict[str, str],
    reference: str,
    seg: np.ndarray,
    max_age_s: float,
) -> tuple[dict[str, np.ndarray], float] | None:
    ticks = streams[reference][0][seg]
    pick = {}
    ok = np.ones(len(ticks), bool)
    for topic, (times, _) in streams.items():
        j = np.searchsorted(times, ticks, side="right") - 1
        ok &= j >= 0
        ok &= ticks - times[np.maximum(j, 0)] <= max_age_s
        pick[topic] = j
    if not ok.any():
        return None
    t0 = float(ticks[ok][0])
    data: dict[str, np.ndarray] = {"timestamp": ticks[ok] - t0}
    for topic, j in pick.items():
        times, rows = streams[topic]
        data[keys[topic]] = np.stack([rows[i] for i in j[ok]])
        data[f"{keys[topic]}_timestamp"] = times[j[ok]] - t0
    return data, t0
