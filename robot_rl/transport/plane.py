"""The actor-learner data plane on Zenoh: transitions acknowledged once taken, weights pulled by version, one run id.

Why Zenoh (eclipse-zenoh, issue #56): reliable blocking puts plus the learner's cumulative answers give every
transition batch an end-to-end acknowledgement, actors dial out to the learner (client mode: a robot PC needs no
open port), TLS with a shared CA authenticates both ends, and liveliness tokens say who is there. ROS 2 / DDS stays
inside each robot cell.

Keys, all under `robot_rl/<run id>/` so two runs on one network never cross-feed:
- `transitions/<shard>/<actor id>`: an actor's reliable, blocking put of one `TransitionBatch` (the ROS CDR the
  bulk channel sends) to the learner rank that holds its shard (0 for a lone learner; loop/ranks.py).
  `acks/<actor id>`: the learner's cumulative answer, "every transition before seq N is in", once per poll for the
  batches the caller of `Receiver.poll_batches` took at the previous poll (they went into replay in between), or one
  batch refused and why. An actor keeps at most `credits` batches unanswered, sends them again when the oldest
  waited `ack_timeout_s` (the learner counts a repeat by its sequence number, once), and blocks when the learner
  stops taking data: nothing is dropped silently.
- `weights`: the learner's queryable answers with its newest blob (safetensors, sha256 and version attached);
  `weights/version` is a small put of each new version, so actors know their lag and fetch only when they act on it.
- `alive/<role>/<id>`: liveliness tokens (presence instead of latched endpoints).
- `finished`: the learner's put when the run is over (its actors stop instead of waiting for a restart);
  `episodes/<actor id>`: an actor's episode summary (JSON), what the learner's training success rate counts, with
  the person's verdicts on its frames attached (the learner's classifier refits).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch
import zenoh
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from robot_rl.transport import typesys
from robot_rl.transport.base import BackpressureTimeout, PlaneConfig, log
from robot_rl.transport.channels import BATCH_T, ActorState, Batching, decode_batch, encode_batch
from robot_rl.types import Transition


def session_config(cfg: PlaneConfig, role: str) -> zenoh.Config:
    """The learner listens on `endpoint` as a peer; an actor connects to it as a client. No multicast scouting:
    peers meet only where the config says. A non-loopback endpoint without TLS is refused."""
    host = cfg.endpoint.split("/", 1)[-1].rsplit(":", 1)[0]
    secure = cfg.endpoint.startswith("tls/")
    if not secure and host not in ("127.0.0.1", "localhost", "[::1]"):
        raise ValueError(f"endpoint {cfg.endpoint}: off loopback the plane needs tls/HOST:PORT and tls.ca/cert/key")
    conf: dict[str, Any] = {"scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}}}
    if role == "learner":
        conf |= {"mode": "peer", "listen": {"endpoints": [cfg.endpoint]}}
    else:
        conf |= {"mode": "client", "connect": {"endpoints": [cfg.endpoint]}}
    if secure:
        t = cfg.tls
        if not (t.ca and t.cert and t.key):
            raise ValueError(f"endpoint {cfg.endpoint}: tls needs tls.ca, tls.cert and tls.key")
        conf["transport"] = {"link": {"tls": {
            "root_ca_certificate": t.ca, "enable_mtls": True, "listen_private_key": t.key,
            "listen_certificate": t.cert, "connect_private_key": t.key, "connect_certificate": t.cert,
        }}}  # fmt: skip
    return zenoh.Config.from_json5(json.dumps(conf))


@dataclass
class Peer:
    """A session and its presence token `alive/<role>/<name>`: the token lives as long as the peer."""

    session: zenoh.Session
    token: Any

    def close(self) -> None:
        self.token.undeclare()
        self.session.close()


def open_session(cfg: PlaneConfig, role: str, name: str) -> Peer:
    """ConnectionError, one line, when an actor cannot reach its learner (not listening, or TLS refused a peer whose
    certificate the run's CA did not sign) or a learner cannot listen (another one holds the endpoint)."""
    try:
        session = zenoh.open(session_config(cfg, role))
    except zenoh.ZError as e:
        why = ("cannot listen (another learner there? give distributed.zenoh.endpoint another port)" if role ==
               "learner" else "no link (learner down, or TLS refused)")  # fmt: skip
        raise ConnectionError(f"{role} {name}: {cfg.endpoint}: {why}: {e}") from None
    return Peer(session, session.liveliness().declare_token(f"{cfg.prefix}/alive/{role}/{name}"))


def present(session: zenoh.Session, cfg: PlaneConfig, role: str = "*", timeout_s: float = 1.0) -> list[str]:
    """The names of the run's peers with `role` that are there now."""
    replies = session.liveliness().get(f"{cfg.prefix}/alive/{role}/*", timeout=timeout_s)
    return sorted(str(r.ok.key_expr).rsplit("/", 1)[-1] for r in replies if r.ok)


class Sender(Batching):
    """Actor side, `TransitionSender`'s interface: `add` every step; a batch goes out when full or at episode end."""

    def __init__(self, session: zenoh.Session, cfg: PlaneConfig, task: str, actor_id: str, batch_size: int = 16,
                 distro: str = "jazzy", shard: int = 0) -> None:  # fmt: skip
        self.cfg, self.task, self.actor_id = cfg, task, actor_id
        self.batch_size, self.distro = batch_size, distro
        self.key = f"{cfg.prefix}/transitions/{shard}/{actor_id}"
        # Reliable and blocking: a full learner queue holds the publisher back instead of dropping the sample.
        self.pub = session.declare_publisher(self.key, congestion_control=zenoh.CongestionControl.BLOCK,
                                             reliability=zenoh.Reliability.RELIABLE)  # fmt: skip
        self.acks = session.declare_subscriber(f"{cfg.prefix}/acks/{actor_id}", self._acked)
        self.learner_finished = False  # the learner said the run is over
        self.finished = session.declare_subscriber(f"{cfg.prefix}/finished", self._on_finished)
        self.session = session
        self.policy_version = 0
        self._pending: list[Transition] = []
        self._seq = 0
        self._lock = threading.Condition()
        self._inflight: dict[int, tuple[bytes, int, float]] = {}  # first seq -> (payload, size, sent at), in order
        self.acked = self.resent = 0
        self.refused: list[str] = []
        self.ack_latencies: deque[float] = deque(maxlen=10_000)

    def flush(self, timeout_s: float | None = None) -> None:
        """Sends the pending batch once a credit is free; `BackpressureTimeout` (batch kept) when none frees up
        within `timeout_s` (default: the ack timeout)."""
        if not self._pending:
            return
        free = self._wait(lambda: len(self._inflight) < self.cfg.credits or self.learner_finished,
                          self.cfg.ack_timeout_s if timeout_s is None else timeout_s)  # fmt: skip
        if self.learner_finished:
            raise BackpressureTimeout(f"{self.key}: the learner finished the run")
        if not free:
            raise BackpressureTimeout(f"{self.key}: {len(self._inflight)} batches unanswered")
        msg = encode_batch(self._pending, self.task, self.actor_id, self._seq, self.policy_version, self.distro)
        payload = bytes(typesys.serialize_into(msg, BATCH_T, None, self.distro))
        with self._lock:
            self._inflight[self._seq] = (payload, len(self._pending), time.monotonic())
        self.pub.put(payload)
        self._seq += len(self._pending)
        self._pending.clear()

    def _wait(self, pred: Any, timeout_s: float) -> bool:
        """Waits for `pred` (under the lock), sending every unanswered batch again whenever the oldest has waited
        `ack_timeout_s` (the learner counts a repeat once)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.1))
                oldest = next(iter(self._inflight.values()), None)
                if oldest is not None and time.monotonic() - oldest[2] > self.cfg.ack_timeout_s:
                    self._resend()
            return True

    def _resend(self) -> None:
        log.warning("%s: %d batches unanswered for %.1f s: sending them again", self.key, len(self._inflight),
                    self.cfg.ack_timeout_s)  # fmt: skip
        for seq, (payload, size, _) in list(self._inflight.items()):
            self._inflight[seq] = (payload, size, time.monotonic())
            self.pub.put(payload)
            self.resent += 1

    def _acked(self, sample: Any) -> None:
        """The learner's cumulative answer: every transition before `upto` is in, or one batch was refused."""
        ack = json.loads(sample.payload.to_bytes())
        now = time.monotonic()
        with self._lock:
            if "refused" in ack:  # the learner will never take it: counted, reported, not resent
                if self._inflight.pop(ack["refused"], None) is not None:
                    self.refused.append(ack["why"])
            for seq, (_, size, sent) in list(self._inflight.items()):
                if seq + size > ack.get("upto", -1):
                    break
                del self._inflight[seq]
                self.acked += 1
                self.ack_latencies.append(now - sent)
            self._lock.notify_all()

    def _on_finished(self, _sample: Any) -> None:
        self.learner_finished = True
        with self._lock:
            self._lock.notify_all()

    def connected(self) -> bool:
        """Whether the run's learner is there (its presence token)."""
        return bool(present(self.session, self.cfg, "learner", timeout_s=1.0))

    def full(self) -> bool:
        """Whether `flush` would wait now: every credit is out."""
        with self._lock:
            return len(self._inflight) >= self.cfg.credits

    def wait_acked(self, timeout_s: float) -> bool:
        """Whether every batch sent so far was answered within `timeout_s` (an actor's last words)."""
        return self._wait(lambda: not self._inflight, timeout_s)


class Receiver:
    """Learner side, `TransitionReceiver`'s interface. Batches wait in a bounded queue (`capacity`; a full one holds
    Zenoh's delivery, and so the actors' publishers, back); each poll first tells every actor, in one message, how
    far the batches it took at the previous poll (which the caller has put into replay since) go."""

    def __init__(self, session: zenoh.Session, cfg: PlaneConfig, task: str, capacity: int = 256,
                 distro: str = "jazzy", shard: int = 0) -> None:  # fmt: skip
        self.session, self.cfg, self.task, self.distro = session, cfg, task, distro
        self.sub = session.declare_subscriber(f"{cfg.prefix}/transitions/{shard}/*",
                                              zenoh.handlers.FifoChannel(capacity))  # fmt: skip
        self.actors: dict[str, ActorState] = {}
        self.repeats = 0  # batches an actor sent again that were already taken (acknowledged, not added twice)
        self.refused = 0
        self._unacked: set[str] = set()  # actors with batches taken since their last answer

    def poll(self, timeout_s: float = 0.0, max_batches: int = 64) -> list[Transition]:
        return [t for _, ts in self.poll_batches(timeout_s, max_batches) for t in ts]

    def poll_batches(self, timeout_s: float = 0.0, max_batches: int = 64) -> list[tuple[str, list[Transition]]]:
        """(actor id, transitions) per new batch; answers the previous poll's batches first."""
        self.ack()
        out: list[tuple[str, list[Transition]]] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < max_batches:
            sample = self.sub.try_recv()  # Zenoh's own channel: no Python callback on its threads (2x the rate)
            if sample is None:
                if out or time.monotonic() >= deadline:
                    break
                time.sleep(0.0002)
                continue
            if (batch := self._take(sample)) is not None:
                out.append(batch)
        return out

    def _take(self, sample: Any) -> tuple[str, list[Transition]] | None:
        actor = str(sample.key_expr).rsplit("/", 1)[-1]
        try:
            msg = typesys.deserialize(sample.payload.to_bytes(), BATCH_T, self.distro)
            ts = decode_batch(msg, self.task)
        except Exception as e:  # a malformed or foreign batch: refused with the reason, never half-used
            self.refused += 1
            first = getattr(locals().get("msg"), "first_seq", -1)
            self._answer(actor, {"refused": first, "why": f"refused: {e}"})
            return None
        st = self.actors.setdefault(msg.actor_id, ActorState(next_seq=msg.first_seq))
        self._unacked.add(msg.actor_id)
        if msg.first_seq < st.next_seq:  # a resend of a batch already taken: its answer was lost or late
            self.repeats += 1
            return None
        st.lost += msg.first_seq - st.next_seq  # an actor restarted past what reached us (its own count says why)
        st.next_seq, st.policy_version = msg.first_seq + msg.size, msg.policy_version
        st.received += msg.size
        return msg.actor_id, ts

    def _answer(self, actor: str, ack: dict) -> None:
        self.session.put(f"{self.cfg.prefix}/acks/{actor}", json.dumps(ack).encode())

    def ack(self) -> None:
        for actor in self._unacked:
            self._answer(actor, {"upto": self.actors[actor].next_seq})
        self._unacked.clear()

    def finish(self) -> None:
        """Tells the run's actors it is over (they stop); a learner that dies instead says nothing and is waited for."""
        self.ack()
        self.session.put(f"{self.cfg.prefix}/finished", b"")

    def close(self) -> None:
        self.ack()
        self.sub.undeclare()


class WeightsServer:
    """Learner side, `WeightsPublisher`'s interface: the newest weights answer every fetch; each version is announced
    by a small put, so N actors cost N fetches of the versions they act on, not N copies of every version."""

    def __init__(self, session: zenoh.Session, cfg: PlaneConfig) -> None:
        self.cfg = cfg
        self._newest: tuple[bytes, dict[str, Any]] | None = None
        self._lock = threading.Lock()
        self.fetches = 0
        self.queryable = session.declare_queryable(f"{cfg.prefix}/weights", self._serve)
        self.announce = session.declare_publisher(f"{cfg.prefix}/weights/version")

    def publish(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        blob = st_save({k: v.detach().cpu().contiguous() for k, v in state_dict.items()})
        meta = {"version": version, "sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)}
        with self._lock:
            self._newest = (blob, meta)
        self.announce.put(json.dumps(meta).encode())

    def _serve(self, query: Any) -> None:
        with self._lock:
            newest = self._newest
        if newest is not None:
            self.fetches += 1
            query.reply(query.key_expr, newest[0], attachment=json.dumps(newest[1]).encode())
        query.drop()


class WeightsClient:
    """Actor side, `WeightsReceiver`'s interface: `poll()` fetches the newest weights when a newer version was
    announced (or, first, whatever the learner holds) and returns (state_dict, version) once verified."""

    def __init__(self, session: zenoh.Session, cfg: PlaneConfig) -> None:
        self.session, self.cfg = session, cfg
        self.announced_version = -1
        self.loaded_version = -1
        self.reannounced = False
        self._heard: deque[int] = deque()
        self._news = threading.Event()  # a version heard or a learner joined: what `poll(timeout_s)` waits for
        self.sub = session.declare_subscriber(f"{cfg.prefix}/weights/version", self._on_version)
        # A learner (re)joining: its first announcement may have gone out before our session reconnected to it, so
        # its arrival alone makes the next poll fetch, until a fetch answers.
        self._joined = False
        self.alive = session.liveliness().declare_subscriber(f"{cfg.prefix}/alive/learner/*", self._on_learner)

    def _on_version(self, sample: Any) -> None:
        self._heard.append(int(json.loads(sample.payload.to_bytes())["version"]))
        self._news.set()

    def _on_learner(self, sample: Any) -> None:
        self._joined |= sample.kind == zenoh.SampleKind.PUT
        self._news.set()

    def lag(self, current_version: int) -> int:
        return max(0, self.announced_version - current_version)

    def poll(self, timeout_s: float = 0.0) -> tuple[dict[str, torch.Tensor], int] | None:
        """Fetches when a version other than the loaded one was announced (a newer one, or an older one from a
        learner resumed from its checkpoint: its predecessor's newer weights died with it, and it waits for our
        steps) or a learner joined; a learner that joined holding our version sets `reannounced`. With nothing new
        it waits up to `timeout_s` for news (an actor waiting for its learner must not spin)."""
        if timeout_s > 0 and self.loaded_version >= 0 and not self._heard and not self._joined:
            self._news.wait(timeout_s)
        self._news.clear()
        self.reannounced, other = False, False
        while self._heard:
            v = self._heard.popleft()
            self.reannounced |= v == self.loaded_version
            other |= v != self.loaded_version
            self.announced_version = v  # one learner announces in order
        if self.loaded_version >= 0 and not other and not self._joined:
            return None
        before = self.loaded_version
        got = self.fetch(max(timeout_s, 1.0))
        if got is None:
            return None
        self._joined = False
        if got[1] == before:  # a learner (re)joined holding the weights we act on
            self.reannounced = True
            return None
        return got

    def fetch(self, timeout_s: float = 5.0) -> tuple[dict[str, torch.Tensor], int] | None:
        """The learner's newest weights, verified (None when it has none yet or nothing answered)."""
        for reply in self.session.get(f"{self.cfg.prefix}/weights", timeout=timeout_s):
            if not reply.ok:
                continue
            meta = json.loads(reply.ok.attachment.to_bytes())
            blob = reply.ok.payload.to_bytes()
            if len(blob) != meta["bytes"] or hashlib.sha256(blob).hexdigest() != meta["sha256"]:
                log.warning("weights version %d: sha256/size mismatch, rejected", meta["version"])
                continue
            self.loaded_version = meta["version"]
            self.announced_version = self.loaded_version
            return st_load(blob), self.loaded_version
        return None


def report_episode(session: zenoh.Session, cfg: PlaneConfig, actor_id: str, summary: dict) -> None:
    """An actor's episode summary (JSON) for the learner's training statistics; its `verdicts` (a person's verdicts
    on the episode's frames for the learner's classifier refits, packed: `loop.classifier.pack_verdicts`) ride along
    as the attachment. Blocking, as transitions are: a verdict is a person's work."""
    body = json.dumps({k: v for k, v in summary.items() if k != "verdicts"}).encode()
    session.put(f"{cfg.prefix}/episodes/{actor_id}", body, attachment=summary.get("verdicts"),
                congestion_control=zenoh.CongestionControl.BLOCK)  # fmt: skip


class Episodes:
    """Learner side: the actors' episode summaries, oldest first (`take` each loop), with their packed `verdicts`."""

    def __init__(self, session: zenoh.Session, cfg: PlaneConfig, capacity: int = 1024) -> None:
        self.sub = session.declare_subscriber(f"{cfg.prefix}/episodes/*", zenoh.handlers.FifoChannel(capacity))

    def take(self) -> list[dict]:
        out = []
        while (sample := self.sub.try_recv()) is not None:
            e = json.loads(sample.payload.to_bytes())
            if sample.attachment is not None:
                e["verdicts"] = sample.attachment.to_bytes()
            out.append(e)
        return out


def run_id_of(run_dir: str) -> str:
    """A run's id: its directory's name, which a resumed learner keeps (the checkpoint lives under it)."""
    return run_dir.rstrip("/").rsplit("/", 1)[-1].replace(".", "_") or "run"
