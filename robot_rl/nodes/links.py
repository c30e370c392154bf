"""How the learner and its actors reach each other (`distributed.plane`): `ros2`, transitions over the bulk socket
and weights over DDS (`transport/channels.py`), or `zenoh` (`transport/plane.py`: acknowledged transitions, weights
pulled by version, a run id in every key, TLS off loopback). Either gives the nodes the same three things, so the
nodes never name a plane; ROS 2 stays inside each robot cell whichever carries the run's data."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from robot_rl.config import TrainConfig
from robot_rl.errors import UserError
from robot_rl.transport import (
    TransitionReceiver,
    TransitionSender,
    WeightsPublisher,
    WeightsReceiver,
    make_transport,
    typesys,
)
from robot_rl.transport.base import TransportConfig
from robot_rl.transport.channels import EPISODE_QOS, EPISODE_T, EPISODES_TOPIC

log = logging.getLogger("robot_rl.links")

# An episode's summary as an actor reports it: what the learner's training success rate counts.
EPISODE_FIELDS = ("actor_id", "episode", "length", "episode_return", "success", "interventions", "policy_version")


@dataclass
class LearnerLink:
    transitions: Any  # poll_batches(timeout_s) -> [(actor id, transitions)], .actors, finish()
    weights: Any  # publish(state_dict, version)
    episodes: Callable[[], list[dict]]  # the summaries reported since the last call (EPISODE_FIELDS)


@dataclass
class ActorLink:
    sender: Any  # Batching (add_nowait, flush, ...), policy_version, learner_finished, connected(), full()
    weights: Any  # poll(timeout_s) -> (state_dict, version) | None, reannounced
    episode: Callable[[dict], None]  # reports one summary (EPISODE_FIELDS; `verdicts` on Zenoh)


def node_transport_config(cfg: TrainConfig, node_name: str) -> TransportConfig:
    """Messages carry the task name: an actor of another task is refused, not trained on."""
    return dataclasses.replace(cfg.distributed.transport, task=cfg.env.task, node_name=node_name)


def learner_link(cfg: TrainConfig, rank: int = 0) -> AbstractContextManager[LearnerLink]:
    """Rank 0 is the run's learner; another learner rank (loop/ranks.py) takes its shard's transitions only."""
    if cfg.distributed.plane == "zenoh":
        return _zenoh_learner(cfg) if rank == 0 else _zenoh_rank(cfg, rank)
    return _ros2_learner(cfg)


def actor_link(cfg: TrainConfig, index: int, actor_id: str) -> AbstractContextManager[ActorLink]:
    if cfg.distributed.plane == "zenoh":
        return _zenoh_actor(cfg, index, actor_id)
    return _ros2_actor(cfg, index, actor_id)


@contextmanager
def _ros2_learner(cfg: TrainConfig) -> Iterator[LearnerLink]:
    with make_transport(node_transport_config(cfg, "learner")) as transport:
        sub = transport.subscription(EPISODES_TOPIC, EPISODE_T, EPISODE_QOS)

        def episodes() -> list[dict]:
            return [{k: getattr(m, k) for k in EPISODE_FIELDS} for m in sub.take()]

        yield LearnerLink(TransitionReceiver(transport), WeightsPublisher(transport), episodes)


@contextmanager
def _ros2_actor(cfg: TrainConfig, index: int, actor_id: str) -> Iterator[ActorLink]:
    dist = cfg.distributed
    with make_transport(node_transport_config(cfg, f"actor{index}")) as transport:
        pub = transport.publisher(EPISODES_TOPIC, EPISODE_T, EPISODE_QOS)
        t = transport.cfg
        msg = typesys.typestore(t.distro).types[EPISODE_T]

        def episode(summary: dict) -> None:
            pub.publish(msg(header=typesys.header_now(t.distro), task=t.task, schema_version=typesys.SCHEMA_VERSION,
                            **{k: summary[k] for k in EPISODE_FIELDS}))  # fmt: skip

        yield ActorLink(TransitionSender(transport, actor_id, dist.batch_size, dist.queue_batches),
                        WeightsReceiver(transport), episode)  # fmt: skip


@contextmanager
def _zenoh_learner(cfg: TrainConfig) -> Iterator[LearnerLink]:
    from robot_rl.transport import plane

    pc = cfg.distributed.zenoh
    try:
        peer = plane.open_session(pc, "learner", "learner")
    except ConnectionError as e:  # the endpoint is taken: a second run on this box needs its own port
        raise UserError(str(e)) from None
    print(f"learner on {pc.endpoint}, run id {pc.run_id}: actors join with distributed.plane=zenoh "
          f"distributed.zenoh.endpoint={pc.endpoint} distributed.zenoh.run_id={pc.run_id}", flush=True)  # fmt: skip
    try:
        rx = plane.Receiver(peer.session, pc, cfg.env.task)
        inbox = plane.Episodes(peer.session, pc)
        yield LearnerLink(rx, plane.WeightsServer(peer.session, pc), inbox.take)
        rx.close()
    finally:
        peer.close()


@contextmanager
def _zenoh_rank(cfg: TrainConfig, rank: int) -> Iterator[LearnerLink]:
    from robot_rl.transport import plane

    pc = cfg.distributed.zenoh
    peer = dial(lambda: plane.open_session(pc, "rank", f"rank{rank}"), pc.endpoint, cfg.distributed.learner_timeout_s)
    try:
        rx = plane.Receiver(peer.session, pc, cfg.env.task, shard=rank)
        yield LearnerLink(rx, None, list)
        rx.close()
    finally:
        peer.close()


@contextmanager
def _zenoh_actor(cfg: TrainConfig, index: int, actor_id: str) -> Iterator[ActorLink]:
    from robot_rl.transport import plane

    dist, pc = cfg.distributed, cfg.distributed.zenoh
    if not pc.run_id:
        raise UserError("distributed.plane=zenoh: an actor needs distributed.zenoh.run_id, the learner's (it prints"
                        " it at start; `robot-rl launch` passes it)")  # fmt: skip
    peer = dial(lambda: plane.open_session(pc, "actor", actor_id), pc.endpoint, dist.learner_timeout_s)
    try:
        sender = plane.Sender(peer.session, pc, cfg.env.task, actor_id, dist.batch_size, shard=index % dist.learners)
        yield ActorLink(sender, plane.WeightsClient(peer.session, pc),
                        lambda summary: plane.report_episode(peer.session, pc, actor_id, summary))  # fmt: skip
    finally:
        peer.close()


def with_run_id(cfg: TrainConfig) -> TrainConfig:
    """On the zenoh plane every key carries the run id: the run dir's name unless given, saved in the run's config
    (a resumed learner keeps it)."""
    z = cfg.distributed.zenoh
    if cfg.distributed.plane != "zenoh" or z.run_id:
        return cfg
    if not (cfg.resume or cfg.run_dir):
        raise UserError("distributed.plane=zenoh: give run_dir= (its name is the run id) or distributed.zenoh.run_id")
    from robot_rl.transport.plane import run_id_of

    z = dataclasses.replace(z, run_id=run_id_of(cfg.resume or cfg.run_dir))
    return dataclasses.replace(cfg, distributed=dataclasses.replace(cfg.distributed, zenoh=z))


def dial(open_session: Callable[[], Any], endpoint: str, every_s: float) -> Any:
    """An actor started before its learner listens (launch starts both at once): it dials again until one does,
    saying so every half minute."""
    said = 0.0
    while True:
        try:
            return open_session()
        except ConnectionError as e:
            if time.monotonic() - said > 30.0:
                log.warning("waiting for a learner at %s (%s)", endpoint, e)
                said = time.monotonic()
            time.sleep(min(every_s, 1.0))
