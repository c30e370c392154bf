"""The bulk channel's own guarantees over real sockets (endpoint announcements in-process): credit flow control,
truncated frames, learner restarts, foreign endpoints."""

from __future__ import annotations

import logging
import socket
import struct
import time

import pytest
from transport_util import wait_until

from robot_rl.transport import BackpressureTimeout, bulk, make_transport, typesys

TOPIC, TYPE = "frames", "std_msgs/msg/String"


def frame(text: str) -> bytes:
    return typesys.serialize(typesys.msg_class(TYPE)(data=text), TYPE)


def texts(sub, n: int) -> list[str]:
    got: list[str] = []
    wait_until(lambda: got.extend(m.data for m in sub.take()) or len(got) >= n)
    return got


def served_and_gone(learner_cfg, pub) -> None:
    """A learner that takes one frame from `pub`, then closes."""
    with make_transport(learner_cfg) as first:
        sub = bulk.subscription(first, TOPIC, TYPE)
        wait_until(lambda: pub.matched() == 1)
        pub.publish_raw(frame("to the first"))
        assert texts(sub, 1) == ["to the first"]


def test_credit_window_blocks_the_actor_until_the_learner_takes(cfg) -> None:
    with (
        make_transport(cfg(backend="inproc", domain_id=901)) as learner,
        make_transport(cfg(backend="inproc", domain_id=901)) as actor,
    ):
        sub = bulk.subscription(learner, TOPIC, TYPE)
        pub = bulk.publisher(actor, TOPIC, TYPE, window=2)
        pub.max_blocking_s = 0.3
        wait_until(lambda: pub.matched() == 1)
        pub.publish_raw(frame("a"))
        pub.publish_raw(frame("b"))
        t0 = time.monotonic()
        with pytest.raises(BackpressureTimeout, match="took no data"):
            pub.publish_raw(frame("c"))  # the learner has not taken a or b yet
        assert time.monotonic() - t0 >= 0.3 and pub.in_flight == 2
        assert texts(sub, 2) == ["a", "b"]  # taking them pays the credits back
        pub.publish_raw(frame("c"))
        assert texts(sub, 1) == ["c"] and pub.wait_drained(5.0)


def test_partial_frame_from_a_dying_actor_is_dropped_others_survive(cfg, caplog) -> None:
    with (
        make_transport(cfg(backend="inproc", domain_id=902)) as learner,
        make_transport(cfg(backend="inproc", domain_id=902)) as actor,
    ):
        sub = bulk.subscription(learner, TOPIC, TYPE)
        pub = bulk.publisher(actor, TOPIC, TYPE, window=4)
        wait_until(lambda: pub.matched() == 1)
        host, port = sub.uri.removeprefix("tcp://").rsplit(":", 1)
        with caplog.at_level(logging.WARNING, logger="robot_rl.transport"):
            with socket.create_connection((host, int(port))) as dying:
                whole = frame("whole")
                dying.sendall(struct.pack("<I", len(whole)) + whole + struct.pack("<I", 1000) + b"x" * 10)
            pub.publish_raw(frame("other actor"))
            assert sorted(texts(sub, 2)) == ["other actor", "whole"]
            wait_until(lambda: sub.take() == [] and sub.dropped["truncated"] == 1)
        assert "middle of a frame" in caplog.text


def test_actor_follows_a_restarted_learner_to_its_new_endpoint(cfg) -> None:
    with make_transport(cfg(backend="inproc", domain_id=903)) as actor:
        pub = bulk.publisher(actor, TOPIC, TYPE, window=4)
        served_and_gone(cfg(backend="inproc", domain_id=903), pub)
        with pytest.raises(BackpressureTimeout, match="connection lost"):
            for _ in range(100):  # the first write after the peer closed may still be accepted locally
                pub.publish_raw(frame("lost"))
                time.sleep(0.01)
        assert pub.matched() == 0
        with make_transport(cfg(backend="inproc", domain_id=903)) as second:
            sub = bulk.subscription(second, TOPIC, TYPE)
            wait_until(lambda: pub.matched() == 1)
            pub.publish_raw(frame("to the second"))
            assert texts(sub, 1) == ["to the second"]


def test_a_frame_after_the_learner_died_goes_to_its_successor(cfg) -> None:
    """Not into the dead learner's closed stream, which takes one write locally and loses it: a resumed learner
    waiting for the steps of the weights it re-announced would wait for that frame forever (CI once hung so)."""
    with make_transport(cfg(backend="inproc", domain_id=908)) as actor:
        pub = bulk.publisher(actor, TOPIC, TYPE, window=4)
        served_and_gone(cfg(backend="inproc", domain_id=908), pub)
        with make_transport(cfg(backend="inproc", domain_id=908)) as second:
            sub = bulk.subscription(second, TOPIC, TYPE)
            time.sleep(0.2)  # the first learner's close has reached the actor's socket
            pub.publish_raw(frame("to the second"))
            assert texts(sub, 1) == ["to the second"]


def test_endpoint_of_another_task_is_refused(cfg) -> None:
    with (
        make_transport(cfg(backend="inproc", domain_id=904, task="other")) as learner,
        make_transport(cfg(backend="inproc", domain_id=904)) as actor,
    ):
        bulk.subscription(learner, TOPIC, TYPE)
        pub = bulk.publisher(actor, TOPIC, TYPE, window=4)
        wait_until(lambda: pub.matched() == 0 and pub._endpoints.dropped["refused"] == 1)
        with pytest.raises(BackpressureTimeout, match="no learner"):
            pub.publish_raw(frame("x"))


def test_unannounceable_bulk_address_is_a_clear_error(cfg) -> None:
    with make_transport(cfg(backend="inproc", domain_id=905, bulk_address="0.0.0.0")) as learner:
        with pytest.raises(ValueError, match="address they can reach"):
            bulk.subscription(learner, TOPIC, TYPE)


def test_a_finished_learner_is_not_a_lost_connection(cfg, caplog) -> None:
    """The learner's end-of-run announcement reaches actors before its sockets close: they stop without a warning
    and without trying to reconnect; a learner that just dies is still reported as lost."""
    with (
        make_transport(cfg(backend="inproc", domain_id=907)) as learner,
        make_transport(cfg(backend="inproc", domain_id=907)) as actor,
    ):
        sub = bulk.subscription(learner, TOPIC, TYPE)
        pub = bulk.publisher(actor, TOPIC, TYPE, window=4)
        wait_until(lambda: pub.matched() == 1)
        pub.publish_raw(frame("a"))
        assert texts(sub, 1) == ["a"]
        sub.finish()
        sub.close()
        with caplog.at_level(logging.WARNING, logger="robot_rl.transport"):
            with pytest.raises(BackpressureTimeout, match="finished the run"):
                for _ in range(100):  # the first sends may still land in the socket buffer
                    pub.publish_raw(frame("late"))
                    time.sleep(0.01)
        assert pub.learner_finished and pub.matched() == 0
        assert not [r for r in caplog.records if "disconnected" in r.getMessage()]
