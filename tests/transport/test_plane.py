"""The Zenoh actor-learner plane (`transport/plane.py`): acknowledged transitions, weights by version, run ids, TLS."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from plain_ros import free_port, make_ca
from transport_util import make_episode, wait_until

from robot_rl.config import load_config
from robot_rl.errors import UserError
from robot_rl.loop.classifier import pack_verdicts, unpack_verdicts
from robot_rl.nodes.links import actor_link, with_run_id
from robot_rl.transport.base import BackpressureTimeout, PlaneConfig, TlsConfig
from robot_rl.transport.plane import (
    Episodes,
    Receiver,
    Sender,
    WeightsClient,
    WeightsServer,
    open_session,
    present,
    report_episode,
)


@pytest.fixture
def plane() -> PlaneConfig:
    return PlaneConfig(run_id="run-a", endpoint=f"tcp/127.0.0.1:{free_port()}", ack_timeout_s=2.0)


def drain(rx: Receiver, n: int, timeout_s: float = 20.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got += rx.poll(timeout_s=0.05)
    rx.ack()
    return got


def test_three_actors_every_transition_once_and_acknowledged(plane: PlaneConfig) -> None:
    learner = open_session(plane, "learner", "learner")
    rx = Receiver(learner.session, plane, "reach")
    senders = []
    for i in range(3):
        session = open_session(plane, "actor", f"a{i}")
        senders.append((Sender(session.session, plane, "reach", f"a{i}", batch_size=16), session))
    wait_until(lambda: present(learner.session, plane, "actor") == ["a0", "a1", "a2"], 10.0)
    episode = make_episode(100)
    threads = [threading.Thread(target=lambda s=s: [s.add(t) for t in episode]) for s, _ in senders]
    for t in threads:
        t.start()
    got = drain(rx, 300)
    for t in threads:
        t.join(10)
    assert len(got) == 300
    assert all(s.wait_acked(5.0) for s, _ in senders)
    assert {a: st.received for a, st in rx.actors.items()} == {"a0": 100, "a1": 100, "a2": 100}
    assert sum(st.lost for st in rx.actors.values()) == 0 and rx.repeats == 0
    np.testing.assert_array_equal(got[0].action, episode[0].action)
    assert all(s.acked == 7 and s.ack_latencies for s, _ in senders)  # 6 full batches + the episode's end
    for _, session in senders:
        session.close()
    learner.close()


def test_each_learner_rank_takes_its_own_shard_only(plane: PlaneConfig) -> None:
    """Learner ranks (loop/ranks.py): rank 1 dials the lead like an actor and takes shard 1's batches, the lead
    shard 0's; each actor is answered by the rank that took its data."""
    lead = open_session(plane, "learner", "learner")
    rank1 = open_session(plane, "rank", "rank1")
    rx0, rx1 = Receiver(lead.session, plane, "reach"), Receiver(rank1.session, plane, "reach", shard=1)
    actors = [open_session(plane, "actor", f"a{i}") for i in range(2)]
    senders = [Sender(a.session, plane, "reach", f"a{i}", batch_size=10, shard=i) for i, a in enumerate(actors)]
    wait_until(lambda: present(lead.session, plane, "actor") == ["a0", "a1"], 10.0)
    time.sleep(0.5)  # rank 1's subscription reaches the lead's routing before the first put
    for tx, n in zip(senders, (20, 30), strict=True):
        for t in make_episode(n):
            tx.add(t)
    assert len(drain(rx0, 20)) == 20 and len(drain(rx1, 30)) == 30
    assert all(tx.wait_acked(5.0) for tx in senders)
    assert {a: st.received for a, st in rx0.actors.items()} == {"a0": 20}
    assert {a: st.received for a, st in rx1.actors.items()} == {"a1": 30}
    for peer in (*actors, rank1, lead):
        peer.close()


def test_a_learner_that_stops_taking_data_blocks_its_actors_and_loses_nothing(plane: PlaneConfig) -> None:
    plane.credits = 2
    learner = open_session(plane, "learner", "learner")
    rx = Receiver(learner.session, plane, "reach")
    actor = open_session(plane, "actor", "a0")
    tx = Sender(actor.session, plane, "reach", "a0", batch_size=10)
    episode = make_episode(40)
    for t in episode[:20]:
        tx.add(t)  # two batches in flight: both credits taken
    for t in episode[20:30]:
        tx.add_nowait(t)
    with pytest.raises(BackpressureTimeout):
        tx.flush(timeout_s=0.5)  # the learner polls nothing: no credit frees up, the batch stays pending
    assert len(drain(rx, 20)) == 20  # taken and acknowledged: the credits come back
    tx.flush()
    for t in episode[30:]:
        tx.add(t)
    assert len(drain(rx, 20)) == 20 and tx.wait_acked(5.0)
    assert rx.actors["a0"].received == 40 and rx.actors["a0"].lost == 0
    actor.close()
    learner.close()


def test_an_unanswered_batch_is_sent_again_and_counted_once(plane: PlaneConfig) -> None:
    plane.ack_timeout_s = 0.5
    learner = open_session(plane, "learner", "learner")
    rx = Receiver(learner.session, plane, "reach")
    actor = open_session(plane, "actor", "a0")
    tx = Sender(actor.session, plane, "reach", "a0", batch_size=10)
    for t in make_episode(10):
        tx.add(t)
    assert len(drain_without_ack(rx)) == 10  # taken, but the learner stalls before answering
    rx._unacked.clear()  # the stalled learner's answer never goes out
    assert not tx.wait_acked(1.0) and tx.resent >= 1  # unanswered for 0.5 s: sent again
    assert drain(rx, 1, timeout_s=2.0) == []  # the resend is recognised: acknowledged, not added twice
    assert tx.wait_acked(5.0) and rx.repeats >= 1 and rx.actors["a0"].received == 10
    actor.close()
    learner.close()


def drain_without_ack(rx: Receiver) -> list:
    got: list = []
    deadline = time.monotonic() + 10.0
    while not got and time.monotonic() < deadline:
        got = [t for _, ts in rx.poll_batches(timeout_s=0.05) for t in ts]
    return got


def test_weights_are_pulled_by_version_and_verified(plane: PlaneConfig) -> None:
    learner = open_session(plane, "learner", "learner")
    server = WeightsServer(learner.session, plane)
    actor = open_session(plane, "actor", "a0")
    client = WeightsClient(actor.session, plane)
    time.sleep(0.3)
    assert client.poll() is None  # the learner has published nothing yet
    server.publish({"w": torch.ones(3)}, 1)
    server.publish({"w": torch.full((3,), 2.0)}, 2)
    wait_until(lambda: client.poll() is not None or client.loaded_version == 2, 5.0)
    assert client.loaded_version == 2 and server.fetches == 1  # only the newest version travelled
    assert client.poll() is None and client.lag(2) == 0
    actor.close()
    learner.close()


def test_an_actor_waiting_for_newer_weights_waits_instead_of_spinning(plane: PlaneConfig) -> None:
    """`poll(timeout_s)` with nothing new blocks up to the timeout (an actor whose learner is gone polls in a loop:
    returning at once spun it, 1.4 million 'learner silent' lines in a minute) and wakes when a version comes."""
    learner = open_session(plane, "learner", "learner")
    server = WeightsServer(learner.session, plane)
    server.publish({"w": torch.ones(3)}, 1)
    actor = open_session(plane, "actor", "a0")
    client = WeightsClient(actor.session, plane)
    wait_until(lambda: client.poll() is not None, 5.0)
    t0 = time.monotonic()
    assert client.poll(timeout_s=0.5) is None and time.monotonic() - t0 >= 0.45
    threading.Timer(0.2, server.publish, ({"w": torch.full((3,), 2.0)}, 2)).start()
    t0 = time.monotonic()
    got = client.poll(timeout_s=5.0)
    assert got is not None and got[1] == 2 and time.monotonic() - t0 < 2.0
    actor.close()
    learner.close()


def test_a_resumed_learners_older_weights_are_fetched(plane: PlaneConfig) -> None:
    """A learner resumed from its checkpoint announces fewer updates than its predecessor handed out: the actor
    must act on them (the learner waits for its steps), not hold out for a newer version."""
    learner = open_session(plane, "learner", "learner")
    actor = open_session(plane, "actor", "a0")
    client = WeightsClient(actor.session, plane)
    for version, value in ((5, 1.0), (3, 2.0)):  # the learner, then its resumed successor on the same endpoint
        if version == 3:
            learner = open_session(plane, "learner", "learner")
        server = WeightsServer(learner.session, plane)
        time.sleep(1.0)  # the actor's session (re)connects
        server.publish({"w": torch.full((3,), value)}, version)
        deadline, got = time.monotonic() + 10.0, None
        while got is None and time.monotonic() < deadline:
            got = client.poll()
            time.sleep(0.05)
        assert got is not None and got[1] == version and float(got[0]["w"][0]) == value
        learner.close()
    actor.close()


def test_two_runs_on_one_box_never_cross_feed(plane: PlaneConfig) -> None:
    learner = open_session(plane, "learner", "learner")
    rx = Receiver(learner.session, plane, "reach")
    other = PlaneConfig(run_id="run-b", endpoint=plane.endpoint, ack_timeout_s=0.5)
    actor = open_session(other, "actor", "b0")  # run b's actor dialled run a's learner by mistake
    tx = Sender(actor.session, other, "reach", "b0", batch_size=10)
    for t in make_episode(10):
        tx.add(t)
    time.sleep(1.0)
    assert rx.poll(timeout_s=0.2) == [] and rx.actors == {}
    assert present(learner.session, plane, "actor") == []  # its presence is run b's, too
    actor.close()
    learner.close()


def test_off_loopback_the_plane_needs_tls() -> None:
    with pytest.raises(ValueError, match="needs tls"):
        open_session(PlaneConfig(run_id="r", endpoint="tcp/10.0.0.5:7448"), "actor", "a0")
    with pytest.raises(ValueError, match="tls needs"):
        open_session(PlaneConfig(run_id="r", endpoint="tls/10.0.0.5:7448"), "actor", "a0")


def test_only_peers_with_the_runs_certificates_reach_its_learner(tmp_path: Path) -> None:
    endpoint = f"tls/127.0.0.1:{free_port()}"
    run = PlaneConfig(run_id="r", endpoint=endpoint, tls=TlsConfig(**make_ca(tmp_path, "run")), ack_timeout_s=1.0)
    stranger = PlaneConfig(
        run_id="r", endpoint=endpoint, tls=TlsConfig(**make_ca(tmp_path, "stranger")), ack_timeout_s=1.0
    )
    learner = open_session(run, "learner", "learner")
    rx = Receiver(learner.session, run, "reach")
    server = WeightsServer(learner.session, run)
    server.publish({"w": torch.ones(2)}, 1)
    ours = open_session(run, "actor", "a0")
    assert WeightsClient(ours.session, run).fetch(5.0) is not None
    tx = Sender(ours.session, run, "reach", "a0", batch_size=5)
    for t in make_episode(5):
        tx.add(t)
    assert len(drain(rx, 5)) == 5
    with pytest.raises(ConnectionError, match="TLS refused"):  # its certificate is not the run CA's
        open_session(stranger, "actor", "x0")
    assert present(learner.session, run, "actor") == ["a0"]
    for s in (ours, learner):
        s.close()


def test_the_run_id_is_the_run_dirs_name_and_an_actor_must_be_given_it() -> None:
    cfg = load_config(["distributed.plane=zenoh", "run_dir=/tmp/runs/pick.v2"])
    assert with_run_id(cfg).distributed.zenoh.run_id == "pick_v2"  # what the learner saves with its config
    with pytest.raises(UserError, match="distributed.zenoh.run_id"), actor_link(cfg, 0, "actor0-1"):
        pass
    with pytest.raises(UserError, match="run_dir"):
        with_run_id(load_config(["distributed.plane=zenoh"]))


def test_a_second_learner_on_a_taken_endpoint_is_one_line(plane: PlaneConfig) -> None:
    first = open_session(plane, "learner", "learner")
    with pytest.raises(ConnectionError, match="cannot listen .* another port"):
        open_session(dataclasses.replace(plane, run_id="run-b"), "learner", "learner")
    first.close()


def test_a_persons_verdicts_ride_with_the_episode_summary(plane: PlaneConfig) -> None:
    """The frames a person judged on an arm (`Actor.judged`) reach the learner's refits whole: camera bytes,
    state, and what they said of each."""
    learner = open_session(plane, "learner", "learner")
    inbox = Episodes(learner.session, plane)
    actor = open_session(plane, "actor", "a0")
    rng = np.random.default_rng(0)
    frames = [{"state": rng.normal(size=7).astype(np.float32), "front": rng.integers(0, 255, (3, 8, 8), np.uint8)}
              for _ in range(2)]  # fmt: skip
    summary = {"actor_id": "a0", "episode": 1, "success": False}
    verdicts = [(frames[0], False, True), (frames[1], True, False)]  # (frame, said success, was paid)
    report_episode(actor.session, plane, "a0", {**summary, "verdicts": pack_verdicts(verdicts)})
    report_episode(actor.session, plane, "a0", {**summary, "episode": 2})
    got: list = []
    wait_until(lambda: bool(got.extend(inbox.take())) or len(got) == 2, 5.0)
    assert [e["episode"] for e in got] == [1, 2] and "verdicts" not in got[1]
    (f0, said0, paid0), (f1, said1, paid1) = unpack_verdicts(got[0]["verdicts"])
    assert (said0, paid0, said1, paid1) == (False, True, True, False)
    for sent, heard in ((frames[0], f0), (frames[1], f1)):
        assert heard.keys() == sent.keys() and all(np.array_equal(heard[k], sent[k]) for k in sent)
        assert heard["front"].dtype == np.uint8
    actor.close()
    learner.close()
