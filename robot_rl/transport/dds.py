"""Pip-only ROS 2 backend: cyclonedds speaking exactly what rmw_cyclonedds_cpp speaks.

Wire conventions copied from rmw_cyclonedds_cpp: topics `rt/<name>`, types `pkg::msg::dds_::Name_`,
key-less final structs in plain CDR (XCDR1 forced through DataRepresentation), `typehash=RIHS01_...;` in
reader/writer USER_DATA, `enclave=/;` in participant USER_DATA, and our node listed on `ros_discovery_info`
so `ros2 node list` / `ros2 topic echo` see it.

Fast path: cyclonedds-python's own (de)serializer walks `uint8[]` element by element (tens of ms per
image). We therefore hand rosbags' numpy-backed CDR bytes straight to the C layer (`ddspy_write`) and take
raw bytes back (`ddspy_take`). The cyclonedds type generated from the same field definitions only gives
the topic its name and lets the C layer validate (normalize) incoming CDR, so bytes on the wire are
rosbags' bytes.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

import numpy as np
from cyclonedds import idl
from cyclonedds._clayer import ddspy_take, ddspy_write
from cyclonedds.core import DDSException, InstanceState, ReadCondition, SampleState, ViewState, WaitSet
from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.idl import types as t
from cyclonedds.pub import DataWriter
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration
from rosbags.interfaces import Nodetype

from robot_rl.transport import typesys
from robot_rl.transport.base import (
    LATCHED_QOS,
    ROS_DEFAULT_QOS,
    BackpressureTimeout,
    Publisher,
    Subscription,
    TopicQos,
    Transport,
    TransportConfig,
)

_BASE = {
    "bool": bool,
    "byte": t.byte,
    "char": t.uint8,  # ROS `char` is an 8-bit unsigned integer, not an IDL char
    "int8": t.int8,
    "uint8": t.uint8,
    "int16": t.int16,
    "uint16": t.uint16,
    "int32": t.int32,
    "uint32": t.uint32,
    "int64": t.int64,
    "uint64": t.uint64,
    "float32": t.float32,
    "float64": t.float64,
}
_DDSPY_ANY_STATE = SampleState.Any | ViewState.Any | InstanceState.Any
DISCOVERY_TOPIC = "ros_discovery_info"
DISCOVERY_TYPE = "rmw_dds_common/msg/ParticipantEntitiesInfo"


@cache
def idl_type(ros_type: str, distro: str = "jazzy") -> type[idl.IdlStruct]:
    """A cyclonedds struct with the ROS type's DDS name and layout (nested types named the ROS way too)."""
    store = typesys.typestore(distro)

    def field_type(desc: Any) -> Any:
        kind, rest = desc
        if kind == Nodetype.NAME:
            return idl_type(rest, distro)
        if kind == Nodetype.BASE:
            name, bound = rest
            if name == "string":
                return t.bounded_str[bound] if bound else str
            return _BASE[name]
        elem, n = rest
        if kind == Nodetype.ARRAY:
            return t.array[field_type(elem), n]
        return t.sequence[field_type(elem), n] if n else t.sequence[field_type(elem)]

    fields = store.fielddefs[ros_type][1] or [("structure_needs_at_least_one_member", (Nodetype.BASE, ("uint8", 0)))]
    name = ros_type.replace("/", "__")
    return idl.make_idl_struct(name, typesys.dds_type_name(ros_type), {f: field_type(d) for f, d in fields})


def dds_qos(qos: TopicQos, ros_type: str, distro: str) -> Qos:
    policies: list[Any] = [
        Policy.Reliability.Reliable(max_blocking_time=duration(seconds=qos.max_blocking_s))
        if qos.reliable
        else Policy.Reliability.BestEffort,
        Policy.Durability.TransientLocal if qos.transient_local else Policy.Durability.Volatile,
        Policy.DataRepresentation(use_cdrv0_representation=True),
    ]
    if qos.depth is None:
        policies += [
            Policy.History.KeepAll,
            Policy.ResourceLimits(
                max_samples=qos.max_samples, max_instances=1, max_samples_per_instance=qos.max_samples
            ),
        ]
    else:
        policies.append(Policy.History.KeepLast(depth=qos.depth))
    if data := typesys.user_data(ros_type, distro):
        policies.append(Policy.Userdata(data=data))
    return Qos(*policies)


class DdsPublisher(Publisher):
    def __init__(self, writer: DataWriter, topic: str, ros_type: str, distro: str) -> None:
        super().__init__(topic, ros_type, distro)
        self.writer = writer

    def publish(self, msg: Any) -> None:
        self.publish_raw(self._serialize_scratch(msg))  # cyclone copies on write

    def publish_raw(self, data: bytes | memoryview) -> None:
        if len(data) % 4:
            data = bytes(data) + b"\0" * (-len(data) % 4)
        ret = ddspy_write(self.writer._ref, data)
        if ret == DDSException.DDS_RETCODE_TIMEOUT:
            raise BackpressureTimeout(f"{self.topic}: subscribers did not drain in time")
        if ret < 0:
            raise DDSException(ret, f"writing {self.ros_type} on {self.topic}")

    def matched(self) -> int:
        return self.writer.get_publication_matched_status().current_count


class DdsSubscription(Subscription):
    def __init__(self, reader: DataReader, topic: str, ros_type: str, distro: str, max_bytes: int) -> None:
        super().__init__(topic, ros_type, distro, max_bytes)
        self.reader = reader
        self._waitset = WaitSet(reader.participant)
        self._waitset.attach(ReadCondition(reader, _DDSPY_ANY_STATE))

    def take_raw(self, max_n: int = 256) -> list[bytes]:
        ret = ddspy_take(self.reader._ref, _DDSPY_ANY_STATE, max_n)
        if isinstance(ret, int):
            raise DDSException(ret, f"taking {self.ros_type} on {self.topic}")
        return [data for data, info in ret if info.valid_data]

    def wait(self, timeout_s: float) -> bool:
        return self._waitset.wait(duration(seconds=timeout_s)) > 0


class DdsTransport(Transport):
    """One DDS participant = one ROS node (`cfg.node_name` in `cfg.namespace`)."""

    def __init__(self, cfg: TransportConfig) -> None:
        super().__init__(cfg)
        self._domain = Domain(cfg.domain_id, cfg.dds_config) if cfg.dds_config else None
        self.participant = DomainParticipant(cfg.domain_id, qos=Qos(Policy.Userdata(data=b"enclave=/;")))
        self._topics: dict[str, Topic] = {}
        self._readers: list[DataReader] = []
        self._writers: list[DataWriter] = []
        self._lock = threading.Lock()
        self._discovery = self._writer(DISCOVERY_TOPIC, DISCOVERY_TYPE, LATCHED_QOS)
        self._announce()

    def _topic(self, dds_name: str, ros_type: str) -> Topic:
        if dds_name not in self._topics:
            self._topics[dds_name] = Topic(self.participant, dds_name, idl_type(ros_type, self.cfg.distro))
        return self._topics[dds_name]

    def _writer(self, dds_name: str, ros_type: str, qos: TopicQos) -> DataWriter:
        topic = self._topic(dds_name, ros_type)
        return DataWriter(self.participant, topic, qos=dds_qos(qos, ros_type, self.cfg.distro))

    def publisher(self, topic: str, ros_type: str, qos: TopicQos = ROS_DEFAULT_QOS) -> DdsPublisher:
        name = self.cfg.resolve(topic)
        with self._lock:
            writer = self._writer("rt" + name, ros_type, qos)
            self._writers.append(writer)
            self._announce()
        return DdsPublisher(writer, name, ros_type, self.cfg.distro)

    def subscription(self, topic: str, ros_type: str, qos: TopicQos = ROS_DEFAULT_QOS) -> DdsSubscription:
        return self.dds_subscription("rt" + self.cfg.resolve(topic), ros_type, qos)

    def dds_subscription(self, dds_name: str, ros_type: str, qos: TopicQos = ROS_DEFAULT_QOS) -> DdsSubscription:
        """Subscribe by DDS topic name, e.g. `ros_discovery_info`, which has no `rt/` prefix."""
        with self._lock:
            reader = DataReader(
                self.participant, self._topic(dds_name, ros_type), qos=dds_qos(qos, ros_type, self.cfg.distro)
            )
            self._readers.append(reader)
            self._announce()
        return DdsSubscription(reader, dds_name, ros_type, self.cfg.distro, self.cfg.max_message_bytes)

    def _announce(self) -> None:
        """Publish this participant's node and endpoints the way rmw_dds_common's graph cache expects."""
        store = typesys.typestore(self.cfg.distro)
        gid = store.types["rmw_dds_common/msg/Gid"]
        size = store.fielddefs["rmw_dds_common/msg/Gid"][1][0][1][1][1]  # char[16] on Jazzy, uint8[24] on Humble
        node = store.types["rmw_dds_common/msg/NodeEntitiesInfo"](
            node_namespace=self.cfg.namespace,
            node_name=self.cfg.node_name,
            reader_gid_seq=[gid(data=_gid_bytes(r, size)) for r in self._readers],
            writer_gid_seq=[gid(data=_gid_bytes(w, size)) for w in self._writers],
        )
        info = store.types[DISCOVERY_TYPE](
            gid=gid(data=_gid_bytes(self.participant, size)), node_entities_info_seq=[node]
        )
        ddspy_write(self._discovery._ref, typesys.serialize(info, DISCOVERY_TYPE, self.cfg.distro))

    def close(self) -> None:
        """Deleting the participant takes all its endpoints with it; remote graph caches see it leave."""
        self.participant.__del__()  # idempotent; the graph must see us leave now, not at GC time
        self._readers.clear()
        self._writers.clear()
        self._topics.clear()


def _gid_bytes(entity: Any, size: int) -> np.ndarray:
    """rmw_cyclonedds' gid is the 16-byte DDS GUID (prefix + entity id, network order), zero-padded on Humble."""
    out = np.zeros(size, dtype=np.uint8)
    out[:16] = np.frombuffer(entity.guid.bytes, dtype=np.uint8)
    return out
