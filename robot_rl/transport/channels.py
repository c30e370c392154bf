"""The RL data plane on top of any Transport: transitions actor -> learner, weights learner -> actors.

Transitions: `TransitionBatch` CDR over the transport's bulk channel (a TCP stream per actor, found through a
latched ROS 2 announcement, credit flow control: see `bulk`). A learner that stops taking data makes actors
block instead of dropping, and the credit window bounds policy lag. Sequence numbers per actor let the
learner detect loss anyway.

Weights: a safetensors blob (no pickle) cut into `WeightsChunk`s on a reliable transient-local topic deep
enough to hold one whole version (late joiners get it), then a latched `WeightsAnnouncement`. Chunks
carry the version, count and blob sha256, so assembly doesn't depend on cross-topic ordering; a blob
whose sha256 differs is refused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from robot_rl.transport import bulk, typesys
from robot_rl.transport.base import LATCHED_QOS, TopicQos, Transport, log
from robot_rl.types import Transition

TRANSITIONS_TOPIC = "transitions"
WEIGHTS_TOPIC = "weights/chunks"
ANNOUNCE_TOPIC = "weights/announce"
EPISODES_TOPIC = "episodes"
BATCH_T = "robot_rl_msgs/msg/TransitionBatch"
CHUNK_T = "robot_rl_msgs/msg/WeightsChunk"
ANNOUNCE_T = "robot_rl_msgs/msg/WeightsAnnouncement"
EPISODE_T = "robot_rl_msgs/msg/EpisodeSummary"

TERMINATED, TRUNCATED, INTERVENED = 1, 2, 4


EPISODE_QOS = TopicQos(depth=100)


class Refused(ValueError):
    """A message that decoded but must not be used; the text is the logged reason."""


def _is_image(a: np.ndarray) -> bool:
    return a.dtype == np.uint8 and a.ndim == 3 and a.shape[2] == 3


def encode_batch(
    ts: Sequence[Transition], task: str, actor_id: str, first_seq: int, policy_version: int, distro: str = "jazzy"
) -> object:
    """Pack transitions; non-image arrays travel as float32, each distinct camera frame once as rgb8."""
    store = typesys.typestore(distro)
    array_t, cam_t = store.types["robot_rl_msgs/msg/ArrayField"], store.types["robot_rl_msgs/msg/CameraFrames"]
    image_t, header = store.types["sensor_msgs/msg/Image"], typesys.header_now(distro)
    first = ts[0]

    def array(name: str, rows: list[np.ndarray]) -> object:
        a = np.ascontiguousarray(np.stack(rows), dtype=np.float32)
        return array_t(name=name, shape=np.array(a.shape, dtype=np.uint32), data=a.reshape(-1))

    arrays = [array("action", [t.action for t in ts])]
    cameras = []
    for k, v in first.obs.items():
        if not _is_image(v):
            arrays += [array(f"obs/{k}", [t.obs[k] for t in ts]), array(f"next_obs/{k}", [t.next_obs[k] for t in ts])]
            continue
        frames: list[np.ndarray] = []
        obs_idx, next_idx = np.zeros(len(ts), np.uint32), np.zeros(len(ts), np.uint32)
        for i, t in enumerate(ts):
            prev = ts[i - 1].next_obs[k] if i else None
            if prev is None or not (prev is t.obs[k] or np.array_equal(prev, t.obs[k])):
                frames.append(t.obs[k])
            obs_idx[i] = len(frames) - 1
            frames.append(t.next_obs[k])
            next_idx[i] = len(frames) - 1
        images = [
            image_t(
                header=header,
                height=f.shape[0],
                width=f.shape[1],
                encoding="rgb8",
                is_bigendian=0,
                step=f.shape[1] * 3,
                data=np.ascontiguousarray(f).reshape(-1),
            )
            for f in frames
        ]
        cameras.append(cam_t(name=k, frames=images, obs_index=obs_idx, next_obs_index=next_idx))
    arrays += [array(f"extras/{k}", [t.extras[k] for t in ts]) for k in first.extras]
    flags = np.array(
        [TERMINATED * t.terminated | TRUNCATED * t.truncated | INTERVENED * t.intervened for t in ts], dtype=np.uint8
    )
    return store.types[BATCH_T](
        header=header, task=task, schema_version=typesys.SCHEMA_VERSION, actor_id=actor_id, first_seq=first_seq,
        policy_version=policy_version, size=len(ts), reward=np.array([t.reward for t in ts], dtype=np.float32),
        flags=flags, arrays=arrays, cameras=cameras,
    )  # fmt: skip


def check_schema(msg: object, task: str) -> None:
    if msg.schema_version != typesys.SCHEMA_VERSION:
        raise Refused(f"schema_version {msg.schema_version} != {typesys.SCHEMA_VERSION}")
    if msg.task != task:
        raise Refused(f"task {msg.task!r} != {task!r}")


def decode_batch(msg: object, task: str) -> list[Transition]:
    """Inverse of `encode_batch`; raises Refused on any inconsistency instead of guessing."""
    check_schema(msg, task)
    n = msg.size
    if len(msg.reward) != n or len(msg.flags) != n:
        raise Refused(f"size {n} but {len(msg.reward)} rewards, {len(msg.flags)} flags")
    cols: dict[str, np.ndarray] = {}
    for a in msg.arrays:
        shape = tuple(int(s) for s in a.shape)
        if not shape or shape[0] != n or int(np.prod(shape)) != len(a.data):
            raise Refused(f"array {a.name!r}: shape {shape} vs {len(a.data)} values, batch {n}")
        cols[a.name] = a.data.reshape(shape)
    if "action" not in cols:
        raise Refused("no action array")
    # Column -> per-transition rows once (views into the received buffer, no copies), then one pass that builds
    # the Transitions: ~2x cheaper per transition than indexing every column for every transition.
    obs_rows: dict[str, list[np.ndarray]] = {}
    next_rows: dict[str, list[np.ndarray]] = {}
    for cam in msg.cameras:
        frames = []
        for f in cam.frames:
            if f.encoding != "rgb8" or len(f.data) != f.height * f.width * 3 or f.step != f.width * 3:
                raise Refused(f"camera {cam.name!r}: bad frame {f.encoding} {f.height}x{f.width} ({len(f.data)} B)")
            frames.append(f.data.reshape(f.height, f.width, 3))
        for idx in (cam.obs_index, cam.next_obs_index):
            if len(idx) != n or (n and int(idx.max()) >= len(frames)):
                raise Refused(f"camera {cam.name!r}: frame index out of range")
        obs_rows[cam.name] = [frames[i] for i in cam.obs_index.tolist()]
        next_rows[cam.name] = [frames[i] for i in cam.next_obs_index.tolist()]
    extras: dict[str, list[np.ndarray]] = {}
    for name, col in cols.items():
        kind, _, key = name.partition("/")
        if kind == "obs":
            obs_rows[key] = list(col)
        elif kind == "next_obs":
            next_rows[key] = list(col)
        elif kind == "extras":
            extras[key] = list(col)
        elif name != "action":
            raise Refused(f"unknown array {name!r}")
    actions, rewards, flags = list(cols["action"]), msg.reward.tolist(), msg.flags.tolist()
    return [
        Transition(obs={k: v[i] for k, v in obs_rows.items()}, action=actions[i], reward=rewards[i],
                   next_obs={k: v[i] for k, v in next_rows.items()}, terminated=bool(flags[i] & TERMINATED),
                   truncated=bool(flags[i] & TRUNCATED), intervened=bool(flags[i] & INTERVENED),
                   extras={k: v[i] for k, v in extras.items()})
        for i in range(n)
    ]  # fmt: skip


class Batching:
    """An actor's pending batch, whichever plane sends it: `add` every `Actor.step()` result; `flush` (the plane's)
    sends when the batch is full or the episode ends."""

    batch_size: int
    _pending: list[Transition]

    def flush(self) -> None:
        raise NotImplementedError

    def add(self, t: Transition) -> None:
        self.add_nowait(t)
        if self.batch_full or t.done:
            self.flush()

    def add_nowait(self, t: Transition) -> None:
        """Queue without sending; the caller flushes (and handles BackpressureTimeout) when it chooses."""
        self._pending.append(t)

    @property
    def batch_full(self) -> bool:
        return len(self._pending) >= self.batch_size

    def discard_pending(self) -> int:
        """Drops the batch a BackpressureTimeout left behind (e.g. its learner died); returns how many."""
        n = len(self._pending)
        self._pending.clear()
        return n


class TransitionSender(Batching):
    """Actor side: `add` every `Actor.step()` result; a batch goes out when full or at episode end."""

    def __init__(self, transport: Transport, actor_id: str, batch_size: int = 16, queue_batches: int = 64) -> None:
        """queue_batches: batches the learner has not taken yet before `flush` blocks; also the most policy lag a
        fast actor can build up."""
        self.transport, self.actor_id, self.batch_size = transport, actor_id, batch_size
        self.pub = bulk.publisher(transport, TRANSITIONS_TOPIC, BATCH_T, queue_batches)
        self.policy_version = 0
        self._pending: list[Transition] = []
        self._seq = 0

    @property
    def learner_finished(self) -> bool:
        """The learner announced the end of the run."""
        return self.pub.learner_finished

    def connected(self) -> bool:
        """Whether a learner's bulk endpoint took our connection."""
        return self.pub.matched() > 0

    def full(self) -> bool:
        """Whether `flush` would wait now (the learner's window is full)."""
        return self.pub.full()

    def flush(self) -> None:
        """May raise BackpressureTimeout when the learner stops draining; the batch is then kept for a retry."""
        if not self._pending:
            return
        cfg = self.transport.cfg
        msg = encode_batch(self._pending, cfg.task, self.actor_id, self._seq, self.policy_version, cfg.distro)
        self.pub.publish(msg)
        self._seq += len(self._pending)
        self._pending.clear()


@dataclass
class ActorState:
    next_seq: int = 0
    received: int = 0
    lost: int = 0
    policy_version: int = 0


class TransitionReceiver:
    """Learner side: `poll()` and feed each transition to `Learner.add`. Not polling = backpressure."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.sub = bulk.subscription(transport, TRANSITIONS_TOPIC, BATCH_T)
        self.actors: dict[str, ActorState] = {}

    def poll(self, timeout_s: float = 0.0, max_batches: int = 64) -> list[Transition]:
        return [t for _, ts in self.poll_batches(timeout_s, max_batches) for t in ts]

    def finish(self) -> None:
        """Tell actors the run is over (they stop); a learner that dies instead says nothing and is waited for."""
        self.sub.finish()

    def poll_batches(self, timeout_s: float = 0.0, max_batches: int = 64) -> list[tuple[str, list[Transition]]]:
        """(actor id, transitions in order) per received batch: what `Learner.add(t, stream=actor_id)` needs."""
        if timeout_s > 0 and not self.sub.wait(timeout_s):
            return []
        out: list[tuple[str, list[Transition]]] = []
        for msg in self.sub.take(max_batches):
            try:
                ts = decode_batch(msg, self.transport.cfg.task)
            except Refused as e:
                self.sub.drop("refused", str(e))
                continue
            # A stream is counted from the first batch this learner gets: a resumed learner joins actors mid-stream.
            st = self.actors.setdefault(msg.actor_id, ActorState(next_seq=msg.first_seq))
            if msg.first_seq != st.next_seq:
                st.lost += max(0, msg.first_seq - st.next_seq)
                log.warning("actor %s: expected seq %d, got %d", msg.actor_id, st.next_seq, msg.first_seq)
            st.next_seq = msg.first_seq + msg.size
            st.received += msg.size
            st.policy_version = msg.policy_version
            out.append((msg.actor_id, ts))
        return out


class WeightsPublisher:
    """Learner side: `publish(learner.policy_weights(), version)`."""

    def __init__(self, transport: Transport, chunk_bytes: int = 2**20, max_chunks: int = 128) -> None:
        self.transport, self.chunk_bytes, self.max_chunks = transport, chunk_bytes, max_chunks
        self.chunks = transport.publisher(WEIGHTS_TOPIC, CHUNK_T, TopicQos(transient_local=True, depth=max_chunks))
        self.announce = transport.publisher(ANNOUNCE_TOPIC, ANNOUNCE_T, LATCHED_QOS)

    def publish(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        blob = st_save({k: v.detach().cpu().contiguous() for k, v in state_dict.items()})
        digest = hashlib.sha256(blob).hexdigest()
        n = max(1, -(-len(blob) // self.chunk_bytes))
        if n > self.max_chunks:
            raise ValueError(f"{len(blob)} B needs {n} chunks > max_chunks={self.max_chunks}; raise chunk_bytes")
        cfg, store = self.transport.cfg, typesys.typestore(self.transport.cfg.distro)
        view = np.frombuffer(blob, dtype=np.uint8)
        for i in range(n):
            self.chunks.publish(store.types[CHUNK_T](
                task=cfg.task, schema_version=typesys.SCHEMA_VERSION, version=version, index=i, num_chunks=n,
                total_bytes=len(blob), sha256=digest, data=view[i * self.chunk_bytes : (i + 1) * self.chunk_bytes],
            ))  # fmt: skip
        self.announce.publish(store.types[ANNOUNCE_T](
            header=typesys.header_now(cfg.distro), task=cfg.task, schema_version=typesys.SCHEMA_VERSION,
            version=version, sha256=digest, total_bytes=len(blob), num_chunks=n,
        ))  # fmt: skip


@dataclass
class _Assembly:
    num_chunks: int
    total_bytes: int
    sha256: str
    parts: dict[int, np.ndarray] = field(default_factory=dict)


class WeightsReceiver:
    """Actor side: `poll()` returns (state_dict, version) for `Actor.load_weights` when a newer verified
    version is complete; `lag(actor.policy_version)` is how many versions the actor is behind."""

    def __init__(self, transport: Transport, max_chunks: int = 128) -> None:
        self.transport = transport
        self.chunks = transport.subscription(WEIGHTS_TOPIC, CHUNK_T, TopicQos(transient_local=True, depth=max_chunks))
        self.announce = transport.subscription(ANNOUNCE_TOPIC, ANNOUNCE_T, LATCHED_QOS)
        self.announced_version = -1
        self.loaded_version = -1
        self.reannounced = False  # the last poll heard a learner announce `loaded_version` (nothing new to load)
        self._pending: dict[int, _Assembly] = {}

    def lag(self, current_version: int) -> int:
        return max(0, self.announced_version - current_version)

    def poll(self, timeout_s: float = 0.0) -> tuple[dict[str, torch.Tensor], int] | None:
        if timeout_s > 0:
            self.chunks.wait(timeout_s)
        task = self.transport.cfg.task
        self.reannounced = False
        for a in self.announce.take():
            try:
                check_schema(a, task)
            except Refused as e:
                self.announce.drop("refused", str(e))
                continue
            self.announced_version = max(self.announced_version, a.version)
            # A learner announcing the very version we run: one resumed from the checkpoint of the weights we hold.
            self.reannounced |= a.version == self.loaded_version
        newest: tuple[dict[str, torch.Tensor], int] | None = None
        for c in self.chunks.take(1024):
            if (done := self._add_chunk(c, task)) is not None:
                newest = done
        return newest

    def _add_chunk(self, c: object, task: str) -> tuple[dict[str, torch.Tensor], int] | None:
        try:
            check_schema(c, task)
            # Versions only grow within one learner's life; a lower one is a learner resumed from an earlier
            # checkpoint (its predecessor's newer weights died with it), and it is what actors must act on now.
            if c.version == self.loaded_version:
                return None
            asm = self._pending.setdefault(c.version, _Assembly(c.num_chunks, c.total_bytes, c.sha256))
            if (c.num_chunks, c.total_bytes, c.sha256) != (asm.num_chunks, asm.total_bytes, asm.sha256):
                raise Refused(f"version {c.version}: chunk {c.index} disagrees on blob size/hash")
            if c.index >= asm.num_chunks:
                raise Refused(f"version {c.version}: chunk index {c.index} >= {asm.num_chunks}")
        except Refused as e:
            self.chunks.drop("refused", str(e))
            return None
        asm.parts[c.index] = c.data
        if len(asm.parts) < asm.num_chunks:
            return None
        del self._pending[c.version]
        blob = b"".join(asm.parts[i].tobytes() for i in range(asm.num_chunks))
        if len(blob) != asm.total_bytes or hashlib.sha256(blob).hexdigest() != asm.sha256:
            self.chunks.drop("integrity", f"version {c.version}: sha256/size mismatch, weights rejected")
            return None
        try:
            weights = st_load(blob)
        except Exception as e:  # safetensors raises its own SafetensorError on a bad header
            self.chunks.drop("malformed", f"version {c.version}: {e}")
            return None
        restarted = c.version < self.loaded_version
        self.loaded_version = c.version
        self._pending = {} if restarted else {v: p for v, p in self._pending.items() if v > c.version}
        self.announced_version = c.version if restarted else max(self.announced_version, c.version)
        return weights, c.version
