"""The bulk channel: transition batches actor -> learner over one TCP stream per actor.

DDS stays the control plane (weights, episodes, the endpoint announcement, everything `ros2 topic` should
see); the data plane is a plain socket because that is what moves bytes fastest between processes and hosts:
cyclone's UDP path through the Python binding copies each image batch several times and fell well short of a raw
TCP socket (`bench/run.py --only transport`; history in docs/log/benchmarks.md). Messages are still the ROS CDR of
the same `robot_rl_msgs` type.

Wire: the learner listens on `TransportConfig.bulk_address:bulk_port` and announces `tcp://host:port` on the
latched `<topic>/endpoint` topic. An actor connects to the newest announcement and sends frames of
`uint32 length (little-endian) + CDR`. The learner answers with `uint32` credits, one per frame it has taken;
an actor never has more than `window` frames unanswered, so a learner that stops taking data makes actors
block (flow control) and nothing is ever dropped for lack of room.
"""

from __future__ import annotations

import contextlib
import select
import selectors
import socket
import struct
import time
from collections import deque
from typing import Any

import numpy as np

from robot_rl.transport import typesys
from robot_rl.transport.base import LATCHED_QOS, BackpressureTimeout, Publisher, Subscription, Transport, log

ENDPOINT_T = "robot_rl_msgs/msg/BulkEndpoint"
_LEN = struct.Struct("<I")
_RECV_BUF = 1 << 20  # frames under half of this are cut out of one shared receive buffer; larger get their own
_RECONNECT_S = 0.5
_FINISH_GRACE_S = 1.0  # how long a broken stream waits for the learner's end-of-run announcement
_SEND_BUF = 4 << 20  # most frames then leave in one syscall (the kernel caps it at net.core.wmem_max)


def _endpoint_topic(topic: str) -> str:
    return f"{topic}/endpoint"


def publisher(transport: Transport, topic: str, ros_type: str, window: int) -> BulkPublisher:
    """An actor's end of the bulk channel on `topic` (relative names under the namespace); the transport closes
    it on exit."""
    return transport.own(BulkPublisher(transport, transport.cfg.resolve(topic), ros_type, window))


def subscription(transport: Transport, topic: str, ros_type: str) -> BulkSubscription:
    """The learner's end of the bulk channel on `topic`; the transport closes it on exit."""
    return transport.own(BulkSubscription(transport, transport.cfg.resolve(topic), ros_type))


class BulkSubscription(Subscription):
    """Learner side. `take_raw` returns whole frames (oldest first per actor) and pays the credits back."""

    def __init__(self, transport: Transport, topic: str, ros_type: str) -> None:
        cfg = transport.cfg
        super().__init__(topic, ros_type, cfg.distro, cfg.max_message_bytes)
        if cfg.bulk_address in ("", "0.0.0.0", "::"):
            raise ValueError(
                f"bulk_address={cfg.bulk_address!r} is announced to actors as is: give an address they can reach"
                " (the learner's IP on the robot network, or 127.0.0.1 when everything runs on this machine)"
            )
        self._server = socket.create_server((cfg.bulk_address, cfg.bulk_port))
        self._server.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ)
        self._ready: deque[tuple[_Stream, bytes | memoryview]] = deque()
        host, port = self._server.getsockname()[:2]
        self.uri = f"tcp://{host}:{port}"
        self._cfg = cfg
        self._announce = transport.publisher(_endpoint_topic(topic), ENDPOINT_T, LATCHED_QOS)
        self._announce_uri(self.uri)

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        self._pump(timeout_s)
        while not self._ready and (left := deadline - time.monotonic()) > 0:
            self._pump(left)
        return bool(self._ready)

    def take_raw(self, max_n: int = 256) -> list[bytes | memoryview]:
        self._pump(0.0)
        out, credits = [], {}
        while self._ready and len(out) < max_n:
            stream, frame = self._ready.popleft()
            out.append(frame)
            credits[stream] = credits.get(stream, 0) + 1
        for stream, n in credits.items():
            stream.credit(n)
        return out

    def _pump(self, timeout_s: float) -> None:
        for key, _ in self._selector.select(max(0.0, timeout_s)):
            if key.fileobj is self._server:
                try:
                    sock, _ = self._server.accept()
                except BlockingIOError:
                    continue
                stream = _Stream(sock, self)
                self._selector.register(sock, selectors.EVENT_READ, stream)
                continue
            stream = key.data
            if not stream.read():
                self._selector.unregister(stream.sock)
                stream.close()

    def finish(self) -> None:
        """The run is over: an empty endpoint (latched) tells actors to stop instead of waiting for a restart."""
        self._announce_uri("")

    def _announce_uri(self, uri: str) -> None:
        cfg = self._cfg
        self._announce.publish(typesys.msg_class(ENDPOINT_T, cfg.distro)(
            header=typesys.header_now(cfg.distro), task=cfg.task, schema_version=typesys.SCHEMA_VERSION, uri=uri
        ))  # fmt: skip

    def close(self) -> None:
        """Idempotent: the transport closes every bulk endpoint on exit, whoever closed it before."""
        if (streams := self._selector.get_map()) is None:
            return
        for key in list(streams.values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()


class _Stream:
    """One actor's connection: frames cut out with as few syscalls and copies as the sizes allow."""

    def __init__(self, sock: socket.socket, sub: BulkSubscription) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.sub = sock, sub
        self.buf = np.empty(_RECV_BUF, np.uint8)
        self.view = memoryview(self.buf)
        self.start = self.end = 0
        self.big: np.ndarray | None = None  # a frame larger than half the buffer, received straight into place
        self.big_got = 0
        self.skip = 0  # bytes of an oversized frame still to discard
        self.owed = b""  # credits not yet sent back

    def read(self) -> bool:
        """Receives what the socket has; False when the actor is gone (the stream is then closed)."""
        try:
            if self.big is not None:
                n = self.sock.recv_into(memoryview(self.big)[self.big_got :])
                self.big_got += n
                if self.big_got == len(self.big):
                    self.sub._ready.append((self, memoryview(self.big)))
                    self.big = None
            else:
                n = self.sock.recv_into(self.view[self.end :])
                self.end += n
                self._cut()
        except BlockingIOError:
            return True
        except OSError as e:
            n = 0
            log.warning("bulk %s: connection error %s", self.sub.topic, e)
        if n == 0:
            if self.big is not None or self.end > self.start or self.skip:
                self.sub.drop("truncated", "the actor's connection closed in the middle of a frame")
            return False
        return True

    def _cut(self) -> None:
        buf, limit = self.buf, self.sub.max_message_bytes
        while True:
            if self.skip:
                k = min(self.skip, self.end - self.start)
                self.start += k
                self.skip -= k
                if self.skip:
                    break
            if self.end - self.start < 4:
                break
            (size,) = _LEN.unpack_from(buf, self.start)
            body = self.start + 4
            if size > limit:
                self.sub.drop("oversized", f"{size} bytes > {limit}")
                self.start, self.skip = body, size
            elif self.end - body >= size:
                self.sub._ready.append((self, self.view[body : body + size].tobytes()))
                self.start = body + size
            elif size > len(buf) // 2:
                have = self.end - body
                self.big = np.empty(size, np.uint8)
                self.big[:have] = buf[body : self.end]
                self.big_got, self.start = have, self.end
                break
            else:
                break
        if self.start == self.end:
            self.start = self.end = 0
        elif self.start and (self.end == len(buf) or self.start > len(buf) // 2):  # room for the rest
            rest = self.end - self.start
            buf[:rest] = buf[self.start : self.end]
            self.start, self.end = 0, rest

    def credit(self, n: int) -> None:
        """Unread credits never exceed the actor's window x 4 bytes, so they fit the socket buffer; `owed` only
        covers a send the kernel cut short."""
        if self.sock.fileno() < 0:
            return  # the actor is gone; its frames taken after that need no credit
        self.owed += _LEN.pack(n)
        try:
            self.owed = self.owed[self.sock.send(self.owed) :]
        except BlockingIOError:
            pass
        except OSError as e:  # the actor just went; its stream is closed on the next read
            log.warning("bulk %s: could not return credits: %s", self.sub.topic, e)

    def close(self) -> None:
        self.sock.close()


class BulkPublisher(Publisher):
    """Actor side. `publish` queues a frame and sends what the socket takes without blocking; it blocks only
    while `window` frames are unanswered, raising `BackpressureTimeout` after `max_blocking_s`, or at once
    when no learner is connected (the caller decides what to drop)."""

    def __init__(
        self, transport: Transport, topic: str, ros_type: str, window: int, max_blocking_s: float = 10.0
    ) -> None:
        super().__init__(topic, ros_type, transport.cfg.distro)
        self.task, self.window, self.max_blocking_s = transport.cfg.task, window, max_blocking_s
        self._endpoints = transport.subscription(_endpoint_topic(topic), ENDPOINT_T, LATCHED_QOS)
        self._uri = ""
        self.learner_finished = False  # the learner announced the end of the run
        self._sock: socket.socket | None = None
        self._next_try = 0.0
        self._acks = b""
        self._out: deque[memoryview] = deque()  # frame bytes the socket has not taken yet
        self.in_flight = 0  # frames sent or queued that the learner has not taken yet

    def matched(self) -> int:
        return int(self._sock is not None or self._connect() is not None)

    def publish(self, msg: Any) -> None:
        if self._out:
            self._scratch = None  # the unsent tail of the last frame still lives in the old buffer
        self._enqueue(self._serialize_scratch(msg), stable=True)

    def publish_raw(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        self._enqueue(view if view.format == "B" else view.cast("B"), stable=isinstance(data, bytes))

    def _enqueue(self, frame: memoryview, stable: bool) -> None:
        if self._sock is not None:
            # A learner that died since the last frame: the first write into its closed stream would still be taken
            # locally and lost, so look first (its credits too), and send to a successor that announced meanwhile.
            # Credits are read here, before every frame, so they never back up.
            try:
                self._read_credits()
            except BackpressureTimeout:
                if self._connect() is None:
                    raise
        elif self._connect() is None:
            raise BackpressureTimeout(f"{self.topic}: no learner connected")
        if self.in_flight >= self.window:
            deadline = time.monotonic() + self.max_blocking_s
            while self.in_flight >= self.window:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BackpressureTimeout(f"{self.topic}: learner took no data for {self.max_blocking_s:.1f} s")
                self._wait(left)
        self.in_flight += 1
        header = _LEN.pack(len(frame))
        if not self._out:  # the common case, one send without the queue (measured 0.45 -> 0.6x of TCP, 2 KB)
            sent = self._sendmsg((header, frame))
            if sent == len(frame) + 4:
                return
            self._out += (memoryview(header)[sent:], frame) if sent < 4 else (frame[sent - 4 :],)
        else:
            self._out += (memoryview(header), frame)
            self._send()
        if self._out and not stable and self._out[-1].obj is frame.obj:
            self._out[-1] = memoryview(bytes(self._out[-1]))  # the caller may reuse its buffer

    def full(self) -> bool:
        """Whether `publish` would wait now: `window` frames the learner has not taken (credits read, never waited
        for). False without a connection: `publish` then raises at once."""
        if self.in_flight >= self.window and self._sock is not None:
            with contextlib.suppress(BackpressureTimeout):  # the connection just went: `publish` says so
                self._read_credits()
        return self._sock is not None and self.in_flight >= self.window

    def wait_drained(self, timeout_s: float) -> bool:
        """Until the learner has taken every frame (benchmarks, tests, a clean shutdown)."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight and (left := deadline - time.monotonic()) > 0:
            self._wait(left)
        return self.in_flight == 0

    def _wait(self, timeout_s: float) -> None:
        """Up to `timeout_s` for the socket to take more bytes or return credits, then both."""
        if self._sock is None:
            raise BackpressureTimeout(f"{self.topic}: learner connection lost")
        select.select([self._sock], [self._sock] if self._out else [], [], timeout_s)
        self._send()
        self._read_credits()

    def _send(self) -> None:
        """What the socket takes now; a frame it cannot take whole stays in `_out` for the next call."""
        out = self._out
        while out and (n := self._sendmsg(out)):
            while out and n >= len(out[0]):
                n -= len(out.popleft())
            if n:
                out[0] = out[0][n:]

    def _sendmsg(self, parts: Any) -> int:
        """Bytes the socket took of `parts`, 0 when it is full; a broken stream raises `BackpressureTimeout`."""
        try:
            return self._sock.sendmsg(parts)  # type: ignore[union-attr]
        except BlockingIOError:
            return 0
        except OSError as e:
            raise self._lost(f"send failed: {e}") from e

    def _read_credits(self) -> None:
        """Every credit the socket holds; a closed stream raises, also when credits came before its end."""
        while True:
            try:
                data = self._sock.recv(4096)  # type: ignore[union-attr]
            except BlockingIOError:
                break
            except OSError as e:
                data, why = b"", str(e)
            else:
                why = "closed by the learner"
            if not data:
                raise self._lost(why)
            self._acks += data
        whole = len(self._acks) // 4 * 4
        self.in_flight -= sum(v for (v,) in _LEN.iter_unpack(self._acks[:whole]))
        self._acks = self._acks[whole:]

    def _read_endpoints(self) -> None:
        for e in self._endpoints.take():
            if e.task != self.task or e.schema_version != typesys.SCHEMA_VERSION:
                self._endpoints.drop("refused", f"endpoint of task {e.task!r}, schema {e.schema_version}")
            elif not e.uri:
                self.learner_finished, self._uri = True, ""
            elif e.uri != self._uri:
                self.learner_finished = False
                self._disconnect("the learner moved")
                self._uri, self._next_try = e.uri, 0.0

    def _connect(self) -> socket.socket | None:
        """Joins the newest announced learner of this task (only while disconnected: a learner that died breaks
        the stream, and its restart announces anew)."""
        self._read_endpoints()
        if self._sock is None and self._uri and time.monotonic() >= self._next_try:
            self._next_try = time.monotonic() + _RECONNECT_S
            host, _, port = self._uri.removeprefix("tcp://").rpartition(":")
            try:
                sock = socket.create_connection((host, int(port)), timeout=_RECONNECT_S)
            except OSError as e:
                log.info("bulk %s: learner at %s not reachable (%s)", self.topic, self._uri, e)
                return None
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_BUF)
            sock.setblocking(False)
            self._sock, self.in_flight, self._acks = sock, 0, b""
            self._out.clear()
        return self._sock

    def _lost(self, why: str) -> BackpressureTimeout:
        """Drops the broken stream (the next publish reconnects); the caller raises what this returns. A learner
        that finished the run announces it before it closes: wait a moment for that, so a normal end is not
        reported as a lost connection."""
        deadline = time.monotonic() + _FINISH_GRACE_S
        while not self.learner_finished and (left := deadline - time.monotonic()) > 0:
            self._endpoints.wait(left)
            self._read_endpoints()
        if self.learner_finished:
            self.close()
            return BackpressureTimeout(f"{self.topic}: the learner finished the run")
        self._disconnect(why)
        return BackpressureTimeout(f"{self.topic}: learner connection lost ({why})")

    def _disconnect(self, why: str) -> None:
        if self._sock is not None:
            log.warning("bulk %s: disconnected from %s: %s", self.topic, self._uri, why)
            self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
