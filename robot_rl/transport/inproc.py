"""In-process backend for unit tests: same bytes, same QoS semantics, no network.

Messages still go through CDR so tests exercise the real encoding and drop paths.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque

from robot_rl.transport.base import (
    ROS_DEFAULT_QOS,
    BackpressureTimeout,
    Publisher,
    Subscription,
    TopicQos,
    Transport,
    TransportConfig,
)


class _Bus:
    """Per (domain, topic): live subscriber queues and the latched history late joiners get."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.subs: dict[tuple[int, str], list[InprocSubscription]] = defaultdict(list)
        self.latched: dict[tuple[int, str], deque[tuple[int, bytes]]] = {}  # (publish time ns, CDR)


_BUS = _Bus()


class InprocPublisher(Publisher):
    def __init__(self, key: tuple[int, str], ros_type: str, distro: str, qos: TopicQos) -> None:
        super().__init__(key[1], ros_type, distro)
        self.key, self.qos = key, qos
        if qos.transient_local:
            _BUS.latched.setdefault(key, deque(maxlen=qos.depth or qos.max_samples))

    def publish_raw(self, data: bytes) -> None:
        with _BUS.cond:
            subs = _BUS.subs[self.key]
            if self.qos.depth is None:  # keep-all: block like a reliable DDS writer would
                ok = _BUS.cond.wait_for(
                    lambda: all(len(s.queue) < s.qos.max_samples for s in subs), self.qos.max_blocking_s
                )
                if not ok:
                    raise BackpressureTimeout(f"{self.topic}: subscribers did not drain in time")
            sent = (time.time_ns(), data)  # one bus: published is received
            for s in subs:
                s.queue.append(sent)
            if self.key in _BUS.latched:
                _BUS.latched[self.key].append(sent)
            _BUS.cond.notify_all()

    def matched(self) -> int:
        with _BUS.cond:
            return len(_BUS.subs[self.key])


class InprocSubscription(Subscription):
    def __init__(self, key: tuple[int, str], ros_type: str, distro: str, max_bytes: int, qos: TopicQos) -> None:
        super().__init__(key[1], ros_type, distro, max_bytes)
        self.key, self.qos = key, qos
        self.queue: deque[tuple[int, bytes]] = deque(maxlen=qos.depth)
        with _BUS.cond:
            if qos.transient_local:
                self.queue.extend(_BUS.latched.get(key, ()))
            _BUS.subs[key].append(self)

    def take_raw(self, max_n: int = 256) -> list[bytes]:
        return [raw for _, raw in self.take_received(max_n)]

    def take_received(self, max_n: int = 256) -> list[tuple[int, bytes]]:
        with _BUS.cond:
            out = [self.queue.popleft() for _ in range(min(max_n, len(self.queue)))]
            _BUS.cond.notify_all()
            return out

    def wait(self, timeout_s: float) -> bool:
        with _BUS.cond:
            return _BUS.cond.wait_for(lambda: len(self.queue) > 0, timeout_s)

    def close(self) -> None:
        with _BUS.cond:
            _BUS.subs[self.key].remove(self)
            _BUS.cond.notify_all()


class InprocTransport(Transport):
    def __init__(self, cfg: TransportConfig) -> None:
        super().__init__(cfg)
        self._subs: list[InprocSubscription] = []

    def publisher(self, topic: str, ros_type: str, qos: TopicQos = ROS_DEFAULT_QOS) -> InprocPublisher:
        return InprocPublisher((self.cfg.domain_id, self.cfg.resolve(topic)), ros_type, self.cfg.distro, qos)

    def subscription(self, topic: str, ros_type: str, qos: TopicQos = ROS_DEFAULT_QOS) -> InprocSubscription:
        key = (self.cfg.domain_id, self.cfg.resolve(topic))
        sub = InprocSubscription(key, ros_type, self.cfg.distro, self.cfg.max_message_bytes, qos)
        self._subs.append(sub)
        return sub

    def close(self) -> None:
        for s in self._subs:
            s.close()
        self._subs.clear()
