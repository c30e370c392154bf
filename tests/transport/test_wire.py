"""What a plain ROS 2 node (tests/plain_ros.py: rclpy, generated classes, default Fast DDS) gets from our transport,
and what we get from it: every message type we use, both directions, and our node in its graph."""

from __future__ import annotations

import array
from typing import Any

import numpy as np
import pytest
from plain_ros import PlainNode, msg_type
from transport_util import wait_until

from robot_rl.real import msgs
from robot_rl.transport import make_transport, typesys
from robot_rl.transport.channels import ANNOUNCE_T, BATCH_T, CHUNK_T, EPISODE_T
from robot_rl.transport.ros2 import RosSetupError, installed_type_hash, rclpy_msg_class

pytestmark = pytest.mark.ros2
S = typesys.typestore("jazzy")
OUR_TYPES = [BATCH_T, CHUNK_T, ANNOUNCE_T, EPISODE_T, "robot_rl_msgs/msg/BulkEndpoint"]
ROBOT_TYPES = [msgs.JOINT_STATE, msgs.IMAGE, msgs.COMPRESSED_IMAGE, msgs.POSE, msgs.TWIST, msgs.FLOAT64, msgs.BOOL,
               msgs.INT64, msgs.STRING]  # fmt: skip


def sample(ros_type: str, seed: int = 0) -> Any:
    """A rosbags message of `ros_type` with distinct non-default values in every field (sequences non-empty)."""
    rng = np.random.default_rng(seed)

    def build(t: str) -> Any:
        fields = {}
        for name, (kind, rest) in S.fielddefs[t][1]:
            fields[name] = value(kind, rest)
        return S.types[t](**fields)

    def base(name: str) -> Any:
        if name == "string":
            return f"s{rng.integers(100)}"
        if name == "bool":
            return True
        if name.startswith("float"):
            return float(rng.standard_normal())
        return int(rng.integers(1, 100))

    def value(kind: int, rest: Any) -> Any:
        from rosbags.interfaces import Nodetype

        if kind == Nodetype.NAME:
            return build(rest)
        if kind == Nodetype.BASE:
            return base(rest[0])
        (ek, er), n = rest
        n = n or 3
        if ek == Nodetype.BASE and er[0] != "string":
            dtype = {"float32": np.float32, "float64": np.float64, "bool": np.bool_}.get(er[0], np.dtype(er[0]))
            return np.array([base(er[0]) for _ in range(n)], dtype=dtype)
        return [value(ek, er) for _ in range(n)]

    return build(ros_type)


def plain(msg: Any) -> Any:
    """A rosbags dataclass or an rclpy message as nested python values, for comparing the two."""
    if hasattr(msg, "get_fields_and_field_types"):
        return {f: plain(getattr(msg, f)) for f in msg.get_fields_and_field_types()}
    if hasattr(msg, "__msgtype__"):
        return {f: plain(getattr(msg, f)) for f, _ in S.fielddefs[msg.__msgtype__][1]}
    if isinstance(msg, (np.ndarray, array.array, bytes, list, tuple)):
        return [plain(v) for v in (msg.tolist() if isinstance(msg, np.ndarray) else msg)]
    if isinstance(msg, (np.floating, float)):
        return float(np.float32(msg)) if isinstance(msg, np.float32) else float(msg)
    return msg.item() if isinstance(msg, np.generic) else msg


def to_rclpy(ros_type: str, values: dict) -> Any:
    msg = msg_type(ros_type)()
    for name, v in values.items():
        current = getattr(msg, name)
        if hasattr(current, "get_fields_and_field_types"):
            v = to_rclpy(f"{type(current).__module__.split('.')[0]}/msg/{type(current).__name__}", v)
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            elem_t = msg.get_fields_and_field_types()[name].removeprefix("sequence<").removesuffix(">").split("[")[0]
            pkg, name_ = elem_t.split("/")
            v = [to_rclpy(f"{pkg}/msg/{name_}", e) for e in v]
        setattr(msg, name, v)
    return msg


def approx_equal(a: Any, b: Any) -> bool:
    """float32 fields go through a float64 python value on one side: compare at float32 precision."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(approx_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(approx_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return np.float32(a) == np.float32(b)
    return a == b


@pytest.mark.parametrize("ros_type", OUR_TYPES + ROBOT_TYPES)
def test_every_type_both_directions_with_a_plain_node(cfg, ros_type: str) -> None:
    ours_msg, theirs = sample(ros_type, seed=1), sample(ros_type, seed=2)
    domain = cfg().domain_id
    with make_transport(cfg(node_name="ours")) as tx, PlainNode(domain) as peer:
        got_plain = peer.subscribe("/robot_rl/to_plain", ros_type)
        plain_pub = peer.publisher("/robot_rl/from_plain", ros_type)
        pub = tx.publisher("to_plain", ros_type)
        sub = tx.subscription("from_plain", ros_type)
        peer.spin_until(lambda: pub.matched() == 1 and plain_pub.get_subscription_count() == 1, 10, "matching")
        pub.publish(ours_msg)
        peer.spin_until(lambda: len(got_plain) == 1, 10, f"our {ros_type}")
        plain_pub.publish(to_rclpy(ros_type, plain(theirs)))
        got: list = []
        wait_until(lambda: sub.wait(0.05) and got.extend(sub.take()) is None and len(got) == 1)
    assert approx_equal(plain(got_plain[0]), plain(ours_msg))
    assert approx_equal(plain(got[0]), plain(theirs))


def test_plain_node_sees_our_node_and_its_endpoints(cfg) -> None:
    with make_transport(cfg(node_name="talker")) as tx, PlainNode(cfg().domain_id) as peer:
        tx.publisher("joint_states", msgs.JOINT_STATE)
        tx.subscription("cmd", msgs.TWIST)

        def listed() -> bool:
            if ("talker", "/robot_rl") not in peer.node.get_node_names_and_namespaces():
                return False
            pubs, subs = peer.node_endpoints("talker", "/robot_rl")
            return "/robot_rl/joint_states" in pubs and "/robot_rl/cmd" in subs

        peer.spin_until(listed, 10, "our node with its endpoints")
        (info,) = peer.node.get_publishers_info_by_topic("/robot_rl/joint_states")
    assert (info.node_name, info.node_namespace, info.topic_type) == ("talker", "/robot_rl", msgs.JOINT_STATE)


@pytest.mark.parametrize("ros_type", OUR_TYPES + ROBOT_TYPES + ["rmw_dds_common/msg/ParticipantEntitiesInfo"])
def test_type_hashes_match_rosidl(ros_type: str) -> None:
    """The definitions we encode with hash like rosidl's, `char` included (rmw_dds_common's Gid is `char[16]`)."""
    assert typesys.type_hash(ros_type) == installed_type_hash(ros_type)


def test_missing_message_package_is_a_clear_error() -> None:
    with pytest.raises(RosSetupError, match="no_such_msgs"):
        rclpy_msg_class("no_such_msgs/msg/Thing")
