"""Message types: the standard ROS 2 definitions carried by `rosbags` plus our `robot_rl_msgs`.

rosbags is the single source of truth for layout and CDR (de)serialization, so our bytes are the ones a ROS 2
node produces without us hand-writing CDR. Its RIHS01 hashes let the rclpy backend check, per type, that the
installed ROS package describes the same bytes.
"""

from __future__ import annotations

import time
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys import store as _rosbags_store
from rosbags.typesys.store import Typestore

# rosidl reads `char` as uint8 when it builds type descriptions; rosbags hashes it as CHAR, which gives e.g.
# rmw_dds_common/msg/Gid (`char[16]`) a hash no ROS node has. Only hashing reads this table.
_rosbags_store.TIDMAP["char"] = _rosbags_store.TIDMAP["uint8"]

# Bump on any change to robot_rl_msgs or to how transitions/weights are packed into them.
SCHEMA_VERSION = 2

STORES = {"jazzy": Stores.ROS2_JAZZY, "humble": Stores.ROS2_HUMBLE}


def own_msg_definitions() -> dict[str, str]:
    """Every shipped .msg file, keyed by ROS type name: robot_rl_msgs and the driver packages' subsets (their
    srv/action types have no topic of ours, so rosbags need not know them); what the colcon packages are built from."""
    root = resources.files("robot_rl.transport.msgs")
    return {f"{pkg.name}/msg/{f.name[:-4]}": f.read_text()
            for pkg in sorted(root.iterdir(), key=lambda p: p.name) if (pkg / "msg").is_dir()
            for f in sorted((pkg / "msg").iterdir(), key=lambda p: p.name) if f.name.endswith(".msg")}  # fmt: skip


@cache
def typestore(distro: str = "jazzy") -> Typestore:
    """The ROS distro's standard types with robot_rl_msgs registered on top."""
    store = get_typestore(STORES[distro])
    defs: dict[str, Any] = {}
    for name, text in own_msg_definitions().items():
        if name not in store.fielddefs:  # a distro store may carry a driver package's type already
            defs.update(get_types_from_msg(text, name))
    store.register(defs)
    return store


def type_hash(ros_type: str, distro: str = "jazzy") -> str:
    """RIHS01 hash as `ros2 topic info -v` reports it (rosidl's, `char` included)."""
    return typestore(distro).hash_rihs01(ros_type)


def serialize(msg: object, ros_type: str, distro: str = "jazzy") -> bytes:
    """Little-endian plain CDR (XCDR1) with encapsulation header, zero-padded to 4 bytes like DDS sends it."""
    return bytes(serialize_into(msg, ros_type, None, distro))


def serialize_into(msg: object, ros_type: str, buf: bytearray | None, distro: str = "jazzy") -> memoryview:
    """`serialize` without the copies: rosbags' generated serializer writes straight into `buf` (grown when too
    small, reused otherwise, so a 2 MB image batch costs one pass over the pixels instead of a fresh zeroed
    allocation plus two copies). Returns a view of the message's bytes in `buf`, valid until the next call that
    reuses `buf`: hand it to something that copies (cyclone's write does) before serializing again."""
    store = typestore(distro)
    msgdef = store.get_msgdef(ros_type)
    size = 4 + msgdef.getsize_cdr(0, msg, store)
    padded = size + (-size % 4)
    if buf is None or len(buf) < padded:
        buf = bytearray(padded)
    else:
        np.frombuffer(buf, np.uint8, padded)[:] = 0  # rosbags skips alignment gaps: they must read as zeros
    view = memoryview(buf)[:padded]
    view[:4] = b"\0\1\0\0"  # CDR_LE encapsulation, options 0
    end = msgdef.serialize_cdr_le(view[4:], 0, msg, store)
    if end + 4 != size:
        raise ValueError(f"{ros_type}: serializer wrote {end + 4} of {size} bytes")
    return view


def deserialize(raw: bytes | memoryview, ros_type: str, distro: str = "jazzy") -> Any:
    """Raises on malformed input (rosbags' SerdeError or a struct/value error). Arrays in the result are
    read-only views into `raw` (zero copy): rosbags slices its input, so a memoryview keeps that a view."""
    return typestore(distro).deserialize_cdr(memoryview(raw), ros_type)


def msg_class(ros_type: str, distro: str = "jazzy") -> Any:
    """The rosbags dataclass for a type; construct messages with it."""
    return typestore(distro).types[ros_type]


def header(sec: int, nanosec: int, frame_id: str = "", distro: str = "jazzy") -> Any:
    """A std_msgs/Header; every message we build gets its stamp here."""
    time_t = msg_class("builtin_interfaces/msg/Time", distro)
    return msg_class("std_msgs/msg/Header", distro)(stamp=time_t(sec=sec, nanosec=nanosec), frame_id=frame_id)


def header_now(distro: str = "jazzy") -> Any:
    sec, nanosec = divmod(time.time_ns(), 10**9)
    return header(sec, nanosec, "", distro)
