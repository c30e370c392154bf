"""The transport interface every backend implements: typed publish/subscribe over ROS 2 topic names.

Backends only move opaque CDR bytes; encoding, size limits and the drop-with-a-reason policy live here so
that rclpy, DDS and in-process behave identically.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from robot_rl.transport import typesys

log = logging.getLogger("robot_rl.transport")


class BackpressureTimeout(TimeoutError):
    """A lossless topic's subscribers did not drain in time; the caller decides whether to retry or stop."""


@dataclass(frozen=True)
class TopicQos:
    """The subset of DDS QoS we use. `depth=None` is keep-all: reliable + keep-all makes the writer block
    (up to `max_blocking_s`) instead of dropping, with `max_samples` bounding the queue on both ends."""

    reliable: bool = True
    transient_local: bool = False
    depth: int | None = 10
    max_samples: int = 64
    max_blocking_s: float = 10.0


ROS_DEFAULT_QOS = TopicQos()  # rmw_qos_profile_default

LATCHED_QOS = TopicQos(transient_local=True, depth=1)


@dataclass
class TransportConfig:
    """Where and how a process joins the robot_rl graph.

    backend: "rclpy" (ROS 2: every process that talks to another) or "inproc" (one process, unit tests).
    distro: which ROS 2 message definitions to encode with ("jazzy": Jazzy and later, or "humble"); checked
        against the installed ROS packages when an endpoint is created.
    max_message_bytes: larger incoming messages are dropped before decoding.
    bulk_address, bulk_port: where a learner takes transition streams (TCP, see `bulk`). Set the address to
        the learner's LAN IP when actors run on other machines; port 0 picks a free one (announced over DDS).
    """

    backend: str = "rclpy"
    domain_id: int = 0
    namespace: str = "/robot_rl"
    node_name: str = "robot_rl"
    distro: str = "jazzy"
    task: str = "default"
    max_message_bytes: int = 64 * 2**20
    bulk_address: str = "127.0.0.1"
    bulk_port: int = 0

    def resolve(self, topic: str) -> str:
        """Relative topic names live under the namespace, like rclpy resolves them in a namespaced node."""
        if topic.startswith("/"):
            return topic
        return f"{self.namespace.rstrip('/')}/{topic}"


@dataclass
class TlsConfig:
    """Mutual TLS from one CA: every peer shows a certificate the run's CA signed, so only the run's learner can
    serve weights to its arms and only its actors can send transitions. PEM file paths."""

    ca: str = ""
    cert: str = ""
    key: str = ""


@dataclass
class PlaneConfig:
    """The actor-learner plane on Zenoh (`transport/plane.py`, `distributed.plane=zenoh`). `run_id` "": the
    learner takes its run dir's name (kept in the run's config, so a resumed learner keeps it); actors on other
    machines are given it (`launch` passes it to its own)."""

    run_id: str = ""
    endpoint: str = "tcp/127.0.0.1:7448"  # where the learner listens and actors dial; tls/HOST:PORT with `tls`
    tls: TlsConfig = field(default_factory=TlsConfig)
    credits: int = 8  # batches an actor has in flight unanswered (the bound on its policy lag in batches)
    ack_timeout_s: float = 10.0  # an unanswered batch is sent again after this long

    @property
    def prefix(self) -> str:
        if not self.run_id or any(c in self.run_id for c in "/*$?#"):
            raise ValueError(f"run id {self.run_id!r}: non-empty, without / * $ ? #")
        return f"robot_rl/{self.run_id}"


class Publisher(ABC):
    def __init__(self, topic: str, ros_type: str, distro: str) -> None:
        self.topic, self.ros_type, self.distro = topic, ros_type, distro
        self._scratch: bytearray | None = None

    def publish(self, msg: Any) -> None:
        self.publish_raw(typesys.serialize(msg, self.ros_type, self.distro))

    def _serialize_scratch(self, msg: Any) -> memoryview:
        """`msg` serialized into this publisher's reused buffer; valid until the next call (for backends that copy
        on write, or that drop the buffer while a frame in it is unsent)."""
        view = typesys.serialize_into(msg, self.ros_type, self._scratch, self.distro)
        self._scratch = view.obj  # type: ignore[assignment]
        return view

    @abstractmethod
    def publish_raw(self, data: bytes) -> None:
        """Send already-encoded CDR (encapsulation header included)."""

    @abstractmethod
    def matched(self) -> int:
        """Number of subscriptions currently matched; lets callers wait for discovery."""


class Subscription(ABC):
    def __init__(self, topic: str, ros_type: str, distro: str, max_message_bytes: int) -> None:
        self.topic, self.ros_type, self.distro = topic, ros_type, distro
        self.max_message_bytes = max_message_bytes
        self.dropped: Counter[str] = Counter()

    def take(self, max_n: int = 256) -> list[Any]:
        """Decoded messages, oldest first; undecodable or oversized ones are dropped and logged."""
        out = []
        for raw in self.take_raw(max_n):
            if len(raw) > self.max_message_bytes:
                self.drop("oversized", f"{len(raw)} bytes > {self.max_message_bytes}")
                continue
            try:
                out.append(typesys.deserialize(raw, self.ros_type, self.distro))
            except Exception as e:  # rosbags raises SerdeError, struct.error, ValueError, IndexError...
                self.drop("malformed", f"{type(e).__name__}: {e}")
        return out

    def drop(self, reason: str, detail: str) -> None:
        self.dropped[reason] += 1
        log.warning("dropped %s on %s (%s): %s", self.ros_type, self.topic, reason, detail)

    @abstractmethod
    def take_raw(self, max_n: int = 256) -> list[bytes]:
        """Received CDR exactly as it arrived, oldest first, without blocking."""

    def take_received(self, max_n: int = 256) -> list[tuple[int, bytes]]:
        """`take_raw` with each message's arrival time (ns since the epoch), which orders messages across topics as
        they were sent where one poll takes several; backends that keep no arrival time give the take's time."""
        now = time.time_ns()
        return [(now, raw) for raw in self.take_raw(max_n)]

    @abstractmethod
    def wait(self, timeout_s: float) -> bool:
        """Block until data may be available (True) or the timeout passes (False)."""


class _Closable(Protocol):
    def close(self) -> None: ...


_C = TypeVar("_C", bound=_Closable)


class Transport(ABC):
    """Typed publish/subscribe (backend-specific). The bulk channel (`bulk.publisher`, `bulk.subscription`: one
    TCP implementation for all backends) builds its endpoints on a transport, which closes them on exit."""

    def __init__(self, cfg: TransportConfig) -> None:
        self.cfg = cfg
        self._owned: list[_Closable] = []

    @abstractmethod
    def publisher(self, topic: str, ros_type: str, qos: TopicQos = ROS_DEFAULT_QOS) -> Publisher: ...

    @abstractmethod
    def subscription(self, topic: str, ros_type: str, qos: TopicQos = ROS_DEFAULT_QOS) -> Subscription: ...

    def own(self, endpoint: _C) -> _C:
        """`endpoint` is closed when this transport exits, before the backend closes."""
        self._owned.append(endpoint)
        return endpoint

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        for endpoint in self._owned:
            endpoint.close()
        self.close()
