"""What real ROS 2 nodes see: CDR bytes, topic/type names, USER_DATA, ros_discovery_info."""

from __future__ import annotations

import numpy as np
import pytest
from cyclonedds.builtin import BuiltinDataReader, BuiltinTopicDcpsPublication, BuiltinTopicDcpsSubscription
from cyclonedds.domain import DomainParticipant
from cyclonedds.qos import Policy
from transport_util import wait_until

from robot_rl.transport import TopicQos, typesys
from robot_rl.transport.dds import DISCOVERY_TYPE, DdsTransport, idl_type

S = typesys.typestore("jazzy")


def header() -> object:
    return S.types["std_msgs/msg/Header"](
        stamp=S.types["builtin_interfaces/msg/Time"](sec=5, nanosec=7), frame_id="cam"
    )


def joint_state() -> object:
    return S.types["sensor_msgs/msg/JointState"](
        header=header(), name=["j1", "j2", "j3"], position=np.array([0.1, -0.2, 0.3]),
        velocity=np.zeros(3), effort=np.array([1.0, 2.0, 3.0]),
    )  # fmt: skip


def image() -> object:
    data = np.random.default_rng(0).integers(0, 256, 5 * 7 * 3, dtype=np.uint8)
    return S.types["sensor_msgs/msg/Image"](
        header=header(), height=5, width=7, encoding="rgb8", is_bigendian=0, step=21, data=data
    )


def pose() -> object:
    g = S.types
    p = g["geometry_msgs/msg/Pose"](
        position=g["geometry_msgs/msg/Point"](x=1.0, y=2.0, z=3.0),
        orientation=g["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
    )
    return g["geometry_msgs/msg/PoseStamped"](header=header(), pose=p)


@pytest.mark.parametrize(
    "ros_type,make",
    [("sensor_msgs/msg/JointState", joint_state), ("sensor_msgs/msg/Image", image),
     ("geometry_msgs/msg/PoseStamped", pose)],
)  # fmt: skip
def test_wire_bytes_equal_rosbags_cdr(cfg, ros_type, make) -> None:
    msg = make()
    with DdsTransport(cfg(node_name="pub")) as a, DdsTransport(cfg(node_name="sub")) as b:
        pub, sub = a.publisher("wire", ros_type), b.subscription("wire", ros_type)
        wait_until(lambda: pub.matched() == 1)
        pub.publish(msg)
        assert sub.wait(5.0)
        (raw,) = sub.take_raw()
    expected = bytes(S.serialize_cdr(msg, ros_type, little_endian=True))
    assert raw[:4] == b"\x00\x01\x00\x00"  # CDR_LE, XCDR1: what rmw_cyclonedds_cpp sends
    assert raw == expected + b"\0" * (-len(expected) % 4)
    # Independent check of the DDS type layout: cyclonedds' own decoder reads the same values.
    decoded = idl_type(ros_type).deserialize(raw)
    assert decoded.header.frame_id == "cam" and decoded.header.stamp.nanosec == 7


def test_endpoint_names_and_typehash_user_data(cfg) -> None:
    ros_type = "sensor_msgs/msg/JointState"
    with DdsTransport(cfg(node_name="talker")) as t:
        t.publisher("joint_states", ros_type)
        t.subscription("cmd", "geometry_msgs/msg/TwistStamped")
        spy = DomainParticipant(t.cfg.domain_id)
        pubs = BuiltinDataReader(spy, BuiltinTopicDcpsPublication)
        subs = BuiltinDataReader(spy, BuiltinTopicDcpsSubscription)
        found: dict[str, object] = {}

        def scan() -> bool:
            for e in pubs.take(64) + subs.take(64):
                found[e.topic_name] = e
            return {"rt/robot_rl/joint_states", "rt/robot_rl/cmd", "ros_discovery_info"} <= found.keys()

        wait_until(scan)
    js, cmd = found["rt/robot_rl/joint_states"], found["rt/robot_rl/cmd"]
    assert js.type_name == "sensor_msgs::msg::dds_::JointState_"
    assert cmd.type_name == "geometry_msgs::msg::dds_::TwistStamped_"
    assert js.qos[Policy.Userdata].data == f"typehash={typesys.type_hash(ros_type)};".encode()
    # Jazzy's published hash for sensor_msgs/msg/JointState (rosidl generated), pinned against regressions.
    assert b"RIHS01_a13ee3a330e346c9d87b5aa18d24e11690752bd33a0350f11c5882bc9179260e" in js.qos[Policy.Userdata].data
    assert cmd.qos[Policy.Userdata].data.startswith(b"typehash=RIHS01_")
    assert js.qos[Policy.DataRepresentation].use_cdrv0_representation
    assert not js.qos[Policy.DataRepresentation].use_xcdrv2_representation
    assert js.qos[Policy.History] == Policy.History.KeepLast(depth=10)
    assert found["ros_discovery_info"].type_name == "rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_"


def test_ros_discovery_info_lists_node_and_endpoints(cfg) -> None:
    with DdsTransport(cfg(node_name="graph_node")) as t, DdsTransport(cfg(node_name="observer")) as o:
        pub = t.publisher("chatter", "std_msgs/msg/String")
        # Keyless topic: a depth-1 reader would keep only the last sample across all writers.
        info = o.dds_subscription("ros_discovery_info", DISCOVERY_TYPE, TopicQos(transient_local=True, depth=100))
        want = pub.writer.guid.bytes

        def seen() -> bool:
            return any(
                n.node_name == "graph_node" and n.node_namespace == "/robot_rl"
                and any(bytes(g.data) == want for g in n.writer_gid_seq)
                for m in info.take() for n in m.node_entities_info_seq
            )  # fmt: skip

        wait_until(seen)
