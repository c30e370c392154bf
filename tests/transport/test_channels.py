"""Transitions and weights end to end over real ROS 2 (and inproc for raw-byte abuse)."""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save as st_save
from transport_util import wait_until

from robot_rl.transport import (
    TransitionReceiver,
    TransitionSender,
    WeightsPublisher,
    WeightsReceiver,
    bulk,
    make_transport,
    typesys,
)
from robot_rl.transport.channels import (
    BATCH_T,
    CHUNK_T,
    TRANSITIONS_TOPIC,
    decode_batch,
    encode_batch,
)


def recv_all(rx: TransitionReceiver, n: int, timeout_s: float = 30.0) -> list:
    got: list = []
    wait_until(lambda: got.extend(rx.poll(timeout_s=0.05)) or len(got) >= n, timeout_s)
    return got


def test_transition_batch_images_bit_exact(cfg, episode) -> None:
    ts = episode(5, cams=("wrist", "front"))
    with make_transport(cfg(node_name="actor")) as a, make_transport(cfg(node_name="learner")) as b:
        rx = TransitionReceiver(b)
        tx = TransitionSender(a, "actor0", batch_size=8)
        wait_until(lambda: tx.pub.matched() == 1)
        for t in ts:
            tx.add(t)  # the last one is terminal and flushes
        got = recv_all(rx, len(ts))
    assert len(got) == 5
    for src, dst in zip(ts, got, strict=True):
        for key in ("state", "wrist", "front"):
            for a_, b_ in ((src.obs[key], dst.obs[key]), (src.next_obs[key], dst.next_obs[key])):
                assert a_.dtype == b_.dtype and a_.shape == b_.shape and a_.tobytes() == b_.tobytes()
        assert np.array_equal(src.action, dst.action) and src.reward == dst.reward
        assert (src.terminated, src.truncated, src.intervened) == (dst.terminated, dst.truncated, dst.intervened)


def test_frames_sent_once(episode) -> None:
    msg = encode_batch(episode(8, cams=("wrist",)), "reach", "a", 0, 0)
    assert len(msg.cameras[0].frames) == 9  # 8 obs + 1 final next_obs, not 16
    raw = typesys.serialize(msg, BATCH_T)
    assert len(raw) < 9 * 64 * 64 * 3 + 2048


@pytest.mark.slow
def test_burst_from_other_process_is_lossless_and_ordered(cfg) -> None:
    n = 2000
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from transport_util import make_episode, wait_until
        from robot_rl.transport import TransitionSender, TransportConfig, make_transport
        tr = make_transport(TransportConfig(backend="rclpy", domain_id={cfg().domain_id}, task="reach"))
        tx = TransitionSender(tr, "burst", batch_size=1)
        wait_until(lambda: tx.pub.matched() == 1)
        for t in make_episode({n}):
            tx.add(t)
        assert tx.pub.wait_drained(60)
        tr.close()
    """)
    with make_transport(cfg(node_name="learner")) as b:
        rx = TransitionReceiver(b)
        proc = subprocess.Popen([sys.executable, "-c", script])
        try:
            got = recv_all(rx, n, timeout_s=60)
        finally:
            assert proc.wait(30) == 0
        assert rx.poll(timeout_s=0.2) == []
    assert [t.reward for t in got] == [float(i) for i in range(n)]
    assert rx.actors["burst"].lost == 0 and rx.actors["burst"].next_seq == n


def test_weights_chunked_transfer_and_integrity(cfg, caplog) -> None:
    sd = {"w": torch.randn(300, 200), "b": torch.arange(7, dtype=torch.float32)}
    with make_transport(cfg(node_name="learner")) as a, make_transport(cfg(node_name="actor")) as b:
        pub = WeightsPublisher(a, chunk_bytes=64 * 1024)
        rx = WeightsReceiver(b)
        wait_until(lambda: pub.chunks.matched() == 1 and pub.announce.matched() == 1)
        pub.publish(sd, version=3)
        got: list = []
        wait_until(lambda: (r := rx.poll(0.05)) is not None and got.append(r) is None)
        (weights, version) = got[0]
        assert version == 3 and rx.lag(version) == 0
        assert all(torch.equal(weights[k], sd[k]) for k in sd)

        # A corrupted chunk (hash of the clean blob) must be refused, not loaded.
        blob = bytearray(st_save(sd))
        digest, n = hashlib.sha256(blob).hexdigest(), -(-len(blob) // 65536)
        blob[70000] ^= 0xFF
        chunk_t = typesys.msg_class(CHUNK_T)
        with caplog.at_level(logging.WARNING, logger="robot_rl.transport"):
            for i in range(n):
                data = np.frombuffer(bytes(blob[i * 65536 : (i + 1) * 65536]), np.uint8)
                pub.chunks.publish(chunk_t(task="reach", schema_version=typesys.SCHEMA_VERSION, version=4, index=i,
                                           num_chunks=n, total_bytes=len(blob), sha256=digest, data=data))  # fmt: skip
            wait_until(lambda: rx.poll(0.05) is None and rx.chunks.dropped["integrity"] == 1)
        assert rx.loaded_version == 3
        assert "sha256/size mismatch" in caplog.text
        pub.publish(sd, version=5)  # the receiver survives and takes the next good version
        wait_until(lambda: (r := rx.poll(0.05)) is not None and r[1] == 5)
        # A learner resumed from an earlier checkpoint counts from there: its weights replace the newer dead ones.
        resumed = {k: v + 1 for k, v in sd.items()}
        pub.publish(resumed, version=2)
        wait_until(lambda: (r := rx.poll(0.05)) is not None and got.append(r) is None and r[1] == 2)
        assert torch.equal(got[-1][0]["w"], resumed["w"]) and rx.lag(2) == 0


def test_foreign_malformed_oversized_dropped_receiver_survives(cfg, episode, caplog) -> None:
    good = episode(2)
    with make_transport(cfg(node_name="actor")) as a, make_transport(cfg(node_name="learner")) as b:
        rx = TransitionReceiver(b)
        pub = bulk.publisher(a, TRANSITIONS_TOPIC, BATCH_T, 64)
        wait_until(lambda: pub.matched() == 1)
        with caplog.at_level(logging.WARNING, logger="robot_rl.transport"):
            pub.publish(encode_batch(good, "other_task", "x", 0, 0))
            old = encode_batch(good, "reach", "x", 0, 0)
            old.schema_version = typesys.SCHEMA_VERSION + 1
            pub.publish(old)
            bad = encode_batch(good, "reach", "x", 0, 0)
            bad.arrays[0].shape = np.array([2, 5], dtype=np.uint32)  # 8 values cannot be (2, 5)
            pub.publish(bad)
            pub.publish(encode_batch(good, "reach", "x", 0, 0))
            got = recv_all(rx, 2)
        assert len(got) == 2 and rx.sub.dropped["refused"] == 3
        assert "task 'other_task'" in caplog.text and "schema_version" in caplog.text and "shape" in caplog.text

    with make_transport(cfg(backend="inproc", max_message_bytes=4096)) as t:
        rx = TransitionReceiver(t)
        pub = bulk.publisher(t, TRANSITIONS_TOPIC, BATCH_T, 64)
        wait_until(lambda: pub.matched() == 1)
        pub.publish_raw(b"\x00\x01\x00\x00" + b"\xff" * 40)  # claims a 4 GB string
        pub.publish(encode_batch(episode(3, cams=("wrist",)), "reach", "x", 0, 0))  # > 4096 B
        pub.publish(encode_batch(good, "reach", "x", 0, 0))
        assert len(recv_all(rx, 2)) == 2
        assert rx.sub.dropped["malformed"] == 1 and rx.sub.dropped["oversized"] == 1


def test_serialize_into_reused_buffer_matches_fresh_bytes(episode) -> None:
    """The publisher's scratch buffer is reused: a smaller message after a larger one must not carry stale
    bytes in rosbags' alignment gaps (they must be zeros, byte-for-byte what `serialize` gives)."""
    big = encode_batch(episode(4, cams=("wrist",)), "a_longer_task_name", "actor_with_long_id", 0, 0)
    small = encode_batch(episode(2), "reach", "x", 0, 0)
    buf = None
    for msg in (big, small, big):
        view = typesys.serialize_into(msg, BATCH_T, buf)
        buf = view.obj
        assert bytes(view) == typesys.serialize(msg, BATCH_T) and len(view) % 4 == 0


def test_decode_is_zero_copy_and_bit_exact(episode) -> None:
    ts = episode(6, cams=("wrist",))
    raw = typesys.serialize(encode_batch(ts, "reach", "a", 0, 0), BATCH_T)
    got = decode_batch(typesys.deserialize(raw, BATCH_T), "reach")
    frame = got[0].obs["wrist"]
    assert not frame.flags.writeable and np.shares_memory(frame, np.frombuffer(raw, np.uint8))
    assert got[0].next_obs["wrist"] is got[1].obs["wrist"]  # a shared frame stays one array
    for src, dst in zip(ts, got, strict=True):
        assert np.array_equal(src.obs["wrist"], dst.obs["wrist"]) and np.array_equal(src.action, dst.action)
        assert np.array_equal(src.next_obs["state"], dst.next_obs["state"]) and src.reward == dst.reward


def test_large_batches_lossless_and_ordered(cfg, episode) -> None:
    """256-transition state batches and 16-transition image batches (1.3 MB each), more than the reader queue
    holds at once, arrive complete and in order."""
    state, images = episode(2048), episode(64, cams=("wrist", "front"), hw=128)
    with make_transport(cfg(node_name="actor")) as a, make_transport(cfg(node_name="learner")) as b:
        rx = TransitionReceiver(b)
        for actor_id, ts, batch in (("s", state, 256), ("i", images, 16)):
            tx = TransitionSender(a, actor_id, batch_size=batch, queue_batches=4)
            wait_until(lambda tx=tx: tx.pub.matched() == 1)
            got: list = []
            for t in ts:
                tx.add_nowait(t)
                if tx.batch_full:
                    tx.flush()
                    got.extend(rx.poll())
            tx.flush()
            got += recv_all(rx, len(ts) - len(got))
            assert len(got) == len(ts) and rx.actors[actor_id].lost == 0
            assert all(np.array_equal(s.action, d.action) for s, d in zip(ts, got, strict=True))
            assert all(np.array_equal(s.obs[k], d.obs[k]) for s, d in zip(ts, got, strict=True) for k in s.obs)
